/* util.c - failure, cleanup at exit, signals, clocks, sizes and buffers for ferry-bench. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "free_port.h"

#define MAX_EXIT_HANDLERS 256 /* the spill suite starts a daemon per size and round */
#define MAX_PORT_TRIES 100    /* picks of a port already chosen, of thousands free */

struct exit_handler {
    void (*fn)(void *);
    void *arg;
};

static struct exit_handler exit_handlers[MAX_EXIT_HANDLERS];
static size_t exit_handler_count;
static volatile sig_atomic_t stop_requested;

static void run_exit_handlers(void)
{
    while (exit_handler_count > 0) {
        struct exit_handler h = exit_handlers[--exit_handler_count];
        h.fn(h.arg);
    }
}

void bench_on_exit(void (*fn)(void *), void *arg)
{
    if (exit_handler_count == 0)
        atexit(run_exit_handlers);
    if (exit_handler_count == MAX_EXIT_HANDLERS) {
        fn(arg);
        bench_fail("too many resources to clean up at exit (at most %d)", MAX_EXIT_HANDLERS);
    }
    exit_handlers[exit_handler_count++] = (struct exit_handler){fn, arg};
}

static void free_handler(void *ptr)
{
    free(ptr);
}

void bench_free_at_exit(void *ptr)
{
    bench_on_exit(free_handler, ptr);
}

void bench_fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("ferry-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

void bench_check_ferry(int err, const char *what_fmt, ...)
{
    char what[256];
    va_list ap;
    if (err == 0)
        return;
    /* ferry_errmsg() is the detail of the last call: read it before anything else runs. */
    const char *detail = ferry_errmsg();
    va_start(ap, what_fmt);
    vsnprintf(what, sizeof(what), what_fmt, ap);
    va_end(ap);
    bench_fail("%s: %s: %s", what, ferry_strerror(err), detail);
}

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

void bench_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; /* calls in flight finish; the loops check the flag after them */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void bench_check_interrupt(void)
{
    if (stop_requested)
        bench_fail("interrupted");
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_requested)
        ;
}

/* One element of a size list: digits and an optional binary suffix; *end past it. */
static uint64_t parse_size(const char *s, const char **end, uint64_t limit)
{
    char *rest;
    if (!isdigit((unsigned char)*s))
        bench_fail("bad size '%s': expected a number with an optional K, M or G", s);
    errno = 0;
    unsigned long long v = strtoull(s, &rest, 10);
    unsigned shift = 0;
    switch (toupper((unsigned char)*rest)) {
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    }
    if (shift != 0)
        rest++;
    if (errno != 0 || v == 0 || v > (limit >> shift) || (*rest != ',' && *rest != '\0'))
        bench_fail("bad size '%.*s': expected 1 byte to %llu MiB, e.g. 64K", (int)(rest - s) + 1, s,
                   (unsigned long long)(limit >> 20));
    *end = rest;
    return (uint64_t)v << shift;
}

size_t bench_parse_sizes(const char *list, uint64_t *sizes, size_t max, uint64_t limit)
{
    size_t n = 0;
    const char *p = list;
    for (;;) {
        if (n == max)
            bench_fail("too many sizes in '%s' (at most %zu)", list, max);
        sizes[n++] = parse_size(p, &p, limit);
        if (*p == '\0')
            return n;
        p++;
    }
}

void bench_size_label(uint64_t size, char *buf, size_t len)
{
    static const char units[] = "KMG";
    int u = -1;
    while (u < 2 && size >= 1024 && size % 1024 == 0) {
        size /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%llu", (unsigned long long)size);
    else
        snprintf(buf, len, "%llu%c", (unsigned long long)size, units[u]);
}

uint64_t bench_nonce(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)getpid() << 40) ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec;
}

uint8_t *bench_alloc_faulted(uint64_t size)
{
    uint8_t *p = malloc(size);
    if (p == NULL)
        bench_fail("out of memory for a %llu-byte buffer", (unsigned long long)size);
    for (uint64_t i = 0; i < size; i++)
        p[i] = (uint8_t)(i * 131 + 7);
    return p;
}

int bench_loopback_socket(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        bench_fail("finding a free TCP port: %s", strerror(errno));
    *port = ntohs(a.sin_port);
    return fd;
}

static int port_taken(const int *ports, size_t n, int port)
{
    for (size_t i = 0; i < n; i++)
        if (ports[i] == port)
            return 1;
    return 0;
}

void bench_free_ports(int *ports, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int tries = 0;
        do {
            if ((ports[i] = free_port_pick()) < 0)
                bench_fail("finding a free TCP port: %s", strerror(errno));
            if (++tries > MAX_PORT_TRIES)
                bench_fail("%d picks of a free TCP port gave ones already chosen", tries - 1);
        } while (port_taken(ports, i, ports[i]));
    }
}

void bench_counters_get(ferry_client *c, const char *who, struct bench_counters *out)
{
    ferry_stat *all;
    size_t n;
    bench_check_ferry(ferry_stats_get(c, &out->st, sizeof(out->st)), "stats of %s", who);
    bench_check_ferry(ferry_stats_list(c, &all, &n), "stats of %s", who);
    if (n > BENCH_MAX_COUNTERS) {
        ferry_free(all);
        bench_fail("%s has %zu counters, more than the %d kept here", who, n, BENCH_MAX_COUNTERS);
    }
    memcpy(out->all, all, n * sizeof(*all));
    out->n = n;
    ferry_free(all);
}

uint64_t bench_counter(const struct bench_counters *s, const char *name)
{
    return ferry_stat_value(s->all, s->n, name);
}
