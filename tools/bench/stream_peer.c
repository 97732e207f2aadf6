/* stream_peer.c - the floor under a system's requests, measured in the same run: SIZE bytes
 * sent on a stream socket to another process, which answers with an 8-byte acknowledgement.
 * Over a Unix socket it is one round trip, as a ferry call is, plus the bytes crossing the
 * kernel, which a ferry call does not need. Over loopback TCP it is what a transfer between
 * two nodes on this machine can reach: large sends from a buffer faulted in beforehand, so
 * its MiB/s is the ceiling, and at 1K its latency is the small-message round trip.
 * Over loopback TCP there is also the shape of a fetch (op reqresp): an 8-byte request, and
 * SIZE bytes back from the other process into a buffer of this one, on sockets set up as
 * ferry's tcp transport sets up its own (TCP_NODELAY, the kernel's buffer sizes). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define CHUNK (1u << 20)

struct stream_ctx {
    const uint8_t *payload;
    void (*pair)(int sv[2]);                       /* a connected pair of sockets */
    void (*serve)(int fd, const uint8_t *payload); /* the other process; never returns */
    int fd;
    pid_t pid;
};

/* Where reqresp receives: grown to the largest size asked for, kept until exit. */
static uint8_t *dst;
static uint64_t dst_size;

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

/* Writes all of iov[0..n), which it consumes. */
static int writev_full(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t done = writev(fd, iov, n);
        if (done < 0 && errno == EINTR)
            continue;
        if (done <= 0)
            return -1;
        for (; n > 0 && (size_t)done >= iov->iov_len; iov++, n--)
            done -= (ssize_t)iov->iov_len;
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + done;
            iov->iov_len -= (size_t)done;
        }
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
    struct iovec iov = {(void *)buf, len};
    return writev_full(fd, &iov, 1);
}

/* The receiving process: a length, that many bytes, then the length back; until EOF. */
_Noreturn static void receiver(int fd, const uint8_t *payload)
{
    static uint8_t sink[CHUNK];
    uint64_t len;

    (void)payload;
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

/* The answering process of reqresp: a length, then that many bytes of payload back (one
 * write call, as a holder sends an object); until EOF. */
_Noreturn static void responder(int fd, const uint8_t *payload)
{
    uint64_t len;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    while (read_full(fd, &len, sizeof(len)) == 0)
        if (write_full(fd, payload, len) < 0)
            _exit(1);
    _exit(0);
}

static void unix_pair(int sv[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        bench_fail("socketpair: %s", strerror(errno));
}

static void set_nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        bench_fail("TCP_NODELAY: %s", strerror(errno));
}

/* A TCP connection over 127.0.0.1: sv[0] the connecting end, sv[1] the accepted one. Both
 * send at once (no Nagle), as ferry's transfer connections do. */
static void tcp_pair(int sv[2])
{
    int port;
    int lfd = bench_loopback_socket(&port);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (listen(lfd, 1) != 0)
        bench_fail("listen on 127.0.0.1:%d: %s", port, strerror(errno));
    sv[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sv[0] < 0 || connect(sv[0], (struct sockaddr *)&a, sizeof(a)) != 0)
        bench_fail("TCP connect to 127.0.0.1:%d: %s", port, strerror(errno));
    sv[1] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (sv[1] < 0)
        bench_fail("TCP accept on 127.0.0.1:%d: %s", port, strerror(errno));
    close(lfd);
    set_nodelay(sv[0]);
    set_nodelay(sv[1]);
}

static void stream_setup(void *ctx, uint64_t size)
{
    struct stream_ctx *x = ctx;
    int sv[2];

    (void)size;
    x->pair(sv);
    x->pid = fork();
    if (x->pid < 0)
        bench_fail("fork: %s", strerror(errno));
    if (x->pid == 0) {
        close(sv[0]);
        x->serve(sv[1], x->payload);
        _exit(1);
    }
    close(sv[1]);
    x->fd = sv[0];
}

static void stream_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct stream_ctx *x = ctx;
    uint64_t ack;

    /* One writev: a small message leaves as one segment, as a request does. */
    struct iovec iov[2] = {{&size, sizeof(size)}, {(void *)x->payload, size}};
    (void)iter;
    if (writev_full(x->fd, iov, 2) < 0 || read_full(x->fd, &ack, sizeof(ack)) < 0 || ack != size)
        bench_fail("stream send of %llu bytes failed", (unsigned long long)size);
}

static void reqresp_setup(void *ctx, uint64_t size)
{
    if (size > dst_size) {
        free(dst);
        dst = bench_alloc_faulted(size);
        dst_size = size;
    }
    stream_setup(ctx, size);
}

static void reqresp_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct stream_ctx *x = ctx;

    (void)iter;
    if (write_full(x->fd, &size, sizeof(size)) < 0 || read_full(x->fd, dst, size) < 0)
        bench_fail("reqresp of %llu bytes failed", (unsigned long long)size);
}

static void free_dst(void *arg)
{
    (void)arg;
    free(dst);
}

static void stream_teardown(void *ctx, uint64_t size)
{
    struct stream_ctx *x = ctx;

    (void)size;
    close(x->fd);
    waitpid(x->pid, NULL, 0);
}

size_t stream_peer_ops(enum bench_transport t, const uint8_t *payload, const struct bench_op **ops)
{
    static struct stream_ctx unix_ctx = {.pair = unix_pair, .serve = receiver};
    static struct stream_ctx tcp_ctx[2] = {{.pair = tcp_pair, .serve = receiver},
                                           {.pair = tcp_pair, .serve = responder}};
    static struct bench_op unix_op, tcp_ops[2];
    static int registered;
    if (t == BENCH_UNIX) {
        unix_ctx.payload = payload;
        unix_op = (struct bench_op){.system = "unix",
                                    .op = "send+ack",
                                    .setup = stream_setup,
                                    .run = stream_run,
                                    .teardown = stream_teardown,
                                    .ctx = &unix_ctx};
        *ops = &unix_op;
        return 1;
    }
    tcp_ctx[0].payload = tcp_ctx[1].payload = payload;
    tcp_ops[0] = (struct bench_op){.system = "raw-tcp",
                                   .op = "stream",
                                   .setup = stream_setup,
                                   .run = stream_run,
                                   .teardown = stream_teardown,
                                   .ctx = &tcp_ctx[0]};
    tcp_ops[1] = (struct bench_op){.system = "raw-tcp",
                                   .op = "reqresp",
                                   .setup = reqresp_setup,
                                   .run = reqresp_run,
                                   .teardown = stream_teardown,
                                   .ctx = &tcp_ctx[1]};
    if (!registered++)
        bench_on_exit(free_dst, NULL);
    *ops = tcp_ops;
    return 2;
}
