/*
 * engine_hold.c - the holding side of the transfer engine: incoming connections, their
 * handshake, PULLs answered from pinned sealed objects, backpressure and stall watchdogs.
 */
#include "transfer/engine_int.h"

static void in_process(struct inconn *ic);

static void pins_drop(struct inconn *ic)
{
    while (ic->pins) {
        struct pin *pn = ic->pins;
        ic->pins = pn->next;
        eng_release_after(ic->e, ic->conn, pn->o, 0);
        free(pn);
    }
}

static void hpull_free(struct hpull *hp)
{
    free(hp->ids);
    free(hp->ranges);
    free(hp);
}

/* ---- node ids: the connections and pins of each ---- */

/* The node's connections whose pulls wait for its pins to drop look again (from the loop: the
 * caller may be freeing a connection). */
static void node_wake(struct engine *e, const struct innode *n)
{
    for (struct inconn *ic = n->conns; ic; ic = ic->node_next)
        if (ic->queue || ic->paused)
            loop_timer_start(e->loop, &ic->backlog, loop_now_ms());
}

/* Whether node id n shares the pins of all: it holds some, or waits for them. */
static int sharing(const struct innode *n)
{
    return n->pinned || n->waiting;
}

/* len bytes more (add) or fewer pinned for ic: its node's and the engine's counts follow. */
static void pins_count(struct inconn *ic, uint64_t len, int add)
{
    uint64_t *counts[3] = {&ic->pinned, &ic->node->pinned, &ic->e->counters.pinned_bytes};
    int was = sharing(ic->node);

    for (int i = 0; i < 3; i++)
        *counts[i] = add ? *counts[i] + len : *counts[i] - len;
    ic->e->pin_sharers = ic->e->pin_sharers - was + sharing(ic->node);
    if (add)
        return;
    node_wake(ic->e, ic->node);
    if (ic->e->pins_full) { /* every node id's pulls may wait for the pins of all */
        ic->e->pins_full = 0;
        for (const struct innode *n = ic->e->innodes; n; n = n->next)
            if (n != ic->node)
                node_wake(ic->e, n);
    }
}

/* ic's first pull waits (wait) for the pins of all, or no longer: its node and the engine
 * count it. */
static void pin_wait_set(struct inconn *ic, int wait)
{
    struct engine *e = ic->e;
    int was;

    if (!ic->node || ic->pin_wait == wait)
        return;
    was = sharing(ic->node);
    ic->pin_wait = wait;
    ic->node->waiting = wait ? ic->node->waiting + 1 : ic->node->waiting - 1;
    e->pin_waiters = wait ? e->pin_waiters + 1 : e->pin_waiters - 1;
    e->pin_sharers = e->pin_sharers - was + sharing(ic->node);
}

/* ic leaves its node (its pins with it); the node goes with its last connection. */
static void node_leave(struct inconn *ic)
{
    struct engine *e = ic->e;
    struct innode *n = ic->node, **np;
    struct inconn **pp;

    if (!n)
        return;
    pin_wait_set(ic, 0);
    if (ic->pinned)
        pins_count(ic, ic->pinned, 0);
    for (pp = &n->conns; *pp != ic; pp = &(*pp)->node_next)
        ;
    *pp = ic->node_next;
    ic->node = NULL;
    e->inconns_authed--;
    if (--n->nconns)
        return;
    for (np = &e->innodes; *np != n; np = &(*np)->next)
        ;
    *np = n->next;
    free(n);
}

static struct inconn *node_oldest(const struct innode *n)
{
    struct inconn *old = n->conns;

    for (struct inconn *ic = n->conns; ic; ic = ic->node_next)
        if (ic->born < old->born)
            old = ic;
    return old;
}

/* Closes the oldest connection of n to make room for a newer one, and says why (the log is
 * rate-limited: a holder of the secret could fill it). */
static void node_evict(struct engine *e, const struct innode *n, const char *why)
{
    static struct log_limit lim;
    struct inconn *ic = node_oldest(n);

    e->counters.connections_evicted++;
    e->counters.node_connections_evicted++;
    log_limited(&lim, LOG_WARN, "closing the transfer connection from %s (%s) to make room: %s",
                ic->hs.node_c, ic->conn->peer, why);
    ic->conn->type->close(ic->conn);
    eng_inconn_free(ic);
}

/* ic authenticated as hs.node_c: it joins that node id's connections, past
 * MAX_INCONNS_PER_NODE closing that node's oldest, past MAX_INCONNS in all the oldest of the
 * node id that holds the most. 0, or FERRY_ENOMEM. */
static int node_join(struct inconn *ic)
{
    struct engine *e = ic->e;
    struct innode *n, *most = NULL;
    char why[96];

    for (n = e->innodes; n && strcmp(n->node, ic->hs.node_c) != 0; n = n->next)
        ;
    if (!n && !(n = calloc(1, sizeof(*n))))
        return err_set(FERRY_ENOMEM, "the record of node %s", ic->hs.node_c);
    if (!n->nconns) {
        snprintf(n->node, sizeof(n->node), "%s", ic->hs.node_c);
        n->next = e->innodes;
        e->innodes = n;
    } else if (n->nconns >= MAX_INCONNS_PER_NODE) {
        snprintf(why, sizeof(why), "its node id has %u connections, the most one may have",
                 n->nconns);
        node_evict(e, n, why);
    }
    if (e->inconns_authed >= MAX_INCONNS) {
        for (struct innode *m = e->innodes; m; m = m->next)
            most = !most || m->nconns > most->nconns ? m : most;
        snprintf(why, sizeof(why), "%u are open, and its node id has the most (%u)",
                 e->inconns_authed, most->nconns);
        node_evict(e, most, why);
    }
    ic->node = n;
    ic->node_next = n->conns;
    n->conns = ic;
    n->nconns++;
    e->inconns_authed++;
    return 0;
}

void eng_inconn_free(struct inconn *ic)
{
    struct hpull *hp;

    node_leave(ic);
    *ic->pprev = ic->next;
    if (ic->next)
        ic->next->pprev = ic->pprev;
    loop_timer_stop(ic->e->loop, &ic->deadline);
    loop_timer_stop(ic->e->loop, &ic->backlog);
    loop_timer_stop(ic->e->loop, &ic->relay);
    eng_watch_stop(ic->e, &ic->out);
    auth_session_end(&ic->as);
    pins_drop(ic);
    while ((hp = ic->queue)) {
        ic->queue = hp->next;
        hpull_free(hp);
    }
    free(ic);
}

static void in_closed(struct xconn *c, int err, const char *reason)
{
    struct inconn *ic = c->owner;

    /* Broken framing, or gone before proving the secret: a bad peer, not a finished one. */
    if (ic->state == IN_REFUSED) {
        log_debug("refused transfer connection from %s closed", c->peer);
    } else if (ic->state == IN_HELLO && err != FERRY_EPROTO && !ic->hs.node_c[0]) {
        /* Nothing said: a port probe (a node checking that its id's owner listens). */
        log_debug("transfer connection from %s closed before its hello: %s", c->peer, reason);
    } else if (err == FERRY_EPROTO || ic->state != IN_READY) {
        ic->e->counters.peer_errors++;
        log_warn("transfer connection from %s (%s) dropped%s: %s",
                 ic->hs.node_c[0] ? ic->hs.node_c : "?", c->peer,
                 ic->state != IN_READY ? " before authenticating" : "", reason);
    } else {
        log_info("transfer connection from %s (%s) closed: %s", ic->hs.node_c, c->peer, reason);
    }
    eng_inconn_free(ic);
}

/* Drops a peer that broke the protocol or failed authentication. */
static void in_abort(struct inconn *ic, const char *why)
{
    ic->e->counters.peer_errors++;
    log_warn("closing the transfer connection from %s (%s): %s",
             ic->hs.node_c[0] ? ic->hs.node_c : "?", ic->conn->peer, why);
    ic->conn->type->close(ic->conn);
    eng_inconn_free(ic);
}

static int in_send(struct inconn *ic, struct pbuf *b)
{
    int rc = b->oom ? err_set(FERRY_ENOMEM, "frame")
                    : ic->conn->type->send_frame(ic->conn, b->data, b->len);
    if (rc == 0)
        ic->given += b->len;
    pbuf_free(b);
    return rc;
}

/* Refuses a connector that failed the handshake, telling it why (REFUSE), then waits up to
 * REFUSE_LINGER_MS for it to close: closing at once could drop the frame unsent. */
static void in_refuse(struct inconn *ic, const char *why)
{
    struct pbuf b = {0};

    ic->e->counters.peer_errors++;
    log_warn("refusing the transfer connection from %s (%s): %s",
             ic->hs.node_c[0] ? ic->hs.node_c : "?", ic->conn->peer, why);
    wire_refuse(&b, why);
    if (in_send(ic, &b) < 0) {
        ic->conn->type->close(ic->conn);
        eng_inconn_free(ic);
        return;
    }
    ic->state = IN_REFUSED;
    loop_timer_start(ic->e->loop, &ic->deadline, loop_now_ms() + REFUSE_LINGER_MS);
}

static void in_on_hello(struct inconn *ic, const struct wire_msg *m)
{
    struct engine *e = ic->e;
    const char *mine = ic->conn->type->address(ic->conn->local);
    uint8_t mac[WIRE_MAC] = {0};
    struct pbuf b = {0};

    if (m->magic != WIRE_MAGIC || m->version != WIRE_VERSION) {
        char why[64];
        snprintf(why, sizeof(why), "transfer protocol %u expected, got %u", WIRE_VERSION,
                 m->version);
        in_refuse(ic, m->magic != WIRE_MAGIC ? "not a ferry transfer connection" : why);
        return;
    }
    memcpy(ic->hs.node_c, m->node, sizeof(m->node));
    ic->hs.inc_c = m->inc;
    memcpy(ic->hs.addr, m->addr, sizeof(m->addr));
    memcpy(ic->hs.nonce_c, m->nonce, WIRE_NONCE);
    /* A connector that dialled another address reached us through a relay (or a stale
     * entry): its proof would be bound to that address, so say why rather than fail it. */
    if (strcmp(m->addr, mine) != 0) {
        char why[WIRE_REASON_MAX + 1];
        snprintf(why, sizeof(why), "dialled %.40s, which is not this node's %s address (relayed?)",
                 m->addr, ic->conn->type->name);
        in_refuse(ic, why);
        return;
    }
    snprintf(ic->hs.node_a, sizeof(ic->hs.node_a), "%s", e->node_id);
    ic->hs.inc_a = eng_incarnation(e);
    if (auth_nonce(ic->hs.nonce_a) < 0 || auth_acceptor_proof(&e->auth, &ic->hs, mac) < 0) {
        in_abort(ic, "cannot make a challenge");
        return;
    }
    wire_challenge(&b, e->node_id, ic->hs.inc_a, ic->hs.nonce_a, auth_keyed(&e->auth), mac);
    if (in_send(ic, &b) < 0) {
        in_abort(ic, "cannot send the challenge");
        return;
    }
    ic->state = IN_AUTH;
}

static void in_on_auth(struct inconn *ic, const struct wire_msg *m)
{
    struct engine *e = ic->e;
    const char *why;

    if (auth_check(&e->auth, &ic->hs, m->mac, &why) < 0) {
        in_refuse(ic, why);
        return;
    }
    if (auth_session_start(&e->auth, &ic->hs, 0, &ic->as) < 0) {
        in_abort(ic, "cannot derive the session's keys");
        return;
    }
    if (node_join(ic) < 0) {
        in_abort(ic, ferry_errmsg());
        return;
    }
    ic->state = IN_READY;
    ic->conn->max_frame = WIRE_MAX_FRAME;
    loop_timer_start(e->loop, &ic->deadline, loop_now_ms() + HOLDER_IDLE_MS);
}

/* A sealed object by id, or NULL. */
static struct object *sealed(struct engine *e, const ferry_id *id)
{
    struct object *o = store_find(e->store, id);
    return o && object_sealed(o) ? o : NULL;
}

static uint64_t object_bytes(const struct object *o)
{
    return o->data_size + o->metadata_size;
}

/* A receiver that does not read what it asked for would keep the holder's objects pinned
 * without bound: past a quarter of the arena (at least 64 MiB) pinned for one node id, over all
 * its connections, the further pulls of each wait, and reading stops until half of that is
 * read. */
static uint64_t pin_limit(const struct engine *e)
{
    uint64_t quarter = store_capacity(e->store) / 4;
    return quarter > (64ull << 20) ? quarter : 64ull << 20;
}

/* Node ids are names that any holder of the secret picks, so a limit per id alone bounds
 * nothing: past half the arena (at least one node id's limit) pinned for all of them together,
 * pulls wait too, and the arena keeps room for the node's own puts. */
static uint64_t pin_limit_all(const struct engine *e)
{
    uint64_t half = store_capacity(e->store) / 2, one = pin_limit(e);
    return half > one ? half : one;
}

/* A node id's share of the pins of all: an equal part for each node id that holds pins or
 * waits for them (at least one). */
static uint64_t pin_share(const struct engine *e)
{
    return pin_limit_all(e) / (e->pin_sharers ? e->pin_sharers : 1);
}

/* Whether another node id than n waits for the pins of all. */
static int others_wait(const struct engine *e, const struct innode *n)
{
    return e->pin_waiters > n->waiting;
}

/* Why pinning more for a node id waits (pins_over), if it does. */
enum pins_over { PINS_OK, PINS_NODE, PINS_SHARE, PINS_ALL };

/* Whether pinning len bytes more for ic's node id (pinning already counted for this pull)
 * passes its limit, its share of the pins of all while other node ids wait for them (so that
 * the pins that drop go to those, and none to the node ids that hold their share), or the limit
 * of all; a node id without pins passes its own limit and its share once, so that objects
 * larger than them still move. */
static enum pins_over pins_over(struct inconn *ic, uint64_t pinning, uint64_t len)
{
    struct engine *e = ic->e;
    uint64_t node = ic->node->pinned + pinning, all = e->counters.pinned_bytes + pinning;

    if (node && node + len > pin_limit(e))
        return PINS_NODE;
    if (node && others_wait(e, ic->node) && node + len > pin_share(e))
        return PINS_SHARE;
    if (all && all + len > pin_limit_all(e)) {
        e->pins_full = 1;
        return PINS_ALL;
    }
    return PINS_OK;
}

/* The bytes of o that entry i of hp asks for: all of them, or its range's. */
static uint64_t hpull_len(const struct hpull *hp, uint32_t i, const struct object *o)
{
    return hp->ranges ? wire_range_cut(&hp->ranges[i], object_bytes(o)) : object_bytes(o);
}

/* The want whose copy, being received here, answers entry i of hp (a range of at most
 * RELAY_RANGE bytes: what a receiver asks a partial holder for; NULL for anything else, a
 * sealed object's included). */
static struct want *entry_coming(struct engine *e, const struct hpull *hp, uint32_t i)
{
    if (!hp->ranges || hp->ranges[i].len > RELAY_RANGE || sealed(e, &hp->ids[i]))
        return NULL;
    return eng_relay_source(e, &hp->ids[i]);
}

/* The same, for a pull still waiting: none once its wait expired. */
static struct want *entry_relay(struct engine *e, const struct hpull *hp, uint32_t i)
{
    return hp->expired ? NULL : entry_coming(e, hp, i);
}

/* What entry i of hp is answered from: the sealed object, or the copy being received here when
 * the range is in (*from: its want); NULL when neither. */
static struct object *entry_object(struct engine *e, const struct hpull *hp, uint32_t i,
                                   struct want **from)
{
    struct want *w = entry_relay(e, hp, i);

    *from = NULL;
    if (!w)
        return sealed(e, &hp->ids[i]);
    if (!eng_relay_covers(w, hp->ranges[i].off, hp->ranges[i].len))
        return NULL;
    *from = w;
    return w->obj;
}

/* Marks the pulls queued behind hp that ask for ranges of the copy of id still coming here
 * expired too, even those whose range came meanwhile: their receiver then asks them all again
 * in the order it asked them. Answers go in order, so a range asked again behind the others
 * waited for all of them, and the chain behind its receiver with it: the first range of a
 * broadcast to 15 at 100 Mbit/s came to the 8th receiver 2.1 s after the 7th. Their count. */
static uint64_t expire_behind(struct engine *e, struct hpull *hp, const ferry_id *id)
{
    uint64_t n = 0;

    for (struct hpull *q = hp->next; q; q = q->next) {
        for (uint32_t i = 0; !q->expired && i < q->n; i++) {
            if (memcmp(&q->ids[i], id, sizeof(*id)) == 0 && entry_coming(e, q, i)) {
                q->expired = 1;
                n++;
            }
        }
    }
    return n;
}

/* Whether a pull's ranges of copies being received here are all in. While they are not, it
 * waits (and the connection's later pulls with it) until neither it nor the copy has moved for
 * half a relay deadline (RELAY_WAIT_DIV: since it came, or since a chunk last came into the
 * copy), and half a relay deadline from its turn at most, however the copy progresses (the
 * receiver gives up on a holder silent for a whole one). Then its waiting entries, and those of
 * the later pulls for the same copy (expire_behind), are answered "not yet" (FERRY_EAGAIN,
 * relay_waits_expired), and the receiver asks them again in order. A stalled copy so costs its
 * receivers a round of answers every half relay deadline, never a spin, and the chain behind
 * this node holds while it finds another source or its first bytes come down the chain.
 * Looked at from the first entry each time: chunks may be received again. */
static int relay_ready(struct inconn *ic, struct hpull *hp)
{
    struct engine *e = ic->e;
    uint64_t now = loop_now_ms(), until, cap, expired = 0;
    struct want *w = NULL;
    uint32_t i;

    if (!hp->ranges) /* whole objects: never from a partial copy */
        return 1;
    for (i = 0; i < hp->n; i++)
        if ((w = entry_relay(e, hp, i)) &&
            !eng_relay_covers(w, hp->ranges[i].off, hp->ranges[i].len))
            break;
    if (i < hp->n) {
        hp->since = hp->since ? hp->since : now;
        until = (w->relay->ms > hp->arrived ? w->relay->ms : hp->arrived) +
                e->timers.relay_ms / RELAY_WAIT_DIV;
        cap = e->timers.relay_ms < e->timers.answer_ms ? e->timers.relay_ms : e->timers.answer_ms;
        if (hp->since + cap / RELAY_WAIT_DIV < until)
            until = hp->since + cap / RELAY_WAIT_DIV;
        if (now < until) {
            ic->waits = w->id;
            ic->waiting = 1;
            loop_timer_start(e->loop, &ic->relay, until);
            return 0;
        }
        for (; i < hp->n; i++) /* not in within the deadline: not yet */
            expired += entry_relay(e, hp, i) != NULL;
        hp->expired = 1;
        e->counters.relay_waits_expired += expired + expire_behind(e, hp, &w->id);
    }
    ic->waiting = 0;
    loop_timer_stop(e->loop, &ic->relay);
    return 1;
}

/* From the loop's next turn (the caller may be in the middle of a transfer's events): the
 * connections whose first pull waits for id's copy look again. */
void eng_relay_wake(struct engine *e, const ferry_id *id)
{
    for (struct inconn *ic = e->inconns; ic; ic = ic->next)
        if (ic->waiting && memcmp(&ic->waits, id, sizeof(*id)) == 0)
            loop_timer_start(e->loop, &ic->relay, loop_now_ms());
}

/* Whether a pull can be answered. Spilled objects are restored first, as many as the pin limit
 * covers; the pull waits for its first present object only (the others are answered busy if
 * they are still on disk, and asked again), so that a pull of more than the arena holds still
 * moves: waiting for all of them could wait for ever, each restore evicting another. When it
 * verifies, the digests must be known; ranges of copies being received must be in
 * (relay_ready). */
static int hpull_ready(struct inconn *ic, struct hpull *hp)
{
    struct engine *e = ic->e;
    uint64_t restoring = 0;
    int first = 1;

    if (!relay_ready(ic, hp))
        return 0;
    for (uint32_t i = 0; i < hp->n; i++) {
        struct object *o = sealed(e, &hp->ids[i]);
        int rc = 0;
        if (!o)
            continue;
        if (object_on_disk(o) && (first || restoring < pin_limit(e))) {
            rc = store_restore(e->store, o, 1);
            restoring += object_bytes(o);
        }
        if (first && rc == FERRY_EAGAIN)
            return 0;
        first = 0;
        if (!o->hashed && (hp->flags & WIRE_PULL_VERIFY))
            return 0;
    }
    return 1;
}

/* The bytes a pull would pin now. */
static uint64_t hpull_bytes(struct engine *e, const struct hpull *hp)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < hp->n; i++) {
        struct want *from;
        struct object *o = entry_object(e, hp, i, &from);
        sum += o ? hpull_len(hp, i, o) : 0;
    }
    return sum;
}

/* Queues len bytes of o from off after the reply; the pin passes to the transport's send. */
static int send_object(struct inconn *ic, struct object *o, uint64_t off, uint64_t len)
{
    struct engine *e = ic->e;
    struct pin *pn;

    if (len < object_bytes(o))
        e->counters.ranges_out++;
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
    pins_count(ic, len, 1);
    ic->given += len;
    return ic->conn->type->send_range(ic->conn, e->store->base + o->offset + off, len, pn);
}

/* Pins the objects of a pull, in order, within the pin limit: an entry that would pass it
 * (after the first pin) is answered FERRY_EBUSY, and its receiver asks again later. */
static void hpull_pin(struct inconn *ic, const struct hpull *hp, struct object **objs,
                      struct wire_reply_entry *re, uint32_t i, uint64_t *pinning)
{
    struct want *from;
    struct object *o = entry_object(ic->e, hp, i, &from);
    uint64_t len;

    if (o && object_on_disk(o)) { /* still on disk (hpull_ready): asked again later */
        re[i] = (struct wire_reply_entry){.status = FERRY_EBUSY};
        ic->e->counters.pins_deferred++;
        return;
    }
    len = o ? hpull_len(hp, i, o) : 0;
    /* A range of a copy still coming here whose wait expired: "not yet", not "not here". */
    re[i] = (struct wire_reply_entry){.status = o                            ? 0
                                                : entry_coming(ic->e, hp, i) ? FERRY_EAGAIN
                                                                             : FERRY_ENOENT};
    if (o && len && pins_over(ic, *pinning, len) != PINS_OK) {
        re[i].status = FERRY_EBUSY;
        ic->e->counters.pins_deferred++;
        return;
    }
    if (!o)
        return;
    store_ref(ic->e->store, o);
    store_mark_read(o); /* a peer's reader came */
    objs[i] = o;
    *pinning += len;
    re[i].data_size = o->data_size;
    re[i].metadata_size = o->metadata_size;
    if (from) { /* a copy being received: the tree it took from the record and its holder */
        ic->e->counters.ranges_relayed++;
        memcpy(re[i].digest, from->check.digest, DIGEST_LEN);
        re[i].nleaves = from->check.nleaves > 1 ? (uint32_t)from->check.nleaves : 0;
        re[i].leaves = from->check.leaves;
    } else if (o->hashed) { /* with its leaves, so that the receiver checks each chunk as it lands
                             */
        memcpy(re[i].digest, o->root, DIGEST_LEN);
        re[i].nleaves = o->leaves ? (uint32_t)digest_leaves(object_bytes(o)) : 0;
        re[i].leaves = o->leaves;
    }
}

/* Answers one pull: the reply, then the bytes of each object pinned for it. */
static int hpull_answer(struct inconn *ic, struct hpull *hp)
{
    struct object **objs = calloc(hp->n ? hp->n : 1, sizeof(*objs));
    struct wire_reply_entry *re = calloc(hp->n ? hp->n : 1, sizeof(*re));
    struct pbuf b = {0};
    uint64_t pinning = 0;
    int rc = 0;

    if (!objs || !re) {
        rc = err_set(FERRY_ENOMEM, "a reply of %u entries", hp->n);
        goto free_arrays;
    }
    for (uint32_t i = 0; i < hp->n; i++)
        hpull_pin(ic, hp, objs, re, i, &pinning);
    size_t start = wire_reply_begin(&b, hp->tag, hp->n);
    for (uint32_t i = 0; i < hp->n; i++)
        wire_reply_add(&b, &re[i]);
    for (uint32_t i = 0; i < hp->n; i++)
        wire_reply_leaves(&b, &re[i]);
    auth_seal(&ic->as, &b, start);
    rc = in_send(ic, &b);
    ic->conn->eager_max = hp->eager_max;
    for (uint32_t i = 0; i < hp->n; i++) {
        if (objs[i] && rc == 0)
            rc = send_object(ic, objs[i], hp->ranges ? hp->ranges[i].off : 0,
                             hpull_len(hp, i, objs[i]));
        else if (objs[i])
            store_unref(ic->e->store, objs[i]);
    }
free_arrays:
    free(objs);
    free(re);
    return rc;
}

/* The bytes given to the transport that have not left, beyond the pinned ranges: at least
 * the frames waiting (a fabric lease counts its bytes as left when lent). */
static uint64_t frame_backlog(const struct inconn *ic)
{
    uint64_t out = ic->given - ic->conn->bytes_out;
    return out > ic->pinned ? out - ic->pinned : 0;
}

/* The watchdog runs while the receiver owes us reading: pins, or frames. */
static void in_watch(struct inconn *ic)
{
    if (ic->pinned || frame_backlog(ic))
        eng_watch_start(ic->e, &ic->out, ic->conn->bytes_out);
    else
        eng_watch_stop(ic->e, &ic->out);
}

/* While other node ids wait for the pins of all, a connection of a node id past its share of
 * them must read at least PIN_SHARE_RATE over each window of timers.rate_ms, or it is dropped and
 * its pins go to them (pins_reclaimed): 1 then. The pins a slow reader holds count against its
 * share for as long as it holds them. */
static int in_slow_past_share(struct inconn *ic)
{
    struct engine *e = ic->e;
    uint64_t now = loop_now_ms(), out = ic->conn->bytes_out, rate;
    char why[128];

    if (!ic->pinned || !others_wait(e, ic->node) || ic->node->pinned <= pin_share(e)) {
        ic->share_ms = 0;
        return 0;
    }
    if (!ic->share_ms || now - ic->share_ms < e->timers.rate_ms) {
        if (!ic->share_ms) { /* the window starts at the first look past the share */
            ic->share_ms = now;
            ic->share_bytes = out;
        }
        return 0;
    }
    rate = (out - ic->share_bytes) * 1000 / (now - ic->share_ms);
    ic->share_ms = now;
    ic->share_bytes = out;
    if (rate >= PIN_SHARE_RATE)
        return 0;
    e->counters.pins_reclaimed++;
    snprintf(why, sizeof(why),
             "read %" PRIu64 " B/s for %u ms, holding %" PRIu64 " MiB pinned (its share: %" PRIu64
             " MiB) while other nodes wait",
             rate, e->timers.rate_ms, ic->node->pinned >> 20, pin_share(e) >> 20);
    in_abort(ic, why);
    return 1;
}

static void on_out_check(struct loop *l, struct loop_timer *t)
{
    struct inconn *ic = t->arg;
    uint32_t stall_ms = ic->e->timers.stall_ms;
    uint64_t rate, idle;
    char why[112];

    if (loop_now_ms() < ic->conn->quiet_until_ms) {
        /* Reading what we lent it under a lease: the lease ends that read if it is too slow,
         * and dropping the reader now would free no pin before then anyway. The stall window
         * starts again once no lease runs. */
        eng_watch_stop(ic->e, &ic->out);
        eng_watch_start(ic->e, &ic->out, ic->conn->bytes_out);
        return;
    }
    idle = eng_watch_idle(ic->e, &ic->out, ic->conn->bytes_out, &rate);
    if (idle >= stall_ms) {
        ic->e->counters.peers_too_slow++;
        snprintf(why, sizeof(why), "read none of what it asked for in %u ms", stall_ms);
        in_abort(ic, why);
        return;
    }
    if (ic->pinned && rate < MIN_RATE) {
        ic->e->counters.peers_too_slow++;
        snprintf(why, sizeof(why), "read %" PRIu64 " B/s for %u ms, under the minimum of %u", rate,
                 stall_ms, MIN_RATE);
        in_abort(ic, why);
        return;
    }
    if (in_slow_past_share(ic))
        return;
    loop_timer_start(l, t, loop_now_ms() + ic->e->check_ms);
}

/* Frames left, or the node's pins dropped (node_wake): the pulls that waited may go. */
static void on_backlog_poll(struct loop *l, struct loop_timer *t)
{
    in_process(t->arg);
}

/* Reading stops while the receiver's node id has too much pinned, or the connection too many
 * ids queued or too many of our frames unread; it resumes once all are at half their limits. */
static void in_backpressure(struct inconn *ic)
{
    uint64_t limit = pin_limit(ic->e), backlog = frame_backlog(ic), pinned = ic->node->pinned;
    int over = pinned > limit || ic->queued_ids > MAX_QUEUED_IDS || backlog > MAX_FRAME_BACKLOG;
    int under = pinned <= limit / 2 && ic->queued_ids <= MAX_QUEUED_IDS / 2 &&
                backlog <= MAX_FRAME_BACKLOG / 2;
    int pause = over || (ic->paused && !under);

    if (pause != ic->paused) {
        ic->paused = pause;
        ic->conn->type->pause(ic->conn, pause);
    }
    /* Nothing tells when frames leave: look again while they hold the reading up. */
    if (pause && backlog > MAX_FRAME_BACKLOG / 2)
        loop_timer_start(ic->e->loop, &ic->backlog, loop_now_ms() + BACKLOG_POLL_MS);
    else
        loop_timer_stop(ic->e->loop, &ic->backlog);
    in_watch(ic);
}

/* Answers queued pulls in order, as far as their digests and the pin limits allow: a pull
 * waits while what it would pin passes its node id's limit, its share or the limit of all
 * (pins_over; node_wake has it look again); waiting for the limit of all, its node id counts
 * among those that wait (pin_wait). */
static void in_process(struct inconn *ic)
{
    struct hpull *hp;
    enum pins_over over = PINS_OK;

    while ((hp = ic->queue) && hpull_ready(ic, hp)) {
        if ((over = pins_over(ic, 0, hpull_bytes(ic->e, hp))) != PINS_OK)
            break;
        ic->queue = hp->next;
        if (!ic->queue)
            ic->queue_tail = &ic->queue;
        ic->queued_ids -= hp->n;
        if (hpull_answer(ic, hp) < 0) {
            hpull_free(hp);
            in_abort(ic, ferry_errmsg());
            return;
        }
        hpull_free(hp);
    }
    pin_wait_set(ic, over == PINS_ALL);
    in_backpressure(ic);
}

static void in_on_pull(struct inconn *ic, const struct wire_msg *m)
{
    struct hpull *hp = calloc(1, sizeof(*hp));

    if (hp)
        hp->ids = malloc((m->n ? m->n : 1) * sizeof(*hp->ids));
    if (hp && m->ranges)
        hp->ranges = malloc((m->n ? m->n : 1) * sizeof(*hp->ranges));
    if (!hp || !hp->ids || (m->ranges && !hp->ranges)) {
        if (hp)
            hpull_free(hp);
        in_abort(ic, "out of memory for a pull");
        return;
    }
    hp->tag = m->tag;
    hp->arrived = loop_now_ms();
    hp->eager_max = m->eager_max;
    hp->flags = m->flags;
    hp->n = m->n;
    memcpy(hp->ids, m->ids, (size_t)m->n * sizeof(*hp->ids));
    for (uint32_t i = 0; m->ranges && i < m->n; i++)
        wire_pull_range(m, i, &hp->ranges[i]);
    ic->queued_ids += m->n;
    *ic->queue_tail = hp;
    ic->queue_tail = &hp->next;
    in_process(ic);
}

static void in_frame(struct xconn *c, const struct proto_header *h, const uint8_t *payload)
{
    struct inconn *ic = c->owner;
    struct proto_header hh = *h;
    struct wire_msg m;

    /* A connector without a secret sends its proof and pulls behind its hello: what follows a
     * refusal is left unread while the refusal lingers, so that the reason reaches it. */
    if (ic->state == IN_REFUSED)
        return;
    if ((ic->state == IN_READY && auth_open(&ic->as, &hh, payload) < 0) ||
        wire_decode(&hh, payload, &m) < 0) {
        in_abort(ic, ferry_errmsg());
        return;
    }
    if (ic->state == IN_HELLO && m.type == WIRE_HELLO)
        in_on_hello(ic, &m);
    else if (ic->state == IN_AUTH && m.type == WIRE_AUTH)
        in_on_auth(ic, &m);
    else if (ic->state == IN_READY && m.type == WIRE_PULL) {
        loop_timer_start(ic->e->loop, &ic->deadline, loop_now_ms() + HOLDER_IDLE_MS);
        in_on_pull(ic, &m);
    } else if (ic->state == IN_READY && m.type == WIRE_SUSPECT)
        eng_suspect_check(ic, &m);
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
    pins_count(ic, pn->len, 0);
    *pn->pprev = pn->next;
    if (pn->next)
        pn->next->pprev = pn->pprev;
    store_unref(ic->e->store, pn->o);
    free(pn);
    in_process(ic);
}

const struct xconn_events eng_in_events = {
    .frame = in_frame,
    .received = in_received,
    .sent = in_sent,
    .closed = in_closed,
};

static void on_handshake_deadline(struct loop *l, struct loop_timer *t)
{
    struct inconn *ic = t->arg;

    if (ic->state == IN_REFUSED) { /* counted when refused */
        ic->conn->type->close(ic->conn);
        eng_inconn_free(ic);
        return;
    }
    if (ic->state != IN_READY) {
        in_abort(ic, "no handshake within 10 s");
        return;
    }
    if (ic->pinned || ic->queue || frame_backlog(ic)) { /* the stall watchdog has it */
        loop_timer_start(l, t, loop_now_ms() + HOLDER_IDLE_MS);
        return;
    }
    log_info("closing the transfer connection from %s (%s): idle for 60 s", ic->hs.node_c,
             ic->conn->peer);
    ic->conn->type->close(ic->conn);
    eng_inconn_free(ic);
}

/* The source of a connection: its peer address without the port. */
static size_t source_len(const struct xconn *c)
{
    const char *colon = strrchr(c->peer, ':');
    return colon ? (size_t)(colon - c->peer) : strlen(c->peer);
}

static int same_source(const struct xconn *a, const struct xconn *b)
{
    size_t len = source_len(a);
    return len == source_len(b) && memcmp(a->peer, b->peer, len) == 0;
}

/* Closes the oldest connection that has not authenticated (from c's source when per_source). */
static void make_room(struct engine *e, const struct xconn *c, int per_source)
{
    struct inconn *ic, *oldest = NULL;

    for (ic = e->inconns; ic; ic = ic->next) {
        if (ic->state != IN_READY && (!per_source || same_source(ic->conn, c)) &&
            (!oldest || ic->born < oldest->born))
            oldest = ic;
    }
    if (!oldest)
        return;
    e->counters.connections_evicted++;
    log_warn("closing the transfer connection from %s (%s) to make room: it has not "
             "authenticated, and newer ones came",
             oldest->hs.node_c[0] ? oldest->hs.node_c : "?", oldest->conn->peer);
    oldest->conn->type->close(oldest->conn);
    eng_inconn_free(oldest);
}

/* Room for c among the connections that have not authenticated (those that have are bounded
 * when they do: node_join). */
static void admit(struct engine *e, const struct xconn *c)
{
    int unauth = 0, from_source = 0;

    for (struct inconn *ic = e->inconns; ic; ic = ic->next) {
        if (ic->state == IN_READY)
            continue;
        unauth++;
        from_source += same_source(ic->conn, c);
    }
    if (from_source >= MAX_UNAUTH_PER_SOURCE)
        make_room(e, c, 1);
    else if (unauth >= MAX_UNAUTH)
        make_room(e, c, 0);
}

void eng_on_accept(struct xlistener *l, struct xconn *c, void *arg)
{
    struct engine *e = arg;
    struct inconn *ic;

    admit(e, c);
    if (!(ic = calloc(1, sizeof(*ic)))) {
        c->type->close(c);
        return;
    }
    ic->e = e;
    ic->conn = c;
    ic->born = loop_now_ms();
    ic->queue_tail = &ic->queue;
    c->owner = ic;
    c->max_frame = UNAUTH_MAX_FRAME;
    ic->given = c->bytes_out;
    loop_timer_init(&ic->out.timer, on_out_check, ic);
    loop_timer_init(&ic->backlog, on_backlog_poll, ic);
    loop_timer_init(&ic->relay, on_backlog_poll, ic);
    loop_timer_init(&ic->deadline, on_handshake_deadline, ic);
    loop_timer_start(e->loop, &ic->deadline, loop_now_ms() + e->timers.handshake_ms);
    ic->next = e->inconns;
    if (ic->next)
        ic->next->pprev = &ic->next;
    ic->pprev = &e->inconns;
    e->inconns = ic;
    e->counters.connections_accepted++;
}

uint64_t engine_break_pins(struct engine *e, uint64_t size)
{
    static struct log_limit lim;
    uint64_t pinned = e->counters.pinned_bytes;
    struct inconn *ic, *next;

    if (!pinned || store_capacity(e->store) - store_used(e->store) + pinned < size)
        return 0;    /* breaking them could not make the room */
    e->breaking = 1; /* releases that wait for a drain are counted in breaks_draining */
    for (ic = e->inconns; ic; ic = next) { /* MAX_INCONNS at most */
        next = ic->next;
        if (!ic->pinned)
            continue;
        e->counters.pins_broken++;
        log_limited(&lim, LOG_WARN,
                    "closing the transfer connection from %s (%s): its pins (%" PRIu64
                    " KiB) keep a local create from finding room",
                    ic->hs.node_c, ic->conn->peer, ic->pinned >> 10);
        ic->conn->type->close(ic->conn);
        eng_inconn_free(ic);
    }
    e->breaking = 0;
    return pinned;
}

int engine_pins_draining(const struct engine *e)
{
    return e->breaks_draining > 0;
}

void engine_on_ready(struct engine *e, const struct object *o)
{
    struct inconn *ic, *next;

    for (ic = e->inconns; ic; ic = next) {
        next = ic->next;
        if (ic->queue)
            in_process(ic);
    }
}
