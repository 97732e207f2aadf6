/* local.c - the local suite: ferry (put, get, get+read) against redis (set, get) and memcpy
 * on one node, at a list of sizes, with the target ratios computed from the run. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define MAX_OPS 10
#define DAEMON_MEMORY "2G"

struct local_options {
    const char *socket;
    const char *busy_poll; /* ferryd --busy-poll for the daemon started here, or NULL */
    int redis_port;
};

/* Each target with what bounds it where it is missed, said beside MISSED. */
#define BUSY_CORES                                                                                 \
    "the daemon's thread waited for a core (other processes on this machine, or fewer cores "      \
    "than bench, daemon and Redis need: rerun on a quiet machine, --repeat 3)"
static const struct bench_ratio_def ratio_defs[] = {
    {"ferry_get_p50_64M_over_1K", "ferry get p50: 64M / 1K", "ferry", "get", 64 * MIB, "ferry",
     "get", KIB, BENCH_P50_US, 1.5, 1,
     "a get hands out an offset and never touches the bytes, so size cannot cost: "
     "noise, " BUSY_CORES},
    {"ferry_get_over_redis_get_ops_1M", "ops/s at 1M: ferry get / redis get", "ferry", "get", MIB,
     "redis", "get", MIB, BENCH_OPS_PER_SEC, 20, 0, BUSY_CORES},
    {"ferry_put_over_memcpy_mibps_64M", "MiB/s at 64M: ferry put / memcpy copy", "ferry", "put",
     64 * MIB, "memcpy", "copy", 64 * MIB, BENCH_MIB_PER_SEC, 0.70, 0,
     "a put is memcpy's one copy into the arena plus a request: memory bandwidth shared with other "
     "processes, or the arena's pages faulted in for the first time (--repeat 3)"},
    {"ferry_put_over_redis_set_ops_1K", "ops/s at 1K: ferry put / redis set", "ferry", "put", KIB,
     "redis", "set", KIB, BENCH_OPS_PER_SEC, 1, 0, BUSY_CORES},
    {"ferry_get_over_redis_get_ops_1K", "ops/s at 1K: ferry get / redis get", "ferry", "get", KIB,
     "redis", "get", KIB, BENCH_OPS_PER_SEC, 1, 0, BUSY_CORES},
};
#define NRATIOS (sizeof(ratio_defs) / sizeof(ratio_defs[0]))

static void handle_option(void *ctx, int ch, const char *arg)
{
    struct local_options *o = ctx;
    switch (ch) {
    case 's':
        o->socket = arg;
        break;
    case 'r':
        o->redis_port = (int)bench_parse_count("--redis-port", arg, 1, 65535);
        break;
    case 'b':
        if (!*arg || strspn(arg, "0123456789") != strlen(arg))
            bench_fail("bad --busy-poll '%s': expected microseconds", arg);
        o->busy_poll = arg;
        break;
    }
}

/* Returns -1 when the options are valid, else the exit status (0 for --help). */
static int parse_options(int argc, char **argv, struct bench_options *common,
                         struct local_options *o)
{
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, 's'},
        {"redis-port", required_argument, NULL, 'r'},
        {"busy-poll", required_argument, NULL, 'b'},
        {NULL, 0, NULL, 0},
    };
    const struct bench_suite_options suite = {
        .name = "local",
        .default_sizes = "1K,64K,1M,16M,64M",
        .longopts = longopts,
        .handle = handle_option,
        .ctx = o,
        .synopsis =
            "usage: ferry-bench local [--sizes LIST] [--seconds S] [--json] [--plot DIR]\n"
            "                         [--socket PATH | --busy-poll USEC] [--redis-port N]\n",
        .help =
            "  --socket PATH    use the ferryd at PATH instead of starting one "
            "(--memory " DAEMON_MEMORY ")\n"
            "  --busy-poll USEC start that ferryd with --busy-poll USEC (default: its default)\n"
            "  --redis-port N   use the redis-server on 127.0.0.1:N instead of starting one\n",
    };
    *o = (struct local_options){0};
    return bench_parse_options(argc, argv, &suite, common);
}

/* Every operation of every system, in the order of the output. */
static size_t collect_ops(const struct local_options *o, const uint8_t *payload, uint64_t max_size,
                          const struct bench_op **ops)
{
    const struct bench_op *list;
    size_t n = 0, k;

    const char *daemon_args[] = {"--memory", DAEMON_MEMORY, o->busy_poll ? "--busy-poll" : NULL,
                                 o->busy_poll, NULL};
    ferry_client *c = ferry_peer_start(o->socket, "ferryd", daemon_args, NULL);
    k = ferry_peer_ops(c, payload, &list);
    n = bench_append_ops(ops, n, list, k);
    k = redis_peer_ops(redis_peer_start(o->redis_port), "redis", payload, &list);
    n = bench_append_ops(ops, n, list, k);
    k = stream_peer_ops(BENCH_UNIX, payload, &list);
    n = bench_append_ops(ops, n, list, k);
    k = copy_peer_ops(payload, max_size, &list);
    return bench_append_ops(ops, n, list, k);
}

/* The ratios of one comparison into q[0..NRATIOS). */
static void compute_ratios(const struct bench_set *set, struct bench_ratio *q)
{
    for (size_t i = 0; i < NRATIOS; i++)
        q[i] = bench_ratio_of(&ratio_defs[i], set);
}

/* The report of the last comparison; q holds the ratios of all of them. */
static void output(const struct bench_options *common, const struct local_options *o,
                   const struct bench_set *set, const struct bench_ratio *q)
{
    char preamble[256];
    const char *spin = getenv("FERRY_SPIN_US");
    snprintf(preamble, sizeof(preamble),
             "ferryd: %s, --busy-poll %s; clients: FERRY_SPIN_US=%s (default %d)\n",
             o->socket ? o->socket : "started here", o->busy_poll ? o->busy_poll : "as configured",
             spin && *spin ? spin : "unset", FERRY_DEFAULT_SPIN_US);
    bench_report(&(struct bench_report){
        .suite = "local",
        .opts = common,
        .preamble = preamble,
        .notes = "(ferry get hands out the stored bytes in place: its MiB/s is bytes made "
                 "readable per second.)\n",
        .results = set->summary,
        .nresults = set->n,
        .ratios = &q[(common->repeat - 1) * NRATIOS],
        .nratios = NRATIOS,
        .all_ratios = q,
    });
}

int bench_local(int argc, char **argv)
{
    struct bench_options common;
    struct local_options o;
    const struct bench_op *ops[MAX_OPS];
    struct bench_set set;
    static struct bench_ratio q[BENCH_MAX_REPEAT * NRATIOS];
    int status = parse_options(argc, argv, &common, &o);
    if (status >= 0)
        return status;
    if (common.plot_dir != NULL)
        bench_require_gnuplot();

    /* Few runs for large sizes, as many as fit in the time for small ones. */
    const struct bench_limits lim = {
        .seconds = common.seconds, .min_iters = 3, .max_iters = 200000};
    uint64_t max_size = common.sizes[common.nsizes - 1];
    const uint8_t *payload = bench_alloc_faulted(max_size);
    size_t nops = collect_ops(&o, payload, max_size, ops);

    for (unsigned k = 0; k < common.repeat; k++) {
        bench_measure_rounds(ops, nops, &common, &lim, k, &set);
        compute_ratios(&set, &q[k * NRATIOS]);
    }
    output(&common, &o, &set, q);
    free((void *)payload);
    return 0;
}
