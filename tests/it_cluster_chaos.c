/*
 * it_cluster_chaos.c - a bounded chaos run over real ferryd nodes and a real Redis: step after
 * step, node A fetches an object from another node while something is killed with -9 (a local
 * client in the middle of its work, the holder, or Redis), in an order drawn from a seed
 * (FERRY_CHAOS_SEED, printed). Throughout, A answers `ferry stat` within its connection's
 * timeout (H_STAT_TIMEOUT_MS, 2 s) and every fetch
 * ends within its timeout, bit-exact when it succeeds; at the end every node is serving,
 * killed clients left nothing behind, and (teardown) every daemon exits cleanly, which under
 * ASan includes its leak check. Bounded by STEPS and by TIME_MS.
 */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { A, B, C, NODES };
#define BIT(i) (1u << (i))
#define ALL (BIT(A) | BIT(B) | BIT(C))
#define MIB (1024u * 1024u)
#define STEPS 60
#define TIME_MS 60000
#define FETCH_TIMEOUT 15000

enum event { KILL_CLIENT, KILL_HOLDER, KILL_REDIS, EVENTS };
static const char *const event_name[EVENTS] = {"client", "holder", "redis"};

struct chaos {
    struct h_cluster *cl;
    unsigned seed;
    int events[EVENTS];
    int done, failed, codes[64]; /* fetch outcomes; codes by -rc */
    int64_t worst_stat, worst_fetch;
};

/* A client's work, in a forked child killed in the middle of it: puts, gets held and not
 * released, a fetch; never touches cmocka. */
static void client_work(const char *sock, unsigned seed)
{
    ferry_client *c = NULL;
    if (ferry_connect(sock, &c) < 0)
        _exit(0);
    for (int i = 0; i < 1000; i++) {
        ferry_id id = h_idf("chaos-client-%u-%d", seed, i);
        ferry_buffer b;
        (void)h_put_direct(c, &id, 1 + (uint64_t)(rand_r(&seed) % (256 * 1024)), 16);
        (void)ferry_get(c, &id, 1, 0, &b); /* kept: the daemon must drop it with the client */
        ferry_id open = h_idf("chaos-unsealed-%u-%d", seed, i);
        uint8_t *p;
        (void)ferry_create(c, &open, 4096, NULL, 0, &p); /* never sealed: the daemon aborts it */
    }
    _exit(0);
}

static void kill_client(struct chaos *ch, int node)
{
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork failed");
    if (pid == 0)
        client_work(ch->cl->node[node].d.sock, ch->seed);
    h_sleep_ms(5 + (int)(rand_r(&ch->seed) % 50));
    kill(pid, SIGKILL);
    int status;
    if (!h_wait_exit(pid, H_EVENT_MS, &status))
        fail_msg("a killed client did not go");
}

/* One step: holder (B or C) puts an object, A fetches it while ev happens. */
static void step(struct chaos *ch, ferry_client *a, int n, enum event ev)
{
    struct h_cluster *cl = ch->cl;
    int holder = B + (int)(rand_r(&ch->seed) % 2);
    uint64_t size = 1 + (uint64_t)(rand_r(&ch->seed) % (24 * MIB));
    ferry_id id = h_idf("chaos-%u-%d", ch->seed, n);
    ferry_client *h = h_node_connect(cl, holder), *fa = h_node_connect(cl, A);

    H_OK(h_put_direct(h, &id, size, 64));
    h_assert_where(a, cl, &id, BIT(holder), H_CLUSTER_MS);
    struct h_fetch f;
    int status = 1;
    h_fetch_start(&f, fa, &id, 1, FETCH_TIMEOUT, &status);
    h_sleep_ms((int)(rand_r(&ch->seed) % 12)); /* before, during or after the transfer */
    if (ev == KILL_CLIENT)
        kill_client(ch, (int)(rand_r(&ch->seed) % NODES));
    else if (ev == KILL_HOLDER)
        h_node_kill(cl, holder);
    else
        h_redis_kill(&cl->redis);
    ferry_disconnect(h);
    int64_t took = h_stat_while_fetching(a, &f);
    h_fetch_join(&f, 5000);
    ferry_disconnect(fa);
    printf("step %d: %s killed, fetch of %llu bytes from node %d: %s in %lld ms\n", n,
           event_name[ev], (unsigned long long)size, holder,
           f.rc == FERRY_OK ? "done" : ferry_strerror(f.rc), (long long)f.elapsed_ms);
    if (f.elapsed_ms > FETCH_TIMEOUT + 1000)
        fail_msg("step %d: the fetch took %lld ms (timeout %d)", n, (long long)f.elapsed_ms,
                 FETCH_TIMEOUT);
    ch->worst_stat = took > ch->worst_stat ? took : ch->worst_stat;
    ch->worst_fetch = f.elapsed_ms > ch->worst_fetch ? f.elapsed_ms : ch->worst_fetch;
    if (f.rc == FERRY_OK) {
        ch->done++;
        h_assert_object(a, &id, size, 64);
    } else {
        ch->failed++;
        ch->codes[-f.rc < 64 ? -f.rc : 63]++;
    }
    if (h_contains(a, &id))
        H_OK(ferry_delete(a, &id));
    ch->events[ev]++;
    /* Back to a whole cluster for the next step. */
    if (ev == KILL_HOLDER)
        h_node_start(cl, holder, "128M", NULL);
    if (ev == KILL_REDIS)
        h_redis_start(&cl->redis, cl->redis.port);
    h_assert_nodes(a, cl, ALL, H_CLUSTER_MS);
}

/* The first object of c's node that is unsealed or referenced, described in what; 0 if none. */
static int object_in_use(ferry_client *c, char *what, size_t len)
{
    ferry_object_info *objs;
    size_t n;
    int found = 0;
    H_OK(ferry_list(c, &objs, &n));
    for (size_t i = 0; i < n && !found; i++) {
        found = objs[i].state != FERRY_STATE_SEALED || objs[i].refcount;
        snprintf(what, len, "an object of %llu bytes is left %s with %u references",
                 (unsigned long long)objs[i].data_size,
                 objs[i].state == FERRY_STATE_SEALED ? "sealed" : "unsealed", objs[i].refcount);
    }
    ferry_free(objs);
    return found;
}

/* Waits (bounded) until no object of c's node is unsealed or referenced (a cut transfer's
 * object goes once the transport says nothing can still write into it), then deletes them all. */
static void delete_everything(ferry_client *c)
{
    char what[128];
    struct h_wait w;
    for (h_wait_begin(&w, 20000); object_in_use(c, what, sizeof(what));)
        if (!h_wait_next(&w))
            fail_msg("%s", what);
    ferry_object_info *objs;
    size_t n;
    H_OK(ferry_list(c, &objs, &n));
    for (size_t i = 0; i < n; i++)
        H_OK(ferry_delete(c, &objs[i].id));
    ferry_free(objs);
}

H_CLUSTER_TEST(random_kills_never_stop_the_cluster)
{
    struct chaos ch = {.cl = cl};
    const char *s = getenv("FERRY_CHAOS_SEED");
    ch.seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)h_now_ms();
    printf("chaos seed %u (FERRY_CHAOS_SEED=%u reruns it)\n", ch.seed, ch.seed);

    h_cluster_start(cl, NODES, "128M", NULL);
    ferry_client *a = h_node_connect(cl, A);
    uint64_t base = h_object_bytes(a);
    int64_t t0 = h_now_ms();
    int n = 0;
    for (; n < STEPS && h_now_ms() - t0 < TIME_MS; n++)
        step(&ch, a, n, (enum event)(rand_r(&ch.seed) % EVENTS));

    /* Killed clients left nothing: each node serves only our one client (plus a on A), no
     * object is unsealed or referenced, and once every object is deleted A's arena holds what
     * it held before the run (no cut transfer left behind). */
    for (int i = 0; i < NODES; i++) {
        ferry_client *c = h_node_connect(cl, i);
        assert_int_equal(H_WAIT_STAT(c, clients, i == A ? 2 : 1), i == A ? 2 : 1);
        ferry_disconnect(c);
    }
    delete_everything(a);
    struct h_wait w;
    for (h_wait_begin(&w, 20000); h_object_bytes(a) != base;)
        if (!h_wait_next(&w))
            fail_msg("A's arena holds %llu bytes of objects, %llu before the run",
                     (unsigned long long)h_object_bytes(a), (unsigned long long)base);
    printf("chaos: %d steps in %lld ms: %d clients, %d holders, %d Redis killed; fetches %d "
           "done, %d failed (",
           n, (long long)(h_now_ms() - t0), ch.events[KILL_CLIENT], ch.events[KILL_HOLDER],
           ch.events[KILL_REDIS], ch.done, ch.failed);
    for (int i = 0; i < 64; i++)
        if (ch.codes[i])
            printf(" %s: %d", ferry_strerror(-i), ch.codes[i]);
    printf(" ); slowest stat %lld ms, slowest fetch %lld ms\n", (long long)ch.worst_stat,
           (long long)ch.worst_fetch);
    assert_true(n >= 6);
    ferry_disconnect(a);
}

#define T(f) cmocka_unit_test_setup_teardown(f, h_cluster_setup, h_cluster_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(random_kills_never_stop_the_cluster),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
