/*
 * mr_bench.c - what registering memory with libfabric per transfer would cost, against
 * registering the whole arena once, for the fabric transport in docs/design/transports.md.
 *
 * For each provider and size, a fresh range of the arena (memfd, prefaulted) is registered and
 * closed again, as a transfer that registered its object would do: fi_mr_reg, fi_mr_bind and
 * fi_mr_enable when the provider asks for FI_MR_ENDPOINT, the key the peer would need (raw
 * under FI_MR_RAW), fi_close. The providers here (tcp, shm) pin nothing, so mlock + munlock of
 * the same ranges stands in for what verbs' ibv_reg_mr pays in the kernel: mlock walks the
 * range through get_user_pages as pinning does (it also moves the pages to the unevictable
 * list, which pinning does not, and writes no device translation tables, which verbs does).
 * The one-off cost of registering (and locking) the whole region is measured too.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "ferry.h"
#include "common/size.h"
#include "store/arena.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

#define NSIZES 5
static const uint64_t sizes[NSIZES] = {4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB, 256 * MIB};

/* Wire speeds the costs are set against, in bytes per second: 10 GB/s and 100 Gb/s. */
#define NWIRES 2
static const double wires[NWIRES] = {10e9, 12.5e9};

#define MAX_PROVIDERS 8
#define MR_MODE_HINTS                                                                              \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_RAW)
#define MR_ACCESS (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)

struct options {
    char *providers; /* comma-separated */
    uint64_t memory;
    int iterations; /* per cell, at most */
    double seconds; /* per cell, at most */
    bool json;
};

struct stats {
    int err; /* 0, or a negative errno / fi_errno */
    int n;
    double median, p99; /* microseconds */
};

/* A one-off operation on the whole region and its undoing, in microseconds. */
struct once {
    int err;
    double apply, undo;
};

struct fabric {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av; /* av, cq, ep: only under FI_MR_ENDPOINT */
    struct fid_cq *cq;
    struct fid_ep *ep;
    uint64_t mr_mode;
    uint64_t next_key; /* requested keys, when the provider does not choose them */
};

struct provider {
    const char *name;
    int err; /* opening the domain failed */
    char where[128];
    char mr_mode[256];
    struct once whole;
    struct stats reg[NSIZES];
};

struct memlock {
    rlim_t soft, hard;
    char note[160];
    bool cap_ipc_lock;
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "mr-bench: out of memory\n");
        exit(1);
    }
    return p;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* ---- libfabric ---- */

/* What FI_MR_ENDPOINT registrations are bound to: an enabled endpoint with its AV and CQ. */
static int endpoint_open(struct fabric *f)
{
    struct fi_av_attr av_attr = {.type = FI_AV_UNSPEC};
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT};
    int rc;

    if ((rc = fi_av_open(f->domain, &av_attr, &f->av, NULL)))
        goto fail;
    if ((rc = fi_cq_open(f->domain, &cq_attr, &f->cq, NULL)))
        goto close_av;
    if ((rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)))
        goto close_cq;
    if ((rc = fi_ep_bind(f->ep, &f->av->fid, 0)) ||
        (rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(f->ep)))
        goto close_ep;
    return 0;

close_ep:
    fi_close(&f->ep->fid);
    f->ep = NULL;
close_cq:
    fi_close(&f->cq->fid);
    f->cq = NULL;
close_av:
    fi_close(&f->av->fid);
    f->av = NULL;
fail:
    return rc;
}

static int fabric_open(struct fabric *f, const char *prov)
{
    struct fi_info *hints = fi_allocinfo();
    int rc = -FI_ENOMEM;

    memset(f, 0, sizeof(*f));
    if (!hints)
        goto fail;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA;
    hints->domain_attr->mr_mode = MR_MODE_HINTS;
    hints->fabric_attr->prov_name = strdup(prov);
    if (hints->fabric_attr->prov_name)
        rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &f->info);
    fi_freeinfo(hints);
    if (rc)
        goto fail;
    if ((rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL)))
        goto free_info;
    if ((rc = fi_domain(f->fabric, f->info, &f->domain, NULL)))
        goto close_fabric;
    f->mr_mode = f->info->domain_attr->mr_mode;
    f->next_key = 1;
    if ((f->mr_mode & FI_MR_ENDPOINT) && (rc = endpoint_open(f)))
        goto close_domain;
    return 0;

close_domain:
    fi_close(&f->domain->fid);
close_fabric:
    fi_close(&f->fabric->fid);
free_info:
    fi_freeinfo(f->info);
fail:
    return rc;
}

static void fabric_close(struct fabric *f)
{
    if (f->ep)
        fi_close(&f->ep->fid);
    if (f->cq)
        fi_close(&f->cq->fid);
    if (f->av)
        fi_close(&f->av->fid);
    fi_close(&f->domain->fid);
    fi_close(&f->fabric->fid);
    fi_freeinfo(f->info);
}

/* The key a peer needs to reach the registration. */
static int mr_key(const struct fabric *f, struct fid_mr *mr)
{
    uint8_t raw[256];
    size_t len = sizeof(raw);
    uint64_t base;

    if (f->mr_mode & FI_MR_RAW)
        return fi_mr_raw_attr(mr, &base, raw, &len, 0);
    return fi_mr_key(mr) == FI_KEY_NOTAVAIL ? -FI_ENOKEY : 0;
}

/* Everything a transfer would do to expose [addr, addr + len) to its peer. */
static int mr_open(struct fabric *f, void *addr, uint64_t len, struct fid_mr **mr)
{
    uint64_t key = f->mr_mode & FI_MR_PROV_KEY ? 0 : f->next_key++;
    int rc = fi_mr_reg(f->domain, addr, len, MR_ACCESS, 0, key, 0, mr, NULL);

    if (rc)
        goto fail;
    if ((f->mr_mode & FI_MR_ENDPOINT) &&
        ((rc = fi_mr_bind(*mr, &f->ep->fid, 0)) || (rc = fi_mr_enable(*mr))))
        goto close_mr;
    if ((rc = mr_key(f, *mr)))
        goto close_mr;
    return 0;

close_mr:
    fi_close(&(*mr)->fid);
fail:
    return rc;
}

static int mr_reg_close(void *ctx, uint8_t *addr, uint64_t len)
{
    struct fid_mr *mr;
    int rc = mr_open(ctx, addr, len, &mr);

    return rc ? rc : fi_close(&mr->fid);
}

static struct once mr_whole(struct fabric *f, const struct arena *a)
{
    struct once o = {0};
    struct fid_mr *mr;
    double t0 = now_us();

    if ((o.err = mr_open(f, a->base, a->size, &mr)))
        return o;
    double t1 = now_us();
    o.err = fi_close(&mr->fid);
    o.apply = t1 - t0;
    o.undo = now_us() - t1;
    return o;
}

/* ---- mlock ---- */

static int lock_unlock(void *ctx, uint8_t *addr, uint64_t len)
{
    if (mlock(addr, len) < 0)
        return -errno;
    return munlock(addr, len) < 0 ? -errno : 0;
}

static struct once lock_whole(const struct arena *a)
{
    struct once o = {0};
    double t0 = now_us();

    if (mlock(a->base, a->size) < 0) {
        o.err = -errno;
        return o;
    }
    double t1 = now_us();
    if (munlock(a->base, a->size) < 0)
        o.err = -errno;
    o.apply = t1 - t0;
    o.undo = now_us() - t1;
    return o;
}

/* Bit 14 of the effective capabilities: mlock beyond RLIMIT_MEMLOCK. */
static bool has_cap_ipc_lock(void)
{
    char line[256];
    unsigned long long caps = 0;
    FILE *f = fopen("/proc/self/status", "r");

    if (!f)
        return false;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    fclose(f);
    return caps >> 14 & 1;
}

/* Raises the soft RLIMIT_MEMLOCK to the hard one, before anything is locked. */
static struct memlock memlock_raise(void)
{
    struct memlock m = {.cap_ipc_lock = has_cap_ipc_lock()};
    struct rlimit rl;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0) {
        snprintf(m.note, sizeof(m.note), "getrlimit failed: %s", strerror(errno));
        return m;
    }
    m.hard = rl.rlim_max;
    if (rl.rlim_cur == rl.rlim_max) {
        snprintf(m.note, sizeof(m.note), "soft limit already at the hard limit");
    } else {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_MEMLOCK, &rl) < 0) {
            snprintf(m.note, sizeof(m.note), "could not raise the soft limit to the hard: %s",
                     strerror(errno));
            rl.rlim_cur = was;
        } else {
            snprintf(m.note, sizeof(m.note), "raised the soft limit to the hard limit");
        }
    }
    m.soft = rl.rlim_cur;
    return m;
}

/* ---- measuring ---- */

typedef int (*timed_op)(void *ctx, uint8_t *addr, uint64_t len);

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Times op on size-byte ranges of the arena, a different one each time (cycling through the
 * region), after one untimed warm-up, until the iteration or the time budget runs out (at
 * least once). */
static struct stats measure(timed_op op, void *ctx, const struct arena *a, uint64_t size,
                            const struct options *o)
{
    struct stats s = {0};
    uint64_t ranges = a->size / size; /* at least 1: --memory is at least the largest size */

    if ((s.err = op(ctx, a->base, size)))
        return s;
    double *t = xmalloc((size_t)o->iterations * sizeof(double));
    double deadline = now_us() + o->seconds * 1e6;
    do {
        uint8_t *addr = a->base + (uint64_t)(s.n + 1) % ranges * size;
        double t0 = now_us();
        if ((s.err = op(ctx, addr, size)))
            break;
        t[s.n++] = now_us() - t0;
    } while (s.n < o->iterations && now_us() < deadline);
    if (!s.err) {
        qsort(t, (size_t)s.n, sizeof(double), cmp_double);
        s.median = s.n % 2 ? t[s.n / 2] : (t[s.n / 2 - 1] + t[s.n / 2]) / 2;
        s.p99 = t[(s.n * 99 + 99) / 100 - 1];
    }
    free(t);
    return s;
}

static void bench_provider(struct provider *p, const struct arena *a, const struct options *o)
{
    struct fabric f;

    if ((p->err = fabric_open(&f, p->name)))
        return;
    snprintf(p->where, sizeof(p->where), "fabric %s, domain %s", f.info->fabric_attr->name,
             f.info->domain_attr->name);
    fi_tostr_r(p->mr_mode, sizeof(p->mr_mode), &f.mr_mode, FI_TYPE_MR_MODE);
    if (!p->mr_mode[0])
        snprintf(p->mr_mode, sizeof(p->mr_mode), "0");
    for (int i = 0; i < NSIZES; i++)
        p->reg[i] = measure(mr_reg_close, &f, a, sizes[i], o);
    p->whole = mr_whole(&f, a);
    fabric_close(&f);
}

/* ---- output ---- */

static double wire_us(uint64_t size, double bytes_per_s)
{
    return (double)size / bytes_per_s * 1e6;
}

static const char *human(uint64_t bytes, char *buf)
{
    return size_format(bytes, buf, SIZE_FORMAT_LEN);
}

/* Short enough for a cell: ENOMEM rather than "Cannot allocate memory". */
static const char *errname(int err)
{
    const char *name = -err < FI_ERRNO_OFFSET ? strerrorname_np(-err) : NULL;
    return name ? name : fi_strerror(-err);
}

static void print_cell(const struct stats *s)
{
    if (s->err)
        printf("  %19.19s", errname(s->err));
    else
        printf("  %9.2f %9.2f", s->median, s->p99);
}

static void print_table(const struct provider *p, int np, const struct stats *lock)
{
    char buf[SIZE_FORMAT_LEN];

    printf("\nper transfer, µs: fi_mr_reg + fi_close per provider, mlock + munlock, and the time "
           "the bytes take on the wire\n%-10s",
           "");
    for (int i = 0; i < np; i++)
        printf("  %-19.19s", p[i].name);
    printf("  %13s  %-19s  %s\n%-10s", "mlock+munlock", "wire time", "mlock+munlock / wire",
           "size");
    for (int i = 0; i < np; i++)
        printf("  %9s %9s", "median", "p99");
    printf("  %13s  %9s %9s  %9s %9s\n", "median", "10 GB/s", "12.5 GB/s", "10 GB/s", "12.5 GB/s");
    for (int s = 0; s < NSIZES; s++) {
        printf("%-10s", human(sizes[s], buf));
        for (int i = 0; i < np; i++)
            if (p[i].err)
                printf("  %19s", "-");
            else
                print_cell(&p[i].reg[s]);
        if (lock[s].err)
            printf("  %13.13s", errname(lock[s].err));
        else
            printf("  %13.1f", lock[s].median);
        for (int w = 0; w < NWIRES; w++)
            printf("%s%9.1f", w ? " " : "  ", wire_us(sizes[s], wires[w]));
        for (int w = 0; w < NWIRES; w++)
            if (lock[s].err)
                printf("%s%9s", w ? " " : "  ", "-");
            else
                printf("%s%8.0f%%", w ? " " : "  ",
                       100 * lock[s].median / wire_us(sizes[s], wires[w]));
        printf("\n");
    }
}

static void print_once(const char *what, const char *apply, const char *undo, const struct once *o)
{
    if (o->err)
        printf("  %-14s %s\n", what, fi_strerror(-o->err));
    else
        printf("  %-14s %s %.1f µs, %s %.1f µs\n", what, apply, o->apply, undo, o->undo);
}

static void print_text(const struct options *o, const struct memlock *m, const struct provider *p,
                       int np, const struct stats *lock, const struct once *lock_once)
{
    char buf[SIZE_FORMAT_LEN], soft[SIZE_FORMAT_LEN], hard[SIZE_FORMAT_LEN];
    uint32_t v = fi_version();

    printf("mr-bench: libfabric %u.%u, region %s (memfd, prefaulted), at most %d iterations or "
           "%g s per cell\n",
           FI_MAJOR(v), FI_MINOR(v), human(o->memory, buf), o->iterations, o->seconds);
    printf("RLIMIT_MEMLOCK soft %s, hard %s: %s; CAP_IPC_LOCK %s\n",
           m->soft == RLIM_INFINITY ? "unlimited" : human(m->soft, soft),
           m->hard == RLIM_INFINITY ? "unlimited" : human(m->hard, hard), m->note,
           m->cap_ipc_lock ? "held (mlock is not bounded by the limit)"
                           : "not held (mlock beyond the soft limit fails)");
    for (int i = 0; i < np; i++)
        if (p[i].err)
            printf("%s: %s\n", p[i].name, fi_strerror(-p[i].err));
        else
            printf("%s (%s): mr_mode %s\n", p[i].name, p[i].where, p[i].mr_mode);
    print_table(p, np, lock);
    printf("\none-off, the whole region (%s):\n", human(o->memory, buf));
    for (int i = 0; i < np; i++)
        if (!p[i].err)
            print_once(p[i].name, "fi_mr_reg", "fi_close", &p[i].whole);
    print_once("mlock", "mlock", "munlock", lock_once);
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s >= 0x20)
            putchar(*s);
    putchar('"');
}

static void json_stats(uint64_t size, const struct stats *s)
{
    printf("{\"bytes\": %" PRIu64, size);
    if (s->err) {
        printf(", \"error\": ");
        json_string(fi_strerror(-s->err));
    } else {
        printf(", \"n\": %d, \"median_us\": %.3f, \"p99_us\": %.3f, \"wire_fraction\": [", s->n,
               s->median, s->p99);
        for (int w = 0; w < NWIRES; w++)
            printf("%s%.6f", w ? ", " : "", s->median / wire_us(size, wires[w]));
        printf("]");
    }
    printf("}");
}

static void json_once(const struct once *o)
{
    if (o->err) {
        printf("{\"error\": ");
        json_string(fi_strerror(-o->err));
        printf("}");
    } else {
        printf("{\"apply_us\": %.1f, \"undo_us\": %.1f}", o->apply, o->undo);
    }
}

static void json_limit(rlim_t r)
{
    if (r == RLIM_INFINITY)
        printf("null");
    else
        printf("%llu", (unsigned long long)r);
}

static void json_series(const struct stats *s)
{
    printf("[");
    for (int i = 0; i < NSIZES; i++) {
        printf("%s", i ? ", " : "");
        json_stats(sizes[i], &s[i]);
    }
    printf("]");
}

static void print_json(const struct options *o, const struct memlock *m, const struct provider *p,
                       int np, const struct stats *lock, const struct once *lock_once)
{
    uint32_t v = fi_version();

    printf("{\"libfabric\": \"%u.%u\", \"region_bytes\": %" PRIu64
           ", \"iterations\": %d, \"seconds\": %.3f,\n",
           FI_MAJOR(v), FI_MINOR(v), o->memory, o->iterations, o->seconds);
    printf(" \"wire_bytes_per_s\": [%.0f, %.0f],\n \"memlock\": {\"soft\": ", wires[0], wires[1]);
    json_limit(m->soft);
    printf(", \"hard\": ");
    json_limit(m->hard);
    printf(", \"cap_ipc_lock\": %s, \"note\": ", m->cap_ipc_lock ? "true" : "false");
    json_string(m->note);
    printf("},\n \"providers\": [");
    for (int i = 0; i < np; i++) {
        printf("%s\n  {\"name\": ", i ? "," : "");
        json_string(p[i].name);
        if (p[i].err) {
            printf(", \"error\": ");
            json_string(fi_strerror(-p[i].err));
        } else {
            printf(", \"where\": ");
            json_string(p[i].where);
            printf(", \"mr_mode\": ");
            json_string(p[i].mr_mode);
            printf(", \"whole_region\": ");
            json_once(&p[i].whole);
            printf(", \"reg_close\": ");
            json_series(p[i].reg);
        }
        printf("}");
    }
    printf("],\n \"mlock_munlock\": {\"whole_region\": ");
    json_once(lock_once);
    printf(", \"sizes\": ");
    json_series(lock);
    printf("}}\n");
}

/* ---- main ---- */

static void usage(FILE *to)
{
    fprintf(to, "usage: mr-bench [--provider LIST] [--memory SIZE] [--iterations N] "
                "[--seconds S] [--json]\n"
                "  --provider    comma-separated libfabric providers (tcp;ofi_rxm,shm)\n"
                "  --memory      the region, at least 256M (1G)\n"
                "  --iterations  at most N timings per cell (10000)\n"
                "  --seconds     at most S seconds per cell (2)\n"
                "  --json        machine-readable output\n");
}

static struct options parse_options(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"provider", required_argument, NULL, 'p'},
        {"memory", required_argument, NULL, 'm'},
        {"iterations", required_argument, NULL, 'n'},
        {"seconds", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static char default_providers[] = "tcp;ofi_rxm,shm"; /* split in place */
    struct options o = {
        .providers = default_providers, .memory = 1 * GIB, .iterations = 10000, .seconds = 2};
    int c;

    while ((c = getopt_long(argc, argv, "p:m:n:s:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            o.providers = optarg;
            break;
        case 'm':
            if (size_parse(optarg, &o.memory) < 0) {
                fprintf(stderr, "mr-bench: --memory: %s\n", ferry_errmsg());
                exit(2);
            }
            break;
        case 'n':
            o.iterations = atoi(optarg);
            break;
        case 's':
            o.seconds = atof(optarg);
            break;
        case 'j':
            o.json = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (optind < argc || o.iterations < 1 || o.seconds <= 0 || o.memory < sizes[NSIZES - 1]) {
        usage(stderr);
        exit(2);
    }
    return o;
}

static int split_providers(char *list, struct provider *p)
{
    int n = 0;
    char *save;

    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (n == MAX_PROVIDERS) {
            fprintf(stderr, "mr-bench: at most %d providers\n", MAX_PROVIDERS);
            exit(2);
        }
        p[n++] = (struct provider){.name = name};
    }
    return n;
}

static void run(const struct options *o, const struct arena *a, struct provider *p, int np)
{
    struct memlock m = memlock_raise();
    struct stats lock[NSIZES];

    for (int i = 0; i < np; i++)
        bench_provider(&p[i], a, o);
    for (int s = 0; s < NSIZES; s++)
        lock[s] = measure(lock_unlock, NULL, a, sizes[s], o);
    struct once lock_once = lock_whole(a);
    if (o->json)
        print_json(o, &m, p, np, lock, &lock_once);
    else
        print_text(o, &m, p, np, lock, &lock_once);
}

int main(int argc, char **argv)
{
    struct options o = parse_options(argc, argv);
    struct provider p[MAX_PROVIDERS];
    int np = split_providers(o.providers, p);
    struct arena a;

    if (arena_open(&a, o.memory, 0) < 0) {
        fprintf(stderr, "mr-bench: %s\n", ferry_errmsg());
        return 1;
    }
    memset(a.base, 0, a.size); /* prefaults: no page faults in the timings */
    o.memory = a.size;
    run(&o, &a, p, np);
    arena_close(&a);
    return 0;
}
