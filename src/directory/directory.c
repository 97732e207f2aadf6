/*
 * directory.c - the cluster directory on Redis (contract and schema in directory.h), through
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
 */
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
#define ARGV_MAX 8

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

/* ---- small helpers ---- */

/* Doubles an array's capacity (*cap elements of elem bytes). NULL, the array unchanged, when
 * out of memory. */
static void *grow(void *array, size_t *cap, size_t elem)
{
    size_t n = *cap ? *cap * 2 : 8;
    void *p = realloc(array, n * elem);

    if (p)
        *cap = n;
    return p;
}

/* Arms t; a timer heap that cannot grow (the process is out of memory) is logged. */
static void arm(struct directory *d, struct loop_timer *t, uint64_t deadline_ms)
{
    if (loop_timer_start(d->loop, t, deadline_ms) < 0)
        log_error("directory: %s", ferry_errmsg());
}

/* Has the turn timer run the deferred work (hook, publications, answers) as soon as it can. */
static void turn_soon(struct directory *d)
{
    if (d->turn.heap_index == SIZE_MAX)
        arm(d, &d->turn, loop_now_ms());
}

static void entry_key(char key[NODE_KEY_MAX], const char *node_id)
{
    snprintf(key, NODE_KEY_MAX, NODE_PREFIX "%s", node_id);
}

static void holders_key(char key[OBJ_KEY_MAX], const ferry_id *id)
{
    char hex[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(id, hex);
    snprintf(key, OBJ_KEY_MAX, OBJ_PREFIX "%s", hex);
}

/* Copies a string reply into out (cap bytes with the NUL). 0 when it is not a string, holds a
 * NUL or does not fit. */
static int string_copy(char *out, size_t cap, const redisReply *v)
{
    if (v->type != REDIS_REPLY_STRING || v->len >= cap || memchr(v->str, '\0', v->len))
        return 0;
    memcpy(out, v->str, v->len);
    out[v->len] = '\0';
    return 1;
}

const char *directory_node_addr(const struct directory_node *n, const char *transport)
{
    for (uint32_t i = 0; i < n->nxp; i++)
        if (strcmp(n->xp[i].name, transport) == 0)
            return n->xp[i].addr;
    return NULL;
}

int directory_node_set(struct directory_node *n, const char *transport, const char *addr)
{
    uint32_t i = 0;

    if (strlen(transport) > DIRECTORY_XPORT_NAME_MAX || strlen(addr) > DIRECTORY_XPORT_ADDR_MAX)
        return err_set(FERRY_EINVAL, "directory: transport %.16s: name or address too long",
                       transport);
    while (i < n->nxp && strcmp(n->xp[i].name, transport) != 0)
        i++;
    if (i == DIRECTORY_XPORTS)
        return err_set(FERRY_EINVAL, "directory: more than %d transports", DIRECTORY_XPORTS);
    snprintf(n->xp[i].name, sizeof(n->xp[i].name), "%s", transport);
    snprintf(n->xp[i].addr, sizeof(n->xp[i].addr), "%s", addr);
    if (i == n->nxp)
        n->nxp++;
    return 0;
}

void directory_node_names(const struct directory_node *n, char *buf, size_t len)
{
    size_t at = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < n->nxp && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? "," : "", n->xp[i].name);
}

/* The error a reply reports, also among its elements (EXEC's replies); NULL when none. */
static const char *reply_error(const redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        return r->str;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        if (r->element[i]->type == REDIS_REPLY_ERROR)
            return r->element[i]->str;
    }
    return NULL;
}

/* A failed command: counted, and logged at most once per WARN_INTERVAL_MS (a Redis refusing
 * every write, e.g. for want of memory, would flood the log). */
static void command_failed(struct directory *d, const char *what, const char *why)
{
    uint64_t now = loop_now_ms();

    d->counters.errors++;
    if (now - d->last_warn_ms < WARN_INTERVAL_MS)
        return;
    d->last_warn_ms = now;
    log_warn("directory: %s failed: %s (%" PRIu64 " errors so far)", what, why, d->counters.errors);
}

/* ---- caches ---- */

/* Frees a cache's values and the map. */
static void cache_clear(idmap *m)
{
    size_t pos = 0;
    void *v;

    while ((v = idmap_next(m, &pos, NULL)))
        free(v);
    idmap_free(m);
}

/* The node cache is an idmap keyed by a 128-bit hash of the node id; entries keep the id,
 * so that a collision reads as a miss. */
static void node_cache_key(const char *node_id, ferry_id *key)
{
    XXH128_hash_t h = XXH3_128bits(node_id, strlen(node_id));

    memset(key, 0, sizeof(*key));
    memcpy(key->bytes, &h.low64, sizeof(h.low64));
    memcpy(key->bytes + sizeof(h.low64), &h.high64, sizeof(h.high64));
}

/* The node's cached entry while it is trusted, else NULL. */
static const struct directory_node *node_cached(const struct directory *d, const char *node_id)
{
    ferry_id key;
    const struct cached_node *c;

    node_cache_key(node_id, &key);
    c = idmap_get(&d->nodes, &key);
    if (!c || strcmp(c->node.id, node_id) != 0 || c->expires_ms <= loop_now_ms())
        return NULL;
    return &c->node;
}

/* Caches a node's entry for ttl_ms, as long as Redis keeps a dead node's entry: a dead node
 * leaves the answers at most about 2 * ttl_ms after its last heartbeat. */
static void node_remember(struct directory *d, const struct directory_node *node)
{
    ferry_id key;
    struct cached_node *c;

    node_cache_key(node->id, &key);
    c = idmap_get(&d->nodes, &key);
    if (!c) {
        if (d->nodes.count >= NODE_CACHE_MAX)
            cache_clear(&d->nodes);
        c = malloc(sizeof(*c));
        if (!c || idmap_put(&d->nodes, &key, c) < 0) {
            free(c);
            return;
        }
    }
    c->node = *node;
    c->expires_ms = loop_now_ms() + d->ttl_ms;
}

/* Caches the holders a lookup found, replacing what was cached for the id; none found leaves
 * nothing cached (the next lookup asks Redis again). */
static void holders_remember(struct directory *d, const struct request *r)
{
    struct cached_holders *h;

    free(idmap_remove(&d->holders, &r->id));
    if (!r->n)
        return;
    if (d->holders.count >= HOLDER_CACHE_MAX)
        cache_clear(&d->holders);
    h = malloc(sizeof(*h) + r->n * sizeof(h->ids[0]));
    if (!h)
        return;
    h->n = r->n;
    for (size_t i = 0; i < r->n; i++)
        memcpy(h->ids[i], r->nodes[i].id, sizeof(h->ids[i]));
    if (idmap_put(&d->holders, &r->id, h) < 0)
        free(h);
}

/* Removes node_id from a cached holder list. */
static void holders_drop(struct cached_holders *h, const char *node_id)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->ids[i], node_id) == 0) {
            memcpy(h->ids[i], h->ids[--h->n], sizeof(h->ids[i]));
            return;
        }
    }
}

/* Fills r's answer from the cache: 1 when every cached holder of the id has a trusted entry,
 * else 0 (a miss: Redis is asked). */
static int answer_from_cache(const struct directory *d, struct request *r)
{
    const struct cached_holders *h = idmap_get(&d->holders, &r->id);

    if (!h || !h->n)
        return 0;
    r->nodes = calloc(h->n, sizeof(*r->nodes));
    if (!r->nodes)
        return 0;
    r->cap = h->n;
    for (size_t i = 0; i < h->n; i++) {
        const struct directory_node *node = node_cached(d, h->ids[i]);
        if (!node)
            return 0;
        r->nodes[i] = *node;
    }
    r->n = h->n;
    return 1;
}

/* ---- requests ---- */

static struct request *request_new(directory_holders_fn *cb, void *arg)
{
    struct request *r = calloc(1, sizeof(*r));

    if (r) {
        r->cb = cb;
        r->arg = arg;
    }
    return r;
}

static void request_free(struct request *r)
{
    free(r->asked);
    free(r->nodes);
    free(r);
}

static void done_push(struct directory *d, struct request *r)
{
    r->next = NULL;
    *d->done_tail = r;
    d->done_tail = &r->next;
    d->done_len++;
    turn_soon(d);
}

static struct request *done_pop(struct directory *d)
{
    struct request *r = d->done;

    d->done = r->next;
    if (!d->done)
        d->done_tail = &d->done;
    d->done_len--;
    return r;
}

static void pending_add(struct directory *d, struct request *r)
{
    r->next = d->pending;
    if (r->next)
        r->next->pprev = &r->next;
    r->pprev = &d->pending;
    d->pending = r;
}

static int node_compare(const void *a, const void *b)
{
    return strcmp(((const struct directory_node *)a)->id, ((const struct directory_node *)b)->id);
}

/* Sorts a node listing by id and drops duplicates (SCAN may return a key twice). */
static void nodes_sort_unique(struct request *r)
{
    size_t kept = 0;

    qsort(r->nodes, r->n, sizeof(*r->nodes), node_compare);
    for (size_t i = 0; i < r->n; i++) {
        if (!kept || strcmp(r->nodes[kept - 1].id, r->nodes[i].id) != 0)
            r->nodes[kept++] = r->nodes[i];
    }
    r->n = kept;
}

/* One of r's replies has been dealt with: r is answered once none is due any more. */
static void request_settle(struct directory *d, struct request *r)
{
    if (--r->awaiting)
        return;
    *r->pprev = r->next;
    if (r->next)
        r->next->pprev = r->pprev;
    if (r->status == 0 && r->lookup)
        holders_remember(d, r);
    else if (r->status == 0)
        nodes_sort_unique(r);
    done_push(d, r);
}

static void answer_add(struct request *r, const struct directory_node *node)
{
    if (r->n == r->cap) {
        struct directory_node *p = grow(r->nodes, &r->cap, sizeof(*p));
        if (!p) {
            r->status = FERRY_ENOMEM;
            return;
        }
        r->nodes = p;
    }
    r->nodes[r->n++] = *node;
}

static void cancel_in(struct request *list, void *arg)
{
    for (struct request *r = list; r; r = r->next) {
        if (r->arg == arg)
            r->cb = NULL;
    }
}

/* Answers the requests done so far, not those their callbacks add (the next run's). */
static void deliver(struct directory *d)
{
    for (size_t n = d->done_len; n > 0; n--) {
        struct request *r = done_pop(d);
        if (r->cb)
            r->cb(r->arg, r->status, r->nodes, r->n);
        request_free(r);
    }
}

/* ---- commands and replies ---- */

/* Sends one command (NUL-terminated arguments) whose reply goes to fn with priv. 0, or
 * FERRY_EDIRECTORY when there is no connection to send it on. */
static int send_command(struct directory *d, redisCallbackFn *fn, void *priv, int argc,
                        const char **argv)
{
    size_t lens[ARGV_MAX];

    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    if (!d->ac || redisAsyncCommandArgv(d->ac, fn, priv, argc, argv, lens) != REDIS_OK)
        return err_set(FERRY_EDIRECTORY, "directory: not connected to Redis at %s", d->where);
    if (d->inflight++ == 0)
        d->progress_ms = loop_now_ms();
    if (d->watchdog.heap_index == SIZE_MAX)
        arm(d, &d->watchdog, d->progress_ms + d->timeout_ms);
    return 0;
}

/* Every reply callback starts here. A NULL reply means that hiredis is freeing the context:
 * the command failed with the connection. */
static struct directory *reply_begin(redisAsyncContext *ac, const redisReply *reply)
{
    struct directory *d = ac->data;

    if (reply) {
        d->inflight--;
        d->progress_ms = loop_now_ms();
    }
    return d;
}

/* Gives the connection up: hiredis fails what is due and calls ev_cleanup, at once, or when
 * the running reply callback returns if called from one. */
__attribute__((format(printf, 2, 3))) static void drop(struct directory *d, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(d->why, sizeof(d->why), fmt, ap);
    va_end(ap);
    redisAsyncFree(d->ac);
}

/* The reply to a write nobody waits for (publication, heartbeat); priv names the command. */
static void on_checked(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = reply_begin(ac, reply);
    const char *why = reply ? reply_error(reply) : NULL;

    if (why)
        command_failed(d, priv, why);
}

/* The node's entry (copied out of a reply to HGETALL) when it has an address; 0 when it is
 * missing (the node is dead) or unusable. Transports beyond what a node entry holds, and
 * fields too long, are left out. */
static int parse_entry(const redisReply *r, struct directory_node *node)
{
    char xp[DIRECTORY_XPORT_NAME_MAX + 1], addr[DIRECTORY_XPORT_ADDR_MAX + 1];
    size_t pre = strlen(XPORT_FIELD);

    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *field = r->element[i], *value = r->element[i + 1];
        if (field->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(field->str, "addr") == 0) {
            string_copy(node->addr, sizeof(node->addr), value);
        } else if (field->len > pre && strncmp(field->str, XPORT_FIELD, pre) == 0 &&
                   field->len - pre < sizeof(xp) && value->len < sizeof(addr)) {
            snprintf(xp, sizeof(xp), "%s", field->str + pre);
            snprintf(addr, sizeof(addr), "%.*s", (int)value->len, value->str);
            (void)directory_node_set(node, xp, addr);
        }
    }
    return node->addr[0] != '\0';
}

/* A reply to HGETALL ferry:node:<id>, for the oldest node r asked about. */
static void on_node_entry(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct request *r = priv;
    struct directory_node node = {0};

    memcpy(node.id, r->asked[r->asked_head++], sizeof(node.id));
    if (!rep) {
        r->status = FERRY_EDIRECTORY;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        command_failed(d, "HGETALL", rep->str);
    } else if (parse_entry(rep, &node)) {
        node_remember(d, &node);
        if (r->status == 0)
            answer_add(r, &node);
    }
    request_settle(d, r);
}

/* Asks for a node's entry on r's behalf. */
static void ask_node(struct directory *d, struct request *r, const char *node_id)
{
    char key[NODE_KEY_MAX];
    const char *argv[] = {"HGETALL", key};

    if (r->asked_len == r->asked_cap) {
        node_name *p = grow(r->asked, &r->asked_cap, sizeof(*p));
        if (!p) {
            r->status = FERRY_ENOMEM;
            return;
        }
        r->asked = p;
    }
    entry_key(key, node_id);
    if (send_command(d, on_node_entry, r, 2, argv) < 0) {
        r->status = FERRY_EDIRECTORY;
        return;
    }
    snprintf(r->asked[r->asked_len++], sizeof(node_name), "%s", node_id);
    r->awaiting++;
}

/* A member of a holder set: answered from the cache when its entry is trusted there (and the
 * lookup is not fresh), else asked for. */
static void consider_holder(struct directory *d, struct request *r, const redisReply *member)
{
    node_name id;
    const struct directory_node *known;

    if (!string_copy(id, sizeof(id), member) || !id[0] || strcmp(id, d->self.id) == 0)
        return;
    known = r->fresh ? NULL : node_cached(d, id);
    if (known)
        answer_add(r, known);
    else
        ask_node(d, r, id);
}

/* The reply to SMEMBERS ferry:obj:<hex>. */
static void on_members(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct request *r = priv;

    if (!rep) {
        r->status = FERRY_EDIRECTORY;
    } else if (rep->type != REDIS_REPLY_ARRAY) {
        r->status = FERRY_EDIRECTORY;
        command_failed(d, "SMEMBERS", reply_error(rep) ? rep->str : "unexpected reply");
    } else {
        for (size_t i = 0; i < rep->elements && r->status == 0; i++)
            consider_holder(d, r, rep->element[i]);
    }
    request_settle(d, r);
}

static void send_members(struct directory *d, struct request *r)
{
    char key[OBJ_KEY_MAX];
    const char *argv[] = {"SMEMBERS", key};

    holders_key(key, &r->id);
    if (send_command(d, on_members, r, 2, argv) < 0) {
        r->status = FERRY_EDIRECTORY;
        return;
    }
    r->awaiting++;
    d->counters.lookups++;
}

static void on_scan(redisAsyncContext *ac, void *reply, void *priv);

static void send_scan(struct directory *d, struct request *r, const char *cursor)
{
    const char *argv[] = {"SCAN", cursor, "MATCH", NODE_PREFIX "*", "COUNT", SCAN_COUNT};

    if (send_command(d, on_scan, r, 6, argv) < 0) {
        r->status = FERRY_EDIRECTORY;
        return;
    }
    r->awaiting++;
}

static int scan_reply_valid(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_ARRAY;
}

/* A reply to SCAN <cursor> MATCH ferry:node:*: asks for each node's entry, and continues. */
static void on_scan(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct request *r = priv;

    if (!rep) {
        r->status = FERRY_EDIRECTORY;
    } else if (!scan_reply_valid(rep)) {
        r->status = FERRY_EDIRECTORY;
        command_failed(d, "SCAN", reply_error(rep) ? rep->str : "unexpected reply");
    } else {
        const redisReply *keys = rep->element[1];
        char key[NODE_KEY_MAX];
        for (size_t i = 0; i < keys->elements && r->status == 0; i++) {
            if (string_copy(key, sizeof(key), keys->element[i]) &&
                strncmp(key, NODE_PREFIX, strlen(NODE_PREFIX)) == 0 && key[strlen(NODE_PREFIX)])
                ask_node(d, r, key + strlen(NODE_PREFIX));
        }
        if (r->status == 0 && strcmp(rep->element[0]->str, "0") != 0)
            send_scan(d, r, rep->element[0]->str);
    }
    request_settle(d, r);
}

/* Sends r's first command; r is answered from the replies, or at once (through the turn
 * timer) with FERRY_EDIRECTORY when there is no connection. */
static void request_start(struct directory *d, struct request *r)
{
    pending_add(d, r);
    r->awaiting = 1;
    if (r->lookup)
        send_members(d, r);
    else
        send_scan(d, r, "0");
    request_settle(d, r);
}

/* ---- publications ---- */

static int send_publication(struct directory *d, const struct pubop *op)
{
    char key[OBJ_KEY_MAX], *cmd = op->add ? "SADD" : "SREM";
    const char *argv[] = {cmd, key, d->self.id};

    holders_key(key, &op->id);
    if (send_command(d, on_checked, cmd, 3, argv) < 0)
        return FERRY_EDIRECTORY;
    if (op->add)
        d->counters.published++;
    else
        d->counters.withdrawn++;
    return 0;
}

/* Sends up to FLUSH_BATCH queued publications, pipelined, and leaves the rest to the next
 * turn; drops them all when the directory is not up. */
static void flush_queue(struct directory *d)
{
    size_t end =
        d->queue_len - d->queue_head > FLUSH_BATCH ? d->queue_head + FLUSH_BATCH : d->queue_len;

    while (d->up && d->queue_head < end && send_publication(d, &d->queue[d->queue_head]) == 0)
        d->queue_head++;
    if (d->queue_head == end && end < d->queue_len) {
        turn_soon(d);
        return;
    }
    d->queue_head = d->queue_len = 0;
    if (d->queue_cap > QUEUE_KEEP) {
        free(d->queue);
        d->queue = NULL;
        d->queue_cap = 0;
    }
}

static void queue_push(struct directory *d, const ferry_id *id, int add)
{
    if (!d->up)
        return; /* the republish hook restores the truth after the next registration */
    if (d->queue_len == d->queue_cap) {
        struct pubop *p = grow(d->queue, &d->queue_cap, sizeof(*p));
        if (!p) {
            command_failed(d, add ? "publish" : "withdraw", "out of memory");
            return;
        }
        d->queue = p;
    }
    d->queue[d->queue_len].id = *id;
    d->queue[d->queue_len++].add = add;
    turn_soon(d);
}

/* The deferred work: the republish hook, then the queued publications, then the answers. */
static void on_turn(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (d->republish_due) {
        d->republish_due = 0;
        if (d->up && d->hooks.republish)
            d->hooks.republish(d->hooks.ctx);
    }
    flush_queue(d);
    deliver(d);
}

/* ---- the connection ---- */

/* Writes the node's entry and its TTL in one transaction: an entry must never be left without
 * a TTL (by a failure between two commands), or a dead node would stay listed for ever. */
static int send_registration(struct directory *d, redisCallbackFn *done)
{
    char key[NODE_KEY_MAX], ttl[16];
    char fields[DIRECTORY_XPORTS][sizeof(XPORT_FIELD) + DIRECTORY_XPORT_NAME_MAX];
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"}, *del[] = {"DEL", key};
    const char *hset[4 + 2 * DIRECTORY_XPORTS] = {"HSET", key, "addr", d->self.addr};
    const char *pexpire[] = {"PEXPIRE", key, ttl};
    int nhset = 4;

    entry_key(key, d->self.id);
    snprintf(ttl, sizeof(ttl), "%u", (unsigned)d->ttl_ms);
    for (uint32_t i = 0; i < d->self.nxp; i++) {
        snprintf(fields[i], sizeof(fields[i]), "%s%s", XPORT_FIELD, d->self.xp[i].name);
        hset[nhset++] = fields[i];
        hset[nhset++] = d->self.xp[i].addr;
    }
    /* DEL first: the fields of an earlier run (a transport not open now) must not linger. */
    if (send_command(d, on_checked, "MULTI", 1, multi) < 0 ||
        send_command(d, on_checked, "DEL", 2, del) < 0 ||
        send_command(d, on_checked, "HSET", nhset, hset) < 0 ||
        send_command(d, on_checked, "PEXPIRE", 3, pexpire) < 0 ||
        send_command(d, done, "heartbeat", 1, exec) < 0)
        return FERRY_EDIRECTORY;
    return 0;
}

static void on_heartbeat(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (send_registration(d, on_checked) < 0)
        command_failed(d, "heartbeat", ferry_errmsg());
    arm(d, t, loop_now_ms() + d->heartbeat_ms);
}

/* The reply to the registration's EXEC: the directory is up. */
static void on_registered(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = reply_begin(ac, reply);
    const char *why;

    if (!reply)
        return;
    why = reply_error(reply);
    if (why) {
        drop(d, "registration refused: %s", why);
        return;
    }
    d->up = 1;
    if (d->ever_up)
        d->counters.reconnects++;
    d->ever_up = 1;
    d->failures = 0;
    d->backoff_ms = BACKOFF_MIN_MS;
    log_info("directory: registered as %s at Redis %s", d->self.id, d->where);
    arm(d, &d->heartbeat, loop_now_ms() + d->heartbeat_ms);
    d->republish_due = 1;
    turn_soon(d);
}

static void on_selected(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = reply_begin(ac, reply);
    const char *why;

    if (!reply)
        return;
    why = reply_error(reply);
    if (why)
        drop(d, "SELECT %d refused: %s", d->db, why);
    else if (send_registration(d, on_registered) < 0)
        drop(d, "cannot send the registration");
}

/* The connection is gone or never came up. hiredis has failed every command that was due, so
 * nothing waits on it any more. Schedules the next attempt. */
static void connection_lost(struct directory *d, const char *why)
{
    int was_up = d->up;

    d->ac = NULL;
    d->up = 0;
    d->inflight = 0;
    loop_timer_stop(d->loop, &d->watchdog);
    loop_timer_stop(d->loop, &d->heartbeat);
    if (d->closing)
        return;
    d->counters.errors++;
    if (was_up) {
        log_warn("directory: lost Redis at %s: %s; reconnecting", d->where, why);
        d->failures = 1;
    } else if (d->failures++ == 0) {
        log_warn("directory: cannot use Redis at %s: %s; retrying", d->where, why);
    } else {
        log_debug("directory: cannot use Redis at %s: %s", d->where, why);
    }
    arm(d, &d->reconnect, loop_now_ms() + d->backoff_ms);
    d->backoff_ms = d->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : d->backoff_ms * 2;
}

/* The adapter: hiredis's event hooks drive the one watch of the connection's socket. */
static void ev_update(struct directory *d, uint32_t add, uint32_t del)
{
    if (loop_watch_mod(d->loop, &d->watch, (d->watch.events | add) & ~del) < 0)
        log_warn("directory: %s; the watchdog will reconnect", ferry_errmsg());
}

static void ev_add_read(void *privdata)
{
    ev_update(privdata, LOOP_READ, 0);
}

static void ev_del_read(void *privdata)
{
    ev_update(privdata, 0, LOOP_READ);
}

static void ev_add_write(void *privdata)
{
    ev_update(privdata, LOOP_WRITE, 0);
}

static void ev_del_write(void *privdata)
{
    ev_update(privdata, 0, LOOP_WRITE);
}

/* hiredis is freeing the context (whoever started it): the connection is gone. */
static void ev_cleanup(void *privdata)
{
    struct directory *d = privdata;

    loop_watch_del(d->loop, &d->watch);
    d->watch.fd = -1;
    connection_lost(d, d->ac->err ? d->ac->errstr : d->why);
}

/* Errors and hang-ups go to the read handler, which reports them (or a failed connect). The
 * context may be gone after a handler: hiredis frees it on errors. */
static void on_io(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct directory *d = w->arg;
    redisAsyncContext *ac = d->ac;

    if (events & (LOOP_READ | LOOP_HANGUP))
        redisAsyncHandleRead(ac);
    if ((events & LOOP_WRITE) && d->ac == ac)
        redisAsyncHandleWrite(ac);
}

static void attach(struct directory *d, redisAsyncContext *ac)
{
    ac->data = d;
    ac->ev.data = d;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    d->ac = ac;
}

/* Starts a connection attempt. SELECT is sent at once: hiredis holds it until the TCP
 * connection completes, and the watchdog bounds that wait. */
static void connect_start(struct directory *d)
{
    redisAsyncContext *ac = redisAsyncConnect(d->ip, d->port);
    char db[16];
    const char *argv[] = {"SELECT", db};

    if (!ac || ac->err) {
        snprintf(d->why, sizeof(d->why), "%s", ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        connection_lost(d, d->why);
        return;
    }
    if (loop_watch_add(d->loop, &d->watch, ac->c.fd, 0, on_io, d) < 0) {
        d->watch.fd = -1;
        redisAsyncFree(ac);
        connection_lost(d, ferry_errmsg());
        return;
    }
    attach(d, ac);
    snprintf(db, sizeof(db), "%d", d->db);
    if (send_command(d, on_selected, NULL, 2, argv) < 0)
        drop(d, "cannot send SELECT");
}

static void on_reconnect(struct loop *l, struct loop_timer *t)
{
    connect_start(t->arg);
}

/* Liveness (see the top of the file). Re-armed lazily: replies only record their time. */
static void on_watchdog(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;
    uint64_t due = d->progress_ms + d->timeout_ms;

    if (!d->inflight)
        return;
    if (loop_now_ms() < due)
        arm(d, t, due);
    else
        drop(d, "no answer in %u ms", (unsigned)d->timeout_ms);
}

/* ---- opening ---- */

/* A decimal number in [s, end) within [min, max]; -1 otherwise. */
static int parse_number(const char *s, const char *end, long min, long max, long *out)
{
    char *stop;

    if (s == end || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *out = strtol(s, &stop, 10);
    return stop == end && !errno && *out >= min && *out <= max ? 0 : -1;
}

/* Resolves host to an IPv4 address, once: getaddrinfo blocks, which the loop cannot afford
 * on every reconnection. */
static int resolve(struct directory *d, const char *host)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, NULL, &hints, &res);

    if (rc != 0)
        return err_set(FERRY_EINVAL, "directory URL: cannot resolve %s: %s", host,
                       gai_strerror(rc));
    inet_ntop(AF_INET, &((const struct sockaddr_in *)res->ai_addr)->sin_addr, d->ip, sizeof(d->ip));
    freeaddrinfo(res);
    return 0;
}

/* redis://HOST:PORT[/DB] */
static int parse_url(struct directory *d, const char *url)
{
    static const char scheme[] = "redis://";
    const char *host, *colon, *slash, *end;
    char name[HOST_MAX];
    long port, db = 0;

    if (!url || strncmp(url, scheme, strlen(scheme)) != 0)
        return err_set(FERRY_EINVAL, "directory URL %s: expected redis://HOST:PORT[/DB]",
                       url ? url : "(none)");
    host = url + strlen(scheme);
    end = host + strlen(host);
    slash = strchr(host, '/');
    colon = memchr(host, ':', (size_t)((slash ? slash : end) - host));
    if (!colon || colon == host || (size_t)(colon - host) >= sizeof(name))
        return err_set(FERRY_EINVAL, "directory URL %s: expected HOST:PORT after redis://", url);
    if (parse_number(colon + 1, slash ? slash : end, 1, 65535, &port) < 0)
        return err_set(FERRY_EINVAL, "directory URL %s: bad port", url);
    if (slash && parse_number(slash + 1, end, 0, 1000000, &db) < 0)
        return err_set(FERRY_EINVAL, "directory URL %s: bad database number", url);
    memcpy(name, host, (size_t)(colon - host));
    name[colon - host] = '\0';
    d->port = (int)port;
    d->db = (int)db;
    snprintf(d->where, sizeof(d->where), "%s:%d/%d", name, d->port, d->db);
    return resolve(d, name);
}

static int field_valid(const char *s, size_t cap, int may_be_empty)
{
    size_t len = strnlen(s, cap);

    return len < cap && (len > 0 || may_be_empty);
}

/* Takes the configuration, with its defaults. */
static int configure(struct directory *d, const struct directory_config *cfg)
{
    const struct directory_node *self = &cfg->self;

    if (!field_valid(self->id, sizeof(self->id), 0))
        return err_set(FERRY_EINVAL, "directory: the node id must have 1 to %d characters",
                       DIRECTORY_NODE_ID_MAX);
    if (!field_valid(self->addr, sizeof(self->addr), 0))
        return err_set(FERRY_EINVAL, "directory: the node address must have 1 to %d characters",
                       DIRECTORY_ADDR_MAX);
    if (self->nxp > DIRECTORY_XPORTS)
        return err_set(FERRY_EINVAL, "directory: %u transports, at most %d", (unsigned)self->nxp,
                       DIRECTORY_XPORTS);
    for (uint32_t i = 0; i < self->nxp; i++)
        if (!field_valid(self->xp[i].name, sizeof(self->xp[i].name), 0) ||
            !field_valid(self->xp[i].addr, sizeof(self->xp[i].addr), 0))
            return err_set(FERRY_EINVAL, "directory: transport %u: empty or too long", i);
    d->self = *self;
    d->heartbeat_ms = cfg->heartbeat_ms ? cfg->heartbeat_ms : DEFAULT_HEARTBEAT_MS;
    d->ttl_ms = cfg->ttl_ms ? cfg->ttl_ms : DEFAULT_TTL_MS;
    d->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
    if (d->ttl_ms <= d->heartbeat_ms)
        return err_set(FERRY_EINVAL, "directory: the TTL (%u ms) must exceed the heartbeat (%u ms)",
                       (unsigned)d->ttl_ms, (unsigned)d->heartbeat_ms);
    return parse_url(d, cfg->url);
}

int directory_open(struct directory **out, struct loop *l, const struct directory_config *cfg,
                   const struct directory_hooks *hooks)
{
    struct directory *d = calloc(1, sizeof(*d));
    int rc;

    *out = NULL;
    if (!d)
        return err_set(FERRY_ENOMEM, "directory");
    rc = configure(d, cfg);
    if (rc < 0)
        goto free_directory;
    d->loop = l;
    if (hooks)
        d->hooks = *hooks;
    d->watch.fd = -1;
    d->done_tail = &d->done;
    d->backoff_ms = BACKOFF_MIN_MS;
    loop_timer_init(&d->reconnect, on_reconnect, d);
    loop_timer_init(&d->watchdog, on_watchdog, d);
    loop_timer_init(&d->heartbeat, on_heartbeat, d);
    loop_timer_init(&d->turn, on_turn, d);
    connect_start(d);
    *out = d;
    return 0;

free_directory:
    free(d);
    return rc;
}

void directory_close(struct directory *d)
{
    if (!d)
        return;
    d->closing = 1;
    if (d->ac)
        redisAsyncFree(d->ac); /* fails the pending requests: they join the done list */
    loop_timer_stop(d->loop, &d->reconnect);
    loop_timer_stop(d->loop, &d->turn);
    while (d->done)
        request_free(done_pop(d));
    free(d->queue);
    cache_clear(&d->holders);
    cache_clear(&d->nodes);
    free(d);
}

/* ---- the rest of the interface ---- */

int directory_connected(const struct directory *d)
{
    return d->up;
}

const struct directory_counters *directory_counters(const struct directory *d)
{
    return &d->counters;
}

void directory_publish(struct directory *d, const ferry_id *id)
{
    queue_push(d, id, 1);
}

void directory_withdraw(struct directory *d, const ferry_id *id)
{
    queue_push(d, id, 0);
}

int directory_lookup(struct directory *d, const ferry_id *id, int fresh, directory_holders_fn *cb,
                     void *arg)
{
    struct request *r = request_new(cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory lookup");
    r->lookup = 1;
    r->id = *id;
    r->fresh = fresh;
    if (!fresh && answer_from_cache(d, r)) {
        d->counters.cache_hits++;
        done_push(d, r);
        return 0;
    }
    request_start(d, r);
    return 0;
}

void directory_cancel(struct directory *d, void *arg)
{
    cancel_in(d->pending, arg);
    cancel_in(d->done, arg);
}

int directory_nodes(struct directory *d, directory_holders_fn *cb, void *arg)
{
    struct request *r = request_new(cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory node listing");
    request_start(d, r);
    return 0;
}

void directory_forget_holder(struct directory *d, const ferry_id *id, const char *node_id)
{
    struct cached_holders *h = idmap_get(&d->holders, id);

    if (!h)
        return;
    holders_drop(h, node_id);
    if (!h->n)
        free(idmap_remove(&d->holders, id));
}

/* Holder lists left empty stay in the cache (an empty list is a miss) until replaced or
 * cleared: the map cannot change while it is being iterated. */
void directory_forget_node(struct directory *d, const char *node_id)
{
    ferry_id key;
    const struct cached_node *c;
    struct cached_holders *h;
    size_t pos = 0;

    node_cache_key(node_id, &key);
    c = idmap_get(&d->nodes, &key);
    if (c && strcmp(c->node.id, node_id) == 0)
        free(idmap_remove(&d->nodes, &key));
    while ((h = idmap_next(&d->holders, &pos, NULL)))
        holders_drop(h, node_id);
}
