/*
 * it_cluster.c - fetching between nodes: real ferryd nodes sharing a real Redis as their
 * directory. Objects of every shape (empty, metadata only, one byte, 256 MiB) and hundreds of
 * ids in one call arrive intact; a fetch waits for an object that is not sealed yet, within
 * its timeout; concurrent fetches of one id on a node make one transfer; ferry_get_fetch
 * hands out the bytes; --verify changes nothing visible; ferry_nodes names every node once;
 * objects a node spilled to disk are fetched from it, also after it restarted.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

enum { A, B, C, D };
#define BIT(i) (1u << (i))
#define MIB (1024u * 1024u)

/* Each node's arena holds the 256 MiB object, the many-ids batch and some slack. */
#define MEMORY "600M"

/* An object shape: data and metadata sizes. */
struct shape {
    uint64_t data, meta;
};

/* Puts ids[i] on c with shapes[i] (patterned, see h_put_direct). */
static void put_shapes(ferry_client *c, const ferry_id *ids, const struct shape *shapes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        H_OK(h_put_direct(c, &ids[i], shapes[i].data, shapes[i].meta));
}

/* Fails unless every status is 0. */
static void assert_statuses_ok(const int *statuses, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (statuses[i] != FERRY_OK)
            fail_msg("statuses[%zu] = %d (%s), expected 0", i, statuses[i],
                     ferry_strerror(statuses[i]));
}

/* Every node lists every node, with its --listen address and tcp among its transports, and
 * marks exactly its own entry as self. */
H_CLUSTER_TEST(nodes_lists_every_node_and_marks_itself)
{
    h_cluster_start(cl, 3, "64M", NULL);
    for (int i = 0; i < 3; i++) {
        ferry_client *c = h_node_connect(cl, i);
        ferry_node_info *nodes = NULL;
        size_t n = 0;
        H_OK(ferry_nodes(c, &nodes, &n));
        assert_int_equal(n, 3);
        for (size_t k = 0; k < n; k++) {
            int own = strcmp(nodes[k].id, cl->node[i].id) == 0;
            assert_int_equal(nodes[k].self, own);
            assert_non_null(strstr(nodes[k].transports, "tcp"));
        }
        free(nodes);
        h_assert_nodes(c, cl, BIT(A) | BIT(B) | BIT(C), 0);
        ferry_disconnect(c);
    }
}

/* Empty, metadata-only and one-byte objects and a 256 MiB one cross intact: same digest,
 * sizes and bytes on both nodes, and the counters of both sides count each object once. */
H_CLUSTER_TEST(fetch_copies_objects_of_every_shape)
{
    static const struct shape shapes[] = {{0, 0}, {0, 100},   {1, 0},
                                          {1, 1}, {4097, 33}, {256 * MIB, 4096}};
    enum { N = sizeof(shapes) / sizeof(shapes[0]) };
    h_cluster_start(cl, 2, MEMORY, NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id ids[N];
    uint64_t data_bytes = 0, all_bytes = 0;
    for (size_t i = 0; i < N; i++) {
        ids[i] = h_idf("shape-%zu", i);
        data_bytes += shapes[i].data;
        all_bytes += shapes[i].data + shapes[i].meta;
    }
    put_shapes(a, ids, shapes, N);
    ferry_stats a0 = h_stats(a), b0 = h_stats(b);
    int statuses[N];
    H_OK(ferry_fetch(b, ids, N, 30000, statuses));
    assert_statuses_ok(statuses, N);
    for (size_t i = 0; i < N; i++) {
        assert_true(h_contains(b, &ids[i]));
        h_assert_object(b, &ids[i], shapes[i].data, shapes[i].meta);
        h_assert_same_object(a, b, &ids[i]);
    }
    ferry_stats b1 = h_stats(b);
    assert_int_equal(b1.transfers_in - b0.transfers_in, N);
    assert_int_equal(b1.fetches - b0.fetches, 1);
    assert_true(b1.bytes_in - b0.bytes_in >= data_bytes);
    assert_true(b1.bytes_in - b0.bytes_in <= all_bytes);
    assert_int_equal(H_WAIT_STAT(a, transfers_out, a0.transfers_out + N), a0.transfers_out + N);
    assert_int_equal(h_stats(a).transfer_failures, a0.transfer_failures);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* 500 small objects, 4 large ones, one already local and one listed twice, in one call:
 * every status is 0 and every object arrives intact. */
H_CLUSTER_TEST(fetch_of_many_ids_in_one_call)
{
    enum { SMALL = 500, LARGE = 4, N = SMALL + LARGE + 2 };
    h_cluster_start(cl, 2, MEMORY, NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    static ferry_id ids[N];
    static struct shape shapes[N];
    for (size_t i = 0; i < SMALL + LARGE; i++) {
        ids[i] = h_idf("many-%zu", i);
        shapes[i] =
            i < SMALL ? (struct shape){i * 7 % 3001, i % 5 * 11} : (struct shape){16 * MIB + i, 64};
    }
    put_shapes(a, ids, shapes, SMALL + LARGE);
    ids[N - 2] = h_id("many-local"); /* already on B, on no other node */
    shapes[N - 2] = (struct shape){1000, 10};
    H_OK(h_put_direct(b, &ids[N - 2], 1000, 10));
    ids[N - 1] = ids[3]; /* listed twice */
    shapes[N - 1] = shapes[3];
    ferry_stats b0 = h_stats(b);
    static int statuses[N];
    H_OK(ferry_fetch(b, ids, N, 30000, statuses));
    assert_statuses_ok(statuses, N);
    for (size_t i = 0; i < N; i++)
        h_assert_object(b, &ids[i], shapes[i].data, shapes[i].meta);
    for (size_t i = 0; i < SMALL + LARGE; i += 37)
        h_assert_same_object(a, b, &ids[i]);
    /* each remote object came once; the local one and the repeat cost no transfer */
    assert_int_equal(h_stats(b).transfers_in - b0.transfers_in, SMALL + LARGE);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* ferry_get_fetch returns held buffers with the bytes, for a remote and a local object in
 * one call. */
H_CLUSTER_TEST(get_fetch_returns_the_bytes)
{
    h_cluster_start(cl, 2, MEMORY, NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id ids[2] = {h_id("gf-remote"), h_id("gf-local")};
    H_OK(h_put_direct(a, &ids[0], 3 * MIB + 5, 77));
    H_OK(h_put_direct(b, &ids[1], 1234, 0));
    ferry_buffer out[2];
    /* 30 s, as the fetches above: beside two busy processes (make check-load) 10 s passed
     * once with no answer from A yet. */
    H_OK(ferry_get_fetch(b, ids, 2, 30000, out));
    h_assert_buffer(&out[0], &ids[0], 3 * MIB + 5, 77);
    h_assert_buffer(&out[1], &ids[1], 1234, 0);
    ferry_object_info info;
    assert_true(h_list_find(b, &ids[0], &info));
    assert_int_equal(info.refcount, 1); /* the reference get_fetch took */
    H_OK(ferry_release(b, &ids[0]));
    H_OK(ferry_release(b, &ids[1]));
    h_assert_same_object(a, b, &ids[0]);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A fetch waits for objects that no node holds yet: one its creator has not sealed yet and
 * one not even created. It succeeds once both appear 500 ms later, not before, and brings the
 * sealed bytes. */
H_CLUSTER_TEST(fetch_waits_for_objects_sealed_later)
{
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_client *fb = h_node_connect(cl, B);
    ferry_id ids[2] = {h_id("sealed-later"), h_id("put-later")};
    uint8_t *data, meta = 0;
    h_fill(&meta, 1, ~h_seed(&ids[0]));
    H_OK(ferry_create(a, &ids[0], 100000, &meta, 1, &data));
    uint64_t fetches = h_stats(b).fetches;
    struct h_fetch f;
    int statuses[2];
    h_fetch_start(&f, fb, ids, 2, 5000, statuses);
    /* the fetch has reached B's daemon and waits */
    assert_int_equal(H_WAIT_STAT_MIN(b, fetches, fetches + 1, H_EVENT_MS), fetches + 1);
    h_sleep_ms(500); /* the scenario: the objects come later; not a synchronisation */
    assert_false(h_contains(b, &ids[0])); /* an unsealed object is not fetched */
    h_fill(data, 100000, h_seed(&ids[0]));
    int64_t sealed_at = h_now_ms();
    H_OK(ferry_seal(a, &ids[0]));
    H_OK(ferry_release(a, &ids[0]));
    H_OK(h_put_direct(a, &ids[1], 2000, 0));
    h_fetch_join(&f, 10000);
    H_RC(f.rc, FERRY_OK);
    H_RC(statuses[0], FERRY_OK);
    H_RC(statuses[1], FERRY_OK);
    assert_true(f.ended_ms >= sealed_at);
    h_assert_object(b, &ids[0], 100000, 1);
    h_assert_object(b, &ids[1], 2000, 0);
    h_assert_same_object(a, b, &ids[0]);
    ferry_disconnect(fb);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A fetch of an id that no node ever holds ends with FERRY_ETIMEDOUT, not before its
 * timeout of 300 ms, and leaves nothing behind. */
H_CLUSTER_TEST(fetch_of_an_id_nobody_holds_times_out)
{
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *b = h_node_connect(cl, B);
    ferry_id id = h_id("nobody-has-it");
    int status = 1;
    uint64_t used = h_stats(b).used_bytes;
    int64_t t0 = h_now_ms();
    H_RC(ferry_fetch(b, &id, 1, 300, &status), FERRY_ETIMEDOUT);
    int64_t elapsed = h_now_ms() - t0;
    H_RC(status, FERRY_ETIMEDOUT);
    if (elapsed < 295)
        fail_msg("fetch with timeout 300 ms ended after %lld ms", (long long)elapsed);
    assert_false(h_contains(b, &id));
    assert_int_equal(h_stats(b).used_bytes, used);
    /* timeout 0 polls: the same answer, within the connection's own timer (the poll waits
     * for nothing: a client-side timeout would leave the status FERRY_ECONN) */
    H_OK(ferry_set_timeout(b, 2000));
    status = 1;
    H_RC(ferry_fetch(b, &id, 1, 0, &status), FERRY_ETIMEDOUT);
    H_RC(status, FERRY_ETIMEDOUT);
    ferry_disconnect(b);
}

enum { CLIENTS = 8 };

struct racer {
    ferry_client *c;
    ferry_id *id;
    pthread_barrier_t *start;
    int rc, status;
};

static void *racer_run(void *arg)
{
    struct racer *r = arg;
    pthread_barrier_wait(r->start);
    r->rc = ferry_fetch(r->c, r->id, 1, 30000, &r->status);
    return NULL;
}

/* 8 clients of node B fetching one 64 MiB object at once: all succeed, and it crosses once
 * (A sends it once, B receives it once), though B counts 8 fetch requests. */
H_CLUSTER_TEST(concurrent_fetches_of_one_id_make_one_transfer)
{
    h_cluster_start(cl, 2, "256M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    static ferry_id id;
    id = h_id("contended");
    H_OK(h_put_direct(a, &id, 64 * MIB, 8));
    ferry_stats a0 = h_stats(a), b0 = h_stats(b);
    /* static: a thread that outlives a failed test writes to nothing that is gone */
    static pthread_barrier_t start;
    static struct racer r[CLIENTS];
    pthread_t th[CLIENTS];
    pthread_barrier_init(&start, NULL, CLIENTS);
    for (int i = 0; i < CLIENTS; i++) {
        r[i] = (struct racer){.c = h_node_connect(cl, B), .id = &id, .start = &start, .rc = 1};
        assert_int_equal(pthread_create(&th[i], NULL, racer_run, &r[i]), 0);
    }
    for (int i = 0; i < CLIENTS; i++)
        if (h_join(th[i], 40000) != 0)
            fail_msg("fetch %d (timeout 30 s) still running after 40 s", i);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < CLIENTS; i++) {
        H_RC(r[i].rc, FERRY_OK);
        H_RC(r[i].status, FERRY_OK);
        ferry_disconnect(r[i].c);
    }
    ferry_stats b1 = h_stats(b);
    assert_int_equal(b1.fetches - b0.fetches, CLIENTS);
    assert_int_equal(b1.transfers_in - b0.transfers_in, 1);
    assert_int_equal(H_WAIT_STAT(a, transfers_out, a0.transfers_out + 1), a0.transfers_out + 1);
    h_assert_same_object(a, b, &id);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A node started with --verify fetches as any other: data and metadata arrive intact. */
H_CLUSTER_TEST(fetch_with_verify_delivers_intact_objects)
{
    static const struct shape shapes[] = {{0, 0}, {1, 0}, {5000, 50}, {32 * MIB + 3, 1000}};
    enum { N = sizeof(shapes) / sizeof(shapes[0]) };
    const char *const verify[] = {"--verify", NULL};
    h_node_start(cl, A, "128M", NULL);
    h_node_start(cl, B, "128M", verify);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    h_assert_nodes(b, cl, BIT(A) | BIT(B), H_CLUSTER_MS);
    ferry_id ids[N];
    for (size_t i = 0; i < N; i++)
        ids[i] = h_idf("verified-%zu", i);
    put_shapes(a, ids, shapes, N);
    int statuses[N];
    H_OK(ferry_fetch(b, ids, N, 20000, statuses));
    assert_statuses_ok(statuses, N);
    for (size_t i = 0; i < N; i++) {
        h_assert_object(b, &ids[i], shapes[i].data, shapes[i].meta);
        h_assert_same_object(a, b, &ids[i]);
    }
    assert_int_equal(h_stats(b).transfer_failures, 0);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A node that spilled three arenas of objects serves each to a peer (restoring it first), and
 * after a restart on its spill directory it is listed again as their holder and serves them. */
H_CLUSTER_TEST(spilled_objects_are_fetched_and_served_again_after_a_restart)
{
    enum { N = 48 };
    char spill[128];
    snprintf(spill, sizeof(spill), "%s/spill-a", cl->redis.dir);
    const char *const spilling[] = {"--spill-dir", spill, "--persist-on-exit", NULL};
    h_node_start(cl, A, "16M", spilling);
    h_node_start(cl, B, "128M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    h_assert_nodes(b, cl, BIT(A) | BIT(B), H_CLUSTER_MS);
    ferry_id ids[N];
    int statuses[N];
    for (int i = 0; i < N; i++) {
        ids[i] = h_idf("spilled-%d", i);
        H_OK(h_put_direct(a, &ids[i], MIB, 64));
    }
    assert_true(h_stats(a).spilled_objects >= N / 2);
    H_OK(ferry_fetch(b, ids, N, 60000, statuses));
    assert_statuses_ok(statuses, N);
    for (int i = 0; i < N; i++)
        h_assert_object(b, &ids[i], MIB, 64);
    assert_true(h_stats(a).restores >= N / 2);
    assert_int_equal(h_stats(b).transfer_failures, 0);

    /* A restart: the directory lists A again for what it kept on disk. */
    ferry_disconnect(a);
    h_daemon_stop(&cl->node[A].d);
    for (int i = 0; i < N; i += 2)
        H_OK(ferry_delete(b, &ids[i]));
    h_node_start(cl, A, "16M", spilling);
    a = h_node_connect(cl, A);
    assert_int_equal(h_stats(a).spill_recovered_objects, N);
    h_assert_where(b, cl, &ids[0], BIT(A) | 0, H_CLUSTER_MS);
    H_OK(ferry_fetch(b, ids, N, 60000, statuses));
    assert_statuses_ok(statuses, N);
    for (int i = 0; i < N; i += 2)
        h_assert_object(b, &ids[i], MIB, 64);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* c fetches id (one object), and it must arrive whole; then the directory lists the holders
 * in mask. */
static void fetch_one(ferry_client *c, const struct h_cluster *cl, const ferry_id *id,
                      unsigned mask)
{
    int status = 1;
    H_OK(ferry_fetch(c, id, 1, 60000, &status));
    assert_statuses_ok(&status, 1);
    h_assert_where(c, cl, id, mask, H_CLUSTER_MS);
}

/* With ferryd --split-min, an object that several nodes hold comes in ranges from all of them
 * at once (each sends one range) and arrives bit-exact and checked against the record; one
 * that a single node holds, or smaller than the limit, comes whole from one. */
H_CLUSTER_TEST(objects_several_nodes_hold_come_in_ranges_from_all_of_them)
{
    const char *const split[] = {"--split-min", "1M", NULL};
    h_cluster_start(cl, 4, "256M", split);
    ferry_client *c[4];
    ferry_stats s0[4], s1[4];
    ferry_id big = h_idf("split-big"), small = h_idf("split-small");
    for (int i = 0; i < 4; i++)
        c[i] = h_node_connect(cl, i);
    H_OK(h_put_direct(c[B], &big, 48 * MIB, 64));
    H_OK(h_put_direct(c[B], &small, 512 * 1024, 0));
    h_assert_where(c[A], cl, &big, BIT(B), H_CLUSTER_MS);
    for (int i = 0; i < 4; i++)
        s0[i] = h_stats(c[i]);
    fetch_one(c[C], cl, &big, BIT(B) | BIT(C));          /* one holder: whole */
    fetch_one(c[D], cl, &big, BIT(B) | BIT(C) | BIT(D)); /* two: a range from each */
    fetch_one(c[C], cl, &small, BIT(B) | BIT(C));
    fetch_one(c[A], cl, &big, BIT(A) | BIT(B) | BIT(C) | BIT(D)); /* three */
    fetch_one(c[A], cl, &small, BIT(A) | BIT(B) | BIT(C));        /* below the limit: whole */
    h_assert_object(c[A], &big, 48 * MIB, 64);
    h_assert_object(c[D], &big, 48 * MIB, 64);
    h_assert_object(c[A], &small, 512 * 1024, 0);
    for (int i = 0; i < 4; i++)
        s1[i] = h_stats(c[i]);
    assert_int_equal(s1[C].split_fetches - s0[C].split_fetches, 0);
    assert_int_equal(s1[D].split_fetches - s0[D].split_fetches, 1);
    /* 8 ranges per holder (engine_int.h: ENGINE_SPLIT_PER_HOLDER), dealt in turn. */
    assert_int_equal(s1[D].ranges_in - s0[D].ranges_in, 16);
    assert_int_equal(s1[A].split_fetches - s0[A].split_fetches, 1);
    assert_int_equal(s1[A].ranges_in - s0[A].ranges_in, 24);
    assert_int_equal(s1[A].transfers_in - s0[A].transfers_in, 2);
    uint64_t moved =
        s1[A].ranges_moved - s0[A].ranges_moved + s1[D].ranges_moved - s0[D].ranges_moved;
    uint64_t out[4];
    for (int i = 0; i < 4; i++)
        out[i] = s1[i].ranges_out - s0[i].ranges_out;
    if (moved == 0) {
        /* B and C sent 8 ranges each to D, then to A; D 8 to A. */
        assert_int_equal(out[B], 16);
        assert_int_equal(out[C], 16);
        assert_int_equal(out[D], 8);
        for (int i = 0; i < 4; i++)
            assert_int_equal(s1[i].transfer_failures, s0[i].transfer_failures);
    } else {
        /* A holder not reached within the connect timer (a starved machine): its ranges went
         * to the others, as they must, and the deal above could not hold. The move had a
         * counted cause, and every range was still sent (a range cut midway counts twice). */
        uint64_t failed = s1[A].transfer_failures - s0[A].transfer_failures +
                          s1[D].transfer_failures - s0[D].transfer_failures;
        assert_true(failed >= 1);
        assert_true(moved <= 16 + 24);
        assert_true(out[B] + out[C] + out[D] >= 16 + 24);
        printf("%llu ranges moved to another holder; sent by B, C, D: %llu, %llu, %llu\n",
               (unsigned long long)moved, (unsigned long long)out[B], (unsigned long long)out[C],
               (unsigned long long)out[D]);
    }
    for (int i = 0; i < 4; i++)
        ferry_disconnect(c[i]);
}

/* In a child of this process (its own connection to d): writes one byte through a pointer
 * into a sealed object of id, the way a C program that casts const away would: through a get's
 * pointer (through_create 0), or through the creator's pointer kept past the seal of a new
 * object id made of size patterned bytes (1). Returns how the child ended (a wait status). */
static int write_in_child(const struct ferryd *d, const ferry_id *id, int through_create,
                          uint64_t size)
{
    int status = 0;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        ferry_client *c = NULL;
        ferry_buffer b;
        uint8_t *p;
        signal(SIGSEGV, SIG_DFL); /* not cmocka's handler: the fault is the child's end */
        if (ferry_connect(d->sock, &c) < 0)
            _exit(2);
        if (through_create) {
            if (ferry_create(c, id, size, NULL, 0, &p) < 0)
                _exit(3);
            h_fill(p, size, h_seed(id));
            if (ferry_seal(c, id) < 0)
                _exit(4);
        } else {
            if (ferry_get(c, id, 1, 0, &b) < 0)
                _exit(5);
            p = (uint8_t *)b.data;
        }
        p[size / 2] ^= 0xff; /* must fault: the bytes are sealed */
        _exit(0);
    }
    assert_true(h_wait_exit(pid, 10000, &status));
    return status;
}

/* Sealed bytes are read-only in every client, enforced by the MMU: a write through a get's
 * pointer cast to writable, and one through the creator's pointer after the seal, kill the
 * writer with SIGSEGV and change nothing; every other client, and a node that fetches the
 * objects afterwards, sees the bytes sealed. */
H_CLUSTER_TEST(writes_to_sealed_bytes_fault_and_change_nothing_anywhere)
{
    enum { SIZE = 3 * MIB + 5 };
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id ids[2] = {h_id("cast-const"), h_id("after-seal")};
    ferry_buffer out[2];
    int st;

    H_OK(h_put_direct(a, &ids[0], SIZE, 0));
    st = write_in_child(&cl->node[A].d, &ids[0], 0, SIZE);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    st = write_in_child(&cl->node[A].d, &ids[1], 1, SIZE);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    H_OK(ferry_get(a, ids, 2, 0, out));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(h_check(out[i].data, SIZE, h_seed(&ids[i])), -1);
        H_OK(ferry_release(a, &ids[i]));
    }
    H_OK(ferry_get_fetch(b, ids, 2, 10000, out));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(h_check(out[i].data, SIZE, h_seed(&ids[i])), -1);
        H_OK(ferry_release(b, &ids[i]));
    }
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* The arena of node i mapped writable through the daemon's own descriptor, as a local user
 * who kept the descriptor HELLO passes could map it: *size is its length. */
static uint8_t *arena_writable(const struct h_cluster *cl, int i, size_t *size)
{
    char dir[64], path[384], target[128];
    struct dirent *de;
    uint8_t *p = NULL;
    DIR *d;

    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)cl->node[i].d.pid);
    assert_non_null(d = opendir(dir));
    while (!p && (de = readdir(d))) {
        ssize_t n;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if ((n = readlink(path, target, sizeof(target) - 1)) <= 0)
            continue;
        target[n] = '\0';
        if (strncmp(target, "/memfd:ferry-arena", 18) != 0)
            continue;
        int fd = open(path, O_RDWR);
        struct stat st;
        assert_true(fd >= 0 && fstat(fd, &st) == 0);
        *size = (size_t)st.st_size;
        p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        assert_true(p != MAP_FAILED);
        close(fd);
    }
    closedir(d);
    assert_non_null(p);
    return p;
}

/* Where in its arena the object id lies on c's node: the offset of a get's pointer in the
 * mapping of this process that holds it (/proc/self/maps: its start and file offset). */
static uint64_t arena_offset(ferry_client *c, const ferry_id *id)
{
    ferry_buffer b;
    char line[512];
    uint64_t off = UINT64_MAX;
    FILE *f;

    H_OK(ferry_get(c, id, 1, 0, &b));
    assert_non_null(f = fopen("/proc/self/maps", "r"));
    while (off == UINT64_MAX && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi, foff;
        if (sscanf(line, "%lx-%lx %*s %lx", &lo, &hi, &foff) == 3 && (uintptr_t)b.data >= lo &&
            (uintptr_t)b.data < hi)
            off = (uintptr_t)b.data - lo + foff;
    }
    fclose(f);
    H_OK(ferry_release(c, id));
    assert_true(off != UINT64_MAX);
    return off;
}

/* A copy rewritten after its seal through a writable mapping of the arena (a local user with
 * its descriptor) is never sealed by another node: checking is the default, the receiver
 * refuses the chunk and tells the holder, which finds its copy unlike its own digest and
 * drops it (rewritten_after_seal, withdrawn). With another holder, the ranges of the bad one
 * move to it and the object arrives bit-exact. */
H_CLUSTER_TEST(a_copy_rewritten_after_its_seal_is_refused_and_dropped_by_its_holder)
{
    const char *const split[] = {"--split-min", "1M", NULL};
    h_cluster_start(cl, 3, "128M", split);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B), *c = h_node_connect(cl, C);
    ferry_id lone = h_id("rewritten-lone"), shared = h_id("rewritten-shared");
    size_t size = 0;
    uint8_t *arena = arena_writable(cl, A, &size);
    ferry_buffer out;
    int status = 1;

    H_OK(h_put_direct(a, &lone, 3 * MIB + 5, 7));
    H_OK(h_put_direct(a, &shared, 32 * MIB, 0));
    fetch_one(c, cl, &shared, BIT(A) | BIT(C));
    arena[arena_offset(a, &lone) + MIB + 17] ^= 0x01;
    uint64_t at = arena_offset(a, &shared);
    for (uint64_t i = 0; i < 32; i++)
        arena[at + i * MIB + 3] ^= 0x80; /* every chunk: whichever ranges A is dealt fail */

    assert_int_not_equal(ferry_fetch(b, &lone, 1, 3000, &status), 0);
    assert_true(H_WAIT_STAT(a, rewritten_after_seal, 1) == 1);
    assert_false(h_contains(a, &lone));
    assert_false(h_contains(b, &lone));
    assert_true(h_stats(b).chunks_refused >= 1);

    H_OK(ferry_get_fetch(b, &shared, 1, 30000, &out));
    assert_int_equal(h_check(out.data, 32 * MIB, h_seed(&shared)), -1);
    H_OK(ferry_release(b, &shared));
    assert_true(H_WAIT_STAT(a, rewritten_after_seal, 2) == 2);
    assert_true(h_stats(b).ranges_moved >= 1);
    h_assert_where(b, cl, &shared, BIT(B) | BIT(C), H_CLUSTER_MS);
    munmap(arena, size);
    ferry_disconnect(a);
    ferry_disconnect(b);
    ferry_disconnect(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, h_cluster_setup, h_cluster_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(nodes_lists_every_node_and_marks_itself),
        T(fetch_copies_objects_of_every_shape),
        T(fetch_of_many_ids_in_one_call),
        T(get_fetch_returns_the_bytes),
        T(fetch_waits_for_objects_sealed_later),
        T(fetch_of_an_id_nobody_holds_times_out),
        T(concurrent_fetches_of_one_id_make_one_transfer),
        T(fetch_with_verify_delivers_intact_objects),
        T(spilled_objects_are_fetched_and_served_again_after_a_restart),
        T(objects_several_nodes_hold_come_in_ranges_from_all_of_them),
        T(writes_to_sealed_bytes_fault_and_change_nothing_anywhere),
        T(a_copy_rewritten_after_its_seal_is_refused_and_dropped_by_its_holder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
