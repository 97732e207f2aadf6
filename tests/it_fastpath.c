/*
 * it_fastpath.c - gets without the daemon (common/fastidx.h) against a real ferryd: a get of a
 * sealed, resident object takes a slot, not a message; what a client holds that way is never
 * evicted nor freed under it (a delete hides it, its memory stays until the release); a client
 * killed while holding leaves nothing held; FERRY_FASTPATH=0 turns it off.
 */
#include "harness.h"

#include "common/fastidx.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define K900 (900u * 1024u)

static int setup(void **state)
{
    return h_setup(state, "4M", NULL);
}

/* Waits (bounded) until the daemon reports no reference held through slots. */
static void wait_no_fast_refs(ferry_client *c)
{
    struct h_wait w;

    for (h_wait_begin(&w, 5000); h_stat(c, "fast_refs") != 0;)
        if (!h_wait_next(&w))
            fail_msg("references still held through slots: %llu",
                     (unsigned long long)h_stat(c, "fast_refs"));
}

H_TEST(a_get_of_a_resident_object_sends_nothing)
{
    ferry_client *c = h_connect(d);
    ferry_id id = h_id("fast");
    ferry_buffer b;
    uint64_t fast = h_stat(c, "fast_gets"), gets = h_stat(c, "gets");

    H_OK(h_put_direct(c, &id, 4096, 16));
    H_OK(ferry_get(c, &id, 1, 0, &b));
    h_assert_buffer(&b, &id, 4096, 16);
    assert_int_equal(h_stat(c, "fast_gets"), fast + 1);
    assert_int_equal(h_stat(c, "gets"), gets + 1); /* every get counts */
    assert_int_equal(h_stat(c, "fast_refs"), 1);
    ferry_object_info info;
    assert_int_equal(h_list_find(c, &id, &info), 1);
    assert_int_equal(info.refcount, 1); /* ferry ls counts it */
    H_OK(ferry_release(c, &id));
    assert_int_equal(h_stat(c, "fast_refs"), 0);
    H_RC(ferry_release(c, &id), FERRY_EINVAL);
    ferry_disconnect(c);
}

/* ferry_get_fast finds what the shared index has and holds it as ferry_get does; anything
 * else (an id absent, more than 64 ids) is FERRY_ENOENT with nothing held, every entry saying
 * so. It never asks the daemon: only the object found counts as a get (a get sent would
 * count, found or not). */
H_TEST(get_fast_takes_only_what_the_index_has)
{
    ferry_client *c = h_connect(d);
    ferry_id ids[65];
    ferry_buffer b[65];
    uint64_t gets;

    ids[0] = h_id("fast-only");
    H_OK(h_put_direct(c, &ids[0], 4096, 16));
    gets = h_stat(c, "gets");
    H_OK(ferry_get_fast(c, ids, 1, b));
    h_assert_buffer(&b[0], &ids[0], 4096, 16);
    assert_int_equal(h_stat(c, "fast_refs"), 1);
    H_OK(ferry_release(c, &ids[0]));
    ids[1] = h_id("fast-absent");
    H_RC(ferry_get_fast(c, ids, 2, b), FERRY_ENOENT);
    assert_int_equal(b[0].status, FERRY_ENOENT); /* found, but not held: not given either */
    assert_null(b[0].data);
    for (int i = 1; i < 65; i++)
        ids[i] = ids[0];
    H_RC(ferry_get_fast(c, ids, 65, b), FERRY_ENOENT);
    assert_int_equal(h_stat(c, "fast_refs"), 0);
    assert_int_equal(h_stat(c, "gets"), gets + 1);
    H_RC(ferry_release(c, &ids[0]), FERRY_EINVAL);
    ferry_disconnect(c);
}

/* A killed daemon's index stays mapped in its clients: get_fast went on giving what it listed,
 * from a daemon that would never take the references back (issue 38). Now it looks at the
 * socket (at most once per FERRY_ALIVE_CHECK_MS) and fails with FERRY_ECONN, as every call. */
H_TEST(get_fast_fails_once_the_daemon_is_killed)
{
    ferry_client *c = h_connect(d);
    ferry_id id = h_id("of-a-dead-daemon");
    ferry_buffer b;

    H_OK(h_put_direct(c, &id, 4096, 17));
    H_OK(ferry_get_fast(c, &id, 1, &b));
    H_OK(ferry_release(c, &id));
    assert_int_equal(ferry_connected(c), 1);
    h_daemon_kill(d);
    h_sleep_ms(2 * FERRY_ALIVE_CHECK_MS + 1);
    H_RC(ferry_get_fast(c, &id, 1, &b), FERRY_ECONN);
    assert_int_equal(b.status, FERRY_ECONN);
    assert_int_equal(ferry_connected(c), 0);
    ferry_disconnect(c);
}

H_TEST(ferry_fastpath_0_turns_it_off)
{
    ferry_client *c;
    ferry_id id = h_id("slow");
    ferry_buffer b;
    uint64_t fast;

    setenv("FERRY_FASTPATH", "0", 1);
    c = h_connect(d);
    unsetenv("FERRY_FASTPATH");
    fast = h_stat(c, "fast_gets");
    H_OK(h_put_direct(c, &id, 4096, 0));
    H_RC(ferry_get_fast(c, &id, 1, &b), FERRY_ENOSYS);
    assert_int_equal(b.status, FERRY_ENOSYS);
    H_OK(ferry_get(c, &id, 1, 0, &b));
    h_assert_buffer(&b, &id, 4096, 0);
    assert_int_equal(h_stat(c, "fast_gets"), fast);
    H_OK(ferry_release(c, &id));
    ferry_disconnect(c);
}

/* Held through a slot: a delete hides it at once, its bytes stay until the release, then its
 * memory goes; an eviction passes it by. */
H_TEST(what_a_slot_holds_is_neither_freed_nor_evicted)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id held = h_id("held"), gone = h_id("gone"), other;
    ferry_buffer v, w;
    uint64_t before;

    H_OK(h_put_direct(a, &held, K900, 0));
    H_OK(h_put_direct(a, &gone, K900, 0));
    H_OK(ferry_get(a, &held, 1, 0, &v));
    H_OK(ferry_get(a, &gone, 1, 0, &w));
    assert_int_equal(h_stat(a, "fast_refs"), 2);
    H_OK(ferry_delete(b, &gone));
    assert_int_equal(h_contains(b, &gone), 0);
    for (int i = 0; i < 6; i++) { /* 5.4 MiB through a 4 MiB arena: all that can go, goes */
        other = h_idf("filler-%d", i);
        int rc = h_put_direct(b, &other, K900, 0);
        assert_true(rc == 0 || rc == FERRY_ENOSPACE);
    }
    assert_int_equal(h_contains(b, &held), 1);
    h_assert_buffer(&v, &held, K900, 0);
    h_assert_buffer(&w, &gone, K900, 0);
    assert_true(h_stat(b, "fast_adopted") >= 1);
    before = h_object_bytes(b);
    H_OK(ferry_release(a, &gone));
    H_OK(ferry_release(a, &held));
    wait_no_fast_refs(b);
    h_sync(a);
    /* The deleted one's memory went once its slot was clear (the store sweeps each turn). */
    struct h_wait t;
    for (h_wait_begin(&t, 5000); h_object_bytes(b) > before - K900;)
        if (!h_wait_next(&t))
            fail_msg("the deleted object's memory stayed: %llu bytes held, %llu before",
                     (unsigned long long)h_object_bytes(b), (unsigned long long)before);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* The entry an id probes first in a 4 MiB arena's index (its 4096 entries: fastidx.h). */
static uint32_t first_entry(const ferry_id *id)
{
    uint64_t h;

    memcpy(&h, id->bytes, sizeof(h));
    return (uint32_t)h & (FASTIDX_MIN_ENTRIES - 1);
}

/* An object adopted (evicted while a slot held it) and then got through the daemon is not
 * published again under another entry: the sweep would look for the wrong life and free it
 * under its first reader. Another id that probes the same entry first takes the adopted one's
 * old entry, so that a new publication would land elsewhere. Regression test (review). */
H_TEST(an_adopted_object_got_through_the_daemon_stays_held)
{
    ferry_client *a = h_connect(d), *b;
    ferry_id x = h_id("adopted"), other;
    ferry_buffer v, w;

    setenv("FERRY_FASTPATH", "0", 1);
    b = h_connect(d);
    unsetenv("FERRY_FASTPATH");
    H_OK(h_put_direct(a, &x, K900, 0));
    H_OK(ferry_get(a, &x, 1, 0, &v)); /* through a slot */
    /* Pressure until x's turn to be evicted comes (after its second chance): adopted. */
    for (int i = 0; i < 20 && h_stat(b, "fast_adopted") == 0; i++) {
        other = h_idf("press-%d", i);
        (void)h_put_direct(b, &other, K900, 0);
    }
    assert_true(h_stat(b, "fast_adopted") >= 1);
    ferry_id twin;
    int k = 0;
    do
        twin = h_idf("twin-%d", k++);
    while (first_entry(&twin) != first_entry(&x) && k < 1000000);
    H_OK(h_put_direct(b, &twin, 4096, 0)); /* takes x's old entry */
    H_OK(ferry_get(b, &x, 1, 0, &w));      /* through the daemon */
    H_OK(ferry_release(b, &x));
    h_sync(b);
    for (int i = 20; i < 30; i++) { /* more pressure: x must stay while a holds it */
        other = h_idf("press-%d", i);
        (void)h_put_direct(b, &other, K900, 0);
    }
    h_assert_buffer(&v, &x, K900, 0);
    H_OK(ferry_release(a, &x));
    wait_no_fast_refs(b);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A client killed while it holds objects through slots: its block is cleared, nothing stays
 * held, and a deleted object it held is freed. */
H_TEST(a_killed_client_leaves_nothing_held)
{
    ferry_client *c = h_connect(d);
    ferry_id id = h_id("orphan");
    int ready[2], status;
    pid_t pid;
    char x;

    H_OK(h_put_direct(c, &id, K900, 0));
    assert_int_equal(pipe(ready), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ferry_client *k;
        ferry_buffer b;
        if (ferry_connect(d->sock, &k) < 0 || ferry_get(k, &id, 1, 0, &b) < 0)
            _exit(2);
        (void)!write(ready[1], "h", 1);
        pause();
        _exit(0);
    }
    close(ready[1]);
    assert_int_equal(read(ready[0], &x, 1), 1);
    close(ready[0]);
    assert_int_equal(h_stat(c, "fast_refs"), 1);
    H_OK(ferry_delete(c, &id));
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    wait_no_fast_refs(c);
    ferry_disconnect(c);
}

/* ---- the stress test ---- */

#define S_IDS 24u
#define S_SIZE (256u << 10)
#define S_READERS 3
#define S_THREADS 2
#define S_SECONDS 2

static int setup_12m(void **state)
{
    return h_setup(state, "12M", NULL);
}

/* Object i's data in its life `life` (its 8 bytes of metadata say which). */
static uint32_t s_seed(uint32_t i, uint64_t life)
{
    return (uint32_t)(i * 2654435761u) ^ (uint32_t)(life * 40503u);
}

struct s_reader {
    const char *sock;
    uint64_t reads, bad;
};

/* A reader thread: gets random ids on a connection of its own, checks every byte against the
 * life its metadata names while it holds the object, releases; until the deadline. */
static void *s_read(void *arg)
{
    struct s_reader *r = arg;
    ferry_client *c;
    uint32_t x = (uint32_t)getpid() * 7919u + (uint32_t)(uintptr_t)&c;
    int64_t end = h_now_ms() + S_SECONDS * 1000;

    if (ferry_connect(r->sock, &c) < 0)
        return NULL;
    while (h_now_ms() < end) {
        uint64_t life;
        ferry_buffer b;
        x = x * 1103515245u + 12345u;
        uint32_t i = (x >> 8) % S_IDS;
        ferry_id id = h_idf("s-%u", i);
        if (ferry_get(c, &id, 1, 0, &b) < 0)
            continue;
        if (b.metadata_size != sizeof(life) || b.data_size != S_SIZE) {
            r->bad++;
        } else {
            memcpy(&life, b.metadata, sizeof(life));
            r->bad += h_check(b.data, S_SIZE, s_seed(i, life)) >= 0;
        }
        r->reads++;
        ferry_release(c, &id);
    }
    ferry_disconnect(c);
    return NULL;
}

/* A reader process: S_THREADS threads; exits 0 when all it read was right (and read some). */
static void s_reader_process(const char *sock)
{
    struct s_reader r[S_THREADS];
    pthread_t t[S_THREADS];
    uint64_t reads = 0, bad = 0;

    for (int k = 0; k < S_THREADS; k++) {
        r[k] = (struct s_reader){.sock = sock};
        if (pthread_create(&t[k], NULL, s_read, &r[k]) != 0)
            _exit(3);
    }
    for (int k = 0; k < S_THREADS; k++) {
        pthread_join(t[k], NULL);
        reads += r[k].reads;
        bad += r[k].bad;
    }
    fprintf(stderr, "reader %d: %llu reads, %llu bad\n", (int)getpid(), (unsigned long long)reads,
            (unsigned long long)bad);
    _exit(bad ? 1 : reads ? 0 : 2);
}

/* Puts object i's next life (deleting the one before): the writer's churn. */
static void s_put(ferry_client *c, uint32_t i, uint64_t life)
{
    ferry_id id = h_idf("s-%u", i);
    uint8_t *data;

    (void)ferry_delete(c, &id);
    if (ferry_create(c, &id, S_SIZE, &life, sizeof(life), &data) < 0)
        return; /* full of held objects for a moment: the next turn tries again */
    h_fill(data, S_SIZE, s_seed(i, life));
    H_OK(ferry_seal(c, &id));
    H_OK(ferry_release(c, &id));
}

/* Readers in several processes and threads get and release random ids without the daemon
 * while it evicts (fillers), deletes and re-creates them under memory pressure; one reader is
 * killed (-9) in the middle. No reader ever sees bytes other than its object's, and afterwards
 * nothing is held and everything can be evicted. */
H_TEST(readers_against_evictions_deletes_and_a_kill)
{
    ferry_client *w = h_connect(d);
    pid_t pids[S_READERS + 1];
    uint64_t life = 1, fills = 0;
    int status;

    for (uint32_t i = 0; i < S_IDS; i++)
        s_put(w, i, life);
    for (int p = 0; p <= S_READERS; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0)
            s_reader_process(d->sock);
    }
    for (int64_t end = h_now_ms() + S_SECONDS * 1000, kill_at = h_now_ms() + 700;
         h_now_ms() < end;) {
        uint32_t i = (uint32_t)(life * 7) % S_IDS;
        s_put(w, i, ++life);
        ferry_id filler = h_idf("s-fill-%llu", (unsigned long long)fills++);
        (void)h_put_direct(w, &filler, S_SIZE, 0); /* evicts the oldest */
        if (kill_at && h_now_ms() >= kill_at) {
            kill(pids[S_READERS], SIGKILL);
            kill_at = 0;
        }
    }
    for (int p = 0; p < S_READERS; p++) {
        assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_int_equal(waitpid(pids[S_READERS], &status, 0), pids[S_READERS]);
    assert_true(WIFSIGNALED(status));
    print_message("%llu lives put, %llu fillers; %llu fast gets, %llu adopted\n",
                  (unsigned long long)life, (unsigned long long)fills,
                  (unsigned long long)h_stat(w, "fast_gets"),
                  (unsigned long long)h_stat(w, "fast_adopted"));
    assert_true(h_stat(w, "fast_gets") > 1000);
    assert_true(h_stat(w, "fast_adopted") > 0); /* the hazard path ran */
    wait_no_fast_refs(w);
    uint64_t freed;
    H_OK(ferry_evict(w, UINT64_MAX, &freed));
    assert_int_equal(h_object_bytes(w), 0); /* nothing held, everything could go */
    ferry_disconnect(w);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(a_get_of_a_resident_object_sends_nothing),
        T(get_fast_takes_only_what_the_index_has),
        T(get_fast_fails_once_the_daemon_is_killed),
        T(ferry_fastpath_0_turns_it_off),
        T(what_a_slot_holds_is_neither_freed_nor_evicted),
        T(a_killed_client_leaves_nothing_held),
        T(an_adopted_object_got_through_the_daemon_stays_held),
        cmocka_unit_test_setup_teardown(readers_against_evictions_deletes_and_a_kill, setup_12m,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
