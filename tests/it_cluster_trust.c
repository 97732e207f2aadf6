/*
 * it_cluster_trust.c - what a writer of the directory (Redis) who does not know the cluster
 * secret can still do, with real ferryd nodes and a real Redis: delete events it wrote, or a
 * node's genuine one replayed, delete nothing; object records it inflated or switched to
 * other content are not believed (no room is taken for them, no bytes are refused by them),
 * and the next honest publication replaces them; keys it gave the wrong type are repaired
 * and the nodes keep serving.
 */
#include "harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

enum { A, B, C };
#define BIT(i) (1u << (i))
#define ALL3 (BIT(A) | BIT(B) | BIT(C))

/* Copies the newest event of the stream as a new one, with its id field set to ARGV[1] when
 * that is not empty: a replay, or a forgery that reuses a genuine event's signature. */
static const char replay_lua[] =
    "local e = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1][2]\n"
    "for i = 1, #e, 2 do\n"
    "  if e[i] == 'id' and ARGV[1] ~= '' then e[i + 1] = ARGV[1] end\n"
    "end\n"
    "return redis.call('XADD', KEYS[1], '*', unpack(e))\n";

/* Copies the newest entry of stream KEYS[1] into stream KEYS[2], fields as they are: saves a
 * genuine event aside, or puts it back. */
static const char copy_lua[] =
    "local e = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1][2]\n"
    "return redis.call('XADD', KEYS[2], '*', unpack(e))\n";

/* Writes the cluster secret into the fixture's Redis directory (removed with it): path. */
static void secret_file(struct h_cluster *cl, char *path, size_t size)
{
    snprintf(path, size, "%s/secret", cl->redis.dir);
    h_write_file(path, "correct horse battery staple\n");
}

/* Starts n nodes sharing a secret, node A with a spill directory kept across its restarts
 * (--persist-on-exit), waits until each lists all, and connects c[i] to each. */
static void start_trusted(struct h_cluster *cl, int n, ferry_client **c)
{
    static char secret[256], spill[256];
    secret_file(cl, secret, sizeof(secret));
    snprintf(spill, sizeof(spill), "%s/spill-a", cl->redis.dir);
    const char *const with_spill[] = {"--secret-file",     secret, "--spill-dir", spill,
                                      "--persist-on-exit", NULL};
    const char *const plain[] = {"--secret-file", secret, NULL};
    h_node_start(cl, A, "64M", with_spill);
    h_cluster_start(cl, n - 1, "64M", plain);
    for (int i = 0; i < n; i++)
        c[i] = h_node_connect(cl, i);
}

/* Restarts node i other than A (its objects are lost). */
static void restart_plain(struct h_cluster *cl, int i)
{
    char secret[256];
    h_daemon_stop(&cl->node[i].d);
    snprintf(secret, sizeof(secret), "%s/secret", cl->redis.dir);
    h_node_start(cl, i, "64M", (const char *const[]){"--secret-file", secret, NULL});
}

/* Restarts node A (a clean stop: its objects stay in its spill directory). */
static void restart_a(struct h_cluster *cl)
{
    h_daemon_stop(&cl->node[A].d);
    char secret[256], spill[256];
    snprintf(secret, sizeof(secret), "%s/secret", cl->redis.dir);
    snprintf(spill, sizeof(spill), "%s/spill-a", cl->redis.dir);
    h_node_start(cl, A, "64M",
                 (const char *const[]){"--secret-file", secret, "--spill-dir", spill,
                                       "--persist-on-exit", NULL});
}

static void fetch_one(ferry_client *c, const ferry_id *id)
{
    int status = 1;
    H_OK(ferry_fetch(c, id, 1, 10000, &status));
    H_RC(status, FERRY_OK);
}

/* Puts id on A (meta_size bytes of metadata: other sizes, other content) and has B and C
 * fetch it: all three hold it. */
static void put_everywhere(struct h_cluster *cl, ferry_client *const *c, const ferry_id *id,
                           uint64_t meta_size)
{
    H_OK(h_put_direct(c[A], id, 100000, meta_size));
    fetch_one(c[B], id);
    fetch_one(c[C], id);
    h_assert_where(c[A], cl, id, ALL3, H_CLUSTER_MS);
}

/* Deletes id cluster-wide from A and waits until B and C have heard it (deletes_heard). */
static void delete_heard_everywhere(ferry_client *const *c, const ferry_id *id)
{
    H_OK(ferry_delete_cluster(c[A], id));
    for (int i = B; i <= C; i++)
        assert_true(H_WAIT_STAT_MIN(c[i], deletes_heard, 1, H_EVENT_MS) >= 1);
}

/* Waits until every node counted at least want of the counter name (H_EVENT_MS each). */
static void wait_all(ferry_client *const *c, int n, const char *name, uint64_t want)
{
    for (int i = 0; i < n; i++) {
        uint64_t got = h_wait_stat_min(c[i], name, want, H_EVENT_MS);
        if (got < want)
            fail_msg("node %d: %s is %llu, not at least %llu", i, name, (unsigned long long)got,
                     (unsigned long long)want);
    }
}

static void assert_held_by_all(ferry_client *const *c, const ferry_id *id, const char *after)
{
    for (int i = 0; i < 3; i++)
        if (!h_contains(c[i], id))
            fail_msg("node %d dropped the object after %s", i, after);
}

/* A delete event written by hand (no signature), and one that carries a genuine event's
 * signature for another id, delete nothing on any node; A's copy, in its spill directory,
 * is there again after a restart. A genuine delete still deletes everywhere. */
H_CLUSTER_TEST(forged_delete_events_delete_nothing)
{
    ferry_client *c[3];
    start_trusted(cl, 3, c);
    ferry_id id = h_id("kept-against-forgeries"), other = h_id("deleted-for-real");
    char hex[2 * FERRY_ID_SIZE + 1];
    ferry_id_format(&id, hex);
    put_everywhere(cl, c, &id, 10);
    put_everywhere(cl, c, &other, 10);

    H_OK(ferry_delete_cluster(c[A], &other)); /* genuine: signed */
    for (int i = B; i <= C; i++)
        assert_true(H_WAIT_STAT_MIN(c[i], deletes_heard, 1, H_EVENT_MS) >= 1);
    for (int i = 0; i < 3; i++)
        assert_false(h_contains(c[i], &other));

    h_redis_cmd(&cl->redis, (const char *[]){"XADD", "ferry:events", "*", "type", "del", "id", hex,
                                             "node", "nobody", "inc", "1", NULL});
    h_redis_cmd(&cl->redis, (const char *[]){"EVAL", replay_lua, "1", "ferry:events", hex, NULL});
    h_sleep_ms(500); /* five reads of the stream */
    assert_held_by_all(c, &id, "forged delete events");
    wait_all(c, 3, "unsigned_events", 2);

    ferry_disconnect(c[A]);
    restart_a(cl);
    c[A] = h_node_connect(cl, A);
    assert_true(h_stat(c[A], "spill_recovered_objects") >= 1);
    assert_true(h_contains(c[A], &id));
    h_assert_where(c[B], cl, &id, ALL3, H_CLUSTER_MS);
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* A genuine delete event copied into the stream again after the id was put anew deletes
 * nothing: the nodes that heard it once refuse it (stale_events). */
H_CLUSTER_TEST(replayed_delete_event_spares_a_later_put)
{
    ferry_client *c[3];
    start_trusted(cl, 3, c);
    ferry_id id = h_id("put-again");
    put_everywhere(cl, c, &id, 10);
    delete_heard_everywhere(c, &id);
    put_everywhere(cl, c, &id, 10);

    h_redis_cmd(&cl->redis, (const char *[]){"EVAL", replay_lua, "1", "ferry:events", "", NULL});
    h_sleep_ms(500);
    assert_held_by_all(c, &id, "a replayed delete event");
    for (int i = B; i <= C; i++)
        assert_true(H_WAIT_STAT_MIN(c[i], stale_events, 1, H_EVENT_MS) >= 1);
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* Rewrites an object's record with ARGV[1] holder fields of nodes nobody runs before its real
 * ones (small hashes keep their order), its size, digest and signature untouched. */
static const char crowd_lua[] =
    "local r = redis.call('HGETALL', KEYS[1])\n"
    "redis.call('DEL', KEYS[1])\n"
    "local real = {}\n"
    "for i = 1, #r, 2 do\n"
    "  if string.sub(r[i], 1, 2) == 'h:' then real[#real + 1] = {r[i], r[i + 1]}\n"
    "  else redis.call('HSET', KEYS[1], r[i], r[i + 1]) end\n"
    "end\n"
    "for j = 1, tonumber(ARGV[1]) do redis.call('HSET', KEYS[1], 'h:nobody-' .. j, '1') end\n"
    "for _, f in ipairs(real) do redis.call('HSET', KEYS[1], f[1], f[2]) end\n"
    "return #real\n";

/* A genuine record given 64 holder fields of nodes nobody runs ahead of its real holder: a
 * lookup asks the nodes it knows first, so C (which never looked the id up) still finds A. A
 * lookup took the first 64 fields it met, and the fetch failed ("nobody-1: gone ..."). */
H_CLUSTER_TEST(planted_holders_do_not_crowd_out_the_real_one)
{
    ferry_client *c[3];
    start_trusted(cl, 3, c);
    ferry_id id = h_id("crowded");
    char key[64] = "ferry:obj:";
    ferry_id_format(&id, key + strlen(key));
    H_OK(h_put_direct(c[A], &id, 100000, 10));
    h_assert_where(c[B], cl, &id, BIT(A), H_CLUSTER_MS);
    h_redis_cmd(&cl->redis, (const char *[]){"EVAL", crowd_lua, "1", key, "64", NULL});
    fetch_one(c[C], &id);
    h_assert_same_object(c[A], c[C], &id);
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* A fetch of id on c by a record written without the secret: its status, the message in
 * why. */
static int fetch_by_forged_record(ferry_client *c, const ferry_id *id, char *why, size_t size)
{
    int status = 1, rc = ferry_fetch(c, id, 1, 1500, &status);
    snprintf(why, size, "%s", ferry_errmsg());
    return rc;
}

/* It must not have started: it ended saying the record is not signed, and was counted. */
static void assert_record_refused(ferry_client *c, const ferry_id *id, int rc, const char *why,
                                  uint64_t counted_before)
{
    if (rc == FERRY_OK || !strstr(why, "not signed"))
        fail_msg("fetch by a record written without the secret: %d (%s)", rc, why);
    assert_false(h_contains(c, id));
    assert_true(h_stat(c, "unsigned_records") > counted_before);
}

/* A record whose size was inflated (to most of B's arena) is not believed: B's fetch does not
 * start, and none of the 20 objects B caches is evicted for it. */
H_CLUSTER_TEST(inflated_record_evicts_nothing)
{
    enum { N = 20 };
    ferry_client *c[2];
    start_trusted(cl, 2, c);
    ferry_client *a = c[A], *b = c[B];
    ferry_id id = h_id("inflated"), cached[N];
    char key[64] = "ferry:obj:";
    H_OK(h_put_direct(a, &id, 1000, 0));
    h_assert_where(a, cl, &id, BIT(A), H_CLUSTER_MS); /* published; B has not looked it up */
    for (int i = 0; i < N; i++) {
        cached[i] = h_idf("cached-%d", i);
        H_OK(h_put_direct(b, &cached[i], 2 << 20, 0));
    }
    ferry_stats b0 = h_stats(b);
    uint64_t refused = h_stat(b, "unsigned_records");
    char why[512];
    ferry_id_format(&id, key + strlen(key));
    h_redis_cmd(&cl->redis, (const char *[]){"HSET", key, "size", "60000000", NULL});
    int rc = fetch_by_forged_record(b, &id, why, sizeof(why));
    ferry_stats b1 = h_stats(b);
    assert_int_equal(b1.evicted_objects, b0.evicted_objects);
    assert_int_equal(b1.evicted_bytes, b0.evicted_bytes);
    for (int i = 0; i < N; i++)
        assert_true(h_contains(b, &cached[i]));
    assert_record_refused(b, &id, rc, why, refused);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A record switched to another object's content (its size, digest and signature) is refused
 * by fetchers; the next honest publication of the id (C seals it too) replaces it, and then
 * the fetch succeeds. */
H_CLUSTER_TEST(switched_record_is_refused_then_repaired)
{
    ferry_client *c[3];
    start_trusted(cl, 3, c);
    ferry_id id = h_id("switched"), other = h_id("switched-to");
    char key[64] = "ferry:obj:", key2[64] = "ferry:obj:";
    H_OK(h_put_direct(c[A], &id, 1000, 0));
    H_OK(h_put_direct(c[A], &other, 2000, 0));
    h_assert_where(c[B], cl, &other, BIT(A), H_CLUSTER_MS);
    ferry_id_format(&id, key + strlen(key));
    ferry_id_format(&other, key2 + strlen(key2));
    h_redis_cmd(&cl->redis, (const char *[]){"EVAL",
                                             "for _, f in ipairs({'size', 'digest', 'sig'}) do\n"
                                             "  local v = redis.call('HGET', KEYS[2], f)\n"
                                             "  if v then redis.call('HSET', KEYS[1], f, v) end\n"
                                             "end\n"
                                             "return 0\n",
                                             "2", key, key2, NULL});
    uint64_t refused = h_stat(c[B], "unsigned_records");
    char why[512];
    int rc = fetch_by_forged_record(c[B], &id, why, sizeof(why));
    assert_record_refused(c[B], &id, rc, why, refused);

    H_OK(h_put_direct(c[C], &id, 1000, 0));
    assert_true(h_wait_stat_min(c[C], "records_repaired", 1, H_EVENT_MS) >= 1);
    fetch_one(c[B], &id);
    h_assert_same_object(c[C], c[B], &id);
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* A location not signed with our secret is refused (counted) and its id looked up: one that
 * names a real node at an address of the writer's choosing, and the real one with its
 * signature changed. The genuine one is taken, and asks no directory. */
H_CLUSTER_TEST(a_forged_location_is_refused_and_the_directory_asked)
{
    ferry_client *c[2];
    char loc[FERRY_LOCATION_MAX], forged[FERRY_LOCATION_MAX];
    const char *lies[2] = {forged, "ferry1;node-a;1;127.0.0.1:1;tcp=127.0.0.1:1"};
    start_trusted(cl, 2, c);
    H_OK(ferry_location(c[A], loc));
    char *sig = strchr(loc, '#');
    assert_non_null(sig);
    snprintf(forged, sizeof(forged), "%s", loc);
    forged[strlen(forged) - 1] = forged[strlen(forged) - 1] == '0' ? '1' : '0';
    for (int i = 0; i < 3; i++) {
        char name[32];
        int status = 1;
        snprintf(name, sizeof(name), "located-%d", i);
        ferry_id id = h_id(name);
        H_OK(h_put_direct(c[A], &id, 20000, 2));
        h_assert_where(c[B], cl, &id, BIT(A), H_CLUSTER_MS);
        uint64_t lookups = h_stat(c[B], "directory_lookups");
        const char *at[] = {i < 2 ? lies[i] : loc};
        H_OK(ferry_fetch_at(c[B], &id, at, 1, 10000, &status));
        H_OK(status);
        h_assert_object(c[B], &id, 20000, 2);
        assert_int_equal(h_stat(c[B], "fetch_hints_refused"), i < 2 ? i + 1 : 2);
        assert_int_equal(h_stat(c[B], "fetch_hints"), i < 2 ? 0 : 1);
        if (i == 2)
            assert_int_equal(h_stat(c[B], "directory_lookups"), lookups);
    }
    for (int i = 0; i < 2; i++)
        ferry_disconnect(c[i]);
}

/* A ferryd started with the id of a live node (B, with the secret) still stops with status 78,
 * naming that node: B's entry carries a heartbeat signed since the newcomer began. B keeps its
 * entry. */
H_CLUSTER_TEST(a_live_node_id_is_still_refused_with_signed_heartbeats)
{
    ferry_client *c[2];
    start_trusted(cl, 2, c);
    char secret[256], listen[32];
    snprintf(secret, sizeof(secret), "%s/secret", cl->redis.dir);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", h_free_port());
    struct ferryd dup;
    h_daemon_init(&dup);
    const char *const argv[] = {"--node-id", "node-b",        "--listen", listen, "--directory",
                                cl->url,     "--secret-file", secret,     NULL};
    pid_t pid = h_daemon_spawn(&dup, dup.log, "64M", argv);
    int status = 0;
    if (!h_wait_exit(pid, H_CLUSTER_MS, &status)) {
        kill(pid, SIGKILL);
        (void)waitpid(pid, NULL, 0);
        h_print_file(dup.log);
        h_daemon_cleanup(&dup);
        fail_msg("a second node-b did not stop within %d ms", H_CLUSTER_MS);
    }
    int refused = WIFEXITED(status) && WEXITSTATUS(status) == 78 &&
                  h_file_contains(dup.log, "node id node-b is in use by a live node");
    if (!refused)
        h_print_file(dup.log);
    h_daemon_cleanup(&dup);
    if (!refused)
        fail_msg("a second node-b ended with status 0x%x, not 78 naming the live node", status);
    h_assert_nodes(c[A], cl, BIT(A) | BIT(B), H_CLUSTER_MS);
    for (int i = 0; i < 2; i++)
        ferry_disconnect(c[i]);
}

/* ---- keys of the wrong type ---- */

/* ferry:held:node-b made a string while B is down keeps B out no more: started again, B
 * cleans up, registers, publishes (its index a set again), and says which key it replaced. */
H_CLUSTER_TEST(held_index_of_the_wrong_type_is_replaced)
{
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A);
    h_daemon_stop(&cl->node[B].d);
    h_redis_cmd(&cl->redis, (const char *[]){"SET", "ferry:held:node-b", "junk", NULL});
    h_node_start(cl, B, "64M", NULL);
    h_assert_nodes(a, cl, BIT(A) | BIT(B), H_CLUSTER_MS);
    ferry_client *b = h_node_connect(cl, B);
    ferry_id id = h_id("indexed-again");
    H_OK(h_put_direct(b, &id, 1000, 0));
    h_assert_where(a, cl, &id, BIT(B), H_CLUSTER_MS);
    assert_true(h_stat(b, "directory_bad_keys") >= 1);
    assert_true(h_file_contains(cl->node[B].d.log, "ferry:held:node-b"));
    fetch_one(a, &id);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* ferry:events made a string: a cluster-wide delete still works (the stream is made again)
 * and reaches the other node, which said which key was of the wrong type. */
H_CLUSTER_TEST(events_of_the_wrong_type_are_replaced)
{
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id id = h_id("deleted-through-a-repaired-stream");
    H_OK(h_put_direct(a, &id, 1000, 0));
    fetch_one(b, &id);
    h_redis_cmd(&cl->redis, (const char *[]){"SET", "ferry:events", "junk", NULL});
    h_sleep_ms(300); /* the readers meet it */
    H_OK(ferry_delete_cluster(a, &id));
    assert_true(H_WAIT_STAT_MIN(b, deletes_heard, 1, H_EVENT_MS) >= 1);
    assert_false(h_contains(b, &id));
    assert_true(h_stat(a, "directory_bad_keys") + h_stat(b, "directory_bad_keys") >= 1);
    assert_true(h_file_contains(cl->node[A].d.log, "ferry:events") ||
                h_file_contains(cl->node[B].d.log, "ferry:events"));
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* An entry whose id is far in the future, then the stream deleted: the nodes' read cursors
 * passed that id, yet a genuine delete made in the stream made anew reaches them. */
H_CLUSTER_TEST(events_cursor_in_the_future_is_not_followed)
{
    ferry_client *c[3];
    start_trusted(cl, 3, c);
    ferry_id id = h_id("deleted-after-the-junk");
    put_everywhere(cl, c, &id, 10);

    h_redis_cmd(&cl->redis,
                (const char *[]){"XADD", "ferry:events", "9999999999999-0", "type", "junk", NULL});
    h_sleep_ms(500); /* five reads of the stream: the cursors are past the junk */
    h_redis_cmd(&cl->redis, (const char *[]){"DEL", "ferry:events", NULL});
    delete_heard_everywhere(c, &id);
    for (int i = B; i <= C; i++)
        assert_false(h_contains(c[i], &id));
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* A genuine delete event saved aside and put back after the id was put again with other
 * content spares that content everywhere, even on a node whose run began after the delete
 * (which has not taken the event before, and is within the clocks' skew): the event names the
 * put and the content it deletes. */
H_CLUSTER_TEST(withheld_delete_replayed_spares_other_content)
{
    ferry_client *c[3];
    start_trusted(cl, 3, c);
    ferry_id id = h_id("deleted-then-other-content");
    put_everywhere(cl, c, &id, 10);
    delete_heard_everywhere(c, &id);
    h_redis_cmd(&cl->redis,
                (const char *[]){"EVAL", copy_lua, "2", "ferry:events", "withheld", NULL});
    ferry_disconnect(c[C]);
    restart_plain(cl, C);
    c[C] = h_node_connect(cl, C);
    put_everywhere(cl, c, &id, 20);

    h_redis_cmd(&cl->redis,
                (const char *[]){"EVAL", copy_lua, "2", "withheld", "ferry:events", NULL});
    assert_true(H_WAIT_STAT_MIN(c[C], deletes_heard, 1, H_EVENT_MS) >= 1);
    assert_held_by_all(c, &id, "a withheld delete event put back");
    for (int i = 0; i < 3; i++)
        h_assert_object(c[i], &id, 100000, 20);
    /* spared as of another put (the directory's check, first), or of other content */
    assert_true(h_stat(c[C], "deletes_of_earlier_puts") + h_stat(c[C], "deletes_spared") >= 1);
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* ---- what a writer can do with genuine signed texts, or planted fields ---- */

/* The key of id's record. */
static void record_key(const ferry_id *id, char key[64])
{
    snprintf(key, 64, "ferry:obj:");
    ferry_id_format(id, key + strlen(key));
}

/* B seals an id A holds with other content (a conflict: B's copy stays unlisted); a writer
 * then deletes the id's record and B's entry, so that B's heartbeat finds it expired and B
 * publishes everything again. B's copy must stay unlisted (it was refused once: it is not
 * published again), so that when A publishes again (its entry deleted too) the record is A's
 * content and C fetches it. Before: B's republish recorded its own content, signed, and A's
 * was then refused as the conflict. */
H_CLUSTER_TEST(a_conflicting_copy_stays_unlisted_after_its_record_is_deleted)
{
    ferry_client *c[3];
    start_trusted(cl, 3, c);
    ferry_id id = h_id("conflicted");
    char key[64];
    record_key(&id, key);
    H_OK(h_put_direct(c[A], &id, 100000, 10));
    h_assert_where(c[C], cl, &id, BIT(A), H_CLUSTER_MS);
    H_OK(h_put_direct(c[B], &id, 100000, 20));
    assert_true(H_WAIT_STAT_MIN(c[B], id_conflicts, 1, H_EVENT_MS) >= 1);

    h_redis_cmd(&cl->redis, (const char *[]){"DEL", key, "ferry:node:node-b", NULL});
    h_assert_nodes(c[C], cl, ALL3, H_CLUSTER_MS); /* B registered again, and republished */
    h_sleep_ms(500);                              /* its publications are a turn behind */
    h_redis_cmd(&cl->redis, (const char *[]){"DEL", "ferry:node:node-a", NULL});
    h_assert_where(c[C], cl, &id, BIT(A), H_CLUSTER_MS);
    fetch_one(c[C], &id);
    h_assert_object(c[C], &id, 100000, 10);
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* A genuine delete event saved aside (withheld), the same content put again on C alone (a
 * node whose run began after the delete: it never took the event) and the event put back: the
 * event was about the put that was deleted, so C's copy of the later put stays, though its
 * bytes are the same. Before: the event named only the content, and C's sole copy went. */
H_CLUSTER_TEST(withheld_delete_event_spares_a_re_put_of_the_same_content)
{
    ferry_client *c[3];
    start_trusted(cl, 3, c);
    ferry_id id = h_id("deleted-then-the-same-content");
    put_everywhere(cl, c, &id, 10);
    delete_heard_everywhere(c, &id);
    h_redis_cmd(&cl->redis,
                (const char *[]){"EVAL", copy_lua, "2", "ferry:events", "withheld", NULL});
    ferry_disconnect(c[C]);
    restart_plain(cl, C);
    c[C] = h_node_connect(cl, C);
    H_OK(h_put_direct(c[C], &id, 100000, 10));
    h_assert_where(c[A], cl, &id, BIT(C), H_CLUSTER_MS);

    h_redis_cmd(&cl->redis,
                (const char *[]){"EVAL", copy_lua, "2", "withheld", "ferry:events", NULL});
    assert_true(H_WAIT_STAT_MIN(c[C], deletes_heard, 1, H_EVENT_MS) >= 1);
    h_sync(c[C]);
    if (!h_contains(c[C], &id))
        fail_msg("node C dropped its re-put copy for a withheld delete event of the same content");
    h_assert_object(c[C], &id, 100000, 10);
    h_assert_where(c[A], cl, &id, BIT(C), H_CLUSTER_MS);
    assert_true(h_stat(c[C], "deletes_of_earlier_puts") >= 1);

    /* A delete of the re-put by a node that holds no copy (it names the put the record is)
     * still deletes it. */
    H_OK(ferry_delete_cluster(c[B], &id));
    assert_true(H_WAIT_STAT_MIN(c[C], deletes_heard, 2, H_EVENT_MS) >= 2);
    h_sync(c[C]);
    assert_false(h_contains(c[C], &id));
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* Copies hash KEYS[1] into KEYS[2] (replacing it), with a TTL of ARGV[1] ms when given. */
static const char copy_hash_lua[] = "local f = redis.call('HGETALL', KEYS[1])\n"
                                    "if #f == 0 then return 0 end\n"
                                    "redis.call('DEL', KEYS[2])\n"
                                    "redis.call('HSET', KEYS[2], unpack(f))\n"
                                    "if ARGV[1] then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end\n"
                                    "return #f\n";

/* A socket listening on 127.0.0.1:port (connections queue, never accepted): something else
 * that took a node's old port. */
static int listen_on(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0)
        fail_msg("cannot listen on port %d", port);
    return fd;
}

/* redis-cli setting key's TTL back to 3 s every 100 ms, for 8 s at most: a writer keeping an
 * entry alive. Its pid. */
static pid_t keep_alive(const struct h_cluster *cl, const char *key)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", cl->redis.port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDOUT_FILENO);
        execlp("redis-cli", "redis-cli", "-p", port, "-r", "80", "-i", "0.1", "PEXPIRE", key,
               "3000", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* B's signed entry saved while B runs, B stopped, then the entry put back and kept alive by a
 * writer while something listens at B's old port: B, started again (a new port), must not take
 * the dead run's entry for a live node using its id. It starts, is listed at its new address,
 * and keeps running. Before: it stopped with status 78 ("node id node-b is in use by a live
 * node"), which the service manager does not restart. */
H_CLUSTER_TEST(a_replayed_entry_of_a_dead_run_does_not_keep_its_node_from_starting)
{
    ferry_client *c[2];
    start_trusted(cl, 2, c);
    int old_port = h_node_port(cl, B);
    h_redis_cmd(&cl->redis, (const char *[]){"EVAL", copy_hash_lua, "2", "ferry:node:node-b",
                                             "saved-entry", NULL});
    ferry_disconnect(c[B]);
    h_daemon_stop(&cl->node[B].d);
    int squatter = listen_on(old_port);
    h_redis_cmd(&cl->redis, (const char *[]){"EVAL", copy_hash_lua, "2", "saved-entry",
                                             "ferry:node:node-b", "3000", NULL});
    pid_t writer = keep_alive(cl, "ferry:node:node-b");

    char secret[256];
    snprintf(secret, sizeof(secret), "%s/secret", cl->redis.dir);
    h_node_start(cl, B, "64M", (const char *const[]){"--secret-file", secret, NULL});
    h_assert_nodes(c[A], cl, BIT(A) | BIT(B), H_CLUSTER_MS);
    int status = 0;
    pid_t gone = waitpid(cl->node[B].d.pid, &status, WNOHANG);
    if (gone == cl->node[B].d.pid) {
        cl->node[B].d.pid = 0;
        fail_msg("node B exited (status %d) for a replayed entry of its dead run",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    assert_false(h_file_contains(cl->node[B].d.log, "in use by a live node"));
    c[B] = h_node_connect(cl, B);
    assert_true(h_stat(c[B], "replayed_entries") >= 1);
    ferry_disconnect(c[B]);
    kill(writer, SIGKILL);
    (void)waitpid(writer, NULL, 0);
    close(squatter);
    ferry_disconnect(c[A]);
}

#define T(f) cmocka_unit_test_setup_teardown(f, h_cluster_setup, h_cluster_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(forged_delete_events_delete_nothing),
        T(replayed_delete_event_spares_a_later_put),
        T(inflated_record_evicts_nothing),
        T(switched_record_is_refused_then_repaired),
        T(held_index_of_the_wrong_type_is_replaced),
        T(events_of_the_wrong_type_are_replaced),
        T(planted_holders_do_not_crowd_out_the_real_one),
        T(events_cursor_in_the_future_is_not_followed),
        T(withheld_delete_replayed_spares_other_content),
        T(a_conflicting_copy_stays_unlisted_after_its_record_is_deleted),
        T(withheld_delete_event_spares_a_re_put_of_the_same_content),
        T(a_replayed_entry_of_a_dead_run_does_not_keep_its_node_from_starting),
        T(a_live_node_id_is_still_refused_with_signed_heartbeats),
        T(a_forged_location_is_refused_and_the_directory_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
