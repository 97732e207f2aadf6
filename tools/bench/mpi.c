/* mpi.c - the mpi suite, run under mpirun with one rank per node: each rank talks to its own
 * node's ferryd, and the ranks store objects and fetch each other's through the cluster.
 *
 *   all-to-all   every rank stores K objects, then fetches every other rank's
 *   many-to-one  rank 0 stores K objects, every other rank fetches all of them (the aggregate
 *                bandwidth one node serves to many)
 *   one-from-many  rank 0 stores K objects, the ranks between the first and the last fetch
 *                them untimed (holders), then the last rank fetches them: an object that
 *                several nodes hold, in ranges from all of them at once (ferryd --split-min)
 *
 * A rank's time runs from a barrier to the end of its own fetches. The rounds are interleaved:
 * each runs every pattern at every size once, in an order shuffled from the seed (the same on
 * every rank), so that a burst of load falls on one run of each, never on all runs of one.
 * Rank 0 reports, per pattern and size, the median round by aggregate bandwidth (bytes fetched
 * by all ranks / the slowest rank's time) with the per-rank bandwidths, and the spread of the
 * aggregate over the rounds. After every run the fetched copies and the stored objects are
 * deleted, and every run uses fresh ids, so that each measures transfers, never local hits.
 * Built only when CMake finds MPI.
 *
 * MPI calls are not checked one by one: MPI_COMM_WORLD keeps MPI's default error handler,
 * MPI_ERRORS_ARE_FATAL, which ends the whole job on any error. A rank that fails otherwise
 * exits through bench_fail(), and mpirun then stops the others. */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "client/default_socket.h" /* libferry's */

#define MIB (1024.0 * 1024.0)
#define DEFAULT_SIZES "1M"
#define DEFAULT_COUNT 64
#define DEFAULT_ROUNDS 5
#define MAX_ROUNDS 1000
#define FIELD_BITS 20                      /* id counters: <round, origin rank, index> */
#define MAX_FIELD ((1u << FIELD_BITS) - 1) /* the most objects per rank, and of ranks */
#define MAX_IDS_PER_FETCH 65536            /* the most ids one request carries */
/* A fetch call fails after FETCH_TIMEOUT_BASE_MS plus the time its bytes take at
 * FETCH_FLOOR_MIBPS: a stalled transfer fails the run, a slow network does not. */
#define FETCH_TIMEOUT_BASE_MS 60000
#define FETCH_FLOOR_MIBPS 1
#define NODES_TIMEOUT_MS 15000
#define NODES_POLL_MS 50
#define BARRIER_POLL_MS 1
#define NODE_ID_LEN 64 /* ferry_node_info.id */
#define STAMP_BYTES 8

enum pattern { ALL_TO_ALL, MANY_TO_ONE, ONE_FROM_MANY, N_PATTERNS };

static const char *const pattern_names[N_PATTERNS] = {"all-to-all", "many-to-one", "one-from-many"};
static const char pattern_kinds[N_PATTERNS] = {'A', 'M', 'O'}; /* the kind byte of their ids */

struct mpi_options {
    const char *socket;       /* NULL: libferry's default (client_default_socket) */
    int patterns[N_PATTERNS]; /* 1 for each pattern to run */
    uint64_t sizes[BENCH_MAX_SIZES];
    size_t nsizes;
    uint64_t count;
    uint64_t rounds;
    uint64_t seed; /* of the rounds' orders; rank 0's nonce unless --seed */
    int have_seed;
    int json;
};

/* One rank's state; node_ids has every rank's ferryd node id, in rank order. */
struct mpi_run {
    const struct mpi_options *o;
    ferry_client *c;
    int rank, nranks;
    uint64_t run_id; /* rank 0's nonce: ids never meet another run's */
    uint64_t seq;    /* rounds started so far: ids never meet an earlier round's */
    const uint8_t *payload;
    char socket[PATH_MAX];
    char (*node_ids)[NODE_ID_LEN];
};

/* What one rank did in one round, gathered to rank 0. The counters are its ferryd's, from
 * before the start barrier to after every rank finished fetching. */
struct rank_sample {
    double seconds;         /* start barrier to its last fetched object; 0 if it fetched none */
    uint64_t objects;       /* objects it fetched */
    uint64_t bytes;         /* their bytes */
    uint64_t transfers_in;  /* objects its ferryd received from peers */
    uint64_t transfers_out; /* objects its ferryd sent to peers */
    uint64_t split_fetches; /* objects its ferryd fetched in ranges from several holders */
};

/* A round of one pattern at one size as rank 0 sees it, with the figures of the report. */
struct round_result {
    uint64_t round;
    struct rank_sample *ranks; /* nranks entries */
    uint64_t objects, bytes, transfers_in;
    double slowest;                         /* s */
    double aggregate;                       /* MiB/s: bytes / slowest */
    double rank_min, rank_median, rank_max; /* MiB/s over the ranks that fetched */
    double spread; /* of the median round: the aggregate's IQR over the rounds / its median */
};

/* The objects a rank handles in one round: those it stores, and those it fetches, K from each
 * of its sources, source by source. */
struct round_objects {
    enum pattern pattern;
    uint64_t seq, size;
    ferry_id *stored;
    size_t nstored;
    ferry_id *fetched;
    int *statuses;
    size_t nfetched;
};

static const char mpi_usage[] =
    "usage: mpirun -np N ferry-bench mpi [--socket PATH] [--pattern LIST] [--size LIST]\n"
    "                                    [--count K] [--rounds R] [--seed N] [--json]\n"
    "One rank per node, each with its own node's ferryd (cluster members of one directory);\n"
    "the ranks store objects and fetch each other's. Options:\n"
    "  --socket PATH    the ferryd of each rank; every %d in PATH becomes the rank (for\n"
    "                   several daemons on one machine); default $FERRY_SOCKET, else\n"
    "                   " FERRY_SERVICE_SOCKET " if it exists, else " FERRY_DEFAULT_SOCKET "\n"
    "  --pattern LIST   all-to-all, many-to-one, one-from-many, comma-separated (default\n"
    "                   the first two); all-to-all: every rank stores K objects, then\n"
    "                   fetches every other rank's; many-to-one: rank 0 stores K, every\n"
    "                   other rank fetches them; one-from-many (3 ranks or more): rank 0\n"
    "                   stores K, the ranks between fetch them untimed, then the last rank\n"
    "                   fetches them from all of those holders at once (--split-min)\n"
    "  --size LIST      object sizes, K/M/G = 2^10/2^20/2^30 bytes (default " DEFAULT_SIZES ")\n"
    "  --count K        objects each storing rank puts per round (default 64)\n"
    "  --rounds R       interleaved rounds, each running every pattern at every size once in\n"
    "                   a shuffled order; the median round is reported with the spread\n"
    "                   (interquartile range / median) of the aggregate (default 5)\n"
    "  --seed N         of the shuffled orders (default: a new one, printed)\n"
    "  --json           one JSON object per pattern, one per line, instead of the table\n";

/* ---- options ---- */

static void parse_patterns(const char *list, int *patterns)
{
    memset(patterns, 0, N_PATTERNS * sizeof(*patterns));
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (k < N_PATTERNS &&
               (strlen(pattern_names[k]) != len || strncmp(p, pattern_names[k], len) != 0))
            k++;
        if (k == N_PATTERNS)
            bench_fail("bad --pattern '%s': expected all-to-all, many-to-one, one-from-many", list);
        patterns[k] = 1;
        p += len;
        if (*p == '\0')
            return;
    }
}

/* Returns -1 when the options are valid (o filled in), else the exit status (0 for --help). */
static int parse_options(int argc, char **argv, struct mpi_options *o)
{
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, 's'},
        {"pattern", required_argument, NULL, 'P'},
        {"size", required_argument, NULL, 'z'},
        {"count", required_argument, NULL, 'n'},
        {"rounds", required_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        {"seed", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *sizes = DEFAULT_SIZES;
    int ch;
    *o = (struct mpi_options){.patterns = {1, 1}, .count = DEFAULT_COUNT, .rounds = DEFAULT_ROUNDS};
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 's':
            o->socket = optarg;
            break;
        case 'P':
            parse_patterns(optarg, o->patterns);
            break;
        case 'z':
            sizes = optarg;
            break;
        case 'n':
            o->count = bench_parse_count("--count", optarg, 1, MAX_FIELD);
            break;
        case 'r':
            o->rounds = bench_parse_count("--rounds", optarg, 1, MAX_ROUNDS);
            break;
        case 'S':
            o->seed = bench_parse_count("--seed", optarg, 0, UINT64_MAX);
            o->have_seed = 1;
            break;
        case 'j':
            o->json = 1;
            break;
        default:
            fputs(mpi_usage, ch == 'h' ? stdout : stderr);
            return ch == 'h' ? 0 : 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "ferry-bench: unexpected argument '%s'\n%s", argv[optind], mpi_usage);
        return 2;
    }
    o->nsizes = bench_parse_sizes(sizes, o->sizes, BENCH_MAX_SIZES, BENCH_SIZE_LIMIT);
    return -1;
}

/* ---- joining the cluster ---- */

/* The socket of this rank: the template (--socket, else libferry's default: $FERRY_SOCKET,
 * else FERRY_SERVICE_SOCKET if it exists, else FERRY_DEFAULT_SOCKET) with every "%d" replaced
 * by the rank. */
static void rank_socket(struct mpi_run *r)
{
    const char *t = r->o->socket;
    size_t k = 0, len = sizeof(r->socket);
    if (t == NULL || *t == '\0')
        t = client_default_socket();
    for (const char *p = t; *p != '\0' && k < len;) {
        if (p[0] == '%' && p[1] == 'd') {
            k += (size_t)snprintf(r->socket + k, len - k, "%d", r->rank);
            p += 2;
        } else {
            r->socket[k++] = *p++;
        }
    }
    if (k >= len)
        bench_fail("rank %d: socket path too long: %s", r->rank, t);
    r->socket[k] = '\0';
}

/* The live nodes this rank's ferryd knows (free() them); none while it has not reached the
 * directory yet. */
static size_t list_nodes(const struct mpi_run *r, ferry_node_info **nodes)
{
    size_t n;
    int err = ferry_nodes(r->c, nodes, &n);
    if (err == FERRY_EDIRECTORY) {
        *nodes = NULL;
        return 0;
    }
    bench_check_ferry(err, "rank %d: nodes of the ferryd at %s", r->rank, r->socket);
    return n;
}

/* 1 when the list has this node itself; it is copied to r->node_ids[r->rank]. */
static int found_self(struct mpi_run *r, const ferry_node_info *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (nodes[i].self) {
            snprintf(r->node_ids[r->rank], NODE_ID_LEN, "%s", nodes[i].id);
            return 1;
        }
    }
    return 0;
}

/* 1 when the list has every rank's node. */
static int found_all(struct mpi_run *r, const ferry_node_info *nodes, size_t n)
{
    for (int k = 0; k < r->nranks; k++) {
        size_t i = 0;
        while (i < n && strcmp(nodes[i].id, r->node_ids[k]) != 0)
            i++;
        if (i == n)
            return 0;
    }
    return 1;
}

/* Polls the node list until found() is true, for up to NODES_TIMEOUT_MS. */
static void wait_nodes(struct mpi_run *r,
                       int (*found)(struct mpi_run *, const ferry_node_info *, size_t),
                       const char *what)
{
    for (unsigned waited = 0;; waited += NODES_POLL_MS) {
        ferry_node_info *nodes;
        size_t n = list_nodes(r, &nodes);
        int done = found(r, nodes, n);
        ferry_free(nodes);
        if (done)
            return;
        if (waited >= NODES_TIMEOUT_MS)
            bench_fail("rank %d: the ferryd at %s did not list %s within %d ms (it lists %zu "
                       "node(s); is it started with --node-id, --listen and --directory?)",
                       r->rank, r->socket, what, NODES_TIMEOUT_MS, n);
        bench_check_interrupt();
        bench_sleep_ms(NODES_POLL_MS);
    }
}

/* Fails unless this rank's node differs from every lower rank's. */
static void check_distinct_nodes(const struct mpi_run *r)
{
    for (int k = 0; k < r->rank; k++)
        if (strcmp(r->node_ids[k], r->node_ids[r->rank]) == 0)
            bench_fail("ranks %d and %d both use ferryd node %s: every rank needs its own node "
                       "(--socket PATH with %%d for several daemons on one machine)",
                       k, r->rank, r->node_ids[k]);
}

static uint64_t largest_size(const struct mpi_options *o)
{
    uint64_t largest = 0;
    for (size_t i = 0; i < o->nsizes; i++)
        largest = o->sizes[i] > largest ? o->sizes[i] : largest;
    return largest;
}

/* Fails unless this rank's arena can hold a round's objects at the largest size: its own and
 * every other rank's in all-to-all, K in many-to-one. */
static void check_capacity(const struct mpi_run *r)
{
    const struct mpi_options *o = r->o;
    ferry_stats s;
    uint64_t largest = largest_size(o);
    double objects = (double)o->count * (o->patterns[ALL_TO_ALL] ? r->nranks : 1);
    double need = objects * (double)largest;
    bench_check_ferry(ferry_stats_get(r->c, &s, sizeof(s)), "rank %d: stats of the ferryd at %s",
                      r->rank, r->socket);
    if (need > (double)s.capacity_bytes)
        bench_fail("rank %d: a round needs %.0f objects of %llu bytes (%.1f MiB) in one arena, "
                   "the ferryd at %s has %.1f MiB: lower --count or --size",
                   r->rank, objects, (unsigned long long)largest, need / MIB, r->socket,
                   (double)s.capacity_bytes / MIB);
}

/* Connects this rank to its ferryd and waits until every rank's node is in every rank's node
 * list (so a fetch finds every holder's address), with distinct nodes. */
static void join(struct mpi_run *r)
{
    rank_socket(r);
    r->c = ferry_peer_start(r->socket, "ferryd", NULL, NULL);
    r->node_ids = calloc((size_t)r->nranks, NODE_ID_LEN);
    if (r->node_ids == NULL)
        bench_fail("out of memory for %d node ids", r->nranks);
    check_capacity(r);
    wait_nodes(r, found_self, "itself");
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->node_ids, NODE_ID_LEN, MPI_CHAR,
                  MPI_COMM_WORLD);
    check_distinct_nodes(r);
    wait_nodes(r, found_all, "every rank's node");
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- one round ---- */

/* MPI_Barrier that sleeps between polls: a rank that waits leaves the CPUs to the daemons that
 * still move bytes (a spinning barrier competes with them when cores are few). */
static void quiet_barrier(void)
{
    MPI_Request req;
    int done;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    for (;;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done)
            return;
        bench_sleep_ms(BARRIER_POLL_MS);
    }
}

static int stores(const struct mpi_run *r, enum pattern p)
{
    return p == ALL_TO_ALL || r->rank == 0;
}

/* one-from-many: the ranks between the first and the last fetch before the timed section. */
static int holds_first(const struct mpi_run *r, enum pattern p)
{
    return p == ONE_FROM_MANY && r->rank != 0 && r->rank != r->nranks - 1;
}

/* How many ranks this rank fetches from. */
static uint64_t nsources(const struct mpi_run *r, enum pattern p)
{
    return p == ALL_TO_ALL ? (uint64_t)r->nranks - 1 : r->rank != 0;
}

/* The j-th of them: in all-to-all the next ranks, so that the ranks do not all start with
 * the same one; in many-to-one rank 0. */
static int source(const struct mpi_run *r, enum pattern p, uint64_t j)
{
    return p == ALL_TO_ALL ? (int)(((uint64_t)r->rank + 1 + j) % (uint64_t)r->nranks) : 0;
}

static ferry_id object_id(const struct mpi_run *r, const struct round_objects *x, int origin,
                          uint64_t index)
{
    uint64_t counter = x->seq << (2 * FIELD_BITS) | (uint64_t)origin << FIELD_BITS | index;
    return ferry_peer_id(r->run_id, counter, pattern_kinds[x->pattern]);
}

/* Writes the first bytes of object (origin, index) to out: origin and index in place of the
 * payload's first STAMP_BYTES (fewer for a smaller object), so that a mixed-up object shows.
 * Returns how many bytes it wrote. */
static size_t stamp(int origin, uint64_t index, uint64_t size, uint8_t *out)
{
    uint64_t v = (uint64_t)origin << 32 | index;
    size_t n = size < STAMP_BYTES ? (size_t)size : STAMP_BYTES;
    memcpy(out, &v, n);
    return n;
}

/* The ids of a round: this rank's own (when it stores) and those it fetches. */
static void plan_round(const struct mpi_run *r, enum pattern p, uint64_t size,
                       struct round_objects *x)
{
    uint64_t k = r->o->count;
    *x = (struct round_objects){.pattern = p, .seq = r->seq, .size = size};
    x->nstored = stores(r, p) ? k : 0;
    x->nfetched = nsources(r, p) * k;
    x->stored = calloc(x->nstored + 1, sizeof(*x->stored));
    x->fetched = calloc(x->nfetched + 1, sizeof(*x->fetched));
    x->statuses = calloc(x->nfetched + 1, sizeof(*x->statuses));
    if (x->stored == NULL || x->fetched == NULL || x->statuses == NULL)
        bench_fail("rank %d: out of memory for %llu ids", r->rank,
                   (unsigned long long)(x->nstored + x->nfetched));
    for (size_t i = 0; i < x->nstored; i++)
        x->stored[i] = object_id(r, x, r->rank, i);
    for (size_t i = 0; i < x->nfetched; i++)
        x->fetched[i] = object_id(r, x, source(r, p, i / k), i % k);
}

static void free_round(struct round_objects *x)
{
    free(x->stored);
    free(x->fetched);
    free(x->statuses);
}

/* Stores this rank's objects: the payload, stamped. */
static void put_own(const struct mpi_run *r, const struct round_objects *x)
{
    for (size_t i = 0; i < x->nstored; i++) {
        uint8_t *buf;
        bench_check_ferry(ferry_create(r->c, &x->stored[i], x->size, NULL, 0, &buf),
                          "rank %d: create of a %llu-byte object", r->rank,
                          (unsigned long long)x->size);
        memcpy(buf, r->payload, x->size);
        stamp(r->rank, i, x->size, buf);
        bench_check_ferry(ferry_seal(r->c, &x->stored[i]), "rank %d: seal of a %llu-byte object",
                          r->rank, (unsigned long long)x->size);
        bench_check_ferry(ferry_release(r->c, &x->stored[i]), "rank %d: release after a seal",
                          r->rank);
    }
}

/* Fails with err, the result of the fetch of fetched[at..at+n), naming the first of those
 * objects whose status is not 0 if there is one. */
static void fail_fetch(const struct mpi_run *r, const struct round_objects *x, size_t at, size_t n,
                       int err)
{
    size_t i = at;
    uint64_t k = r->o->count;
    while (i < at + n && x->statuses[i] == 0)
        i++;
    if (i == at + n)
        bench_check_ferry(err, "rank %d: fetch of %zu object(s) of %llu bytes", r->rank, n,
                          (unsigned long long)x->size);
    bench_check_ferry(
        err, "rank %d: fetch of %zu object(s) of %llu bytes (first failed: object %llu of rank %d)",
        r->rank, n, (unsigned long long)x->size, (unsigned long long)(i % k),
        source(r, x->pattern, i / k));
}

/* Makes every object this rank fetches local, at most MAX_IDS_PER_FETCH per call. */
static void fetch_all(const struct mpi_run *r, struct round_objects *x)
{
    for (size_t at = 0; at < x->nfetched; at += MAX_IDS_PER_FETCH) {
        size_t n = x->nfetched - at < MAX_IDS_PER_FETCH ? x->nfetched - at : MAX_IDS_PER_FETCH;
        int64_t timeout_ms =
            FETCH_TIMEOUT_BASE_MS + (int64_t)(n * x->size / (FETCH_FLOOR_MIBPS << 20) * 1000);
        int err = ferry_fetch(r->c, x->fetched + at, n, timeout_ms, x->statuses + at);
        if (err != 0)
            fail_fetch(r, x, at, n, err);
    }
}

/* Fails unless every fetched object has the bytes its origin stored. */
static void verify_fetched(const struct mpi_run *r, const struct round_objects *x)
{
    uint64_t k = r->o->count;
    for (size_t i = 0; i < x->nfetched; i++) {
        ferry_buffer b;
        uint8_t want[STAMP_BYTES];
        int origin = source(r, x->pattern, i / k);
        size_t n = stamp(origin, i % k, x->size, want);
        bench_check_ferry(ferry_get(r->c, &x->fetched[i], 1, 0, &b),
                          "rank %d: get of a fetched object", r->rank);
        if (b.data_size != x->size || memcmp(b.data, want, n) != 0 ||
            memcmp(b.data + n, r->payload + n, x->size - n) != 0)
            bench_fail("rank %d: object %llu of rank %d arrived with other bytes (%llu bytes, "
                       "%llu stored)",
                       r->rank, (unsigned long long)(i % k), origin,
                       (unsigned long long)b.data_size, (unsigned long long)x->size);
        bench_check_ferry(ferry_release(r->c, &x->fetched[i]), "rank %d: release after a get",
                          r->rank);
    }
}

static void delete_all(const struct mpi_run *r, const ferry_id *ids, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        bench_check_ferry(ferry_delete(r->c, &ids[i]), "rank %d: delete of %s object %zu", r->rank,
                          what, i);
}

static void stats(const struct mpi_run *r, ferry_stats *s)
{
    bench_check_ferry(ferry_stats_get(r->c, s, sizeof(*s)), "rank %d: stats of the ferryd at %s",
                      r->rank, r->socket);
}

#define WHERE_TIMEOUT_MS 15000

/* Waits (bounded) until this rank's node lists nranks - 1 holders of every object it fetches. */
static void wait_holders(const struct mpi_run *r, const struct round_objects *x)
{
    for (size_t i = 0; i < x->nfetched; i++) {
        for (unsigned waited = 0;; waited += BARRIER_POLL_MS) {
            ferry_node_info *nodes;
            size_t n;
            bench_check_ferry(ferry_where(r->c, &x->fetched[i], &nodes, &n), "rank %d: ferry_where",
                              r->rank);
            ferry_free(nodes);
            if (n >= (size_t)r->nranks - 1)
                break;
            if (waited >= WHERE_TIMEOUT_MS)
                bench_fail("rank %d: %zu holders of an object listed after %d ms, %d expected",
                           r->rank, n, WHERE_TIMEOUT_MS, r->nranks - 1);
            bench_sleep_ms(BARRIER_POLL_MS);
        }
    }
}

/* one-from-many, untimed: the holders fetch, then the last rank sees them all listed. */
static void spread(struct mpi_run *r, enum pattern p, struct round_objects *x)
{
    if (p != ONE_FROM_MANY)
        return;
    MPI_Barrier(MPI_COMM_WORLD); /* stored */
    if (holds_first(r, p))
        fetch_all(r, x);
    MPI_Barrier(MPI_COMM_WORLD); /* held */
    if (r->rank == r->nranks - 1)
        wait_holders(r, x);
}

/* One round of pattern p at size: store, barrier, fetch (timed), check, barrier, delete. */
static struct rank_sample run_round(struct mpi_run *r, enum pattern p, uint64_t size)
{
    struct round_objects x;
    ferry_stats before, after;
    plan_round(r, p, size, &x);
    r->seq++;
    put_own(r, &x);
    spread(r, p, &x);
    stats(r, &before);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = bench_now();
    int timed = x.nfetched > 0 && !holds_first(r, p);
    if (timed)
        fetch_all(r, &x);
    double seconds = timed ? bench_now() - start : 0;
    verify_fetched(r, &x);
    quiet_barrier(); /* no object is deleted while another rank may still fetch it */
    stats(r, &after);
    delete_all(r, x.fetched, x.nfetched, "a fetched");
    delete_all(r, x.stored, x.nstored, "its own");
    struct rank_sample s = {
        .seconds = seconds,
        .objects = timed ? x.nfetched : 0,
        .bytes = timed ? x.nfetched * size : 0,
        .transfers_in = after.transfers_in - before.transfers_in,
        .transfers_out = after.transfers_out - before.transfers_out,
        .split_fetches = after.split_fetches - before.split_fetches,
    };
    free_round(&x);
    return s;
}

/* ---- figures (rank 0) ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_aggregate(const void *a, const void *b)
{
    return cmp_double(&((const struct round_result *)a)->aggregate,
                      &((const struct round_result *)b)->aggregate);
}

/* A fetching rank's bandwidth in MiB/s. */
static double rank_mibps(const struct rank_sample *s)
{
    return (double)s->bytes / MIB / s->seconds;
}

/* Fills in q's figures from q->ranks. */
static void summarize(struct round_result *q, int nranks)
{
    double *bw = calloc((size_t)nranks, sizeof(*bw));
    size_t n = 0;
    if (bw == NULL)
        bench_fail("out of memory for %d bandwidths", nranks);
    for (int i = 0; i < nranks; i++) {
        const struct rank_sample *s = &q->ranks[i];
        q->transfers_in += s->transfers_in;
        if (s->objects == 0)
            continue;
        q->objects += s->objects;
        q->bytes += s->bytes;
        q->slowest = s->seconds > q->slowest ? s->seconds : q->slowest;
        bw[n++] = rank_mibps(s);
    }
    qsort(bw, n, sizeof(*bw), cmp_double);
    q->aggregate = (double)q->bytes / MIB / q->slowest;
    q->rank_min = bw[0];
    q->rank_median = n % 2 ? bw[n / 2] : (bw[n / 2 - 1] + bw[n / 2]) / 2;
    q->rank_max = bw[n - 1];
    free(bw);
}

/* One run of pattern p at size; rank 0 receives its figures in *out. */
static void measure(struct mpi_run *r, enum pattern p, uint64_t size, uint64_t round,
                    struct round_result *out)
{
    struct rank_sample mine = run_round(r, p, size);
    struct rank_sample *all = NULL;
    if (r->rank == 0 && (all = calloc((size_t)r->nranks, sizeof(*all))) == NULL)
        bench_fail("out of memory for %d samples", r->nranks);
    MPI_Gather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (r->rank == 0) {
        *out = (struct round_result){.round = round, .ranks = all};
        summarize(out, r->nranks);
    }
    bench_check_interrupt();
}

/* The q-quantile of the sorted aggregates of q[0..n), interpolated. */
static double aggregate_quantile(const struct round_result *q, uint64_t n, double at)
{
    double x = at * (double)(n - 1);
    uint64_t i = (uint64_t)x;
    if (i + 1 >= n)
        return q[n - 1].aggregate;
    return q[i].aggregate + (x - (double)i) * (q[i + 1].aggregate - q[i].aggregate);
}

/* The median of the rounds q[0..n) of one pattern and size by aggregate bandwidth (of an even
 * number, the slower of the middle two), with the spread of all; frees the others. */
static struct round_result median_round(struct round_result *q, uint64_t n)
{
    qsort(q, n, sizeof(*q), cmp_aggregate);
    struct round_result m = q[(n - 1) / 2];
    double iqr = aggregate_quantile(q, n, 0.75) - aggregate_quantile(q, n, 0.25);
    double mid = aggregate_quantile(q, n, 0.5);
    m.spread = mid > 0 ? iqr / mid : 0;
    for (uint64_t i = 0; i < n; i++)
        if (i != (n - 1) / 2)
            free(q[i].ranks);
    return m;
}

/* ---- output (rank 0) ---- */

/* The results of a run, [pattern * nsizes + size]; entries of patterns not run are zero. */
struct mpi_results {
    const struct mpi_run *r;
    struct round_result *q;
};

static const struct round_result *result_at(const struct mpi_results *res, int p, size_t s)
{
    return &res->q[(size_t)p * res->r->o->nsizes + s];
}

static void print_preamble(const struct mpi_run *r)
{
    printf("mpi: %d ranks, on ferryd nodes", r->nranks);
    for (int i = 0; i < r->nranks; i++)
        printf("%s %s", i ? "," : "", r->node_ids[i]);
    printf(".\n%llu interleaved rounds (seed %llu), each running every pattern at every size "
           "once\nin a shuffled order; IQR: the aggregate's interquartile range over the rounds / "
           "its median\n(noisy: above %.0f %%).\n",
           (unsigned long long)r->o->rounds, (unsigned long long)r->o->seed, BENCH_NOISY * 100);
    printf(
        "Every storing rank puts %llu object(s) per run; the median of %llu round(s) by\n"
        "aggregate bandwidth is shown. all-to-all: every rank stores, then fetches every other\n"
        "rank's objects; many-to-one: rank 0 stores, ranks 1..%d fetch its objects. A rank's\n"
        "time runs from a barrier to the end of its own fetches; aggregate = bytes fetched by\n"
        "all ranks / the slowest rank's time; per rank = its bytes / its time, over the ranks\n"
        "that fetch; transfers = objects their ferryd received from peers; MiB = 2^20 bytes.\n\n",
        (unsigned long long)r->o->count, (unsigned long long)r->o->rounds, r->nranks - 1);
}

static void print_row(const char *pattern, uint64_t size, const struct round_result *q)
{
    char label[16];
    bench_size_label(size, label, sizeof(label));
    printf("%-11s %6s %8llu %9llu %10.1f %10.2f %15.1f %5.0f%% %10.1f %10.1f %10.1f%s\n", pattern,
           label, (unsigned long long)q->objects, (unsigned long long)q->transfers_in,
           (double)q->bytes / MIB, q->slowest * 1e3, q->aggregate, q->spread * 100, q->rank_min,
           q->rank_median, q->rank_max, q->spread > BENCH_NOISY ? "  noisy" : "");
}

/* In many-to-one a fetching node may pull an object from another one that fetched it first:
 * how many of the objects rank 0's node sent itself. */
static void print_served(const struct mpi_results *res)
{
    const struct mpi_options *o = res->r->o;
    int last = res->r->nranks - 1;
    char label[16];
    for (size_t s = 0; o->patterns[ONE_FROM_MANY] && s < o->nsizes; s++) {
        const struct round_result *q = result_at(res, ONE_FROM_MANY, s);
        bench_size_label(o->sizes[s], label, sizeof(label));
        printf("\none-from-many %s: rank %d fetched %llu objects held by %d nodes, %llu of them "
               "in ranges from several",
               label, last, (unsigned long long)q->ranks[last].objects, last,
               (unsigned long long)q->ranks[last].split_fetches);
    }
    if (o->patterns[ONE_FROM_MANY])
        printf("\n");
    if (!o->patterns[MANY_TO_ONE])
        return;
    printf("\n");
    for (size_t s = 0; s < o->nsizes; s++) {
        const struct round_result *q = result_at(res, MANY_TO_ONE, s);
        bench_size_label(o->sizes[s], label, sizeof(label));
        printf("many-to-one %s: rank 0's node sent %llu of the %llu transfers\n", label,
               (unsigned long long)q->ranks[0].transfers_out, (unsigned long long)q->transfers_in);
    }
}

static void print_table(const struct mpi_results *res)
{
    const struct mpi_options *o = res->r->o;
    print_preamble(res->r);
    printf("%-11s %6s %8s %9s %10s %10s %15s %6s %32s\n", "", "", "", "", "", "", "aggregate", "",
           "MiB/s of one rank");
    printf("%-11s %6s %8s %9s %10s %10s %15s %6s %10s %10s %10s\n", "pattern", "size", "objects",
           "transfers", "MiB", "slowest ms", "MiB/s", "IQR", "min", "median", "max");
    for (int p = 0; p < N_PATTERNS; p++)
        for (size_t s = 0; o->patterns[p] && s < o->nsizes; s++)
            print_row(pattern_names[p], o->sizes[s], result_at(res, p, s));
    print_served(res);
}

static void print_json_ranks(const struct round_result *q, int nranks)
{
    for (int i = 0; i < nranks; i++) {
        const struct rank_sample *s = &q->ranks[i];
        printf("%s{\"rank\":%d,\"objects\":%llu,\"bytes\":%llu,\"seconds\":%.6f,"
               "\"mib_per_sec\":%.3f,\"transfers_in\":%llu,\"transfers_out\":%llu,"
               "\"split_fetches\":%llu}",
               i ? "," : "", i, (unsigned long long)s->objects, (unsigned long long)s->bytes,
               s->seconds, s->objects ? rank_mibps(s) : 0.0, (unsigned long long)s->transfers_in,
               (unsigned long long)s->transfers_out, (unsigned long long)s->split_fetches);
    }
}

/* One line: {"suite":"mpi","pattern":...,"results":[one per size]}. */
static void print_json_pattern(const struct mpi_results *res, int p)
{
    const struct mpi_run *r = res->r;
    printf("{\"suite\":\"mpi\",\"pattern\":\"%s\",\"ranks\":%d,\"count\":%llu,\"rounds\":%llu,"
           "\"seed\":%llu,\"results\":[",
           pattern_names[p], r->nranks, (unsigned long long)r->o->count,
           (unsigned long long)r->o->rounds, (unsigned long long)r->o->seed);
    for (size_t s = 0; s < r->o->nsizes; s++) {
        const struct round_result *q = result_at(res, p, s);
        printf("%s{\"size\":%llu,\"round\":%llu,\"objects\":%llu,\"bytes\":%llu,"
               "\"transfers_in\":%llu,\"slowest_seconds\":%.6f,\"aggregate_mib_per_sec\":%.3f,"
               "\"iqr_relative\":%.4f,\"noisy\":%s,"
               "\"rank_mib_per_sec\":{\"min\":%.3f,\"median\":%.3f,\"max\":%.3f},\"per_rank\":[",
               s ? "," : "", (unsigned long long)r->o->sizes[s], (unsigned long long)q->round,
               (unsigned long long)q->objects, (unsigned long long)q->bytes,
               (unsigned long long)q->transfers_in, q->slowest, q->aggregate, q->spread,
               q->spread > BENCH_NOISY ? "true" : "false", q->rank_min, q->rank_median,
               q->rank_max);
        print_json_ranks(q, r->nranks);
        printf("]}");
    }
    printf("]}\n");
}

static void output(const struct mpi_results *res)
{
    if (!res->r->o->json)
        print_table(res);
    for (int p = 0; res->r->o->json && p < N_PATTERNS; p++)
        if (res->r->o->patterns[p])
            print_json_pattern(res, p);
    fflush(stdout);
}

static void free_results(struct mpi_results *res)
{
    for (size_t i = 0; res->q != NULL && i < N_PATTERNS * res->r->o->nsizes; i++)
        free(res->q[i].ranks);
    free(res->q);
}

/* ---- the suite ---- */

/* The runs of one round, [pattern * nsizes + size] of the patterns asked for, shuffled. */
static size_t round_order(const struct mpi_options *o, uint64_t *state, size_t *order)
{
    size_t n = 0;
    for (int p = 0; p < N_PATTERNS; p++)
        for (size_t s = 0; o->patterns[p] && s < o->nsizes; s++)
            order[n++] = (size_t)p * o->nsizes + s;
    bench_shuffle(order, n, state); /* the same order on every rank, from the same seed */
    return n;
}

/* Every pattern at every size in interleaved rounds; rank 0 gets the median rounds. */
static void run_all(struct mpi_run *r, struct mpi_results *res)
{
    const struct mpi_options *o = r->o;
    size_t cells = N_PATTERNS * o->nsizes, order[N_PATTERNS * BENCH_MAX_SIZES];
    uint64_t state = o->seed;
    struct round_result *all = NULL;
    res->r = r;
    res->q = NULL;
    if (r->rank == 0) {
        res->q = calloc(cells, sizeof(*res->q));
        all = calloc(cells * o->rounds, sizeof(*all));
        if (res->q == NULL || all == NULL)
            bench_fail("out of memory for the results");
    }
    for (uint64_t k = 0; k < o->rounds; k++) {
        size_t n = round_order(o, &state, order);
        for (size_t j = 0; j < n; j++)
            measure(r, (enum pattern)(order[j] / o->nsizes), o->sizes[order[j] % o->nsizes], k,
                    all != NULL ? &all[order[j] * o->rounds + k] : NULL);
    }
    if (r->rank != 0)
        return;
    for (size_t i = 0; i < cells; i++)
        if (o->patterns[i / o->nsizes])
            res->q[i] = median_round(&all[i * o->rounds], o->rounds);
    free(all);
}

int bench_mpi(int argc, char **argv)
{
    struct mpi_options o;
    struct mpi_run r = {.o = &o};
    struct mpi_results res;
    int status = parse_options(argc, argv, &o);
    if (status >= 0)
        return status;
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r.nranks);
    if (r.nranks < 2 || (unsigned)r.nranks > MAX_FIELD)
        bench_fail("%d rank(s): the mpi suite needs 2 to %u (mpirun -np N)", r.nranks, MAX_FIELD);
    if (o.patterns[ONE_FROM_MANY] && r.nranks < 3)
        bench_fail("one-from-many needs 3 ranks or more (holders between the first and the last)");
    if (r.rank == 0) {
        r.run_id = bench_nonce();
        if (!o.have_seed)
            o.seed = r.run_id;
    }
    MPI_Bcast(&r.run_id, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(&o.seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    r.payload = bench_alloc_faulted(largest_size(&o));
    join(&r);
    run_all(&r, &res);
    if (r.rank == 0)
        output(&res);
    free_results(&res);
    free((void *)r.payload);
    free(r.node_ids);
    MPI_Finalize();
    return 0;
}
