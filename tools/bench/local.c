/* local.c - the local suite: ferry (put, get, get+read) against redis (set, get) and memcpy
 * on one node, at a list of sizes, with the target ratios computed from the run. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define MAX_SIZES 16
#define MAX_OPS 8
#define SIZE_LIMIT (512 * MIB) /* redis's default proto-max-bulk-len */
#define DAEMON_MEMORY "2G"

struct local_options {
    uint64_t sizes[MAX_SIZES];
    size_t nsizes;
    double seconds;
    int json;
    const char *plot_dir;
    const char *socket;
    const char *busy_poll; /* ferryd --busy-poll for the daemon started here, or NULL */
    int redis_port;
};

/* A target of the issue: num / den of one metric, both from this run. */
struct ratio_def {
    const char *name, *description;
    const char *num_system, *num_op;
    uint64_t num_size;
    const char *den_system, *den_op;
    uint64_t den_size;
    enum bench_metric metric;
    double target;
    int at_most;
};

static const struct ratio_def ratio_defs[] = {
    {"ferry_get_p50_64M_over_1K", "ferry get p50: 64M / 1K", "ferry", "get", 64 * MIB, "ferry",
     "get", KIB, BENCH_P50_US, 1.5, 1},
    {"ferry_get_over_redis_get_ops_1M", "ops/s at 1M: ferry get / redis get", "ferry", "get", MIB,
     "redis", "get", MIB, BENCH_OPS_PER_SEC, 20, 0},
    {"ferry_put_over_memcpy_mibps_64M", "MiB/s at 64M: ferry put / memcpy copy", "ferry", "put",
     64 * MIB, "memcpy", "copy", 64 * MIB, BENCH_MIB_PER_SEC, 0.70, 0},
    {"ferry_put_over_redis_set_ops_1K", "ops/s at 1K: ferry put / redis set", "ferry", "put", KIB,
     "redis", "set", KIB, BENCH_OPS_PER_SEC, 1, 0},
    {"ferry_get_over_redis_get_ops_1K", "ops/s at 1K: ferry get / redis get", "ferry", "get", KIB,
     "redis", "get", KIB, BENCH_OPS_PER_SEC, 1, 0},
};
#define NRATIOS (sizeof(ratio_defs) / sizeof(ratio_defs[0]))

/* memcpy: the copy bound, between two buffers faulted in beforehand. */
struct copy_ctx {
    const uint8_t *src;
    uint8_t *dst;
};

static volatile uint8_t copy_sink; /* keeps the copies alive */

static void copy_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct copy_ctx *x = ctx;
    (void)iter;
    memcpy(x->dst, x->src, size);
    copy_sink = x->dst[size - 1];
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ferry-bench local [--sizes LIST] [--seconds S] [--json] [--plot DIR]\n"
            "                         [--socket PATH | --busy-poll USEC] [--redis-port N]\n"
            "  --sizes LIST     comma-separated sizes, K/M/G = 2^10/2^20/2^30 bytes, up to 512M\n"
            "                   (default 1K,64K,1M,16M,64M)\n"
            "  --seconds S      measured time per system, operation and size (default 0.5)\n"
            "  --json           print a JSON document instead of the table\n"
            "  --plot DIR       also write DIR/local-throughput.png and DIR/local-latency.png\n"
            "                   (needs gnuplot)\n"
            "  --socket PATH    use the ferryd at PATH instead of starting one (--memory %s)\n"
            "  --busy-poll USEC start that ferryd with --busy-poll USEC (default: its default)\n"
            "  --redis-port N   use the redis-server on 127.0.0.1:N instead of starting one\n",
            DAEMON_MEMORY);
}

static int cmp_size(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts the sizes and drops repeats, so that every series runs from small to large. */
static void sort_sizes(struct local_options *o)
{
    size_t k = 0;
    qsort(o->sizes, o->nsizes, sizeof(o->sizes[0]), cmp_size);
    for (size_t i = 0; i < o->nsizes; i++)
        if (k == 0 || o->sizes[k - 1] != o->sizes[i])
            o->sizes[k++] = o->sizes[i];
    o->nsizes = k;
}

static double parse_seconds(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v) || v <= 0 || v > 3600)
        bench_fail("bad --seconds '%s': expected a number of seconds in (0, 3600]", s);
    return v;
}

static int parse_port(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 1 || v > 65535)
        bench_fail("bad --redis-port '%s': expected 1 to 65535", s);
    return (int)v;
}

/* Returns -1 when the options are valid, else the exit status (0 for --help). */
static int parse_options(int argc, char **argv, struct local_options *o)
{
    static const struct option longopts[] = {
        {"sizes", required_argument, NULL, 'z'},  {"seconds", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},         {"plot", required_argument, NULL, 'p'},
        {"socket", required_argument, NULL, 's'}, {"redis-port", required_argument, NULL, 'r'},
        {"busy-poll", required_argument, NULL, 'b'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *sizes = "1K,64K,1M,16M,64M";
    int ch;
    *o = (struct local_options){.seconds = 0.5};
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'z':
            sizes = optarg;
            break;
        case 't':
            o->seconds = parse_seconds(optarg);
            break;
        case 'j':
            o->json = 1;
            break;
        case 'p':
            o->plot_dir = optarg;
            break;
        case 's':
            o->socket = optarg;
            break;
        case 'r':
            o->redis_port = parse_port(optarg);
            break;
        case 'b':
            if (!*optarg || strspn(optarg, "0123456789") != strlen(optarg))
                bench_fail("bad --busy-poll '%s': expected microseconds", optarg);
            o->busy_poll = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "ferry-bench: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    o->nsizes = bench_parse_sizes(sizes, o->sizes, MAX_SIZES, SIZE_LIMIT);
    sort_sizes(o);
    return -1;
}

static struct bench_ratio compute_ratio(const struct ratio_def *d, const struct bench_result *r,
                                        size_t n)
{
    struct bench_ratio q = {
        .name = d->name, .description = d->description, .target = d->target, .at_most = d->at_most};
    const struct bench_result *num = bench_find(r, n, d->num_system, d->num_op, d->num_size);
    const struct bench_result *den = bench_find(r, n, d->den_system, d->den_op, d->den_size);
    if (num == NULL || den == NULL || bench_metric(den, d->metric) <= 0)
        return q;
    q.measured = 1;
    q.value = bench_metric(num, d->metric) / bench_metric(den, d->metric);
    q.met = d->at_most ? q.value <= d->target : q.value >= d->target;
    return q;
}

static size_t append_ops(const struct bench_op **ops, size_t n, const struct bench_op *list,
                         size_t k)
{
    for (size_t i = 0; i < k; i++)
        ops[n++] = &list[i];
    return n;
}

/* Every operation of every system, in the order of the output. */
static size_t collect_ops(const struct local_options *o, const uint8_t *payload,
                          struct copy_ctx *copy, const struct bench_op **ops)
{
    static struct bench_op copy_op = {"memcpy", "copy", NULL, copy_run, NULL, NULL, NULL};
    const struct bench_op *list;
    size_t n = 0, k;
    copy_op.ctx = copy;

    const char *daemon_args[] = {"--memory", DAEMON_MEMORY, o->busy_poll ? "--busy-poll" : NULL,
                                 o->busy_poll, NULL};
    k = ferry_peer_ops(ferry_peer_start(o->socket, daemon_args), payload, &list);
    n = append_ops(ops, n, list, k);
    k = redis_peer_ops(redis_peer_start(o->redis_port), payload, &list);
    n = append_ops(ops, n, list, k);
    k = unix_peer_ops(payload, &list);
    n = append_ops(ops, n, list, k);
    return append_ops(ops, n, &copy_op, 1);
}

static void output(const struct local_options *o, const struct bench_result *r, size_t n)
{
    struct bench_ratio q[NRATIOS];
    for (size_t i = 0; i < NRATIOS; i++)
        q[i] = compute_ratio(&ratio_defs[i], r, n);
    if (o->json) {
        bench_print_json(stdout, "local", r, n, q, NRATIOS);
    } else {
        const char *spin = getenv("FERRY_SPIN_US");
        printf("ferryd: %s, --busy-poll %s; clients: FERRY_SPIN_US=%s (default %d)\n",
               o->socket ? o->socket : "started here",
               o->busy_poll ? o->busy_poll : "as configured", spin && *spin ? spin : "unset",
               FERRY_DEFAULT_SPIN_US);
        bench_print_table(stdout, r, n);
        fputs("(ferry get hands out the stored bytes in place: its MiB/s is bytes made readable "
              "per second.)\n",
              stdout);
        bench_print_ratios(stdout, q, NRATIOS);
    }
    fflush(stdout);
    if (o->plot_dir != NULL)
        bench_plot(o->plot_dir, "local", r, n);
}

int bench_local(int argc, char **argv)
{
    struct local_options o;
    const struct bench_op *ops[MAX_OPS];
    struct bench_result results[MAX_OPS * MAX_SIZES];
    int status = parse_options(argc, argv, &o);
    if (status >= 0)
        return status;
    if (o.plot_dir != NULL)
        bench_require_gnuplot();

    /* Few runs for large sizes, as many as fit in the time for small ones. */
    const struct bench_limits lim = {.seconds = o.seconds, .min_iters = 5, .max_iters = 200000};
    uint64_t max_size = o.sizes[o.nsizes - 1];
    const uint8_t *payload = bench_alloc_faulted(max_size);
    struct copy_ctx copy = {payload, bench_alloc_faulted(max_size)};
    size_t nops = collect_ops(&o, payload, &copy, ops);

    /* Size by size, so that the figures a ratio compares are taken close together in time
     * (other load on the machine drifts); reported operation by operation. */
    for (size_t s = 0; s < o.nsizes; s++)
        for (size_t i = 0; i < nops; i++)
            results[i * o.nsizes + s] = bench_measure(ops[i], o.sizes[s], &lim);
    output(&o, results, nops * o.nsizes);
    free(copy.dst);
    free((void *)payload);
    return 0;
}
