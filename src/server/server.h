/*
 * server.h - ferryd: the arena, the store, the listening socket, client sessions and
 * subscribers, all driven by one event loop on one thread. Nothing here is shared with
 * another thread, so nothing is locked.
 */
#ifndef FERRY_SERVER_H
#define FERRY_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/hist.h"
#include "common/idmap.h"
#include "directory/directory.h"
#include "loop/loop.h"
#include "loop/accept.h"
#include "store/arena.h"
#include "common/fastidx.h"
#include "store/store.h"
#include "transfer/engine.h"

struct session;
struct subscriber;

/* Polling 50 us after each request keeps an active client's next request from having to
 * wake the daemon: a get takes ~7 us instead of ~18 us on our 2-core VMs, at the price of at
 * most 50 us of CPU per burst of requests (docs/design/server.md, "Latency: polling before
 * sleeping"). */
#define FERRYD_DEFAULT_BUSY_POLL_US 50

/* A cluster node stopped by a signal leaves the directory within this long, or stops anyway
 * (a Redis that is gone costs nothing: there is no connection to wait on). */
#define LEAVE_MS 2000

/* Local clients (the socket's users), bounded so that they can never take the descriptors the
 * node needs for its peers, the directory and /metrics (docs/design/threat-model.md):
 * - a connection must say hello within FERRYD_HELLO_DEADLINE_MS (the library does at once), and
 *   at most FERRYD_UNGREETED_MAX are open before their hello: a new one past that closes the
 *   oldest of them, so that a flood of silent connections only churns (clients_evicted);
 * - at most max_clients have said hello: a hello past that is answered FERRY_EBUSY and its
 *   connection closed (clients_refused). --max-clients sets it; by default it is what the
 *   descriptor limit leaves after FERRYD_FD_RESERVE (FERRYD_FD_RESERVE_PEERS more for a cluster
 *   node), at most FERRYD_MAX_CLIENTS and at least a quarter of the limit
 *   (FERRYD_FD_CLIENTS_SHARE; a limit that cannot hold the reserve beside that is warned about).
 * The soft RLIMIT_NOFILE is raised to the hard limit at start. */
#define FERRYD_HELLO_DEADLINE_MS 10000
#define FERRYD_UNGREETED_MAX 64
#define FERRYD_MAX_CLIENTS 4096
/* The daemon's own descriptors (listeners, the arena, epoll, signal and event fds, the
 * directory's Redis and sentinel connections, /metrics' 8 connections, spill segments, a
 * provider's), the subscriptions clients may open (SUBSCRIBERS_MAX, 256) and the connections
 * not yet greeted. */
#define FERRYD_FD_RESERVE (256 + 256 + FERRYD_UNGREETED_MAX)
/* A cluster node's peers: the transfer engine keeps 1,024 authenticated and 128 other incoming
 * connections at most, and opens one per peer and transport. */
#define FERRYD_FD_RESERVE_PEERS 1536
#define FERRYD_FD_CLIENTS_SHARE 4

/* Writes to the spill directory start when this percent of the arena cannot be freed at once. */
#define FERRYD_DEFAULT_SPILL_AT 80
/* Objects of at least this size that several nodes hold are fetched in ranges from them all
 * (docs/design/engine.md, "Several holders at once"). */
#define FERRYD_DEFAULT_SPLIT_MIN_TEXT "64M"
#define FERRYD_DEFAULT_RELAY_MIN_TEXT "64M"

struct server_config {
    const char *socket_path;
    mode_t socket_mode;
    uint64_t memory;
    uint64_t max_objects; /* 0: store_init's default for the arena */
    uint64_t max_kept;    /* bytes kept at most (store.max_kept_bytes); 0: half the arena */
    uint64_t max_clients; /* greeted clients at once at most; 0: from the descriptor limit */
    int hugepages;
    uint32_t busy_poll_us; /* see loop.busy_poll_ns */
    /* Cluster: all NULL for a standalone node. */
    const char *node_id;
    const char *listen_addr;   /* HOST:PORT for peers */
    const char *directory_url; /* redis://HOST:PORT[/DB] */
    /* AUTH's password, from --directory-password-file or FERRY_DIRECTORY_PASSWORD (never from
     * the command line); NULL: the URL's, if any. */
    const char *directory_password;
    const char *secret_file;
    int verify;
    const char *transport;       /* auto (or NULL), or a transport's name (registry.h) */
    const char *fabric_provider; /* NULL: any */
    uint64_t eager_max;          /* ENGINE_EAGER_AUTO: the provider's measured default */
    uint32_t fabric_window;
    uint64_t split_min;  /* objects of at least this size come in ranges from several holders */
    uint64_t relay_min;  /* a node receiving an object of at least this size serves its ranges */
    int relay_unchecked; /* --no-relay-check */
    struct engine_timers timers;   /* the protocol's timers (0: the defaults) */
    uint32_t heartbeat_ms, ttl_ms; /* the directory's (0: directory.h's defaults) */
    uint32_t directory_timeout_ms;
    int strict_ids;           /* a seal waits for the directory to confirm the id's content */
    const char *metrics_addr; /* HOST:PORT for Prometheus' scrapes, or NULL */
    const char *spill_dir;    /* NULL: no spilling */
    uint64_t spill_max;       /* 0: the file system's free space at start less a tenth */
    unsigned spill_at;        /* percent */
    int persist_on_exit;
};

struct server_counters {
    uint64_t connections_total, protocol_errors, gets, get_timeouts, notifications_dropped;
    uint64_t subscriptions_refused;
    uint64_t fetches;
    uint64_t fetch_hints_refused; /* locations malformed or not signed: ignored */
    uint64_t deletes_spared; /* cluster-wide deletes that named other content than the copy here */
    /* Local connections: refused at hello past max_clients, closed before their hello for a
     * newer one past FERRYD_UNGREETED_MAX, closed for no hello within the deadline. */
    uint64_t clients_refused, clients_evicted, hello_timeouts;
    /* Rings of puts: entries stored, entries failed (or dropped at a close), kicks received. */
    uint64_t puts_nowait, puts_nowait_failed, put_kicks;
    /* From the request to the reply (get, fetch); from the create to the seal (put). */
    struct hist get_latency, put_latency, fetch_latency;
};

/* ferryd's exit status when a live node uses its --node-id (sysexits' EX_CONFIG): the units
 * do not restart it (RestartPreventExitStatus). */
#define FERRYD_EXIT_ID_TAKEN 78

struct server {
    struct server_config cfg;
    struct loop loop;
    struct arena arena;
    struct store store;
    /* The shared index (common/fastidx.h) at fast_offset in the arena, after the store's
     * memory (fast_size 0: none). */
    struct fastidx fast;
    uint64_t fast_offset, fast_size;
    int listen_fd, signal_fd;
    struct loop_watch signal_watch;
    struct acceptor listener; /* of listen_fd */
    dev_t socket_dev;         /* identity of the socket file we bound, to unlink only our own */
    ino_t socket_ino;
    struct session *sessions;       /* connected */
    struct session *ready;          /* with input left to process after this turn */
    struct session *closed;         /* to free after this turn */
    struct session *hash_waiters;   /* blocked in HASH for a digest being computed */
    struct loop_watch hasher_watch; /* the store's hasher finished digests */
    struct loop_watch spill_watch;  /* the store's spill I/O finished jobs */
    int arena_fault_logged;         /* the first arena_faults was logged */
    struct session *room_waiters;   /* blocked in a create that waits for spilling */
    struct session_ring *rings;     /* the sessions' rings of puts (session_ring.c) */
    uint64_t nrings, ring_bytes;    /* how many, and their sizes all together */
    int rings_took;                 /* a turn took entries of a ring since the loop last slept */
    struct directory *dir;          /* NULL when standalone */
    const struct object *claimed;   /* being sealed after its claim published it */
    int leaving;                    /* a signal came: leaving the directory, then stopping */
    int id_taken;            /* a live node uses our --node-id: stopping, FERRYD_EXIT_ID_TAKEN */
    struct engine *engine;   /* NULL when standalone */
    struct metrics *metrics; /* NULL without --metrics */
    struct subscriber *subscribers, *dead_subscribers;
    idmap waiters; /* id -> struct get_wait list of sessions blocked in get */
    uint64_t clients, next_client_id, staging_size, staging_bytes, subscriber_count;
    uint64_t ungreeted;         /* of clients, those that have not said hello yet */
    uint64_t max_clients;       /* greeted clients at most (cfg.max_clients or the default) */
    uint64_t fd_limit;          /* RLIMIT_NOFILE's soft limit, after raising it at start */
    uint64_t subscriber_queued; /* bytes of notifications queued for all subscribers */
    struct server_counters counters;
    uint64_t started_real_ns; /* when the daemon started (CLOCK_REALTIME) */
};

/* The server whose loop l is (callbacks get the loop). */
static inline struct server *server_of(struct loop *l)
{
    return (struct server *)((char *)l - offsetof(struct server, loop));
}

/* FERRY_EINVAL (with the reason) for a configuration server_init would refuse on its face: the
 * cluster options all or none, the node id, the form of --listen, the directory URL. Checks
 * only; reserves and connects nothing. */
int server_check_config(const struct server_config *cfg);
/* The secret in the file at path (what names it in messages: "secret file") into buf, its
 * length (trailing CR/LF cut, at least min bytes) into *len. Reads at most size bytes: a longer
 * file is FERRY_EINVAL. Warns when the file's group or others can read it. */
int server_read_secret(const char *path, const char *what, uint8_t *buf, size_t size, size_t min,
                       size_t *len);
/* Opens the arena and the socket; refuses (with ferry_errmsg()) what it cannot honour. */
int server_init(struct server *s, const struct server_config *cfg);
/* Serves until SIGTERM or SIGINT. */
int server_run(struct server *s);
/* Closes every session, removes the socket file, frees everything. */
void server_destroy(struct server *s);

/* Queues a notification for every subscriber. */
void server_notify(struct server *s, int event, const struct object *o);
/* A new subscription for client: *client_fd is the end to hand to the client (the caller
 * closes it). FERRY_EBUSY past the limits of subscriptions per client and in all. */
int server_subscribe(struct server *s, uint64_t client, int *client_fd);
/* id was deleted cluster-wide by node: drops the local copy (a referenced one goes with its
 * last reference) and fails the fetches waiting for it. With root (the content the delete
 * names; NULL: a delete made here, of whatever is here), a sealed copy whose root differs, or
 * is not hashed yet, stays and nothing fails (deletes_spared): a delete binds to its content,
 * so a withheld or replayed event spares a later life of the id. */
void server_drop_deleted(struct server *s, const ferry_id *id, const uint8_t *root,
                         const char *node);
/* Makes the loop process ss's buffered input after this turn. */
void server_schedule(struct server *s, struct session *ss);

#endif
