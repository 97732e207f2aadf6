/* fetch_peer.c - ferry between two nodes as a measured system (ferry-tcp): objects stored on
 * node A are pulled to node B with ferry_fetch, one per call (fetch) or a batch per call
 * (fetch-batch). Each run's objects are deleted on B again outside the timed section, so that
 * every run transfers them; their ids stay the same, so B's directory cache stays warm: the
 * steady state of a node that reads what another one produces. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define FETCH_TIMEOUT_MS 60000
#define BATCH_BYTES (512ull << 20) /* at most this much in one fetch-batch run */
#define INDEX_BITS 16              /* ids: <nonce, size << INDEX_BITS | index, kind> */

struct fetch_ctx {
    ferry_client *a, *b;
    const uint8_t *payload;
    uint64_t nonce;
    char kind;
    uint64_t batch; /* 0: one object per run, else the most per run */
    uint64_t n;     /* objects per run at the current size */
    ferry_id *ids;
    int *statuses;
    uint64_t faults_at_begin;
};

static struct fetch_ctx single_ctx, batch_ctx;
static const struct bench_proc *b_daemon;
static uint64_t timed_faults;

uint64_t fetch_peer_timed_faults(void)
{
    return timed_faults;
}

uint64_t fetch_peer_batch(uint64_t batch, uint64_t size)
{
    uint64_t cap = BATCH_BYTES / size;
    if (cap == 0)
        cap = 1;
    return batch < cap ? batch : cap;
}

static uint64_t fetch_objects(void *ctx, uint64_t size)
{
    struct fetch_ctx *x = ctx;
    return x->batch ? fetch_peer_batch(x->batch, size) : 1;
}

/* Stores the run's objects on A (all with the payload's first size bytes). */
static void fetch_setup(void *ctx, uint64_t size)
{
    struct fetch_ctx *x = ctx;
    x->n = fetch_objects(x, size);
    x->ids = calloc(x->n, sizeof(*x->ids));
    x->statuses = calloc(x->n, sizeof(*x->statuses));
    if (x->ids == NULL || x->statuses == NULL)
        bench_fail("out of memory for %llu ids", (unsigned long long)x->n);
    for (uint64_t i = 0; i < x->n; i++) {
        x->ids[i] = ferry_peer_id(x->nonce, size << INDEX_BITS | i, x->kind);
        bench_check_ferry(ferry_put(x->a, &x->ids[i], x->payload, size, NULL, 0),
                          "put of a %llu-byte object on bench-a", (unsigned long long)size);
    }
}

/* Fails, naming the first object whose status is not 0 if there is one. */
static void fail_fetch(const struct fetch_ctx *x, uint64_t size, int err)
{
    uint64_t i = 0;
    while (i < x->n && x->statuses[i] == 0)
        i++;
    if (i == x->n)
        bench_check_ferry(err, "fetch of %llu object(s) of %llu bytes to bench-b",
                          (unsigned long long)x->n, (unsigned long long)size);
    bench_check_ferry(err, "fetch of %llu object(s) of %llu bytes to bench-b (object %llu: %s)",
                      (unsigned long long)x->n, (unsigned long long)size, (unsigned long long)i,
                      ferry_strerror(x->statuses[i]));
}

static void fetch_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct fetch_ctx *x = ctx;
    (void)iter;
    int err = ferry_fetch(x->b, x->ids, x->n, FETCH_TIMEOUT_MS, x->statuses);
    if (err != 0)
        fail_fetch(x, size, err);
}

/* Compares what B holds with what A was given. */
static void check_bytes(struct fetch_ctx *x, uint64_t size)
{
    ferry_buffer *bufs = calloc(x->n, sizeof(*bufs));
    if (bufs == NULL)
        bench_fail("out of memory for %llu buffers", (unsigned long long)x->n);
    bench_check_ferry(ferry_get(x->b, x->ids, x->n, 0, bufs),
                      "get on bench-b of %llu fetched object(s) of %llu bytes",
                      (unsigned long long)x->n, (unsigned long long)size);
    for (uint64_t i = 0; i < x->n; i++) {
        if (bufs[i].data_size != size || memcmp(bufs[i].data, x->payload, size) != 0)
            bench_fail("object %llu fetched to bench-b differs from the one stored on bench-a "
                       "(%llu bytes there, %llu expected, or other bytes)",
                       (unsigned long long)i, (unsigned long long)bufs[i].data_size,
                       (unsigned long long)size);
        bench_check_ferry(ferry_release(x->b, &x->ids[i]), "release on bench-b");
    }
    free(bufs);
}

static void delete_all(const struct fetch_ctx *x, ferry_client *c, const char *node)
{
    for (uint64_t i = 0; i < x->n; i++)
        bench_check_ferry(ferry_delete(c, &x->ids[i]), "delete of object %llu on %s",
                          (unsigned long long)i, node);
}

static void fetch_after(void *ctx, uint64_t size, uint64_t iter)
{
    struct fetch_ctx *x = ctx;
    if (iter == 0)
        check_bytes(x, size);
    delete_all(x, x->b, "bench-b");
}

static void fetch_begin(void *ctx, uint64_t size)
{
    struct fetch_ctx *x = ctx;
    (void)size;
    x->faults_at_begin = bench_proc_minor_faults(b_daemon);
}

static void fetch_teardown(void *ctx, uint64_t size)
{
    struct fetch_ctx *x = ctx;
    (void)size;
    timed_faults += bench_proc_minor_faults(b_daemon) - x->faults_at_begin;
    delete_all(x, x->a, "bench-a");
    free(x->ids);
    free(x->statuses);
    x->ids = NULL;
    x->statuses = NULL;
}

size_t fetch_peer_ops(ferry_client *a, ferry_client *b, const struct bench_proc *b_proc,
                      uint64_t batch, const uint8_t *payload, const struct bench_op **ops)
{
    static struct bench_op list[2];
    const struct bench_op fetch = {
        .system = "ferry-tcp",
        .op = "fetch",
        .setup = fetch_setup,
        .run = fetch_run,
        .after = fetch_after,
        .teardown = fetch_teardown,
        .ctx = &single_ctx,
        .objects = fetch_objects,
        .begin = fetch_begin,
    };
    list[0] = list[1] = fetch;
    list[1].op = "fetch-batch";
    list[1].ctx = &batch_ctx;
    single_ctx =
        (struct fetch_ctx){.a = a, .b = b, .payload = payload, .nonce = bench_nonce(), .kind = 'f'};
    batch_ctx = single_ctx;
    batch_ctx.kind = 'F';
    batch_ctx.batch = batch;
    b_daemon = b_proc;
    timed_faults = 0;
    *ops = list;
    return sizeof(list) / sizeof(list[0]);
}
