/*
 * directory.h - the cluster directory: which nodes are alive (and how to reach them) and
 * which nodes hold which sealed objects, kept in a Redis server reached with hiredis's async
 * API on the daemon's event loop (no thread of its own).
 *
 * Redis schema (DB from the URL):
 *   ferry:node:<node-id>   hash {addr, t:<transport> = its address, one per transport}, with a
 *                          TTL the node refreshes by heartbeat: a node that dies disappears
 *                          when the TTL runs out (a few seconds)
 *   ferry:obj:<40 hex>     set of node ids holding a sealed copy
 *
 * Publications (a seal, a fetched copy) and withdrawals (delete, eviction) are queued and
 * written pipelined once per loop turn: no Redis round trip sits on the path of a local seal.
 * After the connection to Redis drops (or Redis restarts), the module reconnects with backoff,
 * re-registers the node and asks its owner to re-publish everything it holds (the republish
 * hook), so nothing is lost for long.
 *
 * Lookups consult a local cache first (holders per id, addresses per node): a repeated fetch
 * from a known holder costs no Redis round trip. The engine drops a cache entry when it proves
 * wrong (directory_forget_holder / directory_forget_node).
 *
 * Not thread-safe: the loop's thread only.
 */
#ifndef FERRY_DIRECTORY_H
#define FERRY_DIRECTORY_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "loop/loop.h"

#define DIRECTORY_NODE_ID_MAX 63
#define DIRECTORY_ADDR_MAX 127
#define DIRECTORY_XPORTS 4 /* transports a node entry lists, at most */
#define DIRECTORY_XPORT_NAME_MAX 15
#define DIRECTORY_XPORT_ADDR_MAX 639

struct directory;

/* How to reach a node on one transport: the name the transport goes by, and the address its
 * endpoint published (opaque to the directory). */
struct directory_xport {
    char name[DIRECTORY_XPORT_NAME_MAX + 1];
    char addr[DIRECTORY_XPORT_ADDR_MAX + 1];
};

struct directory_node {
    char id[DIRECTORY_NODE_ID_MAX + 1];
    char addr[DIRECTORY_ADDR_MAX + 1]; /* the node's transfer address (--listen), for people */
    struct directory_xport xp[DIRECTORY_XPORTS];
    uint32_t nxp;
};

/* The address n published for transport, or NULL. */
const char *directory_node_addr(const struct directory_node *n, const char *transport);
/* Adds (or replaces) n's address for transport. FERRY_EINVAL when a field is too long or n
 * lists DIRECTORY_XPORTS transports already. */
int directory_node_set(struct directory_node *n, const char *transport, const char *addr);
/* The names of n's transports, comma-separated ("tcp,fabric"), into buf. */
void directory_node_names(const struct directory_node *n, char *buf, size_t len);

struct directory_config {
    const char *url; /* redis://HOST:PORT[/DB] */
    struct directory_node self;
    uint32_t heartbeat_ms; /* how often the node entry's TTL is refreshed (default 1000) */
    uint32_t ttl_ms;       /* the node entry's TTL (default 3000) */
    uint32_t timeout_ms;   /* a request unanswered this long means Redis is down (default 1000) */
};

struct directory_hooks {
    /* Called after every (re)connection, once the node is registered: the owner calls
     * directory_publish for every sealed object it holds. */
    void (*republish)(void *ctx);
    void *ctx;
};

struct directory_counters {
    uint64_t lookups;    /* holder lookups sent to Redis */
    uint64_t cache_hits; /* holder lookups answered from the cache */
    uint64_t reconnects; /* connections re-established after a loss */
    uint64_t published, withdrawn;
    uint64_t errors; /* failed commands and lost connections */
};

/* Parses cfg->url and starts connecting (asynchronously: a Redis that is down at start is
 * retried like a lost one). FERRY_EINVAL (with a reason) for a bad URL or node id. */
int directory_open(struct directory **out, struct loop *l, const struct directory_config *cfg,
                   const struct directory_hooks *hooks);
/* Withdraws nothing (the TTL retires the node), closes the connection, frees. */
void directory_close(struct directory *d);

int directory_connected(const struct directory *d);
const struct directory_counters *directory_counters(const struct directory *d);

/* Queue a publication or withdrawal of this node as a holder of id. */
void directory_publish(struct directory *d, const ferry_id *id);
void directory_withdraw(struct directory *d, const ferry_id *id);

/* Answers lookups: status 0 with the live holders other than this node (possibly none), or
 * FERRY_EDIRECTORY when Redis cannot be asked (disconnected, or no answer in timeout_ms).
 * The array is valid only during the call. */
typedef void directory_holders_fn(void *arg, int status, const struct directory_node *holders,
                                  size_t n);

/* Looks up the holders of id; from the cache unless fresh is set. The callback runs later,
 * never from within this call. Returns 0, or FERRY_ENOMEM. */
int directory_lookup(struct directory *d, const ferry_id *id, int fresh, directory_holders_fn *cb,
                     void *arg);

/* Cancels the callbacks of pending lookups made with arg (its owner is going away). */
void directory_cancel(struct directory *d, void *arg);

/* The live nodes, this one included (holders callback shape, same rules). */
int directory_nodes(struct directory *d, directory_holders_fn *cb, void *arg);

/* The holder proved wrong (it answered that it has no such object): forget it for id. */
void directory_forget_holder(struct directory *d, const ferry_id *id, const char *node_id);
/* The node proved unreachable: forget its cached address and every cached holding of it. */
void directory_forget_node(struct directory *d, const char *node_id);

#endif
