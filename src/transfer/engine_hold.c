/*
 * engine_hold.c - the holding side of the transfer engine: incoming connections, their
 * handshake, PULLs answered from pinned sealed objects, backpressure and stall watchdogs.
 */
#include "transfer/engine_int.h"

static void pins_drop(struct inconn *ic)
{
    while (ic->pins) {
        struct pin *pn = ic->pins;
        ic->pins = pn->next;
        eng_release_after(ic->e, ic->conn, pn->o, 0);
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

void eng_inconn_free(struct inconn *ic)
{
    struct hpull *hp;

    *ic->pprev = ic->next;
    if (ic->next)
        ic->next->pprev = ic->pprev;
    loop_timer_stop(ic->e->loop, &ic->deadline);
    loop_timer_stop(ic->e->loop, &ic->stall);
    ic->e->inconn_count--;
    auth_session_end(&ic->as);
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
    if (ic->state == IN_REFUSED) {
        log_debug("refused transfer connection from %s closed", c->peer);
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
    auth_seal(&ic->as, &b, start);
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
    struct proto_header hh = *h;
    struct wire_msg m;

    if (ic->state == IN_REFUSED) {
        in_abort(ic, "a message after its refusal");
        return;
    }
    if ((ic->state == IN_READY && auth_open(&ic->as, &hh, payload) < 0) ||
        wire_decode(&hh, payload, &m) < 0) {
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
    in_abort(ic, "no handshake within 10 s");
}

void eng_on_accept(struct xlistener *l, struct xconn *c, void *arg)
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

void engine_on_hashed(struct engine *e, const struct object *o)
{
    struct inconn *ic, *next;

    for (ic = e->inconns; ic; ic = next) {
        next = ic->next;
        if (ic->queue)
            in_process(ic);
    }
}
