#include "server/session.h"
#include "server/stats.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/usock.h"
#include "transfer/engine.h"

#define READ_CHUNK (256u << 10)
/* Input buffered beyond one largest frame is not read until processed (backpressure). */
#define IN_MAX (PROTO_HEADER_SIZE + PROTO_MAX_REQUEST)
/* Replies queued beyond this stop the processing of further requests until they drain. */
#define OUT_HIGH (4u << 20)

/* A handler returns 0, or FERRY_EPROTO (with err_set) to close the connection. A request
 * that fails for a legitimate reason gets an error reply and returns 0. */
typedef int handler_fn(struct session *ss, const struct proto_request *q);

/* ---- replies ---- */

static size_t reply_begin(struct session *ss, const struct proto_request *q, int32_t status)
{
    size_t start = proto_frame_begin(&ss->out, (uint16_t)(q->type | PROTO_REPLY_BIT), q->tag);
    pbuf_u32(&ss->out, (uint32_t)status);
    return start;
}

static int reply_status(struct session *ss, const struct proto_request *q, int status)
{
    size_t start = reply_begin(ss, q, status);

    if (status < 0) {
        const char *detail = ferry_errmsg();
        size_t len = strnlen(detail, PROTO_MAX_DETAIL);
        pbuf_u16(&ss->out, (uint16_t)len);
        pbuf_put(&ss->out, detail, len);
    }
    proto_frame_end(&ss->out, start);
    return 0;
}

/* A reply of n statuses and the first failure's reason (FETCH, PUT_BATCH). */
static void reply_statuses(struct session *ss, const struct proto_request *q,
                           const int32_t *statuses, uint32_t n, const char *why)
{
    size_t start = reply_begin(ss, q, 0), len = strnlen(why, PROTO_MAX_DETAIL);

    pbuf_u32(&ss->out, n);
    for (uint32_t i = 0; i < n; i++)
        pbuf_u32(&ss->out, (uint32_t)statuses[i]);
    pbuf_u16(&ss->out, (uint16_t)len);
    pbuf_put(&ss->out, why, len);
    proto_frame_end(&ss->out, start);
}

static int reply_u64(struct session *ss, const struct proto_request *q, uint64_t v)
{
    size_t start = reply_begin(ss, q, 0);
    pbuf_u64(&ss->out, v);
    proto_frame_end(&ss->out, start);
    return 0;
}

/* ---- references held by the session ---- */

static int held_add(struct session *ss, struct object *o)
{
    struct held *h = idmap_get(&ss->held, &o->id), *tail = NULL;

    for (; h; tail = h, h = h->next) {
        if (h->o == o) {
            h->count++;
            store_ref(&ss->srv->store, o);
            return 0;
        }
    }
    if (!(h = calloc(1, sizeof(*h))))
        return err_set(FERRY_ENOMEM, "reference record");
    h->o = o;
    h->count = 1;
    if (tail)
        tail->next = h;
    else if (idmap_put(&ss->held, &o->id, h) < 0) {
        free(h);
        return FERRY_ENOMEM;
    }
    store_ref(&ss->srv->store, o);
    return 0;
}

/* Unlinks entry h (whose predecessor under the same id is prev) from the session. */
static void held_unlink(struct session *ss, struct held *h, struct held *prev)
{
    if (prev)
        prev->next = h->next;
    else if (h->next)
        idmap_put(&ss->held, &h->o->id, h->next); /* replaces in place: cannot fail */
    else
        idmap_remove(&ss->held, &h->o->id);
    free(h);
}

/* The session's entry for o, and its predecessor under the same id. */
static struct held *held_find(struct session *ss, const struct object *o, struct held **prev)
{
    struct held *h;

    *prev = NULL;
    for (h = idmap_get(&ss->held, &o->id); h && h->o != o; h = h->next)
        *prev = h;
    return h;
}

/* Drops one reference on id: on the object the table has under id if the session holds
 * it, else on the oldest (deleted) one. FERRY_ENOENT if none is held. */
static int held_release(struct session *ss, const ferry_id *id)
{
    struct object *live = store_find(&ss->srv->store, id);
    struct held *prev = NULL, *h = live ? held_find(ss, live, &prev) : NULL;
    struct object *o;

    if (!h && !(h = idmap_get(&ss->held, id)))
        return FERRY_ENOENT;
    if (!live || h->o != live)
        prev = NULL; /* the head of the chain */
    o = h->o;
    if (--h->count == 0)
        held_unlink(ss, h, prev);
    store_unref(&ss->srv->store, o);
    return 0;
}

/* Forgets every reference the session has on o (o is being aborted). */
static void held_forget(struct session *ss, struct object *o)
{
    struct held *prev, *h = held_find(ss, o, &prev);

    if (h)
        held_unlink(ss, h, prev);
}

/* ---- handlers ---- */

static int handle_hello(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    size_t start;
    ssize_t n;

    if (q->u.hello.magic != PROTO_MAGIC)
        return err_set(FERRY_EPROTO, "hello: magic 0x%x, expected 0x%x", q->u.hello.magic,
                       PROTO_MAGIC);
    /* Another release's library: told why (it stays ungreeted; anything else closes it). */
    if (q->u.hello.version != PROTO_VERSION)
        return reply_status(ss, q,
                            err_set(FERRY_EPROTO,
                                    "this ferryd speaks client protocol %u, the library %u: use "
                                    "the libferry of ferryd's release",
                                    PROTO_VERSION, q->u.hello.version));
    ss->pid = (pid_t)q->u.hello.pid;
    ss->greeted = 1;
    start = reply_begin(ss, q, 0);
    pbuf_u64(&ss->out, srv->arena.size);
    pbuf_u64(&ss->out, ss->client_id);
    proto_frame_end(&ss->out, start);
    if (ss->out.oom || start != 0)
        return err_set(FERRY_EPROTO, "hello: cannot attach the arena to the reply");
    /* The first reply on the connection carries the arena's descriptor. */
    n = usock_send_fd(ss->fd, ss->out.data, ss->out.len, srv->arena.fd);
    if (n < 0)
        return err_set(FERRY_EPROTO, "hello: sending the arena: %s", strerror((int)-n));
    pbuf_consume(&ss->out, (size_t)n);
    return 0;
}

static int handle_create(struct session *ss, const struct proto_request *q)
{
    struct store *st = &ss->srv->store;
    struct object *o;
    int rc =
        store_create(st, &q->u.create.id, q->u.create.data_size, q->u.create.metadata_size, ss, &o);

    if (rc < 0)
        return reply_status(ss, q, rc);
    /* store_create counted the creator's reference; the session records it. */
    if ((rc = held_add(ss, o)) < 0) {
        store_abort(st, o);
        return reply_status(ss, q, rc);
    }
    store_unref(st, o);
    return reply_u64(ss, q, o->offset);
}

/* FERRY_ENOENT with the id in the detail. */
static int not_found(const ferry_id *id, const char *what)
{
    char hex[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(id, hex);
    return err_set(FERRY_ENOENT, "%s %s is not in the store", what, hex);
}

/* The session's own unsealed object with this id, or an error status (detail set). */
static int own_unsealed(struct session *ss, const ferry_id *id, struct object **out)
{
    struct object *o = store_find(&ss->srv->store, id);

    if (!o)
        return not_found(id, "object");
    if (o->state == FERRY_STATE_SEALED)
        return err_set(FERRY_EPERM, "the object is sealed already");
    if (o->creator != ss)
        return err_set(FERRY_EPERM, "the object belongs to another client");
    *out = o;
    return 0;
}

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
}

/* Blocks the session in q (of n objects) until each object is answered. */
static int seal_start(struct session *ss, const struct proto_request *q, uint32_t n)
{
    struct pending_seal *p = &ss->seal;

    p->ids = calloc(n ? n : 1, sizeof(*p->ids));
    p->statuses = calloc(n ? n : 1, sizeof(*p->statuses));
    p->why = calloc(1, PROTO_MAX_DETAIL + 1);
    if (!p->ids || !p->statuses || !p->why) {
        seal_reset(ss);
        return err_set(FERRY_ENOMEM, "seal of %u objects", n);
    }
    for (uint32_t i = 0; i < n; i++)
        p->statuses[i] = SEAL_PENDING;
    p->active = 1;
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
        reply_status(ss, &q, p->statuses[0] < 0 ? err_set(p->statuses[0], "%s", p->why) : 0);
    else
        reply_statuses(ss, &q, p->statuses, p->n, p->why);
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

/* The claim confirmed o's content: sealed (the claim published it) and, for a batch or a
 * SEAL with release, given back. */
static void seal_commit(struct session *ss, struct object *o)
{
    struct server *srv = ss->srv;

    srv->claimed = o;
    store_seal_digest(&srv->store, o, o->hash);
    srv->claimed = NULL;
    if (ss->seal.type == PROTO_PUT_BATCH)
        store_unref(&srv->store, o);
    else if (ss->seal.release)
        held_release(ss, &o->id);
}

/* The claim failed: a batch's object goes (the client never held it), and so does a SEAL's
 * whose id has other content; a SEAL's that the directory could not confirm stays unsealed,
 * for the client to seal again or abort. */
static void seal_drop(struct session *ss, struct object *o, int status)
{
    if (ss->seal.type == PROTO_SEAL && status != FERRY_EEXIST)
        return;
    if (ss->seal.type == PROTO_SEAL)
        held_forget(ss, o);
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
    if (!o || o->state != FERRY_STATE_CREATED || o->creator != ss) { /* nor this: answered */
        seal_settle(ss, i, FERRY_ENOENT, "the object went while its claim was out");
        return;
    }
    if (status == 0) {
        seal_commit(ss, o);
        seal_settle(ss, i, 0, "");
        return;
    }
    if (status == FERRY_EEXIST) {
        snprintf(why, sizeof(why),
                 "exists on node %s with other content (%" PRIu64 " bytes, digest %016" PRIx64 ")",
                 a->other ? a->other : "(unknown)", a->size, a->digest);
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

    if (directory_claim(srv->dir, &o->id, o->data_size + o->metadata_size, o->hash, seal_claimed,
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
    if (store_hash_created(&ss->srv->store, o))
        seal_claim(ss, o, i);
}

/* The session closes: the claims are forgotten and withdrawn (queued behind them, so whatever
 * they published goes), a batch's objects aborted (a SEAL's object is the client's, aborted
 * with its holdings). */
static void seal_abandon(struct session *ss)
{
    struct pending_seal *p = &ss->seal;

    directory_cancel(ss->srv->dir, ss);
    for (uint32_t i = 0; i < p->n; i++) {
        struct object *o = store_find(&ss->srv->store, &p->ids[i]);
        if (p->statuses[i] != SEAL_PENDING)
            continue;
        directory_withdraw(ss->srv->dir, &p->ids[i]);
        if (p->type == PROTO_PUT_BATCH && o && o->state == FERRY_STATE_CREATED && o->creator == ss)
            store_abort(&ss->srv->store, o);
    }
    seal_reset(ss);
}

static int handle_seal(struct session *ss, const struct proto_request *q)
{
    struct object *o;
    int rc = own_unsealed(ss, &q->u.seal.id, &o);

    if (rc < 0)
        return reply_status(ss, q, rc);
    if (strict(ss)) {
        if ((rc = seal_start(ss, q, 1)) < 0)
            return reply_status(ss, q, rc);
        ss->seal.release = q->u.seal.release;
        seal_begin(ss, 0, o);
        return 0;
    }
    store_seal(&ss->srv->store, o);
    if (q->u.seal.release)
        held_release(ss, &o->id); /* o is the live object under its id */
    return reply_status(ss, q, 0);
}

static int handle_abort(struct session *ss, const struct proto_request *q)
{
    struct object *o;
    int rc = own_unsealed(ss, &q->u.one.id, &o);

    if (rc < 0)
        return reply_status(ss, q, rc);
    held_forget(ss, o);
    store_abort(&ss->srv->store, o);
    return reply_status(ss, q, 0);
}

static int handle_release(struct session *ss, const struct proto_request *q)
{
    char hex[2 * FERRY_ID_SIZE + 1];

    if (held_release(ss, &q->u.one.id) == 0)
        return 0;
    ferry_id_format(&q->u.one.id, hex);
    return err_set(FERRY_EPROTO, "release of %s, which this client does not hold", hex);
}

/* The sealed object with this id, or NULL. */
static struct object *find_sealed(struct session *ss, const ferry_id *id)
{
    struct object *o = store_find(&ss->srv->store, id);
    return o && o->state == FERRY_STATE_SEALED ? o : NULL;
}

static int handle_contains(struct session *ss, const struct proto_request *q)
{
    size_t start = reply_begin(ss, q, 0);
    pbuf_u8(&ss->out, find_sealed(ss, &q->u.one.id) != NULL);
    proto_frame_end(&ss->out, start);
    return 0;
}

static int handle_delete(struct session *ss, const struct proto_request *q)
{
    struct object *o = store_find(&ss->srv->store, &q->u.one.id);

    if (!o || (o->state != FERRY_STATE_SEALED && o->creator != ss))
        return reply_status(ss, q, not_found(&q->u.one.id, "object"));
    if (o->state != FERRY_STATE_SEALED)
        return reply_status(ss, q, err_set(FERRY_ENOTSEALED, "unsealed: abort it instead"));
    store_delete(&ss->srv->store, o);
    return reply_status(ss, q, 0);
}

/* Blocks the session until o's digest is in (o stays pinned by the hasher until then). */
static void hash_wait(struct session *ss, struct object *o, uint64_t tag)
{
    struct server *srv = ss->srv;

    ss->hash_wait = o;
    ss->hash_tag = tag;
    ss->hash_next = srv->hash_waiters;
    if (ss->hash_next)
        ss->hash_next->hash_pprev = &ss->hash_next;
    ss->hash_pprev = &srv->hash_waiters;
    srv->hash_waiters = ss;
}

static void hash_unwait(struct session *ss)
{
    if (!ss->hash_wait)
        return;
    *ss->hash_pprev = ss->hash_next;
    if (ss->hash_next)
        ss->hash_next->hash_pprev = ss->hash_pprev;
    ss->hash_wait = NULL;
}

void session_hash_ready(struct server *srv, struct object *o)
{
    struct session *ss, *next;

    if (o->state == FERRY_STATE_CREATED) { /* only a pending strict seal hashes one */
        ss = o->creator; /* alive: its close aborts (deletes) its unsealed objects */
        if (!o->deleted && ss && ss->seal.active) {
            uint32_t i = seal_find(&ss->seal, &o->id);
            if (i < ss->seal.n)
                seal_claim(ss, o, i);
        }
        return;
    }
    for (ss = srv->hash_waiters; ss; ss = next) {
        next = ss->hash_next;
        if (ss->hash_wait != o)
            continue;
        hash_unwait(ss);
        reply_u64(ss, &(struct proto_request){.type = PROTO_HASH, .tag = ss->hash_tag}, o->hash);
        server_schedule(srv, ss);
    }
}

static int handle_hash(struct session *ss, const struct proto_request *q)
{
    struct object *o = find_sealed(ss, &q->u.one.id);

    if (!o)
        return reply_status(ss, q, not_found(&q->u.one.id, "sealed object"));
    if (!o->hashed) {
        hash_wait(ss, o, q->tag);
        return 0;
    }
    return reply_u64(ss, q, o->hash);
}

static int handle_evict(struct session *ss, const struct proto_request *q)
{
    return reply_u64(ss, q, store_evict(&ss->srv->store, q->u.evict.bytes));
}

static int handle_refresh(struct session *ss, const struct proto_request *q)
{
    uint32_t missing = 0;

    for (uint32_t i = 0; i < q->u.ids.n; i++) {
        struct object *o = find_sealed(ss, &q->u.ids.ids[i]);
        if (o)
            store_touch(&ss->srv->store, o);
        else
            missing++;
    }
    if (missing)
        return reply_status(ss, q,
                            err_set(FERRY_ENOENT, "%u of %u objects absent", missing, q->u.ids.n));
    return reply_status(ss, q, 0);
}

static int handle_list(struct session *ss, const struct proto_request *q)
{
    struct store *st = &ss->srv->store;
    struct timespec ts;
    uint64_t now;
    size_t start = reply_begin(ss, q, 0), pos = 0;
    const struct object *o;

    clock_gettime(CLOCK_REALTIME, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    pbuf_reserve(&ss->out, 4 + st->table.count * PROTO_LIST_ENTRY_SIZE);
    pbuf_u32(&ss->out, (uint32_t)st->table.count);
    while ((o = idmap_next(&st->table, &pos, NULL))) {
        pbuf_id(&ss->out, &o->id);
        pbuf_u64(&ss->out, o->data_size);
        pbuf_u64(&ss->out, o->metadata_size);
        pbuf_u8(&ss->out, o->state);
        pbuf_u32(&ss->out, o->refcount);
        pbuf_u64(&ss->out, now > o->created_ns ? (now - o->created_ns) / 1000000 : 0);
    }
    proto_frame_end(&ss->out, start);
    return 0;
}

static void count_stat(void *arg, const char *name, int kind, const char *help, uint64_t value)
{
    (*(uint32_t *)arg)++;
}

static void put_stat(void *arg, const char *name, int kind, const char *help, uint64_t value)
{
    proto_put_stat(arg, name, kind, value);
}

/* Every counter, keyed by name: a client takes the ones it knows. */
static int handle_stats(struct session *ss, const struct proto_request *q)
{
    size_t start = reply_begin(ss, q, 0);
    uint32_t n = 0;

    server_stats_report(ss->srv, count_stat, &n);
    pbuf_u32(&ss->out, n);
    server_stats_report(ss->srv, put_stat, &ss->out);
    proto_frame_end(&ss->out, start);
    return 0;
}

static int handle_subscribe(struct session *ss, const struct proto_request *q)
{
    int fd, rc = server_subscribe(ss->srv, &fd);
    size_t start;
    ssize_t n;

    if (rc < 0)
        return reply_status(ss, q, rc);
    /* The descriptor rides on the reply's first byte, so the reply must go out now and first:
     * session_process only dispatches this request with nothing else queued. */
    start = reply_begin(ss, q, 0);
    proto_frame_end(&ss->out, start);
    n = ss->out.oom ? -ENOMEM : usock_send_fd(ss->fd, ss->out.data, ss->out.len, fd);
    close(fd);
    if (n < 0)
        return err_set(FERRY_EPROTO, "subscribe: sending the descriptor: %s", strerror((int)-n));
    pbuf_consume(&ss->out, (size_t)n);
    return 0;
}

static int handle_stage(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    size_t start;
    int rc;

    if (!ss->staging) {
        if ((rc = store_reserve(&srv->store, srv->staging_size, &ss->staging)) < 0)
            return reply_status(ss, q, rc);
        srv->staging_bytes += alloc_block_size(ss->staging);
    }
    start = reply_begin(ss, q, 0);
    pbuf_u64(&ss->out, alloc_block_offset(ss->staging));
    pbuf_u64(&ss->out, alloc_block_size(ss->staging));
    proto_frame_end(&ss->out, start);
    return 0;
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

/* Creates and fills the object of entry e; *out is it, unsealed. */
static int batch_create(struct session *ss, const struct proto_batch_entry *e, struct object **out)
{
    struct store *st = &ss->srv->store;
    uint64_t from = alloc_block_offset(ss->staging) + e->offset;
    int rc = store_create(st, &e->id, e->data_size, e->metadata_size, ss, out);

    if (rc < 0)
        return rc;
    memcpy(st->base + (*out)->offset, st->base + from, e->data_size + e->metadata_size);
    return 0;
}

/* --strict-ids: each object is sealed once its claim is answered (struct pending_seal). */
static int put_batch_strict(struct session *ss, const struct proto_request *q)
{
    struct proto_batch_entry e;
    struct object *o;
    int rc = seal_start(ss, q, q->u.batch.n);

    if (rc < 0)
        return reply_status(ss, q, rc);
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

static int handle_put_batch(struct session *ss, const struct proto_request *q)
{
    struct store *st = &ss->srv->store;
    char why[PROTO_MAX_DETAIL + 1] = "";
    struct proto_batch_entry e;
    struct object *o;
    int32_t *statuses;
    int rc = batch_check(ss, q);

    if (rc < 0)
        return rc;
    if (strict(ss))
        return put_batch_strict(ss, q);
    if (!(statuses = calloc(q->u.batch.n ? q->u.batch.n : 1, sizeof(*statuses))))
        return reply_status(ss, q, err_set(FERRY_ENOMEM, "put batch of %u", q->u.batch.n));
    for (uint32_t i = 0; i < q->u.batch.n; i++) {
        proto_batch_entry(q, i, &e);
        if ((statuses[i] = batch_create(ss, &e, &o)) < 0) {
            if (!why[0])
                snprintf(why, sizeof(why), "%s", ferry_errmsg());
            continue;
        }
        store_seal(st, o);
        store_unref(st, o);
    }
    reply_statuses(ss, q, statuses, q->u.batch.n, why);
    free(statuses);
    return 0;
}

/* ---- get ---- */

static void get_unwait(struct server *srv, struct get_wait *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else if (w->next)
        idmap_put(&srv->waiters, &w->id, w->next); /* replaces in place: cannot fail */
    else
        idmap_remove(&srv->waiters, &w->id);
    if (w->next)
        w->next->prev = w->prev;
    w->ss = NULL;
}

static void get_reset(struct session *ss)
{
    struct pending_get *g = &ss->get;

    for (uint32_t i = 0; g->waits && i < g->n; i++) {
        if (g->waits[i].ss)
            get_unwait(ss->srv, &g->waits[i]);
    }
    loop_timer_stop(&ss->srv->loop, &g->timer);
    free(g->entries);
    free(g->waits);
    g->entries = NULL;
    g->waits = NULL;
    g->active = 0;
}

/* Sends the get's reply (found entries hold references) and ends it. */
static void get_finish(struct session *ss)
{
    struct pending_get *g = &ss->get;
    struct proto_request q = {.type = PROTO_GET, .tag = g->tag};
    size_t start = reply_begin(ss, &q, 0);

    pbuf_u32(&ss->out, g->n);
    for (uint32_t i = 0; i < g->n; i++) {
        pbuf_u32(&ss->out, (uint32_t)g->entries[i].status);
        pbuf_u64(&ss->out, g->entries[i].offset);
        pbuf_u64(&ss->out, g->entries[i].data_size);
        pbuf_u64(&ss->out, g->entries[i].metadata_size);
    }
    proto_frame_end(&ss->out, start);
    if (g->missing)
        ss->srv->counters.get_timeouts++;
    get_reset(ss);
}

/* Fills entry i from o and takes the reference it stands for. */
static int get_fill(struct session *ss, uint32_t i, struct object *o)
{
    struct proto_get_entry *e = &ss->get.entries[i];
    int rc = held_add(ss, o);

    if (rc < 0)
        return rc;
    e->status = 0;
    e->offset = o->offset;
    e->data_size = o->data_size;
    e->metadata_size = o->metadata_size;
    ss->get.missing--;
    return 0;
}

static int get_wait_for(struct session *ss, uint32_t i, const ferry_id *id)
{
    struct server *srv = ss->srv;
    struct get_wait *w = &ss->get.waits[i], *head = idmap_get(&srv->waiters, id);

    w->ss = ss;
    w->index = i;
    w->id = *id;
    w->prev = NULL;
    w->next = head;
    if (idmap_put(&srv->waiters, id, w) < 0) {
        w->ss = NULL;
        return FERRY_ENOMEM;
    }
    if (head)
        head->prev = w;
    return 0;
}

static void get_timeout(struct loop *l, struct loop_timer *t)
{
    struct session *ss = t->arg;

    get_finish(ss);
    server_schedule(ss->srv, ss);
}

void session_wake_waiters(struct server *srv, struct object *o)
{
    struct get_wait *w = idmap_get(&srv->waiters, &o->id), *next;

    for (; w; w = next) {
        struct session *ss = w->ss;
        next = w->next;
        get_unwait(srv, w);
        if (get_fill(ss, w->index, o) < 0) {
            session_close(ss, "out of memory recording a reference");
            continue;
        }
        if (ss->get.missing == 0) {
            get_finish(ss);
            server_schedule(srv, ss);
        }
    }
}

/* Takes what is there; waits for the rest unless the timeout is 0. */
static int get_start(struct session *ss, const struct proto_request *q)
{
    struct pending_get *g = &ss->get;
    uint32_t n = q->u.ids.n;
    int rc = 0;

    g->tag = q->tag;
    g->n = g->missing = n;
    g->entries = calloc(n ? n : 1, sizeof(*g->entries));
    g->waits = calloc(n ? n : 1, sizeof(*g->waits));
    if (!g->entries || !g->waits)
        return err_set(FERRY_ENOMEM, "get of %u ids", n);
    g->active = 1;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        struct object *o = find_sealed(ss, &q->u.ids.ids[i]);
        g->entries[i].status = FERRY_ENOENT;
        if (o)
            rc = get_fill(ss, i, o);
        else if (q->u.ids.timeout_ms != 0)
            rc = get_wait_for(ss, i, &q->u.ids.ids[i]);
    }
    if (rc == 0 && g->missing && q->u.ids.timeout_ms > 0)
        rc = loop_timer_start(&ss->srv->loop, &g->timer,
                              loop_now_ms() + (uint64_t)q->u.ids.timeout_ms);
    return rc;
}

static int handle_get(struct session *ss, const struct proto_request *q)
{
    int rc;

    ss->srv->counters.gets++;
    if ((rc = get_start(ss, q)) < 0) {
        /* A failed get holds nothing: give back what it took. */
        for (uint32_t i = 0; ss->get.entries && i < q->u.ids.n; i++) {
            if (ss->get.entries[i].status == 0)
                held_release(ss, &q->u.ids.ids[i]);
        }
        get_reset(ss);
        return reply_status(ss, q, rc);
    }
    if (ss->get.missing == 0 || q->u.ids.timeout_ms == 0)
        get_finish(ss);
    return 0;
}

/* ---- fetch ---- */

#define FETCH_PENDING 1

/* Frees what a fetch allocated; it is over. */
static void fetch_free(struct pending_fetch *f)
{
    free(f->statuses);
    free(f->why);
    free(f->ids);
    f->statuses = NULL;
    f->why = NULL;
    f->ids = NULL;
    f->active = 0;
}

static void fetch_finish(struct session *ss)
{
    struct pending_fetch *f = &ss->fetch;
    struct proto_request q = {.type = PROTO_FETCH, .tag = f->tag};

    reply_statuses(ss, &q, f->statuses, f->n, f->why);
    loop_timer_stop(&ss->srv->loop, &f->timer);
    fetch_free(f);
}

/* Keeps the first failure's reason (ferry_errmsg() when status came). */
static void fetch_note(struct pending_fetch *f, int status, const char *why)
{
    if (status < 0 && !f->why[0])
        snprintf(f->why, PROTO_MAX_DETAIL + 1, "%s", why);
}

static void fetch_done(void *ctx, uint32_t index, int status)
{
    struct session *ss = ctx;
    struct pending_fetch *f = &ss->fetch;

    if (!f->active || f->statuses[index] != FETCH_PENDING)
        return;
    f->statuses[index] = status;
    fetch_note(f, status, ferry_errmsg());
    if (--f->missing == 0) {
        fetch_finish(ss);
        server_schedule(ss->srv, ss);
    }
}

/* The time is up: what is not local by now times out (transfers under way go on), with what
 * the engine knows of why. */
static void fetch_expire(struct session *ss, const ferry_id *ids)
{
    struct pending_fetch *f = &ss->fetch;
    char why[320], first[PROTO_MAX_DETAIL + 1] = "";

    for (uint32_t i = 0; i < f->n; i++) {
        if (f->statuses[i] != FETCH_PENDING)
            continue;
        f->statuses[i] = ss->srv->engine
                             ? engine_fetch_why(ss->srv->engine, &ids[i], why, sizeof(why))
                             : FERRY_ETIMEDOUT;
        if (!first[0])
            snprintf(first, sizeof(first), "not local within %" PRId64 " ms: %s", f->timeout_ms,
                     ss->srv->engine && why[0] ? why : "no live node holds it");
    }
    fetch_note(f, FERRY_ETIMEDOUT, first);
    if (ss->srv->engine)
        engine_cancel(ss->srv->engine, ss);
    f->missing = 0;
    fetch_finish(ss);
}

static void fetch_timeout(struct loop *l, struct loop_timer *t)
{
    struct session *ss = t->arg;

    fetch_expire(ss, ss->fetch.ids);
    server_schedule(ss->srv, ss);
}

static int32_t fetch_start_one(struct session *ss, const ferry_id *id, uint32_t i)
{
    struct engine *e = ss->srv->engine;

    if (find_sealed(ss, id))
        return 0;
    if (!e)
        return err_set(FERRY_ESTANDALONE, "no other node to fetch from");
    return engine_fetch(e, id, fetch_done, ss, i) < 0 ? (int32_t)FERRY_ENOMEM : FETCH_PENDING;
}

static int handle_fetch(struct session *ss, const struct proto_request *q)
{
    struct pending_fetch *f = &ss->fetch;
    uint32_t n = q->u.ids.n;

    ss->srv->counters.fetches++;
    f->statuses = calloc(n ? n : 1, sizeof(*f->statuses));
    f->why = calloc(1, PROTO_MAX_DETAIL + 1);
    f->ids = n ? malloc((size_t)n * sizeof(*f->ids)) : NULL;
    if (!f->statuses || !f->why || (n && !f->ids)) {
        fetch_free(f);
        return reply_status(ss, q, err_set(FERRY_ENOMEM, "fetch of %u ids", n));
    }
    memcpy(f->ids, q->u.ids.ids, (size_t)n * sizeof(*f->ids));
    f->active = 1;
    f->tag = q->tag;
    f->n = n;
    f->missing = 0;
    f->timeout_ms = q->u.ids.timeout_ms;
    for (uint32_t i = 0; i < n; i++) {
        f->statuses[i] = fetch_start_one(ss, &q->u.ids.ids[i], i);
        fetch_note(f, f->statuses[i], ferry_errmsg());
        f->missing += f->statuses[i] == FETCH_PENDING;
    }
    if (f->missing == 0)
        fetch_finish(ss);
    else if (q->u.ids.timeout_ms == 0)
        fetch_expire(ss, f->ids);
    else if (q->u.ids.timeout_ms > 0 &&
             loop_timer_start(&ss->srv->loop, &f->timer,
                              loop_now_ms() + (uint64_t)q->u.ids.timeout_ms) < 0)
        fetch_expire(ss, f->ids);
    return 0;
}

/* ---- nodes and where ---- */

static void put_dir_node(struct session *ss, const struct directory_node *d, int self)
{
    ferry_node_info n = {.self = self};

    snprintf(n.id, sizeof(n.id), "%s", d->id);
    snprintf(n.address, sizeof(n.address), "%s", d->addr);
    directory_node_names(d, n.transports, sizeof(n.transports));
    proto_put_node(&ss->out, &n);
}

/* Answers NODES or WHERE with the directory's nodes (and, for WHERE, this node if it holds
 * the object), or DELETE_CLUSTER with a status. */
static void dir_done(void *arg, const struct directory_answer *a)
{
    struct session *ss = arg;
    struct server *srv = ss->srv;
    struct proto_request q = {.type = ss->dir.type, .tag = ss->dir.tag};
    const char *self = srv->cfg.node_id;
    int here = q.type == PROTO_WHERE && find_sealed(ss, &ss->dir.id) != NULL;
    size_t start;

    ss->dir.active = 0;
    server_schedule(srv, ss);
    if (a->status < 0 || q.type == PROTO_DELETE_CLUSTER) {
        reply_status(ss, &q,
                     a->status < 0 ? err_set(a->status, "%s", ferry_strerror(a->status)) : 0);
        return;
    }
    start = reply_begin(ss, &q, 0);
    pbuf_u32(&ss->out, (uint32_t)(a->n + (size_t)here));
    for (size_t i = 0; i < a->n; i++)
        put_dir_node(ss, &a->nodes[i], strcmp(a->nodes[i].id, self) == 0);
    if (here) {
        struct directory_node me;
        memset(&me, 0, sizeof(me));
        snprintf(me.id, sizeof(me.id), "%s", self);
        snprintf(me.addr, sizeof(me.addr), "%s", srv->cfg.listen_addr);
        if (srv->engine)
            engine_advertise(srv->engine, &me);
        put_dir_node(ss, &me, 1);
    }
    proto_frame_end(&ss->out, start);
}

/* Deletes id here and cluster-wide; answers once the directory has recorded it. */
static int handle_delete_cluster(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    int rc;

    if (!srv->dir)
        return reply_status(ss, q, err_set(FERRY_ESTANDALONE, "no cluster to delete from"));
    server_drop_deleted(srv, &q->u.one.id, srv->cfg.node_id);
    ss->dir = (struct pending_dir){.active = 1, .type = q->type, .tag = q->tag};
    if ((rc = directory_delete(srv->dir, &q->u.one.id, dir_done, ss)) < 0) {
        ss->dir.active = 0;
        return reply_status(ss, q, rc);
    }
    log_info("client %" PRIu64 " deleted an object cluster-wide", ss->client_id);
    return 0;
}

static int handle_dir(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    int rc;

    if (!srv->dir)
        return reply_status(ss, q, err_set(FERRY_ESTANDALONE, "no directory to ask"));
    ss->dir = (struct pending_dir){.active = 1, .type = q->type, .tag = q->tag};
    if (q->type == PROTO_WHERE) {
        ss->dir.id = q->u.one.id;
        rc = directory_lookup(srv->dir, &q->u.one.id, 1, dir_done, ss);
    } else {
        rc = directory_nodes(srv->dir, dir_done, ss);
    }
    if (rc < 0) {
        ss->dir.active = 0;
        return reply_status(ss, q, rc);
    }
    return 0;
}

/* ---- transports: peers and the eager limit ---- */

_Static_assert(FERRY_EAGER_AUTO == ENGINE_EAGER_AUTO, "one value means the provider default");

static void put_engine_peer(struct session *ss, const struct engine_peer_info *e)
{
    ferry_peer p;

    snprintf(p.node, sizeof(p.node), "%.*s", (int)sizeof(p.node) - 1, e->node);
    snprintf(p.transport, sizeof(p.transport), "%.*s", (int)sizeof(p.transport) - 1, e->transport);
    snprintf(p.provider, sizeof(p.provider), "%.*s", (int)sizeof(p.provider) - 1, e->provider);
    snprintf(p.why, sizeof(p.why), "%.*s", (int)sizeof(p.why) - 1, e->why);
    proto_put_peer(&ss->out, &p);
}

/* The fabric's provider ("" without one) and up to max of the engine's peers. */
static int handle_peers(struct session *ss, const struct proto_request *q)
{
    struct engine *e = ss->srv->engine;
    const char *provider = e ? engine_provider(e) : NULL;
    struct engine_peer_info *v = NULL;
    size_t n = 0, start;

    if (e && q->u.peers.max) {
        if (!(v = calloc(q->u.peers.max, sizeof(*v))))
            return reply_status(ss, q, err_set(FERRY_ENOMEM, "peers: %u records", q->u.peers.max));
        n = engine_peers(e, v, q->u.peers.max);
    }
    start = reply_begin(ss, q, 0);
    proto_put_str(&ss->out, provider ? provider : "", sizeof(((ferry_peer *)0)->provider) - 1);
    pbuf_u32(&ss->out, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        put_engine_peer(ss, &v[i]);
    proto_frame_end(&ss->out, start);
    free(v);
    return 0;
}

static int handle_eager_max(struct session *ss, const struct proto_request *q)
{
    struct engine *e = ss->srv->engine;

    if (!e)
        return reply_status(ss, q, err_set(FERRY_ESTANDALONE, "no transfers to tune"));
    engine_set_eager_max(e, q->u.eager.bytes);
    log_info("eager limit set to %" PRIu64 " bytes by client %" PRIu64, engine_eager_max(e),
             ss->client_id);
    return reply_status(ss, q, 0);
}

/* ---- dispatch and I/O ---- */

static handler_fn *const handlers[PROTO_TYPE_MAX + 1] = {
    [PROTO_HELLO] = handle_hello,
    [PROTO_CREATE] = handle_create,
    [PROTO_SEAL] = handle_seal,
    [PROTO_ABORT] = handle_abort,
    [PROTO_GET] = handle_get,
    [PROTO_RELEASE] = handle_release,
    [PROTO_CONTAINS] = handle_contains,
    [PROTO_DELETE] = handle_delete,
    [PROTO_LIST] = handle_list,
    [PROTO_EVICT] = handle_evict,
    [PROTO_REFRESH] = handle_refresh,
    [PROTO_HASH] = handle_hash,
    [PROTO_STATS] = handle_stats,
    [PROTO_SUBSCRIBE] = handle_subscribe,
    [PROTO_STAGE] = handle_stage,
    [PROTO_PUT_BATCH] = handle_put_batch,
    [PROTO_FETCH] = handle_fetch,
    [PROTO_NODES] = handle_dir,
    [PROTO_WHERE] = handle_dir,
    [PROTO_PEERS] = handle_peers,
    [PROTO_EAGER_MAX] = handle_eager_max,
    [PROTO_DELETE_CLUSTER] = handle_delete_cluster,
};

static int dispatch(struct session *ss, const struct proto_header *h, const uint8_t *payload)
{
    struct proto_request q;
    int rc = proto_decode_request(h, payload, &q);

    if (rc < 0)
        return rc;
    if (!ss->greeted && q.type != PROTO_HELLO)
        return err_set(FERRY_EPROTO, "first message is type %u, not hello", q.type);
    if (ss->greeted && q.type == PROTO_HELLO)
        return err_set(FERRY_EPROTO, "second hello");
    return handlers[q.type](ss, &q);
}

/* Writes queued replies; -1 when the client is gone. */
static int flush_out(struct session *ss)
{
    while (ss->out.len) {
        ssize_t n = send(ss->fd, ss->out.data, ss->out.len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? 0 : -1;
        }
        pbuf_consume(&ss->out, (size_t)n);
    }
    return 0;
}

/* Requests that send a descriptor need an empty output queue; a blocked get or hash stops
 * processing (the protocol is request-reply); so does a queue of unread replies. */
static int can_process(struct session *ss, uint16_t type)
{
    if (ss->closed || ss->get.active || ss->fetch.active || ss->dir.active || ss->seal.active ||
        ss->hash_wait || ss->out.len > OUT_HIGH)
        return 0;
    return (type != PROTO_HELLO && type != PROTO_SUBSCRIBE) || ss->out.len == 0;
}

static void process_input(struct session *ss)
{
    size_t done = 0;
    char reason[512];

    while (ss->in.len - done >= PROTO_HEADER_SIZE) {
        struct proto_header h;
        int rc = proto_decode_header(ss->in.data + done, PROTO_MAX_REQUEST, &h);
        if (rc == 0 && ss->in.len - done < PROTO_HEADER_SIZE + h.length)
            break;
        if (rc == 0 && !can_process(ss, h.type))
            break;
        if (rc == 0)
            rc = dispatch(ss, &h, ss->in.data + done + PROTO_HEADER_SIZE);
        if (rc < 0) {
            snprintf(reason, sizeof(reason), "%s", ferry_errmsg());
            session_close(ss, reason);
            return;
        }
        done += PROTO_HEADER_SIZE + h.length;
    }
    pbuf_consume(&ss->in, done);
}

/* Reads what the socket has, up to one chunk; -1 at end of stream or error. With a full
 * buffer nothing is read, but a hang-up still ends the session. */
static int read_in(struct session *ss, uint32_t events)
{
    ssize_t n;

    if (ss->in.len >= IN_MAX)
        return (events & LOOP_HANGUP) ? -1 : 0;
    pbuf_reserve(&ss->in, READ_CHUNK);
    if (ss->in.oom)
        return -1;
    n = recv(ss->fd, ss->in.data + ss->in.len, READ_CHUNK, MSG_DONTWAIT);
    if (n > 0) {
        ss->in.len += (size_t)n;
        return 0;
    }
    return (n < 0 && (errno == EAGAIN || errno == EINTR)) ? 0 : -1;
}

/* Reading stops while the input buffer is full; writing is watched while replies wait. */
static void update_interest(struct session *ss)
{
    uint32_t ev = (ss->in.len < IN_MAX ? LOOP_READ : 0) | (ss->out.len ? LOOP_WRITE : 0);
    if (loop_watch_mod(&ss->srv->loop, &ss->watch, ev) < 0)
        session_close(ss, ferry_errmsg());
}

static void pump(struct session *ss)
{
    process_input(ss);
    if (ss->closed)
        return;
    if (flush_out(ss) < 0) {
        session_close(ss, NULL);
        return;
    }
    /* Draining the output may have unblocked buffered requests. */
    if (ss->out.len == 0 && ss->in.len >= PROTO_HEADER_SIZE)
        server_schedule(ss->srv, ss);
    update_interest(ss);
}

/* At the end of the stream: a reason if the buffer ends inside a frame, else NULL. */
static const char *truncation(struct session *ss)
{
    struct proto_header h;

    if (ss->in.len == 0)
        return NULL;
    if (ss->in.len >= PROTO_HEADER_SIZE &&
        proto_decode_header(ss->in.data, PROTO_MAX_REQUEST, &h) == 0 &&
        ss->in.len >= PROTO_HEADER_SIZE + h.length)
        return NULL; /* whole frames not yet processed: an ordinary disconnect */
    return "connection closed in the middle of a message (truncated frame)";
}

static void on_event(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct session *ss = w->arg;

    if (ss->closed)
        return;
    if ((events & (LOOP_READ | LOOP_HANGUP)) && read_in(ss, events) < 0) {
        session_close(ss, ss->in.oom ? "out of memory for input" : truncation(ss));
        return;
    }
    pump(ss);
}

void session_resume(struct session *ss)
{
    pump(ss);
}

int session_open(struct server *srv, int fd)
{
    struct session *ss = calloc(1, sizeof(*ss));
    int rc;

    if (!ss)
        return err_set(FERRY_ENOMEM, "session");
    ss->srv = srv;
    ss->fd = fd;
    ss->client_id = ++srv->next_client_id;
    loop_timer_init(&ss->get.timer, get_timeout, ss);
    loop_timer_init(&ss->fetch.timer, fetch_timeout, ss);
    if ((rc = loop_watch_add(&srv->loop, &ss->watch, fd, LOOP_READ, on_event, ss)) < 0) {
        free(ss);
        return rc;
    }
    ss->next = srv->sessions;
    if (ss->next)
        ss->next->pprev = &ss->next;
    ss->pprev = &srv->sessions;
    srv->sessions = ss;
    srv->clients++;
    srv->counters.connections_total++;
    return 0;
}

/* Gives back everything the session holds: unsealed objects are aborted, references on the
 * others dropped (a deleted object goes with its last one). */
static void drop_holdings(struct session *ss)
{
    struct store *st = &ss->srv->store;
    struct held *h, *next;
    size_t pos = 0;

    while ((h = idmap_next(&ss->held, &pos, NULL))) {
        for (; h; h = next) {
            next = h->next;
            if (h->o->state == FERRY_STATE_CREATED && h->o->creator == ss) {
                store_abort(st, h->o);
            } else {
                while (h->count--)
                    store_unref(st, h->o);
            }
            free(h);
        }
    }
    idmap_free(&ss->held);
}

void session_close(struct session *ss, const char *reason)
{
    struct server *srv = ss->srv;

    if (ss->closed)
        return;
    if (reason) {
        log_warn("client %" PRIu64 " (pid %d): closing the connection: %s", ss->client_id,
                 (int)ss->pid, reason);
        srv->counters.protocol_errors++;
    }
    ss->closed = 1;
    get_reset(ss);
    hash_unwait(ss);
    if (ss->fetch.active) {
        if (srv->engine)
            engine_cancel(srv->engine, ss);
        loop_timer_stop(&srv->loop, &ss->fetch.timer);
        fetch_free(&ss->fetch);
    }
    if (ss->dir.active)
        directory_cancel(srv->dir, ss);
    if (ss->seal.active)
        seal_abandon(ss);
    drop_holdings(ss);
    if (ss->staging) {
        srv->staging_bytes -= alloc_block_size(ss->staging);
        store_unreserve(&srv->store, ss->staging);
        ss->staging = NULL;
    }
    loop_watch_del(&srv->loop, &ss->watch);
    close(ss->fd);
    ss->fd = -1;
    srv->clients--;
    *ss->pprev = ss->next;
    if (ss->next)
        ss->next->pprev = ss->pprev;
    ss->next = srv->closed;
    ss->pprev = NULL;
    srv->closed = ss;
}

void session_free(struct session *ss)
{
    pbuf_free(&ss->in);
    pbuf_free(&ss->out);
    free(ss);
}
