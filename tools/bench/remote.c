/* remote.c - the remote suite: pairs of ferryd nodes on this machine, each pair on one
 * transport with a database of one redis-server as its directory; objects stored on one node
 * are fetched to the other, over the tcp transport (ferry-tcp) and over the fabric with each
 * provider and protocol (ferry-fabric:PROVIDER, remote_fabric.c), against Redis GET over
 * loopback TCP (redis-tcp), the raw loopback TCP ceiling (raw-tcp) and memcpy, with the
 * issue's targets computed from the run, and whether a node opened any connection once warm. */
#include <stdlib.h>
#include <string.h>

#include "remote.h"

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define DEFAULT_BATCH 64
#define DAEMON_MEMORY "2G"
#define FABRIC_MEMORY "1G" /* one object per fetch: room for the largest size on both nodes */
#define HOLDER_MEMORY "1G" /* the same, on the other holders of fetch-holders */
#define STR_(x) #x
#define STR(x) STR_(x)
/* A node's first writes to a part of its arena take a page fault per page, far slower than
 * the copy: each measurement starts with a few untimed runs, so that the objects a run moves
 * land where the node has written before, as in a long-running node. */
#define WARMUP_RUNS 3
/* The MiB/s targets against raw TCP: the request/response of a fetch's shape from 64K up, and
 * the plain stream from 16M up. */
#define REQRESP_TARGET_FROM (64 * KIB)
#define STREAM_TARGET_FROM (16 * MIB)
#define RAW_TARGET 0.9

static const char *const transport_names[REMOTE_TRANSPORTS] = {"tcp", "fabric"};

/* The targets between two results; the MiB/s ones against raw-tcp are made per size. */
static const struct bench_ratio_def ratio_defs[] = {
    {"fetch_over_redis_get_ops_1M", "ops/s at 1M: ferry-tcp fetch / redis-tcp get", "ferry-tcp",
     "fetch", MIB, "redis-tcp", "get", MIB, BENCH_OPS_PER_SEC, 2, 0,
     "two daemons, Redis and the bench share this machine's cores over loopback: the pair "
     "measures the cores, not a network (the testbed measures links: ferry-bench cluster)"},
    {"fetch_p50_1K_over_raw_tcp_rtt", "p50 at 1K: ferry-tcp fetch / raw-tcp reqresp", "ferry-tcp",
     "fetch", KIB, "raw-tcp", "reqresp", KIB, BENCH_P50_US, 3, 1,
     "a fetch is a request to the local daemon, a pull between two daemons and a reply: each of "
     "the three hops waits for a core where there are fewer than its processes"},
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

#define PROVIDERS_MAX "at most " STR(REMOTE_MAX_PROVIDERS)

static const char remote_help[] =
    "  --batch N        objects per fetch-batch call (" BATCH_RANGE "; fewer when\n"
    "                   N x size exceeds 512M)\n"
    "  --no-verify      start every ferryd with --no-verify (they take fetched bytes\n"
    "                   unchecked; by default each chunk is checked against its digest)\n"
    "  --transport LIST tcp, fabric or both (default tcp,fabric): which pairs of nodes run\n"
    "  --provider LIST  the fabric's libfabric providers, a pair of nodes each (default\n"
    "                   \"shm,tcp;ofi_rxm\"; " PROVIDERS_MAX ")\n"
    "  --protocol LIST  eager, rendezvous, hybrid (default all three): fetch-eager moves every\n"
    "                   object as messages, fetch-rendezvous by one-sided reads, fetch-hybrid\n"
    "                   as messages up to the receiver's eager limit, by reads above\n"
    "  --hybrid-max SIZE|auto  that limit (default auto: the provider's default)\n"
    "  --holders K      tcp: also fetch-holders, objects that K nodes hold (2 to 4; the tcp\n"
    "                   pair and K-1 more nodes, all with --split-min 1M): b fetches each in\n"
    "                   ranges from all K at once; compared with fetch, from one\n"
    "--plot also writes DIR/remote-fabric-PROVIDER.png per provider: median MiB/s of each\n"
    "protocol, the tcp transport, raw TCP and memcpy against size. The default sweep (5\n"
    "rounds) takes 2-3 minutes on 2 cores; for a quick run: --sizes 1K,1M,16M --rounds 3.\n";

static void handle_option(void *ctx, int ch, const char *arg)
{
    struct remote_options *o = ctx;
    switch (ch) {
    case 'B':
        o->batch = bench_parse_count("--batch", arg, 1, FETCH_PEER_MAX_BATCH);
        break;
    case 'v':
        o->no_verify = 1;
        break;
    case 'V': /* the default since 0.11 (scripts/digest-bench.sh still says it) */
        o->no_verify = 0;
        break;
    case 'T':
        o->transports = bench_parse_choices("--transport", arg, transport_names, REMOTE_TRANSPORTS);
        break;
    case 'P':
        o->nproviders = bench_split_list("--provider", arg, o->providers, REMOTE_MAX_PROVIDERS);
        break;
    case 'R':
        o->protocols =
            bench_parse_choices("--protocol", arg, fetch_protocol_names, FETCH_PROTOCOLS);
        break;
    case 'K':
        o->holders = bench_parse_count("--holders", arg, 2, FETCH_PEER_MAX_HOLDERS);
        break;
    case 'H':
        o->hybrid_max = FERRY_EAGER_AUTO;
        if (strcmp(arg, "auto") != 0)
            bench_parse_sizes(arg, &o->hybrid_max, 1, UINT64_MAX - 2);
        break;
    }
}

/* Returns -1 when the options are valid, else the exit status (0 for --help). */
static int parse_options(int argc, char **argv, struct bench_options *common,
                         struct remote_options *o)
{
    static const struct option longopts[] = {
        {"batch", required_argument, NULL, 'B'},
        {"no-verify", no_argument, NULL, 'v'},
        {"verify", no_argument, NULL, 'V'},
        {"transport", required_argument, NULL, 'T'},
        {"provider", required_argument, NULL, 'P'},
        {"protocol", required_argument, NULL, 'R'},
        {"hybrid-max", required_argument, NULL, 'H'},
        {"holders", required_argument, NULL, 'K'},
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
            "                          [--plot DIR] [--no-verify] [--transport LIST]\n"
            "                          [--provider LIST] [--protocol LIST] [--hybrid-max SIZE]\n"
            "                          [--holders K]\n"
            "Starts a redis-server on loopback (the directory of every pair of nodes, a\n"
            "database each, and the redis-tcp peer) and a pair of ferryd nodes per transport\n"
            "(tcp: bench-a and bench-b, --memory " DAEMON_MEMORY
            "; fabric: bench-PROVIDER-a and -b,\n"
            "--memory " FABRIC_MEMORY ", per provider), and fetches objects stored on a to b.\n"
            "Options:\n",
        .help = remote_help,
    };
    *o = (struct remote_options){.batch = DEFAULT_BATCH,
                                 .transports = 1u << REMOTE_TCP | 1u << REMOTE_FABRIC,
                                 .providers = {"shm", "tcp;ofi_rxm"},
                                 .nproviders = 2,
                                 .protocols = (1u << FETCH_PROTOCOLS) - 1,
                                 .hybrid_max = FERRY_EAGER_AUTO,
                                 .holders = 1};
    return bench_parse_options(argc, argv, &suite, common);
}

/* The system and the tag of a pair on the fabric: the tag names its processes and nodes, the
 * provider without what a file name had better not hold ("tcp;ofi_rxm": "tcp_ofi_rxm"). */
static void name_fabric_pair(struct remote_pair *rp, const char *provider)
{
    snprintf(rp->system, sizeof(rp->system), "ferry-fabric:%s", provider);
    snprintf(rp->tag, sizeof(rp->tag), "%s", provider);
    for (char *c = rp->tag; *c; c++)
        if (*c == ';' || *c == ':' || *c == '/')
            *c = '_';
    rp->p.system = rp->system;
    rp->p.provider = provider;
}

static void start_pairs(struct remote_run *run, void *redis)
{
    const struct remote_options *o = run->o;
    const char *const verify[] = {o->no_verify ? "--no-verify" : NULL, NULL};
    const char *const split[] = {"--split-min", "1M", o->no_verify ? "--no-verify" : NULL, NULL};
    const char *const *tcp_args = o->holders > 1 ? split : verify;
    run->redis_port = redis_peer_port(redis);
    if (o->transports & 1u << REMOTE_TCP) {
        run->tcp.p.system = "ferry-tcp";
        cluster_peer_start(&run->tcp.p, "ferryd", "bench", DAEMON_MEMORY, run->redis_port, 0,
                           tcp_args);
        if (o->holders > 1)
            cluster_peer_add_holders(&run->tcp.p, o->holders - 1, "ferryd", "bench", HOLDER_MEMORY,
                                     run->redis_port, 0, tcp_args);
    }
    run->nfabric = o->transports & 1u << REMOTE_FABRIC ? o->nproviders : 0;
    for (size_t i = 0; i < run->nfabric; i++) {
        struct remote_pair *rp = &run->fabric[i];
        char prefix[64], proc[64];
        name_fabric_pair(rp, o->providers[i]);
        snprintf(prefix, sizeof(prefix), "bench-%s", rp->tag);
        snprintf(proc, sizeof(proc), "ferryd-%s", rp->tag);
        cluster_peer_start(&rp->p, proc, prefix, FABRIC_MEMORY, run->redis_port, (int)i + 1,
                           verify);
        struct bench_counters now;
        bench_counters_get(rp->p.b, rp->p.b_id, &now);
        rp->hybrid_limit = o->hybrid_max == FERRY_EAGER_AUTO ? now.st.eager_max : o->hybrid_max;
    }
}

/* Every operation of every system, in the order of the output. */
static void collect_ops(struct remote_run *run, void *redis, const uint8_t *payload)
{
    const struct bench_op *list;
    size_t n = 0, k;
    uint64_t max_size = run->common->sizes[run->common->nsizes - 1];
    if (run->o->transports & 1u << REMOTE_TCP) {
        k = fetch_peer_ops(&run->tcp.p, run->o->batch, payload, &list);
        n = bench_append_ops(run->ops, n, list, k);
        if (run->o->holders > 1)
            run->ops[n++] = fetch_peer_holders_op(&run->tcp.p, payload);
    }
    for (size_t i = 0; i < run->nfabric; i++) {
        k = fetch_peer_protocol_ops(&run->fabric[i].p, run->o->protocols,
                                    run->fabric[i].hybrid_limit, payload, &list);
        n = bench_append_ops(run->ops, n, list, k);
    }
    k = redis_peer_ops(redis, "redis-tcp", payload, &list);
    run->ops[n++] = bench_pick_op(list, k, "get");
    k = stream_peer_ops(BENCH_TCP, payload, &list);
    n = bench_append_ops(run->ops, n, list, k);
    k = copy_peer_ops(payload, max_size, &list);
    run->nops = bench_append_ops(run->ops, n, list, k);
}

/* The first transfers open b's connections to a and register what the transports register:
 * made by a few runs of every fetching operation at the smallest and the largest size, before
 * the counters are taken; then every b must reach its a over the pair's transport. */
static void warm_up(const struct remote_run *run)
{
    const struct bench_limits lim = {.seconds = 0.01, .min_iters = 2, .max_iters = 10};
    const uint64_t sizes[] = {run->common->sizes[0], run->common->sizes[run->common->nsizes - 1]};
    for (size_t s = 0; s < (sizes[0] == sizes[1] ? 1u : 2u); s++)
        for (size_t i = 0; i < run->nops; i++)
            if (strncmp(run->ops[i]->system, "ferry-", 6) == 0)
                bench_measure(run->ops[i], sizes[s], &lim);
    if (run->o->transports & 1u << REMOTE_TCP)
        cluster_peer_check_transport(&run->tcp.p);
    for (size_t i = 0; i < run->nfabric; i++)
        cluster_peer_check_transport(&run->fabric[i].p);
}

void remote_add_ratio(struct remote_ratios *rr, const struct bench_ratio *q)
{
    if (rr->n == REMOTE_MAX_RATIOS)
        bench_fail("too many ratios (at most %d)", REMOTE_MAX_RATIOS);
    rr->q[rr->n] = *q;
    snprintf(rr->names[rr->n], sizeof(rr->names[0]), "%s", q->name);
    snprintf(rr->descriptions[rr->n], sizeof(rr->descriptions[0]), "%s", q->description);
    rr->q[rr->n].name = rr->names[rr->n];
    rr->q[rr->n].description = rr->descriptions[rr->n];
    rr->n++;
}

static void add_ratio(struct remote_ratios *rr, const struct bench_ratio_def *d,
                      const struct remote_run *run)
{
    struct bench_ratio q = bench_ratio_of(d, &run->set);
    remote_add_ratio(rr, &q);
}

/* MiB/s of ferry-tcp's num_op over den_system's den_op at size, against target. */
static void add_mibps_ratio(struct remote_ratios *rr, const char *name, const char *description,
                            const char *num_op, const char *den_system, const char *den_op,
                            uint64_t size, double target, const struct remote_run *run)
{
    const struct bench_ratio_def d = {
        .name = name,
        .description = description,
        .num_system = "ferry-tcp",
        .num_op = num_op,
        .num_size = size,
        .den_system = den_system,
        .den_op = den_op,
        .den_size = size,
        .metric = BENCH_MIB_PER_SEC,
        .target = target,
    };
    add_ratio(rr, &d, run);
}

/* fetch against raw-tcp's op (stream or reqresp) at size. */
static void add_raw_ratio(struct remote_ratios *rr, const char *op, uint64_t size,
                          const struct remote_run *run)
{
    char label[16], name[64], description[64];
    bench_size_label(size, label, sizeof(label));
    snprintf(name, sizeof(name), "fetch_over_raw_tcp_%s_mibps_%s", op, label);
    snprintf(description, sizeof(description), "MiB/s at %s: ferry-tcp fetch / raw-tcp %s", label,
             op);
    add_mibps_ratio(rr, name, description, "fetch", "raw-tcp", op, size, RAW_TARGET, run);
}

/* The MiB/s targets against raw-tcp's op at every size measured from from up (one shown as
 * not measured when none was). */
static void add_raw_ratios(struct remote_ratios *rr, const char *op, uint64_t from,
                           const struct remote_run *run)
{
    size_t n = 0;
    for (size_t s = 0; s < run->common->nsizes; s++)
        if (run->common->sizes[s] >= from) {
            add_raw_ratio(rr, op, run->common->sizes[s], run);
            n++;
        }
    if (n == 0)
        add_raw_ratio(rr, op, from, run);
}

/* fetch-holders against fetch (from one holder) at size. */
static void add_holders_ratio(struct remote_ratios *rr, uint64_t size, const struct remote_run *run)
{
    char label[16], name[64], description[96];
    bench_size_label(size, label, sizeof(label));
    snprintf(name, sizeof(name), "fetch_holders_over_fetch_mibps_%s", label);
    snprintf(description, sizeof(description), "MiB/s at %s: ferry-tcp %zu holders / one", label,
             run->o->holders);
    add_mibps_ratio(rr, name, description, "fetch-holders", "ferry-tcp", "fetch", size, 1, run);
}

/* The connections bench-b opened while measured: the target is none once warm. */
static struct bench_ratio connections_ratio(const struct remote_sample *b)
{
    struct bench_ratio q = {
        .name = "new_connections_steady_state",
        .description = "transfer connections bench-b opened once warm",
        .measured = 1,
        .value = (double)(b[1].b.st.connections_opened - b[0].b.st.connections_opened),
        .target = 0,
        .at_most = 1,
    };
    bench_ratio_judge(&q);
    return q;
}

static void compute_ratios(struct remote_ratios *rr, const struct remote_run *run)
{
    rr->n = 0;
    if (run->o->transports & 1u << REMOTE_TCP) {
        add_ratio(rr, &ratio_defs[0], run);
        add_raw_ratios(rr, "reqresp", REQRESP_TARGET_FROM, run);
        add_raw_ratios(rr, "stream", STREAM_TARGET_FROM, run);
        add_ratio(rr, &ratio_defs[1], run);
        struct bench_ratio q = connections_ratio(run->tcp.s);
        remote_add_ratio(rr, &q);
        for (size_t s = 0; run->o->holders > 1 && s < run->common->nsizes; s++)
            add_holders_ratio(rr, run->common->sizes[s], run);
    }
    remote_fabric_ratios(run, rr);
}

static void describe_setup(FILE *f, const struct remote_run *run)
{
    char label[16];
    const struct remote_options *o = run->o;
    if (o->transports & 1u << REMOTE_TCP) {
        fprintf(
            f,
            "tcp: ferryd bench-a and bench-b (--transport tcp --memory %s%s) with a\n"
            "redis-server on 127.0.0.1:%d as their directory, also the redis-tcp peer.\n"
            "ferry-tcp: objects stored on bench-a are fetched to bench-b, then deleted there\n"
            "(untimed) so that every run transfers them. fetch-batch: one ferry_fetch call per\n"
            "run; its p50/p99 are per batch, its ops/s and MiB/s count objects. Objects per\n"
            "batch:",
            DAEMON_MEMORY, o->no_verify ? " --no-verify" : "", run->redis_port);
        for (size_t s = 0; s < run->common->nsizes; s++) {
            bench_size_label(run->common->sizes[s], label, sizeof(label));
            fprintf(f, " %s:%llu", label,
                    (unsigned long long)fetch_peer_batch(o->batch, run->common->sizes[s]));
        }
        fputs(".\n", f);
    }
    for (size_t i = 0; i < run->nfabric; i++) {
        const struct remote_pair *rp = &run->fabric[i];
        bench_size_label(rp->hybrid_limit, label, sizeof(label));
        fprintf(f,
                "%s: ferryd %s and %s\n"
                "(--transport fabric --fabric-provider %s --memory %s%s; directory database %zu);\n"
                "fetch-hybrid with eager limit %s%s.\n",
                rp->p.system, rp->p.a_id, rp->p.b_id, rp->p.provider, FABRIC_MEMORY,
                o->no_verify ? " --no-verify" : "", i + 1, label,
                o->hybrid_max == FERRY_EAGER_AUTO ? " (the provider's default)" : "");
    }
    fputs("raw-tcp stream: SIZE bytes to another process over loopback TCP and an 8-byte answer.\n"
          "raw-tcp reqresp: an 8-byte request and SIZE bytes back from another process, the shape\n"
          "of a fetch, on sockets set up as the tcp transport's (TCP_NODELAY, kernel buffer\n"
          "sizes); at 1K its p50 is the round trip. memcpy copy: between two buffers of this\n"
          "process. cma readv: process_vm_readv from a child, what shm copies with.\n\n",
          f);
}

static void describe_counters(FILE *f, const struct remote_run *run)
{
    const ferry_stats *s0 = &run->tcp.s[0].b.st, *s1 = &run->tcp.s[1].b.st;
    struct bench_ratio ref = bench_ratio_of(&raw_over_redis_def, &run->set);
    if (!(run->o->transports & 1u << REMOTE_TCP))
        return;
    fprintf(
        f,
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
        (unsigned long long)(run->tcp.s[1].b_faults - run->tcp.s[0].b_faults),
        (unsigned long long)run->tcp.p.timed_faults);
    if (ref.measured)
        fprintf(f, "For reading the 1M target: %s = %.3f.\n", ref.description, ref.value);
}

/* Text that f collects in memory, bench_fail() on failure; free the result. */
static FILE *open_text(char **text, size_t *len)
{
    FILE *f = open_memstream(text, len);
    if (f == NULL)
        bench_fail("open_memstream: out of memory");
    return f;
}

static char *close_text(FILE *f, char **text)
{
    if (ferror(f) | fclose(f))
        bench_fail("writing the report failed");
    return *text;
}

/* The overview charts keep to the tcp transport and its references, as before the fabric's
 * own charts (remote_fabric_plots()) took the rest. */
static int in_overview(const struct bench_result *r)
{
    return strncmp(r->system, "ferry-fabric:", 13) != 0 && strcmp(r->system, "memcpy") != 0;
}

/* The report of the last comparison; rr holds the ratios of all of them. */
static void output(const struct remote_run *run, const struct remote_ratios *rr)
{
    static struct bench_ratio all[BENCH_MAX_REPEAT * REMOTE_MAX_RATIOS];
    const struct remote_ratios *last = &rr[run->common->repeat - 1];
    char *preamble, *notes;
    size_t len;
    FILE *f = open_text(&preamble, &len);
    describe_setup(f, run);
    close_text(f, &preamble);
    f = open_text(&notes, &len);
    describe_counters(f, run);
    remote_fabric_notes(run, f);
    close_text(f, &notes);
    for (unsigned k = 0; k < run->common->repeat; k++)
        memcpy(&all[k * last->n], rr[k].q, last->n * sizeof(all[0]));
    bench_report(&(struct bench_report){
        .suite = "remote",
        .opts = run->common,
        .preamble = preamble,
        .notes = notes,
        .results = run->set.summary,
        .nresults = run->set.n,
        .ratios = last->q,
        .nratios = last->n,
        .all_ratios = all,
        .charted = in_overview,
    });
    if (run->common->plot_dir != NULL)
        remote_fabric_plots(run);
    free(preamble);
    free(notes);
}

static void sample_pair(struct remote_pair *rp, int k)
{
    bench_counters_get(rp->p.a, rp->p.a_id, &rp->s[k].a);
    bench_counters_get(rp->p.b, rp->p.b_id, &rp->s[k].b);
    rp->s[k].b_faults = bench_proc_minor_faults(rp->p.pb);
}

/* Every pair's counters: k 0 before the measurements, 1 after. */
static void sample_pairs(struct remote_run *run, int k)
{
    if (run->o->transports & 1u << REMOTE_TCP)
        sample_pair(&run->tcp, k);
    for (size_t i = 0; i < run->nfabric; i++)
        sample_pair(&run->fabric[i], k);
}

int bench_remote(int argc, char **argv)
{
    static struct remote_run run;
    static struct remote_ratios rr[BENCH_MAX_REPEAT];
    struct bench_options common;
    struct remote_options o;
    int status = parse_options(argc, argv, &common, &o);
    if (status >= 0)
        return status;
    if (common.plot_dir != NULL)
        bench_require_gnuplot();

    const struct bench_limits lim = {
        .seconds = common.seconds, .min_iters = 3, .max_iters = 200000, .min_warmup = WARMUP_RUNS};
    const uint8_t *payload = bench_alloc_faulted(common.sizes[common.nsizes - 1]);
    void *redis = redis_peer_start(0);
    run.common = &common;
    run.o = &o;
    start_pairs(&run, redis);
    collect_ops(&run, redis, payload);

    warm_up(&run);
    for (unsigned k = 0; k < common.repeat; k++) {
        sample_pairs(&run, 0);
        bench_measure_rounds(run.ops, run.nops, &common, &lim, k, &run.set);
        sample_pairs(&run, 1);
        compute_ratios(&rr[k], &run);
    }
    output(&run, rr);
    free((void *)payload);
    return 0;
}
