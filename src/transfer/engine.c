/*
 * engine.c - the transfer engine (see engine.h for the protocol and its guarantees).
 *
 * Records and who owns them (all on the loop's thread):
 * - want: one per id being fetched, in e->wants while unfinished. Waiters hang off it. While a
 *   pull names it (w->entry != NULL) it outlives its finish; the entry frees it.
 * - peer: an outgoing connection to a holder, in e->peers until its connection closes. Its
 *   pulls are answered in order; the head pull may be receiving bytes.
 * - inconn: an incoming connection from a receiver, in e->inconns. Objects it is sending
 *   are pinned (one reference each) until the transport says the bytes left (fabric
 *   rendezvous: the reader said it is done, or its lease ran out), or it closes.
 * - breaker: a peer whose fabric connections keep failing; while open, that peer is reached
 *   over tcp. Kept in e->breakers for as long as the engine lives (one per such peer).
 *
 * Transports: every peer is reached over fabric when this node opened one and the peer
 * advertises the same provider, else tcp; each connection carries its transport (c->type).
 */
#include "transfer/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/err.h"
#include "common/log.h"
#include "store/hasher.h"
#include "transfer/transport.h"
#include "transfer/wire.h"

#define MAX_TRIED 8
#define RETRY_FIRST_MS 10
#define RETRY_MAX_MS 200
/* A peer that owes bytes and sends none for this long is given up on; so is one that has
 * not finished the handshake in HANDSHAKE_MS. */
#define STALL_MS 30000
#define HANDSHAKE_MS 10000
/* Before authentication a peer may send only small frames (HELLO, AUTH). */
#define UNAUTH_MAX_FRAME 256
/* Incoming transfer connections beyond this are refused (peers reuse theirs: one per node). */
#define MAX_INCONNS 1024
/* A peer whose fabric connection fails this often in a row is reached over tcp for a while. */
#define BREAKER_FAILS 3
#define BREAKER_MS 30000
/* Eager limits measured with ferry calibrate on our machines (docs/architecture.md); other
 * providers start from the generic one. */
#define EAGER_DEFAULT (64u << 10)

enum want_state { WANT_LOOKUP, WANT_RETRY, WANT_QUEUED, WANT_PULLING, WANT_RECEIVING, WANT_VERIFY };

struct waiter {
    engine_fetch_fn *fn;
    void *ctx;
    uint32_t index;
    struct waiter *next;
};

struct pull;

struct pentry {
    struct pull *pull;
    struct want *w;
    int receiving; /* bytes are on their way into w->obj (or are being dropped) */
};

struct want {
    struct engine *e;
    ferry_id id;
    int state, done;
    int busy; /* being sealed or verified: finishing must not free it */
    struct waiter *waiters;
    char tried[MAX_TRIED][DIRECTORY_NODE_ID_MAX + 1];
    int ntried;
    uint32_t retries;
    struct loop_timer retry;
    struct pentry *entry; /* the pull entry naming this want, if any */
    struct peer *queued;  /* the peer whose next PULL will name it, if any */
    struct object *obj;   /* the local object being filled */
    uint64_t digest;      /* the holder's, with verify */
    char holder[DIRECTORY_NODE_ID_MAX + 1];
};

struct pull {
    uint64_t tag;
    uint32_t n, pending; /* entries, and those still receiving */
    int replied;
    struct pentry *entries;
    struct pull *next;
};

struct peer {
    struct engine *e;
    struct directory_node node;
    struct xconn *conn;
    int authed;
    uint8_t nonce[WIRE_NONCE];
    struct want **queue; /* wants for the next PULL */
    uint32_t nqueue, capqueue;
    struct pull *pulls, **pulls_tail;
    uint64_t next_tag;
    char why[112];        /* why this transport */
    uint64_t stall_bytes; /* conn->bytes_in when the watchdog was armed */
    struct loop_timer flush, stall;
    struct peer *next;
};

struct pin {
    struct object *o;
    uint64_t len;
    struct inconn *ic;
    struct pin *next, **pprev;
};

struct hpull {
    uint64_t tag;
    uint64_t eager_max; /* the receiver's */
    uint8_t flags;
    uint32_t n;
    struct object **objs; /* pinned sealed objects; NULL for the ids we do not have */
    struct hpull *next;
};

enum inconn_state { IN_HELLO, IN_AUTH, IN_READY };

struct inconn {
    struct engine *e;
    struct xconn *conn;
    int state;
    struct loop_timer deadline; /* authenticate within HANDSHAKE_MS */
    char node[WIRE_NODE_MAX + 1];
    uint8_t nonce_c[WIRE_NONCE], nonce_a[WIRE_NONCE];
    struct hpull *queue, **queue_tail;
    struct pin *pins;
    uint64_t pinned; /* bytes of the pins: past the engine's limit, reading stops */
    int paused;
    uint64_t stall_bytes;    /* conn->bytes_out when the send watchdog was armed */
    struct loop_timer stall; /* a receiver that stops reading what it asked for */
    struct inconn *next, **pprev;
};

struct breaker {
    char node[DIRECTORY_NODE_ID_MAX + 1];
    uint32_t fails;
    uint64_t open_until; /* ms; tcp until then */
    char last[96];       /* the last failure */
    struct breaker *next;
};

struct engine {
    struct loop *loop;
    struct store *store;
    struct directory *dir;
    struct engine_config cfg;
    char node_id[DIRECTORY_NODE_ID_MAX + 1];
    uint8_t *secret;
    struct xlistener *tcp_l, *fab_l;
    uint64_t eager_max;
    struct breaker *breakers;
    idmap wants;
    struct peer *peers;
    struct inconn *inconns;
    int inconn_count;
    struct hasher *verifier;
    struct loop_watch verifier_watch;
    struct engine_counters counters;
};

static const struct transport *const tcp = &transport_tcp;
static const struct transport *const fabric = &transport_fabric;

/* ---- the fabric's circuit breaker ---- */

static struct breaker *breaker_find(struct engine *e, const char *node, int create)
{
    struct breaker *b;

    for (b = e->breakers; b && strcmp(b->node, node) != 0; b = b->next)
        ;
    if (!b && create && (b = calloc(1, sizeof(*b)))) {
        snprintf(b->node, sizeof(b->node), "%s", node);
        b->next = e->breakers;
        e->breakers = b;
    }
    return b;
}

/* A fabric connection to node failed: after BREAKER_FAILS in a row, tcp for a while. */
static void breaker_fail(struct engine *e, const char *node, const char *why)
{
    struct breaker *b = breaker_find(e, node, 1);

    e->counters.fabric_failures++;
    if (!b)
        return;
    snprintf(b->last, sizeof(b->last), "%s", why);
    if (++b->fails < BREAKER_FAILS)
        return;
    b->fails = 0;
    b->open_until = loop_now_ms() + BREAKER_MS;
    e->counters.fabric_fallbacks++;
    log_warn("fabric to %s failed %d times in a row (last: %s): using tcp for %d s", node,
             BREAKER_FAILS, why, BREAKER_MS / 1000);
}

static void breaker_ok(struct engine *e, const char *node)
{
    struct breaker *b = breaker_find(e, node, 0);

    if (b)
        b->fails = 0;
}

/* The transport for a peer, and why (for ferry stat). */
static const struct transport *transport_for(struct engine *e, const struct directory_node *node,
                                             char *why, size_t len)
{
    const char *at = strchr(node->fabric, '@');
    const char *mine = e->fab_l ? fabric->provider(e->fab_l) : NULL;
    struct breaker *b = breaker_find(e, node->id, 0);

    if (!mine) {
        snprintf(why, len, "%s",
                 e->cfg.transport == ENGINE_TCP ? "--transport tcp" : "no fabric on this node");
    } else if (!at) {
        snprintf(why, len, "the peer has no fabric");
    } else if ((size_t)(at - node->fabric) != strlen(mine) ||
               strncmp(node->fabric, mine, strlen(mine)) != 0) {
        snprintf(why, len, "the peer's fabric is %.*s, ours %s", (int)(at - node->fabric),
                 node->fabric, mine);
    } else if (b && b->open_until > loop_now_ms()) {
        snprintf(why, len, "fabric failed %d times (%.60s); tcp for %u s", BREAKER_FAILS, b->last,
                 (unsigned)((b->open_until - loop_now_ms()) / 1000 + 1));
    } else {
        snprintf(why, len, "both on %s", mine);
        return fabric;
    }
    return tcp;
}

/* Lets go of an object a closed connection was moving, once the transport says nothing of
 * that connection can still touch it (drain): a partial object we received is aborted (a
 * one-sided read may still be landing in it), an object we lent is unpinned (a peer may still
 * be reading it until its lease ends). */
struct release {
    struct engine *e;
    struct object *o;
    int abort;
};

static void on_drained(void *arg)
{
    struct release *r = arg;

    if (r->abort)
        store_abort(r->e->store, r->o);
    else
        store_unref(r->e->store, r->o);
    free(r);
}

static void release_after(struct engine *e, struct xconn *c, struct object *o, int abort)
{
    struct release *r = malloc(sizeof(*r));

    if (r) {
        *r = (struct release){.e = e, .o = o, .abort = abort};
        if (c->type->drain(c, on_drained, r) == 0)
            return;
        free(r);
    }
    if (c->type == fabric) {
        /* Keeping it is safe, letting it go is not. */
        log_error("out of memory: keeping an object a peer may still be reading or writing");
        return;
    }
    if (abort)
        store_abort(e->store, o);
    else
        store_unref(e->store, o);
}

/* ---- wants ---- */

static void want_free(struct want *w)
{
    struct engine *e = w->e;

    loop_timer_stop(e->loop, &w->retry);
    if (e->dir)
        directory_cancel(e->dir, w);
    while (w->waiters) {
        struct waiter *x = w->waiters;
        w->waiters = x->next;
        free(x);
    }
    free(w);
}

/* Answers every waiter and retires the want; its record lives on while a pull names it. */
static void want_finish(struct want *w, int status)
{
    struct waiter *x;

    if (w->done)
        return;
    w->done = 1;
    idmap_remove(&w->e->wants, &w->id);
    while ((x = w->waiters)) {
        w->waiters = x->next;
        x->fn(x->ctx, x->index, status);
        free(x);
    }
    if (!w->entry && !w->queued && !w->busy)
        want_free(w);
}

static int want_tried(const struct want *w, const char *node)
{
    for (int i = 0; i < w->ntried; i++) {
        if (strcmp(w->tried[i], node) == 0)
            return 1;
    }
    return 0;
}

static void want_lookup(struct want *w, int fresh);

/* The holder in w->holder failed: note it and ask for the next one. */
static void want_next_holder(struct want *w, const char *why)
{
    struct engine *e = w->e;

    e->counters.transfer_failures++;
    log_warn("transfer from %s failed: %s; trying the next holder", w->holder, why);
    if (w->done) {
        want_free(w);
        return;
    }
    if (w->ntried == MAX_TRIED) {
        want_finish(w, err_set(FERRY_ETRANSFER, "%d holders failed (last: %s: %s)", MAX_TRIED,
                               w->holder, why));
        return;
    }
    snprintf(w->tried[w->ntried++], sizeof(w->tried[0]), "%s", w->holder);
    want_lookup(w, 1);
}

static void on_retry(struct loop *l, struct loop_timer *t)
{
    want_lookup(t->arg, 1);
}

/* Nobody holds the object yet: ask again later (with backoff), until the waiters give up. */
static void want_retry(struct want *w)
{
    uint64_t delay = (uint64_t)RETRY_FIRST_MS << (w->retries < 5 ? w->retries : 5);

    w->retries++;
    w->state = WANT_RETRY;
    if (loop_timer_start(w->e->loop, &w->retry,
                         loop_now_ms() + (delay > RETRY_MAX_MS ? RETRY_MAX_MS : delay)) < 0)
        want_finish(w, FERRY_ENOMEM);
}

/* ---- peers (we receive) ---- */

static const struct xconn_events peer_events;

static void peer_free(struct peer *p)
{
    loop_timer_stop(p->e->loop, &p->flush);
    loop_timer_stop(p->e->loop, &p->stall);
    free(p->queue);
    free(p);
}

static void pull_free(struct pull *pl)
{
    free(pl->entries);
    free(pl);
}

/* Detaches every want the peer had in hand and sends each on to its next holder. */
static void peer_fail_wants(struct peer *p, const char *why)
{
    struct engine *e = p->e;
    struct pull *pl;

    while ((pl = p->pulls)) {
        p->pulls = pl->next;
        for (uint32_t i = 0; i < pl->n; i++) {
            struct want *w = pl->entries[i].w;
            if (!w)
                continue;
            w->entry = NULL;
            if (w->obj) {
                release_after(e, p->conn, w->obj, 1); /* the partial object is never seen */
                w->obj = NULL;
            }
            want_next_holder(w, why);
        }
        pull_free(pl);
    }
    for (uint32_t i = 0; i < p->nqueue; i++) {
        p->queue[i]->queued = NULL;
        want_next_holder(p->queue[i], why);
    }
    p->nqueue = 0;
}

static void peer_remove(struct peer *p, const char *why)
{
    struct engine *e = p->e;
    struct peer **pp;

    for (pp = &e->peers; *pp && *pp != p; pp = &(*pp)->next)
        ;
    if (*pp)
        *pp = p->next;
    if (e->dir)
        directory_forget_node(e->dir, p->node.id);
    peer_fail_wants(p, why);
    peer_free(p);
}

static void peer_closed(struct xconn *c, int err, const char *reason)
{
    struct peer *p = c->owner;

    if (err == FERRY_EPROTO)
        p->e->counters.peer_errors++;
    log_warn("transfer connection to %s (%s) lost: %s", p->node.id, c->peer, reason);
    if (c->type == fabric)
        breaker_fail(p->e, p->node.id, reason);
    peer_remove(p, reason);
}

/* Drops a peer that broke the protocol. */
static void peer_abort(struct peer *p, const char *why)
{
    p->e->counters.peer_errors++;
    log_warn("closing the transfer connection to %s (%s): %s", p->node.id, p->conn->peer, why);
    p->conn->type->close(p->conn);
    if (p->conn->type == fabric)
        breaker_fail(p->e, p->node.id, why);
    peer_remove(p, why);
}

/* The watchdog runs while the peer owes us something: the handshake, or bytes for a pull.
 * It is armed once, not pushed back by our own sends. */
static void peer_stall_arm(struct peer *p)
{
    if (!p->authed || p->pulls) {
        if (p->stall.heap_index == SIZE_MAX) {
            p->stall_bytes = p->conn->bytes_in;
            loop_timer_start(p->e->loop, &p->stall,
                             loop_now_ms() + (p->authed ? STALL_MS : HANDSHAKE_MS));
        }
    } else {
        loop_timer_stop(p->e->loop, &p->stall);
    }
}

static void on_stall(struct loop *l, struct loop_timer *t)
{
    struct peer *p = t->arg;

    if (!p->authed) {
        peer_abort(p, "no handshake within 10 s");
        return;
    }
    if (p->conn->bytes_in == p->stall_bytes) {
        peer_abort(p, "no bytes for 30 s");
        return;
    }
    peer_stall_arm(p); /* bytes are coming: look again in 30 s */
}

/* Sends one PULL with every queued want. */
/* Drops the queued wants that finished while they waited (a local put, say). */
static void peer_prune_queue(struct peer *p)
{
    uint32_t k = 0;

    for (uint32_t i = 0; i < p->nqueue; i++) {
        struct want *w = p->queue[i];
        if (w->done) {
            w->queued = NULL;
            want_free(w);
        } else {
            p->queue[k++] = w;
        }
    }
    p->nqueue = k;
}

static void peer_flush(struct peer *p)
{
    struct pbuf b = {0};
    struct pull *pl;
    ferry_id *ids;
    uint32_t n;

    if (!p->authed)
        return;
    peer_prune_queue(p);
    n = p->nqueue < WIRE_MAX_IDS ? p->nqueue : WIRE_MAX_IDS;
    if (n == 0)
        return;
    pl = calloc(1, sizeof(*pl));
    ids = malloc((size_t)n * sizeof(*ids));
    if (pl)
        pl->entries = calloc(n, sizeof(*pl->entries));
    if (!pl || !ids || !pl->entries) {
        free(ids);
        if (pl)
            pull_free(pl);
        peer_abort(p, "out of memory for a pull");
        return;
    }
    pl->tag = ++p->next_tag;
    pl->n = n;
    for (uint32_t i = 0; i < n; i++) {
        struct want *w = p->queue[i];
        w->queued = NULL;
        ids[i] = w->id;
        pl->entries[i] = (struct pentry){.pull = pl, .w = w};
        w->entry = &pl->entries[i];
        w->state = WANT_PULLING;
    }
    memmove(p->queue, p->queue + n, (size_t)(p->nqueue - n) * sizeof(*p->queue));
    p->nqueue -= n;
    wire_pull(&b, pl->tag, p->e->cfg.verify ? WIRE_PULL_VERIFY : 0, p->e->eager_max, ids, n);
    free(ids);
    *p->pulls_tail = pl;
    p->pulls_tail = &pl->next;
    if (b.oom || p->conn->type->send_frame(p->conn, b.data, b.len) < 0) {
        pbuf_free(&b);
        peer_abort(p, "cannot send a pull");
        return;
    }
    pbuf_free(&b);
    peer_stall_arm(p);
    if (p->nqueue)
        loop_timer_start(p->e->loop, &p->flush, 0);
}

static void on_flush(struct loop *l, struct loop_timer *t)
{
    peer_flush(t->arg);
}

/* Queues w for the next PULL to p (sent at the end of this loop turn, with the others). */
static void peer_enqueue(struct peer *p, struct want *w)
{
    if (p->nqueue == p->capqueue) {
        uint32_t cap = p->capqueue ? p->capqueue * 2 : 16;
        struct want **q = realloc(p->queue, cap * sizeof(*q));
        if (!q) {
            want_finish(w, err_set(FERRY_ENOMEM, "pull queue"));
            return;
        }
        p->queue = q;
        p->capqueue = cap;
    }
    p->queue[p->nqueue++] = w;
    w->state = WANT_QUEUED;
    w->entry = NULL;
    w->queued = p;
    snprintf(w->holder, sizeof(w->holder), "%s", p->node.id);
    loop_timer_start(p->e->loop, &p->flush, 0);
}

static struct peer *peer_find(struct engine *e, const char *node)
{
    struct peer *p;

    for (p = e->peers; p && strcmp(p->node.id, node) != 0; p = p->next)
        ;
    return p;
}

/* Connects p over the transport chosen for it; a fabric that refuses falls back to tcp. */
static int peer_connect(struct peer *p)
{
    struct engine *e = p->e;
    const struct transport *t = transport_for(e, &p->node, p->why, sizeof(p->why));
    const char *at = strchr(p->node.fabric, '@');

    if (t == fabric) {
        if (fabric->connect(e->fab_l, at + 1, &peer_events, &p->conn) == 0)
            return 0;
        log_warn("fabric to %s: %s; using tcp", p->node.id, ferry_errmsg());
        breaker_fail(e, p->node.id, ferry_errmsg());
        snprintf(p->why, sizeof(p->why), "fabric refused: %.90s", ferry_errmsg());
    }
    return tcp->connect(e->tcp_l, p->node.addr, &peer_events, &p->conn);
}

/* The connection to node, opened (and authentication started) on first use. */
static struct peer *peer_get(struct engine *e, const struct directory_node *node)
{
    struct peer *p = peer_find(e, node->id);
    struct pbuf b = {0};

    /* The same node id at new addresses is a new incarnation of the node (a restart): the
     * connection to the old one may look alive (RDM endpoints hear of no death when idle). */
    if (p && (strcmp(p->node.addr, node->addr) != 0 || strcmp(p->node.fabric, node->fabric) != 0)) {
        log_info("%s is at a new address (restarted): reconnecting", node->id);
        p->conn->type->close(p->conn);
        peer_remove(p, "the node restarted at a new address");
    } else if (p) {
        return p;
    }
    if (!(p = calloc(1, sizeof(*p))))
        return NULL;
    p->e = e;
    p->node = *node;
    p->pulls_tail = &p->pulls;
    loop_timer_init(&p->flush, on_flush, p);
    loop_timer_init(&p->stall, on_stall, p);
    if (RAND_bytes(p->nonce, WIRE_NONCE) != 1 || peer_connect(p) < 0) {
        log_warn("cannot connect to %s (%s): %s", node->id, node->addr, ferry_errmsg());
        free(p);
        return NULL;
    }
    p->conn->owner = p;
    p->conn->max_frame = UNAUTH_MAX_FRAME;
    e->counters.connections_opened++;
    wire_hello(&b, e->node_id, p->nonce);
    if (b.oom || p->conn->type->send_frame(p->conn, b.data, b.len) < 0) {
        pbuf_free(&b);
        p->conn->type->close(p->conn);
        free(p);
        return NULL;
    }
    pbuf_free(&b);
    p->next = e->peers;
    e->peers = p;
    peer_stall_arm(p);
    return p;
}

/* CHALLENGE from the holder: check its proof of the secret, give ours, start pulling. */
static void peer_on_challenge(struct peer *p, const struct wire_msg *m)
{
    struct engine *e = p->e;
    uint8_t expect[WIRE_MAC] = {0}, mine[WIRE_MAC] = {0};
    struct pbuf b = {0};

    if (m->keyed != (e->secret != NULL)) {
        peer_abort(p, m->keyed ? "the holder has a cluster secret and we have none"
                               : "the holder has no cluster secret and we have one");
        return;
    }
    if (e->secret &&
        (wire_mac(e->secret, e->cfg.secret_len, "acceptor", p->nonce, m->nonce, expect) < 0 ||
         CRYPTO_memcmp(expect, m->mac, WIRE_MAC) != 0 ||
         wire_mac(e->secret, e->cfg.secret_len, "connector", p->nonce, m->nonce, mine) < 0)) {
        peer_abort(p, "the holder failed the cluster secret's challenge");
        return;
    }
    wire_auth(&b, mine);
    if (b.oom || p->conn->type->send_frame(p->conn, b.data, b.len) < 0) {
        pbuf_free(&b);
        peer_abort(p, "cannot send our proof");
        return;
    }
    pbuf_free(&b);
    p->authed = 1;
    p->conn->max_frame = WIRE_MAX_FRAME;
    loop_timer_stop(e->loop, &p->stall);
    peer_flush(p);
}

/* The bytes of w's object are all in (or w was dropped). */
static void complete_entry(struct peer *p, struct pentry *pe);

static void on_verified(struct loop *l, struct loop_watch *w, uint32_t events);

/* Seals a received object: the store's seal hook then finishes the want. */
static void want_seal(struct want *w)
{
    struct engine *e = w->e;
    struct object *o = w->obj;

    w->obj = NULL;
    e->counters.transfers_in++;
    e->counters.bytes_in += o->data_size + o->metadata_size;
    /* The seal reaches engine_on_sealed, which answers the waiters; busy keeps w alive. With
     * --verify the copy keeps the digest it was checked against; otherwise it is hashed here,
     * rather than trusting a digest nobody checked. */
    w->busy = 1;
    if (e->cfg.verify)
        store_seal_digest(e->store, o, w->digest);
    else
        store_seal(e->store, o);
    store_unref(e->store, o);
    w->busy = 0;
    if (w->done)
        want_free(w);
    else
        want_finish(w, 0);
}

static void want_received(struct want *w)
{
    struct engine *e = w->e;
    struct hasher_job *job;

    if (!e->cfg.verify || !w->obj) {
        want_seal(w);
        return;
    }
    if (!(job = calloc(1, sizeof(*job)))) {
        /* Cannot check it: refuse the object rather than seal it unchecked. */
        store_abort(e->store, w->obj);
        w->obj = NULL;
        want_finish(w, err_set(FERRY_ENOMEM, "verification job"));
        return;
    }
    job->bytes = e->store->base + w->obj->offset;
    job->len = w->obj->data_size + w->obj->metadata_size;
    job->seed = w->obj->data_size;
    job->arg = w;
    w->state = WANT_VERIFY;
    w->busy = 1;
    hasher_submit(e->verifier, job);
}

/* Retires the head pull once it is answered and all its bytes are in. */
static void pull_maybe_pop(struct peer *p)
{
    struct pull *pl;

    while ((pl = p->pulls) && pl->replied && !pl->pending) {
        p->pulls = pl->next;
        if (!p->pulls)
            p->pulls_tail = &p->pulls;
        pull_free(pl);
    }
}

static void complete_entry(struct peer *p, struct pentry *pe)
{
    struct want *w = pe->w;

    pe->w = NULL;
    if (pe->receiving) {
        pe->receiving = 0;
        pe->pull->pending--;
    }
    if (w) {
        struct object *here = store_find(p->e->store, &w->id);
        w->entry = NULL;
        if (w->obj && p->conn->type == fabric)
            breaker_ok(p->e, p->node.id);
        if (w->obj)
            want_received(w);
        else if (w->done)
            want_free(w);
        else if (here && here->state == FERRY_STATE_SEALED)
            want_finish(w, 0);
        else
            want_retry(w); /* it was being created here; if that is aborted, fetch again */
    }
    pull_maybe_pop(p);
    peer_stall_arm(p);
}

/* One entry of a REPLY: create the object and let the bytes come into it, or move on. */
static int reply_entry(struct peer *p, struct pentry *pe, const struct wire_reply_entry *re)
{
    struct engine *e = p->e;
    struct want *w = pe->w;
    uint64_t len = re->data_size + re->metadata_size;
    int rc;

    if (re->status != 0) {
        if (re->status != FERRY_ENOENT)
            return err_set(FERRY_EPROTO, "reply status %d", re->status);
        pe->w = NULL;
        w->entry = NULL;
        if (e->dir)
            directory_forget_holder(e->dir, &w->id, p->node.id);
        want_next_holder(w, "it no longer holds the object");
        return 0;
    }
    if (len < re->data_size)
        return err_set(FERRY_EPROTO, "reply sizes overflow");
    if (!w->done) {
        rc = store_create(e->store, &w->id, re->data_size, re->metadata_size, e, &w->obj);
        if (rc == FERRY_EEXIST) {
            w->obj = NULL; /* being created here too: its seal will finish the want */
        } else if (rc < 0) {
            w->obj = NULL;
            want_finish(w, rc);
        }
    }
    w->digest = re->digest;
    w->state = WANT_RECEIVING;
    pe->receiving = 1;
    pe->pull->pending++;
    if (len == 0) {
        complete_entry(p, pe);
        return 0;
    }
    return p->conn->type->recv_into(p->conn, w->obj ? e->store->base + w->obj->offset : NULL, len,
                                    pe);
}

static void peer_on_reply(struct peer *p, const struct wire_msg *m)
{
    struct pull *pl;
    struct wire_reply_entry re;

    /* Replies come in order, each after the bytes of the one before on tcp (fabric: reads of
     * earlier replies may still be under way). */
    for (pl = p->pulls; pl && pl->replied; pl = pl->next)
        ;
    if (!pl || pl->tag != m->tag || pl->n != m->n) {
        peer_abort(p, "a reply that answers no pull");
        return;
    }
    for (uint32_t i = 0; i < m->n; i++) {
        wire_reply_entry(m, i, &re);
        if (pl->entries[i].w && reply_entry(p, &pl->entries[i], &re) < 0) {
            peer_abort(p, ferry_errmsg());
            return;
        }
    }
    /* Only now may the pull retire: entries of 0 bytes completed during the loop. */
    pl->replied = 1;
    pull_maybe_pop(p);
    peer_stall_arm(p);
}

static void peer_frame(struct xconn *c, const struct proto_header *h, const uint8_t *payload)
{
    struct peer *p = c->owner;
    struct wire_msg m;

    if (wire_decode(h, payload, &m) < 0) {
        peer_abort(p, ferry_errmsg());
        return;
    }
    if (!p->authed && m.type == WIRE_CHALLENGE)
        peer_on_challenge(p, &m);
    else if (p->authed && m.type == WIRE_REPLY)
        peer_on_reply(p, &m);
    else
        peer_abort(p, "unexpected message from the holder");
}

static void peer_received(struct xconn *c, void *arg)
{
    complete_entry(c->owner, arg);
}

static void peer_sent(struct xconn *c, void *arg) {}

static const struct xconn_events peer_events = {
    .frame = peer_frame,
    .received = peer_received,
    .sent = peer_sent,
    .closed = peer_closed,
};

/* ---- verification (receiver side, --verify) ---- */

static void on_verified(struct loop *l, struct loop_watch *lw, uint32_t events)
{
    struct engine *e = lw->arg;
    struct hasher_job *job = hasher_take_done(e->verifier), *next;

    for (; job; job = next) {
        struct want *w = job->arg;
        next = job->next;
        w->busy = 0;
        if (job->digest == w->digest) {
            want_seal(w);
        } else {
            log_warn("object from %s failed verification (digest %016" PRIx64
                     ", expected %016" PRIx64 ")",
                     w->holder, job->digest, w->digest);
            store_abort(e->store, w->obj);
            w->obj = NULL;
            want_next_holder(w, "digest mismatch");
        }
        free(job);
    }
}

/* ---- holders and lookups ---- */

/* Prefers a holder we are connected to; skips those that failed this want. */
static const struct directory_node *choose(struct engine *e, const struct want *w,
                                           const struct directory_node *h, size_t n)
{
    const struct directory_node *pick = NULL;

    for (size_t i = 0; i < n; i++) {
        if (want_tried(w, h[i].id) || strcmp(h[i].id, e->node_id) == 0)
            continue;
        if (peer_find(e, h[i].id))
            return &h[i];
        if (!pick)
            pick = &h[i];
    }
    return pick;
}

static void on_holders(void *arg, int status, const struct directory_node *h, size_t n)
{
    struct want *w = arg;
    const struct directory_node *pick;
    struct peer *p;

    if (status < 0) {
        want_finish(w, err_set(status, "cannot look up holders: %s", ferry_errmsg()));
        return;
    }
    if (!(pick = choose(w->e, w, h, n))) {
        if (n)
            want_finish(w, err_set(FERRY_ETRANSFER, "all %d holders failed (last: %s)", w->ntried,
                                   w->holder));
        else
            want_retry(w); /* sealed nowhere (any more): a holder may still come */
        return;
    }
    if (!(p = peer_get(w->e, pick))) {
        snprintf(w->holder, sizeof(w->holder), "%s", pick->id);
        want_next_holder(w, "cannot connect");
        return;
    }
    peer_enqueue(p, w);
}

/* Asks the directory (or its cache) for holders; a want nobody waits for any more stops. */
static void want_lookup(struct want *w, int fresh)
{
    w->state = WANT_LOOKUP;
    if (!w->waiters) {
        want_finish(w, FERRY_ETIMEDOUT);
        return;
    }
    if (directory_lookup(w->e->dir, &w->id, fresh, on_holders, w) < 0)
        want_finish(w, FERRY_ENOMEM);
}

/* ---- incoming connections (we hold) ---- */

static const struct xconn_events in_events;

static void pins_drop(struct inconn *ic)
{
    while (ic->pins) {
        struct pin *pn = ic->pins;
        ic->pins = pn->next;
        release_after(ic->e, ic->conn, pn->o, 0);
        free(pn);
    }
}

static void hpull_free(struct engine *e, struct hpull *hp)
{
    for (uint32_t i = 0; i < hp->n; i++) {
        if (hp->objs[i])
            store_unref(e->store, hp->objs[i]);
    }
    free(hp->objs);
    free(hp);
}

static void inconn_free(struct inconn *ic)
{
    struct hpull *hp;

    *ic->pprev = ic->next;
    if (ic->next)
        ic->next->pprev = ic->pprev;
    loop_timer_stop(ic->e->loop, &ic->deadline);
    loop_timer_stop(ic->e->loop, &ic->stall);
    ic->e->inconn_count--;
    pins_drop(ic);
    while ((hp = ic->queue)) {
        ic->queue = hp->next;
        hpull_free(ic->e, hp);
    }
    free(ic);
}

static void in_closed(struct xconn *c, int err, const char *reason)
{
    struct inconn *ic = c->owner;

    /* Broken framing, or gone before proving the secret: a bad peer, not a finished one. */
    if (err == FERRY_EPROTO || ic->state != IN_READY) {
        ic->e->counters.peer_errors++;
        log_warn("transfer connection from %s (%s) dropped%s: %s", ic->node[0] ? ic->node : "?",
                 c->peer, ic->state != IN_READY ? " before authenticating" : "", reason);
    } else {
        log_info("transfer connection from %s (%s) closed: %s", ic->node, c->peer, reason);
    }
    inconn_free(ic);
}

/* Drops a peer that broke the protocol or failed authentication. */
static void in_abort(struct inconn *ic, const char *why)
{
    ic->e->counters.peer_errors++;
    log_warn("closing the transfer connection from %s (%s): %s", ic->node[0] ? ic->node : "?",
             ic->conn->peer, why);
    ic->conn->type->close(ic->conn);
    inconn_free(ic);
}

static int in_send(struct inconn *ic, struct pbuf *b)
{
    int rc = b->oom ? err_set(FERRY_ENOMEM, "frame")
                    : ic->conn->type->send_frame(ic->conn, b->data, b->len);
    pbuf_free(b);
    return rc;
}

static void in_on_hello(struct inconn *ic, const struct wire_msg *m)
{
    struct engine *e = ic->e;
    uint8_t mac[WIRE_MAC] = {0};
    struct pbuf b = {0};

    if (m->magic != WIRE_MAGIC || m->version != WIRE_VERSION) {
        in_abort(ic, "hello with a wrong magic or version");
        return;
    }
    memcpy(ic->nonce_c, m->nonce, WIRE_NONCE);
    snprintf(ic->node, sizeof(ic->node), "%s", m->node);
    if (RAND_bytes(ic->nonce_a, WIRE_NONCE) != 1 ||
        (e->secret &&
         wire_mac(e->secret, e->cfg.secret_len, "acceptor", ic->nonce_c, ic->nonce_a, mac) < 0)) {
        in_abort(ic, "cannot make a challenge");
        return;
    }
    wire_challenge(&b, e->node_id, ic->nonce_a, e->secret != NULL, mac);
    if (in_send(ic, &b) < 0) {
        in_abort(ic, "cannot send the challenge");
        return;
    }
    ic->state = IN_AUTH;
}

static void in_on_auth(struct inconn *ic, const struct wire_msg *m)
{
    struct engine *e = ic->e;
    uint8_t expect[WIRE_MAC] = {0};

    if (e->secret &&
        wire_mac(e->secret, e->cfg.secret_len, "connector", ic->nonce_c, ic->nonce_a, expect) < 0) {
        in_abort(ic, "cannot check the proof");
        return;
    }
    if (CRYPTO_memcmp(expect, m->mac, WIRE_MAC) != 0) {
        in_abort(ic, "authentication failed (wrong or missing cluster secret)");
        return;
    }
    ic->state = IN_READY;
    ic->conn->max_frame = WIRE_MAX_FRAME;
    loop_timer_stop(e->loop, &ic->deadline);
}

static int hpull_ready(const struct hpull *hp)
{
    if (!(hp->flags & WIRE_PULL_VERIFY))
        return 1;
    for (uint32_t i = 0; i < hp->n; i++) {
        if (hp->objs[i] && !hp->objs[i]->hashed)
            return 0;
    }
    return 1;
}

/* Queues the bytes of o after the reply; the pin passes to the transport's send. */
static int send_object(struct inconn *ic, struct object *o)
{
    struct engine *e = ic->e;
    uint64_t len = o->data_size + o->metadata_size;
    struct pin *pn;

    if (len == 0) {
        e->counters.transfers_out++;
        store_unref(e->store, o);
        return 0;
    }
    if (!(pn = calloc(1, sizeof(*pn)))) {
        store_unref(e->store, o);
        return err_set(FERRY_ENOMEM, "pin");
    }
    *pn = (struct pin){.o = o, .len = len, .ic = ic, .next = ic->pins, .pprev = &ic->pins};
    if (ic->pins)
        ic->pins->pprev = &pn->next;
    ic->pins = pn;
    ic->pinned += len;
    return ic->conn->type->send_range(ic->conn, e->store->base + o->offset, len, pn);
}

/* Answers one pull: the reply, then the bytes of each object found. */
static int hpull_answer(struct inconn *ic, struct hpull *hp)
{
    struct wire_reply_entry re;
    struct pbuf b = {0};
    size_t start = wire_reply_begin(&b, hp->tag, hp->n);
    int rc = 0;

    for (uint32_t i = 0; i < hp->n; i++) {
        struct object *o = hp->objs[i];
        re = (struct wire_reply_entry){.status = o ? 0 : FERRY_ENOENT};
        if (o) {
            re.data_size = o->data_size;
            re.metadata_size = o->metadata_size;
            re.digest = o->hashed ? o->hash : 0;
        }
        wire_reply_add(&b, &re);
    }
    proto_frame_end(&b, start);
    if ((rc = in_send(ic, &b)) < 0)
        return rc;
    ic->conn->eager_max = hp->eager_max;
    for (uint32_t i = 0; i < hp->n && rc == 0; i++) {
        struct object *o = hp->objs[i];
        hp->objs[i] = NULL;
        if (o)
            rc = send_object(ic, o);
    }
    return rc;
}

/* Answers queued pulls in order, as far as their digests allow. */
/* A receiver that does not read what it asked for would keep the holder's objects pinned
 * without bound: past a quarter of the arena (at least 64 MiB) pinned for one connection, its
 * further requests wait until it has read half of that. */
static uint64_t pin_limit(const struct engine *e)
{
    uint64_t quarter = store_capacity(e->store) / 4;
    return quarter > (64ull << 20) ? quarter : 64ull << 20;
}

/* While bytes are pinned for the receiver, it must keep reading them: 30 s without any
 * leaving, and its pins go with its connection. */
static void in_stall_arm(struct inconn *ic)
{
    if (!ic->pinned) {
        loop_timer_stop(ic->e->loop, &ic->stall);
    } else if (ic->stall.heap_index == SIZE_MAX) {
        ic->stall_bytes = ic->conn->bytes_out;
        loop_timer_start(ic->e->loop, &ic->stall, loop_now_ms() + STALL_MS);
    }
}

static void on_in_stall(struct loop *l, struct loop_timer *t)
{
    struct inconn *ic = t->arg;

    if (ic->conn->bytes_out == ic->stall_bytes) {
        in_abort(ic, "read none of what it asked for in 30 s");
        return;
    }
    in_stall_arm(ic);
}

static void in_backpressure(struct inconn *ic)
{
    uint64_t limit = pin_limit(ic->e);
    int pause = ic->pinned > limit || (ic->paused && ic->pinned > limit / 2);

    if (pause != ic->paused) {
        ic->paused = pause;
        ic->conn->type->pause(ic->conn, pause);
    }
    in_stall_arm(ic);
}

static void in_process(struct inconn *ic)
{
    struct hpull *hp;

    while ((hp = ic->queue) && hpull_ready(hp)) {
        ic->queue = hp->next;
        if (!ic->queue)
            ic->queue_tail = &ic->queue;
        if (hpull_answer(ic, hp) < 0) {
            hpull_free(ic->e, hp);
            in_abort(ic, ferry_errmsg());
            return;
        }
        hpull_free(ic->e, hp);
    }
    in_backpressure(ic);
}

static void in_on_pull(struct inconn *ic, const struct wire_msg *m)
{
    struct hpull *hp = calloc(1, sizeof(*hp));

    if (hp)
        hp->objs = calloc(m->n ? m->n : 1, sizeof(*hp->objs));
    if (!hp || !hp->objs) {
        free(hp);
        in_abort(ic, "out of memory for a pull");
        return;
    }
    hp->tag = m->tag;
    hp->eager_max = m->eager_max;
    hp->flags = m->flags;
    hp->n = m->n;
    /* Only sealed objects, by id: pinned now, so that none goes before its bytes have. */
    for (uint32_t i = 0; i < m->n; i++) {
        struct object *o = store_find(ic->e->store, &m->ids[i]);
        if (o && o->state == FERRY_STATE_SEALED) {
            store_ref(ic->e->store, o);
            hp->objs[i] = o;
        }
    }
    *ic->queue_tail = hp;
    ic->queue_tail = &hp->next;
    in_process(ic);
}

static void in_frame(struct xconn *c, const struct proto_header *h, const uint8_t *payload)
{
    struct inconn *ic = c->owner;
    struct wire_msg m;

    if (wire_decode(h, payload, &m) < 0) {
        in_abort(ic, ferry_errmsg());
        return;
    }
    if (ic->state == IN_HELLO && m.type == WIRE_HELLO)
        in_on_hello(ic, &m);
    else if (ic->state == IN_AUTH && m.type == WIRE_AUTH)
        in_on_auth(ic, &m);
    else if (ic->state == IN_READY && m.type == WIRE_PULL)
        in_on_pull(ic, &m);
    else
        in_abort(ic, ic->state == IN_READY ? "unexpected message type"
                                           : "message before authentication");
}

static void in_received(struct xconn *c, void *arg) {}

static void in_sent(struct xconn *c, void *arg)
{
    struct inconn *ic = c->owner;
    struct pin *pn = arg;

    ic->e->counters.transfers_out++;
    ic->e->counters.bytes_out += pn->len;
    ic->pinned -= pn->len;
    *pn->pprev = pn->next;
    if (pn->next)
        pn->next->pprev = pn->pprev;
    store_unref(ic->e->store, pn->o);
    free(pn);
    in_backpressure(ic);
}

static const struct xconn_events in_events = {
    .frame = in_frame,
    .received = in_received,
    .sent = in_sent,
    .closed = in_closed,
};

static void on_handshake_deadline(struct loop *l, struct loop_timer *t)
{
    in_abort(t->arg, "no handshake within 10 s");
}

static void on_accept(struct xlistener *l, struct xconn *c, void *arg)
{
    struct engine *e = arg;
    struct inconn *ic;

    if (e->inconn_count >= MAX_INCONNS) {
        e->counters.peer_errors++;
        log_warn("refusing a transfer connection from %s: %d are open", c->peer, MAX_INCONNS);
        c->type->close(c);
        return;
    }
    if (!(ic = calloc(1, sizeof(*ic)))) {
        c->type->close(c);
        return;
    }
    e->inconn_count++;
    ic->e = e;
    ic->conn = c;
    ic->queue_tail = &ic->queue;
    c->owner = ic;
    c->max_frame = UNAUTH_MAX_FRAME;
    loop_timer_init(&ic->stall, on_in_stall, ic);
    loop_timer_init(&ic->deadline, on_handshake_deadline, ic);
    loop_timer_start(e->loop, &ic->deadline, loop_now_ms() + HANDSHAKE_MS);
    ic->next = e->inconns;
    if (ic->next)
        ic->next->pprev = &ic->next;
    ic->pprev = &e->inconns;
    e->inconns = ic;
    e->counters.connections_accepted++;
}

/* ---- the engine ---- */

/* Opens the fabric as the configuration says; with auto, a fabric that does not open is
 * logged once and left out. */
static int open_fabric(struct engine *e)
{
    struct xconfig xc = {.addr = e->cfg.listen_addr,
                         .provider = e->cfg.fabric_provider,
                         .arena = e->store->base,
                         .arena_len = store_capacity(e->store),
                         .window = e->cfg.fabric_window ? e->cfg.fabric_window : 8};
    int rc;

    if (e->cfg.transport == ENGINE_TCP)
        return 0;
    rc = fabric->listen(e->loop, &xc, &in_events, on_accept, e, &e->fab_l);
    if (rc < 0 && e->cfg.transport == ENGINE_FABRIC)
        return rc;
    if (rc < 0) {
        log_warn("no fabric (%s): transfers run on tcp", ferry_errmsg());
        return 0;
    }
    return 0;
}

int engine_open(struct engine **out, struct loop *l, struct store *st,
                const struct engine_config *cfg)
{
    struct engine *e = calloc(1, sizeof(*e));
    struct xconfig tc = {.addr = cfg->listen_addr};
    int rc;

    if (!e)
        return err_set(FERRY_ENOMEM, "engine");
    e->loop = l;
    e->store = st;
    e->cfg = *cfg;
    snprintf(e->node_id, sizeof(e->node_id), "%s", cfg->node_id);
    if (cfg->secret && cfg->secret_len) {
        if (!(e->secret = malloc(cfg->secret_len))) {
            rc = err_set(FERRY_ENOMEM, "secret");
            goto free_e;
        }
        memcpy(e->secret, cfg->secret, cfg->secret_len);
    }
    e->cfg.secret = e->secret;
    e->cfg.fabric_provider = NULL; /* not kept: the endpoint knows its provider */
    if ((rc = hasher_start(&e->verifier)) < 0)
        goto free_secret;
    if ((rc = loop_watch_add(l, &e->verifier_watch, hasher_fd(e->verifier), LOOP_READ, on_verified,
                             e)) < 0)
        goto stop_verifier;
    if ((rc = tcp->listen(l, &tc, &in_events, on_accept, e, &e->tcp_l)) < 0)
        goto unwatch_verifier;
    e->cfg.fabric_provider = cfg->fabric_provider;
    rc = open_fabric(e);
    e->cfg.fabric_provider = NULL;
    if (rc < 0)
        goto close_tcp;
    engine_set_eager_max(e, cfg->eager_max);
    if (e->fab_l)
        log_info("fabric: provider %s, eager up to %" PRIu64 " bytes, one-sided reads above",
                 fabric->provider(e->fab_l), e->eager_max);
    *out = e;
    return 0;

close_tcp:
    tcp->listener_close(e->tcp_l);
unwatch_verifier:
    loop_watch_del(l, &e->verifier_watch);
stop_verifier:
    free(hasher_stop(e->verifier));
free_secret:
    free(e->secret);
free_e:
    free(e);
    return rc;
}

void engine_close(struct engine *e)
{
    struct loop *l = e ? e->loop : NULL;
    struct hasher_job *job, *next;
    struct want *w;
    size_t pos = 0;

    if (!e)
        return;
    while (e->inconns) {
        e->inconns->conn->type->close(e->inconns->conn);
        inconn_free(e->inconns);
    }
    while (e->peers) {
        struct peer *p = e->peers;
        e->peers = p->next;
        p->conn->type->close(p->conn);
        for (struct pull *pl = p->pulls; pl; pl = pl->next) {
            for (uint32_t i = 0; i < pl->n; i++) {
                struct want *pw = pl->entries[i].w;
                if (pw && pw->done)
                    want_free(pw); /* finished, kept only for this pull */
                else if (pw)
                    pw->entry = NULL;
            }
        }
        while (p->pulls) {
            struct pull *pl = p->pulls;
            p->pulls = pl->next;
            pull_free(pl);
        }
        for (uint32_t i = 0; i < p->nqueue; i++) {
            p->queue[i]->queued = NULL;
            if (p->queue[i]->done)
                want_free(p->queue[i]);
        }
        peer_free(p);
    }
    /* The fabric's endpoint closes first: then no read can land in what is aborted below. */
    if (e->fab_l)
        fabric->listener_close(e->fab_l);
    tcp->listener_close(e->tcp_l);
    loop_watch_del(l, &e->verifier_watch);
    for (job = hasher_stop(e->verifier); job; job = next) {
        struct want *v = job->arg;
        next = job->next;
        v->busy = 0;
        if (v->done) {
            store_abort(e->store, v->obj);
            want_free(v);
        }
        free(job);
    }
    /* Every want left: abort its partial object, free it without answering (the owner is
     * going away too). */
    while ((w = idmap_next(&e->wants, &pos, NULL))) {
        if (w->obj)
            store_abort(e->store, w->obj);
        w->waiters = NULL;
    }
    pos = 0;
    while ((w = idmap_next(&e->wants, &pos, NULL)))
        want_free(w);
    idmap_free(&e->wants);
    while (e->breakers) {
        struct breaker *b = e->breakers;
        e->breakers = b->next;
        free(b);
    }
    free(e->secret);
    free(e);
    loop_fire_due(l); /* the transport frees closed connections from a 0 ms timer */
}

/* A new want for id, its lookup started. */
static struct want *want_new(struct engine *e, const ferry_id *id)
{
    struct want *w = calloc(1, sizeof(*w));

    if (!w || idmap_put(&e->wants, id, w) < 0) {
        free(w);
        return NULL;
    }
    w->e = e;
    w->id = *id;
    loop_timer_init(&w->retry, on_retry, w);
    if (directory_lookup(e->dir, id, 0, on_holders, w) < 0) {
        idmap_remove(&e->wants, id);
        free(w);
        return NULL;
    }
    return w;
}

int engine_fetch(struct engine *e, const ferry_id *id, engine_fetch_fn *fn, void *ctx,
                 uint32_t index)
{
    struct want *w = idmap_get(&e->wants, id);
    struct waiter *x;

    if (!e->dir)
        return err_set(FERRY_EDIRECTORY, "this node has no directory (--directory)");
    if (!(x = calloc(1, sizeof(*x))))
        return err_set(FERRY_ENOMEM, "fetch waiter");
    if (!w && !(w = want_new(e, id))) {
        free(x);
        return err_set(FERRY_ENOMEM, "fetch record");
    }
    *x = (struct waiter){.fn = fn, .ctx = ctx, .index = index, .next = w->waiters};
    w->waiters = x;
    return 0;
}

void engine_cancel(struct engine *e, void *ctx)
{
    struct want *w, **idle = calloc(e->wants.count ? e->wants.count : 1, sizeof(*idle));
    size_t pos = 0, nidle = 0;

    while ((w = idmap_next(&e->wants, &pos, NULL))) {
        for (struct waiter **pp = &w->waiters; *pp;) {
            struct waiter *x = *pp;
            if (x->ctx == ctx) {
                *pp = x->next;
                free(x);
            } else {
                pp = &x->next;
            }
        }
        /* Nobody waits and nothing is under way: stop asking the directory. (Without
         * memory for the list, such wants stop at their next lookup instead.) */
        if (idle && !w->waiters && (w->state == WANT_RETRY || w->state == WANT_QUEUED))
            idle[nidle++] = w;
    }
    for (size_t i = 0; i < nidle; i++)
        want_finish(idle[i], FERRY_ETIMEDOUT);
    free(idle);
}

void engine_on_sealed(struct engine *e, const struct object *o)
{
    struct want *w = idmap_get(&e->wants, &o->id);

    if (w)
        want_finish(w, 0);
}

void engine_on_hashed(struct engine *e, const struct object *o)
{
    struct inconn *ic, *next;

    for (ic = e->inconns; ic; ic = next) {
        next = ic->next;
        if (ic->queue)
            in_process(ic);
    }
}

const struct engine_counters *engine_counters(struct engine *e)
{
    if (e->fab_l)
        fabric->stats(e->fab_l, &e->counters.fabric);
    return &e->counters;
}

void engine_set_directory(struct engine *e, struct directory *dir)
{
    e->dir = dir;
}

void engine_advertise(const struct engine *e, struct directory_node *self)
{
    snprintf(self->transports, sizeof(self->transports), "%s", e->fab_l ? "tcp,fabric" : "tcp");
    if (e->fab_l)
        snprintf(self->fabric, sizeof(self->fabric), "%s@%s", fabric->provider(e->fab_l),
                 fabric->address(e->fab_l));
    else
        self->fabric[0] = '\0';
}

const char *engine_fabric_provider(const struct engine *e)
{
    return e->fab_l ? fabric->provider(e->fab_l) : NULL;
}

/* Where one-sided reads start to pay, per provider, from `ferry calibrate` runs on our
 * 2-core VMs (docs/architecture.md): other providers start from EAGER_DEFAULT. */
static uint64_t eager_default(const char *provider)
{
    static const struct {
        const char *provider;
        uint64_t eager_max;
    } measured[] = {
        {"shm", 16u << 10},
        {"tcp;ofi_rxm", 16u << 10},
    };

    for (size_t i = 0; provider && i < sizeof(measured) / sizeof(measured[0]); i++) {
        if (strcmp(provider, measured[i].provider) == 0)
            return measured[i].eager_max;
    }
    return EAGER_DEFAULT;
}

uint64_t engine_eager_max(const struct engine *e)
{
    return e->eager_max;
}

void engine_set_eager_max(struct engine *e, uint64_t v)
{
    e->eager_max = v == ENGINE_EAGER_AUTO ? eager_default(engine_fabric_provider(e)) : v;
}

size_t engine_peers(const struct engine *e, struct engine_peer_info *out, size_t max)
{
    size_t n = 0;

    for (const struct peer *p = e->peers; p && n < max; p = p->next, n++) {
        out[n] = (struct engine_peer_info){0};
        snprintf(out[n].node, sizeof(out[n].node), "%s", p->node.id);
        snprintf(out[n].transport, sizeof(out[n].transport), "%s", p->conn->type->name);
        snprintf(out[n].provider, sizeof(out[n].provider), "%s",
                 p->conn->type->provider(p->conn->local));
        snprintf(out[n].why, sizeof(out[n].why), "%s", p->why);
    }
    return n;
}
