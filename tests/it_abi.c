/*
 * it_abi.c - what a program built against one release relies on in the next: ferry_stats_get
 * writes no more than the caller's struct (an older, smaller one keeps its canary; a newer,
 * larger one gets 0 past the library's counters), the counters of 0.6.0 stay where they are,
 * the header's version macros are the library's and the daemon's release; and every call is
 * bounded: a stopped daemon (SIGSTOP) fails ferry_stats_get, ferry_get and ferry_connect with
 * FERRY_ETIMEDOUT within the connection's timeout (a get: its own wait plus that), after which
 * the handle fails clearly.
 */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int setup(void **state)
{
    return h_setup(state, "64M", NULL);
}

/* The connection's timeout of the stopped-daemon tests, and how late past it a call may end. */
#define T_TIMEOUT_MS 300
#define T_SLACK_MS 2000

#define CANARY 0x5a5a5a5a5a5a5a5aull

/* ferry_stats as a program built against an older release would have it: its first counters
 * only, then memory of the program's own. */
struct old_stats {
    uint64_t capacity_bytes, used_bytes, staging_bytes, objects;
};

H_TEST(stats_get_writes_no_more_than_an_older_callers_struct)
{
    ferry_client *c = h_connect(d);
    ferry_id id = h_id("abi");
    struct {
        struct old_stats st;
        uint64_t canary[4];
    } mem;
    ferry_stats full;

    H_OK(h_put_direct(c, &id, 1000, 0));
    memset(&mem.st, 0xff, sizeof(mem.st));
    for (int i = 0; i < 4; i++)
        mem.canary[i] = CANARY;
    H_OK(ferry_stats_get(c, (ferry_stats *)&mem.st, sizeof(mem.st)));
    for (int i = 0; i < 4; i++)
        assert_true(mem.canary[i] == CANARY);
    H_OK(ferry_stats_get(c, &full, sizeof(full)));
    assert_true(mem.st.capacity_bytes == full.capacity_bytes && full.capacity_bytes == 64u << 20);
    assert_true(mem.st.objects == 1 && full.objects == 1);
    assert_true(mem.st.used_bytes == full.used_bytes && mem.st.used_bytes >= 1000);
    ferry_disconnect(c);
}

H_TEST(stats_get_zeroes_what_a_newer_callers_struct_has_beyond_the_library)
{
    ferry_client *c = h_connect(d);
    struct {
        ferry_stats st;
        uint64_t future[3]; /* counters of a later release */
        uint64_t canary;
    } mem;

    memset(&mem, 0xff, sizeof(mem));
    mem.canary = CANARY;
    H_OK(ferry_stats_get(c, &mem.st, sizeof(mem.st) + sizeof(mem.future)));
    assert_true(mem.st.capacity_bytes == 64u << 20 && mem.st.clients == 1);
    for (int i = 0; i < 3; i++)
        assert_true(mem.future[i] == 0);
    assert_true(mem.canary == CANARY);
    ferry_disconnect(c);
}

H_TEST(stats_get_refuses_a_size_of_no_whole_counters)
{
    ferry_client *c = h_connect(d);
    ferry_stats st;

    H_RC(ferry_stats_get(c, &st, 0), FERRY_EINVAL);
    H_RC(ferry_stats_get(c, &st, 12), FERRY_EINVAL);
    H_RC(ferry_stats_get(c, NULL, sizeof(st)), FERRY_EINVAL);
    H_OK(ferry_stats_get(c, &st, 8));
    ferry_disconnect(c);
}

/* The counters of release 0.6.0 in order: later ones go after them, never among them. */
static const char *const stats_0_6[] = {"capacity_bytes",
                                        "used_bytes",
                                        "staging_bytes",
                                        "objects",
                                        "sealed_objects",
                                        "clients",
                                        "evicted_objects",
                                        "evicted_bytes",
                                        "created_objects",
                                        "sealed_total",
                                        "aborted_objects",
                                        "deleted_objects",
                                        "gets",
                                        "get_timeouts",
                                        "refused_creates",
                                        "protocol_errors",
                                        "connections_total",
                                        "subscribers",
                                        "notifications_dropped",
                                        "subscriptions_refused",
                                        "connections_opened",
                                        "connections_accepted",
                                        "fetches",
                                        "transfers_in",
                                        "transfers_out",
                                        "transfer_failures",
                                        "split_fetches",
                                        "ranges_in",
                                        "ranges_moved",
                                        "split_fallbacks",
                                        "ranges_out",
                                        "bytes_in",
                                        "bytes_out",
                                        "peer_errors",
                                        "pins_deferred",
                                        "peers_too_slow",
                                        "connections_evicted",
                                        "directory_up",
                                        "directory_lookups",
                                        "directory_cache_hits",
                                        "directory_reconnects",
                                        "id_conflicts",
                                        "deletes_heard",
                                        "directory_cleaned",
                                        "unsigned_entries",
                                        "eager_max",
                                        "evictable_bytes",
                                        "start_time_seconds",
                                        "release",
                                        "metrics_scrapes",
                                        "metrics_refused",
                                        "cluster_node",
                                        "spill_enabled",
                                        "spill_max_bytes",
                                        "spill_disk_bytes",
                                        "spilled_objects",
                                        "spilled_bytes",
                                        "spill_dirty_bytes",
                                        "spill_writes",
                                        "spill_written_bytes",
                                        "spill_write_failures",
                                        "restores",
                                        "restored_bytes",
                                        "restore_wait_us",
                                        "restore_failures",
                                        "creates_waited",
                                        "spill_recovered_objects",
                                        "spill_recovery_dropped"};

static void the_counters_of_0_6_keep_their_places(void **state)
{
    size_t n, frozen = sizeof(stats_0_6) / sizeof(stats_0_6[0]);
    const ferry_stat_field *f = ferry_stat_fields(&n);

    assert_true(n >= frozen);
    assert_true(sizeof(ferry_stats) == n * sizeof(uint64_t));
    for (size_t i = 0; i < frozen; i++) {
        if (strcmp(f[i].name, stats_0_6[i]) != 0 || f[i].offset != i * sizeof(uint64_t))
            fail_msg("counter %zu is %s at offset %zu; 0.6.0 has %s at %zu", i, f[i].name,
                     f[i].offset, stats_0_6[i], i * sizeof(uint64_t));
    }
}

H_TEST(version_macros_are_the_librarys_and_the_daemons)
{
    char text[32];
    ferry_client *c = h_connect(d);

    snprintf(text, sizeof(text), "%d.%d.%d", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR,
             FERRY_VERSION_PATCH);
    assert_string_equal(text, ferry_version());
    assert_true(FERRY_VERSION ==
                FERRY_MAKE_VERSION(FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH));
    assert_true(FERRY_MAKE_VERSION(1, 2, 3) > FERRY_MAKE_VERSION(0, 999, 999));
    assert_true(h_stats(c).release == (uint64_t)FERRY_VERSION);
    ferry_disconnect(c);
}

/* ---- a stopped daemon ---- */

enum call { CALL_STATS, CALL_GET, CALL_CONNECT };

/* One call on its own thread, so that the test bounds its own wait. */
struct bounded {
    enum call what;
    const struct ferryd *d;
    ferry_client *c;
    int64_t get_wait_ms;
    ferry_buffer b;
    int rc;
    char msg[512];
    int64_t took_ms;
    atomic_int done;
};

static void *bounded_main(void *arg)
{
    struct bounded *w = arg;
    ferry_stats st;
    ferry_id id = h_id("never sealed");
    ferry_client *c = NULL;
    int64_t start = h_now_ms();

    if (w->what == CALL_STATS)
        w->rc = ferry_stats_get(w->c, &st, sizeof(st));
    else if (w->what == CALL_GET)
        w->rc = ferry_get(w->c, &id, 1, w->get_wait_ms, &w->b);
    else if ((w->rc = ferry_connect_timeout(w->d->sock, T_TIMEOUT_MS, &c)) == 0)
        ferry_disconnect(c);
    w->took_ms = h_now_ms() - start;
    snprintf(w->msg, sizeof(w->msg), "%s", ferry_errmsg());
    atomic_store(&w->done, 1);
    return NULL;
}

/* Runs w's call with the daemon stopped, waits for it at most its bound plus T_SLACK_MS, then
 * lets the daemon go on (before any check can fail the test). 1 when the call ended in time. */
static int run_stopped(struct ferryd *d, struct bounded *w, int64_t bound_ms)
{
    pthread_t t;
    int64_t start;
    int ended;

    assert_int_equal(kill(d->pid, SIGSTOP), 0);
    assert_int_equal(pthread_create(&t, NULL, bounded_main, w), 0);
    start = h_now_ms();
    while (!atomic_load(&w->done) && h_now_ms() - start < bound_ms + T_SLACK_MS)
        h_sleep_ms(10);
    ended = atomic_load(&w->done);
    kill(d->pid, SIGCONT);
    pthread_join(t, NULL); /* a call that hung ends now that the daemon answers */
    return ended;
}

/* A connection whose calls time out after T_TIMEOUT_MS. Its HELLO is not what these cases are
 * about, and on a loaded machine took longer than that (a full run failed so, before any
 * stop): the connect has the default timeout, and the bound is set after it. */
static void connect_then_bound(struct ferryd *d, ferry_client **c)
{
    H_OK(ferry_connect(d->sock, c));
    H_OK(ferry_set_timeout(*c, T_TIMEOUT_MS));
}

H_TEST(a_stopped_daemon_fails_stats_get_within_the_connections_timeout)
{
    ferry_client *c;
    ferry_object_info *v;
    size_t n;
    struct bounded w = {.what = CALL_STATS};

    connect_then_bound(d, &c);
    w.c = c;
    if (!run_stopped(d, &w, T_TIMEOUT_MS))
        fail_msg("ferry_stats_get on a stopped daemon did not end within %d ms",
                 T_TIMEOUT_MS + T_SLACK_MS);
    if (w.rc != FERRY_ETIMEDOUT || w.took_ms < T_TIMEOUT_MS - 1)
        fail_msg("ferry_stats_get: %d (%s) after %lld ms, expected FERRY_ETIMEDOUT after %d ms",
                 w.rc, w.msg, (long long)w.took_ms, T_TIMEOUT_MS);
    assert_non_null(strstr(w.msg, "STATS"));
    assert_non_null(strstr(w.msg, "300 ms"));
    /* The late reply is never taken for the next one's: the handle is given up. */
    H_RC(ferry_list(c, &v, &n), FERRY_ECONN);
    assert_non_null(strstr(ferry_errmsg(), "STATS"));
    ferry_disconnect(c);
    /* The daemon, going on, serves new clients. */
    c = h_connect(d);
    assert_true(h_stats(c).clients == 1);
    ferry_disconnect(c);
}

H_TEST(a_stopped_daemon_fails_a_get_within_its_wait_plus_the_connections_timeout)
{
    ferry_client *c;
    struct bounded w = {.what = CALL_GET, .get_wait_ms = 200};

    connect_then_bound(d, &c);
    w.c = c;
    if (!run_stopped(d, &w, 200 + T_TIMEOUT_MS))
        fail_msg("ferry_get on a stopped daemon did not end within %d ms",
                 200 + T_TIMEOUT_MS + T_SLACK_MS);
    if (w.rc != FERRY_ETIMEDOUT || w.took_ms < 200 + T_TIMEOUT_MS - 1)
        fail_msg("ferry_get: %d (%s) after %lld ms, expected FERRY_ETIMEDOUT after %d ms", w.rc,
                 w.msg, (long long)w.took_ms, 200 + T_TIMEOUT_MS);
    /* Not an object that was not sealed in time: nothing was learnt, nothing is held. */
    assert_int_equal(w.b.status, FERRY_ECONN);
    assert_null(w.b.data);
    assert_non_null(strstr(w.msg, "GET"));
    ferry_disconnect(c);
}

H_TEST(a_stopped_daemon_fails_a_connect_within_its_timeout)
{
    struct bounded w = {.what = CALL_CONNECT, .d = d};

    if (!run_stopped(d, &w, T_TIMEOUT_MS))
        fail_msg("ferry_connect_timeout to a stopped daemon did not end within %d ms",
                 T_TIMEOUT_MS + T_SLACK_MS);
    if (w.rc != FERRY_ETIMEDOUT)
        fail_msg("ferry_connect_timeout: %d (%s), expected FERRY_ETIMEDOUT", w.rc, w.msg);
    assert_non_null(strstr(w.msg, "HELLO"));
}

H_TEST(timeouts_are_checked)
{
    ferry_client *c = NULL;

    H_RC(ferry_connect_timeout(d->sock, 0, &c), FERRY_EINVAL);
    H_RC(ferry_connect_timeout(d->sock, -2, &c), FERRY_EINVAL);
    assert_null(c);
    c = h_connect(d);
    H_RC(ferry_set_timeout(c, 0), FERRY_EINVAL);
    H_OK(ferry_set_timeout(c, -1));
    H_OK(ferry_set_timeout(c, 1));
    H_OK(ferry_set_timeout(c, FERRY_DEFAULT_TIMEOUT_MS));
    assert_true(h_stats(c).clients == 1);
    ferry_disconnect(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(stats_get_writes_no_more_than_an_older_callers_struct),
        T(stats_get_zeroes_what_a_newer_callers_struct_has_beyond_the_library),
        T(stats_get_refuses_a_size_of_no_whole_counters),
        cmocka_unit_test(the_counters_of_0_6_keep_their_places),
        T(version_macros_are_the_librarys_and_the_daemons),
        T(a_stopped_daemon_fails_stats_get_within_the_connections_timeout),
        T(a_stopped_daemon_fails_a_get_within_its_wait_plus_the_connections_timeout),
        T(a_stopped_daemon_fails_a_connect_within_its_timeout),
        T(timeouts_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
