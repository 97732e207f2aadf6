/*
 * harness.h - helpers of the black-box tests (it_*.c): real ferryd processes started from
 * $FERRY_BIN_DIR, libferry clients on them, patterned data, bounded waits and raw protocol
 * connections for the bad-input tests.
 *
 * Helpers that check something fail the running cmocka test themselves (so they may only be
 * called from the test's own thread); the ones that return a value do not.
 */
#ifndef FERRY_TEST_HARNESS_H
#define FERRY_TEST_HARNESS_H

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cmocka.h>

#include "ferry.h"
#include "skip.h"

/* Generous bounds for things that should be immediate: a daemon's start, a disconnect
 * being noticed, a connection being closed for bad input. */
#define H_START_MS 10000
#define H_EVENT_MS 5000

/* One ferryd in its own temporary directory (socket and logs live there). */
struct ferryd {
    pid_t pid; /* 0 when not running */
    int ok;    /* set when the test body finished; the log is printed otherwise */
    char dir[64];
    char sock[104]; /* fits sockaddr_un.sun_path */
    char log[128];
};

/* Daemons spawned while this is not 0 get it as their soft and hard RLIMIT_NOFILE (a host
 * whose hard limit is that low); 0: the test's own limits. */
extern rlim_t h_daemon_nofile;

/* Creates the temporary directory and the paths in it; no process yet. */
void h_daemon_init(struct ferryd *d);
/* Forks and execs $FERRY_BIN_DIR/ferryd --socket d->sock --memory memory [extra...] (extra is
 * NULL-terminated, may be NULL), its stdout and stderr appended to log, killed if the test
 * process dies (PR_SET_PDEATHSIG). Returns the pid. */
pid_t h_daemon_spawn(const struct ferryd *d, const char *log, const char *memory,
                     const char *const *extra);
/* Starts a daemon on d (h_daemon_init first) and waits until ferry_connect succeeds:
 * 0, or -1 with its log printed and the process gone. */
int h_daemon_try_start(struct ferryd *d, const char *memory, const char *const *extra);
/* The same, failing the test. */
void h_daemon_start(struct ferryd *d, const char *memory, const char *const *extra);
/* SIGTERM, then checks: exit status 0 within H_START_MS and the socket file removed.
 * 0, or -1 with the reason in why (a daemon that did not exit is killed). */
int h_daemon_try_stop(struct ferryd *d, char *why, size_t why_size);
/* The same, failing the test (with the log) on a reason. */
void h_daemon_stop(struct ferryd *d);
/* SIGKILL and reap. */
void h_daemon_kill(struct ferryd *d);
/* Removes the temporary directory and everything in it. */
void h_daemon_cleanup(struct ferryd *d);
/* Prints a file (a daemon log) to stderr, framed. */
void h_print_file(const char *path);

/* The protocol timer called name (stall, handshake, answer, breaker, lease, orphan) as the daemons
 * this test starts have it: from FERRY_TEST_TIMERS (their --timers), else real_ms (the default). */
int h_timer_ms(const char *name, int real_ms);

/* Raw transfer connections (transfer/wire.h), as a peer of a node would speak:
 * h_xfer_read_frame reads one frame: its type (the payload into payload), or -1;
 * h_xfer_hello sends a HELLO as node "intruder" (incarnation 1) with magic, naming the
 * address fd is connected to as the one dialled (h_xfer_hello_version: of another protocol
 * version, laid out as this one); h_xfer_handshake_start sends it and reads
 * the CHALLENGE (0, or -1; *keyed its keyed flag); h_xfer_handshake completes it with a node
 * without a secret (the proof is zeros); the _as forms say node id node (at most 32 bytes)
 * instead; h_xfer_pull sends a PULL of n ids, which h_xfer_pull_frame makes (malloc'd, *len
 * bytes; NULL when out of memory). */
int h_xfer_read_frame(int fd, uint8_t *payload, size_t cap, uint32_t *len);
int h_xfer_hello(int fd, uint32_t magic);
int h_xfer_hello_version(int fd, uint32_t magic, uint32_t version);
int h_xfer_handshake_start(int fd, int *keyed);
int h_xfer_handshake(int fd);
int h_xfer_hello_as(int fd, uint32_t magic, uint32_t version, const char *node);
int h_xfer_handshake_start_as(int fd, const char *node, int *keyed);
int h_xfer_handshake_as(int fd, const char *node);
int h_xfer_pull(int fd, uint64_t tag, const ferry_id *ids, uint32_t n);
uint8_t *h_xfer_pull_frame(uint64_t tag, const ferry_id *ids, uint32_t n, size_t *len);
/* The TCP ports process pid listens on (IPv4), at most max of them: how many. */
int h_listen_ports(pid_t pid, int *ports, int max);
/* The CPU time process pid used so far (user and system), in clock ticks. */
uint64_t h_cpu_ticks(pid_t pid);
/* The resident anonymous memory of process pid (RssAnon: its heap and stacks, not the arena it
 * shares, whose pages count in VmRSS as they are first touched), in KiB; fails the test if it
 * cannot be read. */
uint64_t h_rss_kib(pid_t pid);
/* For tests that bound a daemon's RSS: under ASan, daemons started from now on keep at most
 * 16 MiB of freed memory in quarantine (256 MiB by default, which is not the daemon's doing).
 * Nothing without ASan. */
void h_rss_asan_quarantine(void);
/* Waits up to timeout_ms for pid to exit: 1 and *status when it did, 0 otherwise. */
int h_wait_exit(pid_t pid, int timeout_ms, int *status);

/* cmocka fixtures: a started daemon in *state, stopped (and checked) at teardown. */
int h_setup(void **state, const char *memory, const char *const *extra);
int h_teardown(void **state);

/* Defines a test whose body gets the fixture's daemon; the teardown prints the daemon's log
 * when the body did not run to its end (a failed assertion). */
#define H_TEST(name)                                                                               \
    static void name##_body(struct ferryd *d);                                                     \
    static void name(void **state)                                                                 \
    {                                                                                              \
        name##_body(*state);                                                                       \
        ((struct ferryd *)*state)->ok = 1;                                                         \
    }                                                                                              \
    static void name##_body(struct ferryd *d)

/* Checks a ferry_ call's result, naming the call, the code and ferry_errmsg() on failure. */
#define H_RC(expr, want)                                                                           \
    do {                                                                                           \
        int h_rc_ = (expr), h_want_ = (want);                                                      \
        if (h_rc_ != h_want_)                                                                      \
            fail_msg("%s returned %d (%s: %s), expected %d (%s)", #expr, h_rc_,                    \
                     ferry_strerror(h_rc_), ferry_errmsg(), h_want_, ferry_strerror(h_want_));     \
    } while (0)
#define H_OK(expr) H_RC(expr, FERRY_OK)

/* Clients. */
ferry_client *h_connect(const struct ferryd *d);
ferry_id h_id(const char *name);
ferry_id h_idf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
ferry_stats h_stats(ferry_client *c);
/* h_stats bounded by c's own timer: H_STAT_TIMEOUT_MS, past which the call ends with
 * FERRY_ETIMEDOUT and the test fails. A node's loop held for that long by what it is going
 * through answers too late; a busy machine's scheduling does not decide it, as a clock would. */
#define H_STAT_TIMEOUT_MS 2000
ferry_stats h_stats_bounded(ferry_client *c);
/* The counter called name (the daemon's table or a transport's); fails the test when the call
 * fails; 0 when the node has no counter of that name. */
uint64_t h_stat(ferry_client *c, const char *name);
/* Bytes of the arena held by objects: used_bytes - staging_bytes. */
uint64_t h_object_bytes(ferry_client *c);
/* The arena bytes an open ferry_create of total bytes holds until its seal: whole pages of its
 * own (store_create_paged). */
uint64_t h_open_create_bytes(uint64_t total);
/* The list() entry of id: 1 and *out when present, 0 when not. */
int h_list_find(ferry_client *c, const ferry_id *id, ferry_object_info *out);
/* Makes sure the daemon has processed everything c sent before (ferry_release gets no
 * answer, so another client could overtake it): one round trip on c's connection. */
void h_sync(ferry_client *c);
/* contains() as 1 (in memory or on disk) or 0; fails the test when the call fails. */
int h_contains(ferry_client *c, const ferry_id *id);

/* Patterned bytes: position- and seed-dependent, so shifted or mixed-up data is noticed. */
void h_fill(uint8_t *p, size_t n, uint32_t seed);
/* The index of the first byte that differs from the pattern, or -1. */
long h_check(const uint8_t *p, size_t n, uint32_t seed);
/* A seed derived from an id. */
uint32_t h_seed(const ferry_id *id);
/* A malloc'ed buffer of patterned bytes (never NULL; n may be 0). */
uint8_t *h_pattern(size_t n, uint32_t seed);

/* create + fill (data with seed h_seed(id), metadata with seed ~seed) + seal + release,
 * without the staging area; returns the first failing code. */
int h_put_direct(ferry_client *c, const ferry_id *id, uint64_t data_size, uint64_t meta_size);
/* Checks an entry filled by h_put_direct (or by a put of the same pattern). */
void h_assert_buffer(const ferry_buffer *b, const ferry_id *id, uint64_t data_size,
                     uint64_t meta_size);
/* get (poll), check as above, release. */
void h_assert_object(ferry_client *c, const ferry_id *id, uint64_t data_size, uint64_t meta_size);

/* Time. */
int64_t h_now_ms(void);
void h_sleep_ms(int ms);

/* A bounded wait: `for (h_wait_begin(&w, ms); !cond; ) if (!h_wait_next(&w)) break;`.
 * h_wait_next sleeps a little and returns 0 once the time or the try count is spent. */
struct h_wait {
    int64_t deadline_ms;
    int tries;
};
void h_wait_begin(struct h_wait *w, int timeout_ms);

/* Reads exactly n bytes from a socket (Unix or TCP), closing any descriptors that come
 * along; each wait for data is bounded by H_EVENT_MS. 0, or -1 (closed, error, time out). */
int h_read_exact(int fd, uint8_t *buf, size_t n);
int h_wait_next(struct h_wait *w);

/* Polls stats until field(stats) == want or H_EVENT_MS passes; returns the last value. */
uint64_t h_wait_stat(ferry_client *c, const char *name, uint64_t want);
#define H_WAIT_STAT(c, field, want) h_wait_stat((c), #field, (want))

/* Raw protocol connections (bad-input tests). */
int h_raw_connect(const char *sock);
/* Writes all n bytes; 0 or -1. */
int h_raw_write(int fd, const void *p, size_t n);
/* Sends one frame with a correct header (flags 0). */
int h_raw_frame(int fd, uint16_t type, uint64_t tag, const void *payload, uint32_t len);
/* Sends HELLO and reads its reply (closing the arena fd it carries): 0 when it succeeded. */
int h_raw_hello(int fd);
/* Reads one reply frame's payload into buf (up to cap): its length, or -1. */
long h_raw_reply(int fd, uint16_t want_type, void *buf, size_t cap);
/* Drains fd until the daemon closes it (EOF or ECONNRESET) within timeout_ms: 1, else 0. */
int h_raw_wait_closed(int fd, int timeout_ms);

/* Little-endian encoders for hand-made payloads; each returns the position after it. */
uint8_t *h_le16(uint8_t *p, uint16_t v);
uint8_t *h_le32(uint8_t *p, uint32_t v);
uint8_t *h_le64(uint8_t *p, uint64_t v);
uint32_t h_rd32(const uint8_t *p);
uint64_t h_rd64(const uint8_t *p);

/* The size of a file, -1 when absent. */
long h_file_size(const char *path);
/* 1 when the file contains s. */
int h_file_contains(const char *path, const char *s);

/* ---- cluster: a real redis-server as the directory, ferryd nodes that use it ---- */

/* Bound for the cluster to converge: nodes registering, re-registering and re-publishing
 * after Redis comes back (the daemons refresh every second, with a TTL of about 3 s). */
#define H_CLUSTER_MS 10000
#define H_CLUSTER_MAX 4

/* One redis-server in its own temporary directory (working directory and log). */
struct h_redis {
    pid_t pid; /* 0 when not running */
    int port;
    char dir[64];
    char log[128];
};

/* One node: a ferryd with a node id, a transfer port and the cluster's directory. */
struct h_node {
    struct ferryd d;
    char id[16];     /* node-a, node-b, ... */
    char listen[32]; /* 127.0.0.1:PORT */
};

struct h_cluster {
    struct h_redis redis;
    char url[64]; /* redis://127.0.0.1:PORT */
    int n;        /* slots used; a killed node keeps its slot */
    struct h_node node[H_CLUSTER_MAX];
    int ok; /* set when the test body finished; every log is printed otherwise */
};

/* A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed). */
int h_free_port(void);
/* 1 when the Redis on port answers PING with PONG within H_EVENT_MS, else 0. */
int h_redis_ping(int port);
/* Starts redis-server (no persistence) on port, or on a free port when port is 0, and waits
 * until it answers PING; fails the test (with its log) otherwise. r->dir is created on the
 * first start and kept across restarts. */
void h_redis_start(struct h_redis *r, int port);
/* Sends one command (argv NULL-terminated) to r and reads the first line of its reply; fails
 * the test on an error reply or no reply (a minimal client: RESP over a plain socket). */
void h_redis_cmd(const struct h_redis *r, const char *const *argv);
/* The same, for a command whose reply is an integer: that integer. */
long long h_redis_int(const struct h_redis *r, const char *const *argv);
/* SIGKILL and reap; the directory stays (for a restart and the log). */
void h_redis_kill(struct h_redis *r);
/* Removes r->dir and every file in it (tests may keep files of their own there). */
void h_redis_cleanup(struct h_redis *r);

/* cmocka fixtures: a started Redis in a struct h_cluster, no nodes yet; the teardown stops
 * every node (checking a clean exit, as h_teardown) and Redis, and prints every log when the
 * body did not finish. */
int h_cluster_setup(void **state);
int h_cluster_teardown(void **state);
void h_cluster_print_logs(const struct h_cluster *cl);

/* Defines a test whose body gets the fixture's cluster (see H_TEST). */
#define H_CLUSTER_TEST(name)                                                                       \
    static void name##_body(struct h_cluster *cl);                                                 \
    static void name(void **state)                                                                 \
    {                                                                                              \
        name##_body(*state);                                                                       \
        ((struct h_cluster *)*state)->ok = 1;                                                      \
    }                                                                                              \
    static void name##_body(struct h_cluster *cl)

/* Starts node i (i <= cl->n; i == cl->n adds one) as node-<a+i> on a fresh port with
 * --node-id, --listen and --directory, then extra (NULL-terminated, may be NULL). A killed
 * node may be started again in its slot: same node id, same directory, a new port. */
void h_node_start(struct h_cluster *cl, int i, const char *memory, const char *const *extra);
/* Starts n more nodes alike and waits until every node's ferry_nodes lists every node (with
 * its current address), H_CLUSTER_MS at most. */
void h_cluster_start(struct h_cluster *cl, int n, const char *memory, const char *const *extra);
/* SIGKILL of node i and reap. */
void h_node_kill(struct h_cluster *cl, int i);
ferry_client *h_node_connect(const struct h_cluster *cl, int i);
/* The TCP port of node i's --listen address. */
int h_node_port(const struct h_cluster *cl, int i);

/* Polls ferry_nodes on c until it lists exactly the nodes of the mask (bit i: node i of cl)
 * or timeout_ms passes: 1 when it did. On a timeout, *seen describes the last answer. */
int h_wait_nodes(ferry_client *c, const struct h_cluster *cl, unsigned mask, int timeout_ms,
                 char *seen, size_t seen_size);
/* The same with ferry_where(id): the holders. */
int h_wait_where(ferry_client *c, const struct h_cluster *cl, const ferry_id *id, unsigned mask,
                 int timeout_ms, char *seen, size_t seen_size);
/* The same, failing the test with what was seen. */
void h_assert_nodes(ferry_client *c, const struct h_cluster *cl, unsigned mask, int timeout_ms);
void h_assert_where(ferry_client *c, const struct h_cluster *cl, const ferry_id *id, unsigned mask,
                    int timeout_ms);

/* Polls stats until field(stats) >= want or timeout_ms passes; returns the last value. */
uint64_t h_wait_stat_min(ferry_client *c, const char *name, uint64_t want, int timeout_ms);
#define H_WAIT_STAT_MIN(c, field, want, ms) h_wait_stat_min((c), #field, (want), (ms))

/* Checks that c1 and c2 (two nodes) hold the same sealed object id: equal digests, sizes
 * and bytes, data and metadata. */
void h_assert_same_object(ferry_client *c1, ferry_client *c2, const ferry_id *id);

/* A ferry_fetch in a thread of its own (the test's thread goes on to act meanwhile). The
 * thread uses c and copies of the ids, never fails the test, and leaves its results to
 * h_fetch_join: rc, statuses (the caller's array, n entries) and elapsed_ms. */
struct h_fetch_run;
struct h_fetch {
    struct h_fetch_run *run;
    pthread_t thread;
    int64_t timeout_ms;
    int *statuses;
    int rc;
    int64_t elapsed_ms; /* from h_fetch_start to ferry_fetch's return */
    int64_t ended_ms;   /* h_now_ms() at ferry_fetch's return */
};
void h_fetch_start(struct h_fetch *f, ferry_client *c, const ferry_id *ids, size_t n,
                   int64_t timeout_ms, int *statuses);
/* Joins the thread, waiting at most timeout_ms: fails the test if it is still running (its
 * state is then left to it, so nothing it writes later lands in a dead stack frame). */
void h_fetch_join(struct h_fetch *f, int timeout_ms);
/* 1 once the fetch of h_fetch_start has returned (before h_fetch_join). */
int h_fetch_done(const struct h_fetch *f);
/* Asks c for its stats (h_stats_bounded) every 50 ms until f's fetch has returned (at most its
 * timeout and 5 s more): the slowest answer, in ms, for the log. */
int64_t h_stat_while_fetching(ferry_client *c, const struct h_fetch *f);

/* pthread_join bounded by timeout_ms (a thread still running is detached): 0 or ETIMEDOUT. */
int h_join(pthread_t thread, int timeout_ms);

/* Writes text to a new file at path, mode 0600; fails the test on error. */
void h_write_file(const char *path, const char *text);
/* A TCP connection to 127.0.0.1:port; fails the test on error. */
int h_tcp_connect(int port);
/* A listening socket on 127.0.0.1 (a free port, in *port). The kernel completes the TCP
 * handshake of a connecting peer even while nobody accepts. */
int h_tcp_listen(int *port);

#endif
