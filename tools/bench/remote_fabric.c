/* remote_fabric.c - the remote suite's report on the fabric: per provider a table of its
 * protocols against the references (the tcp transport, raw TCP, Redis GET, memcpy) by size;
 * the ratios the fabric's targets need, size by size; the path each protocol's fetches took;
 * the counters that show no connection, registration or address resolution once warm; and a
 * chart per provider. Throughput here is the median run's, size / p50: few runs are taken at
 * large sizes, and one slow run moves a mean far. */
#include <stddef.h>
#include <string.h>

#include "remote.h"

#define MIB (1024ull * 1024)
#define SMALL_BELOW MIB /* sizes below this show their p50 latencies too */
/* hybrid / max(eager, rendezvous) has no target of its own: hybrid takes one of the two
 * paths, so it should match the better one up to the noise between two measurements. */
#define HYBRID_TARGET 0.90
#define MAX_COLUMNS (FETCH_PROTOCOLS + NREFS)

/* The median run's MiB/s of (system, op) at size in the results r of one round; 0 when it
 * was not measured. */
static double median_at(const struct bench_result *r, size_t n, const char *system, const char *op,
                        uint64_t size)
{
    const struct bench_result *x = bench_find(r, n, system, op, size);
    return x != NULL ? bench_metric(x, BENCH_MEDIAN_MIB_PER_SEC) : 0;
}

static double protocol_at(const struct bench_result *r, size_t n, const struct remote_pair *rp,
                          int k, uint64_t size)
{
    return median_at(r, n, rp->p.system, fetch_protocol_ops[k], size);
}

/* num / den of two medians, 0 when either was not measured. */
static double over(double num, double den)
{
    return num > 0 && den > 0 ? num / den : 0;
}

static double hybrid_over_best(const struct bench_result *r, size_t n, const struct remote_pair *rp,
                               uint64_t size)
{
    double e = protocol_at(r, n, rp, FETCH_EAGER, size);
    double d = protocol_at(r, n, rp, FETCH_RENDEZVOUS, size);
    return over(protocol_at(r, n, rp, FETCH_HYBRID, size), e > d ? e : d); /* of those measured */
}

static double rendezvous_over_cma(const struct bench_result *r, size_t n,
                                  const struct remote_pair *rp, uint64_t size)
{
    return over(protocol_at(r, n, rp, FETCH_RENDEZVOUS, size),
                median_at(r, n, "cma", "readv", size));
}

static double rendezvous_over_tcp(const struct bench_result *r, size_t n,
                                  const struct remote_pair *rp, uint64_t size)
{
    return over(protocol_at(r, n, rp, FETCH_RENDEZVOUS, size),
                median_at(r, n, "ferry-tcp", "fetch", size));
}

/* A target of the fabric, for one provider or (provider NULL) for each, from a size up. Its
 * ratio is taken within each round (at), and the median over rounds judged. */
struct fabric_target {
    const char *name;     /* of its ratios: <name>_<provider tag>_<size> */
    const char *heading;  /* of its column in the table by size */
    const char *what;     /* for the descriptions */
    const char *provider; /* NULL: every provider measured */
    double (*at)(const struct bench_result *r, size_t n, const struct remote_pair *rp,
                 uint64_t size);
    double target;
    uint64_t from;
};

static const struct fabric_target targets[] = {
    {"hybrid_over_best", "hybrid/best", "hybrid / max(eager, rendezvous)", NULL, hybrid_over_best,
     HYBRID_TARGET, 0},
    {"rendezvous_over_cma", "rdv/cma", "rendezvous / process_vm_readv", "shm", rendezvous_over_cma,
     0.90, 64 * 1024},
    {"rendezvous_over_tcp_fetch", "rdv/tcp", "rendezvous / ferry-tcp fetch", "tcp;ofi_rxm",
     rendezvous_over_tcp, 1.0, MIB},
};
#define NTARGETS (sizeof(targets) / sizeof(targets[0]))

static int applies(const struct fabric_target *t, const struct remote_pair *rp)
{
    return t->provider == NULL || strcmp(t->provider, rp->p.provider) == 0;
}

static int applies_to_any(const struct remote_run *run, const struct fabric_target *t)
{
    for (size_t i = 0; i < run->nfabric; i++)
        if (applies(t, &run->fabric[i]))
            return 1;
    return 0;
}

/* What a target's ratio within one round needs. */
struct target_arg {
    const struct fabric_target *t;
    const struct remote_pair *rp;
    uint64_t size;
};

static double target_in_round(const struct bench_result *r, size_t n, const void *arg)
{
    const struct target_arg *a = arg;
    return a->t->at(r, n, a->rp, a->size);
}

/* The target t for rp at size, with its name and description in name and description. */
static struct bench_ratio target_at(const struct remote_run *run, const struct fabric_target *t,
                                    const struct remote_pair *rp, uint64_t size, char name[96],
                                    char description[128])
{
    char label[16];
    const struct target_arg arg = {t, rp, size};
    bench_size_label(size, label, sizeof(label));
    snprintf(name, 96, "%s_%s_%s", t->name, rp->tag, label);
    snprintf(description, 128, "median MiB/s at %s, %s: %s", label, rp->p.provider, t->what);
    struct bench_ratio q = {.name = name, .description = description, .target = t->target};
    bench_ratio_over_rounds(&q, &run->set, target_in_round, &arg);
    return q;
}

/* What the counters of the steady state count, both nodes of a pair added up. */
enum steady { STEADY_CONNECTIONS, STEADY_REGISTRATIONS, STEADY_AV_INSERTS, STEADY_COUNTERS };

static uint64_t node_counter(const struct bench_counters *s, int c)
{
    switch (c) {
    case STEADY_CONNECTIONS:
        return s->st.connections_opened + bench_counter(s, "fabric_connects");
    case STEADY_REGISTRATIONS:
        return bench_counter(s, "fabric_registrations");
    default:
        return bench_counter(s, "fabric_av_inserts");
    }
}

static struct bench_ratio steady_ratio(const struct remote_pair *rp, int c, char name[96],
                                       char description[128])
{
    static const char *const names[STEADY_COUNTERS] = {"new_connections", "new_registrations",
                                                       "new_av_inserts"};
    static const char *const what[STEADY_COUNTERS] = {
        "connections + fabric handshakes", "fabric registrations", "fabric addresses resolved"};
    const struct remote_sample *s = rp->s;
    uint64_t before = node_counter(&s[0].a, c) + node_counter(&s[0].b, c);
    uint64_t after = node_counter(&s[1].a, c) + node_counter(&s[1].b, c);
    snprintf(name, 96, "%s_steady_state_%s", names[c], rp->tag);
    snprintf(description, 128, "%s by %s's nodes once warm", what[c], rp->p.provider);
    struct bench_ratio q = {.name = name,
                            .description = description,
                            .measured = 1,
                            .value = (double)(after - before),
                            .at_most = 1};
    bench_ratio_judge(&q);
    return q;
}

void remote_fabric_ratios(const struct remote_run *run, struct remote_ratios *rr)
{
    char name[96], description[128];
    for (size_t t = 0; t < NTARGETS; t++)
        for (size_t i = 0; i < run->nfabric; i++)
            for (size_t s = 0; applies(&targets[t], &run->fabric[i]) && s < run->common->nsizes;
                 s++) {
                if (run->common->sizes[s] < targets[t].from)
                    continue;
                struct bench_ratio q = target_at(run, &targets[t], &run->fabric[i],
                                                 run->common->sizes[s], name, description);
                remote_add_ratio(rr, &q);
            }
    for (size_t i = 0; i < run->nfabric; i++)
        for (int c = 0; c < STEADY_COUNTERS; c++) {
            struct bench_ratio q = steady_ratio(&run->fabric[i], c, name, description);
            remote_add_ratio(rr, &q);
        }
}

/* ---- the table per provider ---- */

struct column {
    char heading[32];
    const char *system, *op;
};

/* The references beside each provider's protocols. */
static const struct column refs[] = {
    {"tcp fetch", "ferry-tcp", "fetch"},    {"raw TCP", "raw-tcp", "stream"},
    {"raw req/resp", "raw-tcp", "reqresp"}, {"Redis GET", "redis-tcp", "get"},
    {"memcpy", "memcpy", "copy"},           {"CMA readv", "cma", "readv"}};
#define NREFS (sizeof(refs) / sizeof(refs[0]))

/* The protocols measured for rp, then the references. */
static size_t provider_columns(const struct remote_run *run, const struct remote_pair *rp,
                               struct column *c)
{
    size_t n = 0;
    for (int k = 0; k < FETCH_PROTOCOLS; k++) {
        if (!(run->o->protocols & 1u << k))
            continue;
        c[n] = (struct column){.system = rp->p.system, .op = fetch_protocol_ops[k]};
        snprintf(c[n++].heading, sizeof(c[0].heading), "%s", fetch_protocol_names[k]);
    }
    for (size_t i = 0; i < NREFS; i++)
        c[n++] = refs[i];
    return n;
}

/* A row of the metric m of each column at size, "-" where not measured. */
static void print_row(FILE *f, const struct remote_run *run, const struct column *c, size_t nc,
                      uint64_t size, enum bench_metric m)
{
    for (size_t i = 0; i < nc; i++) {
        const struct bench_result *x = bench_set_find(&run->set, c[i].system, c[i].op, size);
        if (x != NULL)
            fprintf(f, " %11.1f", bench_metric(x, m));
        else
            fprintf(f, " %11s", "-");
    }
    fputc('\n', f);
}

static void print_provider_table(FILE *f, const struct remote_run *run,
                                 const struct remote_pair *rp)
{
    struct column c[MAX_COLUMNS];
    char label[16];
    size_t nc = provider_columns(run, rp, c);
    bench_size_label(rp->hybrid_limit, label, sizeof(label));
    fprintf(f,
            "\n%s: median MiB/s by size (hybrid: eager up to %s), and p50 µs below\n"
            "the sizes under 1M:\n%8s",
            rp->p.system, label, "size");
    for (size_t i = 0; i < nc; i++)
        fprintf(f, " %11s", c[i].heading);
    fputc('\n', f);
    for (size_t s = 0; s < run->common->nsizes; s++) {
        uint64_t size = run->common->sizes[s];
        bench_size_label(size, label, sizeof(label));
        fprintf(f, "%8s", label);
        print_row(f, run, c, nc, size, BENCH_MEDIAN_MIB_PER_SEC);
        if (size >= SMALL_BELOW)
            continue;
        fputs("  p50 µs", f); /* µ takes two bytes but one column: not printf-padded */
        print_row(f, run, c, nc, size, BENCH_P50_US);
    }
}

/* ---- the targets by size ---- */

static void print_target_cell(FILE *f, const struct bench_ratio *q, int applies_here, int width)
{
    char cell[32];
    if (!q->measured)
        snprintf(cell, sizeof(cell), "-");
    else
        snprintf(cell, sizeof(cell), "%.3f %-6s", q->value,
                 !applies_here ? ""
                 : q->met      ? "met"
                               : "MISSED");
    fprintf(f, " %*s", width, cell);
}

/* A column per target and provider it applies to, a row per size. */
static void print_targets_by_size(FILE *f, const struct remote_run *run)
{
    char heading[64], label[16], name[96], description[128];
    int widths[NTARGETS * REMOTE_MAX_PROVIDERS];
    size_t nw = 0;
    if (run->nfabric == 0)
        return;
    fprintf(f,
            "\nfabric targets by size (median MiB/s; met or MISSED where the target applies):\n"
            "%8s",
            "size");
    for (size_t t = 0; t < NTARGETS; t++)
        for (size_t i = 0; i < run->nfabric; i++)
            if (applies(&targets[t], &run->fabric[i])) {
                int w = snprintf(heading, sizeof(heading), "%s %s", targets[t].heading,
                                 run->fabric[i].p.provider);
                widths[nw++] = w > 13 ? w : 13;
                fprintf(f, " %*s", widths[nw - 1], heading);
            }
    for (size_t s = 0; s < run->common->nsizes; s++) {
        uint64_t size = run->common->sizes[s];
        bench_size_label(size, label, sizeof(label));
        fprintf(f, "\n%8s", label);
        nw = 0;
        for (size_t t = 0; t < NTARGETS; t++)
            for (size_t i = 0; i < run->nfabric; i++)
                if (applies(&targets[t], &run->fabric[i])) {
                    struct bench_ratio q =
                        target_at(run, &targets[t], &run->fabric[i], size, name, description);
                    print_target_cell(f, &q, size >= targets[t].from, widths[nw++]);
                }
    }
    fputc('\n', f);
    for (size_t t = 0; t < NTARGETS; t++) {
        if (!applies_to_any(run, &targets[t]))
            continue;
        bench_size_label(targets[t].from, label, sizeof(label));
        fprintf(f, "  %s: %s, target >= %.2f%s%s\n", targets[t].heading, targets[t].what,
                targets[t].target, targets[t].from ? " from " : "",
                targets[t].from ? label : " (none was set: hybrid should match the better path)");
    }
}

/* ---- the paths and the counters ---- */

static void print_paths(FILE *f, const struct remote_run *run)
{
    int header = 0;
    for (size_t i = 0; i < run->nops; i++) {
        const struct fetch_path *p = fetch_peer_path(run->ops[i]);
        if (p == NULL)
            continue;
        if (!header++)
            fputs("\nfabric paths, from the counters (checked after every measurement, warm-up "
                  "included):\n",
                  f);
        fprintf(f,
                "  %-24s %-17s %6llu fetches: %10.1f MiB as messages, %6llu one-sided reads "
                "(%.1f MiB)\n",
                run->ops[i]->system, run->ops[i]->op, (unsigned long long)p->fetches,
                (double)p->eager_bytes / (double)MIB, (unsigned long long)p->rdv_reads,
                (double)p->rdv_bytes / (double)MIB);
    }
}

/* The counters shown before and after the measurements, by name. */
static const char *const counters[] = {"connections_opened", "fabric_connects",
                                       "fabric_registrations", "fabric_av_inserts"};
#define NCOUNTERS (sizeof(counters) / sizeof(counters[0]))

static void print_node_counters(FILE *f, const char *node, const struct bench_counters *before,
                                const struct bench_counters *after)
{
    char cell[48];
    fprintf(f, "  %-22s", node);
    for (size_t k = 0; k < NCOUNTERS; k++) {
        snprintf(cell, sizeof(cell), "%llu -> %llu",
                 (unsigned long long)bench_counter(before, counters[k]),
                 (unsigned long long)bench_counter(after, counters[k]));
        fprintf(f, " %*s", (int)strlen(counters[k]), cell);
    }
    fputc('\n', f);
}

static void print_counters(FILE *f, const struct remote_run *run)
{
    if (run->nfabric == 0)
        return;
    fprintf(f, "\nfabric nodes before -> after the measurements (warm-up done before):\n  %-22s",
            "node");
    for (size_t k = 0; k < NCOUNTERS; k++)
        fprintf(f, " %s", counters[k]);
    fputc('\n', f);
    for (size_t i = 0; i < run->nfabric; i++) {
        const struct remote_pair *rp = &run->fabric[i];
        print_node_counters(f, rp->p.a_id, &rp->s[0].a, &rp->s[1].a);
        print_node_counters(f, rp->p.b_id, &rp->s[0].b, &rp->s[1].b);
    }
}

void remote_fabric_notes(const struct remote_run *run, FILE *f)
{
    for (size_t i = 0; i < run->nfabric; i++)
        print_provider_table(f, run, &run->fabric[i]);
    print_targets_by_size(f, run);
    print_paths(f, run);
    print_counters(f, run);
}

void remote_fabric_plots(const struct remote_run *run)
{
    for (size_t i = 0; i < run->nfabric; i++) {
        const struct remote_pair *rp = &run->fabric[i];
        char name[96], title[128], hybrid[64], label[16];
        bench_size_label(rp->hybrid_limit, label, sizeof(label));
        snprintf(hybrid, sizeof(hybrid), "hybrid (eager up to %s)", label);
        const struct bench_series s[] = {
            {rp->p.system, fetch_protocol_ops[FETCH_EAGER], "eager"},
            {rp->p.system, fetch_protocol_ops[FETCH_RENDEZVOUS], "rendezvous"},
            {rp->p.system, fetch_protocol_ops[FETCH_HYBRID], hybrid},
            {"ferry-tcp", "fetch", "tcp transport (ferry-tcp fetch)"},
            {"raw-tcp", "stream", "raw TCP stream"},
            {"raw-tcp", "reqresp", "raw TCP request/response"},
            {"memcpy", "copy", "memcpy"},
            {"cma", "readv", "process_vm_readv (cross-memory attach)"},
        };
        snprintf(name, sizeof(name), "remote-fabric-%s", rp->tag);
        snprintf(title, sizeof(title), "ferry-bench remote: fetch over the fabric, %s",
                 rp->p.provider);
        bench_plot_lines(run->common->plot_dir, "remote", name, title, run->set.summary, run->set.n,
                         s, sizeof(s) / sizeof(s[0]));
    }
}
