/*
 * it_cluster_faults.c - fetching when things go wrong, with real ferryd nodes and a real
 * Redis: a holder killed in the middle of sending a 32 MiB object (the fetch completes from
 * another holder, or fails cleanly when there is none, leaving no partial object and no
 * leaked arena bytes); peers with a wrong or missing cluster secret are refused; garbage on a
 * node's transfer port closes that connection, is counted, and the node keeps serving.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/proto.h"
#include "transfer/wire.h"

enum { A, B, C, D };
#define BIT(i) (1u << (i))
#define MIB (1024u * 1024u)

/* The object killed in flight. Its bytes are paced (the fault hooks: a tcp sender writes, a
 * fabric reader reads, 1 MiB per PACE_MS), so that its transfer lasts 32 * PACE_MS on any
 * machine and the kill always comes under way. */
#define BIG (32 * MIB)
#define BIG_META 4096u
#define BIG_ALLOC (BIG + BIG_META) /* a multiple of 64: what the arena holds for it */
#define BIG_MEMORY "128M"
#define PACED "tcp-send-delay-ms=50,fabric-read-delay-ms=50"

/* ---- a holder killed mid-transfer ---- */

/* The object's entry in c's ferry_list: its state, or 0 when not listed; refcount too. */
static int list_state(ferry_client *c, const ferry_id *id, uint32_t *refcount)
{
    ferry_object_info info;
    if (!h_list_find(c, id, &info))
        return 0;
    if (refcount)
        *refcount = info.refcount;
    return info.state;
}

/* Waits (bounded) until B is receiving id (listed, unsealed) while a holder of mask sends
 * it (holds a reference: the pin of a transfer), and kills that holder. Returns its index,
 * or -1 when the fetch ended first or no sender was seen. */
static int kill_sender(struct h_cluster *cl, ferry_client *const *c, const ferry_id *id,
                       unsigned holders)
{
    struct h_wait w;
    for (h_wait_begin(&w, 20000); h_wait_next(&w);) {
        int state = list_state(c[B], id, NULL);
        if (state == FERRY_STATE_SEALED)
            return -1;
        if (state != FERRY_STATE_CREATED)
            continue;
        for (int i = 0; i < cl->n; i++) {
            uint32_t refs = 0;
            if ((holders & BIT(i)) && list_state(c[i], id, &refs) && refs > 0) {
                h_node_kill(cl, i);
                return i;
            }
        }
    }
    return -1;
}

/* Starts node i again after a kill (same id, new port) and reconnects c[i]; waits until
 * every node sees every node. */
static void revive(struct h_cluster *cl, ferry_client **c, int i, const char *memory)
{
    ferry_disconnect(c[i]);
    h_node_start(cl, i, memory, NULL);
    c[i] = h_node_connect(cl, i);
    for (int k = 0; k < cl->n; k++)
        h_assert_nodes(c[k], cl, (1u << cl->n) - 1, H_CLUSTER_MS);
}

/* Waits (bounded) until the arena bytes of c's objects are want; fails otherwise. */
static void assert_object_bytes(ferry_client *c, uint64_t want)
{
    struct h_wait w;
    uint64_t got;
    for (h_wait_begin(&w, H_EVENT_MS); (got = h_object_bytes(c)) != want;)
        if (!h_wait_next(&w))
            fail_msg("arena bytes of objects: %llu, expected %llu", (unsigned long long)got,
                     (unsigned long long)want);
}

/* Deletes id from each of the n nodes that holds it (a try's leftovers). */
static void delete_everywhere(ferry_client *const *c, int n, const ferry_id *id)
{
    for (int i = 0; i < n; i++)
        if (h_contains(c[i], id))
            H_OK(ferry_delete(c[i], id));
}

/* id on A, copied to C by a fetch: B must see both as holders. */
static void put_on_two_holders(struct h_cluster *cl, ferry_client *const *c, const ferry_id *id)
{
    int status;
    H_OK(h_put_direct(c[A], id, BIG, BIG_META));
    H_OK(ferry_fetch(c[C], id, 1, 30000, &status));
    h_assert_where(c[B], cl, id, BIT(A) | BIT(C), H_CLUSTER_MS);
}

/* One try: B fetches id while its sender is killed. 1 when the kill came mid-transfer (the
 * fetch then had to complete from the survivor), 0 when the transfer was over first. */
static int failover_try(struct h_cluster *cl, ferry_client **c, const ferry_id *id, int *victim)
{
    ferry_client *fb = h_node_connect(cl, B);
    uint64_t bytes = h_object_bytes(c[B]);
    ferry_stats b0 = h_stats(c[B]);
    struct h_fetch f;
    int status;
    h_fetch_start(&f, fb, id, 1, 60000, &status);
    *victim = kill_sender(cl, c, id, BIT(A) | BIT(C));
    h_fetch_join(&f, 70000);
    ferry_disconnect(fb);
    H_RC(f.rc, FERRY_OK);
    H_RC(status, FERRY_OK);
    h_assert_object(c[B], id, BIG, BIG_META);
    assert_object_bytes(c[B], bytes + BIG_ALLOC); /* nothing left of the failed transfer */
    ferry_stats b1 = h_stats(c[B]);
    assert_int_equal(b1.transfers_in - b0.transfers_in, 1);
    return *victim >= 0 && b1.transfer_failures > b0.transfer_failures;
}

/* The holder sending a 32 MiB object to B (paced) is killed (SIGKILL) mid-transfer: B's fetch
 * completes from the other holder, with the right bytes and no arena bytes leaked. */
H_CLUSTER_TEST(fetch_survives_the_death_of_its_sender)
{
    setenv("FERRY_FAULT", PACED, 1); /* every node, the revived one too */
    h_cluster_start(cl, 3, BIG_MEMORY, NULL);
    ferry_client *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = h_node_connect(cl, i);
    int victim = -1;
    ferry_id id = h_id("failover");
    put_on_two_holders(cl, c, &id);
    if (!failover_try(cl, c, &id, &victim))
        fail_msg("the paced transfer was not caught under way (sender seen: %s)",
                 victim >= 0 ? cl->node[victim].id : "none");
    print_message("killed mid-transfer: %s\n", cl->node[victim].id);
    revive(cl, c, victim, BIG_MEMORY);
    delete_everywhere(c, 3, &id);
    unsetenv("FERRY_FAULT");
    for (int i = 0; i < 3; i++)
        ferry_disconnect(c[i]);
}

/* One try with a single holder, A: 1 when A died mid-transfer and the fetch failed cleanly
 * (FERRY_ETRANSFER or FERRY_ETIMEDOUT within its timeout, nothing left on B), 0 when the
 * transfer was over before the kill. */
static int lost_try(struct h_cluster *cl, ferry_client **c, const ferry_id *id)
{
    enum { TIMEOUT = 8000 };
    ferry_client *fb = h_node_connect(cl, B);
    H_OK(h_put_direct(c[A], id, BIG, BIG_META));
    h_assert_where(c[B], cl, id, BIT(A), H_CLUSTER_MS);
    uint64_t bytes = h_object_bytes(c[B]);
    struct h_fetch f;
    int status;
    h_fetch_start(&f, fb, id, 1, TIMEOUT, &status);
    int victim = kill_sender(cl, c, id, BIT(A));
    h_fetch_join(&f, TIMEOUT + 10000);
    ferry_disconnect(fb);
    if (f.rc == FERRY_OK) /* the transfer was over first */
        return 0;
    assert_int_equal(victim, A);
    if (f.rc != FERRY_ETRANSFER && f.rc != FERRY_ETIMEDOUT)
        fail_msg("fetch from a dead holder: %d (%s), expected ETRANSFER or ETIMEDOUT", f.rc,
                 ferry_strerror(f.rc));
    H_RC(status, f.rc);
    print_message("the fetch failed with %s after %lld ms\n", ferry_strerror(f.rc),
                  (long long)f.elapsed_ms);
    if (f.elapsed_ms > TIMEOUT + 1000)
        fail_msg("fetch with timeout %d ms failed after %lld ms", TIMEOUT, (long long)f.elapsed_ms);
    assert_int_equal(list_state(c[B], id, NULL), 0); /* no partial object, sealed or not */
    assert_object_bytes(c[B], bytes);
    return 1;
}

/* The only holder dies while it sends (paced): the fetch fails within its timeout, and B
 * keeps no partial object and no arena bytes of it. */
H_CLUSTER_TEST(fetch_fails_cleanly_when_its_only_sender_dies)
{
    setenv("FERRY_FAULT", PACED, 1);
    h_cluster_start(cl, 2, BIG_MEMORY, NULL);
    unsetenv("FERRY_FAULT");
    ferry_client *c[2] = {h_node_connect(cl, A), h_node_connect(cl, B)};
    ferry_id id = h_id("lost");
    uint64_t failures = h_stats(c[B]).transfer_failures;
    if (!lost_try(cl, c, &id))
        fail_msg("the paced transfer was over before its sender was killed");
    assert_true(h_stats(c[B]).transfer_failures > failures);
    for (int i = 0; i < 2; i++)
        ferry_disconnect(c[i]);
}

/* The only holder freezes (SIGSTOP) before the fetch: the connection is never made, which
 * counts as "unreached" and is forgiven at the retry, and then the holder's entry expires. The
 * fetch fails with the reasons once the holder it asked has been gone 10 s, not at its timeout (a
 * sole holder killed before it answered made a fetch of 0.11's suite wait 30 s). */
H_CLUSTER_TEST(a_fetch_from_a_sole_holder_gone_before_it_answered_fails_with_why)
{
    enum { TIMEOUT = 30000 };
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *c[2] = {h_node_connect(cl, A), h_node_connect(cl, B)};
    ferry_id id = h_id("frozen-holder");
    int status = 1;
    H_OK(h_put_direct(c[B], &id, MIB, 0));
    h_assert_where(c[A], cl, &id, BIT(B), H_CLUSTER_MS);
    ferry_disconnect(c[B]);
    assert_int_equal(kill(cl->node[B].d.pid, SIGSTOP), 0);
    int64_t t0 = h_now_ms();
    int rc = ferry_fetch(c[A], &id, 1, TIMEOUT, &status);
    int64_t took = h_now_ms() - t0;
    char why[512];
    snprintf(why, sizeof(why), "%s", ferry_errmsg());
    h_node_kill(cl, B);
    printf("fetch from a frozen sole holder: %s in %lld ms: %s\n", ferry_strerror(rc),
           (long long)took, why);
    if (rc != FERRY_ETRANSFER)
        fail_msg("fetch from a frozen sole holder ended with %d (%s) after %lld ms, expected a "
                 "transfer error before its %d ms timeout",
                 rc, ferry_strerror(rc), (long long)took, TIMEOUT);
    assert_non_null(strstr(why, cl->node[B].id));
    assert_false(h_contains(c[A], &id));
    ferry_disconnect(c[A]);
}

/* ---- the cluster secret ---- */

/* Writes a secret file into the fixture's Redis directory (removed with it). */
static void secret_file(struct h_cluster *cl, const char *name, const char *secret, char *path,
                        size_t size)
{
    snprintf(path, size, "%s/%s", cl->redis.dir, name);
    h_write_file(path, secret);
}

/* A fetch that must fail: by every holder refusing (ETRANSFER, EAUTH) or by the timeout. */
static void assert_fetch_refused(ferry_client *c, const ferry_id *id)
{
    int status = 1;
    int rc = ferry_fetch(c, id, 1, 3000, &status);
    if (rc != FERRY_ETRANSFER && rc != FERRY_ETIMEDOUT && rc != FERRY_EAUTH)
        fail_msg("fetch across a secret mismatch: %d (%s), expected a failure", rc,
                 ferry_strerror(rc));
    H_RC(status, rc);
    assert_false(h_contains(c, id));
}

/* Starts A and B with secret X, C with secret Y and D with none, all on one directory. */
static void start_secret_cluster(struct h_cluster *cl)
{
    char x[256], y[256];
    secret_file(cl, "secret-x", "correct horse battery staple\n", x, sizeof(x));
    secret_file(cl, "secret-y", "another secret, just as long\n", y, sizeof(y));
    const char *const with_x[] = {"--secret-file", x, NULL};
    const char *const with_y[] = {"--secret-file", y, NULL};
    h_node_start(cl, A, "64M", with_x);
    h_node_start(cl, B, "64M", with_x);
    h_node_start(cl, C, "64M", with_y);
    h_node_start(cl, D, "64M", NULL);
    ferry_client *c = h_node_connect(cl, D); /* without a secret, every entry is taken */
    h_assert_nodes(c, cl, BIT(A) | BIT(B) | BIT(C) | BIT(D), H_CLUSTER_MS);
    ferry_disconnect(c);
    c = h_node_connect(cl, A); /* with one, only entries signed with it */
    h_assert_nodes(c, cl, BIT(A) | BIT(B), H_CLUSTER_MS);
    ferry_disconnect(c);
}

/* A fetch on node `from` of id, held by node `holder` only, across a secret mismatch: it
 * fails and the holder sends nothing. A fetcher with a secret ignores the id's record and the
 * holder's entry (signed with another secret: counted in unsigned_records or
 * unsigned_entries); a fetcher without one connects, and the holder counts the peer that
 * failed its challenge. */
static void assert_refused_between(struct h_cluster *cl, ferry_client *const *c, int from,
                                   int holder, const ferry_id *id)
{
    ferry_stats h0 = h_stats(c[holder]), f0 = h_stats(c[from]);
    assert_fetch_refused(c[from], id);
    ferry_stats h1 = h_stats(c[holder]);
    assert_int_equal(h1.transfers_out, h0.transfers_out);
    assert_int_equal(h1.bytes_out, h0.bytes_out);
    ferry_stats f1 = h_stats(c[from]);
    if (f1.unsigned_entries > f0.unsigned_entries || f1.unsigned_records > f0.unsigned_records)
        return;
    uint64_t errors = H_WAIT_STAT_MIN(c[holder], peer_errors, h0.peer_errors + 1, H_EVENT_MS);
    if (errors <= h0.peer_errors)
        fail_msg("%s's fetch from %s across a secret mismatch: the holder's peer_errors stayed "
                 "at %llu (the fetching node's went from %llu to %llu)",
                 cl->node[from].id, cl->node[holder].id, (unsigned long long)errors,
                 (unsigned long long)f0.peer_errors,
                 (unsigned long long)h_stats(c[from]).peer_errors);
}

/* Nodes with the same secret fetch from each other; a node with another secret, or with
 * none, gets nothing from them and they get nothing from it. */
H_CLUSTER_TEST(peers_must_share_the_cluster_secret)
{
    start_secret_cluster(cl);
    ferry_client *c[4];
    for (int i = 0; i < 4; i++)
        c[i] = h_node_connect(cl, i);
    ferry_id id = h_id("secret-object"), theirs = h_id("secret-object-of-c");
    H_OK(h_put_direct(c[A], &id, 100000, 10));
    H_OK(h_put_direct(c[C], &theirs, 1000, 0));
    int status = 1;
    H_OK(ferry_fetch(c[B], &id, 1, 10000, &status));
    h_assert_same_object(c[A], c[B], &id);
    H_OK(ferry_delete(c[B], &id)); /* A is the only holder again */
    h_assert_where(c[D], cl, &id, BIT(A), H_CLUSTER_MS);
    h_assert_where(c[D], cl, &theirs, BIT(C), H_CLUSTER_MS);
    assert_refused_between(cl, c, C, A, &id);     /* another secret */
    assert_refused_between(cl, c, D, A, &id);     /* no secret */
    assert_refused_between(cl, c, A, C, &theirs); /* the other way */
    for (int i = 0; i < 4; i++)
        ferry_disconnect(c[i]);
}

/* Lists node "fake" in the directory as the holder of id, at 127.0.0.1:port: entry is the
 * node entry's fields after its key (NULL-terminated). */
static void plant_node(struct h_cluster *cl, const ferry_id *id, const char *const *fields)
{
    const char *argv[16] = {"HSET", "ferry:node:fake"};
    char key[64] = "ferry:obj:";
    int n = 2;
    while (*fields && n < 15)
        argv[n++] = *fields++;
    h_redis_cmd(&cl->redis, argv);
    h_redis_cmd(&cl->redis, (const char *[]){"PEXPIRE", "ferry:node:fake", "600000", NULL});
    ferry_id_format(id, key + strlen(key));
    h_redis_cmd(&cl->redis, (const char *[]){"HSET", key, "h:fake", "1", NULL});
}

/* A fetch of id on c that finds no holder it trusts: it fails, its reason names the unsigned
 * entry, nothing connects to the planted address, and c counts the entry it ignored. */
static void assert_planted_ignored(ferry_client *c, int lfd, const ferry_id *id)
{
    ferry_stats s0 = h_stats(c);
    int status = 1, rc = ferry_fetch(c, id, 1, 2000, &status);
    if (rc == FERRY_OK || !strstr(ferry_errmsg(), "not signed"))
        fail_msg("fetch through a planted node: %d (%s)", rc, ferry_errmsg());
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 300), 0); /* no connection came */
    assert_true(h_stats(c).unsigned_entries > s0.unsigned_entries);
}

/* Whoever can write to Redis but lacks the secret cannot make a node dial it: an entry it
 * wrote, or a real node's signed entry copied under another name and address, is ignored.
 * The fake holder is added to a genuine (signed) record, whose real holder B then reads as
 * gone (its field names another run), so that the fake's entry is what A is left to judge. */
H_CLUSTER_TEST(nodes_planted_in_the_directory_are_ignored)
{
    start_secret_cluster(cl);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_client *d = h_node_connect(cl, D); /* looks the record up: A must not cache it */
    int port, lfd = h_tcp_listen(&port);
    char addr[32], key[64], obj[64] = "ferry:obj:";
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    ferry_id id = h_id("planted");
    H_OK(h_put_direct(b, &id, 1000, 0));
    h_assert_where(d, cl, &id, BIT(B), H_CLUSTER_MS);
    ferry_id_format(&id, obj + strlen(obj));
    h_redis_cmd(&cl->redis, (const char *[]){"HSET", obj, "h:node-b", "1", NULL});

    plant_node(cl, &id, (const char *[]){"addr", addr, "inc", "1", "t:tcp", addr, NULL});
    assert_planted_ignored(a, lfd, &id);

    snprintf(key, sizeof(key), "ferry:node:%s", cl->node[B].id);
    h_redis_cmd(&cl->redis, (const char *[]){"DEL", "ferry:node:fake", NULL});
    h_redis_cmd(&cl->redis, (const char *[]){"COPY", key, "ferry:node:fake", NULL});
    plant_node(cl, &id, (const char *[]){"inc", "1", "addr", addr, "t:tcp", addr, NULL});
    assert_planted_ignored(a, lfd, &id);
    close(lfd);
    ferry_disconnect(a);
    ferry_disconnect(b);
    ferry_disconnect(d);
}

/* ---- raw transfer connections ---- */

/* Sends a PULL of one id. */
static int send_pull(int fd, const ferry_id *id)
{
    uint8_t payload[1 + 4 + FERRY_ID_SIZE];
    payload[0] = 0;
    memcpy(h_le32(payload + 1, 1), id->bytes, FERRY_ID_SIZE);
    return h_raw_frame(fd, WIRE_PULL, 7, payload, sizeof(payload));
}

/* Whether the node of c closed fd (after whatever it was sent) and counted exactly one more
 * peer error than before: NULL, or what went wrong. */
static const char *check_dropped(ferry_client *c, int fd, uint64_t errors_before, uint64_t *errors)
{
    int closed = h_raw_wait_closed(fd, H_EVENT_MS);
    close(fd);
    if (!closed)
        return "the connection was not closed";
    *errors = H_WAIT_STAT(c, peer_errors, errors_before + 1);
    return *errors == errors_before + 1 ? NULL : "peer_errors did not grow by exactly one";
}

/* check_dropped, failing the test. */
static void assert_dropped(ferry_client *c, int fd, uint64_t errors_before, const char *what)
{
    uint64_t errors = errors_before;
    const char *wrong = check_dropped(c, fd, errors_before, &errors);
    if (wrong)
        fail_msg("%s: %s (peer_errors %llu -> %llu)", what, wrong,
                 (unsigned long long)errors_before, (unsigned long long)errors);
}

/* On a node with a secret: a connector that answers the challenge with a wrong proof, or
 * skips the proof and pulls, is dropped without a byte of the object, and counted. */
H_CLUSTER_TEST(unauthenticated_connections_get_nothing)
{
    start_secret_cluster(cl);
    ferry_client *a = h_node_connect(cl, A);
    ferry_id id = h_id("guarded");
    H_OK(h_put_direct(a, &id, 5000, 0));
    int port = h_node_port(cl, A), keyed = -1;
    ferry_stats a0 = h_stats(a);

    int fd = h_tcp_connect(port);
    assert_int_equal(h_xfer_handshake_start(fd, &keyed), 0);
    assert_int_equal(keyed, 1);
    uint8_t zero_mac[WIRE_MAC] = {0};
    assert_int_equal(h_raw_frame(fd, WIRE_AUTH, 0, zero_mac, sizeof(zero_mac)), 0);
    assert_dropped(a, fd, a0.peer_errors, "AUTH with a wrong proof");

    fd = h_tcp_connect(port);
    assert_int_equal(h_xfer_handshake_start(fd, &keyed), 0);
    assert_int_equal(send_pull(fd, &id), 0);
    assert_dropped(a, fd, a0.peer_errors + 1, "PULL before AUTH");

    fd = h_tcp_connect(port);
    assert_int_equal(send_pull(fd, &id), 0);
    assert_dropped(a, fd, a0.peer_errors + 2, "PULL before HELLO");

    ferry_stats a1 = h_stats(a);
    assert_int_equal(a1.transfers_out, a0.transfers_out);
    assert_int_equal(a1.bytes_out, a0.bytes_out);
    ferry_disconnect(a);
}

/* One kind of garbage sent to a fresh connection to port. */
struct garbage {
    const char *what;
    int (*send)(int fd);
};

/* 4 KiB of patterned bytes whose first 16 do not even make a header (flags not 0). */
static int send_noise(int fd)
{
    uint8_t noise[4096];
    uint32_t seed = 1;
    do
        h_fill(noise, sizeof(noise), seed++);
    while (noise[6] == 0 && noise[7] == 0);
    return h_raw_write(fd, noise, sizeof(noise));
}

/* A HELLO header announcing more payload than any transfer frame may have. */
static int send_oversized(int fd)
{
    uint8_t hdr[PROTO_HEADER_SIZE];
    uint8_t *p = h_le32(hdr, WIRE_MAX_FRAME + 1);
    p = h_le16(p, WIRE_HELLO);
    p = h_le16(p, 0);
    h_le64(p, 0);
    return h_raw_write(fd, hdr, sizeof(hdr));
}

/* A well-formed header of a type the transfer protocol does not have. */
static int send_unknown_type(int fd)
{
    uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    return h_raw_frame(fd, 0x77, 1, payload, sizeof(payload));
}

static int send_bad_magic(int fd)
{
    return h_xfer_hello(fd, WIRE_MAGIC ^ 0xffu);
}

/* A HELLO whose node id length runs past the payload. */
static int send_truncated_hello(int fd)
{
    uint8_t payload[4 + 4 + 1] = {0}, *p = h_le32(payload, WIRE_MAGIC);
    p = h_le32(p, WIRE_VERSION);
    *p = 40;
    return h_raw_frame(fd, WIRE_HELLO, 0, payload, sizeof(payload));
}

/* A complete handshake (no secret: the proof is zeros), then a frame of an unknown type. */
static int send_garbage_after_auth(int fd)
{
    uint8_t junk[3] = {9, 9, 9};
    if (h_xfer_handshake(fd) != 0)
        return -1;
    return h_raw_frame(fd, 0x66, 2, junk, sizeof(junk));
}

/* A peer of another transfer protocol version is refused with a reason that names both
 * versions (what an operator reads in the newer node's fetch failure), and A serves on. */
H_CLUSTER_TEST(another_protocol_version_is_refused_with_both_versions)
{
    char want[96];
    uint8_t payload[512];
    uint32_t len = 0;
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    int fd = h_tcp_connect(h_node_port(cl, A));
    assert_int_equal(h_xfer_hello_version(fd, WIRE_MAGIC, WIRE_VERSION + 1), 0);
    assert_int_equal(h_xfer_read_frame(fd, payload, sizeof(payload) - 1, &len), WIRE_REFUSE);
    assert_true(len >= 1 && payload[0] == len - 1);
    payload[len] = '\0';
    snprintf(want, sizeof(want), "transfer protocol %u expected, got %u", WIRE_VERSION,
             WIRE_VERSION + 1);
    if (strcmp((const char *)payload + 1, want) != 0)
        fail_msg("refused with '%s', not '%s'", (const char *)payload + 1, want);
    close(fd);
    ferry_id id = h_id("after-another-version");
    H_OK(h_put_direct(a, &id, 1000, 0));
    int status = 1;
    H_OK(ferry_fetch(b, &id, 1, 10000, &status));
    h_assert_same_object(a, b, &id);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Garbage on A's transfer port, one kind per connection: each connection is closed and
 * counted once, and A keeps serving its clients and its peers. */
H_CLUSTER_TEST(garbage_on_the_transfer_port_is_dropped)
{
    static const struct garbage kinds[] = {
        {"random bytes", send_noise},
        {"an oversized frame header", send_oversized},
        {"a frame of an unknown type", send_unknown_type},
        {"a HELLO with a wrong magic", send_bad_magic},
        {"a truncated HELLO", send_truncated_hello},
        {"an unknown frame after authentication", send_garbage_after_auth},
    };
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    int port = h_node_port(cl, A);
    char wrong[1024] = "";
    size_t used = 0;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        uint64_t before = h_stats(a).peer_errors, after = before;
        int fd = h_tcp_connect(port);
        if (kinds[k].send(fd) != 0)
            fail_msg("%s: could not send it", kinds[k].what);
        const char *why = check_dropped(a, fd, before, &after);
        if (why && used < sizeof(wrong)) /* every kind is tried: the report names them all */
            used += (size_t)snprintf(wrong + used, sizeof(wrong) - used,
                                     "\n  %s: %s (peer_errors %llu -> %llu)", kinds[k].what, why,
                                     (unsigned long long)before, (unsigned long long)after);
    }
    if (used)
        fail_msg("garbage on the transfer port:%s", wrong);
    ferry_id id = h_id("after-garbage");
    H_OK(h_put_direct(a, &id, 300000, 30));
    int status = 1;
    H_OK(ferry_fetch(b, &id, 1, 10000, &status));
    h_assert_same_object(a, b, &id);
    h_assert_object(a, &id, 300000, 30);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

#define T(f) cmocka_unit_test_setup_teardown(f, h_cluster_setup, h_cluster_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(fetch_survives_the_death_of_its_sender),
        T(fetch_fails_cleanly_when_its_only_sender_dies),
        T(a_fetch_from_a_sole_holder_gone_before_it_answered_fails_with_why),
        T(peers_must_share_the_cluster_secret),
        T(nodes_planted_in_the_directory_are_ignored),
        T(unauthenticated_connections_get_nothing),
        T(another_protocol_version_is_refused_with_both_versions),
        T(garbage_on_the_transfer_port_is_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
