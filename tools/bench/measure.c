/* measure.c - the one timing loop of ferry-bench, shared by every system and operation. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "common/clock.h"

/* One timed run plus its untimed follow-up; returns the run's nanoseconds. */
static uint64_t run_once(const struct bench_op *op, uint64_t size, uint64_t iter)
{
    uint64_t t0 = clock_mono_ns();
    op->run(op->ctx, size, iter);
    uint64_t t1 = clock_mono_ns();
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
        .rounds = 1,
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

/* splitmix64: the shuffles' generator, reproducible from --seed. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bench_shuffle(size_t *order, size_t n, uint64_t *state)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(next_random(state) % i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted v[0..n), interpolated between neighbours. */
static double quantile(const double *v, size_t n, double q)
{
    double at = q * (double)(n - 1);
    size_t i = (size_t)at;
    return i + 1 < n ? v[i] + (at - (double)i) * (v[i + 1] - v[i]) : v[n - 1];
}

/* The median of the field at offset off of the results r[0], r[stride], ... (n of them);
 * with iqr, *iqr receives their interquartile range. */
static double median_of(const struct bench_result *r, size_t stride, size_t n, size_t off,
                        double *iqr)
{
    double v[BENCH_MAX_ROUNDS];
    for (size_t k = 0; k < n; k++)
        v[k] = *(const double *)((const char *)&r[k * stride] + off);
    qsort(v, n, sizeof(v[0]), cmp_double);
    if (iqr != NULL)
        *iqr = quantile(v, n, 0.75) - quantile(v, n, 0.25);
    return quantile(v, n, 0.5);
}

/* The summary of result i of set: medians over its rounds. */
static struct bench_result summarise_rounds(const struct bench_set *set, size_t i)
{
    const struct bench_result *first = &set->rounds[i];
    struct bench_result s = *first;
    double iqr;
    s.iterations = 0;
    for (unsigned k = 0; k < set->nrounds; k++)
        s.iterations += set->rounds[k * set->n + i].iterations;
    s.ops_per_sec =
        median_of(first, set->n, set->nrounds, offsetof(struct bench_result, ops_per_sec), &iqr);
    s.p50_us = median_of(first, set->n, set->nrounds, offsetof(struct bench_result, p50_us), NULL);
    s.p99_us = median_of(first, set->n, set->nrounds, offsetof(struct bench_result, p99_us), NULL);
    s.mib_per_sec =
        median_of(first, set->n, set->nrounds, offsetof(struct bench_result, mib_per_sec), NULL);
    s.rounds = set->nrounds;
    s.spread = s.ops_per_sec > 0 ? iqr / s.ops_per_sec : 0;
    s.noisy = s.spread > BENCH_NOISY;
    return s;
}

void bench_measure_rounds(const struct bench_op *const *ops, size_t nops,
                          const struct bench_options *o, const struct bench_limits *lim,
                          unsigned comparison, struct bench_set *out)
{
    size_t n = nops * o->nsizes;
    size_t *order = malloc(n * sizeof(*order));
    uint64_t state = o->seed + comparison * 0x2545f4914f6cdd1dull;
    *out = (struct bench_set){.n = n, .nrounds = o->rounds};
    out->summary = calloc(n, sizeof(*out->summary));
    out->rounds = calloc(n * o->rounds, sizeof(*out->rounds));
    if (order == NULL || out->summary == NULL || out->rounds == NULL)
        bench_fail("out of memory for %zu results in %u rounds", n, o->rounds);
    bench_free_at_exit(out->summary);
    bench_free_at_exit(out->rounds);
    for (unsigned k = 0; k < o->rounds; k++) {
        fprintf(stderr, "ferry-bench: comparison %u of %u, round %u of %u\n", comparison + 1,
                o->repeat, k + 1, o->rounds);
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        bench_shuffle(order, n, &state);
        for (size_t j = 0; j < n; j++) {
            size_t i = order[j];
            out->rounds[k * n + i] =
                bench_measure(ops[i / o->nsizes], o->sizes[i % o->nsizes], lim);
        }
    }
    for (size_t i = 0; i < n; i++)
        out->summary[i] = summarise_rounds(out, i);
    free(order);
}

const struct bench_result *bench_set_find(const struct bench_set *set, const char *system,
                                          const char *op, uint64_t size)
{
    return bench_find(set->summary, set->n, system, op, size);
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
