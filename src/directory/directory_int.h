/*
 * directory_int.h - the internals of the cluster directory on Redis (contract and schema in
 * directory.h), shared by its files. The directory works through
 * hiredis's async API attached to the daemon's loop by a small adapter (one loop_watch).
 *
 * A connection's life: connect_start() sends SELECT and SCRIPT LOAD of the scripts at once
 * (hiredis holds them until the TCP connection completes, so they precede every other
 * command); SELECT's reply starts, until the run's first registration, the check that no live
 * node uses this node's id (dir_owner.c), then the cleanup of earlier incarnations (batch after
 * batch), then the registration; the registration's reply makes
 * the directory up (directory_connected), starts the heartbeat and the events poll, and asks
 * the owner to republish. Whatever ends a connection - an error hiredis sees, the
 * watchdog, a refused SELECT, directory_close - ends in hiredis freeing the context, which
 * first calls every pending command callback with a NULL reply and then the adapter's cleanup
 * hook: ev_cleanup() is the one place that learns the connection is gone and schedules the
 * next attempt (backoff from BACKOFF_MIN_MS doubling to BACKOFF_MAX_MS).
 *
 * Liveness: Redis answers in order, so while commands are due a reply at least every
 * timeout_ms shows it alive; a longer silence (a stopped or unreachable Redis, a connect that
 * does not complete) gives the connection up, unless the silence was this process's own (its
 * watchdog fired late, or an answer waits unread: one more timeout, once per silence).
 * hiredis 0.14 has no timeouts of its own.
 *
 * Callback timing: the owner's code (lookup and node callbacks, the republish and id_taken
 * hooks) runs only from the directory's 0 ms "turn" timer, never from within hiredis nor from
 * within a directory_* call. It may call any directory function except directory_close.
 *
 * Publications are dropped while the directory is not up: the republish hook restores the
 * truth after the next registration. A withdrawal lost so leaves this node listed as a holder
 * of an object it no longer has; fetchers tolerate that (the holder answers "no such object"
 * and they call directory_forget_holder). A heartbeat that finds the node's entry gone (it
 * expired: the node was taken for dead) republishes too. Holder fields of dead nodes stay
 * until that node starts again (or a publication of other content finds no live holder of
 * the recorded one); answers leave them out.
 *
 * Files, each calling only those listed after it (no two call each other):
 * directory.c (the facade: the interface of directory.h, each call handed on),
 * dir_config.c (the configuration, the incarnation, the URL), dir_conn.c (the connection:
 * registration, heartbeat, the turn, the hiredis adapter on the loop, reconnection),
 * dir_sentinel.c (asking Redis Sentinel for the master before a connection), dir_events.c
 * (the events stream, leaving), dir_owner.c (whether a live node uses this node's id: what
 * follows comes as a function pointer), dir_script.c (the Lua scripts and what uses them:
 * publications, claims, deletes, cleanup), dir_queue.c (the publication queue), dir_lookup.c
 * (lookups and node listings), dir_request.c (requests from call to callback, sending
 * commands), dir_cache.c (the holder and node caches), dir_node.c (node entries' fields),
 * dir_sign.c (the signatures of entries, records and events), dir_redis.c (keys, reading
 * replies, failed commands, distrusted and malformed keys), dir_util.c (growing arrays, arming
 * timers, the turn's scheduling).
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
#include "common/mac.h"

/* A watchdog that fires this much past its time was late itself (dir_on_watchdog). */
#define WATCHDOG_LATE_MS 100
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
/* Past these sizes a cache is emptied: simpler than an LRU, and rare. */
#define HOLDER_CACHE_MAX 100000
#define NODE_CACHE_MAX 4096
/* Publications sent per turn: a republish of millions of objects must not stall the loop. */
#define FLUSH_BATCH 4096
/* A publication queue larger than this is freed once flushed (after a republish). */
#define QUEUE_KEEP 4096
/* Ids of earlier incarnations removed per cleanup script (each is one short Redis call). */
#define CLEANUP_BATCH "1000"
/* The events stream is read this often, at most EVENTS_BATCH entries per read (a full read is
 * followed by the next at once), and keeps about EVENTS_KEEP entries. */
#define EVENTS_MS 100
#define EVENTS_BATCH "256"
#define EVENTS_BATCH_N 256
#define EVENTS_KEEP "100000"
/* With a secret, a delete event is taken only if its time is later than the last one taken from
 * its node's run (kept for EMITTERS_MAX runs; past that the list starts again) and not earlier
 * than this run's start less EVENTS_SKEW_MS (the nodes' clocks may differ that much). */
#define EMITTERS_MAX 4096
#define EVENTS_SKEW_MS 10000
/* A read that finds nothing new asks, at most this often, for the stream's last entry: one
 * below the cursor means the stream was deleted or made anew (its ids start again). */
#define EVENTS_CHECK_MS 1000
/* Failed commands are counted, but logged at most this often; what a writer without the secret
 * planted, and keys of the wrong type, once a minute per kind (a planted entry is met on every
 * lookup). */
#define WARN_INTERVAL_MS 1000
#define DISTRUST_INTERVAL_MS 60000
#define SCAN_COUNT "1000"
/* A node listing stops at this many nodes, and after this many SCAN rounds (a Redis that
 * never ends its SCAN, or holds millions of node keys, cannot grow a listing without bound). */
#define LISTING_NODES_MAX 65536
/* Withdrawals made while the directory is down are kept for the next connection, up to this
 * many (past it, a stale holder field stays until this node's next start). */
#define OWED_MAX 65536
/* Copies refused as conflicts kept from being published again, at most this many (past it, a
 * further one is published again at the next republish, and refused again while the recorded
 * content has a live holder). */
#define CONFLICTS_MAX 65536
#define LISTING_ROUNDS_MAX 100000
#define NODE_PREFIX "ferry:node:"
#define OBJ_PREFIX "ferry:obj:"
#define HELD_PREFIX "ferry:held:"
#define EVENTS_KEY "ferry:events"
/* The hash field of a transport's address in a node entry: t:<name>; of a holder in an
 * object's entry: h:<node>. */
#define XPORT_FIELD "t:"
#define HOLDER_FIELD "h:"
/* A partial holder's field: p:<node> = "<inc>:<seq>" (directory_relay). */
#define PARTIAL_FIELD "p:"
#define NODE_KEY_MAX (sizeof(NODE_PREFIX) + DIRECTORY_NODE_ID_MAX)
#define HELD_KEY_MAX (sizeof(HELD_PREFIX) + DIRECTORY_NODE_ID_MAX)
#define OBJ_KEY_MAX (sizeof(OBJ_PREFIX) + 2 * FERRY_ID_SIZE)
#define HEX_ID_MAX (2 * FERRY_ID_SIZE + 1)
#define U64_TEXT 24
#define DIR_SIG_HEX (2 * MAC_LEN + 1) /* a signature in hex, with its NUL */
/* An object record's digest as text, as its publisher wrote it (compared and signed as is). */
#define DIGEST_TEXT 80
#define HOST_MAX 256
#define SENTINELS_MAX 8
#define MASTER_NAME_MAX 64
#define USER_MAX 128
/* Arguments of one command, at most: the registration's HSET is the longest. */
#define ARGV_MAX (14 + 2 * DIRECTORY_XPORTS)
/* Publications queued together go in one script of at most PUBLISH_BATCH (its keys and
 * arguments: DIR_ARGV_BATCH words with EVALSHA's three). */
#define PUBLISH_BATCH 64
/* A publication or withdrawal queued less than this after the queue was last written waits
 * for the rest of it (dir_queue.c): a stream of puts goes as one script per gap, not one each. */
#define PUBLISH_GAP_MS 1
#define DIR_ARGV_BATCH (6 + 6 * PUBLISH_BATCH)

typedef char node_name[DIRECTORY_NODE_ID_MAX + 1];

/* What the directory distrusts, each logged on its own schedule (dir_distrust). */
enum distrust {
    DISTRUST_ENTRY,
    DISTRUST_RECORD,
    DISTRUST_REPAIR,
    DISTRUST_EVENT,
    DISTRUST_STALE,
    DISTRUST_KEY,
    N_DISTRUST
};

/* A delete event's fields, as texts (what its signature covers, and sig). */
struct dir_event {
    char type[8], id[HEX_ID_MAX];
    node_name node;
    char inc[U64_TEXT], t[U64_TEXT], root[DIGEST_HEX + 1], sig[DIR_SIG_HEX];
    char gen[DIRECTORY_GEN_MAX + 1]; /* the put deleted ("": not named) */
};

/* What the queue sends, in order, on the one connection: publications and withdrawals, and
 * the claims and cluster-wide deletes that must not overtake them (a delete and a new claim of
 * an id must not be undone by a republish queued before them). */
enum pubop_kind { OP_PUBLISH, OP_WITHDRAW, OP_CLAIM, OP_DELETE, OP_RELAY, OP_UNRELAY };

struct pubop {
    ferry_id id;
    int kind;
    uint64_t size;                   /* publish, claim, relay */
    uint8_t digest[DIGEST_LEN];      /* publish, claim, relay; delete: the content deleted */
    char gen[DIRECTORY_GEN_MAX + 1]; /* delete: the put deleted ("": not named) */
    struct request *r; /* claim, delete, relay: answered when Redis answers, failed if dropped */
};

/* A cluster-wide delete by another node, waiting for the turn to reach the owner. */
struct heard {
    ferry_id id;
    uint8_t root[DIGEST_LEN]; /* the content deleted (all zeros: none named) */
    node_name node;
    char gen[DIRECTORY_GEN_MAX + 1]; /* the put deleted ("": not named) */
};

/* The put a fetched copy is of, for its publication (directory_fetched). */
struct fetched_put {
    uint8_t digest[DIGEST_LEN];
    char gen[DIRECTORY_GEN_MAX + 1];
};

/* A holder as an object's entry names it. */
struct holder {
    node_name id;
    uint64_t inc;
    uint64_t seq; /* a partial holder's (p:<node> = "inc:seq"); 0 for a whole one */
};

/* The holders (other than this node) a lookup found live for an id, and its content. */
struct cached_holders {
    uint64_t size;
    uint8_t digest[DIGEST_LEN];
    char gen[DIRECTORY_GEN_MAX + 1]; /* the put the record was */
    size_t n;
    struct holder h[];
};

/* A node's entry, trusted until expires_ms. */
struct cached_node {
    struct directory_node node;
    uint64_t expires_ms;
};

enum request_kind { REQ_LOOKUP, REQ_NODES, REQ_CLAIM, REQ_DELETE, REQ_RELAY };

/* A request from its call until its callback. */
struct request {
    struct request *next, **pprev; /* in d->pending while replies are due, then in d->done */
    directory_answer_fn *cb;       /* NULL once cancelled */
    void *arg;
    int kind;             /* enum request_kind */
    ferry_id id;          /* lookups, claims, deletes */
    int fresh;            /* lookups: ask Redis for the holders' entries too, not the cache */
    int partial;          /* lookups: partial holders too */
    unsigned awaiting;    /* replies due (plus one while the request is being started) */
    unsigned rounds;      /* listings: SCAN rounds so far */
    struct holder *asked; /* the holders (or nodes) whose entries were asked for, in order */
    size_t asked_head, asked_len, asked_cap;
    struct directory_answer a; /* the answer so far; its arrays below */
    struct directory_node *nodes;
    size_t cap;
    struct directory_gone *gone;
    size_t gone_cap;
    node_name other;
};

struct sentinel_addr {
    char ip[INET_ADDRSTRLEN];
    int port;
};

struct directory {
    struct loop *loop;
    struct directory_node self;
    struct directory_hooks hooks;
    uint32_t heartbeat_ms, ttl_ms, timeout_ms;
    char ip[INET_ADDRSTRLEN]; /* redis://: resolved once, at open; sentinel: the master's */
    int port, db;
    char where[HOST_MAX + 32]; /* HOST:PORT/DB, or the master's name and address, for the log */
    /* redis-sentinel://: before each connection to the master the sentinels are asked where it
     * is, in turn from sentinel_at (asking: d->ac is a connection to that sentinel); resolved
     * once ip and port are the answer, until that master's connection ends. */
    struct sentinel_addr sentinels[SENTINELS_MAX];
    int nsentinels, sentinel_at, asking, resolved;
    char master[MASTER_NAME_MAX + 1];
    /* AUTH on every connection to Redis (not to the sentinels): from the URL's
     * [[USER]:PASSWORD@], or directory_config.password; password[0] == 0: none. Never logged. */
    char user[USER_MAX + 1], password[DIRECTORY_PASSWORD_MAX + 1];
    char inc_text[U64_TEXT];              /* self.inc in decimal */
    uint8_t secret[DIRECTORY_SECRET_MAX]; /* signs and checks entries, records, events */
    size_t secret_len;                    /* 0: none, nothing is signed nor checked */
    uint64_t warned_ms[N_DISTRUST];       /* when each kind of distrust was last logged */
    uint64_t event_t;                     /* the time of this run's last delete event */
    idmap emitters; /* hash of "node inc" -> uint64_t: the last event time taken from it */

    redisAsyncContext *ac; /* NULL between connections */
    struct loop_watch watch;
    struct loop_timer reconnect, watchdog, heartbeat, turn, events;
    uint64_t watchdog_grace_of; /* the progress_ms of the silence given its one grace */
    /* Commands are written at the end of the loop turn that made them (flush, due at once),
     * not after an EPOLLOUT: two epoll_ctl calls and a wake-up fewer per command. flushing:
     * inside that write, when hiredis asking to write again means the socket is full. */
    struct loop_timer flush;
    int flushing;
    int up;             /* registered on the current connection */
    char down_why[256]; /* why the last connection ended or could not be used ("": none yet) */
    int ever_up;        /* a connection was up before: the next one is a reconnection */
    int cleaned;        /* the earlier incarnations' entries are gone */
    /* dir_owner.c, before the first registration: another incarnation's entry under our id,
     * its TTL when last seen and when it was first seen (0: none seen yet); whether its
     * address accepted a connection; then: what follows a free id (dir_cleanup_start).
     * refused: 1 once a live node was found to use the id (the turn tells hooks.id_taken), 2
     * after; this node never registers then (down_why says why). opened_ms: directory_open's
     * time. */
    uint64_t owner_inc, owner_ttl, owner_since_ms, opened_ms;
    uint64_t owner_beat; /* the latest heartbeat time its entry carried (0: none yet) */
    struct loop_timer owner_timer;
    struct loop_watch probe; /* fd -1: no probe of its address under way */
    int owner_listening;
    int owner_decided; /* taken (or refused): no more looks on this connection */
    void (*owner_then)(struct directory *d);
    int refused;
    int closing;       /* in directory_close: a lost connection is not retried */
    int republish_due; /* the turn calls the republish hook */
    unsigned failures; /* failed attempts since the last up, for the log */
    uint32_t backoff_ms;
    unsigned inflight;     /* commands sent and not answered */
    uint64_t progress_ms;  /* when the last reply came, or the first command of a burst left */
    uint64_t last_warn_ms; /* when a failed command was last logged */
    char why[256];         /* why this side gave the connection up */

    char events_last[48]; /* the id of the last event read ("" before the first read) */
    int events_reading;   /* an XREAD (or an XREVRANGE) is out */
    uint64_t
        events_checked_ms; /* when the stream's last entry was last compared (EVENTS_CHECK_MS) */
    struct heard *heard;   /* deletes read, for the turn to deliver */
    size_t nheard;

    int leaving;                 /* in directory_leave: nothing is published or retried */
    int left;                    /* the leave is over: its callback is due */
    void (*leave_cb)(void *arg); /* directory_leave's, until called */
    void *leave_arg;
    uint64_t leave_deadline_ms;
    struct loop_timer leave_timer;

    struct pubop *queue; /* [queue_head, queue_len) are still to be sent */
    size_t queue_head, queue_len, queue_cap;
    uint64_t queue_sent_ms; /* when the queue was last written (loop_now_ms) */
    idmap owed; /* ids withdrawn (or unrelayed) while down (value: dir_owe's mark), sent before
                 * the next republish */
    struct request *pending;
    struct request *done, **done_tail;
    size_t done_len;
    idmap conflicts;   /* id -> the digest (DIGEST_LEN bytes) of this node's copy that a
                        * publication found in conflict: never published again (dir_conflict_*) */
    idmap gens;        /* id -> the put of this node's copy (a hash of its gen, in the pointer), as
                        * the record named it in answer to its publication (dir_gen_*) */
    uint64_t gen_next; /* publications sent by this run: the n of the gens it proposes */
    idmap fetched;     /* id -> struct fetched_put: the put a copy being sealed was fetched by,
                        * which its publication proposes (directory_fetched) */
    idmap holders;     /* id -> struct cached_holders */
    idmap nodes;       /* node_cache_key(node id) -> struct cached_node */
    struct directory_counters counters;
};

/* dir_util.c: arrays and timers */
/* [s, end) percent-decoded (%XX) into out (cap bytes with its NUL): 0, or -1 when an escape
 * is malformed, it decodes to a NUL, or it does not fit (a URL's user and password, a
 * location's fields). */
int dir_percent_decode(const char *s, const char *end, char *out, size_t cap);
/* Doubles an array's capacity (*cap elements of elem bytes). NULL, the array unchanged, when
 * out of memory. */
void *dir_grow(void *array, size_t *cap, size_t elem);
/* Arms t; a timer heap that cannot grow (the process is out of memory) is logged. */
void dir_arm(struct directory *d, struct loop_timer *t, uint64_t deadline_ms);
/* Has the turn timer run the deferred work (hook, publications, answers) as soon as it can. */
void dir_turn_soon(struct directory *d);
/* Sends up to FLUSH_BATCH queued operations, pipelined, and leaves the rest to the next turn;
 * drops them all when the directory is not up (dir_conn.c). */
void dir_queue_flush(struct directory *d);
/* Has the turn run by deadline_ms, or sooner if it is due sooner already. */
void dir_turn_by(struct directory *d, uint64_t deadline_ms);

/* dir_redis.c: keys, replies, failed commands */
void dir_entry_key(char key[NODE_KEY_MAX], const char *node_id);
void dir_held_key(char key[HELD_KEY_MAX], const char *node_id);
void dir_holders_key(char key[OBJ_KEY_MAX], const ferry_id *id);
/* A string reply into out (cap bytes with the NUL); 0 when not a string, too long, or not
 * printable ASCII. */
int dir_string_copy(char *out, size_t cap, const redisReply *v);
/* A string reply of only digits of base (10 or 16) that fits a u64, into *out; 0 otherwise. */
int dir_reply_u64(const redisReply *v, int base, uint64_t *out);
/* A string reply of DIGEST_HEX hex characters into out; 0 when it is not one. */
int dir_reply_digest(const redisReply *v, uint8_t out[DIGEST_LEN]);
/* The error a reply reports, also among its elements; NULL when none. */
const char *dir_reply_error(const redisReply *r);
/* dir_reply_error, or "unexpected reply" when the reply holds no error. */
const char *dir_reply_why(const redisReply *r);
/* Counts a failed command, and logs it at most once per WARN_INTERVAL_MS. */
void dir_command_failed(struct directory *d, const char *what, const char *why);
/* What the directory refuses to believe (or replaced), of kind k: counted in *count, and
 * logged with the count at most once per DISTRUST_INTERVAL_MS. */
void dir_distrust(struct directory *d, enum distrust k, uint64_t *count, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A key of the wrong type met (what: "ferry:held:x (a string): replaced"): counted, logged. */
void dir_bad_key(struct directory *d, const char *what);
/* 1 when a reply is Redis's WRONGTYPE error. */
int dir_wrongtype(const redisReply *r);

/* dir_sign.c: signatures under the secret, in hex; each FERRY_ESYS when OpenSSL fails */
/* n's: over id, inc, addr and its transports sorted by name. */
int dir_node_sign(const struct directory *d, const struct directory_node *n, char hex[DIR_SIG_HEX]);
/* An object record's: over the id (hex), size and digest, the texts as stored. */
int dir_record_sign(const struct directory *d, const char *hex_id, const char *size,
                    const char *digest, char hex[DIR_SIG_HEX]);
/* A heartbeat's: over the node's id, its inc and the time of the beat (the texts as stored). */
int dir_beat_sign(const struct directory *d, const char *node_id, const char *inc, const char *beat,
                  char hex[DIR_SIG_HEX]);
/* A delete event's: over type, id, node, inc, t, root and gen ("ferry event 3"); without a gen,
 * over the others ("ferry event 2", as before puts had one). */
int dir_event_sign(const struct directory *d, const struct dir_event *e, char hex[DIR_SIG_HEX]);
/* 1 when sig is expect (a signature just made), compared in constant time. */
int dir_sig_matches(const char expect[DIR_SIG_HEX], const char *sig);

/* dir_config.c: the configuration */
/* Takes cfg into d, with its defaults, draws this run's incarnation and parses the URL (which
 * resolves host names: it may block). FERRY_EINVAL, FERRY_ESYS. */
int dir_configure(struct directory *d, const struct directory_config *cfg);

/* dir_cache.c: the caches */
void dir_cache_clear(idmap *m);
void dir_node_cache_key(const char *node_id, ferry_id *key);
const struct directory_node *dir_node_cached(const struct directory *d, const char *node_id);
/* 1 when this node has read node_id's entry (live, and signed when there is a secret) since
 * its node cache was last emptied, whether or not the entry is still trusted: for ordering. */
int dir_node_seen(const struct directory *d, const char *node_id);
void dir_node_remember(struct directory *d, const struct directory_node *node);
void dir_holders_remember(struct directory *d, const struct request *r);
void dir_holders_drop(struct cached_holders *h, const char *node_id);
int dir_answer_from_cache(const struct directory *d, struct request *r);

/* dir_request.c: requests and commands */
struct request *dir_request_new(int kind, directory_answer_fn *cb, void *arg);
void dir_request_free(struct request *r);
void dir_done_push(struct directory *d, struct request *r);
struct request *dir_done_pop(struct directory *d);
void dir_pending_add(struct directory *d, struct request *r);
void dir_request_settle(struct directory *d, struct request *r);
void dir_request_fail(struct directory *d, struct request *r, int status);
void dir_cancel_in(struct request *list, void *arg);
void dir_deliver(struct directory *d);
int dir_send_command(struct directory *d, redisCallbackFn *fn, void *priv, int argc,
                     const char **argv);
struct directory *dir_reply_begin(redisAsyncContext *ac, const redisReply *reply);
void dir_drop(struct directory *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dir_check_reply(struct directory *d, const redisReply *reply, const char *what);
void dir_on_checked(redisAsyncContext *ac, void *reply, void *priv);

/* dir_lookup.c: lookups and listings */
enum dir_entry { DIR_ENTRY_MISSING, DIR_ENTRY_UNSIGNED, DIR_ENTRY_OK };
/* A node entry (a reply to HGETALL) parsed into node (see dir_lookup.c). */
enum dir_entry dir_parse_entry(const struct directory *d, const redisReply *r,
                               struct directory_node *node);
/* Counts and logs a node entry not signed with our secret. */
void dir_entry_refused(struct directory *d, const char *id);
void dir_lookup_start(struct directory *d, struct request *r);
void dir_nodes_start(struct directory *d, struct request *r);

/* dir_queue.c: copies refused as conflicts. Remembers this node's copy of id (its digest) as
 * refused: publications of it are not sent again while it stays (a writer of Redis who deletes
 * the record and this node's entry must not have it recorded at the republish that follows). */
void dir_conflict_remember(struct directory *d, const ferry_id *id,
                           const uint8_t digest[DIGEST_LEN]);
/* 1 when the copy of id with this digest was refused (counted in conflicts_unlisted); a copy
 * of other content is forgotten (0). */
int dir_conflict_kept(struct directory *d, const ferry_id *id, const uint8_t digest[DIGEST_LEN]);

/* dir_queue.c: the puts of this node's copies. Keeps gen (a well-formed gen text; else
 * nothing) as the put of this node's copy of id. */
void dir_gen_remember(struct directory *d, const ferry_id *id, const char *gen);
/* 1 when this node's copy of id is of a known put other than gen. */
int dir_gen_other(const struct directory *d, const ferry_id *id, const char *gen);
/* This node's copy of id is gone (or of no known put). */
void dir_gen_forget(struct directory *d, const ferry_id *id);
/* The gen a publication of id with this digest proposes for a record it makes, into gen: the
 * put the copy was fetched by (taken: once), else a new one of this run. */
void dir_gen_propose(struct directory *d, const ferry_id *id, const uint8_t digest[DIGEST_LEN],
                     char gen[DIRECTORY_GEN_MAX + 1]);
/* 1 when text has the shape of a gen: "<digits>-<digits>", at most DIRECTORY_GEN_MAX long. */
int dir_gen_valid(const char *text);

/* dir_script.c: the scripts and their uses */
enum dir_script {
    SCRIPT_PUBLISH,
    SCRIPT_BATCH,
    SCRIPT_CLEANUP,
    SCRIPT_DELETE,
    SCRIPT_FIX,
    SCRIPT_RELAY,
    SCRIPT_UNRELAY,
    SCRIPT_LOOKUP,
    N_SCRIPTS
};
int dir_scripts_init(void);
int dir_scripts_load(struct directory *d);
/* Every script answers {bad keys, result...}: the keys of the wrong type it met are counted
 * and logged; the result (the reply's elements from 1 on) into *res and *n. 0 when the reply
 * is not of that shape. */
int dir_script_reply(struct directory *d, const redisReply *rep, redisReply ***res, size_t *n);
/* Replaces key (DEL) unless it is of type (hash, set, stream) or absent: for a reply that
 * said WRONGTYPE. */
void dir_fix_key(struct directory *d, const char *key, const char *type);
/* Sends the first of ops[0..n), or the publications and withdrawals it begins with (up to
 * PUBLISH_BATCH) as one script: how many were sent, or FERRY_ENOMEM, FERRY_ESYS,
 * FERRY_EDIRECTORY. */
int dir_send_pubops(struct directory *d, const struct pubop *ops, size_t n);
void dir_claim_start(struct directory *d, struct request *r, uint64_t size,
                     const uint8_t digest[DIGEST_LEN]);
void dir_delete_start(struct directory *d, struct request *r, const uint8_t root[DIGEST_LEN],
                      const char *gen);
void dir_relay_start(struct directory *d, struct request *r, uint64_t size,
                     const uint8_t digest[DIGEST_LEN]);
/* Sends the lookup script for id (the record, and up to entries of its holders' node entries:
 * lookup_lua), fn(priv) to read its reply. */
int dir_lookup_send(struct directory *d, const ferry_id *id, unsigned entries, redisCallbackFn *fn,
                    void *priv);
int dir_cleanup_send(struct directory *d, const char *keep, redisCallbackFn *fn);
/* dir_conn.c: removes what earlier incarnations left, then registers. */
void dir_cleanup_start(struct directory *d);
/* dir_owner.c: looks whether a live node uses our id; then(d) when none does. */
void dir_owner_check(struct directory *d, void (*then)(struct directory *d));
void dir_on_owner_timer(struct loop *l, struct loop_timer *t);
/* Stops the looks and the probe (a lost connection, a close). */
void dir_owner_stop(struct directory *d);
/* From the turn: tells hooks.id_taken of a refusal, once. */
void dir_owner_deliver(struct directory *d);
/* The reply to a cleanup batch: its ids taken and fields removed; 0 when it is not one. */
int dir_cleanup_reply(struct directory *d, const redisReply *rep, uint64_t *taken,
                      uint64_t *removed);

/* dir_events.c: the events stream and leaving */
void dir_events_start(struct directory *d);
void dir_events_deliver(struct directory *d);
void dir_on_events_timer(struct loop *l, struct loop_timer *t);
void dir_leave_start(struct directory *d);
void dir_leave_finish(struct directory *d);
void dir_leave_deliver(struct directory *d);
void dir_on_leave_timer(struct loop *l, struct loop_timer *t);

/* dir_sentinel.c: finding the master */
int dir_sentinel_ask(struct directory *d);
int dir_sentinel_check_role(struct directory *d);
int dir_sentinel_next(struct directory *d);

/* dir_queue.c: the publication queue */
/* Queues op; FERRY_EDIRECTORY when not up or leaving, FERRY_ENOMEM. */
int dir_queue_push(struct directory *d, const struct pubop *op);
/* Empties the queue; the requests among what was not sent fail with FERRY_EDIRECTORY. */
void dir_queue_drop(struct directory *d);

/* dir_conn.c: the connection */
/* Keeps a withdrawal (OWED_WITHDRAW) or a partial holder's (OWED_UNRELAY) of id that found the
 * directory down for the next connection, at most OWED_MAX ids. */
#define OWED_WITHDRAW 1
#define OWED_UNRELAY 2
void dir_owe(struct directory *d, const ferry_id *id, int bit, const char *what);
/* What was owed for id as bit is not any more (a relay registers the field anew). */
void dir_owe_clear(struct directory *d, const ferry_id *id, int bit);
void dir_on_turn(struct loop *l, struct loop_timer *t);
void dir_on_heartbeat(struct loop *l, struct loop_timer *t);
void dir_connect_start(struct directory *d);
void dir_on_reconnect(struct loop *l, struct loop_timer *t);
void dir_on_flush(struct loop *l, struct loop_timer *t);
void dir_on_watchdog(struct loop *l, struct loop_timer *t);

#endif
