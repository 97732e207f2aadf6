/*
 * alloc_bench.c - the arena allocator (TLSF, src/store/alloc.c) under churn, and mimalloc
 * managing a region of the same size, for the allocator choice in docs/design/store.md.
 *
 * Every run replays one seeded trace on a fresh allocator: allocations until the requested
 * live bytes reach half the region (warm-up), then CHURN_OPS operations that allocate while
 * the live bytes are below half and free a random live block otherwise (timed), then
 * allocations only until the first failure (fragmentation). Sizes are log-uniform in
 * [MIN_SIZE, MAX_SIZE]. Both allocators see the same trace, since decisions depend only on
 * the requested sizes. The allocators only allocate: no object bytes are written.
 *
 * Linking libmimalloc also makes it this process's malloc, so the TLSF descriptors come from
 * mimalloc here; they are recycled, so after the warm-up the churn seldom calls malloc.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ferry.h"
#include "store/alloc.h"

#ifdef FERRY_BENCH_MIMALLOC
#include <mimalloc.h>
#endif

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

#define REGION (1 * GIB)
#define MIN_SIZE UINT64_C(64)
#define MAX_SIZE (1 * MIB)
#define CHURN_OPS 4000000
#define RUNS 5

/* One step of a trace: allocate size bytes, or (size 0) free the live block at index victim,
 * the last live block then taking its index. */
struct op {
    uint64_t size;
    uint64_t victim;
};

struct trace {
    struct op *ops;
    size_t warmup; /* ops[0, warmup) fill the region to half */
    size_t churn;  /* then ops[warmup, churn) */
    size_t total;  /* then allocations only, until failure */
};

struct result {
    double mops;       /* churn operations per second, in millions */
    double requested;  /* live bytes requested at the first failure, share of the region */
    double used;       /* the sizes of those blocks as the allocator rounded them, share */
    bool churn_failed; /* an allocation failed before the fill */
};

/* An allocator under test: handles are opaque to the runner. */
struct engine {
    const char *name;
    const char *metadata; /* whether it writes its own metadata into the region */
    void *(*open)(void);
    void (*close)(void *ctx);
    void *(*alloc)(void *ctx, uint64_t size); /* NULL on failure */
    void (*release)(void *ctx, void *h);
    uint64_t (*block_size)(void *ctx, void *h); /* the size h actually holds */
};

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t log_uniform_size(void)
{
    double u = (double)(rng_next() >> 11) * 0x1.0p-53;
    double lo = log((double)MIN_SIZE), hi = log((double)MAX_SIZE);
    uint64_t size = (uint64_t)exp(lo + u * (hi - lo));
    return size < MIN_SIZE ? MIN_SIZE : size > MAX_SIZE ? MAX_SIZE : size;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "alloc-bench: out of memory\n");
        exit(1);
    }
    return p;
}

static void trace_push(struct trace *t, size_t *cap, uint64_t size, uint64_t victim)
{
    if (t->total == *cap) {
        *cap *= 2;
        t->ops = realloc(t->ops, *cap * sizeof(struct op));
        if (!t->ops) {
            fprintf(stderr, "alloc-bench: out of memory\n");
            exit(1);
        }
    }
    t->ops[t->total++] = (struct op){size, victim};
}

/* The generator's view of the live set: requested sizes only. */
struct live_set {
    uint64_t *size;
    size_t n;
    uint64_t bytes;
};

/* Allocates while the live set is under half the region, else frees a random live block. */
static void trace_step(struct trace *t, size_t *cap, struct live_set *l)
{
    if (l->bytes < REGION / 2) {
        uint64_t size = log_uniform_size();
        l->size[l->n++] = size;
        l->bytes += size;
        trace_push(t, cap, size, 0);
    } else {
        uint64_t v = rng_next() % l->n;
        l->bytes -= l->size[v];
        l->size[v] = l->size[--l->n];
        trace_push(t, cap, 0, v);
    }
}

/* Builds the trace of one seed. The fill asks for more than the region holds, so every
 * allocator fails during it. */
static struct trace trace_make(uint64_t seed)
{
    size_t cap = CHURN_OPS + REGION / (32 * KIB);
    struct trace t = {.ops = xmalloc(cap * sizeof(struct op))};
    struct live_set l = {.size = xmalloc((REGION / 2 / MIN_SIZE + 1) * sizeof(uint64_t))};

    rng_state = seed;
    while (l.bytes < REGION / 2)
        trace_step(&t, &cap, &l);
    t.warmup = t.total;
    while (t.total < t.warmup + CHURN_OPS)
        trace_step(&t, &cap, &l);
    t.churn = t.total;
    for (uint64_t fill = 0; fill <= REGION;) {
        uint64_t size = log_uniform_size();
        trace_push(&t, &cap, size, 0);
        fill += size;
    }
    free(l.size);
    return t;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct replay {
    const struct engine *e;
    void *ctx;
    void **live;
    uint64_t *live_size;
    size_t nlive;
    uint64_t live_bytes;
};

/* Replays ops[from, to); returns the index of the first failed allocation, or to. */
static size_t replay(struct replay *r, const struct op *ops, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        const struct op *o = &ops[i];
        if (o->size) {
            void *h = r->e->alloc(r->ctx, o->size);
            if (!h)
                return i;
            r->live[r->nlive] = h;
            r->live_size[r->nlive++] = o->size;
            r->live_bytes += o->size;
        } else {
            r->e->release(r->ctx, r->live[o->victim]);
            r->live_bytes -= r->live_size[o->victim];
            r->nlive--;
            r->live[o->victim] = r->live[r->nlive];
            r->live_size[o->victim] = r->live_size[r->nlive];
        }
    }
    return to;
}

static struct result run(const struct engine *e, const struct trace *t)
{
    struct replay r = {
        .e = e,
        .ctx = e->open(),
        .live = xmalloc(t->total * sizeof(void *)),
        .live_size = xmalloc(t->total * sizeof(uint64_t)),
    };
    struct result res = {0};

    size_t failed = replay(&r, t->ops, 0, t->warmup);
    if (failed == t->warmup) {
        double start = now();
        failed = replay(&r, t->ops, t->warmup, t->churn);
        res.mops = (double)(failed - t->warmup) / (now() - start) / 1e6;
    }
    res.churn_failed = failed < t->churn;
    if (!res.churn_failed)
        failed = replay(&r, t->ops, t->churn, t->total);
    if (failed == t->total) {
        fprintf(stderr, "alloc-bench: %s held more than its region\n", e->name);
        exit(1);
    }
    res.requested = (double)r.live_bytes / (double)REGION;
    uint64_t used = 0;
    for (size_t i = 0; i < r.nlive; i++)
        used += e->block_size(r.ctx, r.live[i]);
    res.used = (double)used / (double)REGION;
    e->close(r.ctx);
    free(r.live);
    free(r.live_size);
    return res;
}

static void *tlsf_open(void)
{
    alloc *a;
    if (alloc_init(&a, REGION) < 0) {
        fprintf(stderr, "alloc-bench: alloc_init: %s\n", ferry_errmsg());
        exit(1);
    }
    return a;
}

static void tlsf_close(void *ctx)
{
    alloc_destroy(ctx);
}

static void *tlsf_alloc(void *ctx, uint64_t size)
{
    alloc_block *b;
    return alloc_alloc(ctx, size, &b) < 0 ? NULL : b;
}

static void tlsf_release(void *ctx, void *h)
{
    alloc_free(ctx, h);
}

static uint64_t tlsf_block_size(void *ctx, void *h)
{
    return alloc_block_size(h);
}

static const struct engine tlsf = {
    .name = "ferry TLSF (alloc.c)",
    .metadata = "no: offsets only, bookkeeping in malloc",
    .open = tlsf_open,
    .close = tlsf_close,
    .alloc = tlsf_alloc,
    .release = tlsf_release,
    .block_size = tlsf_block_size,
};

#ifdef FERRY_BENCH_MIMALLOC

/* mimalloc carves an arena into segments that must be aligned to their size, MI_SEGMENT_ALIGN
 * in mimalloc-types.h: 32 MiB on 64-bit targets in 2.0.9. Region sizes are multiples of it. */
#define MI_REGION_ALIGN (32 * MIB)

struct mi_ctx {
    mi_heap_t *heap;
    void *region;
    uint64_t size;
};

/* A private anonymous mapping of size bytes aligned to MI_REGION_ALIGN, populated so that
 * page faults stay out of the timings, as they would for a shared arena mapped in advance. */
static void *mi_region_map(uint64_t size)
{
    size_t len = size + MI_REGION_ALIGN;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        perror("alloc-bench: mmap");
        exit(1);
    }
    uint8_t *start = (uint8_t *)(((uintptr_t)p + MI_REGION_ALIGN - 1) & ~(MI_REGION_ALIGN - 1));
    if (start > p)
        munmap(p, (size_t)(start - p));
    munmap(start + size, (size_t)(p + len - (start + size)));
    return start;
}

static struct mi_ctx *mi_ctx_open(uint64_t size)
{
    struct mi_ctx *c = xmalloc(sizeof(*c));
    mi_arena_id_t arena;

    c->size = size;
    c->region = mi_region_map(size);
    if (!mi_manage_os_memory_ex(c->region, size, true, false, true, -1, true, &arena)) {
        fprintf(stderr, "alloc-bench: mi_manage_os_memory_ex refused the region\n");
        exit(1);
    }
    c->heap = mi_heap_new_in_arena(arena);
    if (!c->heap) {
        fprintf(stderr, "alloc-bench: mi_heap_new_in_arena failed\n");
        exit(1);
    }
    return c;
}

/* mimalloc cannot forget an arena, so the region stays mapped (its cached segments may still
 * be decommitted later); only its pages go back to the system. */
static void mi_ctx_close(struct mi_ctx *c)
{
    mi_heap_destroy(c->heap);
    madvise(c->region, c->size, MADV_DONTNEED);
    free(c);
}

static void *mim_open(void)
{
    return mi_ctx_open(REGION);
}

static void mim_close(void *ctx)
{
    mi_ctx_close(ctx);
}

static void *mim_alloc(void *ctx, uint64_t size)
{
    return mi_heap_malloc_aligned(((struct mi_ctx *)ctx)->heap, size, 64);
}

static void mim_release(void *ctx, void *h)
{
    mi_free(h);
}

static uint64_t mim_block_size(void *ctx, void *h)
{
    return mi_usable_size(h);
}

static const struct engine mim = {
    .name = "mimalloc",
    .metadata = "yes: segment headers, free lists in blocks",
    .open = mim_open,
    .close = mim_close,
    .alloc = mim_alloc,
    .release = mim_release,
    .block_size = mim_block_size,
};

static size_t nonzero_bytes(const uint8_t *p, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += p[i] != 0;
    return count;
}

/* Shows where mimalloc keeps its metadata: a segment header at the start of the region, and
 * free-list links inside freed blocks, both of them in memory that clients could write. */
static void mi_metadata_probe(void)
{
    struct mi_ctx *c = mi_ctx_open(2 * MI_REGION_ALIGN);
    const uint8_t *region = c->region;
    size_t before = nonzero_bytes(region, 64 * KIB);

    uint8_t *first = mi_heap_malloc_aligned(c->heap, 64, 64);
    uint8_t *second = mi_heap_malloc_aligned(c->heap, 64, 64);
    if (!first || !second) {
        fprintf(stderr, "alloc-bench: mimalloc probe allocation failed\n");
        exit(1);
    }
    size_t after = nonzero_bytes(region, 64 * KIB);
    memset(first, 0, 64);
    memset(second, 0, 64);
    mi_free(first);
    mi_free(second);
    uint64_t link;
    memcpy(&link, second, sizeof(link));

    printf("mimalloc metadata in the region:\n");
    printf("  non-zero bytes in the region's first 64 KiB: %zu before, %zu after the first "
           "allocation (segment header)\n",
           before, after);
    printf("  first block at region offset %zu\n", (size_t)(first - region));
    printf("  first 8 bytes of a freed 64 B block: 0x%016llx (%s)\n", (unsigned long long)link,
           link ? "free-list link written into the block" : "unchanged");
    mi_ctx_close(c);
}

#endif

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void report(const struct engine *e, const struct result *res)
{
    double mops[RUNS], requested[RUNS], used[RUNS];
    int churn_failures = 0;

    for (int i = 0; i < RUNS; i++) {
        mops[i] = res[i].mops;
        requested[i] = 100 * res[i].requested;
        used[i] = 100 * res[i].used;
        churn_failures += res[i].churn_failed;
    }
    double m = median(mops, RUNS);
    printf("%-22s %6.2f (%5.2f-%5.2f) %6.1f %10.2f%% %9.2f%% %9d   %s\n", e->name, m, mops[0],
           mops[RUNS - 1], 1e3 / m, median(requested, RUNS), median(used, RUNS), churn_failures,
           e->metadata);
}

int main(void)
{
    const struct engine *engines[] = {
        &tlsf,
#ifdef FERRY_BENCH_MIMALLOC
        &mim,
#endif
    };
    enum { NENGINES = sizeof(engines) / sizeof(engines[0]) };
    static struct result results[NENGINES][RUNS];

#ifdef FERRY_BENCH_MIMALLOC
    mi_option_disable(mi_option_show_errors);
    mi_option_disable(mi_option_verbose);
    int v = mi_version();
    printf("mimalloc %d.%d.%d, ", v / 100, v / 10 % 10, v % 10);
#endif
    printf("region %llu MiB, sizes log-uniform %llu B..%llu KiB, live set ~50%%, %d churn ops "
           "per run,\nmedians of %d runs (seeds 1..%d)\n\n",
           (unsigned long long)(REGION / MIB), (unsigned long long)MIN_SIZE,
           (unsigned long long)(MAX_SIZE / KIB), CHURN_OPS, RUNS, RUNS);
    for (int run_no = 0; run_no < RUNS; run_no++) {
        struct trace t = trace_make((uint64_t)run_no + 1);
        for (int e = 0; e < NENGINES; e++)
            results[e][run_no] = run(engines[e], &t);
        free(t.ops);
    }
    printf("%-22s %-20s %6s %11s %10s %9s   %s\n", "", "churn Mops/s", "", "1st failure", "",
           "churn", "metadata");
    printf("%-22s %-20s %6s %11s %10s %9s   %s\n", "allocator", "median (min-max)", "ns/op",
           "requested", "used", "failures", "in the region");
    for (int e = 0; e < NENGINES; e++)
        report(engines[e], results[e]);
    printf("\n1st failure: live bytes when the first allocation of the fill failed, as a share "
           "of the region:\nrequested = as asked; used = the blocks' sizes after the allocator's "
           "rounding (alloc_block_size, mi_usable_size)\n");
#ifdef FERRY_BENCH_MIMALLOC
    printf("\n");
    mi_metadata_probe();
#endif
    return 0;
}
