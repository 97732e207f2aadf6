/* spill.c - the spill suite: how fast ferryd --spill-dir writes objects out and reads them back,
 * beside a plain sequential O_DIRECT write and read of the same bytes in the same directory,
 * and what spilling in the background does to the gets of a resident object.
 *
 * Per size and round: a fresh ferryd (its arena --memory, its own spill directory) takes a
 * stream of puts four times the arena (the creates wait for the writes, so the stream runs at
 * the spill rate); then the objects still in memory are deleted and the spilled ones are read
 * back with gets of up to 64 ids (restores in parallel). The references write and read a file
 * of the same size in 4 MiB O_DIRECT blocks (what dd oflag=direct does). Rounds alternate the
 * two, so that the disk's moods fall on both; each figure is the median over rounds. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define MIB (1024ull * 1024)
#define REF_BLOCK (4 * MIB)
#define GET_BATCH 64
#define MAX_ROUNDS 9
#define STR_(x) #x
#define STR(x) STR_(x)
#define PROBE_GETS 100000

struct spill_options {
    const char *memory;
    uint64_t arena;
    const char *dir;
    unsigned rounds; /* --rounds, at most MAX_ROUNDS here: a round fills four arenas a size */
};

/* The targets: each ratio is taken within a round, and its median over rounds is
 * reported with its range (the disk's speed swings between runs here). */
struct spill_target {
    const char *name, *description;
    const char *op, *ref; /* v[] rows: 0 spill, 1 restore, 2 write, 3 read, 4 get-spilling... */
    int num, den;
    uint64_t size;
    double target;
    int at_most;
};

static const struct spill_target targets[] = {
    {"spill_over_disk_write_1M", "MiB/s at 1M: ferry spill / O_DIRECT write", "spill", "write", 0,
     2, MIB, 0.8, 0},
    {"restore_over_disk_read_1M", "MiB/s at 1M: ferry restore / O_DIRECT read", "restore", "read",
     1, 3, MIB, 0.8, 0},
    {"spill_over_disk_write_64M", "MiB/s at 64M: ferry spill / O_DIRECT write", "spill", "write", 0,
     2, 64 * MIB, 0.8, 0},
    {"restore_over_disk_read_64M", "MiB/s at 64M: ferry restore / O_DIRECT read", "restore", "read",
     1, 3, 64 * MIB, 0.8, 0},
    {"get_spilling_over_idle_p50_1K", "get p50 of a resident 1K object: spilling / idle",
     "get-spilling", "get-idle", 4, 5, 1024, 1.1, 1},
};
#define NRATIOS (sizeof(targets) / sizeof(targets[0]))

static void handle_option(void *ctx, int ch, const char *arg)
{
    struct spill_options *o = ctx;

    switch (ch) {
    case 'm':
        o->memory = arg;
        break;
    case 'd':
        o->dir = arg;
        break;
    }
}

static int parse_options(int argc, char **argv, struct bench_options *common,
                         struct spill_options *o)
{
    static const struct option longopts[] = {
        {"memory", required_argument, NULL, 'm'},
        {"dir", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    const struct bench_suite_options suite = {
        .name = "spill",
        .default_sizes = "64K,1M,64M",
        .longopts = longopts,
        .handle = handle_option,
        .ctx = o,
        .synopsis = "usage: ferry-bench spill [--sizes LIST] [--json] [--plot DIR]\n"
                    "                         [--memory SIZE] [--dir PATH] [--rounds N]\n"
                    "Rounds alternate ferry and the reference (at most " STR(
                        MAX_ROUNDS) " here);\n"
                                    "--seconds and --repeat do not apply.\n",
        .help = "  --memory SIZE    the arena of each ferryd started (default 256M, at least 16\n"
                "                   objects); each size's stream of puts is four times it\n"
                "  --dir PATH       where the spill directories and reference files go (default:\n"
                "                   the scratch directory); the disk measured\n",
    };
    *o = (struct spill_options){.memory = "256M"};
    int status = bench_parse_options(argc, argv, &suite, common);
    if (status < 0 && (common->rounds > MAX_ROUNDS || common->repeat > 1))
        bench_fail("spill: --rounds at most %d, and no --repeat", MAX_ROUNDS);
    o->rounds = common->rounds;
    return status;
}

static uint64_t arena_bytes(const char *memory)
{
    char *end;
    double v = strtod(memory, &end);
    uint64_t unit = *end == 'G' ? 1ull << 30 : *end == 'M' ? MIB : *end == 'K' ? 1024 : 1;

    if (v <= 0 || end == memory)
        bench_fail("bad --memory '%s'", memory);
    return (uint64_t)(v * (double)unit);
}

static double mib_per_sec(uint64_t bytes, double seconds)
{
    return seconds > 0 ? (double)bytes / (double)MIB / seconds : 0;
}

/* ---- the reference: a file written and read in O_DIRECT blocks ---- */

static void disk_round(const char *dir, uint64_t bytes, const uint8_t *block, double *w, double *r)
{
    char path[512];
    uint8_t *buf;
    double t0;
    int fd;

    snprintf(path, sizeof(path), "%s/reference", dir);
    if (posix_memalign((void **)&buf, 4096, REF_BLOCK) != 0)
        bench_fail("out of memory");
    memcpy(buf, block, REF_BLOCK);
    fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT, 0600);
    if (fd < 0)
        bench_fail("%s: %s (O_DIRECT)", path, strerror(errno));
    t0 = bench_now();
    for (uint64_t off = 0; off < bytes; off += REF_BLOCK)
        if (pwrite(fd, buf, REF_BLOCK, (off_t)off) != REF_BLOCK)
            bench_fail("writing %s: %s", path, strerror(errno));
    *w = mib_per_sec(bytes, bench_now() - t0);
    close(fd);
    fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0)
        bench_fail("%s: %s", path, strerror(errno));
    t0 = bench_now();
    for (uint64_t off = 0; off < bytes; off += REF_BLOCK)
        if (pread(fd, buf, REF_BLOCK, (off_t)off) != REF_BLOCK)
            bench_fail("reading %s: %s", path, strerror(errno));
    *r = mib_per_sec(bytes, bench_now() - t0);
    close(fd);
    unlink(path);
    free(buf);
}

/* ---- ferry ---- */

/* The arena for objects of size: --memory, or sixteen objects when that is more, so that
 * writes can run ahead of the puts as they would in a real store (a 256 MiB arena holds only
 * three 64 MiB objects, and each put would wait for a whole write). */
static uint64_t arena_for(const struct spill_options *o, uint64_t size)
{
    return o->arena > 16 * size ? o->arena : 16 * size;
}

static ferry_client *start_daemon(const struct spill_options *o, const char *dir, uint64_t size,
                                  unsigned round, struct bench_proc **proc, char *spill_dir,
                                  size_t len)
{
    static char names[MAX_ROUNDS * BENCH_MAX_SIZES + 1][48];
    static char memory[MAX_ROUNDS * BENCH_MAX_SIZES + 1][32];
    static unsigned next;
    unsigned k = next++ % (sizeof(names) / sizeof(names[0]));

    snprintf(names[k], sizeof(names[k]), "ferryd-spill-%" PRIu64 "-%u", size, round);
    snprintf(memory[k], sizeof(memory[k]), "%" PRIu64, arena_for(o, size));
    snprintf(spill_dir, len, "%s/%s", dir, names[k]);
    const char *args[] = {"--memory", memory[k], "--spill-dir", spill_dir, NULL};
    return ferry_peer_start(NULL, names[k], args, proc);
}

/* Removes a spill directory a stopped daemon left (its files are flat). */
static void remove_dir(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *de;
    char file[1024];

    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
        unlink(file);
    }
    if (d)
        closedir(d);
    rmdir(path);
}

/* Puts objects [from, to) of size from payload; returns the seconds it took. */
static double put_stream(ferry_client *c, uint64_t nonce, uint64_t from, uint64_t n, uint64_t size,
                         const uint8_t *payload)
{
    double t0 = bench_now();

    for (uint64_t i = from; i < n; i++) {
        ferry_id id = ferry_peer_id(nonce, i, 's');
        bench_check_ferry(ferry_put(c, &id, payload, size, NULL, 0), "put %" PRIu64 " of %" PRIu64,
                          i, n);
        bench_check_interrupt();
    }
    return bench_now() - t0;
}

/* Deletes the objects still in memory; lists the spilled ones in ids (returns their count). */
static uint64_t keep_spilled(ferry_client *c, uint64_t nonce, uint64_t n, ferry_id *ids)
{
    uint64_t k = 0;

    for (uint64_t i = 0; i < n; i++) {
        ferry_id id = ferry_peer_id(nonce, i, 's');
        int where = 0;
        bench_check_ferry(ferry_contains(c, &id, &where), "contains");
        if (where == FERRY_ON_DISK)
            ids[k++] = id;
        else
            bench_check_ferry(ferry_delete(c, &id), "delete");
    }
    return k;
}

/* Gets the objects back, GET_BATCH at a time, touching a byte of each page of each. */
static double restore_all(ferry_client *c, const ferry_id *ids, uint64_t n, uint64_t size)
{
    ferry_buffer b[GET_BATCH];
    uint64_t batch = (64 * MIB) / size;
    volatile uint8_t sink = 0;
    double t0 = bench_now();

    batch = batch < 1 ? 1 : batch > GET_BATCH ? GET_BATCH : batch;
    for (uint64_t i = 0; i < n; i += batch) {
        uint64_t k = n - i < batch ? n - i : batch;
        bench_check_ferry(ferry_get(c, ids + i, k, -1, b), "get of %" PRIu64 " spilled objects", k);
        for (uint64_t j = 0; j < k; j++) {
            for (uint64_t at = 0; at < b[j].data_size; at += 4096)
                sink ^= b[j].data[at];
            bench_check_ferry(ferry_release(c, &ids[i + j]), "release");
        }
    }
    (void)sink;
    return bench_now() - t0;
}

static void ferry_round(const struct spill_options *o, const char *dir, uint64_t size,
                        unsigned round, const uint8_t *payload, double *spill, double *restore)
{
    uint64_t n = (4 * arena_for(o, size) + size - 1) / size, spilled;
    struct bench_counters before, after;
    struct bench_proc *proc;
    char spill_dir[512];
    ferry_client *c = start_daemon(o, dir, size, round, &proc, spill_dir, sizeof(spill_dir));
    ferry_id *ids = calloc(n, sizeof(*ids));
    uint64_t nonce = bench_nonce();
    double secs;

    if (!ids)
        bench_fail("out of memory");
    /* The first arena's worth fills memory (writes start at 80%); from then on every put
     * waits for room that writes make: the steady state measured. */
    put_stream(c, nonce, 0, n / 4, size, payload);
    bench_counters_get(c, "ferryd", &before);
    secs = put_stream(c, nonce, n / 4, n, size, payload);
    bench_counters_get(c, "ferryd", &after);
    *spill = mib_per_sec(after.st.spill_written_bytes - before.st.spill_written_bytes, secs);
    spilled = keep_spilled(c, nonce, n, ids);
    bench_counters_get(c, "ferryd", &before);
    secs = restore_all(c, ids, spilled, size);
    bench_counters_get(c, "ferryd", &after);
    *restore = mib_per_sec(after.st.restored_bytes - before.st.restored_bytes, secs);
    if (after.st.restore_failures || after.st.spill_write_failures)
        bench_fail("%s: %" PRIu64 " restores and %" PRIu64 " writes failed", proc->name,
                   after.st.restore_failures, after.st.spill_write_failures);
    free(ids);
    bench_proc_stop(proc);
    remove_dir(spill_dir);
}

/* ---- gets of a resident object, idle and while spilling goes on ---- */

struct background {
    ferry_client *c;
    const uint8_t *payload;
    uint64_t nonce, n;
    volatile int stop;
};

/* Puts a 1 MiB object every BACKGROUND_MS until told to stop (100 MiB/s): once the arena is
 * full every put makes the daemon spill as much, and the client itself stays light. */
#define BACKGROUND_MS 10
static void *put_forever(void *arg)
{
    struct background *bg = arg;

    while (!bg->stop) {
        ferry_id id = ferry_peer_id(bg->nonce, bg->n++, 'b');
        if (ferry_put(bg->c, &id, bg->payload, MIB, NULL, 0) != FERRY_OK)
            break;
        bench_sleep_ms(BACKGROUND_MS);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p50 of PROBE_GETS gets (and releases) of id, in microseconds. */
static double probe_p50(ferry_client *c, const ferry_id *id)
{
    static double lat[PROBE_GETS];
    ferry_buffer b;

    for (int i = 0; i < PROBE_GETS; i++) {
        double t0 = bench_now();
        bench_check_ferry(ferry_get(c, id, 1, 0, &b), "get of the probe");
        lat[i] = (bench_now() - t0) * 1e6;
        bench_check_ferry(ferry_release(c, id), "release of the probe");
    }
    qsort(lat, PROBE_GETS, sizeof(lat[0]), cmp_double);
    return lat[PROBE_GETS / 2];
}

static uint64_t spill_writes_of(ferry_client *c)
{
    struct bench_counters now;
    bench_counters_get(c, "ferryd", &now);
    return now.st.spill_writes;
}

/* Rounds of gets of a resident 1 KiB object (held by a reference, so never spilled): idle, then
 * while another client keeps the daemon spilling (put_forever). */
static void probe_rounds(const struct spill_options *o, const char *dir, const uint8_t *payload,
                         double *idle, double *busy)
{
    struct bench_proc *proc;
    char spill_dir[512], sock[512];
    ferry_client *c = start_daemon(o, dir, 1024, 0, &proc, spill_dir, sizeof(spill_dir));
    ferry_id probe = ferry_peer_id(bench_nonce(), 0, 'r');
    struct background bg = {.payload = payload, .nonce = bench_nonce()};
    ferry_buffer held;
    pthread_t t;

    snprintf(sock, sizeof(sock), "%s/%s.sock", bench_tmpdir(), proc->name);
    bench_check_ferry(ferry_put(c, &probe, payload, 1024, NULL, 0), "put of the probe");
    bench_check_ferry(ferry_get(c, &probe, 1, 0, &held), "get of the probe");
    bench_check_ferry(ferry_connect(sock, &bg.c), "connect to %s", sock);
    /* The arena full first, so that the background puts spill from their first. */
    put_stream(bg.c, bg.nonce, 0, o->arena / MIB, MIB, payload);
    bg.n = o->arena / MIB;
    for (unsigned r = 0; r < o->rounds; r++) {
        idle[r] = probe_p50(c, &probe);
        bg.stop = 0;
        if (pthread_create(&t, NULL, put_forever, &bg) != 0)
            bench_fail("pthread_create");
        bench_sleep_ms(300); /* the arena full, writes under way */
        busy[r] = probe_p50(c, &probe);
        bg.stop = 1;
        pthread_join(t, NULL);
    }
    if (spill_writes_of(c) == 0)
        bench_fail("%s wrote nothing to its spill directory while probed", proc->name);
    ferry_disconnect(bg.c);
    bench_check_ferry(ferry_release(c, &probe), "release of the probe");
    bench_proc_stop(proc);
    remove_dir(spill_dir);
}

/* ---- the suite ---- */

/* The per-round ratios num[r] / den[r]: their median and range into q. */
static void ratio_over_rounds(const struct spill_target *t, const double *num, const double *den,
                              unsigned n, struct bench_ratio *q)
{
    double r[MAX_ROUNDS];

    for (unsigned i = 0; i < n; i++)
        r[i] = den[i] > 0 ? num[i] / den[i] : 0;
    qsort(r, n, sizeof(r[0]), cmp_double);
    *q = (struct bench_ratio){.name = t->name,
                              .description = t->description,
                              .measured = 1,
                              .value = r[n / 2],
                              .target = t->target,
                              .at_most = t->at_most,
                              .lo = r[0],
                              .hi = r[n - 1],
                              .rounds = n};
    bench_ratio_judge(q);
}

static void median_into(struct bench_result *r, const char *system, const char *op, uint64_t size,
                        const double *v, unsigned n, int latency)
{
    double sorted[MAX_ROUNDS];

    memcpy(sorted, v, n * sizeof(v[0])); /* v keeps its round order for the ratios */
    qsort(sorted, n, sizeof(sorted[0]), cmp_double);
    *r = (struct bench_result){
        .system = system, .op = op, .size = size, .iterations = n, .rounds = n};
    if (latency) {
        r->p50_us = sorted[n / 2];
    } else { /* and the time one object took in the stream, for the latency chart */
        r->mib_per_sec = sorted[n / 2];
        r->p50_us = r->mib_per_sec > 0 ? (double)size / (r->mib_per_sec * MIB) * 1e6 : 0;
    }
}

/* The targets measured in this run into q (unmeasured ones marked so). */
static void judge(double v[][BENCH_MAX_SIZES + 1][MAX_ROUNDS], const struct bench_options *common,
                  unsigned rounds, struct bench_ratio *q)
{
    for (size_t i = 0; i < NRATIOS; i++) {
        const struct spill_target *t = &targets[i];
        size_t s = 0;
        if (t->num >= 4) { /* the get probe: one size */
            ratio_over_rounds(t, v[t->num][0], v[t->den][0], rounds, &q[i]);
            continue;
        }
        while (s < common->nsizes && common->sizes[s] != t->size)
            s++;
        if (s == common->nsizes) {
            q[i] = (struct bench_ratio){.name = t->name,
                                        .description = t->description,
                                        .target = t->target,
                                        .at_most = t->at_most};
            continue;
        }
        ratio_over_rounds(t, v[t->num][s], v[t->den][s], rounds, &q[i]);
    }
}

/* The charts show the rates; the get probe's latencies have none. */
static int charted(const struct bench_result *r)
{
    return r->mib_per_sec > 0;
}

int bench_spill(int argc, char **argv)
{
    static double v[6][BENCH_MAX_SIZES + 1][MAX_ROUNDS];
    static const char *const ops[] = {"spill", "restore", "write", "read"};
    struct bench_options common;
    struct spill_options o;
    struct bench_result results[4 * BENCH_MAX_SIZES + 2];
    struct bench_ratio q[NRATIOS];
    size_t nres = 0;
    int status = parse_options(argc, argv, &common, &o);
    const char *dir;
    uint8_t *payload;

    if (status >= 0)
        return status;
    if (common.plot_dir != NULL)
        bench_require_gnuplot();
    o.arena = arena_bytes(o.memory);
    dir = o.dir ? o.dir : bench_tmpdir();
    payload = bench_alloc_faulted(
        common.sizes[common.nsizes - 1] > REF_BLOCK ? common.sizes[common.nsizes - 1] : REF_BLOCK);
    for (size_t s = 0; s < common.nsizes; s++) {
        uint64_t size = common.sizes[s];
        uint64_t bytes = (4 * arena_for(&o, size) + size - 1) / size * size;
        for (unsigned r = 0; r < o.rounds; r++) {
            /* Who goes first alternates: a disk that speeds up or slows down over a round
             * favours neither. */
            if (r % 2)
                ferry_round(&o, dir, size, r, payload, &v[0][s][r], &v[1][s][r]);
            disk_round(dir, (bytes + REF_BLOCK - 1) / REF_BLOCK * REF_BLOCK, payload, &v[2][s][r],
                       &v[3][s][r]);
            if (r % 2 == 0)
                ferry_round(&o, dir, size, r, payload, &v[0][s][r], &v[1][s][r]);
        }
        for (int k = 0; k < 4; k++)
            median_into(&results[nres++], k < 2 ? "ferry" : "disk", ops[k], size, v[k][s], o.rounds,
                        0);
    }
    probe_rounds(&o, dir, payload, v[5][0], v[4][0]);
    median_into(&results[nres++], "ferry", "get-idle", 1024, v[5][0], o.rounds, 1);
    median_into(&results[nres++], "ferry", "get-spilling", 1024, v[4][0], o.rounds, 1);
    judge(v, &common, o.rounds, q);
    bench_report(&(struct bench_report){
        .suite = "spill",
        .opts = &common,
        .preamble = "spill and restore: MiB/s of a put stream 4x the arena, and of gets of the "
                    "spilled objects; disk: the same bytes in 4 MiB O_DIRECT blocks; medians over "
                    "rounds\n",
        .results = results,
        .nresults = nres,
        .ratios = q,
        .nratios = NRATIOS,
        .charted = charted,
    });
    free(payload);
    return 0;
}
