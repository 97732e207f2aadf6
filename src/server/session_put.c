/*
 * session_put.c - a session's seals and batched puts, and under ferryd --strict-ids the wait
 * for the directory's confirmation (struct pending_seal in session.h).
 */
#include "server/session_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"

/* ---- seals under --strict-ids (see struct pending_seal) ---- */

#define SEAL_PENDING INT32_MIN

static int strict(const struct session *ss)
{
    return ss->srv->cfg.strict_ids && ss->srv->dir;
}

static void seal_reset(struct session *ss)
{
    free(ss->seal.ids);
    free(ss->seal.statuses);
    free(ss->seal.why);
    memset(&ss->seal, 0, sizeof(ss->seal));
    session_wait_end(ss, SESSION_SEAL);
}

/* Blocks the session in q (of n objects) until each object is answered. */
static int seal_start(struct session *ss, const struct proto_request *q, uint32_t n)
{
    struct pending_seal *p = &ss->seal;

    session_wait_begin(ss, SESSION_SEAL);
    p->ids = calloc(n ? n : 1, sizeof(*p->ids));
    p->statuses = calloc(n ? n : 1, sizeof(*p->statuses));
    p->why = calloc(1, PROTO_MAX_DETAIL + 1);
    if (!p->ids || !p->statuses || !p->why) {
        seal_reset(ss);
        return err_set(FERRY_ENOMEM, "seal of %u objects", n);
    }
    for (uint32_t i = 0; i < n; i++)
        p->statuses[i] = SEAL_PENDING;
    p->type = q->type;
    p->tag = q->tag;
    p->n = p->left = n;
    return 0;
}

/* Answers the SEAL (a status) or PUT_BATCH (a status per object, and the first failure's
 * reason) once every object is answered. */
static void seal_reply(struct session *ss)
{
    struct pending_seal *p = &ss->seal;
    struct proto_request q = {.type = p->type, .tag = p->tag};

    if (p->type == PROTO_SEAL)
        session_reply_status(ss, &q,
                             p->statuses[0] < 0 ? err_set(p->statuses[0], "%s", p->why) : 0);
    else
        session_reply_statuses(ss, &q, p->statuses, p->n, p->why);
    seal_reset(ss);
    server_schedule(ss->srv, ss);
}

static void seal_settle(struct session *ss, uint32_t i, int32_t status, const char *why)
{
    struct pending_seal *p = &ss->seal;

    p->statuses[i] = status;
    if (status < 0 && !p->why[0])
        snprintf(p->why, PROTO_MAX_DETAIL + 1, "%s", why);
    if (--p->left == 0)
        seal_reply(ss);
}

/* The index of id among the objects not answered yet (n when none), looked for from where
 * the last was found: claims are answered in the order they were sent. */
static uint32_t seal_find(struct pending_seal *p, const ferry_id *id)
{
    for (uint32_t k = 0; k < p->n; k++) {
        uint32_t i = (p->cursor + k) % p->n;
        if (p->statuses[i] == SEAL_PENDING && memcmp(&p->ids[i], id, sizeof(*id)) == 0) {
            p->cursor = i + 1;
            return i;
        }
    }
    return p->n;
}

/* A put's latency, from its create to its seal (created_ns is the store's real time). */
static void put_timed(struct server *srv, const struct object *o)
{
    uint64_t now = clock_real_ns();

    hist_add(&srv->counters.put_latency, now > o->created_ns ? now - o->created_ns : 0);
}

/* The claim confirmed o's content: sealed (the claim published it) and, for a batch or a
 * SEAL with release, given back. */
static void seal_commit(struct session *ss, struct object *o)
{
    struct server *srv = ss->srv;

    srv->claimed = o;
    store_seal_digest(&srv->store, o, o->root, o->leaves);
    srv->claimed = NULL;
    put_timed(srv, o);
    if (ss->seal.type == PROTO_PUT_BATCH)
        store_unref(&srv->store, o);
    else if (ss->seal.release)
        session_held_release(ss, &o->id);
}

/* The claim failed: a batch's object goes (the client never held it), and so does a SEAL's
 * whose id has other content; a SEAL's that the directory could not confirm stays unsealed,
 * for the client to seal again or abort. */
static void seal_drop(struct session *ss, struct object *o, int status)
{
    if (ss->seal.type == PROTO_SEAL && status != FERRY_EEXIST)
        return;
    if (ss->seal.type == PROTO_SEAL)
        session_held_forget(ss, o);
    store_abort(&ss->srv->store, o);
}

static void seal_claimed(void *arg, const struct directory_answer *a)
{
    struct session *ss = arg;
    uint32_t i = seal_find(&ss->seal, a->id);
    struct object *o = store_find(&ss->srv->store, a->id);
    char why[PROTO_MAX_DETAIL + 1];
    int status = a->status;

    if (i == ss->seal.n)
        return; /* not possible: the session waits, and its close cancels the claims */
    if (!o || object_sealed(o) || o->creator != ss) { /* nor this: answered */
        seal_settle(ss, i, FERRY_ENOENT, "the object went while its claim was out");
        return;
    }
    if (status == 0) {
        seal_commit(ss, o);
        seal_settle(ss, i, 0, "");
        return;
    }
    if (status == FERRY_EEXIST) {
        char hex[DIGEST_HEX + 1];
        digest_hex(a->digest, hex);
        snprintf(why, sizeof(why),
                 "exists on node %s with other content (%" PRIu64 " bytes, digest %s)",
                 a->other ? a->other : "(unknown)", a->size, hex);
    } else {
        snprintf(why, sizeof(why), "not sealed: --strict-ids needs the directory: %s",
                 ferry_strerror(status));
        /* The claim may have run with its answer lost: this node must not stay listed. */
        directory_withdraw(ss->srv->dir, &o->id);
    }
    seal_drop(ss, o, status);
    seal_settle(ss, i, status, why);
}

/* Object i, hashed: asks the directory to confirm its content as the id's. */
static void seal_claim(struct session *ss, struct object *o, uint32_t i)
{
    const struct server *srv = ss->srv;

    if (directory_claim(srv->dir, &o->id, o->data_size + o->metadata_size, o->root, seal_claimed,
                        ss) < 0) {
        seal_drop(ss, o, FERRY_ENOMEM);
        seal_settle(ss, i, FERRY_ENOMEM, ferry_errmsg());
    }
}

/* Object i of the pending seal, created and filled: its digest, then its claim (now, or when
 * the hasher has it: session_hash_ready). */
static void seal_begin(struct session *ss, uint32_t i, struct object *o)
{
    ss->seal.ids[i] = o->id;
    if (store_hash(&ss->srv->store, o))
        seal_claim(ss, o, i);
}

/* The session closes: the claims are forgotten and withdrawn (queued behind them, so whatever
 * they published goes), a batch's objects aborted (a SEAL's object is the client's, aborted
 * with its holdings). */
void session_seal_abandon(struct session *ss)
{
    struct pending_seal *p = &ss->seal;

    directory_cancel(ss->srv->dir, ss);
    for (uint32_t i = 0; i < p->n; i++) {
        struct object *o = store_find(&ss->srv->store, &p->ids[i]);
        if (p->statuses[i] != SEAL_PENDING)
            continue;
        directory_withdraw(ss->srv->dir, &p->ids[i]);
        if (p->type == PROTO_PUT_BATCH && o && !object_sealed(o) && o->creator == ss)
            store_abort(&ss->srv->store, o);
    }
    seal_reset(ss);
}

int session_handle_seal(struct session *ss, const struct proto_request *q)
{
    struct object *o;
    int rc = session_own_unsealed(ss, &q->u.seal.id, &o);

    if (rc < 0)
        return session_reply_status(ss, q, rc);
    if (strict(ss)) {
        if ((rc = seal_start(ss, q, 1)) < 0)
            return session_reply_status(ss, q, rc);
        ss->seal.release = q->u.seal.release;
        seal_begin(ss, 0, o);
        return 0;
    }
    store_seal(&ss->srv->store, o);
    put_timed(ss->srv, o);
    if (q->u.seal.release)
        session_held_release(ss, &o->id); /* o is the live object under its id */
    return session_reply_status(ss, q, 0);
}

/* Checks that every entry lies inside the staging area and that together they copy no more
 * than its size, so a batch costs at most one staging area of copying. */
static int batch_check(struct session *ss, const struct proto_request *q)
{
    uint64_t size, total = 0;
    struct proto_batch_entry e;

    if (!ss->staging)
        return err_set(FERRY_EPROTO, "put batch without a staging area");
    size = alloc_block_size(ss->staging);
    for (uint32_t i = 0; i < q->u.batch.n; i++) {
        proto_batch_entry(q, i, &e);
        if (e.data_size > size || e.metadata_size > size - e.data_size ||
            e.offset > size - e.data_size - e.metadata_size)
            return err_set(FERRY_EPROTO, "put batch entry %u lies outside the staging area", i);
        total += e.data_size + e.metadata_size;
        if (total > size)
            return err_set(FERRY_EPROTO, "put batch copies more than the staging area");
    }
    return 0;
}

int session_put_copy(struct session *ss, const ferry_id *id, const uint8_t *src, uint64_t data_size,
                     uint64_t metadata_size, struct object **out)
{
    struct store *st = &ss->srv->store;
    int rc = session_create(ss, id, data_size, metadata_size, 0, out);

    if (rc < 0)
        return rc;
    memcpy(st->base + (*out)->offset, src, data_size + metadata_size);
    return 0;
}

void session_put_seal(struct session *ss, struct object *o)
{
    store_seal(&ss->srv->store, o);
    put_timed(ss->srv, o);
    store_unref(&ss->srv->store, o);
}

/* Creates and fills the object of entry e; *out is it, unsealed. */
static int batch_create(struct session *ss, const struct proto_batch_entry *e, struct object **out)
{
    const uint8_t *src = ss->srv->store.base + alloc_block_offset(ss->staging) + e->offset;

    return session_put_copy(ss, &e->id, src, e->data_size, e->metadata_size, out);
}

/* --strict-ids: each object is sealed once its claim is answered (struct pending_seal). */
static int put_batch_strict(struct session *ss, const struct proto_request *q)
{
    struct proto_batch_entry e;
    struct object *o;
    int rc = seal_start(ss, q, q->u.batch.n);

    if (rc < 0)
        return session_reply_status(ss, q, rc);
    for (uint32_t i = 0; i < q->u.batch.n; i++) {
        proto_batch_entry(q, i, &e);
        ss->seal.ids[i] = e.id;
        if ((rc = batch_create(ss, &e, &o)) < 0)
            seal_settle(ss, i, rc, ferry_errmsg());
        else
            seal_begin(ss, i, o);
    }
    if (q->u.batch.n == 0)
        seal_reply(ss); /* nothing to wait for */
    return 0;
}

/* Whether the batch's objects fit now: FERRY_EAGAIN when spilling must make room first (the
 * batch then waits whole, so that it never half-succeeds for want of a moment's room). */
static int batch_room(struct session *ss, const struct proto_request *q)
{
    struct store *st = &ss->srv->store;
    struct proto_batch_entry e;
    uint64_t total = 0;
    alloc_block *b;
    int rc;

    for (uint32_t i = 0; i < q->u.batch.n; i++) {
        proto_batch_entry(q, i, &e);
        total += (e.data_size + e.metadata_size + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN;
    }
    if (!st->spill || total == 0 || (rc = store_reserve(st, total, &b)) == FERRY_ENOSPACE ||
        rc == FERRY_ETOOBIG)
        return 0; /* the creates say why, each */
    if (rc == 0)
        store_unreserve(st, b);
    return rc;
}

int session_handle_put_batch(struct session *ss, const struct proto_request *q)
{
    char why[PROTO_MAX_DETAIL + 1] = "";
    struct proto_batch_entry e;
    struct object *o;
    int32_t *statuses;
    int rc = batch_check(ss, q);

    if (rc < 0)
        return rc;
    if ((rc = batch_room(ss, q)) == FERRY_EAGAIN)
        return SESSION_RETRY;
    if (rc < 0)
        return session_reply_status(ss, q, rc);
    if (strict(ss))
        return put_batch_strict(ss, q);
    if (!(statuses = calloc(q->u.batch.n ? q->u.batch.n : 1, sizeof(*statuses))))
        return session_reply_status(ss, q, err_set(FERRY_ENOMEM, "put batch of %u", q->u.batch.n));
    for (uint32_t i = 0; i < q->u.batch.n; i++) {
        proto_batch_entry(q, i, &e);
        if ((statuses[i] = batch_create(ss, &e, &o)) < 0) {
            if (!why[0])
                snprintf(why, sizeof(why), "%s", ferry_errmsg());
            continue;
        }
        session_put_seal(ss, o);
    }
    session_reply_statuses(ss, q, statuses, q->u.batch.n, why);
    free(statuses);
    return 0;
}

void session_seal_hashed(struct object *o)
{
    struct session *ss = o->creator; /* alive: its close aborts (deletes) its unsealed objects */
    uint32_t i;

    if (o->deleted || !ss || ss->wait != SESSION_SEAL)
        return;
    i = seal_find(&ss->seal, &o->id);
    if (i < ss->seal.n)
        seal_claim(ss, o, i);
}
