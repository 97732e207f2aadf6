/* copy_peer.c - memcpy as a measured system: the bound on any copy of the same bytes on this
 * machine, between two buffers faulted in beforehand; and process_vm_readv from another
 * process (cross-memory attach, how libfabric's shm provider moves large messages and reads):
 * the bound on a copy between two daemons on one host without shared mappings. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

struct copy_ctx {
    const uint8_t *src;
    uint8_t *dst;
    pid_t owner; /* cma: the process whose copy of src is read */
};

static struct copy_ctx copy_ctx, cma_ctx;
static volatile uint8_t copy_sink; /* keeps the copies alive */

static void copy_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct copy_ctx *x = ctx;
    (void)iter;
    memcpy(x->dst, x->src, size);
    copy_sink = x->dst[size - 1];
}

static void cma_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct copy_ctx *x = ctx;
    struct iovec local = {x->dst, size}, remote = {(void *)x->src, size};
    (void)iter;
    if (process_vm_readv(x->owner, &local, 1, &remote, 1, 0) != (ssize_t)size)
        bench_fail("process_vm_readv of %llu bytes failed", (unsigned long long)size);
    copy_sink = x->dst[size - 1];
}

static void cma_stop(void)
{
    if (cma_ctx.owner > 0) {
        kill(cma_ctx.owner, SIGKILL);
        waitpid(cma_ctx.owner, NULL, 0);
    }
}

/* A child that keeps its copy of src (shared with ours until written) until we exit. */
static pid_t cma_owner(void)
{
    pid_t pid = fork();

    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close_range(3, ~0u, 0); /* holds no connection of ours open */
        for (;;)
            pause();
    }
    if (pid < 0)
        bench_fail("fork for the process_vm_readv reference failed");
    atexit(cma_stop);
    return pid;
}

size_t copy_peer_ops(const uint8_t *src, uint64_t max_size, const struct bench_op **ops)
{
    static const struct bench_op list[] = {
        {.system = "memcpy", .op = "copy", .run = copy_run, .ctx = &copy_ctx},
        {.system = "cma", .op = "readv", .run = cma_run, .ctx = &cma_ctx},
    };
    copy_ctx = (struct copy_ctx){src, bench_alloc_faulted(max_size), 0};
    bench_free_at_exit(copy_ctx.dst);
    cma_ctx = (struct copy_ctx){src, bench_alloc_faulted(max_size), cma_owner()};
    bench_free_at_exit(cma_ctx.dst);
    *ops = list;
    return 2;
}
