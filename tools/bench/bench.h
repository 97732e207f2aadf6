/*
 * bench.h - the parts of ferry-bench that every suite shares: failure and cleanup, child
 * processes, the one timing loop, result output, and the peers measured against (a ferryd
 * and a redis-server). A suite (local.c) picks sizes and operations and calls these.
 */
#ifndef FERRY_BENCH_H
#define FERRY_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "ferry.h"

/* ---- failure and cleanup (util.c) ---- */

/* Runs fn(arg) when ferry-bench exits, normally or through bench_fail(), newest first: a
 * resource registered after another one that it depends on is released before it. fn must
 * not call bench_fail(). */
void bench_on_exit(void (*fn)(void *), void *arg);

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

/* ---- child processes and the scratch directory (proc.c) ---- */

/* A process started by ferry-bench, with its output in a log file. */
struct bench_proc {
    pid_t pid;
    const char *name;
    char log_path[256];
};

/* Creates a private scratch directory (removed at exit) and returns its path. */
const char *bench_tmpdir(void);

/* The absolute path of an executable found in $PATH, in a static buffer, or NULL. */
const char *bench_which(const char *name);

/* Starts argv (argv[0] a path, or a name looked up in $PATH) with stdout and stderr in
 * <tmpdir>/<name>.log. The child gets SIGTERM if ferry-bench dies, and bench_proc_stop() runs
 * at exit. */
struct bench_proc *bench_proc_start(const char *name, char *const argv[]);

/* 1 when the process has ended (it is reaped and its log shown on stderr), else 0. */
int bench_proc_ended(struct bench_proc *p);

/* Copies the process's log to stderr. */
void bench_proc_show_log(const struct bench_proc *p);

/* SIGTERM, up to 5 s for it to end, then SIGKILL. Reports an earlier, unexpected end with
 * the process's log. Idempotent. */
void bench_proc_stop(struct bench_proc *p);

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
};

/* How long one measurement lasts: at least min_iters and until seconds have passed (the
 * untimed hooks count), but never more than max_iters. */
struct bench_limits {
    double seconds;
    uint64_t min_iters;
    uint64_t max_iters;
};

/* Rates are over the summed time of the timed runs only; MiB are 2^20 bytes. */
struct bench_result {
    const char *system;
    const char *op;
    uint64_t size;
    uint64_t iterations;
    double ops_per_sec;
    double p50_us;
    double p99_us;
    double mib_per_sec;
};

/* Warms up (about a tenth of the time, at least one run), then times each run on its own
 * with CLOCK_MONOTONIC. */
struct bench_result bench_measure(const struct bench_op *op, uint64_t size,
                                  const struct bench_limits *lim);

/* ---- output (report.c) ---- */

enum bench_metric { BENCH_OPS_PER_SEC, BENCH_P50_US, BENCH_MIB_PER_SEC };

/* value = numerator / denominator of two measured figures; met when value is on the right
 * side of target (at_most: value <= target, else value >= target). measured is 0 when a
 * figure was not taken in this run (its size was not asked for): value and met are then
 * meaningless. */
struct bench_ratio {
    const char *name;
    const char *description;
    int measured;
    double value;
    double target;
    int at_most;
    int met;
};

/* The result for (system, op, size), or NULL when it was not measured. */
const struct bench_result *bench_find(const struct bench_result *r, size_t n, const char *system,
                                      const char *op, uint64_t size);

double bench_metric(const struct bench_result *r, enum bench_metric m);

void bench_print_table(FILE *f, const struct bench_result *r, size_t n);
void bench_print_ratios(FILE *f, const struct bench_ratio *q, size_t n);
void bench_print_json(FILE *f, const char *suite, const struct bench_result *r, size_t n,
                      const struct bench_ratio *q, size_t nq);

/* bench_fail() unless gnuplot is on $PATH: checked before a run, not after it. */
void bench_require_gnuplot(void);

/* Writes dir/<suite>-<system>-<op>.dat, dir/<suite>.gp, and with gnuplot
 * dir/<suite>-throughput.png and dir/<suite>-latency.png (log-log against size). */
void bench_plot(const char *dir, const char *suite, const struct bench_result *r, size_t n);

/* ---- peers (ferry_peer.c, redis_peer.c) ---- */

/* Connects to the ferryd at socket_path, or when that is NULL starts
 * <dir of this executable>/ferryd --socket <scratch dir>/ferry.sock followed by daemon_args
 * (NULL-terminated, e.g. {"--memory", "2G", NULL}). The returned handle is disconnected, and
 * the daemon stopped, at exit. */
ferry_client *ferry_peer_start(const char *socket_path, const char *const *daemon_args);

/* The ferry operations put, get and get+read on c; put stores from payload, which holds at
 * least the largest size measured. One set per process: a second call re-targets it.
 * Returns the count. */
size_t ferry_peer_ops(ferry_client *c, const uint8_t *payload, const struct bench_op **ops);

/* Connects to the redis-server on 127.0.0.1:port, or when port is 0 starts one on a free
 * port; stopped at exit. Returns the redis context (a redisContext *). */
void *redis_peer_start(int port);

/* unix_peer.c: SIZE bytes to another process over a Unix stream socket and an 8-byte answer
 * back: the round trip every ferry request pays, measured in the same run. */
size_t unix_peer_ops(const uint8_t *payload, const struct bench_op **ops);

/* The redis operations set and get, like ferry_peer_ops(). */
size_t redis_peer_ops(void *redis, const uint8_t *payload, const struct bench_op **ops);

/* ---- suites: each takes the arguments after its name and returns the exit status ---- */

int bench_local(int argc, char **argv);

#endif
