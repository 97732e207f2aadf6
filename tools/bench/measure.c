/* measure.c - the one timing loop of ferry-bench, shared by every system and operation. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One timed run plus its untimed follow-up; returns the run's nanoseconds. */
static uint64_t run_once(const struct bench_op *op, uint64_t size, uint64_t iter)
{
    uint64_t t0 = now_ns();
    op->run(op->ctx, size, iter);
    uint64_t t1 = now_ns();
    if (op->after != NULL)
        op->after(op->ctx, size, iter);
    bench_check_interrupt();
    return t1 - t0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples, in microseconds. */
static double percentile_us(const uint64_t *sorted, uint64_t n, double p)
{
    uint64_t rank = (uint64_t)(p * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    return (double)sorted[rank - 1] / 1e3;
}

static struct bench_result summarise(const struct bench_op *op, uint64_t size, uint64_t *ns,
                                     uint64_t n)
{
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++)
        total += ns[i];
    if (total == 0)
        total = 1; /* below the clock's resolution: keep the rates finite */
    qsort(ns, n, sizeof(*ns), cmp_u64);
    uint64_t objects = op->objects != NULL ? op->objects(op->ctx, size) : 1;
    double ops = (double)n * (double)objects * 1e9 / (double)total;
    return (struct bench_result){
        .system = op->system,
        .op = op->op,
        .size = size,
        .iterations = n,
        .ops_per_sec = ops,
        .p50_us = percentile_us(ns, n, 0.50),
        .p99_us = percentile_us(ns, n, 0.99),
        .mib_per_sec = ops * (double)size / (1024.0 * 1024.0),
    };
}

struct bench_result bench_measure(const struct bench_op *op, uint64_t size,
                                  const struct bench_limits *lim)
{
    uint64_t *ns = malloc(lim->max_iters * sizeof(*ns));
    uint64_t iter = 0, n = 0;
    if (ns == NULL)
        bench_fail("out of memory for %llu samples", (unsigned long long)lim->max_iters);
    if (op->setup != NULL)
        op->setup(op->ctx, size);

    /* Warm-up: caches, page faults, connections and allocators settle before timing. */
    double start = bench_now();
    do
        run_once(op, size, iter++);
    while (iter < lim->min_warmup ||
           (iter < lim->max_iters / 10 && bench_now() - start < lim->seconds / 10));

    if (op->begin != NULL)
        op->begin(op->ctx, size);
    start = bench_now();
    while (n < lim->max_iters && (n < lim->min_iters || bench_now() - start < lim->seconds))
        ns[n++] = run_once(op, size, iter++);

    if (op->teardown != NULL)
        op->teardown(op->ctx, size);
    struct bench_result r = summarise(op, size, ns, n);
    free(ns);
    return r;
}

void bench_measure_all(const struct bench_op *const *ops, size_t nops, const uint64_t *sizes,
                       size_t nsizes, const struct bench_limits *lim, struct bench_result *out)
{
    for (size_t s = 0; s < nsizes; s++)
        for (size_t i = 0; i < nops; i++)
            out[i * nsizes + s] = bench_measure(ops[i], sizes[s], lim);
}

size_t bench_append_ops(const struct bench_op **ops, size_t n, const struct bench_op *list,
                        size_t k)
{
    for (size_t i = 0; i < k; i++)
        ops[n++] = &list[i];
    return n;
}

const struct bench_op *bench_pick_op(const struct bench_op *list, size_t k, const char *op)
{
    for (size_t i = 0; i < k; i++)
        if (strcmp(list[i].op, op) == 0)
            return &list[i];
    bench_fail("no operation %s among the %zu of %s", op, k, k ? list[0].system : "a system");
}
