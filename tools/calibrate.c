/* calibrate.c - ferry calibrate: where one-sided reads start to beat messages on this node's
 * fabric. --serve stores probe objects on the holder; --from NODE pulls each size both ways
 * from it, prints the median MiB/s of each and the crossover, and can save or apply it. */
#include "cli.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CAL_MAX_SIZES 32
#define CAL_MAX_REPS 1000
#define CAL_MAX_SIZE ((uint64_t)1 << 30)
/* Probe copies the holder keeps per size: up to CAL_MAX_COPIES, at most CAL_COPY_BYTES of
 * them (but one at least), so that a small arena holds them all; the receiver cycles through
 * them. Both sides compute it from the size alone. */
#define CAL_MAX_COPIES 8
#define CAL_COPY_BYTES ((uint64_t)16 << 20)
/* How long a fetch of a probe may take, or wait for a probe not published yet. */
#define CAL_FETCH_MS 10000
#define CAL_EAGER_ALL (UINT64_MAX - 1)

enum cal_protocol { CAL_EAGER, CAL_RENDEZVOUS, CAL_PROTOCOLS };

/* What calibrate was asked, and what it measured. */
struct calibrate {
    int serve, apply;
    const char *from, *save, *peer_socket;
    uint64_t sizes[CAL_MAX_SIZES]; /* ascending, without repeats */
    size_t nsizes;
    int64_t reps;
    uint64_t original; /* the eager limit before calibrate changed it */
    char provider[32];
    double mibps[CAL_MAX_SIZES][CAL_PROTOCOLS]; /* medians */
};

static volatile sig_atomic_t cal_interrupted;

static void cal_on_signal(int sig)
{
    (void)sig;
    cal_interrupted = 1;
}

/* SIGINT and SIGTERM end the measurement at the next fetch, so that the limit is restored. */
static void cal_catch_signals(void)
{
    struct sigaction sa = {.sa_handler = cal_on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static uint64_t cal_copies(uint64_t size)
{
    uint64_t n = CAL_COPY_BYTES / size;
    return n < 1 ? 1 : n > CAL_MAX_COPIES ? CAL_MAX_COPIES : n;
}

/* The id of copy i of the probe of size bytes: "ferry-calibrate/<size>/<i>" hashed. */
static ferry_id cal_probe_id(uint64_t size, uint64_t i)
{
    char name[64];
    ferry_id id;
    snprintf(name, sizeof(name), "ferry-calibrate/%" PRIu64 "/%" PRIu64, size, i);
    ferry_id_parse(name, &id); /* a name that is not 40 hex digits always hashes */
    return id;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Parses --sizes (comma-separated byte counts) into c->sizes, sorted, without repeats. */
static int cal_parse_sizes(const struct cli *cli, struct calibrate *c, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    int status = STATUS_OK;
    if (!copy)
        return cli_report(cli, FERRY_ENOMEM, "no memory for --sizes");
    c->nsizes = 0;
    for (char *w = strtok_r(copy, ",", &save); w && status == STATUS_OK;
         w = strtok_r(NULL, ",", &save)) {
        if (c->nsizes == CAL_MAX_SIZES)
            status = cli_usage(cli->cmd, "more than %d sizes", CAL_MAX_SIZES);
        else if ((status = cli_parse_size(cli, w, &c->sizes[c->nsizes])) == STATUS_OK &&
                 (c->sizes[c->nsizes] == 0 || c->sizes[c->nsizes] > CAL_MAX_SIZE))
            status = cli_usage(cli->cmd, "size '%s' is not within 1 to 1G", w);
        c->nsizes++;
    }
    free(copy);
    if (status == STATUS_OK && c->nsizes == 0)
        status = cli_usage(cli->cmd, "--sizes lists no size");
    if (status != STATUS_OK)
        return status;
    qsort(c->sizes, c->nsizes, sizeof(c->sizes[0]), cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < c->nsizes; i++)
        if (k == 0 || c->sizes[k - 1] != c->sizes[i])
            c->sizes[k++] = c->sizes[i];
    c->nsizes = k;
    return STATUS_OK;
}

/* Sorts the command line of calibrate into c; every mistake is a usage error. */
static int cal_parse(struct cli *cli, int argc, char **argv, struct calibrate *c)
{
    const char *sizes = CAL_DEFAULT_SIZES, *reps = NULL;
    const struct opt opts[] = {{"--serve", NULL, &c->serve},
                               {"--from", &c->from, NULL},
                               {"--sizes", &sizes, NULL},
                               {"--reps", &reps, NULL},
                               {"--save", &c->save, NULL},
                               {"--apply", NULL, &c->apply},
                               {"--peer-socket", &c->peer_socket, NULL},
                               {NULL, NULL, NULL}};
    struct params p = {.min = 0};
    int status = cli_parse_args(cli->cmd, argc, argv, opts, &p);
    if (status != STATUS_OK)
        return status;
    if (c->serve == (c->from != NULL))
        return cli_usage(cli->cmd, "give either --serve or --from NODE");
    if (c->serve && (reps || c->save || c->apply || c->peer_socket))
        return cli_usage(cli->cmd, "--reps, --save, --apply and --peer-socket go with --from");
    if (c->from && !c->from[0])
        return cli_usage(cli->cmd, "--from needs a node id");
    c->reps = CAL_DEFAULT_REPS;
    if (reps && (status = cli_parse_int(cli, "--reps", reps, 1, &c->reps)) != STATUS_OK)
        return status;
    if (c->reps > CAL_MAX_REPS)
        return cli_usage(cli->cmd, "--reps %" PRId64 " is more than %d", c->reps, CAL_MAX_REPS);
    return cal_parse_sizes(cli, c, sizes);
}

/* An existing probe is kept when it has the size; *kept counts it. */
static int cal_check_probe(const struct cli *cli, ferry_client *fc, const ferry_id *id,
                           uint64_t size, int *kept)
{
    ferry_buffer b;
    int err = ferry_get(fc, id, 1, 0, &b);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    uint64_t got = b.data_size;
    ferry_release(fc, id);
    if (got != size)
        return cli_report(cli, FERRY_EEXIST, "a probe of %" PRIu64 " bytes holds %" PRIu64 " bytes",
                          size, got);
    (*kept)++;
    return STATUS_OK;
}

/* Stores copy i of the probe of size bytes on fc, filled with a pattern in place. */
static int cal_put_probe(const struct cli *cli, ferry_client *fc, uint64_t size, uint64_t i,
                         int *kept)
{
    ferry_id id = cal_probe_id(size, i);
    uint8_t *data;
    int err = ferry_create(fc, &id, size, NULL, 0, &data);
    if (err == FERRY_EEXIST)
        return cal_check_probe(cli, fc, &id, size, kept);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    for (uint64_t k = 0; k < size; k++)
        data[k] = (uint8_t)(k * 31 + i);
    if ((err = ferry_seal(fc, &id)) != FERRY_OK) {
        ferry_abort(fc, &id);
        return cli_fail(cli, err);
    }
    err = ferry_release(fc, &id);
    return err != FERRY_OK ? cli_fail(cli, err) : STATUS_OK;
}

/* The holder's part: every probe of every size on fc, and a line per size on stdout. */
static int cal_serve(const struct cli *cli, ferry_client *fc, const struct calibrate *c,
                     const char *where)
{
    for (size_t s = 0; s < c->nsizes; s++) {
        uint64_t size = c->sizes[s], n = cal_copies(size);
        int kept = 0, status = STATUS_OK;
        for (uint64_t i = 0; i < n && status == STATUS_OK; i++)
            status = cal_put_probe(cli, fc, size, i, &kept);
        if (status != STATUS_OK)
            return status;
        printf("probes on %s: ferry-calibrate/%" PRIu64 "/0..%" PRIu64 " (%" PRIu64 " x %" PRIu64
               " bytes, %d there already)\n",
               where, size, n - 1, n, size, kept);
    }
    return STATUS_OK;
}

/* 1 when the comma-separated list has the word. */
static int list_has(const char *list, const char *word)
{
    size_t len = strlen(word);
    for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        if (strncmp(p, word, len) == 0 && (p[len] == ',' || p[len] == '\0'))
            return 1;
    }
    return 0;
}

/* Failure unless the directory lists NODE, another node, with a fabric, and this node has one. */
static int cal_check_node(struct cli *cli, struct calibrate *c)
{
    ferry_node_info *nodes = NULL;
    size_t n = 0, i = 0;
    int err = ferry_nodes(cli->client, &nodes, &n);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    while (i < n && strcmp(nodes[i].id, c->from) != 0)
        i++;
    int status = STATUS_OK;
    if (i == n)
        status = cli_report(cli, FERRY_ENOENT, "no live node '%s' (see ferry nodes)", c->from);
    else if (nodes[i].self)
        status = cli_usage(cli->cmd, "--from %s names this node", c->from);
    else if (!list_has(nodes[i].transports, "fabric"))
        status =
            cli_report(cli, FERRY_ENOSYS,
                       "%s is reached over tcp (it offers %s, no fabric): nothing to calibrate",
                       c->from, nodes[i].transports);
    ferry_free(nodes);
    if (status == STATUS_OK && (err = ferry_fabric_info(cli->client, c->provider)) != FERRY_OK)
        return cli_fail(cli, err);
    if (status == STATUS_OK && !c->provider[0])
        status =
            cli_report(cli, FERRY_ENOSYS,
                       "this node has no fabric (--transport tcp, or none opened): %s is reached "
                       "over tcp, nothing to calibrate",
                       c->from);
    return status;
}

/* After a first fetch from NODE: failure unless this node pulls from it over the fabric. */
static int cal_check_peer(const struct cli *cli, const struct calibrate *c)
{
    ferry_peer *peers = NULL;
    size_t n = 0, i = 0;
    int err = ferry_peers(cli->client, &peers, &n);
    while (err == FERRY_OK && i < n && strcmp(peers[i].node, c->from) != 0)
        i++;
    int status = STATUS_OK;
    if (err != FERRY_OK)
        status = cli_fail(cli, err);
    else if (i == n)
        status =
            cli_report(cli, FERRY_ETRANSFER,
                       "the probes came from another node than %s (no connection to it)", c->from);
    else if (strcmp(peers[i].transport, "fabric") != 0)
        status = cli_report(cli, FERRY_ENOSYS, "%s is reached over %s (%s): nothing to calibrate",
                            c->from, peers[i].transport, peers[i].why);
    ferry_free(peers);
    return status;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Deletes the local copy of a probe; one that is not there is fine. */
static int cal_drop(const struct cli *cli, const ferry_id *id)
{
    int err = ferry_delete(cli->client, id);
    return err != FERRY_OK && err != FERRY_ENOENT ? cli_fail(cli, err) : STATUS_OK;
}

/* Drops every local copy of the probes, so that each fetch pulls its object. */
static int cal_drop_all(const struct cli *cli, const struct calibrate *c)
{
    int status = STATUS_OK;
    for (size_t s = 0; s < c->nsizes && status == STATUS_OK; s++)
        for (uint64_t i = 0; i < cal_copies(c->sizes[s]) && status == STATUS_OK; i++) {
            ferry_id id = cal_probe_id(c->sizes[s], i);
            status = cal_drop(cli, &id);
        }
    return status;
}

/* Fails unless the rendezvous counters moved as protocol p must: by the size for a one-sided
 * read, not at all for messages. */
static int cal_check_path(const struct cli *cli, int p, uint64_t size, uint64_t before,
                          uint64_t after)
{
    uint64_t read = after - before;
    if (p == CAL_RENDEZVOUS ? read == size : read == 0)
        return STATUS_OK;
    return cli_report(cli, FERRY_EPROTO,
                      "a %" PRIu64 "-byte probe pulled %s read %" PRIu64
                      " bytes one-sided: it did not take that path",
                      size, p == CAL_RENDEZVOUS ? "by rendezvous" : "as messages", read);
}

/* The bytes this node's fabric has read one-sided so far. */
static int rdv_bytes(ferry_client *fc, uint64_t *out)
{
    ferry_stat *all = NULL;
    size_t n;
    int err = ferry_stats_list(fc, &all, &n);
    if (err == FERRY_OK)
        *out = ferry_stat_value(all, n, "fabric_rdv_bytes");
    ferry_free(all);
    return err;
}

/* Fetches copy i of the probe of size bytes by protocol p, checks its path and size, drops
 * it again; *seconds receives the fetch's time. */
static int cal_fetch(const struct cli *cli, int p, uint64_t size, uint64_t i, double *seconds)
{
    ferry_client *fc = cli->client;
    ferry_id id = cal_probe_id(size, i);
    uint64_t before, after;
    ferry_buffer b;
    int st = 1;
    int err = ferry_set_eager_max(fc, p == CAL_EAGER ? CAL_EAGER_ALL : 0);
    if (err == FERRY_OK)
        err = rdv_bytes(fc, &before);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    double t0 = now_seconds();
    err = ferry_fetch(fc, &id, 1, CAL_FETCH_MS, &st);
    *seconds = now_seconds() - t0;
    if (err != FERRY_OK)
        return cli_report(cli, err,
                          "probe ferry-calibrate/%" PRIu64 "/%" PRIu64 ": %s (is ferry "
                          "calibrate --serve with these sizes done on the node?)",
                          size, i, ferry_errmsg());
    if ((err = rdv_bytes(fc, &after)) != FERRY_OK || (err = ferry_get(fc, &id, 1, 0, &b)))
        return cli_fail(cli, err);
    uint64_t got = b.data_size;
    ferry_release(fc, &id);
    int status = cal_check_path(cli, p, size, before, after);
    if (status == STATUS_OK && got != size)
        status =
            cli_report(cli, FERRY_EPROTO, "probe of %" PRIu64 " bytes holds %" PRIu64, size, got);
    return status == STATUS_OK ? cal_drop(cli, &id) : status;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One untimed fetch per protocol, then reps timed ones, the protocols taking turns. */
static int cal_measure_size(const struct cli *cli, struct calibrate *c, size_t s, double *samples)
{
    uint64_t size = c->sizes[s], copies = cal_copies(size);
    double t;
    for (int64_t r = -1; r < c->reps; r++) {
        for (int p = 0; p < CAL_PROTOCOLS; p++) {
            if (cal_interrupted)
                return cli_report(cli, FERRY_ESYS, "interrupted");
            int status = cal_fetch(cli, p, size, (uint64_t)(r + 1) % copies, &t);
            if (status != STATUS_OK)
                return status;
            if (r >= 0)
                samples[p * c->reps + r] = (double)size / (t > 0 ? t : 1e-9) / (1024.0 * 1024.0);
        }
    }
    for (int p = 0; p < CAL_PROTOCOLS; p++)
        c->mibps[s][p] = median(samples + p * c->reps, (size_t)c->reps);
    return STATUS_OK;
}

/* The first size from which rendezvous is at least as fast as eager at that size and every
 * larger one: its index, or nsizes when eager wins at the largest. */
static size_t cal_crossover(const struct calibrate *c)
{
    size_t k = c->nsizes;
    while (k > 0 && c->mibps[k - 1][CAL_RENDEZVOUS] >= c->mibps[k - 1][CAL_EAGER])
        k--;
    return k;
}

/* The shortest exact form of a size: "4K", "1M", "1000". */
static void size_label(uint64_t size, char buf[24])
{
    static const char units[] = "GMK";
    for (int i = 0; i < 3; i++) {
        int shift = 30 - 10 * i;
        if (size >= (uint64_t)1 << shift && size % ((uint64_t)1 << shift) == 0) {
            snprintf(buf, 24, "%" PRIu64 "%c", size >> shift, units[i]);
            return;
        }
    }
    snprintf(buf, 24, "%" PRIu64, size);
}

/* Decimals that keep three significant digits of a rate below 100 MiB/s. */
static int cal_digits(double mibps)
{
    return mibps < 1 ? 3 : mibps < 10 ? 2 : 1;
}

static void cal_print_table(const struct calibrate *c)
{
    char label[24];
    printf("%8s %13s %17s  %s\n", "size", "eager MiB/s", "rendezvous MiB/s", "winner");
    for (size_t s = 0; s < c->nsizes; s++) {
        const double *m = c->mibps[s];
        size_label(c->sizes[s], label);
        printf("%8s %13.*f %17.*f  %s\n", label, cal_digits(m[CAL_EAGER]), m[CAL_EAGER],
               cal_digits(m[CAL_RENDEZVOUS]), m[CAL_RENDEZVOUS],
               m[CAL_RENDEZVOUS] >= m[CAL_EAGER] ? "rendezvous" : "eager");
    }
}

/* The eager limit the measurements call for (the crossover size), printed with why. */
static uint64_t cal_result(const struct calibrate *c)
{
    size_t k = cal_crossover(c);
    char label[24];
    if (k < c->nsizes) {
        size_label(c->sizes[k], label);
        printf("crossover: %s (%" PRIu64 " bytes): rendezvous at least as fast from there up\n",
               label, c->sizes[k]);
        return c->sizes[k];
    }
    size_label(c->sizes[c->nsizes - 1], label);
    printf("crossover: none up to %s (eager faster there): the limit is the largest size "
           "measured, %" PRIu64 " bytes\n",
           label, c->sizes[c->nsizes - 1]);
    return c->sizes[c->nsizes - 1];
}

static int cal_save(const struct cli *cli, const char *path, uint64_t limit)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return cli_fail_io(cli, "open", path);
    int bad = fprintf(f, "%" PRIu64 "\n", limit) < 0;
    if (fclose(f) != 0 || bad)
        return cli_fail_io(cli, "write", path);
    printf("saved %" PRIu64 " to %s\n", limit, path);
    return STATUS_OK;
}

/* Measures every size with the limit changed, then restores it (unless --apply: the crossover)
 * whatever happened; --save afterwards. */
static int cal_run(struct cli *cli, struct calibrate *c)
{
    double *samples = calloc((size_t)c->reps * CAL_PROTOCOLS, sizeof(*samples));
    int status = samples ? STATUS_OK : cli_report(cli, FERRY_ENOMEM, "no memory for the samples");
    uint64_t limit = 0;
    if (status == STATUS_OK)
        status = cal_fetch(cli, CAL_EAGER, c->sizes[0], 0, &(double){0}); /* connects */
    if (status == STATUS_OK)
        status = cal_check_peer(cli, c);
    if (status == STATUS_OK)
        printf("calibrating the fabric (%s) from %s: %" PRId64 " fetches per size and protocol, "
               "median MiB/s\n",
               c->provider, c->from, c->reps);
    for (size_t s = 0; s < c->nsizes && status == STATUS_OK; s++)
        status = cal_measure_size(cli, c, s, samples);
    free(samples);
    if (status == STATUS_OK) {
        cal_print_table(c);
        limit = cal_result(c);
    }
    int apply = status == STATUS_OK && c->apply;
    int err = ferry_set_eager_max(cli->client, apply ? limit : c->original);
    if (err != FERRY_OK)
        return status == STATUS_OK ? cli_fail(cli, err) : status;
    if (status != STATUS_OK)
        return status;
    printf("eager limit: %" PRIu64 " (%s)\n", apply ? limit : c->original,
           apply ? "applied" : "restored");
    return c->save ? cal_save(cli, c->save, limit) : STATUS_OK;
}

/* --peer-socket: the holder's part on the daemon there, before measuring. */
static int cal_serve_peer(const struct cli *cli, const struct calibrate *c)
{
    ferry_client *peer;
    int err = ferry_connect(c->peer_socket, &peer);
    if (err != FERRY_OK) {
        int status = cli_fail(cli, err);
        return err == FERRY_ECONN ? STATUS_UNREACHABLE : status;
    }
    int status = cal_serve(cli, peer, c, c->from);
    ferry_disconnect(peer);
    return status;
}

/* The receiver's part: checks, probes through --peer-socket, local copies dropped, then the
 * measurements. */
static int cal_from(struct cli *cli, struct calibrate *c)
{
    ferry_stats st;
    int status = cal_check_node(cli, c);
    if (status == STATUS_OK && c->peer_socket)
        status = cal_serve_peer(cli, c);
    if (status == STATUS_OK)
        status = cal_drop_all(cli, c);
    if (status != STATUS_OK)
        return status;
    int err = ferry_stats_get(cli->client, &st, sizeof(st));
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    c->original = st.eager_max;
    cal_catch_signals();
    status = cal_run(cli, c);
    int drop = cal_drop_all(cli, c);
    return status != STATUS_OK ? status : drop;
}

/* calibrate --serve [--sizes LIST] | --from NODE [--sizes LIST] [--reps N] [--save FILE]
 * [--apply] [--peer-socket PATH]: measures pulls from NODE as messages (eager) and by one-sided
 * reads (rendezvous) at each size, and finds the size from which reads are at least as fast. */
int cmd_calibrate(struct cli *cli, int argc, char **argv)
{
    struct calibrate c = {.serve = 0};
    int status = cal_parse(cli, argc, argv, &c);
    if (status == STATUS_OK)
        status = cli_open(cli, NULL, NULL);
    if (status != STATUS_OK)
        return status;
    return c.serve ? cal_serve(cli, cli->client, &c, "this node") : cal_from(cli, &c);
}
