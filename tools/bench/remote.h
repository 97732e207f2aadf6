/* remote.h - what the files of the remote suite share: remote.c runs it (the nodes, the
 * operations, the tcp transport's figures); remote_fabric.c reports the fabric's. */
#ifndef FERRY_BENCH_REMOTE_H
#define FERRY_BENCH_REMOTE_H

#include "bench.h"

#define REMOTE_MAX_PROVIDERS 4
/* fetch, fetch-batch, fetch-holders; three protocols per provider; redis get, raw-tcp stream and
 * reqresp, memcpy, cma readv */
#define REMOTE_MAX_OPS (3 + 3 * REMOTE_MAX_PROVIDERS + 5)
#define REMOTE_MAX_RATIOS 160

enum remote_transport { REMOTE_TCP, REMOTE_FABRIC, REMOTE_TRANSPORTS };

struct remote_options {
    uint64_t batch;
    int no_verify;       /* start the nodes with --no-verify */
    unsigned transports; /* bits 1 << enum remote_transport */
    const char *providers[REMOTE_MAX_PROVIDERS];
    size_t nproviders;
    unsigned protocols;  /* bits 1 << enum fetch_protocol */
    uint64_t hybrid_max; /* the hybrid protocol's eager limit; FERRY_EAGER_AUTO: the default */
    size_t holders;      /* tcp: nodes holding fetch-holders' objects (1: not measured) */
};

/* A pair's counters at one moment: before and after the measurements. */
struct remote_sample {
    struct bench_counters a, b;
    uint64_t b_faults; /* minor page faults of b's process */
};

/* A pair of nodes on one transport (and provider), and its counters. */
struct remote_pair {
    struct fetch_pair p;
    char system[64]; /* fabric: p.system, "ferry-fabric:<provider>" */
    char tag[32];    /* fabric: the provider in file names and node ids ("tcp_ofi_rxm") */
    struct remote_sample s[2];
    uint64_t hybrid_limit; /* the eager limit fetch-hybrid runs with (fabric) */
};

/* One run of the suite: its nodes, operations and the results of its latest comparison. */
struct remote_run {
    const struct bench_options *common;
    const struct remote_options *o;
    int redis_port;
    struct remote_pair tcp; /* when o->transports has REMOTE_TCP */
    struct remote_pair fabric[REMOTE_MAX_PROVIDERS];
    size_t nfabric; /* o->nproviders when o->transports has REMOTE_FABRIC, else 0 */
    const struct bench_op *ops[REMOTE_MAX_OPS];
    size_t nops;
    struct bench_set set;
};

/* Ratios, with room for the names and descriptions made per size. */
struct remote_ratios {
    struct bench_ratio q[REMOTE_MAX_RATIOS];
    size_t n;
    char names[REMOTE_MAX_RATIOS][96];
    char descriptions[REMOTE_MAX_RATIOS][128];
};

/* Appends q (its name and description copied); bench_fail() when full. */
void remote_add_ratio(struct remote_ratios *rr, const struct bench_ratio *q);

/* remote_fabric.c: the fabric's ratios (per size, and no connection, registration or address
 * resolved once warm), its notes (a table per provider, the ratios by size, the paths the
 * protocols took, the counters) to f, and a chart per provider. */
void remote_fabric_ratios(const struct remote_run *run, struct remote_ratios *rr);
void remote_fabric_notes(const struct remote_run *run, FILE *f);
void remote_fabric_plots(const struct remote_run *run);

#endif
