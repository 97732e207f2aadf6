/*
 * it_concurrency.c - many clients at once: 32 threads with a handle each put, get, check
 * and delete their own objects, race to create shared ones (exactly one wins, the others
 * wait for its seal) and read each other's; then the store's counts add up and every
 * client is gone. Also threads sharing one handle.
 *
 * Worker threads never call cmocka: they record their first failure, which the test's
 * thread reports after joining them.
 */
#include "harness.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKERS 32
#define ITERS 40
#define KEEP 4 /* the last KEEP own objects of each worker are not deleted */
#define SHARED 16
#define MAX_OWN 65536

static int setup(void **state)
{
    return h_setup(state, "256M", NULL);
}

struct worker {
    int index;
    ferry_client *c;
    uint8_t *buf; /* MAX_OWN + 64 bytes for patterns */
    atomic_int *winners;
    atomic_int done;
    char error[256];
    pthread_t thread;
};

static int wfail(struct worker *w, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int wfail(struct worker *w, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(w->error, sizeof(w->error), "worker %d, line %d: ", w->index, line);
    vsnprintf(w->error + n, sizeof(w->error) - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

#define WCALL(w, expr)                                                                             \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != FERRY_OK)                                                                       \
            return wfail(w, __LINE__, "%s: %s: %s", #expr, ferry_strerror(rc_), ferry_errmsg());   \
    } while (0)

static ferry_id own_id(int worker, int k, uint64_t *size, uint64_t *meta)
{
    char name[64];
    snprintf(name, sizeof(name), "own-%d-%d", worker, k);
    *size = 1 + (uint64_t)(worker * 131 + k * 977) % MAX_OWN;
    *meta = (uint64_t)k % 17;
    ferry_id id;
    ferry_id_parse(name, &id);
    return id;
}

static ferry_id shared_id(int s, uint64_t *size, uint64_t *meta)
{
    char name[64];
    snprintf(name, sizeof(name), "shared-%d", s);
    *size = 1000 + (uint64_t)s * 3000;
    *meta = (uint64_t)s % 5;
    ferry_id id;
    ferry_id_parse(name, &id);
    return id;
}

/* Checks an entry against the pattern of its id; 0 or a recorded failure. */
static int wcheck(struct worker *w, const ferry_buffer *b, const ferry_id *id, uint64_t size,
                  uint64_t meta)
{
    if (b->status != FERRY_OK || b->data_size != size || b->metadata_size != meta)
        return wfail(w, __LINE__, "entry: status %d, sizes %llu+%llu, expected %llu+%llu",
                     b->status, (unsigned long long)b->data_size,
                     (unsigned long long)b->metadata_size, (unsigned long long)size,
                     (unsigned long long)meta);
    if (h_check(b->data, size, h_seed(id)) >= 0 || h_check(b->metadata, meta, ~h_seed(id)) >= 0)
        return wfail(w, __LINE__, "object content differs from what was written");
    return 0;
}

static int get_check_release(struct worker *w, const ferry_id *id, uint64_t size, uint64_t meta,
                             int64_t timeout_ms)
{
    ferry_buffer b;
    WCALL(w, ferry_get(w->c, id, 1, timeout_ms, &b));
    if (wcheck(w, &b, id, size, meta) != 0)
        return -1;
    WCALL(w, ferry_release(w->c, id));
    return 0;
}

static int put_own(struct worker *w, int k)
{
    uint64_t size, meta;
    ferry_id id = own_id(w->index, k, &size, &meta);
    h_fill(w->buf, size, h_seed(&id));
    uint8_t m[32];
    h_fill(m, meta, ~h_seed(&id));
    WCALL(w, ferry_put(w->c, &id, w->buf, size, m, meta));
    if (get_check_release(w, &id, size, meta, 0) != 0)
        return -1;
    if (k < ITERS - KEEP)
        WCALL(w, ferry_delete(w->c, &id));
    return 0;
}

/* Creates shared object s, or, if another client has, waits for it and checks it. */
static int race_shared(struct worker *w, int s)
{
    uint64_t size, meta;
    ferry_id id = shared_id(s, &size, &meta);
    uint8_t m[8], *data;
    h_fill(m, meta, ~h_seed(&id));
    int rc = ferry_create(w->c, &id, size, m, meta, &data);
    if (rc == FERRY_EEXIST)
        return get_check_release(w, &id, size, meta, 10000);
    WCALL(w, rc);
    atomic_fetch_add(&w->winners[s], 1);
    h_fill(data, size, h_seed(&id));
    WCALL(w, ferry_seal(w->c, &id));
    WCALL(w, ferry_release(w->c, &id));
    return 0;
}

static int work(struct worker *w)
{
    for (int k = 0; k < ITERS; k++) {
        if (put_own(w, k) != 0)
            return -1;
        if (k % 4 == 0 && race_shared(w, (k / 4 + w->index) % SHARED) != 0)
            return -1;
    }
    /* the kept objects of the next worker, waiting for them if it is behind */
    int next = (w->index + 1) % WORKERS;
    for (int k = ITERS - KEEP; k < ITERS; k++) {
        uint64_t size, meta;
        ferry_id id = own_id(next, k, &size, &meta);
        if (get_check_release(w, &id, size, meta, 20000) != 0)
            return -1;
    }
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    work(w);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Waits (bounded) for every thread's done flag; kills the daemon to free stuck ones. */
static void join_all(struct ferryd *d, struct worker *w, int n, int timeout_ms)
{
    struct h_wait wait;
    int all = 0;
    for (h_wait_begin(&wait, timeout_ms); !all;) {
        all = 1;
        for (int i = 0; i < n; i++)
            all = all && atomic_load(&w[i].done);
        if (!all && !h_wait_next(&wait))
            break;
    }
    if (!all) {
        h_print_file(d->log);
        h_daemon_kill(d);
    }
    for (int i = 0; i < n; i++)
        pthread_join(w[i].thread, NULL);
    if (!all)
        fail_msg("workers still running after %d ms", timeout_ms);
    for (int i = 0; i < n; i++)
        if (w[i].error[0])
            fail_msg("%s", w[i].error);
}

static void check_final_store(ferry_client *c)
{
    ferry_stats s = h_stats(c);
    assert_int_equal(s.objects, WORKERS * KEEP + SHARED);
    assert_int_equal(s.sealed_objects, WORKERS * KEEP + SHARED);
    assert_int_equal(s.created_objects, WORKERS * ITERS + SHARED);
    assert_int_equal(s.sealed_total, WORKERS * ITERS + SHARED);
    assert_int_equal(s.deleted_objects, WORKERS * (ITERS - KEEP));
    assert_int_equal(s.aborted_objects, 0);
    assert_int_equal(s.evicted_objects, 0);
    assert_int_equal(s.staging_bytes, 0);
    assert_int_equal(s.protocol_errors, 0);
    ferry_object_info *all;
    size_t n;
    H_OK(ferry_list(c, &all, &n));
    assert_int_equal(n, WORKERS * KEEP + SHARED);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(all[i].refcount, 0);
        assert_int_equal(all[i].state, FERRY_STATE_SEALED);
    }
    free(all);
    for (int t = 0; t < WORKERS; t++)
        for (int k = ITERS - KEEP; k < ITERS; k++) {
            uint64_t size, meta;
            ferry_id id = own_id(t, k, &size, &meta);
            h_assert_object(c, &id, size, meta);
        }
    for (int s2 = 0; s2 < SHARED; s2++) {
        uint64_t size, meta;
        ferry_id id = shared_id(s2, &size, &meta);
        h_assert_object(c, &id, size, meta);
    }
}

/* 32 clients at once: contents intact, one winner per shared id, counts exact, all gone. */
H_TEST(thirty_two_clients_put_get_delete_concurrently)
{
    ferry_client *main_client = h_connect(d);
    assert_int_equal(H_WAIT_STAT(main_client, clients, 1), 1);
    static struct worker w[WORKERS];
    static atomic_int winners[SHARED];
    for (int s = 0; s < SHARED; s++)
        atomic_init(&winners[s], 0);
    for (int i = 0; i < WORKERS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].index = i;
        w[i].c = h_connect(d);
        w[i].buf = malloc(MAX_OWN + 64);
        w[i].winners = winners;
        assert_non_null(w[i].buf);
    }
    assert_int_equal(h_stats(main_client).clients, WORKERS + 1);
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
    join_all(d, w, WORKERS, 60000);
    for (int s = 0; s < SHARED; s++)
        if (atomic_load(&winners[s]) != 1)
            fail_msg("shared-%d was created %d times", s, atomic_load(&winners[s]));
    for (int i = 0; i < WORKERS; i++) {
        ferry_disconnect(w[i].c);
        free(w[i].buf);
    }
    assert_int_equal(H_WAIT_STAT(main_client, clients, 1), 1);
    check_final_store(main_client);
    ferry_disconnect(main_client);
}

struct sharer {
    ferry_client *c;
    int index;
    atomic_int done;
    char error[256];
    pthread_t thread;
};

/* put, get, check, release, delete on a handle other threads use at the same time. */
static void *sharer_main(void *arg)
{
    struct sharer *s = arg;
    struct worker w = {.index = s->index, .c = s->c};
    w.buf = malloc(MAX_OWN + 64);
    if (!w.buf)
        snprintf(w.error, sizeof(w.error), "malloc failed");
    for (int k = 0; w.buf && k < ITERS && !w.error[0]; k++)
        put_own(&w, k);
    free(w.buf);
    memcpy(s->error, w.error, sizeof(s->error));
    atomic_store(&s->done, 1);
    return NULL;
}

/* One handle shared by 8 threads: calls are serialised, results are not mixed up. */
H_TEST(threads_sharing_one_handle_get_their_own_results)
{
    enum { N = 8 };
    ferry_client *c = h_connect(d);
    static struct sharer s[N];
    for (int i = 0; i < N; i++) {
        memset(&s[i], 0, sizeof(s[i]));
        s[i].c = c;
        s[i].index = i;
        assert_int_equal(pthread_create(&s[i].thread, NULL, sharer_main, &s[i]), 0);
    }
    struct h_wait wait;
    int all = 0;
    for (h_wait_begin(&wait, 30000); !all && h_wait_next(&wait);) {
        all = 1;
        for (int i = 0; i < N; i++)
            all = all && atomic_load(&s[i].done);
    }
    if (!all)
        h_daemon_kill(d);
    for (int i = 0; i < N; i++)
        pthread_join(s[i].thread, NULL);
    assert_true(all);
    for (int i = 0; i < N; i++)
        if (s[i].error[0])
            fail_msg("%s", s[i].error);
    ferry_stats st = h_stats(c);
    assert_int_equal(st.objects, N * KEEP);
    assert_int_equal(st.deleted_objects, N * (ITERS - KEEP));
    ferry_disconnect(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(thirty_two_clients_put_get_delete_concurrently),
        T(threads_sharing_one_handle_get_their_own_results),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
