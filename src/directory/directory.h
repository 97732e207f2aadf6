/*
 * directory.h - the cluster directory: which nodes are alive (and how to reach them), which
 * nodes hold which sealed objects, and what content each id has; kept in a Redis server reached
 * with hiredis's async API on the daemon's event loop (no thread of its own).
 *
 * Redis schema (DB from the URL):
 *   ferry:node:<node-id>  hash {addr, inc, t:<transport> = its address, one per transport,
 *                         sig}, with a TTL the node refreshes by heartbeat: a node that dies
 *                         disappears when the TTL runs out (10 s by default); one that leaves
 *                         cleanly deletes it
 *   ferry:obj:<40 hex>    hash {size, digest, sig, gen, h:<node-id> = incarnation} - the content of
 *                         the id's first seal (size in decimal, digest: the 64-hex SHA-256
 *                         root of common/digest.h) and its holders; gone with its last holder
 *   ferry:held:<node-id>  set of the ids (hex) the node published: what a restart or a clean
 *                         leave removes, in O(objects of that node)
 *   ferry:events          stream of cluster-wide deletes {type del, id, node, inc, t, root,
 *                         gen (the put deleted, when known), sig}, capped; t is the deleting node's
 * clock (ms since the epoch), rising with each event of its run; root the 64-hex digest of the
 *                         content deleted (all zeros: none recorded): a node drops only a copy
 *                         of that content (the deleted hook compares). A stream whose last
 *                         entry is below a node's read cursor (deleted, made anew) is read again
 *                         from its start
 *
 * Trust. With a cluster secret (directory_config.secret), sig is HMAC-SHA256 under it, in hex,
 * over the entry's fields (each after its length, behind a label naming the kind): a node
 * entry's id, inc, addr and transports; an object record's id, size and digest (the texts as
 * stored); an event's type, id, node, inc, t, root and gen (when it has one; "ferry event 3",
 * else "ferry event 2"). A node with a secret believes only what
 * carries a valid one, so that whoever can write to Redis but does not know the secret cannot
 * invent nodes or move one (unsigned_entries), record a size or digest for an id
 * (unsigned_records: lookups then give no holder, each left out with why, and no content), or
 * delete objects (unsigned_events). A signed event is taken once: one whose t is not later
 * than the last taken from its node's run, or is from before this run began, is refused
 * (stale_events), so a genuine delete copied into the stream again deletes nothing; and, as it
 * names the content it deletes, one withheld and put back after the id was put again with
 * other content spares that content (the owner counts it). A holder
 * field h:<node>=inc counts only while the node's signed entry runs that incarnation. A
 * publication that meets a record not signed with our secret replaces it (records_repaired).
 * Without a secret nothing is signed nor checked: the cluster is open to whoever writes Redis.
 * With or without, a key of the wrong type (a string where a hash, set or stream belongs) is
 * counted (directory_bad_keys), logged, and replaced when it is one this node writes (its
 * index, an object's record, the events stream), left alone when it is another node's.
 *
 * Incarnations: each run of a node has its own (directory_open makes it: the start time in ms
 * times 4096 plus 12 random bits, so it grows across restarts and tells when the run began). A
 * holder entry names the incarnation that published it; an entry whose node is gone or runs
 * another incarnation is never offered (lookups give it in `gone`, with why). A node's first
 * connection removes what its earlier incarnations left, before it registers; first, an entry
 * under its id that another incarnation keeps refreshing means a live node uses the id, and
 * this one refuses it (hooks.id_taken) rather than take it over (dir_owner.c).
 *
 * Puts: a record's gen names the put it records, "<incarnation>-<n>" of the node whose
 * publication made the record (n counts that run's publications), or the put a fetched copy was
 * fetched by (directory_fetched); a publication of the same content joins the put (it is
 * answered with gen, which the node keeps for its copy), and the
 * record goes with its last holder or a cluster-wide delete, so that the next publication of
 * the id, even of the same bytes, starts another put. A delete event names the put it deletes
 * (gen), and a node whose copy is of another put keeps it (deletes_of_earlier_puts): a genuine
 * event withheld and put back later cannot delete a later put of the same content.
 *
 * One content per id: a publication carries the object's size and digest. The first one
 * records them; one with other content while a live holder has the recorded content is refused
 * (counted in id_conflicts, logged with both nodes, and the copy stays unlisted). Lookups give
 * the recorded content, so that a fetch takes only bytes that match it. directory_claim does
 * the same check for a seal that waits for it (ferryd --strict-ids).
 *
 * Publications and withdrawals are queued and written pipelined (Lua scripts, EVALSHA, up to
 * 64 in one), so no Redis round trip sits on the path of a local seal: at the end of the loop
 * turn, or, within a millisecond of the last write, when that millisecond ends (a stream of
 * puts costs Redis one script per millisecond, not one per put); a lookup writes the queue
 * before it. After the
 * connection drops (or Redis restarts, or a Sentinel fails over), the module reconnects with
 * backoff, re-registers and asks its owner to republish everything it holds.
 *
 * Lookups consult a local cache first (holders per id, entries per node); the engine drops a
 * cache entry when it proves wrong (directory_forget_holder, directory_forget_node).
 *
 * Not thread-safe: the loop's thread only.
 */
#ifndef FERRY_DIRECTORY_H
#define FERRY_DIRECTORY_H

#include <stddef.h>
#include <stdint.h>

#include "common/digest.h"
#include "ferry.h"
#include "loop/loop.h"

#define DIRECTORY_NODE_ID_MAX 63
#define DIRECTORY_ADDR_MAX 127
#define DIRECTORY_XPORTS 4 /* transports a node entry lists, at most */
#define DIRECTORY_XPORT_NAME_MAX 15
#define DIRECTORY_XPORT_ADDR_MAX 639
#define DIRECTORY_WHY_MAX 95 /* a gone holder's reason */
#define DIRECTORY_SECRET_MAX 1024
/* A put's generation as text, "<incarnation>-<n>" (see "Puts" above), at most this long. */
#define DIRECTORY_GEN_MAX 47

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
    uint64_t inc;                      /* its incarnation (0: unknown) */
    /* Lookups with DIRECTORY_PARTIAL: 0 for a holder of the whole object; else the node is
     * receiving it (a partial holder), and this is its place in the order in which the
     * object's receivers began (directory_relay), from 1. */
    uint64_t seq;
    struct directory_xport xp[DIRECTORY_XPORTS];
    uint32_t nxp;
};

/* A holder left out of a lookup's answer, and why ("gone (its run of 20:31:07 ended)"). */
struct directory_gone {
    char id[DIRECTORY_NODE_ID_MAX + 1];
    char why[DIRECTORY_WHY_MAX + 1];
};

/* The address n published for transport, or NULL. */
const char *directory_node_addr(const struct directory_node *n, const char *transport);
/* Adds (or replaces) n's address for transport. FERRY_EINVAL when a field is too long or n
 * lists DIRECTORY_XPORTS transports already. */
int directory_node_set(struct directory_node *n, const char *transport, const char *addr);
/* The names of n's transports, comma-separated ("tcp,fabric"), into buf. */
void directory_node_names(const struct directory_node *n, char *buf, size_t len);
/* When incarnation inc began, as "YYYY-MM-DD HH:MM:SS" (UTC), into buf. */
void directory_inc_time(uint64_t inc, char *buf, size_t len);

/* A location's text at most, with its NUL (dir_location.c; FERRY_LOCATION_MAX). */
#define DIRECTORY_LOCATION_MAX 3072
/* This node's location, "ferry1;ID;INC;ADDR;NAME=XADDR...[;#SIG]" (fields escaped), into buf: what
 * a reference carries so that a fetch elsewhere asks this node first. FERRY_EINVAL when it does not
 * fit len (fields are %XX-escaped: any text can be one). */
int directory_location(const struct directory *d, char *buf, size_t len);
/* A location into *node (seq 0): FERRY_EINVAL when malformed, FERRY_EAUTH when a cluster
 * secret is set and it is not signed with it. Believed as far as the node's entry would be. */
int directory_location_parse(const struct directory *d, const char *text,
                             struct directory_node *node);

/* The longest password AUTH sends. */
#define DIRECTORY_PASSWORD_MAX 512

struct directory_config {
    const char *url; /* redis://HOST:PORT[/DB] or redis-sentinel://H:P[,H:P...]/MASTER[/DB] */
    /* The password AUTH sends (copied; to the master, not the sentinels), given apart from the
     * URL so that no process listing shows it; NULL: the URL's [USER]:PASSWORD@, if any. The
     * URL may then name the user alone: redis://USER@HOST:PORT. */
    const char *password;
    const uint8_t *secret;      /* the cluster secret (copied), or NULL: entries go unsigned */
    size_t secret_len;          /* at most DIRECTORY_SECRET_MAX */
    struct directory_node self; /* its inc is made by directory_open */
    uint32_t heartbeat_ms;      /* how often the node entry's TTL is refreshed (0: default) */
    uint32_t ttl_ms;            /* the node entry's TTL (0: default); at least 2 heartbeats */
    uint32_t timeout_ms; /* a request unanswered this long means Redis is down (0: default) */
};
/* The defaults ride out a busy host: a daemon starved of CPU, or a link whose queue drops a
 * heartbeat's packets (TCP retransmits after 200 ms, then 400, 800, ...), keeps its entry for
 * ten seconds, and Redis answering in seconds is slow, not down. The cost: a node that dies
 * without leaving stays listed that long (its peers' connections fail at once meanwhile, and a
 * node restarted on its host takes its id back at once: see dir_owner.c). Every node of a
 * cluster should have the same heartbeat and TTL: a restart judges an entry by its own. */
#define DIRECTORY_HEARTBEAT_MS 1000
#define DIRECTORY_TTL_MS 10000
#define DIRECTORY_TIMEOUT_MS 5000
/* FERRY_EINVAL, saying why, when a TTL of ttl_ms is shorter than two heartbeats of
 * heartbeat_ms (each 0: its default); 0 otherwise. For a check before anything is opened. */
int directory_ttl_short(uint32_t heartbeat_ms, uint32_t ttl_ms);

struct directory_hooks {
    /* Called after every (re)connection, once the node is registered: the owner calls
     * directory_publish for every sealed object it holds. */
    void (*republish)(void *ctx);
    /* Another node deleted id cluster-wide (node names it), the content whose digest is root
     * (all zeros when the event named none): drop the local copy if it has that content (a
     * copy of other content is a later life of the id, or another node's: it stays), fail the
     * fetches of it. */
    void (*deleted)(void *ctx, const ferry_id *id, const uint8_t root[DIGEST_LEN],
                    const char *node);
    /* At the first connection: a live node (its entry refreshed by another incarnation) uses
     * this node's id; why names it. The directory registers nothing and retries nothing: the
     * owner stops the node. NULL: the node stays unregistered. */
    void (*id_taken)(void *ctx, const char *why);
    void *ctx;
};

struct directory_counters {
    uint64_t lookups;    /* holder lookups sent to Redis */
    uint64_t cache_hits; /* holder lookups answered from the cache */
    uint64_t reconnects; /* connections re-established after a loss */
    uint64_t published, withdrawn;
    uint64_t publish_batches;    /* scripts of publications and withdrawals (PUBLISH_BATCH each) */
    uint64_t id_conflicts;       /* publications refused: the id has other content elsewhere */
    uint64_t deletes_heard;      /* cluster-wide deletes read from the events stream */
    uint64_t cleaned;            /* entries of earlier incarnations removed at start or leave */
    uint64_t unsigned_entries;   /* node entries ignored: not signed with our secret */
    uint64_t unsigned_records;   /* object records not believed: not signed with our secret */
    uint64_t records_repaired;   /* such records this node's publications replaced */
    uint64_t unsigned_events;    /* delete events ignored: not signed with our secret */
    uint64_t stale_events;       /* signed delete events refused: taken before, or older */
    uint64_t bad_keys;           /* keys of the wrong type met (replaced when ours) */
    uint64_t conflicts_unlisted; /* publications not sent: that copy was refused as a conflict */
    uint64_t deletes_of_earlier_puts; /* deletes heard of another put than the copy here's */
    uint64_t replayed_entries; /* entries under our id without a heartbeat signed since start */
    uint64_t lapses; /* heartbeats that found this node's entry expired: published again */
    uint64_t partial_holders_skipped; /* partial holder fields past a lookup's bound */
    uint64_t errors;                  /* failed commands and lost connections */
};

/* What a request gives its callback; valid only during the call. */
struct directory_answer {
    int status; /* 0, FERRY_EDIRECTORY (Redis not reachable), FERRY_EEXIST (claim), ENOMEM */
    const ferry_id *id; /* lookups, claims, deletes: the id asked about */
    /* Lookups: the live holders other than this node; listings: the live nodes. */
    const struct directory_node *nodes;
    size_t n;
    /* Lookups: holders left out (dead, or of an ended incarnation), with why. */
    const struct directory_gone *gone;
    size_t ngone;
    /* Lookups: the content recorded for the id (has_content 0: none recorded). Claims that
     * failed with FERRY_EEXIST: the content recorded, and a node (other) that holds it. */
    int has_content;
    uint64_t size;
    uint8_t digest[DIGEST_LEN];
    const char *other;
    int cached;     /* lookups: answered from this node's cache (holders since may be missing) */
    uint64_t count; /* deletes: the holders the id was removed from; relays: the seq */
    /* Lookups: the generation of the put the record is ("": none named). */
    char gen[DIRECTORY_GEN_MAX + 1];
};

typedef void directory_answer_fn(void *arg, const struct directory_answer *a);

/* 0 when url (with password, as directory_config.password) is what directory_open takes, else
 * FERRY_EINVAL with the reason (nothing is connected: for checking a command line before
 * anything is reserved). */
int directory_check_url(const char *url, const char *password);

/* Parses cfg->url, makes this run's incarnation and starts connecting (asynchronously: a Redis
 * that is down at start is retried like a lost one). FERRY_EINVAL (with a reason) for a bad
 * URL or node id. */
int directory_open(struct directory **out, struct loop *l, const struct directory_config *cfg,
                   const struct directory_hooks *hooks);
/* Withdraws nothing (the TTL retires the node: see directory_leave), closes, frees. Pending
 * callbacks are not called. */
void directory_close(struct directory *d);

int directory_connected(const struct directory *d);
/* Where the directory is, for people: HOST:PORT/DB or the master's name (never credentials). */
const char *directory_where(const struct directory *d);
const struct directory_counters *directory_counters(const struct directory *d);
/* While the directory is down, why its last connection ended or could not be used ("AUTH
 * refused: WRONGPASS ..."); "" while it is up, or before a first failure. */
const char *directory_down_why(const struct directory *d);
/* This run's incarnation. */
uint64_t directory_incarnation(const struct directory *d);

/* Queue a publication (with the object's size, data and metadata, and digest) or a
 * withdrawal of this node as a holder of id. */
void directory_publish(struct directory *d, const ferry_id *id, uint64_t size,
                       const uint8_t digest[DIGEST_LEN]);
void directory_withdraw(struct directory *d, const ferry_id *id);
/* A copy of id with this content, fetched by a lookup whose record was put gen, is being
 * sealed: its publication is of that put, even when the record is gone by then (a delete
 * under way, whose event then drops it), rather than starting another. */
void directory_fetched(struct directory *d, const ferry_id *id, const uint8_t digest[DIGEST_LEN],
                       const char *gen);

/* Every callback runs later, never from within the call that asked; each returns 0 or
 * FERRY_ENOMEM. Without a connection to Redis the answer is FERRY_EDIRECTORY. */

/* Looks up the holders of id and its recorded content; from the cache unless fresh (flags:
 * DIRECTORY_FRESH) is set. With DIRECTORY_PARTIAL (fresh too) the live partial holders come
 * too, after the whole ones, each with its seq. */
#define DIRECTORY_FRESH 1
#define DIRECTORY_PARTIAL 2
int directory_lookup(struct directory *d, const ferry_id *id, int fresh, directory_answer_fn *cb,
                     void *arg);
/* Records this node as a partial holder of id (it is receiving it, and serves the ranges it
 * has), if the record is this content: answered with a.count = its seq (the receivers of id
 * before it have lower ones), 0 when the record is another content or missing. Withdrawn with
 * directory_unrelay (or by the node's next start). */
int directory_relay(struct directory *d, const ferry_id *id, uint64_t size,
                    const uint8_t digest[DIGEST_LEN], directory_answer_fn *cb, void *arg);
void directory_unrelay(struct directory *d, const ferry_id *id);
/* The live nodes, this one included. */
int directory_nodes(struct directory *d, directory_answer_fn *cb, void *arg);
/* Publishes this node as a holder of id with this content now, unless another live node holds
 * other content for it: then FERRY_EEXIST with that node and content. */
int directory_claim(struct directory *d, const ferry_id *id, uint64_t size,
                    const uint8_t digest[DIGEST_LEN], directory_answer_fn *cb, void *arg);
/* Deletes id cluster-wide: its entry goes, and every node hears of it (the deleted hook), with
 * root, the content deleted (a node drops only a copy of that content; all zeros: none), unless
 * its copy is of another put than gen (a lookup's a.gen: the put the record is; NULL or "": any
 * put of that content). */
int directory_delete(struct directory *d, const ferry_id *id, const uint8_t root[DIGEST_LEN],
                     const char *gen, directory_answer_fn *cb, void *arg);
/* Leaves the cluster: the node entry goes at once (the node leaves every listing), then its
 * holdings, as far as they go before the deadline (ms from now); the rest goes at the next
 * start. cb(arg) when done or given up (at once without a connection). The directory stays
 * open (close it after). */
void directory_leave(struct directory *d, uint32_t deadline_ms, void (*cb)(void *arg), void *arg);

/* Cancels the callbacks of pending requests made with arg (its owner is going away). */
void directory_cancel(struct directory *d, void *arg);

/* The holder proved wrong (it answered that it has no such object): forget it for id. */
void directory_forget_holder(struct directory *d, const ferry_id *id, const char *node_id);
/* The node proved unreachable: forget its cached entry and every cached holding of it. */
void directory_forget_node(struct directory *d, const char *node_id);

#endif
