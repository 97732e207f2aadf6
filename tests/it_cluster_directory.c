/*
 * it_cluster_directory.c - the directory's part in fetching, with real ferryd nodes and a
 * real Redis: a fetched copy makes its node a holder (ferry_where lists it, a third node may
 * pull from either), transfer connections are reused per peer, repeated lookups come from the
 * local cache; with Redis gone local work goes on and a fetch fails fast with
 * FERRY_EDIRECTORY, and once Redis is back (empty, on the same port) the nodes re-register
 * and re-publish by themselves.
 */
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "directory/directory.h"

enum { A, B, C };
#define BIT(i) (1u << (i))
#define ALL3 (BIT(A) | BIT(B) | BIT(C))

/* Fetches one id on c within timeout_ms, which must succeed. */
static void fetch_one(ferry_client *c, const ferry_id *id, int64_t timeout_ms)
{
    int status = 1;
    H_OK(ferry_fetch(c, id, 1, timeout_ms, &status));
    H_RC(status, FERRY_OK);
}

/* A fetched copy makes its node a holder: every node's ferry_where lists A and B, and
 * deleting B's copy withdraws B again. */
H_CLUSTER_TEST(fetched_copy_is_listed_as_a_holder)
{
    h_cluster_start(cl, 3, "64M", NULL);
    ferry_client *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = h_node_connect(cl, i);
    ferry_id id = h_id("where-am-i");
    H_OK(h_put_direct(c[A], &id, 300000, 3));
    for (int i = 0; i < 3; i++)
        h_assert_where(c[i], cl, &id, BIT(A), H_CLUSTER_MS);
    fetch_one(c[B], &id, 10000);
    for (int i = 0; i < 3; i++)
        h_assert_where(c[i], cl, &id, BIT(A) | BIT(B), H_CLUSTER_MS);
    H_OK(ferry_delete(c[B], &id));
    for (int i = 0; i < 3; i++)
        h_assert_where(c[i], cl, &id, BIT(A), H_CLUSTER_MS);
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* Lookups are a script: after a SCRIPT FLUSH (an operator, or anyone who writes Redis) their
 * NOSCRIPT drops the connection, and the next one loads the scripts, so a fetch by id still
 * ends with the object. B publishes nothing here, so nothing else would have noticed: every
 * lookup failed until the fetch's timeout. */
H_CLUSTER_TEST(lookups_recover_from_a_script_flush)
{
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id id = h_id("looked-up-after-a-flush");
    H_OK(h_put_direct(a, &id, 5000, 4));
    h_assert_where(a, cl, &id, BIT(A), H_CLUSTER_MS);
    h_redis_cmd(&cl->redis, (const char *[]){"SCRIPT", "FLUSH", NULL});
    fetch_one(b, &id, 10000);
    h_assert_object(b, &id, 5000, 4);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Once A and B hold an object, a fetch on C pulls it from one of them: exactly one transfer
 * out between the two, and C's copy is intact. */
H_CLUSTER_TEST(third_node_fetches_from_either_holder)
{
    h_cluster_start(cl, 3, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_client *c = h_node_connect(cl, C);
    ferry_id id = h_id("two-holders");
    H_OK(h_put_direct(a, &id, 2000000, 20));
    fetch_one(b, &id, 10000);
    /* A holder counts a one-sided (fabric) transfer when the reader says it is done, which may
     * come after the reader has sealed its copy. */
    assert_int_equal(H_WAIT_STAT(a, transfers_out, 1), 1);
    h_assert_where(c, cl, &id, BIT(A) | BIT(B), H_CLUSTER_MS);
    ferry_stats a0 = h_stats(a), b0 = h_stats(b), c0 = h_stats(c);
    fetch_one(c, &id, 10000);
    h_assert_object(c, &id, 2000000, 20);
    ferry_stats c1 = h_stats(c);
    assert_int_equal(c1.transfers_in - c0.transfers_in, 1);
    struct h_wait w;
    uint64_t out = 0;
    for (h_wait_begin(&w, H_EVENT_MS); out != 1;) {
        out = h_stats(a).transfers_out - a0.transfers_out + h_stats(b).transfers_out -
              b0.transfers_out;
        if (out != 1 && !h_wait_next(&w))
            break;
    }
    assert_int_equal(out, 1);
    h_assert_where(a, cl, &id, ALL3, H_CLUSTER_MS);
    ferry_disconnect(a);
    ferry_disconnect(b);
    ferry_disconnect(c);
}

/* Repeated fetches between one pair of nodes reuse one transfer connection: B opens one to A
 * for the first object and no more for the next ones, and A accepts only that one. */
H_CLUSTER_TEST(transfer_connection_is_reused_per_peer)
{
    enum { N = 10 };
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id ids[N];
    for (int i = 0; i < N; i++) {
        ids[i] = h_idf("reuse-%d", i);
        H_OK(h_put_direct(a, &ids[i], 10000 + (uint64_t)i, 0));
    }
    ferry_stats a0 = h_stats(a), b0 = h_stats(b);
    fetch_one(b, &ids[0], 10000);
    uint64_t opened = h_stats(b).connections_opened;
    assert_true(opened >= 1 && opened <= b0.connections_opened + 1); /* one, or one already */
    for (int i = 1; i < N; i++) {
        fetch_one(b, &ids[i], 10000);
        assert_int_equal(h_stats(b).connections_opened, opened);
    }
    assert_int_equal(h_stats(b).transfers_in - b0.transfers_in, N);
    assert_true(h_stats(a).connections_accepted - a0.connections_accepted <= 1);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Fetching again ids that B fetched and then deleted asks its cache, not Redis:
 * directory_cache_hits grows by one per id and directory_lookups stays put. */
H_CLUSTER_TEST(repeated_fetch_hits_the_directory_cache)
{
    enum { N = 5 };
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id ids[N];
    int statuses[N];
    for (int i = 0; i < N; i++) {
        ids[i] = h_idf("cached-%d", i);
        H_OK(h_put_direct(a, &ids[i], 5000, 5));
    }
    ferry_stats b0 = h_stats(b);
    H_OK(ferry_fetch(b, ids, N, 10000, statuses));
    ferry_stats b1 = h_stats(b);
    assert_true(b1.directory_lookups > b0.directory_lookups); /* the first time asks Redis */
    for (int i = 0; i < N; i++)
        H_OK(ferry_delete(b, &ids[i]));
    for (int i = 0; i < N; i++)
        assert_false(h_contains(b, &ids[i]));
    H_OK(ferry_fetch(b, ids, N, 10000, statuses));
    for (int i = 0; i < N; i++)
        h_assert_object(b, &ids[i], 5000, 5);
    ferry_stats b2 = h_stats(b);
    assert_int_equal(b2.directory_lookups, b1.directory_lookups);
    assert_true(b2.directory_cache_hits >= b1.directory_cache_hits + N);
    assert_int_equal(b2.transfers_in - b1.transfers_in, N);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A node killed with SIGKILL leaves the directory when its entry's TTL runs out: the others
 * stop listing it, and stop naming it as a holder, so a fetch of its object waits in vain, or,
 * when B still tries the holder it knew (its cache), fails naming it gone. */
H_CLUSTER_TEST(dead_node_leaves_the_directory)
{
    h_cluster_start(cl, 3, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_client *c = h_node_connect(cl, C);
    ferry_id id = h_id("on-a-doomed-node");
    H_OK(h_put_direct(c, &id, 1000, 0));
    h_assert_where(a, cl, &id, BIT(C), H_CLUSTER_MS);
    ferry_disconnect(c);
    h_node_kill(cl, C);
    h_assert_nodes(a, cl, BIT(A) | BIT(B), H_CLUSTER_MS);
    h_assert_nodes(b, cl, BIT(A) | BIT(B), H_CLUSTER_MS);
    h_assert_where(b, cl, &id, 0, H_CLUSTER_MS);
    int status = 1, rc = ferry_fetch(b, &id, 1, 500, &status);
    if (rc == FERRY_ETRANSFER)
        assert_non_null(strstr(ferry_errmsg(), "node-c"));
    else
        H_RC(rc, FERRY_ETIMEDOUT);
    H_RC(status, rc);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* How long a_stopped_daemon_keeps_its_registration stops its node: past the TTL of 0.11
 * (3 s), well within today's (DIRECTORY_TTL_MS, 10 s). */
#define STOP_MS 5000

/* Sends sig to node i, failing the test if it cannot. */
static void signal_node(const struct h_cluster *cl, int i, int sig)
{
    if (kill(cl->node[i].d.pid, sig) != 0)
        fail_msg("kill %s: %s", cl->node[i].id, strerror(errno));
}

/* A daemon stopped for 5 s (SIGSTOP: a host starved of CPU, a paused VM) keeps its entry in
 * the directory all along, with the defaults (this case runs with the daemons' real timers).
 * Once it runs again it serves a fetch, and it neither reconnects to Redis nor finds its entry
 * lapsed (which would have made other nodes take it for dead meanwhile). */
H_CLUSTER_TEST(a_stopped_daemon_keeps_its_registration)
{
    if (h_timer_ms("ttl", DIRECTORY_TTL_MS) < 2 * STOP_MS)
        skip(); /* run with the suite's short TTL (FERRY_TEST_TIMERS): FERRY_REAL_TIMERS lists it */
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id id = h_id("held-through-a-stop");
    char key[64];
    long long ttl = 0;
    H_OK(h_put_direct(a, &id, 50000, 5));
    h_assert_where(b, cl, &id, BIT(A), H_CLUSTER_MS);
    ferry_stats before = h_stats(a);
    snprintf(key, sizeof(key), "ferry:node:%s", cl->node[A].id);
    signal_node(cl, A, SIGSTOP);
    int64_t t0 = h_now_ms(), lapsed_at = -1;
    for (int tries = 0; h_now_ms() - t0 < STOP_MS && tries < 1000 && lapsed_at < 0; tries++) {
        ttl = h_redis_int(&cl->redis, (const char *[]){"PTTL", key, NULL});
        if (ttl <= 0)
            lapsed_at = h_now_ms() - t0;
        usleep(100 * 1000);
    }
    signal_node(cl, A, SIGCONT);
    if (lapsed_at >= 0)
        fail_msg("%s's entry lapsed %lld ms into its stop (PTTL %lld)", cl->node[A].id,
                 (long long)lapsed_at, ttl);
    fetch_one(b, &id, 10000);
    h_assert_object(b, &id, 50000, 5);
    ferry_stats after = h_stats(a);
    assert_int_equal(after.directory_reconnects, before.directory_reconnects);
    assert_int_equal(after.directory_lapses, before.directory_lapses);
    assert_int_equal(after.directory_up, 1);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Each of the n clients' nodes reports directory_up == up within H_EVENT_MS. */
static void assert_directory_up(const struct h_cluster *cl, ferry_client *const *c, int n,
                                uint64_t up)
{
    for (int i = 0; i < n; i++)
        if (H_WAIT_STAT(c[i], directory_up, up) != up)
            fail_msg("%s: directory_up is not %llu after %d ms", cl->node[i].id,
                     (unsigned long long)up, H_EVENT_MS);
}

/* With Redis killed: local puts and gets go on, and a fetch of an unknown id waits for the
 * directory until its timeout (1 s), then fails with FERRY_EDIRECTORY, saying so. */
static void check_outage(struct h_cluster *cl, ferry_client *const *c, const ferry_id *during)
{
    h_redis_kill(&cl->redis);
    H_OK(h_put_direct(c[A], during, 70000, 7));
    h_assert_object(c[A], during, 70000, 7);
    ferry_id unknown = h_id("unknown-during-outage");
    int status = 1;
    int64_t t0 = h_now_ms();
    H_RC(ferry_fetch(c[B], &unknown, 1, 1000, &status), FERRY_EDIRECTORY);
    int64_t elapsed = h_now_ms() - t0;
    H_RC(status, FERRY_EDIRECTORY);
    if (!strstr(ferry_errmsg(), "directory is unreachable"))
        fail_msg("the failure does not say why: %s", ferry_errmsg());
    if (elapsed < 900)
        fail_msg("fetch without a directory failed after %lld ms, not its 1000",
                 (long long)elapsed);
    assert_directory_up(cl, c, 3, 0);
}

/* Redis killed, then restarted empty on its port: the nodes notice both, re-register and
 * re-publish without a restart, so an object put during the outage can be fetched. */
H_CLUSTER_TEST(directory_outage_and_recovery)
{
    h_cluster_start(cl, 3, "64M", NULL);
    ferry_client *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = h_node_connect(cl, i);
    ferry_id before = h_id("before-outage"), during = h_id("during-outage");
    H_OK(h_put_direct(c[A], &before, 1000, 0));
    fetch_one(c[B], &before, 10000);
    assert_directory_up(cl, c, 3, 1);
    uint64_t reconnects[3];
    for (int i = 0; i < 3; i++)
        reconnects[i] = h_stats(c[i]).directory_reconnects;
    check_outage(cl, c, &during);
    h_redis_start(&cl->redis, cl->redis.port);
    for (int i = 0; i < 3; i++) {
        h_assert_nodes(c[i], cl, ALL3, H_CLUSTER_MS);
        h_assert_where(c[i], cl, &during, BIT(A), H_CLUSTER_MS);
        h_assert_where(c[i], cl, &before, BIT(A) | BIT(B), H_CLUSTER_MS);
        assert_true(h_stats(c[i]).directory_reconnects > reconnects[i]);
    }
    assert_directory_up(cl, c, 3, 1);
    fetch_one(c[C], &during, 10000);
    h_assert_same_object(c[A], c[C], &during);
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* A node started while Redis is down serves local clients, and joins the cluster once Redis
 * comes up. */
H_CLUSTER_TEST(node_started_without_redis_joins_later)
{
    int port = cl->redis.port;
    h_redis_kill(&cl->redis);
    h_node_start(cl, A, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A);
    ferry_id id = h_id("local-only");
    H_OK(h_put_direct(a, &id, 100, 1));
    h_assert_object(a, &id, 100, 1);
    assert_int_equal(h_stats(a).directory_up, 0);
    h_redis_start(&cl->redis, port);
    h_cluster_start(cl, 1, "64M", NULL);
    ferry_client *b = h_node_connect(cl, B);
    h_assert_where(b, cl, &id, BIT(A), H_CLUSTER_MS);
    fetch_one(b, &id, 10000);
    h_assert_object(b, &id, 100, 1);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Publications queued in one turn go to Redis in scripts of up to 64 each, and every one keeps
 * its own outcome: A puts 200 objects in one batch, then B puts the same ids with A's content
 * but for one: every id lists A, and B as well but for that one, refused on B as a conflict. */
H_CLUSTER_TEST(publications_go_in_batches_each_with_its_outcome)
{
    enum { N = 200, ODD = 77 };
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_put_item items[N];
    ferry_id ids[N];
    uint64_t vals[N], odd = 1u << 20;
    int statuses[N];
    for (int i = 0; i < N; i++) {
        ids[i] = h_idf("batched-%d", i);
        vals[i] = (uint64_t)i;
        items[i] = (ferry_put_item){.id = ids[i], .data = &vals[i], .data_size = sizeof(vals[i])};
    }
    H_OK(ferry_put_many(a, items, N, statuses));
    assert_int_equal(H_WAIT_STAT_MIN(a, directory_published, N, H_CLUSTER_MS), N);
    uint64_t batches = h_stats(a).directory_publish_batches;
    assert_true(batches >= 1 && batches < N);
    items[ODD].data = &odd;
    H_OK(ferry_put_many(b, items, N, statuses));
    assert_int_equal(H_WAIT_STAT_MIN(b, directory_published, N, H_CLUSTER_MS), N);
    assert_true(H_WAIT_STAT_MIN(b, id_conflicts, 1, H_CLUSTER_MS) >= 1);
    for (int i = 0; i < N; i++)
        h_assert_where(a, cl, &ids[i], i == ODD ? BIT(A) : BIT(A) | BIT(B), H_CLUSTER_MS);
    assert_int_equal(h_stats(b).id_conflicts, 1);
    assert_int_equal(h_stats(a).id_conflicts, 0);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* The last delete event names the put it deleted (a gen field): an error reply otherwise. */
static const char last_event_names_its_put_lua[] =
    "local e = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1][2]\n"
    "for i = 1, #e, 2 do if e[i] == 'gen' and e[i + 1] ~= '' then return 1 end end\n"
    "return redis.error_reply('the last delete event names no put')\n";

/* Publications and withdrawals queued together go in one script, in order, and end as they
 * would one by one: a put deleted at once and put again is listed, one deleted at once is not,
 * nor one deleted cluster-wide at once. That delete's lookup writes the queue first, so it
 * finds the put and its event names it (it overtook the queued publication, and named none). A
 * later put, once listed, shows that everything queued before it was written. */
H_CLUSTER_TEST(queued_publications_and_withdrawals_keep_their_order)
{
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id again = h_id("queued-again"), gone = h_id("queued-gone");
    ferry_id everywhere = h_id("queued-everywhere"), mark = h_id("queued-mark");
    H_OK(h_put_direct(a, &again, 100, 0));
    H_OK(ferry_delete(a, &again));
    H_OK(h_put_direct(a, &again, 100, 0));
    H_OK(h_put_direct(a, &gone, 100, 0));
    H_OK(ferry_delete(a, &gone));
    H_OK(h_put_direct(a, &everywhere, 100, 0));
    H_OK(ferry_delete_cluster(a, &everywhere));
    h_redis_cmd(&cl->redis,
                (const char *[]){"EVAL", last_event_names_its_put_lua, "1", "ferry:events", NULL});
    H_OK(h_put_direct(a, &mark, 100, 0));
    h_assert_where(b, cl, &mark, BIT(A), H_CLUSTER_MS);
    h_assert_where(b, cl, &again, BIT(A), 0);
    h_assert_where(b, cl, &gone, 0, 0);
    h_assert_where(b, cl, &everywhere, 0, 0);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

#define T(f) cmocka_unit_test_setup_teardown(f, h_cluster_setup, h_cluster_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(fetched_copy_is_listed_as_a_holder),
        T(third_node_fetches_from_either_holder),
        T(transfer_connection_is_reused_per_peer),
        T(repeated_fetch_hits_the_directory_cache),
        T(dead_node_leaves_the_directory),
        T(a_stopped_daemon_keeps_its_registration),
        T(lookups_recover_from_a_script_flush),
        T(directory_outage_and_recovery),
        T(node_started_without_redis_joins_later),
        T(publications_go_in_batches_each_with_its_outcome),
        T(queued_publications_and_withdrawals_keep_their_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
