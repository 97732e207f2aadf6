/* remote.c - the remote suite: two ferryd nodes on this machine joined by a redis-server as
 * their directory; objects stored on one node are fetched to the other (ferry-tcp), against
 * Redis GET over loopback TCP (redis-tcp) and the raw loopback TCP ceiling (raw-tcp), with the
 * issue's targets computed from the run, and whether the fetching node opened any transfer
 * connection once warm. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define MAX_OPS 4
#define DEFAULT_BATCH 64
#define MAX_RATIOS (BENCH_MAX_SIZES + 3)
#define DAEMON_MEMORY "2G"
#define NODES_TIMEOUT_MS 15000
#define NODES_POLL_MS 50
#define STR_(x) #x
#define STR(x) STR_(x)
/* A node's first writes to a part of its arena take a page fault per page, far slower than
 * the copy: each measurement starts with a few untimed runs, so that the objects a run moves
 * land where the node has written before, as in a long-running node. */
#define WARMUP_RUNS 3
#define STREAM_TARGET_FROM (64 * MIB) /* the MiB/s target against raw-tcp, from this size up */

struct remote_options {
    uint64_t batch;
    int verify;
};

/* The two nodes: objects are stored on a (bench-a) and fetched to b (bench-b). */
struct cluster {
    ferry_client *a, *b;
    struct bench_proc *pa, *pb;
    int redis_port;
};

/* bench-b's counters at one moment: before and after the measurements. */
struct b_sample {
    ferry_stats stats;
    uint64_t faults; /* minor page faults of its process */
};

/* The ratios of a run, with room for the names of those made per size. */
struct remote_ratios {
    struct bench_ratio q[MAX_RATIOS];
    size_t n;
    char names[BENCH_MAX_SIZES][64];
    char descriptions[BENCH_MAX_SIZES][64];
    size_t ntext;
};

/* The targets between two results; the MiB/s one against raw-tcp is made per size. */
static const struct bench_ratio_def ratio_defs[] = {
    {"fetch_over_redis_get_ops_1M", "ops/s at 1M: ferry-tcp fetch / redis-tcp get", "ferry-tcp",
     "fetch", MIB, "redis-tcp", "get", MIB, BENCH_OPS_PER_SEC, 2, 0},
    {"fetch_p50_1K_over_raw_tcp_rtt", "p50 at 1K: ferry-tcp fetch / raw-tcp round trip",
     "ferry-tcp", "fetch", KIB, "raw-tcp", "stream", KIB, BENCH_P50_US, 3, 1},
};

/* Not a target: how far one TCP stream alone is ahead of Redis at 1M, for reading the first. */
static const struct bench_ratio_def raw_over_redis_def = {
    .name = "raw_tcp_over_redis_get_ops_1M",
    .description = "ops/s at 1M: raw-tcp stream / redis-tcp get",
    .num_system = "raw-tcp",
    .num_op = "stream",
    .num_size = MIB,
    .den_system = "redis-tcp",
    .den_op = "get",
    .den_size = MIB,
    .metric = BENCH_OPS_PER_SEC,
};

#define BATCH_RANGE "1 to " STR(FETCH_PEER_MAX_BATCH) ", default " STR(DEFAULT_BATCH)

static const char remote_help[] =
    "  --batch N        objects per fetch-batch call (" BATCH_RANGE "; fewer when\n"
    "                   N x size exceeds 512M)\n"
    "  --verify         start both ferryd with --verify (they check a digest of every\n"
    "                   fetched object before sealing it)\n";

static void handle_option(void *ctx, int ch, const char *arg)
{
    struct remote_options *o = ctx;
    if (ch == 'B')
        o->batch = bench_parse_count("--batch", arg, 1, FETCH_PEER_MAX_BATCH);
    else if (ch == 'v')
        o->verify = 1;
}

/* Returns -1 when the options are valid, else the exit status (0 for --help). */
static int parse_options(int argc, char **argv, struct bench_options *common,
                         struct remote_options *o)
{
    static const struct option longopts[] = {
        {"batch", required_argument, NULL, 'B'},
        {"verify", no_argument, NULL, 'v'},
        {NULL, 0, NULL, 0},
    };
    const struct bench_suite_options suite = {
        .name = "remote",
        .default_sizes = "1K,64K,1M,16M,64M,256M",
        .longopts = longopts,
        .handle = handle_option,
        .ctx = o,
        .synopsis =
            "usage: ferry-bench remote [--sizes LIST] [--seconds S] [--batch N] [--json]\n"
            "                          [--plot DIR] [--verify]\n"
            "Starts a redis-server on loopback (the cluster directory and the redis-tcp peer)\n"
            "and two ferryd nodes, bench-a and bench-b (--memory " DAEMON_MEMORY " each), and\n"
            "fetches objects stored on bench-a to bench-b. Options:\n",
        .help = remote_help,
    };
    *o = (struct remote_options){.batch = DEFAULT_BATCH};
    return bench_parse_options(argc, argv, &suite, common);
}

static ferry_client *start_node(const char *name, const char *node_id, int port, const char *url,
                                int verify, struct bench_proc **proc)
{
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    const char *args[] = {"--memory",    DAEMON_MEMORY, "--node-id",
                          node_id,       "--listen",    listen,
                          "--directory", url,           verify ? "--verify" : NULL,
                          NULL};
    return ferry_peer_start(NULL, name, args, proc);
}

/* 1 when bench-b's directory lists both nodes; *seen receives how many it lists. */
static int both_listed(const struct cluster *cl, size_t *seen)
{
    ferry_node_info *nodes;
    size_t n;
    int a = 0, b = 0;
    int err = ferry_nodes(cl->b, &nodes, &n);
    *seen = 0;
    if (err == FERRY_EDIRECTORY)
        return 0; /* not connected to Redis yet */
    bench_check_ferry(err, "ferry_nodes on bench-b");
    for (size_t i = 0; i < n; i++) {
        a |= strcmp(nodes[i].id, "bench-a") == 0;
        b |= strcmp(nodes[i].id, "bench-b") == 0;
    }
    free(nodes);
    *seen = n;
    return a && b;
}

static void wait_for_nodes(struct cluster *cl)
{
    size_t seen;
    for (unsigned waited = 0; !both_listed(cl, &seen); waited += NODES_POLL_MS) {
        if (bench_proc_ended(cl->pa) || bench_proc_ended(cl->pb))
            bench_fail("a ferryd node ended before the cluster formed");
        if (waited >= NODES_TIMEOUT_MS) {
            bench_proc_show_log(cl->pa);
            bench_proc_show_log(cl->pb);
            bench_fail("bench-b's directory did not list bench-a and bench-b within %d ms "
                       "(it lists %zu node(s))",
                       NODES_TIMEOUT_MS, seen);
        }
        bench_check_interrupt();
        bench_sleep_ms(NODES_POLL_MS);
    }
}

static void start_cluster(const struct remote_options *o, void *redis, struct cluster *cl)
{
    int ports[2];
    char url[64];
    cl->redis_port = redis_peer_port(redis);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", cl->redis_port);
    bench_free_ports(ports, 2);
    cl->a = start_node("ferryd-a", "bench-a", ports[0], url, o->verify, &cl->pa);
    cl->b = start_node("ferryd-b", "bench-b", ports[1], url, o->verify, &cl->pb);
    wait_for_nodes(cl);
}

/* Every operation of every system, in the order of the output. */
static size_t collect_ops(const struct remote_options *o, const struct cluster *cl, void *redis,
                          const uint8_t *payload, const struct bench_op **ops)
{
    const struct bench_op *list;
    size_t n, k;
    k = fetch_peer_ops(cl->a, cl->b, cl->pb, o->batch, payload, &list);
    n = bench_append_ops(ops, 0, list, k);
    k = redis_peer_ops(redis, "redis-tcp", payload, &list);
    ops[n++] = bench_pick_op(list, k, "get");
    k = stream_peer_ops(BENCH_TCP, payload, &list);
    return bench_append_ops(ops, n, list, k);
}

/* The first transfers open bench-b's connections to bench-a: made by a few runs of every
 * ferry-tcp operation at the smallest size, before the connections are counted. */
static void warm_up(const struct bench_op *const *ops, size_t nops, uint64_t size)
{
    const struct bench_limits lim = {.seconds = 0.01, .min_iters = 2, .max_iters = 10};
    for (size_t i = 0; i < nops; i++)
        if (strcmp(ops[i]->system, "ferry-tcp") == 0)
            bench_measure(ops[i], size, &lim);
}

static void add_ratio(struct remote_ratios *rr, const struct bench_ratio_def *d,
                      const struct bench_result *r, size_t n)
{
    rr->q[rr->n++] = bench_ratio_of(d, r, n);
}

/* fetch against the raw-tcp ceiling at size. */
static void add_stream_ratio(struct remote_ratios *rr, uint64_t size, const struct bench_result *r,
                             size_t n)
{
    char label[16];
    char *name = rr->names[rr->ntext], *description = rr->descriptions[rr->ntext++];
    bench_size_label(size, label, sizeof(label));
    snprintf(name, sizeof(rr->names[0]), "fetch_over_raw_tcp_stream_mibps_%s", label);
    snprintf(description, sizeof(rr->descriptions[0]),
             "MiB/s at %s: ferry-tcp fetch / raw-tcp stream", label);
    const struct bench_ratio_def d = {
        .name = name,
        .description = description,
        .num_system = "ferry-tcp",
        .num_op = "fetch",
        .num_size = size,
        .den_system = "raw-tcp",
        .den_op = "stream",
        .den_size = size,
        .metric = BENCH_MIB_PER_SEC,
        .target = 0.8,
    };
    add_ratio(rr, &d, r, n);
}

/* The connections bench-b opened while measured: the target is none once warm. */
static struct bench_ratio connections_ratio(const struct b_sample *b)
{
    struct bench_ratio q = {
        .name = "new_connections_steady_state",
        .description = "transfer connections bench-b opened once warm",
        .measured = 1,
        .value = (double)(b[1].stats.connections_opened - b[0].stats.connections_opened),
        .target = 0,
        .at_most = 1,
    };
    bench_ratio_judge(&q);
    return q;
}

static void compute_ratios(struct remote_ratios *rr, const struct bench_options *common,
                           const struct bench_result *r, size_t n, const struct b_sample *b)
{
    size_t streams = 0;
    rr->n = rr->ntext = 0;
    add_ratio(rr, &ratio_defs[0], r, n);
    for (size_t s = 0; s < common->nsizes; s++) {
        if (common->sizes[s] >= STREAM_TARGET_FROM) {
            add_stream_ratio(rr, common->sizes[s], r, n);
            streams++;
        }
    }
    if (streams == 0)
        add_stream_ratio(rr, STREAM_TARGET_FROM, r, n); /* shows as not measured */
    add_ratio(rr, &ratio_defs[1], r, n);
    rr->q[rr->n++] = connections_ratio(b);
}

static void describe_setup(char *buf, size_t len, const struct bench_options *common,
                           const struct remote_options *o, const struct cluster *cl)
{
    char label[16];
    size_t k = (size_t)snprintf(
        buf, len,
        "cluster: ferryd bench-a and bench-b (--memory %s%s) with a redis-server on\n"
        "127.0.0.1:%d as their directory, also the redis-tcp peer. ferry-tcp: objects stored\n"
        "on bench-a are fetched to bench-b, then deleted there (untimed) so that every run\n"
        "transfers them. fetch-batch: one ferry_fetch call per run; its p50/p99 are per\n"
        "batch, its ops/s and MiB/s count objects. Objects per batch:",
        DAEMON_MEMORY, o->verify ? " --verify" : "", cl->redis_port);
    for (size_t s = 0; s < common->nsizes && k < len; s++) {
        bench_size_label(common->sizes[s], label, sizeof(label));
        k += (size_t)snprintf(buf + k, len - k, " %s:%llu", label,
                              (unsigned long long)fetch_peer_batch(o->batch, common->sizes[s]));
    }
    if (k < len)
        snprintf(buf + k, len - k,
                 ".\nraw-tcp stream: SIZE bytes to another process over loopback TCP and an 8-byte "
                 "answer;\nat 1K its p50 is the round trip.\n\n");
}

static void describe_counters(char *buf, size_t len, const struct b_sample *b,
                              const struct bench_result *r, size_t n)
{
    const ferry_stats *s0 = &b[0].stats, *s1 = &b[1].stats;
    struct bench_ratio ref = bench_ratio_of(&raw_over_redis_def, r, n);
    size_t k = (size_t)snprintf(
        buf, len,
        "\nbench-b while measured: %llu transfer connection(s) opened, %llu object(s) received\n"
        "(%.1f MiB), %llu transfer failure(s), %llu peer error(s); directory: %llu lookup(s),\n"
        "%llu cache hit(s); minor page faults (first writes to a page of its arena): %llu in\n"
        "all, %llu in timed fetch runs.\n",
        (unsigned long long)(s1->connections_opened - s0->connections_opened),
        (unsigned long long)(s1->transfers_in - s0->transfers_in),
        (double)(s1->bytes_in - s0->bytes_in) / (double)MIB,
        (unsigned long long)(s1->transfer_failures - s0->transfer_failures),
        (unsigned long long)(s1->peer_errors - s0->peer_errors),
        (unsigned long long)(s1->directory_lookups - s0->directory_lookups),
        (unsigned long long)(s1->directory_cache_hits - s0->directory_cache_hits),
        (unsigned long long)(b[1].faults - b[0].faults),
        (unsigned long long)fetch_peer_timed_faults());
    if (ref.measured && k < len)
        snprintf(buf + k, len - k, "For reading the 1M target: %s = %.3f.\n", ref.description,
                 ref.value);
}

static void output(const struct bench_options *common, const struct remote_options *o,
                   const struct cluster *cl, const struct bench_result *r, size_t n,
                   const struct b_sample *b)
{
    struct remote_ratios rr;
    char preamble[2048], notes[768];
    compute_ratios(&rr, common, r, n, b);
    describe_setup(preamble, sizeof(preamble), common, o, cl);
    describe_counters(notes, sizeof(notes), b, r, n);
    bench_report(&(struct bench_report){
        .suite = "remote",
        .opts = common,
        .preamble = preamble,
        .notes = notes,
        .results = r,
        .nresults = n,
        .ratios = rr.q,
        .nratios = rr.n,
    });
}

static void sample_b(const struct cluster *cl, struct b_sample *b)
{
    bench_check_ferry(ferry_stats_get(cl->b, &b->stats), "stats of bench-b");
    b->faults = bench_proc_minor_faults(cl->pb);
}

int bench_remote(int argc, char **argv)
{
    struct bench_options common;
    struct remote_options o;
    struct cluster cl;
    const struct bench_op *ops[MAX_OPS];
    struct bench_result results[MAX_OPS * BENCH_MAX_SIZES];
    struct b_sample b[2]; /* before and after the measurements */
    int status = parse_options(argc, argv, &common, &o);
    if (status >= 0)
        return status;
    if (common.plot_dir != NULL)
        bench_require_gnuplot();

    const struct bench_limits lim = {
        .seconds = common.seconds, .min_iters = 5, .max_iters = 200000, .min_warmup = WARMUP_RUNS};
    const uint8_t *payload = bench_alloc_faulted(common.sizes[common.nsizes - 1]);
    void *redis = redis_peer_start(0);
    start_cluster(&o, redis, &cl);
    size_t nops = collect_ops(&o, &cl, redis, payload, ops);

    warm_up(ops, nops, common.sizes[0]);
    sample_b(&cl, &b[0]);
    bench_measure_all(ops, nops, common.sizes, common.nsizes, &lim, results);
    sample_b(&cl, &b[1]);
    output(&common, &o, &cl, results, nops * common.nsizes, b);
    free((void *)payload);
    return 0;
}
