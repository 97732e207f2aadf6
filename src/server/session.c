#include "server/session_int.h"
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

/* ---- replies (the others: session_reply.c) ---- */

static int reply_u64(struct session *ss, const struct proto_request *q, uint64_t v)
{
    size_t start = session_reply_begin(ss, q, 0);
    pbuf_u64(&ss->out, v);
    proto_frame_end(&ss->out, start);
    return 0;
}

/* HASH: the object's root. */
static int reply_digest(struct session *ss, const struct proto_request *q, const struct object *o)
{
    size_t start = session_reply_begin(ss, q, 0);
    pbuf_put(&ss->out, o->root, DIGEST_LEN);
    proto_frame_end(&ss->out, start);
    return 0;
}

/* ---- references held by the session ---- */

int session_held_add(struct session *ss, struct object *o)
{
    struct held *h = idmap_get(&ss->held, &o->id), *tail = NULL;

    /* Counts are 32 bits: a client that gets an object billions of times without releasing
     * it must not wrap them (to 0: the object freed under everyone's mapping). */
    if (o->refcount >= REFS_MAX)
        return err_set(FERRY_EBUSY, "the object has %u references (at most %u)", o->refcount,
                       REFS_MAX);
    if (object_sealed(o))
        store_mark_read(o); /* a get: its reader came */
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
int session_held_release(struct session *ss, const ferry_id *id)
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
void session_held_forget(struct session *ss, struct object *o)
{
    struct held *prev, *h = held_find(ss, o, &prev);

    if (h)
        held_unlink(ss, h, prev);
}

/* ---- the shared index's blocks of slots ---- */

/* A free block for a new client (its owner generation in *owner), or FASTIDX_NO_BLOCK. */
static uint32_t fast_block_take(struct server *srv, uint64_t *owner)
{
    *owner = 0;
    return srv->fast_size ? fastidx_block_take(&srv->fast, owner) : FASTIDX_NO_BLOCK;
}

/* The client is gone: what its slots held is let go (the store's sweep frees what it kept). */
static void fast_block_give(struct server *srv, uint32_t b)
{
    if (srv->fast_size)
        fastidx_block_give(&srv->fast, b);
}

/* ---- the hello: bounds on local connections (server.h, "Local clients") ---- */

/* A hello past max_clients: answered FERRY_EBUSY with the figures; the connection closes once
 * the answer is written (pump), whatever it sends meanwhile. Logged at a limited rate: a local
 * user could fill the log. */
static int refuse_client(struct session *ss, const struct proto_request *q)
{
    static struct log_limit lim;
    struct server *srv = ss->srv;
    uint64_t greeted = srv->clients - srv->ungreeted;

    srv->counters.clients_refused++;
    ss->refused = 1;
    log_limited(&lim, LOG_WARN,
                "client %" PRIu64 " (pid %u) refused: %" PRIu64
                " clients connected, at most %" PRIu64 " (--max-clients)",
                ss->client_id, q->u.hello.pid, greeted, srv->max_clients);
    return session_reply_status(
        ss, q,
        err_set(FERRY_EBUSY,
                "ferryd serves %" PRIu64 " clients, at most %" PRIu64
                " (ferryd --max-clients): try again once some have disconnected",
                greeted, srv->max_clients));
}

/* The session said hello: it counts among the greeted clients, and its deadline is off. */
static void greet(struct session *ss, pid_t pid)
{
    ss->pid = pid;
    ss->greeted = 1;
    ss->srv->ungreeted--;
    loop_timer_stop(&ss->srv->loop, &ss->hello_deadline);
}

/* No hello within FERRYD_HELLO_DEADLINE_MS: the connection goes (counted in hello_timeouts). */
static void on_hello_deadline(struct loop *l, struct loop_timer *t)
{
    static struct log_limit lim;
    struct session *ss = t->arg;

    ss->srv->counters.hello_timeouts++;
    log_limited(&lim, LOG_WARN, "client %" PRIu64 ": closing the connection: no hello within %d ms",
                ss->client_id, FERRYD_HELLO_DEADLINE_MS);
    session_close(ss, NULL);
}

/* Room for one more connection without a hello: past FERRYD_UNGREETED_MAX of them, the oldest
 * is closed (counted in clients_evicted), so that silent connections churn instead of taking
 * descriptors. */
static void make_room(struct server *srv)
{
    static struct log_limit lim;
    struct session *ss, *oldest = NULL;

    if (srv->ungreeted < FERRYD_UNGREETED_MAX)
        return;
    for (ss = srv->sessions; ss; ss = ss->next)
        if (!ss->greeted && (!oldest || ss->client_id < oldest->client_id))
            oldest = ss;
    if (!oldest)
        return;
    srv->counters.clients_evicted++;
    log_limited(&lim, LOG_WARN,
                "client %" PRIu64 ": closing the connection to make room: it has not said "
                "hello, and %d connections without one are open",
                oldest->client_id, FERRYD_UNGREETED_MAX);
    session_close(oldest, NULL);
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
    if (q->u.hello.version < PROTO_VERSION_MIN || q->u.hello.version > PROTO_VERSION)
        return session_reply_status(
            ss, q,
            err_set(FERRY_EPROTO,
                    "this ferryd speaks client protocols %u to %u, the library %u: use "
                    "the libferry of ferryd's release",
                    PROTO_VERSION_MIN, PROTO_VERSION, q->u.hello.version));
    if (srv->clients - srv->ungreeted >= srv->max_clients)
        return refuse_client(ss, q);
    greet(ss, (pid_t)q->u.hello.pid);
    start = session_reply_begin(ss, q, 0);
    pbuf_u64(&ss->out, srv->arena.size);
    pbuf_u64(&ss->out, ss->client_id);
    if (q->u.hello.version >= PROTO_VERSION_FAST) {
        uint64_t owner;
        ss->fast_block = fast_block_take(srv, &owner);
        pbuf_u64(&ss->out, srv->fast_offset);
        pbuf_u64(&ss->out, srv->fast_size);
        pbuf_u32(&ss->out, ss->fast_block);
        pbuf_u64(&ss->out, owner);
    }
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

int session_create(struct session *ss, const ferry_id *id, uint64_t data_size,
                   uint64_t metadata_size, uint64_t page, struct object **out)
{
    struct store *st = &ss->srv->store;
    uint64_t need = data_size + metadata_size;
    int rc;

    if (ss->held.count >= st->max_held) {
        st->counters.refused_objects++;
        return err_set(FERRY_ENOSPACE,
                       "this client holds %zu objects, at most %" PRIu64
                       " (a sixteenth of --max-objects): release some first",
                       ss->held.count, st->max_held);
    }
    rc = store_create_paged(st, id, data_size, metadata_size, page, ss, out);
    /* Objects pinned for peers are never evicted, so their pins can leave the room of the
     * node's own creates in pieces too small (every other object pinned, within every limit):
     * the peers lose those transfers instead, and the create is tried again. */
    if (page && need <= UINT64_MAX - page)
        need = (need + page - 1) / page * page;
    if (rc == FERRY_ENOSPACE && ss->srv->engine && engine_break_pins(ss->srv->engine, need))
        rc = store_create_paged(st, id, data_size, metadata_size, page, ss, out);
    return rc;
}

/* The page a create written through its creator's own view takes whole (store_create_paged),
 * or 0. With huge pages, only objects of a page at least: a smaller one would hold 2 MiB while
 * open and leave the rest of it to puts and fetches only; such objects share their pages while
 * open (the threat model says so). */
static uint64_t own_page(const struct session *ss, const struct proto_request *q)
{
    uint64_t page = arena_page(&ss->srv->arena);

    if (!(q->u.create.flags & PROTO_CREATE_OWN_PAGES))
        return 0;
    if (ss->srv->arena.hugepages && q->u.create.data_size + q->u.create.metadata_size < page)
        return 0;
    return page;
}

static int handle_create(struct session *ss, const struct proto_request *q)
{
    struct store *st = &ss->srv->store;
    struct object *o;
    uint64_t page = own_page(ss, q);
    int rc = session_create(ss, &q->u.create.id, q->u.create.data_size, q->u.create.metadata_size,
                            page, &o);

    /* With pins broken for it whose transports still hold their objects (a one-sided read in
     * flight), the create waits for them (the store's room event) rather than fail. */
    if (rc == FERRY_EAGAIN ||
        (rc == FERRY_ENOSPACE && ss->srv->engine && engine_pins_draining(ss->srv->engine)))
        return SESSION_RETRY;
    if (rc < 0)
        return session_reply_status(ss, q, rc);
    /* store_create counted the creator's reference; the session records it. */
    if ((rc = session_held_add(ss, o)) < 0) {
        store_abort(st, o);
        return session_reply_status(ss, q, rc);
    }
    store_unref(st, o);
    return reply_u64(ss, q, o->offset);
}

/* FERRY_ENOENT with the id in the detail. */
int session_not_found(const ferry_id *id, const char *what)
{
    char hex[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(id, hex);
    return err_set(FERRY_ENOENT, "%s %s is not in the store", what, hex);
}

/* The session's own unsealed object with this id, or an error status (detail set). */
int session_own_unsealed(struct session *ss, const ferry_id *id, struct object **out)
{
    struct object *o = store_find(&ss->srv->store, id);

    if (!o)
        return session_not_found(id, "object");
    if (object_sealed(o))
        return err_set(FERRY_EPERM, "the object is already sealed");
    if (o->creator != ss)
        return err_set(FERRY_EPERM, "the object belongs to another client");
    *out = o;
    return 0;
}

static int handle_abort(struct session *ss, const struct proto_request *q)
{
    struct object *o;
    int rc = session_own_unsealed(ss, &q->u.one.id, &o);

    if (rc < 0)
        return session_reply_status(ss, q, rc);
    session_held_forget(ss, o);
    store_abort(&ss->srv->store, o);
    return session_reply_status(ss, q, 0);
}

static int handle_release(struct session *ss, const struct proto_request *q)
{
    char hex[2 * FERRY_ID_SIZE + 1];

    if (session_held_release(ss, &q->u.one.id) == 0)
        return 0;
    ferry_id_format(&q->u.one.id, hex);
    return err_set(FERRY_EPROTO, "release of %s, which this client does not hold", hex);
}

/* The sealed object with this id, or NULL. */
struct object *session_find_sealed(struct session *ss, const ferry_id *id)
{
    struct object *o = store_find(&ss->srv->store, id);
    return o && object_sealed(o) ? o : NULL;
}

static int handle_contains(struct session *ss, const struct proto_request *q)
{
    size_t start = session_reply_begin(ss, q, 0);
    struct object *o = session_find_sealed(ss, &q->u.one.id);

    pbuf_u8(&ss->out, !o ? 0 : object_on_disk(o) ? FERRY_ON_DISK : FERRY_IN_MEMORY);
    proto_frame_end(&ss->out, start);
    return 0;
}

static int handle_delete(struct session *ss, const struct proto_request *q)
{
    struct object *o = store_find(&ss->srv->store, &q->u.one.id);

    if (!o || (!object_sealed(o) && o->creator != ss))
        return session_reply_status(ss, q, session_not_found(&q->u.one.id, "object"));
    if (!object_sealed(o))
        return session_reply_status(ss, q, err_set(FERRY_ENOTSEALED, "unsealed: abort it instead"));
    store_delete(&ss->srv->store, o);
    return session_reply_status(ss, q, 0);
}

/* A sealed object, or this client's unsealed one (KEEP and DELETE_UNUSED: what any client may
 * do to a sealed object, only its creator to an unsealed one). */
static int sealed_or_own(struct session *ss, const ferry_id *id, struct object **out)
{
    return (*out = session_find_sealed(ss, id)) ? 0 : session_own_unsealed(ss, id, out);
}

/* DELETE_UNUSED: marks the object (store_delete_unused). */
static int handle_delete_unused(struct session *ss, const struct proto_request *q)
{
    struct object *o;
    int rc = sealed_or_own(ss, &q->u.one.id, &o);

    if (rc == 0)
        store_delete_unused(&ss->srv->store, o);
    return session_reply_status(ss, q, rc);
}

/* Blocks the session until o's digest is in, holding a reference: o is not evicted (which
 * would drop its hash) nor freed meanwhile. */
static void hash_wait(struct session *ss, struct object *o, uint64_t tag)
{
    struct server *srv = ss->srv;

    store_ref(&srv->store, o);
    session_wait_begin(ss, SESSION_HASH);
    ss->hash_obj = o;
    ss->hash_tag = tag;
    ss->hash_next = srv->hash_waiters;
    if (ss->hash_next)
        ss->hash_next->hash_pprev = &ss->hash_next;
    ss->hash_pprev = &srv->hash_waiters;
    srv->hash_waiters = ss;
}

static void hash_unwait(struct session *ss)
{
    struct object *o = ss->hash_obj;

    *ss->hash_pprev = ss->hash_next;
    if (ss->hash_next)
        ss->hash_next->hash_pprev = ss->hash_pprev;
    ss->hash_obj = NULL;
    session_wait_end(ss, SESSION_HASH);
    store_unref(&ss->srv->store, o);
}

void session_hash_ready(struct server *srv, struct object *o)
{
    struct session *ss, *next;

    if (!object_sealed(o)) { /* only a pending strict seal hashes one */
        session_seal_hashed(o);
        return;
    }
    for (ss = srv->hash_waiters; ss; ss = next) {
        next = ss->hash_next;
        if (ss->hash_obj != o)
            continue;
        reply_digest(ss, &(struct proto_request){.type = PROTO_HASH, .tag = ss->hash_tag}, o);
        hash_unwait(ss); /* o outlives it: the store holds it across its hashed() hook */
        server_schedule(srv, ss);
    }
}

static int handle_hash(struct session *ss, const struct proto_request *q)
{
    struct object *o = session_find_sealed(ss, &q->u.one.id);

    if (!o)
        return session_reply_status(ss, q, session_not_found(&q->u.one.id, "sealed object"));
    if (!store_hash(&ss->srv->store, o)) { /* the first to ask starts it (hash_on_demand) */
        hash_wait(ss, o, q->tag);
        return 0;
    }
    return reply_digest(ss, q, o);
}

static int handle_evict(struct session *ss, const struct proto_request *q)
{
    return reply_u64(ss, q, store_evict(&ss->srv->store, q->u.evict.bytes));
}

static int handle_refresh(struct session *ss, const struct proto_request *q)
{
    uint32_t missing = 0;

    for (uint32_t i = 0; i < q->u.ids.n; i++) {
        struct object *o = session_find_sealed(ss, &q->u.ids.ids[i]);
        if (o)
            store_touch(&ss->srv->store, o);
        else
            missing++;
    }
    if (missing)
        return session_reply_status(
            ss, q, err_set(FERRY_ENOENT, "%u of %u objects absent", missing, q->u.ids.n));
    return session_reply_status(ss, q, 0);
}

/* The references of o: the daemon's, and those held without it, counted in a snapshot of the
 * slots (snap[0..n)); the store's own reference of an adopted object stands for the slots
 * that hold it, not counted twice. */
static uint32_t refs_of(struct server *srv, const struct object *o, const uint64_t *snap, size_t n)
{
    uint32_t slots = 0;

    if (o->fast_published)
        slots = fastidx_snapshot_count(snap, n, o->fast_index, srv->fast.seqs[o->fast_index]);
    else if (o->fast_adopted)
        slots = fastidx_snapshot_count(snap, n, o->fast_index, o->fast_seq);
    return o->refcount - (o->fast_adopted ? 1 : 0) + slots;
}

static int handle_list(struct session *ss, const struct proto_request *q)
{
    struct store *st = &ss->srv->store;
    struct timespec ts;
    uint64_t now;
    size_t start = session_reply_begin(ss, q, 0), pos = 0;
    const struct object *o;

    clock_gettime(CLOCK_REALTIME, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    pbuf_reserve(&ss->out, 4 + st->table.count * (PROTO_LIST_ENTRY_SIZE + 1));
    size_t nsnap = st->fast_snap ? fastidx_snapshot(&ss->srv->fast, st->fast_snap) : 0;

    pbuf_u32(&ss->out, (uint32_t)st->table.count);
    while ((o = idmap_next(&st->table, &pos, NULL))) {
        pbuf_id(&ss->out, &o->id);
        pbuf_u64(&ss->out, o->data_size);
        pbuf_u64(&ss->out, o->metadata_size);
        pbuf_u8(&ss->out, object_public_state(o));
        pbuf_u32(&ss->out, refs_of(ss->srv, o, st->fast_snap, nsnap));
        pbuf_u64(&ss->out, now > o->created_ns ? (now - o->created_ns) / 1000000 : 0);
        proto_put_str(&ss->out, o->name ? o->name : "", FERRY_NAME_MAX);
    }
    proto_frame_end(&ss->out, start);
    return 0;
}

static int handle_name(struct session *ss, const struct proto_request *q)
{
    struct object *o = session_find_sealed(ss, &q->u.name.id);
    int rc = proto_check_name(q->u.name.text);

    if (rc == 0 && !o && session_own_unsealed(ss, &q->u.name.id, &o) < 0)
        rc = err_set(FERRY_ENOENT, "no sealed object, nor one of this client, with this id");
    if (rc == 0)
        rc = store_set_name(&ss->srv->store, o, q->u.name.text);
    return session_reply_status(ss, q, rc);
}

/* KEEP: kept is the store's, not the client's: it outlives the connection. */
static int handle_keep(struct session *ss, const struct proto_request *q)
{
    struct object *o;
    int rc = sealed_or_own(ss, &q->u.keep.id, &o);

    if (rc == 0)
        rc = store_keep(&ss->srv->store, o, q->u.keep.keep);
    return session_reply_status(ss, q, rc);
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
    size_t start = session_reply_begin(ss, q, 0);
    uint32_t n = 0;

    server_stats_report(ss->srv, count_stat, &n);
    pbuf_u32(&ss->out, n);
    server_stats_report(ss->srv, put_stat, &ss->out);
    proto_frame_end(&ss->out, start);
    return 0;
}

static int handle_subscribe(struct session *ss, const struct proto_request *q)
{
    int fd, rc = server_subscribe(ss->srv, ss->client_id, &fd);

    if (rc < 0)
        return session_reply_status(ss, q, rc);
    proto_frame_end(&ss->out, session_reply_begin(ss, q, 0));
    return session_send_fd(ss, q, fd);
}

static int handle_stage(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    size_t start;
    int rc;

    if (!ss->staging) {
        if ((rc = store_reserve(&srv->store, srv->staging_size, &ss->staging)) == FERRY_EAGAIN)
            return SESSION_RETRY;
        if (rc < 0)
            return session_reply_status(ss, q, rc);
        srv->staging_bytes += alloc_block_size(ss->staging);
    }
    start = session_reply_begin(ss, q, 0);
    pbuf_u64(&ss->out, alloc_block_offset(ss->staging));
    pbuf_u64(&ss->out, alloc_block_size(ss->staging));
    proto_frame_end(&ss->out, start);
    return 0;
}

/* ---- creates that wait for room ---- */

static void room_wait(struct session *ss)
{
    struct server *srv = ss->srv;

    session_wait_begin(ss, SESSION_ROOM);
    ss->room_next = srv->room_waiters;
    srv->room_waiters = ss;
}

static void room_unwait(struct session *ss)
{
    for (struct session **pp = &ss->srv->room_waiters; *pp; pp = &(*pp)->room_next) {
        if (*pp == ss) {
            *pp = ss->room_next;
            break;
        }
    }
    session_wait_end(ss, SESSION_ROOM);
}

void session_room_ready(struct server *srv)
{
    struct session *ss, *list = srv->room_waiters;

    srv->room_waiters = NULL;
    while ((ss = list)) {
        list = ss->room_next;
        session_wait_end(ss, SESSION_ROOM);
        server_schedule(srv, ss);
    }
}

/* ---- dispatch and I/O ---- */

static handler_fn *const handlers[PROTO_TYPE_MAX + 1] = {
    [PROTO_HELLO] = handle_hello,
    [PROTO_CREATE] = handle_create,
    [PROTO_SEAL] = session_handle_seal,
    [PROTO_ABORT] = handle_abort,
    [PROTO_GET] = session_handle_get,
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
    [PROTO_PUT_BATCH] = session_handle_put_batch,
    [PROTO_FETCH] = session_handle_fetch,
    [PROTO_FETCH_AT] = session_handle_fetch,
    [PROTO_LOCATION] = session_handle_location,
    [PROTO_NODES] = session_handle_dir,
    [PROTO_WHERE] = session_handle_dir,
    [PROTO_PEERS] = session_handle_peers,
    [PROTO_EAGER_MAX] = session_handle_eager_max,
    [PROTO_DELETE_CLUSTER] = session_handle_delete_cluster,
    [PROTO_NAME] = handle_name,
    [PROTO_KEEP] = handle_keep,
    [PROTO_DELETE_UNUSED] = handle_delete_unused,
    [PROTO_RING] = session_handle_ring,
    [PROTO_FLUSH] = session_handle_flush,
    [PROTO_KICK] = session_handle_kick,
};

/* --verbose: a line per request (rate-limited per type, so that a flood of one kind hides no
 * other), with what names it: the id or the first of several, sizes, the timeout. */
static void log_request(const struct session *ss, const struct proto_request *q)
{
    static struct log_limit lim[PROTO_TYPE_MAX + 1];
    char id[2 * FERRY_ID_SIZE + 1] = "", more[64] = "";

    switch (q->type) {
    case PROTO_CREATE:
        ferry_id_format(&q->u.create.id, id);
        snprintf(more, sizeof(more), " (%" PRIu64 " + %" PRIu64 " bytes)", q->u.create.data_size,
                 q->u.create.metadata_size);
        break;
    case PROTO_SEAL:
        ferry_id_format(&q->u.seal.id, id);
        break;
    case PROTO_KEEP:
        ferry_id_format(&q->u.keep.id, id);
        snprintf(more, sizeof(more), " (keep %u)", q->u.keep.keep);
        break;
    case PROTO_ABORT:
    case PROTO_RELEASE:
    case PROTO_CONTAINS:
    case PROTO_DELETE:
    case PROTO_DELETE_UNUSED:
    case PROTO_HASH:
    case PROTO_WHERE:
    case PROTO_DELETE_CLUSTER:
        ferry_id_format(&q->u.one.id, id);
        break;
    case PROTO_GET:
    case PROTO_FETCH:
    case PROTO_FETCH_AT:
    case PROTO_REFRESH: /* REFRESH has no timeout */
        if (q->u.ids.n)
            ferry_id_format(&q->u.ids.ids[0], id);
        snprintf(more, sizeof(more), " (%u ids, timeout %" PRId64 " ms)", q->u.ids.n,
                 q->u.ids.timeout_ms);
        if (q->type == PROTO_REFRESH)
            snprintf(more, sizeof(more), " (%u ids)", q->u.ids.n);
        break;
    case PROTO_EVICT:
        snprintf(more, sizeof(more), " %" PRIu64 " bytes", q->u.evict.bytes);
        break;
    default:
        break;
    }
    log_limited(&lim[q->type], LOG_DEBUG, "client %" PRIu64 ": %s %s%s", ss->client_id,
                proto_type_name(q->type), id, more);
}

/* The ids a request that reads names, for the rings' sake (session_rings_before_lookup). Creates
 * and puts do not look: a put without a message takes effect when the daemon takes it (ferry.h). */
static void rings_before(struct session *ss, const struct proto_request *q)
{
    switch (q->type) {
    case PROTO_GET:
    case PROTO_FETCH:
    case PROTO_FETCH_AT:
    case PROTO_REFRESH:
        session_rings_before_lookup(ss, q->u.ids.ids, q->u.ids.n, session_close);
        break;
    case PROTO_LIST:
        session_rings_before_lookup(ss, NULL, 0, session_close);
        break;
    case PROTO_NAME:
        session_rings_before_lookup(ss, &q->u.name.id, 1, session_close);
        break;
    case PROTO_CONTAINS:
    case PROTO_DELETE:
    case PROTO_DELETE_UNUSED:
    case PROTO_DELETE_CLUSTER:
    case PROTO_HASH:
    case PROTO_WHERE:
        session_rings_before_lookup(ss, &q->u.one.id, 1, session_close);
        break;
    case PROTO_KEEP:
        session_rings_before_lookup(ss, &q->u.keep.id, 1, session_close);
        break;
    default:
        break;
    }
}

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
    if (log_enabled(LOG_DEBUG))
        log_request(ss, &q);
    /* Its puts without a message come before it: the client's calls keep their order. */
    if ((rc = session_ring_take(ss)) != 0)
        return rc;
    rings_before(ss, &q);
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
    if (ss->closed || ss->refused || ss->wait != SESSION_IDLE || ss->out.len > OUT_HIGH)
        return 0;
    return (type != PROTO_HELLO && type != PROTO_SUBSCRIBE && type != PROTO_RING) ||
           ss->out.len == 0;
}

/* Whether the first buffered request is whole and may be processed now. */
static int frame_ready(struct session *ss)
{
    struct proto_header h;

    return ss->in.len >= PROTO_HEADER_SIZE &&
           proto_decode_header(ss->in.data, PROTO_MAX_REQUEST, &h) == 0 &&
           ss->in.len >= PROTO_HEADER_SIZE + h.length && can_process(ss, h.type);
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
        if (rc == SESSION_RETRY) { /* the request stays, to be dispatched again with room */
            room_wait(ss);
            break;
        }
        if (rc == SESSION_YIELD) /* the request stays, for the next turn (pump schedules it) */
            break;
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
    /* A refused hello's answer is small and the first on the socket: it is written at once. */
    if (flush_out(ss) < 0 || ss->refused) {
        session_close(ss, NULL);
        return;
    }
    /* Draining the output may have unblocked a buffered request. One that waits (for room, a
     * get, a seal) is left until its wake: scheduled every turn, it kept the loop from sleeping
     * (12,105 epoll_waits for six parked 6 MiB creates, against 30 with room). */
    if (frame_ready(ss))
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
    struct session *ss;
    int rc;

    make_room(srv);
    if (!(ss = calloc(1, sizeof(*ss))))
        return err_set(FERRY_ENOMEM, "session");
    ss->srv = srv;
    ss->fd = fd;
    ss->client_id = ++srv->next_client_id;
    ss->fast_block = FASTIDX_NO_BLOCK;
    session_get_init(ss);
    session_fetch_init(ss);
    loop_timer_init(&ss->hello_deadline, on_hello_deadline, ss);
    if ((rc = loop_timer_start(&srv->loop, &ss->hello_deadline,
                               loop_now_ms() + FERRYD_HELLO_DEADLINE_MS)) < 0)
        goto free_session;
    if ((rc = loop_watch_add(&srv->loop, &ss->watch, fd, LOOP_READ, on_event, ss)) < 0)
        goto stop_deadline;
    ss->next = srv->sessions;
    if (ss->next)
        ss->next->pprev = &ss->next;
    ss->pprev = &srv->sessions;
    srv->sessions = ss;
    srv->clients++;
    srv->ungreeted++;
    srv->counters.connections_total++;
    return 0;

stop_deadline:
    loop_timer_stop(&srv->loop, &ss->hello_deadline);
free_session:
    free(ss);
    return rc;
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
            if (!object_sealed(h->o) && h->o->creator == ss) {
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

/* The session closes: the wait under way ends without a reply. */
static void wait_cancel(struct session *ss)
{
    switch ((enum session_wait)ss->wait) {
    case SESSION_IDLE:
        break;
    case SESSION_GET:
        session_get_cancel(ss);
        break;
    case SESSION_FETCH:
        session_fetch_cancel(ss);
        break;
    case SESSION_DIR:
        directory_cancel(ss->srv->dir, ss);
        session_wait_end(ss, SESSION_DIR);
        break;
    case SESSION_SEAL:
        session_seal_abandon(ss);
        break;
    case SESSION_HASH:
        hash_unwait(ss);
        break;
    case SESSION_ROOM:
        room_unwait(ss);
        break;
    }
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
    session_ring_close(ss);
    ss->closed = 1;
    if (!ss->greeted)
        srv->ungreeted--;
    loop_timer_stop(&srv->loop, &ss->hello_deadline);
    wait_cancel(ss);
    drop_holdings(ss);
    fast_block_give(srv, ss->fast_block);
    ss->fast_block = FASTIDX_NO_BLOCK;
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
