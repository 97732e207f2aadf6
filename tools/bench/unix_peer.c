/* unix_peer.c - the floor under every ferry request, measured in the same run: SIZE bytes
 * sent on a Unix stream socket to another process, which answers with an 8-byte
 * acknowledgement (one round trip, as a ferry call is, plus the bytes crossing the kernel,
 * which a ferry call does not need). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define CHUNK (1u << 20)

struct unix_ctx {
    const uint8_t *payload;
    int fd;
    pid_t pid;
};

static struct unix_ctx unix_ctx;

static int read_full(int fd, void *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = read(fd, (uint8_t *)buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, (const uint8_t *)buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

/* The receiving process: a length, that many bytes, then the length back; until EOF. */
_Noreturn static void receiver(int fd)
{
    static uint8_t sink[CHUNK];
    uint64_t len;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    while (read_full(fd, &len, sizeof(len)) == 0) {
        for (uint64_t left = len; left;) {
            size_t n = left < CHUNK ? (size_t)left : CHUNK;
            if (read_full(fd, sink, n) < 0)
                _exit(1);
            left -= n;
        }
        if (write_full(fd, &len, sizeof(len)) < 0)
            _exit(1);
    }
    _exit(0);
}

static void unix_setup(void *ctx, uint64_t size)
{
    struct unix_ctx *u = ctx;
    int sv[2];

    (void)size;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        bench_fail("socketpair: %s", strerror(errno));
    u->pid = fork();
    if (u->pid < 0)
        bench_fail("fork: %s", strerror(errno));
    if (u->pid == 0) {
        close(sv[0]);
        receiver(sv[1]);
    }
    close(sv[1]);
    u->fd = sv[0];
}

static void unix_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct unix_ctx *u = ctx;
    uint64_t ack;

    (void)iter;
    if (write_full(u->fd, &size, sizeof(size)) < 0 || write_full(u->fd, u->payload, size) < 0 ||
        read_full(u->fd, &ack, sizeof(ack)) < 0 || ack != size)
        bench_fail("unix socket send of %llu bytes failed", (unsigned long long)size);
}

static void unix_teardown(void *ctx, uint64_t size)
{
    struct unix_ctx *u = ctx;

    (void)size;
    close(u->fd);
    waitpid(u->pid, NULL, 0);
}

size_t unix_peer_ops(const uint8_t *payload, const struct bench_op **ops)
{
    static const struct bench_op list[] = {
        {"unix", "send+ack", unix_setup, unix_run, NULL, unix_teardown, &unix_ctx},
    };
    unix_ctx.payload = payload;
    *ops = list;
    return sizeof(list) / sizeof(list[0]);
}
