/*
 * directory_int.h - the internals of the cluster directory on Redis (contract and schema in
 * directory.h), shared by its files. The directory works through
 * hiredis's async API attached to the daemon's loop by a small adapter (one loop_watch).
 *
 * A connection's life: connect_start() sends SELECT at once (hiredis holds it until the TCP
 * connection completes, so it precedes every other command); its reply sends the registration;
 * the registration's reply makes the directory up (directory_connected), starts the heartbeat
 * and asks the owner to republish. Whatever ends a connection - an error hiredis sees, the
 * watchdog, a refused SELECT, directory_close - ends in hiredis freeing the context, which
 * first calls every pending command callback with a NULL reply and then the adapter's cleanup
 * hook: ev_cleanup() is the one place that learns the connection is gone and schedules the
 * next attempt (backoff from BACKOFF_MIN_MS doubling to BACKOFF_MAX_MS).
 *
 * Liveness: Redis answers in order, so while commands are due a reply at least every
 * timeout_ms shows it alive; a longer silence (a stopped or unreachable Redis, a connect that
 * does not complete) gives the connection up. hiredis 0.14 has no timeouts of its own.
 *
 * Callback timing: the owner's code (lookup and node callbacks, the republish hook) runs only
 * from the directory's 0 ms "turn" timer, never from within hiredis nor from within a
 * directory_* call. It may call any directory function except directory_close.
 *
 * Publications are dropped while the directory is not up: the republish hook restores the
 * truth after the next registration. A withdrawal lost so leaves this node listed as a holder
 * of an object it no longer has; fetchers tolerate that (the holder answers "no such object"
 * and they call directory_forget_holder). Dead nodes are never removed from the holder sets
 * either: a holder whose node entry has expired is left out of answers.
 *
 * Files: directory.c (opening, the interface, node entries' fields), dir_cache.c (the holder
 * and address caches), dir_lookup.c (lookups and node listings: requests, commands and their
 * replies), dir_conn.c (the connection: registration, heartbeat, publications, the hiredis
 * adapter on the loop, reconnection).
 */
#ifndef FERRY_DIRECTORY_INT_H
#define FERRY_DIRECTORY_INT_H

#include "directory/directory.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/err.h"
#include "common/idmap.h"
#include "common/log.h"

#define DEFAULT_HEARTBEAT_MS 1000
#define DEFAULT_TTL_MS 3000
#define DEFAULT_TIMEOUT_MS 1000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
/* Past these sizes a cache is emptied: simpler than an LRU, and rare. */
#define HOLDER_CACHE_MAX 100000
#define NODE_CACHE_MAX 4096
/* Publications sent per turn: a republish of millions of objects must not stall the loop. */
#define FLUSH_BATCH 4096
/* A publication queue larger than this is freed once flushed (after a republish). */
#define QUEUE_KEEP 4096
/* Failed commands are counted, but logged at most this often. */
#define WARN_INTERVAL_MS 1000
#define SCAN_COUNT "1000"
#define NODE_PREFIX "ferry:node:"
#define OBJ_PREFIX "ferry:obj:"
/* The hash field of a transport's address in a node entry: t:<name>. */
#define XPORT_FIELD "t:"
#define NODE_KEY_MAX (sizeof(NODE_PREFIX) + DIRECTORY_NODE_ID_MAX)
#define OBJ_KEY_MAX (sizeof(OBJ_PREFIX) + 2 * FERRY_ID_SIZE)
#define HOST_MAX 256
/* Arguments of one command, at most: the registration's HSET is the longest. */
#define ARGV_MAX (4 + 2 * DIRECTORY_XPORTS)

typedef char node_name[DIRECTORY_NODE_ID_MAX + 1];

/* A publication or withdrawal waiting for the turn's flush. */
struct pubop {
    ferry_id id;
    int add;
};

/* The holders (other than this node) a lookup found for an id. */
struct cached_holders {
    size_t n;
    node_name ids[];
};

/* A node's entry, trusted until expires_ms. */
struct cached_node {
    struct directory_node node;
    uint64_t expires_ms;
};

/* A lookup or a node listing, from its call until its callback. */
struct request {
    struct request *next, **pprev; /* in d->pending while replies are due, then in d->done */
    directory_holders_fn *cb;      /* NULL once cancelled */
    void *arg;
    ferry_id id;       /* lookups */
    int lookup;        /* 1: the holders of id; 0: every node */
    int fresh;         /* lookups: ask Redis for the holders' entries too, not the cache */
    int status;        /* 0, or the first failure */
    unsigned awaiting; /* replies due (plus one while the request is being started) */
    node_name *asked;  /* the nodes whose entries were asked for, in order (HGETALL) */
    size_t asked_head, asked_len, asked_cap;
    struct directory_node *nodes; /* the answer so far */
    size_t n, cap;
};

struct directory {
    struct loop *loop;
    struct directory_node self;
    struct directory_hooks hooks;
    uint32_t heartbeat_ms, ttl_ms, timeout_ms;
    char ip[INET_ADDRSTRLEN]; /* resolved once, at open */
    int port, db;
    char where[HOST_MAX + 32]; /* the URL's HOST:PORT/DB, for the log */

    redisAsyncContext *ac; /* NULL between connections */
    struct loop_watch watch;
    struct loop_timer reconnect, watchdog, heartbeat, turn;
    int up;            /* registered on the current connection */
    int ever_up;       /* a connection was up before: the next one is a reconnection */
    int closing;       /* in directory_close: a lost connection is not retried */
    int republish_due; /* the turn calls the republish hook */
    unsigned failures; /* failed attempts since the last up, for the log */
    uint32_t backoff_ms;
    unsigned inflight;     /* commands sent and not answered */
    uint64_t progress_ms;  /* when the last reply came, or the first command of a burst left */
    uint64_t last_warn_ms; /* when a failed command was last logged */
    char why[256];         /* why this side gave the connection up */

    struct pubop *queue; /* [queue_head, queue_len) are still to be sent */
    size_t queue_head, queue_len, queue_cap;
    struct request *pending;
    struct request *done, **done_tail;
    size_t done_len;
    idmap holders; /* id -> struct cached_holders */
    idmap nodes;   /* node_cache_key(node id) -> struct cached_node */
    struct directory_counters counters;
};

/* directory.c */
void *dir_grow(void *array, size_t *cap, size_t elem);
void dir_arm(struct directory *d, struct loop_timer *t, uint64_t deadline_ms);
void dir_turn_soon(struct directory *d);
void dir_entry_key(char key[NODE_KEY_MAX], const char *node_id);
void dir_holders_key(char key[OBJ_KEY_MAX], const ferry_id *id);
int dir_string_copy(char *out, size_t cap, const redisReply *v);
const char *dir_reply_error(const redisReply *r);
void dir_command_failed(struct directory *d, const char *what, const char *why);

/* dir_cache.c: the caches */
void dir_cache_clear(idmap *m);
void dir_node_cache_key(const char *node_id, ferry_id *key);
const struct directory_node *dir_node_cached(const struct directory *d, const char *node_id);
void dir_node_remember(struct directory *d, const struct directory_node *node);
void dir_holders_remember(struct directory *d, const struct request *r);
void dir_holders_drop(struct cached_holders *h, const char *node_id);
int dir_answer_from_cache(const struct directory *d, struct request *r);

/* dir_lookup.c: lookups */
struct request *dir_request_new(directory_holders_fn *cb, void *arg);
void dir_request_free(struct request *r);
void dir_done_push(struct directory *d, struct request *r);
struct request *dir_done_pop(struct directory *d);
void dir_cancel_in(struct request *list, void *arg);
void dir_deliver(struct directory *d);
int dir_send_command(struct directory *d, redisCallbackFn *fn, void *priv, int argc,
                     const char **argv);
struct directory *dir_reply_begin(redisAsyncContext *ac, const redisReply *reply);
void dir_drop(struct directory *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dir_on_checked(redisAsyncContext *ac, void *reply, void *priv);
void dir_request_start(struct directory *d, struct request *r);

/* dir_conn.c: the connection */
void dir_queue_push(struct directory *d, const ferry_id *id, int add);
void dir_on_turn(struct loop *l, struct loop_timer *t);
void dir_on_heartbeat(struct loop *l, struct loop_timer *t);
void dir_connect_start(struct directory *d);
void dir_on_reconnect(struct loop *l, struct loop_timer *t);
void dir_on_watchdog(struct loop *l, struct loop_timer *t);

#endif
