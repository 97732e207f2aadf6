/*
 * engine_pull.c - what comes back for the pulls of the receiving side: a holder's replies, the
 * bytes of each entry landing in its object (to its checks), and each entry's end, handed to
 * the want it serves (engine_want.c), or to the split when it is a part (engine_split.c); and
 * the wants a peer lets go (engine_peer.c tells of them through the engine's hooks). The top
 * of the receiving side: it calls the features by name, and none of them calls it.
 */
#include "transfer/engine_int.h"

/* Retires the head pull once it is answered and all its bytes are in. */
static void pull_maybe_pop(struct peer *p)
{
    struct pull *pl;

    while ((pl = p->pulls) && pl->replied && !pl->pending) {
        p->pulls = pl->next;
        if (!p->pulls)
            p->pulls_tail = &p->pulls;
        eng_pull_free(pl);
    }
    if (!p->pulls && p->busy && p->nqueue) /* what was answered busy goes again */
        loop_timer_start(p->e->loop, &p->flush, 0);
}

/* The bytes of w's object are all in (or w was dropped). */
static void complete_entry(struct peer *p, struct pentry *pe)
{
    struct want *w = pe->w;

    pe->w = NULL;
    if (pe->receiving) {
        pe->receiving = 0;
        pe->pull->pending--;
    }
    if (w && w->parent) {
        w->entry = NULL;
        eng_part_in(p, pe, w);
    } else if (w) {
        struct object *here = store_find(p->e->store, &w->id);
        w->entry = NULL;
        if (w->obj)
            eng_breaker_ok(p->e, p->node.id, p->conn->type);
        if (pe->other) {
            char why[96], had[DIGEST_HEX + 1], rec[DIGEST_HEX + 1];
            digest_hex(pe->had.digest, had);
            digest_hex(w->hash, rec);
            snprintf(why, sizeof(why),
                     "holds other content (digest %.16s...; the first seal's is %.16s...)", had,
                     rec);
            /* Not a real failure: a stale record (the id deleted and put again) shows so. Not
             * asked again until the record is its content: a holder listed under it that
             * serves other bytes had its whole object asked every retry (912 MiB in 3 s of 3
             * fakes). */
            eng_want_failed_holder(w, why, FAULT_OTHER, &pe->had);
        } else if (w->obj)
            eng_want_received(w);
        else if (w->done)
            eng_want_free(w);
        else if (here && object_sealed(here))
            eng_want_finish(w, 0);
        else
            eng_want_retry(w); /* it was being created here; if that is aborted, fetch again */
    }
    pull_maybe_pop(p);
    eng_peer_stall_arm(p);
}

/* A relayed range answered "not yet": its partial holder's copy stalled (its own source
 * failed, say). Asked again while that holder finds another source, so that the chain behind
 * it holds, for RELAY_NOT_YET_DEADLINES relay deadlines at most; moved at once when the fetch
 * no longer takes ranges (done, or fetched whole after all). */
static int reply_not_yet(struct peer *p, struct pentry *pe)
{
    struct want *w = pe->w, *root = w->parent;
    struct engine *e = p->e;
    uint64_t now = loop_now_ms();

    pe->w = NULL;
    w->entry = NULL;
    w->not_yet_ms = w->not_yet_ms ? w->not_yet_ms : now;
    if (root->done || root->split.failed ||
        now - w->not_yet_ms >= (uint64_t)RELAY_NOT_YET_DEADLINES * e->timers.relay_ms) {
        eng_want_failed_holder(w, "a partial holder whose copy made no progress", FAULT_LOST, NULL);
        return 0;
    }
    e->counters.relay_asked_again++;
    eng_peer_enqueue(p, w);
    return 0;
}

/* One entry of a REPLY: create the object and let the bytes come into it, or move on. */
static int reply_entry(struct peer *p, struct pentry *pe, const struct wire_reply_entry *re)
{
    struct engine *e = p->e;
    struct want *w = pe->w;
    uint64_t len = re->data_size + re->metadata_size;
    uint8_t *dst = NULL;
    int rc;

    if (re->status == FERRY_EBUSY) { /* past the holder's pin limit: once our pulls are done */
        pe->w = NULL;
        w->entry = NULL;
        p->busy = 1;
        eng_peer_enqueue(p, w);
        return 0;
    }
    if (re->status == FERRY_EAGAIN && w->parent && w->relayed)
        return reply_not_yet(p, pe);
    if (re->status != 0) {
        /* "Not yet" for a range that is not relayed: a node listed whole that receives the
         * object again (a stale record): not here. */
        if (re->status != FERRY_ENOENT && !(re->status == FERRY_EAGAIN && w->parent))
            return err_set(FERRY_EPROTO, "reply status %d", re->status);
        pe->w = NULL;
        w->entry = NULL;
        if (e->dir)
            directory_forget_holder(e->dir, &w->id, p->node.id);
        eng_want_failed_holder(w, "listed, but no longer holds it", FAULT_LOST, NULL);
        return 0;
    }
    if (w->parent) {
        if ((rc = eng_part_reply(pe, re, &dst, &len)) < 0)
            return rc;
        goto receive;
    }
    if (len < re->data_size)
        return err_set(FERRY_EPROTO, "reply sizes overflow");
    /* Other bytes than the content the directory recorded for the id, or leaves that do not
     * give the root: never taken. */
    eng_check_reset(w);
    pe->other = w->has_content && (memcmp(re->digest, w->hash, DIGEST_LEN) || len != w->size);
    pe->other = pe->other || (eng_inherits(e, w) && eng_check_tree(w, re) < 0);
    pe->other_fault = FAULT_OTHER;
    pe->had = (struct content){.size = len};
    memcpy(pe->had.digest, re->digest, DIGEST_LEN);
    if (!w->done && !pe->other)
        eng_want_create(w, re->data_size, re->metadata_size); /* without it, bytes are dropped */
    w->state = WANT_RECEIVING;
    dst = w->obj ? e->store->base + w->obj->offset : NULL;
receive:
    pe->receiving = 1;
    pe->pull->pending++;
    if (len == 0) {
        complete_entry(p, pe);
        return 0;
    }
    return p->conn->type->recv_into(p->conn, dst, len, pe);
}

static void peer_on_reply(struct peer *p, const struct wire_msg *m)
{
    struct pull *pl;
    struct wire_reply_entry re;
    size_t leaves_at = 0;

    /* Replies come in order, each after the bytes of the one before on tcp (fabric: reads of
     * earlier replies may still be under way). */
    for (pl = p->pulls; pl && pl->replied; pl = pl->next)
        ;
    if (!pl || pl->tag != m->tag || pl->n != m->n) {
        eng_peer_abort(p, "a reply that answers no pull");
        return;
    }
    for (uint32_t i = 0; i < m->n; i++) {
        wire_reply_entry(m, i, &leaves_at, &re);
        if (pl->entries[i].w && reply_entry(p, &pl->entries[i], &re) < 0) {
            eng_peer_abort(p, ferry_errmsg());
            return;
        }
    }
    /* Only now may the pull retire: entries of 0 bytes completed during the loop. */
    pl->replied = 1;
    pull_maybe_pop(p);
    eng_peer_stall_arm(p);
}

static void peer_frame(struct xconn *c, const struct proto_header *h, const uint8_t *payload)
{
    struct peer *p = c->owner;
    struct proto_header hh = *h;
    struct wire_msg m;

    if ((p->authed && auth_open(&p->as, &hh, payload) < 0) || wire_decode(&hh, payload, &m) < 0) {
        eng_peer_abort(p, ferry_errmsg());
        return;
    }
    if (m.type == WIRE_REFUSE) {
        char why[sizeof(m.reason) + 16];
        snprintf(why, sizeof(why), "refused: %s", m.reason);
        eng_peer_abort(p, why);
    } else if (!p->authed && m.type == WIRE_CHALLENGE)
        eng_peer_on_challenge(p, &m);
    else if (p->authed && m.type == WIRE_REPLY)
        peer_on_reply(p, &m);
    else
        eng_peer_abort(p, "unexpected message from the holder");
}

static void peer_received(struct xconn *c, void *arg)
{
    complete_entry(c->owner, arg);
}

/* Bytes of an entry's object in place: its whole chunks are checked. */
static void peer_landed(struct xconn *c, void *arg, const uint8_t *p, size_t n)
{
    struct pentry *pe = arg;

    if (pe->w && !pe->other)
        eng_check_landed(pe->w, p, n);
}

static void peer_sent(struct xconn *c, void *arg) {}

const struct xconn_events eng_pull_events = {
    .frame = peer_frame,
    .received = peer_received,
    .landed = peer_landed,
    .sent = peer_sent,
    .closed = eng_peer_closed,
};

void eng_pull_want_lost(struct want *w, struct xconn *draining, const char *why, enum fault fault)
{
    if (draining && w->parent)
        eng_part_drain(draining, w);
    eng_want_failed_holder(w, why, fault, NULL);
}

void eng_pull_want_unqueued(struct want *w, int status)
{
    if (w->done)
        eng_want_free(w);
    else if (w->parent)
        eng_part_unqueued(w);
    else
        eng_want_finish(w, status);
}
