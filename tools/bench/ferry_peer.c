/* ferry_peer.c - ferry as a measured system: its daemon, and the operations put, put_nowait,
 * nowait+flush, get and get+read through libferry. */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define START_TIMEOUT_MS 10000
#define START_POLL_MS 5

/* The state behind the ferry operations. Ids are <run nonce, counter, kind> so that they
 * never meet those of another client of a shared daemon. */
struct ferry_ctx {
    ferry_client *c;
    const uint8_t *payload;
    uint64_t nonce;
    ferry_id read_id; /* the object that get and get+read read */
};

static struct ferry_ctx ferry_ctx;
static volatile uint64_t read_sink; /* keeps get+read's sums alive */

ferry_id ferry_peer_id(uint64_t nonce, uint64_t counter, char kind)
{
    ferry_id id;
    memcpy(id.bytes, &nonce, 8);
    memcpy(id.bytes + 8, &counter, 8);
    memcpy(id.bytes + 16, "fb", 2);
    id.bytes[18] = (uint8_t)kind;
    id.bytes[19] = 0;
    return id;
}

/* put: one fresh object per iteration, deleted again outside the timed section. */
static void put_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct ferry_ctx *x = ctx;
    ferry_id id = ferry_peer_id(x->nonce, iter, 'p');
    bench_check_ferry(ferry_put(x->c, &id, x->payload, size, NULL, 0), "put of %llu bytes",
                      (unsigned long long)size);
}

static void put_after(void *ctx, uint64_t size, uint64_t iter)
{
    struct ferry_ctx *x = ctx;
    ferry_id id = ferry_peer_id(x->nonce, iter, 'p');
    bench_check_ferry(ferry_delete(x->c, &id), "delete of a %llu-byte object",
                      (unsigned long long)size);
}

/* put_nowait: the caller's time of one put without a message; the delete after it (untimed)
 * waits for the daemon to have taken it. */
static void put_nowait_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct ferry_ctx *x = ctx;
    ferry_id id = ferry_peer_id(x->nonce, iter, 'n');
    bench_check_ferry(ferry_put_nowait(x->c, &id, x->payload, size, NULL, 0),
                      "put_nowait of %llu bytes", (unsigned long long)size);
}

static void put_nowait_after(void *ctx, uint64_t size, uint64_t iter)
{
    struct ferry_ctx *x = ctx;
    ferry_id id = ferry_peer_id(x->nonce, iter, 'n');
    bench_check_ferry(ferry_delete(x->c, &id), "delete of a %llu-byte object",
                      (unsigned long long)size);
}

void ferry_peer_burst(ferry_client *c, const uint8_t *payload, uint64_t nonce, char kind,
                      uint64_t size, uint64_t iter)
{
    for (uint64_t k = 0; k < FERRY_PEER_BURST; k++) {
        ferry_id id = ferry_peer_id(nonce, iter * FERRY_PEER_BURST + k, kind);
        bench_check_ferry(ferry_put_nowait(c, &id, payload, size, NULL, 0),
                          "put_nowait of %llu bytes", (unsigned long long)size);
    }
    bench_check_ferry(ferry_flush(c), "flush after %u puts of %llu bytes", FERRY_PEER_BURST,
                      (unsigned long long)size);
}

void ferry_peer_burst_delete(ferry_client *c, uint64_t nonce, char kind, uint64_t size,
                             uint64_t iter)
{
    for (uint64_t k = 0; k < FERRY_PEER_BURST; k++) {
        ferry_id id = ferry_peer_id(nonce, iter * FERRY_PEER_BURST + k, kind);
        bench_check_ferry(ferry_delete(c, &id), "delete of a %llu-byte object",
                          (unsigned long long)size);
    }
}

uint64_t ferry_peer_burst_objects(void *ctx, uint64_t size)
{
    (void)ctx;
    (void)size;
    return FERRY_PEER_BURST;
}

/* nowait+flush: the rate puts are stored at, the daemon's work included. */
static void burst_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct ferry_ctx *x = ctx;
    ferry_peer_burst(x->c, x->payload, x->nonce, 'b', size, iter);
}

static void burst_after(void *ctx, uint64_t size, uint64_t iter)
{
    struct ferry_ctx *x = ctx;
    ferry_peer_burst_delete(x->c, x->nonce, 'b', size, iter);
}

/* get and get+read read one object per size, stored before and deleted after. */
static void read_setup(void *ctx, uint64_t size)
{
    struct ferry_ctx *x = ctx;
    x->read_id = ferry_peer_id(x->nonce, size, 'g');
    bench_check_ferry(ferry_put(x->c, &x->read_id, x->payload, size, NULL, 0),
                      "put of the %llu-byte object to read", (unsigned long long)size);
}

static void read_teardown(void *ctx, uint64_t size)
{
    struct ferry_ctx *x = ctx;
    bench_check_ferry(ferry_delete(x->c, &x->read_id), "delete of the %llu-byte object read",
                      (unsigned long long)size);
}

/* Takes a reference to the object to read and returns its bytes. */
static const uint8_t *get_object(struct ferry_ctx *x, uint64_t size)
{
    ferry_buffer b;
    bench_check_ferry(ferry_get(x->c, &x->read_id, 1, 0, &b), "get of a %llu-byte object",
                      (unsigned long long)size);
    if (b.data_size != size)
        bench_fail("get of a %llu-byte object returned %llu bytes", (unsigned long long)size,
                   (unsigned long long)b.data_size);
    return b.data;
}

static void release_object(struct ferry_ctx *x, uint64_t size)
{
    bench_check_ferry(ferry_release(x->c, &x->read_id), "release of a %llu-byte object",
                      (unsigned long long)size);
}

static void get_run(void *ctx, uint64_t size, uint64_t iter)
{
    (void)iter;
    get_object(ctx, size);
    release_object(ctx, size);
}

/* Sums the object as 8-byte words (memcpy: no alignment assumed) and its tail bytes. */
static void get_read_run(void *ctx, uint64_t size, uint64_t iter)
{
    (void)iter;
    const uint8_t *p = get_object(ctx, size);
    uint64_t sum = 0, w, i;
    for (i = 0; i + 8 <= size; i += 8) {
        memcpy(&w, p + i, 8);
        sum += w;
    }
    for (; i < size; i++)
        sum += p[i];
    read_sink = sum;
    release_object(ctx, size);
}

size_t ferry_peer_ops(ferry_client *c, const uint8_t *payload, const struct bench_op **ops)
{
    static const struct bench_op list[] = {
        {.system = "ferry", .op = "put", .run = put_run, .after = put_after, .ctx = &ferry_ctx},
        {.system = "ferry",
         .op = "put_nowait",
         .run = put_nowait_run,
         .after = put_nowait_after,
         .ctx = &ferry_ctx},
        {.system = "ferry",
         .op = "nowait+flush",
         .run = burst_run,
         .after = burst_after,
         .objects = ferry_peer_burst_objects,
         .ctx = &ferry_ctx},
        {.system = "ferry",
         .op = "get",
         .setup = read_setup,
         .run = get_run,
         .teardown = read_teardown,
         .ctx = &ferry_ctx},
        {.system = "ferry",
         .op = "get+read",
         .setup = read_setup,
         .run = get_read_run,
         .teardown = read_teardown,
         .ctx = &ferry_ctx},
    };
    ferry_ctx = (struct ferry_ctx){.c = c, .payload = payload, .nonce = bench_nonce()};
    *ops = list;
    return sizeof(list) / sizeof(list[0]);
}

/* Starts <dir of this executable>/ferryd on <scratch dir>/<name>.sock. */
static struct bench_proc *start_daemon(const char *name, const char *const *daemon_args, char *sock,
                                       size_t sock_len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - sizeof("/ferryd"));
    if (n < 0)
        bench_fail("readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = '\0';
    strcpy(strrchr(exe, '/'), "/ferryd");
    if (access(exe, X_OK) != 0)
        bench_fail("no ferryd next to ferry-bench (%s: %s); build it, or pass --socket", exe,
                   strerror(errno));
    snprintf(sock, sock_len, "%s/%s.sock", bench_tmpdir(), name);
    char *argv[32] = {exe, "--socket", sock};
    size_t n_args = 3;
    for (; *daemon_args; daemon_args++) {
        if (n_args == sizeof(argv) / sizeof(argv[0]) - 1)
            bench_fail("too many arguments for %s", name);
        argv[n_args++] = (char *)*daemon_args;
    }
    argv[n_args] = NULL;
    return bench_proc_start(name, argv);
}

/* Connects, retrying while the daemon is starting, for up to START_TIMEOUT_MS. */
static ferry_client *connect_started(struct bench_proc *daemon, const char *sock)
{
    ferry_client *c;
    for (unsigned waited = 0;; waited += START_POLL_MS) {
        int err = ferry_connect(sock, &c);
        if (err == 0)
            return c;
        if (err != FERRY_ECONN)
            bench_check_ferry(err, "connect to %s", sock);
        if (bench_proc_ended(daemon))
            bench_fail("%s ended before accepting connections on %s", daemon->name, sock);
        if (waited >= START_TIMEOUT_MS) {
            bench_proc_show_log(daemon);
            bench_check_ferry(err, "%s did not accept connections on %s within %d ms", daemon->name,
                              sock, START_TIMEOUT_MS);
        }
        bench_check_interrupt();
        bench_sleep_ms(START_POLL_MS);
    }
}

/* Waits (bounded) until the daemon has mapped its whole arena: its background prefault
 * competes for the CPUs, and measurements taken meanwhile measure that. */
static void wait_settled(struct bench_proc *daemon)
{
    for (unsigned waited = 0; !bench_proc_log_has(daemon, "arena mapped");
         waited += START_POLL_MS) {
        if (waited >= START_TIMEOUT_MS || bench_proc_ended(daemon))
            return; /* measured anyway; the log tells why if it matters */
        bench_check_interrupt();
        bench_sleep_ms(START_POLL_MS);
    }
}

static void disconnect_at_exit(void *arg)
{
    ferry_disconnect(arg);
}

ferry_client *ferry_peer_start(const char *socket_path, const char *name,
                               const char *const *daemon_args, struct bench_proc **daemon)
{
    ferry_client *c;
    struct bench_proc *p = NULL;
    char sock[PATH_MAX];
    if (socket_path != NULL) {
        bench_check_ferry(ferry_connect(socket_path, &c), "connect to %s", socket_path);
    } else {
        double t0 = bench_now(), served, mapped;
        p = start_daemon(name, daemon_args, sock, sizeof(sock));
        c = connect_started(p, sock);
        served = bench_now();
        wait_settled(p);
        mapped = bench_now();
        /* Start-up as an operator sees it: from exec until the socket answers, and until the
         * whole arena is mapped (in the background; the daemon serves meanwhile). */
        fprintf(stderr,
                "ferry-bench: %s served %.0f ms after its start, arena mapped after %.0f ms\n",
                name, (served - t0) * 1e3, (mapped - t0) * 1e3);
    }
    if (daemon != NULL)
        *daemon = p;
    bench_on_exit(disconnect_at_exit, c);
    return c;
}
