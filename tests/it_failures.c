/*
 * it_failures.c - clients that go away: a client killed with SIGKILL (a forked child) or
 * disconnected loses every reference and its unsealed objects are aborted at once, its
 * staging area is freed, and the daemon keeps serving; a client killed while blocked in a
 * get or while subscribed leaves nothing behind. A daemon that goes away under a batched put
 * fails every item of it.
 */
#include "harness.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int setup(void **state)
{
    return h_setup(state, "64M", NULL);
}

/* A forked child that runs a script against the daemon, reports readiness on a pipe and
 * then blocks until it is killed (or the test process goes away). */
struct child {
    pid_t pid;
    int ready; /* read end: the child writes 'R' when set up, 'F' on failure */
    int hold;  /* write end: the child waits for it to close */
};

typedef int (*child_script)(ferry_client *c);

/* In the child: script before readiness is reported, then (if not NULL) after it. */
static void child_run(const struct ferryd *d, child_script script, child_script then, int ready,
                      int hold)
{
    /* only its own pipes: inherited ones (the parent's client, other children's pipes)
     * would keep things open after their owners are gone */
    for (int fd = 3; fd < 1024; fd++)
        if (fd != ready && fd != hold)
            close(fd);
    ferry_client *c = NULL;
    char verdict = 'F';
    if (ferry_connect(d->sock, &c) == FERRY_OK && script(c) == 0)
        verdict = 'R';
    if (write(ready, &verdict, 1) != 1)
        _exit(2);
    if (then)
        then(c);
    char byte;
    while (read(hold, &byte, 1) < 0 && errno == EINTR)
        ;
    _exit(0);
}

static void child_start(const struct ferryd *d, struct child *ch, child_script script,
                        child_script then)
{
    int ready[2], hold[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(hold), 0);
    ch->pid = fork();
    assert_true(ch->pid >= 0);
    if (ch->pid == 0) {
        close(ready[0]);
        close(hold[1]);
        child_run(d, script, then, ready[1], hold[0]);
    }
    close(ready[1]);
    close(hold[0]);
    ch->ready = ready[0];
    ch->hold = hold[1];
}

/* Waits (bounded) for the child's verdict: fails unless it is 'R'. */
static void child_wait_ready(const struct child *ch)
{
    struct pollfd pfd = {.fd = ch->ready, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, H_START_MS), 1);
    char verdict = 0;
    assert_int_equal(read(ch->ready, &verdict, 1), 1);
    if (verdict != 'R')
        fail_msg("the child client failed to set up (verdict '%c')", verdict);
}

static void child_kill(struct child *ch)
{
    int status;
    assert_int_equal(kill(ch->pid, SIGKILL), 0);
    assert_true(h_wait_exit(ch->pid, H_START_MS, &status));
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(ch->ready);
    close(ch->hold);
}

/* In the child: two unsealed objects, references to s1 (twice) and s2, a staging area and
 * one sealed object of its own. */
static int script_hold_things(ferry_client *c)
{
    ferry_id u1, u2, s[3], put;
    uint8_t *data, small[16] = {1};
    ferry_buffer out[3];
    if (ferry_id_parse("u1", &u1) || ferry_id_parse("u2", &u2) || ferry_id_parse("s1", &s[0]) ||
        ferry_id_parse("s1", &s[1]) || ferry_id_parse("s2", &s[2]) ||
        ferry_id_parse("child-put", &put))
        return -1;
    if (ferry_create(c, &u1, 300000, NULL, 0, &data) != FERRY_OK)
        return -1;
    memset(data, 0x5a, 300000);
    if (ferry_create(c, &u2, 0, "meta", 4, &data) != FERRY_OK)
        return -1;
    if (ferry_get(c, s, 3, 0, out) != FERRY_OK)
        return -1;
    return ferry_put(c, &put, small, sizeof(small), NULL, 0) == FERRY_OK ? 0 : -1;
}

static uint32_t refcount_of(ferry_client *c, const char *name)
{
    ferry_id id = h_id(name);
    ferry_object_info info;
    if (!h_list_find(c, &id, &info))
        fail_msg("%s is not listed", name);
    return info.refcount;
}

static int listed(ferry_client *c, const char *name)
{
    ferry_id id = h_id(name);
    ferry_object_info info;
    return h_list_find(c, &id, &info);
}

/* The state a client holding things left behind once it is gone: nothing but its sealed
 * object; ids, references, staging and bytes all given back. */
static void check_client_cleaned_up(ferry_client *a, uint64_t bytes_before, uint64_t aborted)
{
    assert_int_equal(H_WAIT_STAT(a, clients, 1), 1);
    assert_int_equal(H_WAIT_STAT(a, staging_bytes, 0), 0);
    assert_int_equal(refcount_of(a, "s1"), 0);
    assert_int_equal(refcount_of(a, "s2"), 0);
    assert_false(listed(a, "u1"));
    assert_false(listed(a, "u2"));
    ferry_stats s = h_stats(a);
    assert_int_equal(s.aborted_objects, aborted + 2);
    assert_int_equal(s.used_bytes, bytes_before + 64); /* child-put remains */
    ferry_id u1 = h_id("u1");
    uint8_t *data;
    H_OK(ferry_create(a, &u1, 10, NULL, 0, &data)); /* the id is free */
    H_OK(ferry_abort(a, &u1));
    uint64_t freed = 0; /* unreferenced now, so all three can be evicted */
    H_OK(ferry_evict(a, UINT64_MAX, &freed));
    assert_int_equal(freed, 100032 + 200000 + 64);
}

static ferry_client *holder_setup(struct ferryd *d, uint64_t *bytes, uint64_t *aborted)
{
    ferry_client *a = h_connect(d);
    ferry_id s1 = h_id("s1"), s2 = h_id("s2");
    H_OK(h_put_direct(a, &s1, 100000, 0));
    H_OK(h_put_direct(a, &s2, 200000, 0));
    assert_int_equal(H_WAIT_STAT(a, clients, 1), 1);
    *bytes = h_object_bytes(a);
    *aborted = h_stats(a).aborted_objects;
    return a;
}

static void check_holder_holds(ferry_client *a)
{
    ferry_stats s = h_stats(a);
    assert_int_equal(s.clients, 2);
    assert_true(s.staging_bytes > 0);
    assert_int_equal(refcount_of(a, "s1"), 2);
    assert_int_equal(refcount_of(a, "s2"), 1);
    assert_int_equal(refcount_of(a, "u1"), 1);
    assert_int_equal(refcount_of(a, "u2"), 1);
}

/* kill -9 of a client: its references and unsealed objects go at once. */
H_TEST(killed_client_loses_references_and_unsealed_objects)
{
    uint64_t bytes, aborted;
    ferry_client *a = holder_setup(d, &bytes, &aborted);
    struct child ch;
    child_start(d, &ch, script_hold_things, NULL);
    child_wait_ready(&ch);
    check_holder_holds(a);
    child_kill(&ch);
    check_client_cleaned_up(a, bytes, aborted);
    ferry_disconnect(a);
}

/* ferry_disconnect does the same for a live client. */
H_TEST(disconnected_client_loses_references_and_unsealed_objects)
{
    uint64_t bytes, aborted;
    ferry_client *a = holder_setup(d, &bytes, &aborted);
    ferry_client *b = h_connect(d);
    assert_int_equal(script_hold_things(b), 0);
    check_holder_holds(a);
    ferry_disconnect(b);
    check_client_cleaned_up(a, bytes, aborted);
    ferry_disconnect(a);
}

static int script_nothing(ferry_client *c)
{
    (void)c;
    return 0;
}

/* Blocks in a get (30 s) of an object nobody has created yet. */
static int script_block_in_get(ferry_client *c)
{
    ferry_id id;
    ferry_buffer b;
    if (ferry_id_parse("later", &id) != FERRY_OK)
        return -1;
    return ferry_get(c, &id, 1, 30000, &b);
}

/* A client killed while blocked in a get: the later seal (which would wake it) and every
 * other client are unaffected. */
H_TEST(client_killed_while_blocked_in_get_leaves_nothing_behind)
{
    ferry_client *a = h_connect(d);
    assert_int_equal(H_WAIT_STAT(a, clients, 1), 1);
    struct child ch;
    child_start(d, &ch, script_nothing, script_block_in_get);
    child_wait_ready(&ch);
    assert_int_equal(H_WAIT_STAT(a, gets, 1), 1); /* the child is waiting */
    child_kill(&ch);
    assert_int_equal(H_WAIT_STAT(a, clients, 1), 1);
    ferry_id id = h_id("later");
    H_OK(h_put_direct(a, &id, 5000, 5));
    h_assert_object(a, &id, 5000, 5);
    assert_int_equal(refcount_of(a, "later"), 0);
    ferry_disconnect(a);
}

static int script_subscribe(ferry_client *c)
{
    int fd;
    return ferry_subscribe(c, &fd) == FERRY_OK ? 0 : -1;
}

/* A subscriber killed with notifications pending is dropped; seals go on. */
H_TEST(killed_subscriber_is_dropped_and_seals_go_on)
{
    ferry_client *a = h_connect(d);
    struct child ch;
    child_start(d, &ch, script_subscribe, NULL);
    child_wait_ready(&ch);
    assert_int_equal(h_stats(a).subscribers, 1);
    ferry_id first = h_id("before-kill");
    H_OK(h_put_direct(a, &first, 10, 0)); /* a notification pending for the child */
    child_kill(&ch);
    for (int i = 0; i < 20; i++) {
        ferry_id id = h_idf("after-kill-%d", i);
        H_OK(h_put_direct(a, &id, 100, 0));
    }
    assert_int_equal(H_WAIT_STAT(a, subscribers, 0), 0);
    assert_int_equal(H_WAIT_STAT(a, clients, 1), 1);
    ferry_id last = h_idf("after-kill-%d", 19);
    h_assert_object(a, &last, 100, 0);
    ferry_disconnect(a);
}

/* In the child: an unsealed object of its own, references to s1 and s2, a subscription. */
static int script_hold_and_subscribe(ferry_client *c)
{
    char name[64];
    ferry_id own, s[2];
    uint8_t *data;
    ferry_buffer out[2];
    int fd;
    snprintf(name, sizeof(name), "own-%d", (int)getpid());
    if (ferry_id_parse(name, &own) || ferry_id_parse("s1", &s[0]) || ferry_id_parse("s2", &s[1]))
        return -1;
    if (ferry_create(c, &own, 50000, NULL, 0, &data) != FERRY_OK)
        return -1;
    if (ferry_get(c, s, 2, 0, out) != FERRY_OK)
        return -1;
    return ferry_subscribe(c, &fd) == FERRY_OK ? 0 : -1;
}

/* Several clients killed at once, each with an unsealed object, references and a
 * subscription: all cleaned up. */
H_TEST(many_killed_clients_are_all_cleaned_up)
{
    enum { N = 6 };
    uint64_t bytes, aborted;
    ferry_client *a = holder_setup(d, &bytes, &aborted);
    struct child ch[N];
    for (int i = 0; i < N; i++) {
        child_start(d, &ch[i], script_hold_and_subscribe, NULL);
        child_wait_ready(&ch[i]);
    }
    ferry_stats s = h_stats(a);
    assert_int_equal(s.clients, N + 1);
    assert_int_equal(s.objects, N + 2);
    assert_int_equal(refcount_of(a, "s1"), N);
    for (int i = 0; i < N; i++)
        child_kill(&ch[i]);
    assert_int_equal(H_WAIT_STAT(a, clients, 1), 1);
    ferry_id after = h_id("after");
    H_OK(h_put_direct(a, &after, 1, 0)); /* a seal to notify the dead subscribers of */
    assert_int_equal(H_WAIT_STAT(a, subscribers, 0), 0);
    assert_int_equal(refcount_of(a, "s1"), 0);
    assert_int_equal(refcount_of(a, "s2"), 0);
    s = h_stats(a);
    assert_int_equal(s.aborted_objects, aborted + N);
    assert_int_equal(s.objects, 3);
    assert_int_equal(h_object_bytes(a), bytes + 64);
    ferry_disconnect(a);
}

/* Regression: put_many reported the items of a batch whose exchange failed as stored. */
H_TEST(put_many_after_the_daemon_died_fails_every_item)
{
    ferry_client *c = h_connect(d);
    ferry_put_item items[3];
    int statuses[3];
    const char *names[] = {"pm-a", "pm-b", "pm-c"};

    for (int i = 0; i < 3; i++)
        items[i] = (ferry_put_item){.id = h_id(names[i]), .data = "x", .data_size = 1};
    H_OK(ferry_put_many(c, items, 1, statuses)); /* the staging area exists from now on */
    for (int i = 0; i < 3; i++)
        items[i].id = h_id(names[i] + 1);
    h_daemon_kill(d);
    assert_int_equal(ferry_put_many(c, items, 3, statuses), FERRY_ECONN);
    for (int i = 0; i < 3; i++)
        assert_int_equal(statuses[i], FERRY_ECONN);
    ferry_disconnect(c);
}

/* The daemon's limits on subscriptions (server.c). */
#define SUBS_PER_CLIENT 16
#define SUBS_MAX 256
#define SUB_CLIENTS (SUBS_MAX / SUBS_PER_CLIENT)

/* Puts n objects of 1 byte named <prefix>-<i>, in batches. */
static void put_tiny(ferry_client *c, const char *prefix, int n)
{
    static ferry_put_item items[1000];
    static int statuses[1000];
    for (int at = 0; at < n; at += 1000) {
        int k = n - at < 1000 ? n - at : 1000;
        for (int i = 0; i < k; i++)
            items[i] =
                (ferry_put_item){.id = h_idf("%s-%d", prefix, at + i), .data = "x", .data_size = 1};
        H_OK(ferry_put_many(c, items, (size_t)k, statuses));
    }
}

/* One client cannot open more than 16 subscriptions, all clients no more than 256, and the
 * notifications queued for unread ones stay within 64 MiB in all: 256 unread subscriptions
 * and 60,000 seals (555 MiB of notifications) grow the daemon by less than 200 MiB, the
 * furthest behind are cut off, and the daemon goes on serving. */
H_TEST(subscriptions_are_bounded)
{
    ferry_client *c[SUB_CLIENTS + 1];
    int fd, fds[SUBS_MAX], n = 0;
    for (int i = 0; i <= SUB_CLIENTS; i++)
        c[i] = h_connect(d);
    for (int k = 0; k < SUBS_PER_CLIENT; k++)
        H_OK(ferry_subscribe(c[0], &fds[n++]));
    H_RC(ferry_subscribe(c[0], &fd), FERRY_EBUSY);
    assert_non_null(strstr(ferry_errmsg(), "this client's"));
    for (int i = 1; i < SUB_CLIENTS; i++)
        for (int k = 0; k < SUBS_PER_CLIENT; k++)
            H_OK(ferry_subscribe(c[i], &fds[n++]));
    H_RC(ferry_subscribe(c[SUB_CLIENTS], &fd), FERRY_EBUSY);
    assert_non_null(strstr(ferry_errmsg(), "all clients'"));
    ferry_stats s0 = h_stats(c[SUB_CLIENTS]);
    assert_int_equal(s0.subscriptions_refused, 2);
    assert_int_equal(s0.subscribers, SUBS_MAX);

    uint64_t rss0 = h_rss_kib(d->pid);
    put_tiny(c[SUB_CLIENTS], "tiny", 60000);
    uint64_t grew = h_rss_kib(d->pid) - rss0;
    ferry_stats s1 = h_stats(c[SUB_CLIENTS]);
    printf("256 unread subscriptions, 60000 seals: the daemon grew by %llu KiB, %llu "
           "subscribers cut off\n",
           (unsigned long long)grew, (unsigned long long)s1.notifications_dropped);
    assert_true(grew < 200 * 1024);
    assert_true(s1.notifications_dropped >= 1);
    assert_true(s1.subscribers < SUBS_MAX);
    H_OK(ferry_subscribe(c[SUB_CLIENTS], &fd)); /* room again */
    close(fd);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    for (int i = 0; i <= SUB_CLIENTS; i++)
        ferry_disconnect(c[i]);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(killed_client_loses_references_and_unsealed_objects),
        T(disconnected_client_loses_references_and_unsealed_objects),
        T(client_killed_while_blocked_in_get_leaves_nothing_behind),
        T(killed_subscriber_is_dropped_and_seals_go_on),
        T(many_killed_clients_are_all_cleaned_up),
        T(put_many_after_the_daemon_died_fails_every_item),
        T(subscriptions_are_bounded),
    };
    h_rss_asan_quarantine();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
