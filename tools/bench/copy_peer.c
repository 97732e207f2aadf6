/* copy_peer.c - memcpy as a measured system: the bound on any copy of the same bytes on this
 * machine, between two buffers faulted in beforehand. */
#include <string.h>

#include "bench.h"

struct copy_ctx {
    const uint8_t *src;
    uint8_t *dst;
};

static struct copy_ctx copy_ctx;
static volatile uint8_t copy_sink; /* keeps the copies alive */

static void copy_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct copy_ctx *x = ctx;
    (void)iter;
    memcpy(x->dst, x->src, size);
    copy_sink = x->dst[size - 1];
}

size_t copy_peer_ops(const uint8_t *src, uint64_t max_size, const struct bench_op **ops)
{
    static const struct bench_op op = {
        .system = "memcpy", .op = "copy", .run = copy_run, .ctx = &copy_ctx};
    copy_ctx = (struct copy_ctx){src, bench_alloc_faulted(max_size)};
    bench_free_at_exit(copy_ctx.dst);
    *ops = &op;
    return 1;
}
