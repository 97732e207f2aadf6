/* fetch_peer.c - ferry between two nodes as a measured system: objects stored on node A are
 * pulled to node B with ferry_fetch, one per call (fetch) or a batch per call (fetch-batch),
 * and on the fabric one per call with B's eager limit set so that every object takes one
 * protocol (fetch-eager, fetch-rendezvous, fetch-hybrid). Each run's objects are deleted on B
 * again outside the timed section, so that every run transfers them; their ids stay the same,
 * so B's directory cache stays warm: the steady state of a node that reads what another one
 * produces. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define FETCH_TIMEOUT_MS 60000
#define BATCH_BYTES (512ull << 20) /* at most this much in one fetch-batch run */
#define INDEX_BITS 16              /* ids: <nonce, size << INDEX_BITS | index, kind> */

struct fetch_ctx {
    struct fetch_pair *pair;
    const uint8_t *payload;
    uint64_t nonce;
    char kind;
    uint64_t batch; /* 0: one object per run, else the most per run */
    int holders;    /* fetch-holders: the pair's other holders fetch the objects first */
    uint64_t n;     /* objects per run at the current size */
    ferry_id *ids;
    int *statuses;
    uint64_t faults_at_begin;
    /* The fabric's protocols: the protocol (-1: none, B's limit left alone), the eager limit
     * set on B for it, the nodes' counters when the timed runs began, the timed runs so far,
     * and what the counters showed of them. */
    int protocol;
    uint64_t eager_max;
    struct bench_counters a0, b0;
    uint64_t timed;
    struct fetch_path path;
};

const char *const fetch_protocol_names[FETCH_PROTOCOLS] = {"eager", "rendezvous", "hybrid"};
const char *const fetch_protocol_ops[FETCH_PROTOCOLS] = {"fetch-eager", "fetch-rendezvous",
                                                         "fetch-hybrid"};

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

#define WHERE_TIMEOUT_MS 10000
#define WHERE_POLL_MS 5

/* How many nodes b's directory lists as holders of id. */
static size_t holders_of(const struct fetch_ctx *x, const ferry_id *id)
{
    ferry_node_info *nodes;
    size_t n;
    bench_check_ferry(ferry_where(x->pair->b, id, &nodes, &n), "ferry_where on %s", x->pair->b_id);
    ferry_free(nodes);
    return n;
}

/* The pair's other holders fetch the objects from a; returns once b's directory lists them. */
static void spread_to_holders(struct fetch_ctx *x)
{
    const struct fetch_pair *p = x->pair;
    for (size_t h = 0; h < p->nh; h++) {
        int err = ferry_fetch(p->h[h], x->ids, x->n, FETCH_TIMEOUT_MS, x->statuses);
        bench_check_ferry(err, "fetch of the objects to holder %s", p->h_id[h]);
    }
    for (uint64_t i = 0; i < x->n; i++)
        for (unsigned waited = 0; holders_of(x, &x->ids[i]) < 1 + p->nh; waited += WHERE_POLL_MS) {
            if (waited >= WHERE_TIMEOUT_MS)
                bench_fail("%s's directory did not list %zu holders of an object within %d ms",
                           p->b_id, 1 + p->nh, WHERE_TIMEOUT_MS);
            bench_sleep_ms(WHERE_POLL_MS);
        }
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
        bench_check_ferry(ferry_put(x->pair->a, &x->ids[i], x->payload, size, NULL, 0),
                          "put of a %llu-byte object on %s", (unsigned long long)size,
                          x->pair->a_id);
    }
    if (x->holders)
        spread_to_holders(x);
    if (x->protocol >= 0)
        bench_check_ferry(ferry_set_eager_max(x->pair->b, x->eager_max),
                          "setting the eager limit of %s for %s", x->pair->b_id,
                          fetch_protocol_names[x->protocol]);
}

/* Fails, naming the first object whose status is not 0 if there is one. */
static void fail_fetch(const struct fetch_ctx *x, uint64_t size, int err)
{
    uint64_t i = 0;
    while (i < x->n && x->statuses[i] == 0)
        i++;
    if (i == x->n)
        bench_check_ferry(err, "fetch of %llu object(s) of %llu bytes to %s",
                          (unsigned long long)x->n, (unsigned long long)size, x->pair->b_id);
    bench_check_ferry(err, "fetch of %llu object(s) of %llu bytes to %s (object %llu: %s)",
                      (unsigned long long)x->n, (unsigned long long)size, x->pair->b_id,
                      (unsigned long long)i, ferry_strerror(x->statuses[i]));
}

static void fetch_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct fetch_ctx *x = ctx;
    (void)iter;
    int err = ferry_fetch(x->pair->b, x->ids, x->n, FETCH_TIMEOUT_MS, x->statuses);
    if (err != 0)
        fail_fetch(x, size, err);
}

/* Compares what B holds with what A was given. */
static void check_bytes(struct fetch_ctx *x, uint64_t size)
{
    ferry_buffer *bufs = calloc(x->n, sizeof(*bufs));
    if (bufs == NULL)
        bench_fail("out of memory for %llu buffers", (unsigned long long)x->n);
    bench_check_ferry(ferry_get(x->pair->b, x->ids, x->n, 0, bufs),
                      "get on %s of %llu fetched object(s) of %llu bytes", x->pair->b_id,
                      (unsigned long long)x->n, (unsigned long long)size);
    for (uint64_t i = 0; i < x->n; i++) {
        if (bufs[i].data_size != size || memcmp(bufs[i].data, x->payload, size) != 0)
            bench_fail("object %llu fetched to %s differs from the one stored on %s (%llu bytes "
                       "there, %llu expected, or other bytes)",
                       (unsigned long long)i, x->pair->b_id, x->pair->a_id,
                       (unsigned long long)bufs[i].data_size, (unsigned long long)size);
        bench_check_ferry(ferry_release(x->pair->b, &x->ids[i]), "release on %s", x->pair->b_id);
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
    delete_all(x, x->pair->b, x->pair->b_id);
    x->timed++; /* reset when the timed runs begin */
}

static void sample(const struct fetch_ctx *x, struct bench_counters *a, struct bench_counters *b)
{
    bench_counters_get(x->pair->a, x->pair->a_id, a);
    bench_counters_get(x->pair->b, x->pair->b_id, b);
}

static void fetch_begin(void *ctx, uint64_t size)
{
    struct fetch_ctx *x = ctx;
    (void)size;
    x->faults_at_begin = bench_proc_minor_faults(x->pair->pb);
    x->timed = 0;
    if (x->protocol >= 0)
        sample(x, &x->a0, &x->b0);
}

/* Fails unless the counters show that every timed run moved its object by the protocol's
 * path: all as messages (sent by A) and no one-sided read, or all by B's one-sided reads and
 * no message; hybrid by whichever B's limit picks for the size. */
static void check_path(struct fetch_ctx *x, uint64_t size)
{
    struct bench_counters a1, b1;
    sample(x, &a1, &b1);
    struct fetch_path d = {
        .fetches = x->timed,
        .eager_bytes =
            bench_counter(&a1, "fabric_eager_bytes") - bench_counter(&x->a0, "fabric_eager_bytes"),
        .rdv_reads =
            bench_counter(&b1, "fabric_rdv_reads") - bench_counter(&x->b0, "fabric_rdv_reads"),
        .rdv_bytes =
            bench_counter(&b1, "fabric_rdv_bytes") - bench_counter(&x->b0, "fabric_rdv_bytes"),
    };
    uint64_t bytes = x->timed * size;
    int two_sided =
        x->protocol == FETCH_EAGER || (x->protocol == FETCH_HYBRID && size <= b1.st.eager_max);
    if (two_sided ? d.eager_bytes != bytes || d.rdv_reads != 0
                  : d.rdv_bytes != bytes || d.eager_bytes != 0)
        bench_fail("%s %s at %llu bytes (eager limit %llu) did not take the %s path: in %llu "
                   "timed fetches, %s sent %llu bytes as messages and %s read %llu bytes in %llu "
                   "one-sided reads",
                   x->pair->system, fetch_protocol_ops[x->protocol], (unsigned long long)size,
                   (unsigned long long)b1.st.eager_max, two_sided ? "two-sided" : "one-sided",
                   (unsigned long long)d.fetches, x->pair->a_id, (unsigned long long)d.eager_bytes,
                   x->pair->b_id, (unsigned long long)d.rdv_bytes, (unsigned long long)d.rdv_reads);
    x->path.fetches += d.fetches;
    x->path.eager_bytes += d.eager_bytes;
    x->path.rdv_reads += d.rdv_reads;
    x->path.rdv_bytes += d.rdv_bytes;
}

static void fetch_teardown(void *ctx, uint64_t size)
{
    struct fetch_ctx *x = ctx;
    x->pair->timed_faults += bench_proc_minor_faults(x->pair->pb) - x->faults_at_begin;
    if (x->protocol >= 0)
        check_path(x, size);
    delete_all(x, x->pair->a, x->pair->a_id);
    for (size_t h = 0; x->holders && h < x->pair->nh; h++)
        delete_all(x, x->pair->h[h], x->pair->h_id[h]);
    free(x->ids);
    free(x->statuses);
    x->ids = NULL;
    x->statuses = NULL;
}

/* n operations of system p->system with fresh contexts: one object per run, unless set
 * otherwise afterwards. */
static struct bench_op *make_ops(struct fetch_pair *p, const uint8_t *payload, size_t n)
{
    struct bench_op *ops = calloc(n, sizeof(*ops));
    struct fetch_ctx *ctx = calloc(n, sizeof(*ctx));
    if (ops == NULL || ctx == NULL)
        bench_fail("out of memory for %zu operations", n);
    for (size_t i = 0; i < n; i++) {
        ctx[i] = (struct fetch_ctx){
            .pair = p, .payload = payload, .nonce = bench_nonce(), .kind = 'f', .protocol = -1};
        ops[i] = (struct bench_op){
            .system = p->system,
            .setup = fetch_setup,
            .run = fetch_run,
            .after = fetch_after,
            .teardown = fetch_teardown,
            .ctx = &ctx[i],
            .objects = fetch_objects,
            .begin = fetch_begin,
        };
    }
    return ops;
}

size_t fetch_peer_ops(struct fetch_pair *p, uint64_t batch, const uint8_t *payload,
                      const struct bench_op **ops)
{
    struct bench_op *list = make_ops(p, payload, 2);
    struct fetch_ctx *batch_ctx = list[1].ctx;
    list[0].op = "fetch";
    list[1].op = "fetch-batch";
    batch_ctx->kind = 'F';
    batch_ctx->batch = batch;
    *ops = list;
    return 2;
}

size_t fetch_peer_protocol_ops(struct fetch_pair *p, unsigned mask, uint64_t hybrid_max,
                               const uint8_t *payload, const struct bench_op **ops)
{
    const uint64_t limits[FETCH_PROTOCOLS] = {UINT64_MAX - 1, 0, hybrid_max};
    struct bench_op *list = make_ops(p, payload, FETCH_PROTOCOLS);
    size_t n = 0;
    for (int k = 0; k < FETCH_PROTOCOLS; k++) {
        if (!(mask & 1u << k))
            continue;
        struct fetch_ctx *x = list[k].ctx;
        x->kind = "erh"[k]; /* ids apart from fetch's 'f' and fetch-batch's 'F' */
        x->protocol = k;
        x->eager_max = limits[k];
        list[n] = list[k];
        list[n++].op = fetch_protocol_ops[k];
    }
    *ops = list;
    return n;
}

const struct bench_op *fetch_peer_holders_op(struct fetch_pair *p, const uint8_t *payload)
{
    struct bench_op *op = make_ops(p, payload, 1);
    struct fetch_ctx *x = op->ctx;
    op->op = "fetch-holders";
    x->kind = 'k';
    x->holders = 1;
    return op;
}

const struct fetch_path *fetch_peer_path(const struct bench_op *op)
{
    if (op->setup != fetch_setup || ((struct fetch_ctx *)op->ctx)->protocol < 0)
        return NULL;
    return &((struct fetch_ctx *)op->ctx)->path;
}
