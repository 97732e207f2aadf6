/*
 * engine_peer.c - the receiving side's connections of the transfer engine: peers (outgoing
 * connections, one per holder node), their handshake, stalls and liveness, the queue of wants
 * each one serves and the pulls that ask for them. What comes back, and what the wants are and
 * do, is above (engine_pull.c, engine_want.c): a want a peer lets go is told of through the
 * engine's hooks (want_lost, want_unqueued), never by name.
 */
#include "transfer/engine_int.h"

void eng_peer_free(struct peer *p)
{
    loop_timer_stop(p->e->loop, &p->flush);
    loop_timer_stop(p->e->loop, &p->idle);
    eng_watch_stop(p->e, &p->in);
    if (p->asking && p->e->dir)
        directory_cancel(p->e->dir, p);
    auth_session_end(&p->as);
    free(p->queue);
    free(p);
}

void eng_pull_free(struct pull *pl)
{
    free(pl->entries);
    free(pl);
}

/* Detaches every want the peer had in hand and sends each on to its next holder (fault
 * FAULT_LOST: the holder may be asked again). */
static void peer_fail_wants(struct peer *p, const char *why, enum fault fault)
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
                eng_release_after(e, p->conn, w->obj, 1); /* the partial object is never seen */
                w->obj = NULL;
            }
            e->hooks->want_lost(w, pl->entries[i].receiving ? p->conn : NULL, why, fault);
        }
        eng_pull_free(pl);
    }
    for (uint32_t i = 0; i < p->nqueue; i++) {
        p->queue[i]->queued = NULL;
        e->hooks->want_lost(p->queue[i], NULL, why, fault);
    }
    p->nqueue = 0;
}

static void peer_remove(struct peer *p, const char *why, enum fault fault)
{
    struct engine *e = p->e;
    struct peer **pp;

    for (pp = &e->peers; *pp && *pp != p; pp = &(*pp)->next)
        ;
    if (*pp)
        *pp = p->next;
    if (e->dir)
        directory_forget_node(e->dir, p->node.id);
    peer_fail_wants(p, why, fault);
    eng_peer_free(p);
}

/* The reason is copied first: it may be ferry_errmsg(), which the calls below overwrite. */
void eng_peer_closed(struct xconn *c, int err, const char *why)
{
    struct peer *p = c->owner;
    char reason[ERR_DETAIL_MAX];

    snprintf(reason, sizeof(reason), "%s", why);
    if (err != FERRY_EPROTO && p->authed && !p->pulls && !p->nqueue) {
        log_info("idle transfer connection to %s (%s) closed: %s", p->node.id, c->peer, reason);
        peer_remove(p, reason, FAULT_REAL); /* nothing was lost: the next fetch connects again */
        return;
    }
    if (err == FERRY_EPROTO)
        p->e->counters.peer_errors++;
    log_warn("transfer connection to %s (%s) lost: %s", p->node.id, c->peer, reason);
    eng_breaker_fail(p->e, p->node.id, c->type, reason);
    peer_remove(p, reason, FAULT_REAL);
}

/* Drops a peer that failed its wants as fault says. why is copied first, as in peer_closed. */
static void peer_abort_as(struct peer *p, const char *reason, enum fault fault)
{
    char why[ERR_DETAIL_MAX];

    snprintf(why, sizeof(why), "%s", reason);
    p->e->counters.peer_errors++;
    log_warn("closing the transfer connection to %s (%s): %s", p->node.id, p->conn->peer, why);
    p->conn->type->close(p->conn);
    eng_breaker_fail(p->e, p->node.id, p->conn->type, why);
    peer_remove(p, why, fault);
}

/* Drops a peer that broke the protocol, or failed for real. */
void eng_peer_abort(struct peer *p, const char *reason)
{
    peer_abort_as(p, reason, FAULT_REAL);
}

/* The watchdog runs while the peer owes us something: the handshake, or bytes for a pull.
 * Our own sends do not count, only what arrives. */
void eng_peer_stall_arm(struct peer *p)
{
    if (!p->authed || p->pulls || p->nqueue) {
        eng_watch_start(p->e, &p->in, p->conn->bytes_in);
        loop_timer_stop(p->e->loop, &p->idle);
    } else {
        eng_watch_stop(p->e, &p->in);
        if (p->idle.heap_index == SIZE_MAX)
            loop_timer_start(p->e->loop, &p->idle, loop_now_ms() + PEER_IDLE_MS);
    }
}

/* Unused for PEER_IDLE_MS: closed, quietly (the next fetch from it connects again). */
static void on_peer_idle(struct loop *l, struct loop_timer *t)
{
    struct peer *p = t->arg;

    if (p->pulls || p->nqueue)
        return; /* a pull is on its way: the watchdog has it */
    log_debug("closing the idle transfer connection to %s (%s)", p->node.id, p->conn->peer);
    p->conn->type->close(p->conn);
    peer_remove(p, "idle", FAULT_REAL);
}

/* The answer to a fresh lookup of what p owes: p is dropped when its node is among the
 * holders the directory left out (dead, or another run). */
static void on_liveness(void *arg, const struct directory_answer *a)
{
    struct peer *p = arg;
    char why[DIRECTORY_WHY_MAX + 32];

    p->asking = 0;
    for (size_t i = 0; a->status == 0 && i < a->ngone; i++) {
        if (strcmp(a->gone[i].id, p->node.id) == 0) {
            snprintf(why, sizeof(why), "owes bytes and is %s", a->gone[i].why);
            eng_peer_abort(p, why);
            return;
        }
    }
}

/* Asks whether a holder that went quiet is still alive, by a fresh lookup of an object it
 * owes us. */
static void peer_check_liveness(struct peer *p)
{
    struct pentry *pe = NULL;

    for (uint32_t i = 0; p->pulls && i < p->pulls->n && !pe; i++)
        pe = p->pulls->entries[i].w ? &p->pulls->entries[i] : NULL;
    if (!pe || p->asking || !p->e->dir)
        return;
    if (directory_lookup(p->e->dir, &pe->w->id, 1, on_liveness, p) == 0)
        p->asking = 1;
}

/* Whether the head pull was answered and its bytes are coming. */
static int peer_receiving(const struct peer *p)
{
    return p->pulls && p->pulls->replied && p->pulls->pending;
}

/* A holder whose reply came sends at least RECV_MIN_RATE over each window of timers.rate_ms,
 * or it is dropped: 1 then. Dropped as unreached, not for real: its wants go to other holders
 * first, and ask it again (UNREACHED_MAX times in all) where it is the only one. A link shared
 * by many (receivers of a broadcast that lost their relay, at 100 Mbit/s) is slow for a while
 * without anything wrong with the holder; for real, the sole holder's receiver failed its fetch. */
static int peer_too_slow(struct peer *p)
{
    struct engine *e = p->e;
    uint64_t now = loop_now_ms(), in = p->conn->bytes_in, rate;
    char why[112];

    if (!peer_receiving(p) || !p->rx_ms) { /* the window starts at the first look after it */
        p->rx_ms = peer_receiving(p) ? now : 0;
        p->rx_bytes = in;
        return 0;
    }
    if (now - p->rx_ms < e->timers.rate_ms)
        return 0;
    rate = (in - p->rx_bytes) * 1000 / (now - p->rx_ms);
    p->rx_ms = now;
    p->rx_bytes = in;
    if (rate >= RECV_MIN_RATE)
        return 0;
    e->counters.holders_too_slow++;
    snprintf(why, sizeof(why), "sent %" PRIu64 " B/s for %u ms, under the minimum of %u", rate,
             e->timers.rate_ms, RECV_MIN_RATE);
    peer_abort_as(p, why, FAULT_UNREACHED);
    return 1;
}

/* Whether p owes the reply to a relayed range, or its bytes, with nothing before it still to
 * come: a partial holder answers such a pull within half a relay deadline (the range, or "not
 * yet": engine_hold.c) and then streams the range whole at the link's pace, so one that says
 * nothing for a whole deadline is given up on, its ranges moved, rather than left to the rate
 * and stall watchdogs (a relay partitioned mid-range held a chain for 5 s, a silent one its
 * fetch for 30 s). */
static int peer_owes_relay_reply(const struct peer *p)
{
    const struct pull *pl = p->pulls;
    /* One-sided reads count their bytes as each read ends, behind other holders' reads: there,
     * only the reply is waited for. */
    int streams = !(p->conn->type->flags & XPORT_ONE_SIDED);

    return pl && (!pl->replied || (streams && pl->pending)) && pl->n && pl->entries[0].w &&
           pl->entries[0].w->relayed;
}

static void on_stall(struct loop *l, struct loop_timer *t)
{
    struct peer *p = t->arg;
    const struct engine_timers *tm = &p->e->timers;
    uint64_t rate, idle = eng_watch_idle(p->e, &p->in, p->conn->bytes_in, &rate);
    char why[96];

    if (!p->authed && idle >= tm->answer_ms && p->conn->bytes_out) {
        /* Our hello went out and the peer said nothing back: given up on. */
        snprintf(why, sizeof(why), "no answer to our hello within %u ms (dead or unreachable)",
                 tm->answer_ms);
        eng_peer_abort(p, why);
        return;
    }
    if (!p->authed && loop_now_ms() - p->born_ms >= tm->handshake_ms) {
        /* A byte now and then keeps the answer deadline away, never this one: a holder that
         * trickled bytes of no frame held its fetch, and the honest holders it had, until the
         * fetch's timeout. */
        snprintf(why, sizeof(why), "no handshake within %u ms", tm->handshake_ms);
        eng_peer_abort(p, why);
        return;
    }
    if (!p->authed && idle >= tm->answer_ms) {
        /* Not even connected: a host that is down, or a link so full that its SYNs were
         * dropped twice (32 nodes opening 992 connections at once into links the first ones
         * filled). Its wants may ask it again after their backoff, while they have time, up
         * to UNREACHED_MAX - 1 times each. */
        snprintf(why, sizeof(why), "not connected within %u ms (down, or its link congested)",
                 tm->answer_ms);
        peer_abort_as(p, why, FAULT_UNREACHED);
        return;
    }
    if (p->authed && idle >= tm->relay_ms && peer_owes_relay_reply(p)) {
        p->e->counters.relays_silent++;
        snprintf(why, sizeof(why), "a partial holder that sent nothing of a relayed range in %u ms",
                 tm->relay_ms);
        eng_peer_abort(p, why); /* FAULT_REAL: its ranges move, and it is not asked again */
        return;
    }
    if (idle >= tm->stall_ms) {
        snprintf(why, sizeof(why), "no bytes for %u ms", tm->stall_ms);
        eng_peer_abort(p, why);
        return;
    }
    if (peer_too_slow(p))
        return;
    if (p->authed && idle >= LIVENESS_MS)
        peer_check_liveness(p);
    loop_timer_start(l, t, loop_now_ms() + p->e->check_ms);
}

/* Drops the queued wants that finished while they waited (a local put, say), the parts of
 * objects that ended (engine_cancel ended the wants but not the parts, which go here), and
 * what nobody waits for past the grace a fetch has to take it up again (timers.orphan_ms, the
 * want's orphan timer: clients wait in slices, and a relayed object deals its next ranges as
 * its last ones come in; dropped at once, a Python broadcast's ranges went between slices and
 * its objects were fetched whole). A holder that answers busy has them asked again. Ending
 * them here touches nothing but the want (a lookup without waiters ends it at once). */
static void peer_prune_queue(struct peer *p)
{
    uint32_t k = 0;

    for (uint32_t i = 0; i < p->nqueue; i++) {
        struct want *w = p->queue[i], *root = w->parent ? w->parent : w;
        if (w->done || root->done || (!root->waiters && !loop_timer_armed(&root->orphan))) {
            w->queued = NULL;
            p->e->hooks->want_unqueued(w, FERRY_ETIMEDOUT);
        } else {
            p->queue[k++] = w;
        }
    }
    p->nqueue = k;
}

/* How many queued wants the next PULL takes: up to PULL_BYTES_MAX recorded bytes (at least
 * one want) and WIRE_MAX_IDS ids; a relayed part alone. No room is taken yet: the reply confirms
 * the sizes first. */
static uint32_t pull_size(const struct peer *p)
{
    uint64_t bytes = 0;
    uint32_t n = 0;

    while (n < p->nqueue && n < WIRE_MAX_IDS) {
        const struct want *w = p->queue[n];
        uint64_t size = w->has_content ? w->size : 0;
        /* A partial holder answers a pull once it has all of it: a relayed range goes alone,
         * so that it is passed on as soon as it is in there. */
        if (n && (bytes + size > PULL_BYTES_MAX || w->relayed || p->queue[0]->relayed))
            break;
        bytes += size;
        n++;
    }
    return n;
}

/* Sends one PULL with the queued wants pull_size takes. */
static void peer_flush(struct peer *p)
{
    struct pbuf b = {0};
    struct pull *pl;
    ferry_id *ids;
    struct wire_range *ranges = NULL;
    uint8_t flags = WIRE_PULL_VERIFY;
    uint32_t n;

    if (!(p->authed || p->early) || (p->busy && p->pulls))
        return;
    p->busy = 0;
    peer_prune_queue(p);
    n = pull_size(p);
    if (!p->authed && n > EARLY_PULL_IDS)
        n = EARLY_PULL_IDS;
    if (n == 0)
        return;
    pl = calloc(1, sizeof(*pl));
    ids = malloc((size_t)n * sizeof(*ids));
    for (uint32_t i = 0; i < n; i++)
        flags |= p->queue[i]->parent ? WIRE_PULL_RANGES : 0;
    if (flags & WIRE_PULL_RANGES)
        ranges = malloc((size_t)n * sizeof(*ranges));
    if (pl)
        pl->entries = calloc(n, sizeof(*pl->entries));
    if (!pl || !ids || !pl->entries || ((flags & WIRE_PULL_RANGES) && !ranges)) {
        free(ids);
        free(ranges);
        if (pl)
            eng_pull_free(pl);
        eng_peer_abort(p, "out of memory for a pull");
        return;
    }
    pl->tag = ++p->next_tag;
    pl->n = n;
    for (uint32_t i = 0; i < n; i++) {
        struct want *w = p->queue[i];
        w->queued = NULL;
        ids[i] = w->id;
        if (ranges) /* a part's range, or the whole object */
            ranges[i] = w->parent ? (struct wire_range){w->off, w->size}
                                  : (struct wire_range){0, UINT64_MAX};
        pl->entries[i] = (struct pentry){.pull = pl, .w = w};
        w->entry = &pl->entries[i];
        w->state = WANT_PULLING;
    }
    memmove(p->queue, p->queue + n, (size_t)(p->nqueue - n) * sizeof(*p->queue));
    p->nqueue -= n;
    wire_pull(&b, pl->tag, flags, p->e->eager_max, ids, ranges, n);
    auth_seal(&p->as, &b, 0);
    free(ids);
    free(ranges);
    *p->pulls_tail = pl;
    p->pulls_tail = &pl->next;
    if (b.oom || p->conn->type->send_frame(p->conn, b.data, b.len) < 0) {
        pbuf_free(&b);
        eng_peer_abort(p, "cannot send a pull");
        return;
    }
    pbuf_free(&b);
    eng_peer_stall_arm(p);
    if (p->nqueue)
        loop_timer_start(p->e->loop, &p->flush, 0);
}

static void on_flush(struct loop *l, struct loop_timer *t)
{
    peer_flush(t->arg);
}

int eng_peer_reserve(struct peer *p)
{
    uint32_t cap = p->capqueue ? p->capqueue * 2 : 16;
    struct want **q;

    if (p->nqueue < p->capqueue)
        return 0;
    if (!(q = realloc(p->queue, cap * sizeof(*q))))
        return -1;
    p->queue = q;
    p->capqueue = cap;
    return 0;
}

/* Queues w for the next PULL to p (sent at the end of this loop turn, with the others). */
void eng_peer_enqueue(struct peer *p, struct want *w)
{
    if (eng_peer_reserve(p) < 0) {
        log_error("out of memory for a pull queue: an object %s is left out",
                  w->parent ? "in ranges" : "fetched whole");
        p->e->hooks->want_unqueued(w, err_set(FERRY_ENOMEM, "pull queue"));
        return;
    }
    p->queue[p->nqueue++] = w;
    w->state = WANT_QUEUED;
    w->entry = NULL;
    w->queued = p;
    snprintf(w->holder, sizeof(w->holder), "%s", p->node.id);
    loop_timer_start(p->e->loop, &p->flush, 0);
}

struct peer *eng_peer_find(struct engine *e, const char *node)
{
    struct peer *p;

    for (p = e->peers; p && strcmp(p->node.id, node) != 0; p = p->next)
        ;
    return p;
}

void eng_peer_suspect(struct engine *e, const char *holder, const ferry_id *id, uint64_t chunk)
{
    struct peer *p = eng_peer_find(e, holder);
    struct pbuf b = {0};

    if (!p || !p->authed)
        return; /* gone: its copy is checked when another receiver catches it */
    wire_suspect(&b, id, chunk);
    auth_seal(&p->as, &b, 0);
    if (b.oom || p->conn->type->send_frame(p->conn, b.data, b.len) < 0)
        eng_peer_abort(p, "cannot send a suspect");
    pbuf_free(&b);
}

/* Takes transport off the list of n's. */
static void remove_transport(struct directory_node *n, const char *transport)
{
    for (uint32_t i = 0; i < n->nxp; i++) {
        if (strcmp(n->xp[i].name, transport) == 0) {
            memmove(&n->xp[i], &n->xp[i + 1], (n->nxp - i - 1) * sizeof(n->xp[0]));
            n->nxp--;
            return;
        }
    }
}

/* Connects on the transport that reaches the node; if that one refuses at once, on the next
 * that reaches it (the fallback at worst), with the refusal counted against the first and
 * given as the reason for the transport used. */
static int peer_connect(struct peer *p)
{
    struct engine *e = p->e;
    struct directory_node left = p->node; /* the transports not yet tried */
    char first[sizeof(p->why)] = "", last[sizeof(p->why)] = "";
    size_t i;

    while ((i = eng_transport_for(e, &left, p->why, sizeof(p->why))) < e->nreg) {
        const struct transport *t = e->reg[i];
        const char *addr = directory_node_addr(&left, t->name);
        if (t->connect(e->ls[i], addr, e->hooks->peer_events, &p->conn) == 0) {
            if (first[0])
                snprintf(p->why, sizeof(p->why), "%s", first);
            return 0;
        }
        snprintf(last, sizeof(last), "%s refused: %s", t->name, ferry_errmsg());
        if (!first[0])
            snprintf(first, sizeof(first), "%s", last);
        log_warn("%s to %s: %s", t->name, p->node.id, ferry_errmsg());
        eng_breaker_fail(e, p->node.id, t, ferry_errmsg());
        remove_transport(&left, t->name);
    }
    return err_set(FERRY_ECONN, "%s: %s", p->node.id, last[0] ? last : p->why);
}

/* 1 when both entries of a node list the same transports at the same addresses. */
static int same_addresses(const struct directory_node *a, const struct directory_node *b)
{
    if (strcmp(a->addr, b->addr) != 0 || a->nxp != b->nxp)
        return 0;
    for (uint32_t i = 0; i < a->nxp; i++) {
        const char *there = directory_node_addr(b, a->xp[i].name);
        if (!there || strcmp(there, a->xp[i].addr) != 0)
            return 0;
    }
    return 1;
}

_Static_assert(PROTO_HEADER_SIZE + 13 + EARLY_PULL_IDS * (FERRY_ID_SIZE + WIRE_RANGE_SIZE) <=
                   UNAUTH_MAX_FRAME,
               "a PULL before the challenge fits an unauthenticated frame");

/* Between nodes without a secret the proof is empty, so it goes right after the hello, and
 * pulls may follow it at once (p->early). */
static int send_empty_proof(struct peer *p)
{
    static const uint8_t none[WIRE_MAC];
    struct pbuf b = {0};
    int rc;

    wire_auth(&b, none);
    rc = b.oom ? FERRY_ENOMEM : p->conn->type->send_frame(p->conn, b.data, b.len);
    pbuf_free(&b);
    p->early = rc == 0;
    return rc;
}

struct peer *eng_peer_get(struct engine *e, const struct directory_node *node)
{
    struct peer *p = eng_peer_find(e, node->id);
    struct pbuf b = {0};

    /* The same node id at new addresses is a new incarnation of the node (a restart): the
     * connection to the old one may look alive (RDM endpoints hear of no death when idle). */
    if (p && !same_addresses(&p->node, node)) {
        log_info("%s is at a new address (restarted): reconnecting", node->id);
        p->conn->type->close(p->conn);
        peer_remove(p, "the node restarted at a new address", FAULT_REAL);
    } else if (p) {
        return p;
    }
    if (!(p = calloc(1, sizeof(*p))))
        return NULL;
    p->e = e;
    p->node = *node;
    p->born_ms = loop_now_ms();
    p->pulls_tail = &p->pulls;
    loop_timer_init(&p->flush, on_flush, p);
    loop_timer_init(&p->in.timer, on_stall, p);
    loop_timer_init(&p->idle, on_peer_idle, p);
    if (auth_nonce(p->hs.nonce_c) < 0 || peer_connect(p) < 0) {
        log_warn("cannot connect to %s (%s): %s", node->id, node->addr, ferry_errmsg());
        free(p);
        return NULL;
    }
    p->conn->owner = p;
    p->conn->max_frame = UNAUTH_MAX_FRAME;
    e->counters.connections_opened++;
    snprintf(p->hs.node_c, sizeof(p->hs.node_c), "%s", e->node_id);
    p->hs.inc_c = eng_incarnation(e);
    snprintf(p->hs.addr, sizeof(p->hs.addr), "%s",
             directory_node_addr(&p->node, p->conn->type->name));
    wire_hello(&b, e->node_id, p->hs.inc_c, p->hs.addr, p->hs.nonce_c);
    if (b.oom || p->conn->type->send_frame(p->conn, b.data, b.len) < 0 ||
        (!auth_keyed(&e->auth) && send_empty_proof(p) < 0)) {
        pbuf_free(&b);
        p->conn->type->close(p->conn);
        free(p);
        return NULL;
    }
    pbuf_free(&b);
    p->next = e->peers;
    e->peers = p;
    eng_peer_stall_arm(p);
    return p;
}

/* CHALLENGE from the holder: check its proof of the secret, give ours, start pulling. */
void eng_peer_on_challenge(struct peer *p, const struct wire_msg *m)
{
    struct engine *e = p->e;
    uint8_t mine[WIRE_MAC];
    struct pbuf b = {0};
    const char *why;

    /* Only the node the directory named, in the run it named: anyone else answering at its
     * address is a relay, a stale entry or a restart. */
    if (strcmp(m->node, p->node.id) != 0) {
        char who[WIRE_NODE_MAX + 64];
        snprintf(who, sizeof(who), "answered as node %s (relayed or misdirected)", m->node);
        eng_peer_abort(p, who);
        return;
    }
    if (p->node.inc && m->inc != p->node.inc) {
        eng_peer_abort(p, "answered from another run than the directory lists (restarted)");
        return;
    }
    memcpy(p->hs.node_a, m->node, sizeof(m->node));
    p->hs.inc_a = m->inc;
    memcpy(p->hs.nonce_a, m->nonce, WIRE_NONCE);
    if (auth_answer(&e->auth, &p->hs, m->keyed, m->mac, mine, &why) < 0) {
        eng_peer_abort(p, why);
        return;
    }
    if (auth_session_start(&e->auth, &p->hs, 1, &p->as) < 0) {
        eng_peer_abort(p, "cannot derive the session's keys");
        return;
    }
    if (!p->early) {
        wire_auth(&b, mine);
        if (b.oom || p->conn->type->send_frame(p->conn, b.data, b.len) < 0) {
            pbuf_free(&b);
            eng_peer_abort(p, "cannot send our proof");
            return;
        }
        pbuf_free(&b);
    }
    p->authed = 1;
    p->conn->max_frame = WIRE_MAX_FRAME;
    eng_watch_stop(e, &p->in);
    eng_peer_stall_arm(p); /* for pulls that went before the challenge (p->early) too */
    peer_flush(p);         /* may free p */
}

/* Whether a want whose bytes come on p is abandoned (a part: its parent). */
static int peer_carries_abandoned(const struct peer *p)
{
    for (const struct pull *pl = p->pulls; pl; pl = pl->next) {
        for (uint32_t i = 0; i < pl->n; i++) {
            const struct want *w = pl->entries[i].w;
            if (w && pl->entries[i].receiving && (w->parent ? w->parent : w)->abandoned)
                return 1;
        }
    }
    return 0;
}

void eng_peers_drop_abandoned(struct engine *e)
{
    struct peer *p, *next;

    for (p = e->peers; p; p = next) {
        next = p->next;
        if (!peer_carries_abandoned(p))
            continue;
        log_info("closing the transfer connection to %s (%s): nobody waits for what it sends",
                 p->node.id, p->conn->peer);
        p->conn->type->close(p->conn);
        peer_remove(p, "closed: nobody waited for an object it was sending", FAULT_LOST);
    }
}
