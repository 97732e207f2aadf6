/*
 * bench.h - the parts of ferry-bench that every suite shares: failure and cleanup, child
 * processes, options, the one timing loop, result output, and the peers measured against (a
 * ferryd, a cluster of them, a redis-server, raw sockets). A suite (local.c, remote.c) picks
 * sizes and operations and calls these.
 */
#ifndef FERRY_BENCH_H
#define FERRY_BENCH_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "ferry.h"

#define BENCH_MAX_SIZES 16
#define BENCH_MAX_ROUNDS 99
#define BENCH_MAX_REPEAT 20
#define BENCH_SIZE_LIMIT (512ull << 20) /* redis's default proto-max-bulk-len */

/* ---- failure and cleanup (util.c) ---- */

/* Runs fn(arg) when ferry-bench exits, normally or through bench_fail(), newest first: a
 * resource registered after another one that it depends on is released before it. fn must
 * not call bench_fail(). */
void bench_on_exit(void (*fn)(void *), void *arg);

/* free(ptr) at exit: for what lives as long as ferry-bench. */
void bench_free_at_exit(void *ptr);

/* Prints "ferry-bench: <message>" and exits with status 1 after the exit handlers ran. */
_Noreturn void bench_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* For err != 0: bench_fail("<what>: ferry_strerror(err): ferry_errmsg()"). */
void bench_check_ferry(int err, const char *what_fmt, ...) __attribute__((format(printf, 2, 3)));

/* Makes SIGINT and SIGTERM request a stop (seen by bench_check_interrupt) and ignores
 * SIGPIPE, so that a dead peer shows as a failed call and cleanup still runs. */
void bench_install_signals(void);

/* bench_fail("interrupted") once a stop was requested. */
void bench_check_interrupt(void);

/* Seconds on CLOCK_MONOTONIC. */
double bench_now(void);

/* Sleeps ms milliseconds. */
void bench_sleep_ms(unsigned ms);

/* Parses "1K,64K,1M" (suffixes K, M, G are powers of 1024; plain numbers are bytes) into at
 * most max sizes, each in 1..limit; bench_fail() on anything else. Returns the count. */
size_t bench_parse_sizes(const char *list, uint64_t *sizes, size_t max, uint64_t limit);

/* Writes the shortest exact label of a size ("64K", "1M", "1000") to buf. */
void bench_size_label(uint64_t size, char *buf, size_t len);

/* A number that differs between runs (and processes), for object ids and keys that must
 * not meet those of another run on a shared daemon. */
uint64_t bench_nonce(void);

/* Fills a fresh malloc'ed buffer of size bytes with a pattern, so that every page is faulted
 * in before any timing. */
uint8_t *bench_alloc_faulted(uint64_t size);

/* A TCP socket bound to 127.0.0.1 at a port of the kernel's choice, which *port receives. */
int bench_loopback_socket(int *port);

/* Fills ports with n distinct TCP ports of 127.0.0.1 that were free a moment ago, for the
 * daemons the bench starts: outside the ephemeral range, where no connect() takes them before
 * they are bound (free_port.h). */
void bench_free_ports(int *ports, size_t n);

/* A node's counters at one moment: the daemon's own (st) and every one, the transports'
 * included, by name (all[0..n), a copy: taking counters allocates nothing that outlives the
 * call, however often a suite takes them). */
#define BENCH_MAX_COUNTERS 512
struct bench_counters {
    ferry_stats st;
    ferry_stat all[BENCH_MAX_COUNTERS];
    size_t n;
};

/* Reads c's counters (who names it in a failure). */
void bench_counters_get(ferry_client *c, const char *who, struct bench_counters *out);
/* The counter called name; 0 when the node has none of that name. */
uint64_t bench_counter(const struct bench_counters *s, const char *name);

/* ---- child processes and the scratch directory (proc.c) ---- */

/* A process started by ferry-bench, with its output in a log file. */
struct bench_proc {
    pid_t pid;
    const char *name;
    char log_path[256];
};

/* 1 when the process's log (so far) contains needle. */
int bench_proc_log_has(const struct bench_proc *p, const char *needle);

/* Creates a private scratch directory (removed at exit) and returns its path. */
const char *bench_tmpdir(void);

/* The absolute path of an executable found in $PATH, in a static buffer, or NULL. */
const char *bench_which(const char *name);

/* Starts argv (argv[0] a path, or a name looked up in $PATH) with stdout and stderr in
 * <tmpdir>/<name>.log. The child gets SIGTERM if ferry-bench dies, and bench_proc_stop() runs
 * at exit. name must outlive the process (a string literal). */
struct bench_proc *bench_proc_start(const char *name, char *const argv[]);

/* 1 when the process has ended (it is reaped and its log shown on stderr), else 0. */
int bench_proc_ended(struct bench_proc *p);

/* The minor page faults the running process has taken so far (0 once it has ended). */
uint64_t bench_proc_minor_faults(const struct bench_proc *p);

/* Copies the process's log to stderr. */
void bench_proc_show_log(const struct bench_proc *p);

/* SIGTERM, up to 5 s for it to end, then SIGKILL. Reports an earlier, unexpected end with
 * the process's log. Idempotent. */
void bench_proc_stop(struct bench_proc *p);

/* ---- options (options.c) ---- */

/* The options every suite has: --sizes, --seconds, --rounds, --repeat, --seed, --json, --plot
 * DIR, --help. */
struct bench_options {
    uint64_t sizes[BENCH_MAX_SIZES]; /* ascending, without repeats */
    size_t nsizes;
    double seconds;  /* one slice: a system's operation at a size within a round */
    unsigned rounds; /* interleaved rounds per comparison (default 5) */
    unsigned repeat; /* whole comparisons (default 1) */
    uint64_t seed;   /* of the rounds' shuffled orders; the run's own unless --seed */
    int json;
    const char *plot_dir;
};

/* What a suite adds: its default sizes, its own long options (terminated by a zero entry;
 * their val must not be one of 'z', 't', 'j', 'p', 'h' or above 1000) with a handler that stores
 * them or bench_fail()s, and its usage text: synopsis, then the shared options, then help. */
struct bench_suite_options {
    const char *name;
    const char *default_sizes;
    const struct option *longopts;
    void (*handle)(void *ctx, int ch, const char *arg);
    void *ctx;
    const char *synopsis;
    const char *help; /* the suite's own options */
};

/* Returns -1 when the options are valid (o filled in), else the exit status (0 for --help). */
int bench_parse_options(int argc, char **argv, const struct bench_suite_options *s,
                        struct bench_options *o);

/* A decimal integer in min..max for option opt, else bench_fail(). */
uint64_t bench_parse_count(const char *opt, const char *s, uint64_t min, uint64_t max);

/* Splits the comma-separated list of option opt into at most max non-empty items (copies,
 * never freed), else bench_fail(). Returns the count. */
size_t bench_split_list(const char *opt, const char *list, const char **items, size_t max);

/* The set of names[i] (i < n) that the comma-separated list of option opt names, as bits
 * 1 << i; bench_fail() on an unknown or missing name. */
unsigned bench_parse_choices(const char *opt, const char *list, const char *const *names, size_t n);

/* ---- the timing loop (measure.c) ---- */

/* One operation of one system, measured at a size. ctx is the system's state. The hooks
 * other than run are untimed and may be NULL. iter counts from 0 over the warm-up and the
 * measured iterations of one size. */
struct bench_op {
    const char *system;
    const char *op;
    void (*setup)(void *ctx, uint64_t size);                /* once, before the warm-up */
    void (*run)(void *ctx, uint64_t size, uint64_t iter);   /* the timed operation */
    void (*after)(void *ctx, uint64_t size, uint64_t iter); /* after every run */
    void (*teardown)(void *ctx, uint64_t size);             /* once, at the end */
    void *ctx;
    /* Objects one run handles (NULL: 1): ops/s and MiB/s count objects, latencies runs. */
    uint64_t (*objects)(void *ctx, uint64_t size);
    void (*begin)(void *ctx, uint64_t size); /* after the warm-up, before the timed runs */
};

/* How long one measurement lasts: at least min_iters and until seconds have passed (the
 * untimed hooks count), but never more than max_iters. The warm-up before it makes at least
 * min_warmup runs (and at least one). */
struct bench_limits {
    double seconds;
    uint64_t min_iters;
    uint64_t max_iters;
    uint64_t min_warmup;
};

/* Rates are over the summed time of the timed runs only; MiB are 2^20 bytes. A figure of
 * interleaved rounds (bench_measure_rounds()) is the median over its rounds, with the
 * interquartile range of the rounds' ops/s relative to their median as spread; noisy when
 * that is above BENCH_NOISY. */
#define BENCH_NOISY 0.20
struct bench_result {
    const char *system;
    const char *op;
    uint64_t size;
    uint64_t iterations; /* over all rounds */
    double ops_per_sec;
    double p50_us;
    double p99_us;
    double mib_per_sec;
    unsigned rounds;
    double spread;
    int noisy;
};

/* Warms up (about a tenth of the time, at least min_warmup runs), then times each run on its
 * own with CLOCK_MONOTONIC. */
struct bench_result bench_measure(const struct bench_op *op, uint64_t size,
                                  const struct bench_limits *lim);

/* The figures of an interleaved measurement: op i at size s is summary[i * nsizes + s] (the
 * medians), and round k's own is rounds[k * n + i * nsizes + s]. */
struct bench_set {
    struct bench_result *summary;
    struct bench_result *rounds;
    size_t n; /* nops * nsizes */
    unsigned nrounds;
};

/* Every op at every size, in o->rounds rounds: each round measures a slice of every op at
 * every size (lim->seconds each) in an order shuffled from o->seed, comparison (0 to
 * o->repeat - 1) and the round, so that a burst of load on the machine falls on one slice of
 * each system, never on all of one. The arrays of out are allocated here and freed at exit. */
void bench_measure_rounds(const struct bench_op *const *ops, size_t nops,
                          const struct bench_options *o, const struct bench_limits *lim,
                          unsigned comparison, struct bench_set *out);

/* Shuffles order[0..n) (Fisher-Yates) with splitmix64 from *state: the same state gives the
 * same order, in every process. */
void bench_shuffle(size_t *order, size_t n, uint64_t *state);

/* The summary of one set for (system, op, size), or NULL when it was not measured. */
const struct bench_result *bench_set_find(const struct bench_set *set, const char *system,
                                          const char *op, uint64_t size);

/* Appends the k ops of list to ops[n..]; returns the new count. */
size_t bench_append_ops(const struct bench_op **ops, size_t n, const struct bench_op *list,
                        size_t k);

/* The op named op in list, or bench_fail(). */
const struct bench_op *bench_pick_op(const struct bench_op *list, size_t k, const char *op);

/* ---- output (report.c) ---- */

/* BENCH_MEDIAN_MIB_PER_SEC: size / p50, the median run's rate (robust to a slow run among
 * few); for one object per run. */
enum bench_metric { BENCH_OPS_PER_SEC, BENCH_P50_US, BENCH_MIB_PER_SEC, BENCH_MEDIAN_MIB_PER_SEC };

/* value = numerator / denominator of two measured figures (or a count, see remote.c); met
 * when value is on the right side of target (at_most: value <= target, else value >= target).
 * Over rounds, value is the median of the ratios taken within each round, lo and hi their
 * range. measured is 0 when a figure was not taken in this run (its size was not asked
 * for): value and met are then meaningless. */
struct bench_ratio {
    const char *name;
    const char *description;
    int measured;
    double value;
    double target;
    int at_most;
    int met;
    double lo, hi;
    unsigned rounds;   /* 0: a single figure (a count), no range */
    const char *limit; /* what bounds it on a machine where it is missed (printed then), or NULL */
};

/* A target: num / den of one metric, both from one run. */
struct bench_ratio_def {
    const char *name, *description;
    const char *num_system, *num_op;
    uint64_t num_size;
    const char *den_system, *den_op;
    uint64_t den_size;
    enum bench_metric metric;
    double target;
    int at_most;
    const char *limit; /* see struct bench_ratio */
};

/* The result for (system, op, size), or NULL when it was not measured. */
const struct bench_result *bench_find(const struct bench_result *r, size_t n, const char *system,
                                      const char *op, uint64_t size);

double bench_metric(const struct bench_result *r, enum bench_metric m);

/* A ratio computed from the results r[0..n) of one round; 0 when not measured there. */
typedef double (*bench_round_value)(const struct bench_result *r, size_t n, const void *arg);

/* q's value, lo, hi, rounds, measured and met from value() in every round of set (q's name,
 * description, target and at_most set by the caller). Measured only when every round gave a
 * value. */
void bench_ratio_over_rounds(struct bench_ratio *q, const struct bench_set *set,
                             bench_round_value value, const void *arg);

/* d evaluated in every round of set. */
struct bench_ratio bench_ratio_of(const struct bench_ratio_def *d, const struct bench_set *set);

/* Sets met from value, target and at_most. */
void bench_ratio_judge(struct bench_ratio *q);

void bench_print_table(FILE *f, const struct bench_result *r, size_t n);
void bench_print_ratios(FILE *f, const struct bench_ratio *q, size_t n);

/* bench_fail() unless gnuplot is on $PATH: checked before a run, not after it. */
void bench_require_gnuplot(void);

/* Writes dir/<suite>-<system>-<op>.dat for every series, dir/<suite>.gp, and with gnuplot
 * dir/<suite>-throughput.png and dir/<suite>-latency.png (log-log against size) of the series
 * for which charted is true (charted NULL: all). */
void bench_plot(const char *dir, const char *suite, const struct bench_result *r, size_t n,
                int (*charted)(const struct bench_result *r));

/* One line of a chart of bench_plot_lines(): the series (system, op) under a title. */
struct bench_series {
    const char *system, *op, *title;
};

/* After bench_plot() of the same results: dir/<name>.gp and, with gnuplot, dir/<name>.png,
 * the median MiB/s (size / p50) of each series against size, log-log. Series that were not
 * measured are left out. */
void bench_plot_lines(const char *dir, const char *suite, const char *name, const char *title,
                      const struct bench_result *r, size_t n, const struct bench_series *s,
                      size_t ns);

/* A suite's output: preamble (may be NULL), the table, notes (may be NULL) and the ratios, on
 * stdout, or with --json on stderr and the JSON document on stdout; then the charts when
 * --plot was given. With --repeat, the report is of the last comparison, and all_ratios
 * (repeat x nratios, the last comparison's at the end) shows how steady each ratio was. */
struct bench_report {
    const char *suite;
    const struct bench_options *opts;
    const char *preamble;
    const char *notes;
    const struct bench_result *results;
    size_t nresults;
    const struct bench_ratio *ratios;
    size_t nratios;
    const struct bench_ratio *all_ratios;         /* NULL: ratios only */
    int (*charted)(const struct bench_result *r); /* for bench_plot(); NULL: every series */
};

void bench_report(const struct bench_report *rep);

/* ---- peers (ferry_peer.c, fetch_peer.c, redis_peer.c, stream_peer.c) ---- */

/* Connects to the ferryd at socket_path, or when that is NULL starts
 * <dir of this executable>/ferryd --socket <scratch dir>/<name>.sock followed by daemon_args
 * (NULL-terminated, e.g. {"--memory", "2G", NULL}), logged as <name>. The returned handle is
 * disconnected, and the daemon stopped, at exit. *daemon (when daemon is not NULL) receives
 * the started process, NULL for a running daemon. */
ferry_client *ferry_peer_start(const char *socket_path, const char *name,
                               const char *const *daemon_args, struct bench_proc **daemon);

/* The ids of ferry-bench's objects: <nonce, counter, kind>. */
ferry_id ferry_peer_id(uint64_t nonce, uint64_t counter, char kind);

/* A burst of FERRY_PEER_BURST puts without a message of size bytes from payload (ids <nonce,
 * iter * FERRY_PEER_BURST + k, kind>), then the flush that waits until the daemon stored them;
 * and the deletes of a burst's objects. */
#define FERRY_PEER_BURST 64u
void ferry_peer_burst(ferry_client *c, const uint8_t *payload, uint64_t nonce, char kind,
                      uint64_t size, uint64_t iter);
void ferry_peer_burst_delete(ferry_client *c, uint64_t nonce, char kind, uint64_t size,
                             uint64_t iter);
/* FERRY_PEER_BURST: what a burst's run counts as objects (struct bench_op's objects). */
uint64_t ferry_peer_burst_objects(void *ctx, uint64_t size);

/* The ferry operations put, put_nowait, nowait+flush (a burst), get and get+read on c; puts
 * store from payload, which holds at least the largest size measured. One set per process: a
 * second call re-targets it. Returns the count. */
size_t ferry_peer_ops(ferry_client *c, const uint8_t *payload, const struct bench_op **ops);

/* Two ferryd nodes of one cluster measured as one system: objects put on a are fetched to b.
 * cluster_peer_start() fills it in. */
/* The most holders an object of fetch-holders has (ferryd splits across at most 4). */
#define FETCH_PEER_MAX_HOLDERS 4

struct fetch_pair {
    const char *system;   /* "ferry-tcp", "ferry-fabric:<provider>" */
    const char *provider; /* the fabric provider, NULL for the tcp transport */
    char a_id[64], b_id[64];
    char a_proc[64], b_proc[64]; /* the processes' names (their logs') */
    ferry_client *a, *b;
    struct bench_proc *pa, *pb;
    uint64_t timed_faults; /* b's minor page faults in the timed runs of its fetches */
    /* More holders (cluster_peer_add_holders): they fetch from a what fetch-holders moves. */
    ferry_client *h[FETCH_PEER_MAX_HOLDERS - 1];
    struct bench_proc *ph[FETCH_PEER_MAX_HOLDERS - 1];
    char h_id[FETCH_PEER_MAX_HOLDERS - 1][64], h_proc[FETCH_PEER_MAX_HOLDERS - 1][64];
    size_t nh;
};

/* Starts the nodes of p (its system and provider set) as processes <tag>-a and <tag>-b with
 * node ids <id_prefix>-a and -b, --memory memory, the directory redis://127.0.0.1:redis_port/db
 * (a database of their own), --transport tcp or --transport fabric --fabric-provider, and
 * extra (NULL-terminated, may be NULL); returns when b's directory lists both. */
void cluster_peer_start(struct fetch_pair *p, const char *tag, const char *id_prefix,
                        const char *memory, int redis_port, int db, const char *const *extra);

/* Starts n more nodes of p's cluster (<tag>-h1..., node ids <id_prefix>-h1...), like
 * cluster_peer_start; returns when b's directory lists them all. */
void cluster_peer_add_holders(struct fetch_pair *p, size_t n, const char *tag,
                              const char *id_prefix, const char *memory, int redis_port, int db,
                              const char *const *extra);

/* Fails unless b reaches a over p's transport (and provider): call after a first fetch. */
void cluster_peer_check_transport(const struct fetch_pair *p);

/* The operations of a pair: objects put on a (untimed) and pulled to b with ferry_fetch
 * (timed), then deleted on b (untimed) so that the next run transfers them again; the ids stay
 * the same, so b's directory cache is warm. fetch moves one object per run, fetch-batch
 * min(batch, 512 MiB / size) in one call (batch <= FETCH_PEER_MAX_BATCH). The first run at
 * each size checks the bytes b received against payload. */
#define FETCH_PEER_MAX_BATCH 65536

size_t fetch_peer_ops(struct fetch_pair *p, uint64_t batch, const uint8_t *payload,
                      const struct bench_op **ops);

/* fetch-holders: one object per run, like fetch, held by a and p's other holders (each
 * fetched it from a before the timed runs): b takes it in ranges from all of them when its
 * --split-min allows. */
const struct bench_op *fetch_peer_holders_op(struct fetch_pair *p, const uint8_t *payload);

/* Objects in one fetch-batch run at size. */
uint64_t fetch_peer_batch(uint64_t batch, uint64_t size);

/* The fabric's protocols, each as op fetch-<name> of a pair on the fabric: one object per
 * run, like fetch, with b's eager limit (the receiver's counts) set before the warm-up: eager
 * UINT64_MAX - 1 (all as messages), rendezvous 0 (all by one-sided reads), hybrid the given
 * limit (FERRY_EAGER_AUTO: the provider's default). After the timed runs of each size the
 * nodes' counters must show that path, else bench_fail(). */
enum fetch_protocol { FETCH_EAGER, FETCH_RENDEZVOUS, FETCH_HYBRID, FETCH_PROTOCOLS };
extern const char *const fetch_protocol_names[FETCH_PROTOCOLS];
extern const char *const fetch_protocol_ops[FETCH_PROTOCOLS]; /* "fetch-eager", ... */

/* What the counters showed of an operation's timed runs, over all sizes. */
struct fetch_path {
    uint64_t fetches;     /* timed runs */
    uint64_t eager_bytes; /* sent as messages (a's count) */
    uint64_t rdv_reads;   /* one-sided reads (b's count) */
    uint64_t rdv_bytes;
};

/* The ops fetch-<protocol> for each bit 1 << protocol of mask, in enum order. */
size_t fetch_peer_protocol_ops(struct fetch_pair *p, unsigned mask, uint64_t hybrid_max,
                               const uint8_t *payload, const struct bench_op **ops);

/* The path of an op of fetch_peer_protocol_ops(), NULL for any other op. */
const struct fetch_path *fetch_peer_path(const struct bench_op *op);

/* memcpy between two buffers faulted in beforehand (system memcpy, op copy): the copy bound;
 * and process_vm_readv from a child process (system cma, op readv): what shm copies with.
 * src holds at least max_size bytes. */
size_t copy_peer_ops(const uint8_t *src, uint64_t max_size, const struct bench_op **ops);

/* Connects to the redis-server on 127.0.0.1:port, or when port is 0 starts one on a free
 * port; stopped at exit. Returns the redis context (a redisContext *). */
void *redis_peer_start(int port);

/* Starts a redis-server replicating the one behind master (a context of redis_peer_start());
 * returns once the master counts it online. Stopped at exit. */
void redis_peer_start_replica(void *master);

/* The TCP port of the redis-server behind a context of redis_peer_start(). */
int redis_peer_port(void *redis);

/* The redis operations set and get as system name system, like ferry_peer_ops(). */
size_t redis_peer_ops(void *redis, const char *system, const uint8_t *payload,
                      const struct bench_op **ops);

/* stream_peer.c: SIZE bytes to another process over a stream socket and an 8-byte answer
 * back. Over a Unix socket (system unix, op send+ack) it is the round trip every ferry
 * request pays; over loopback TCP (system raw-tcp, op stream) the ceiling of a transfer
 * between two nodes on one machine, and at small sizes its round trip. Over TCP also op
 * reqresp: an 8-byte request and SIZE bytes back, the shape of a fetch. Returns the count (1
 * for unix, 2 for TCP). */
enum bench_transport { BENCH_UNIX, BENCH_TCP };

size_t stream_peer_ops(enum bench_transport t, const uint8_t *payload, const struct bench_op **ops);

/* ---- suites: each takes the arguments after its name and returns the exit status ---- */

int bench_local(int argc, char **argv);
int bench_remote(int argc, char **argv);
int bench_mpi(int argc, char **argv);       /* mpi.c, only in a build that found MPI */
int bench_python(int argc, char **argv);    /* python.c: runs python_bench.py */
int bench_cluster(int argc, char **argv);   /* python.c: runs cluster_bench.py */
int bench_dask(int argc, char **argv);      /* python.c: runs dask_bench.py */
int bench_directory(int argc, char **argv); /* directory.c: links the daemon's directory code */
int bench_spill(int argc, char **argv);     /* spill.c */
int bench_gets(int argc, char **argv);      /* gets.c */

#endif
