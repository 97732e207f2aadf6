/*
 * it_fastpath.c - gets without the daemon (common/fastidx.h) against a real ferryd: a get of a
 * sealed, resident object takes a slot, not a message; what a client holds that way is never
 * evicted nor freed under it (a delete hides it, its memory stays until the release); a client
 * killed while holding leaves nothing held; FERRY_FASTPATH=0 turns it off.
 */
#include "harness.h"

#include <signal.h>
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

#define T(name) cmocka_unit_test_setup_teardown(name, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(a_get_of_a_resident_object_sends_nothing),
        T(ferry_fastpath_0_turns_it_off),
        T(what_a_slot_holds_is_neither_freed_nor_evicted),
        T(a_killed_client_leaves_nothing_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
