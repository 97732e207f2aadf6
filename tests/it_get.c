/*
 * it_get.c - blocking gets: timeouts (poll, bounded, forever), wake-up on seal for one and
 * several ids and several waiters, and the objects a timed-out get still holds; a get
 * waiting on an object that is aborted keeps waiting.
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 4

static int setup(void **state)
{
    return h_setup(state, "64M", NULL);
}

/* A ferry_get running in its own thread on its own handle. */
struct getter {
    ferry_client *c;
    ferry_id ids[MAX_IDS];
    size_t n;
    int64_t timeout_ms;
    ferry_buffer out[MAX_IDS];
    int rc;
    int64_t elapsed_ms;
    atomic_int done;
    pthread_t thread;
};

static void *getter_main(void *arg)
{
    struct getter *g = arg;
    int64_t start = h_now_ms();
    g->rc = ferry_get(g->c, g->ids, g->n, g->timeout_ms, g->out);
    g->elapsed_ms = h_now_ms() - start;
    atomic_store(&g->done, 1);
    return NULL;
}

/* Starts a getter of names[0..n) and waits until the daemon has its request (stats.gets).
 * It lives on the heap: after a failed assertion it may outlive the test, and is leaked. */
static struct getter *getter_start(struct ferryd *d, ferry_client *watch, const char *const *names,
                                   size_t n, int64_t timeout_ms)
{
    struct getter *g = calloc(1, sizeof(*g));
    assert_non_null(g);
    g->c = h_connect(d);
    g->n = n;
    g->timeout_ms = timeout_ms;
    for (size_t i = 0; i < n; i++)
        g->ids[i] = h_id(names[i]);
    uint64_t gets = h_stats(watch).gets;
    assert_int_equal(pthread_create(&g->thread, NULL, getter_main, g), 0);
    assert_int_equal(H_WAIT_STAT(watch, gets, gets + 1), gets + 1);
    return g;
}

/* Joins a getter within H_EVENT_MS; a getter still blocked then is a failure, and the
 * daemon is killed to free it. */
static void getter_join(struct ferryd *d, struct getter *g)
{
    struct h_wait w;
    for (h_wait_begin(&w, H_EVENT_MS); !atomic_load(&g->done);)
        if (!h_wait_next(&w))
            break;
    if (!atomic_load(&g->done)) {
        h_print_file(d->log);
        h_daemon_kill(d);
        pthread_join(g->thread, NULL);
        fail_msg("ferry_get did not return within %d ms", H_EVENT_MS);
    }
    pthread_join(g->thread, NULL);
}

/* Releases what the getter holds (processed by the daemon on return) and disconnects it. */
static void getter_finish(struct getter *g)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->out[i].status == FERRY_OK)
            H_OK(ferry_release(g->c, &g->ids[i]));
    h_sync(g->c);
    ferry_disconnect(g->c);
    free(g);
}

/* A poll (timeout 0) of a missing id answers ENOENT (the call and the entry alike), not a
 * timeout, and holds nothing. */
H_TEST(get_poll_of_missing_id_times_out_at_once)
{
    ferry_client *a = h_connect(d);
    const char *names[] = {"missing"};
    struct getter *g = getter_start(d, a, names, 1, 0);
    getter_join(d, g);
    H_RC(g->rc, FERRY_ENOENT);
    assert_int_equal(g->out[0].status, FERRY_ENOENT);
    H_RC(ferry_release(g->c, &g->ids[0]), FERRY_EINVAL);
    ferry_stats s = h_stats(a);
    assert_int_equal(s.gets, 1);
    assert_int_equal(s.get_timeouts, 1);
    getter_finish(g);
    ferry_disconnect(a);
}

/* A 200 ms get of a missing id lasts its timeout, not less, and ends by it. */
H_TEST(get_with_200ms_timeout_waits_its_timeout)
{
    ferry_client *a = h_connect(d);
    const char *names[] = {"missing"};
    struct getter *g = getter_start(d, a, names, 1, 200);
    getter_join(d, g);
    H_RC(g->rc, FERRY_ETIMEDOUT);
    assert_int_equal(g->out[0].status, FERRY_ETIMEDOUT);
    assert_true(g->elapsed_ms >= 195);
    getter_finish(g);
    ferry_disconnect(a);
}

/* A blocked get returns as soon as its object is sealed, with the right content. */
static void check_wake_on_seal(struct ferryd *d, int64_t timeout_ms)
{
    ferry_client *a = h_connect(d);
    const char *names[] = {"later"};
    struct getter *g = getter_start(d, a, names, 1, timeout_ms);
    ferry_id id = h_id("later");
    uint8_t *data;
    H_OK(ferry_create(a, &id, 300000, "m", 1, &data));
    h_fill(data, 300000, 99);
    assert_false(atomic_load(&g->done)); /* unsealed: still waiting */
    H_OK(ferry_seal(a, &id));
    getter_join(d, g);
    H_OK(g->rc); /* woken by the seal: the timeout would have ended it with ETIMEDOUT */
    assert_int_equal(g->out[0].data_size, 300000);
    assert_int_equal(h_check(g->out[0].data, 300000, 99), -1);
    assert_memory_equal(g->out[0].metadata, "m", 1);
    ferry_object_info info;
    assert_true(h_list_find(a, &id, &info));
    assert_int_equal(info.refcount, 2); /* the creator's and the getter's */
    H_OK(ferry_release(a, &id));
    getter_finish(g);
    ferry_disconnect(a);
}

H_TEST(blocked_get_with_timeout_wakes_on_seal)
{
    check_wake_on_seal(d, 5000);
}

H_TEST(blocked_get_without_timeout_wakes_on_seal)
{
    check_wake_on_seal(d, -1);
}

/* A get of three ids, one there and two sealed later, returns all three once both are. */
H_TEST(get_of_three_ids_returns_when_the_last_is_sealed)
{
    ferry_client *a = h_connect(d);
    const char *names[] = {"g-a", "g-b", "g-c"};
    ferry_id ga = h_id("g-a");
    H_OK(h_put_direct(a, &ga, 1000, 1));
    struct getter *g = getter_start(d, a, names, 3, 5000);
    ferry_id gb = h_id("g-b"), gc = h_id("g-c");
    H_OK(h_put_direct(a, &gb, 2000, 2));
    H_OK(h_put_direct(a, &gc, 3000, 3));
    getter_join(d, g);
    H_OK(g->rc); /* woken by the seal: the timeout would have ended it with ETIMEDOUT */
    h_assert_buffer(&g->out[0], &ga, 1000, 1);
    h_assert_buffer(&g->out[1], &gb, 2000, 2);
    h_assert_buffer(&g->out[2], &gc, 3000, 3);
    getter_finish(g);
    ferry_disconnect(a);
}

/* A get that times out with some ids missing still holds the ones it found. */
H_TEST(timed_out_get_holds_the_objects_it_found)
{
    ferry_client *a = h_connect(d);
    const char *names[] = {"f-a", "f-missing", "f-b"};
    ferry_id fa = h_id("f-a"), fb = h_id("f-b");
    H_OK(h_put_direct(a, &fa, 10, 0));
    H_OK(h_put_direct(a, &fb, 20, 0));
    struct getter *g = getter_start(d, a, names, 3, 200);
    getter_join(d, g);
    H_RC(g->rc, FERRY_ETIMEDOUT);
    h_assert_buffer(&g->out[0], &fa, 10, 0);
    assert_int_equal(g->out[1].status, FERRY_ETIMEDOUT);
    h_assert_buffer(&g->out[2], &fb, 20, 0);
    ferry_object_info info;
    assert_true(h_list_find(a, &fa, &info));
    assert_int_equal(info.refcount, 1);
    assert_true(h_list_find(a, &fb, &info));
    assert_int_equal(info.refcount, 1);
    H_RC(ferry_release(g->c, &g->ids[1]), FERRY_EINVAL);
    getter_finish(g); /* releases the two found */
    assert_true(h_list_find(a, &fa, &info));
    assert_int_equal(info.refcount, 0);
    assert_true(h_list_find(a, &fb, &info));
    assert_int_equal(info.refcount, 0);
    assert_int_equal(h_stats(a).get_timeouts, 1);
    ferry_disconnect(a);
}

/* A get waiting on an unsealed object that is aborted waits until its timeout. */
H_TEST(get_waiting_on_aborted_object_times_out)
{
    ferry_client *a = h_connect(d);
    ferry_id id = h_id("doomed");
    uint8_t *data;
    H_OK(ferry_create(a, &id, 100, NULL, 0, &data));
    const char *names[] = {"doomed"};
    struct getter *g = getter_start(d, a, names, 1, 600);
    H_OK(ferry_abort(a, &id));
    getter_join(d, g);
    H_RC(g->rc, FERRY_ETIMEDOUT);
    assert_int_equal(g->out[0].status, FERRY_ETIMEDOUT);
    assert_true(g->elapsed_ms >= 590);
    getter_finish(g);
    ferry_disconnect(a);
}

/* ... and so sees the id when it is created again and sealed. */
H_TEST(get_waiting_on_aborted_object_gets_its_recreation)
{
    ferry_client *a = h_connect(d);
    ferry_id id = h_id("again");
    uint8_t *data;
    H_OK(ferry_create(a, &id, 100, NULL, 0, &data));
    const char *names[] = {"again"};
    struct getter *g = getter_start(d, a, names, 1, 5000);
    H_OK(ferry_abort(a, &id));
    H_OK(h_put_direct(a, &id, 4321, 2));
    getter_join(d, g);
    H_OK(g->rc);
    h_assert_buffer(&g->out[0], &id, 4321, 2);
    getter_finish(g);
    ferry_disconnect(a);
}

/* The creator leaving aborts its object; a get waiting on it keeps waiting and sees the
 * next creation. */
H_TEST(get_waiting_on_object_of_departed_creator_keeps_waiting)
{
    ferry_client *a = h_connect(d), *creator = h_connect(d);
    ferry_id id = h_id("orphan");
    uint8_t *data;
    H_OK(ferry_create(creator, &id, 100, NULL, 0, &data));
    const char *names[] = {"orphan"};
    struct getter *g = getter_start(d, a, names, 1, 5000);
    ferry_disconnect(creator);
    assert_int_equal(H_WAIT_STAT(a, aborted_objects, 1), 1);
    assert_false(atomic_load(&g->done));
    H_OK(h_put_direct(a, &id, 77, 0));
    getter_join(d, g);
    H_OK(g->rc);
    h_assert_buffer(&g->out[0], &id, 77, 0);
    getter_finish(g);
    ferry_disconnect(a);
}

/* One seal wakes every client waiting for the object. */
H_TEST(one_seal_wakes_every_waiting_client)
{
    enum { N = 8 };
    ferry_client *a = h_connect(d);
    const char *names[] = {"shared"};
    struct getter *g[N];
    for (int i = 0; i < N; i++)
        g[i] = getter_start(d, a, names, 1, 5000);
    ferry_id id = h_id("shared");
    H_OK(h_put_direct(a, &id, 65536, 8));
    for (int i = 0; i < N; i++) {
        getter_join(d, g[i]);
        H_OK(g[i]->rc);
        h_assert_buffer(&g[i]->out[0], &id, 65536, 8);
    }
    ferry_object_info info;
    assert_true(h_list_find(a, &id, &info));
    assert_int_equal(info.refcount, N);
    for (int i = 0; i < N; i++)
        getter_finish(g[i]);
    ferry_disconnect(a);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(get_poll_of_missing_id_times_out_at_once),
        T(get_with_200ms_timeout_waits_its_timeout),
        T(blocked_get_with_timeout_wakes_on_seal),
        T(blocked_get_without_timeout_wakes_on_seal),
        T(get_of_three_ids_returns_when_the_last_is_sealed),
        T(timed_out_get_holds_the_objects_it_found),
        T(get_waiting_on_aborted_object_times_out),
        T(get_waiting_on_aborted_object_gets_its_recreation),
        T(get_waiting_on_object_of_departed_creator_keeps_waiting),
        T(one_seal_wakes_every_waiting_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
