/*
 * session_cluster.c - a session's cluster requests: fetch, nodes and where, cluster-wide
 * deletes, the transfer peers and the eager limit. Each one the directory or the engine
 * answers later blocks the session until then (struct pending_fetch, pending_dir).
 */
#include "server/session_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "transfer/engine.h"

/* A directory request's failure, with why the directory is down when it is ("Redis at
 * 127.0.0.1:6379/0: AUTH refused: WRONGPASS ..."): it read "directory unavailable" alone. */
static int dir_failure(const struct server *srv, int status)
{
    const char *why = srv->dir ? directory_down_why(srv->dir) : "";

    if (status == FERRY_EDIRECTORY && why[0])
        return err_set(status, "Redis at %s: %s", directory_where(srv->dir), why);
    return err_set(status, "%s", ferry_strerror(status));
}

/* ---- fetch ---- */

#define FETCH_PENDING 1

/* Frees what a fetch allocated; it is over. */
static void fetch_free(struct session *ss)
{
    struct pending_fetch *f = &ss->fetch;

    free(f->statuses);
    free(f->why);
    free(f->ids);
    f->statuses = NULL;
    f->why = NULL;
    f->ids = NULL;
    session_wait_end(ss, SESSION_FETCH);
}

static void fetch_finish(struct session *ss)
{
    struct pending_fetch *f = &ss->fetch;
    struct proto_request q = {.type = f->type, .tag = f->tag};

    session_reply_statuses(ss, &q, f->statuses, f->n, f->why);
    hist_add(&ss->srv->counters.fetch_latency, clock_mono_ns() - f->start_ns);
    loop_timer_stop(&ss->srv->loop, &f->timer);
    fetch_free(ss);
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

    if (ss->wait != SESSION_FETCH || f->statuses[index] != FETCH_PENDING)
        return;
    f->statuses[index] = status;
    fetch_note(f, status, ferry_errmsg());
    if (--f->missing == 0) {
        fetch_finish(ss);
        server_schedule(ss->srv, ss);
    }
}

/* The time is up: what is not local by now times out, with what the engine knows of why
 * (engine_cancel ends the transfers nobody else waits for). */
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

/* FETCH_AT's table of locations, each parsed (and its signature checked) once, into a new
 * array of q->u.ids.nlocs nodes: a location malformed or not signed with our secret is
 * counted and left empty (id[0] == 0: its ids are looked up as without one). NULL for none,
 * or when out of memory (then every id is looked up). */
static struct directory_node *fetch_locations(struct session *ss, const struct proto_request *q)
{
    struct preader r = {q->u.ids.locs, q->u.ids.locs_len, 0};
    struct directory_node *nodes;
    char text[FERRY_LOCATION_MAX];

    if (q->type != PROTO_FETCH_AT || !q->u.ids.nlocs || !ss->srv->dir ||
        !(nodes = calloc(q->u.ids.nlocs, sizeof(*nodes))))
        return NULL;
    for (uint16_t k = 0; k < q->u.ids.nlocs; k++) {
        proto_get_loc(&r, text); /* proto_decode_request checked them all */
        if (directory_location_parse(ss->srv->dir, text, &nodes[k]) < 0) {
            ss->srv->counters.fetch_hints_refused++;
            nodes[k].id[0] = '\0';
        }
    }
    return nodes;
}

/* The node FETCH_AT names for id i, or NULL. */
static const struct directory_node *fetch_location(const struct proto_request *q,
                                                   const struct directory_node *nodes, uint32_t i)
{
    uint16_t k = nodes ? proto_loc_index(q, i) : 0;

    return k && nodes[k - 1].id[0] ? &nodes[k - 1] : NULL;
}

static int32_t fetch_start_one(struct session *ss, const ferry_id *id, uint32_t i,
                               const struct directory_node *at)
{
    struct engine *e = ss->srv->engine;
    int rc;

    if (session_find_sealed(ss, id))
        return 0;
    if (!e)
        return err_set(FERRY_ESTANDALONE, "no other node to fetch from");
    rc = engine_fetch(e, id, at, fetch_done, ss, i);
    return rc < 0 ? rc : FETCH_PENDING;
}

int session_handle_fetch(struct session *ss, const struct proto_request *q)
{
    struct pending_fetch *f = &ss->fetch;
    uint32_t n = q->u.ids.n;
    struct directory_node *nodes = NULL;

    ss->srv->counters.fetches++;
    session_wait_begin(ss, SESSION_FETCH);
    f->statuses = calloc(n ? n : 1, sizeof(*f->statuses));
    f->why = calloc(1, PROTO_MAX_DETAIL + 1);
    f->ids = n ? malloc((size_t)n * sizeof(*f->ids)) : NULL;
    if (!f->statuses || !f->why || (n && !f->ids)) {
        fetch_free(ss);
        return session_reply_status(ss, q, err_set(FERRY_ENOMEM, "fetch of %u ids", n));
    }
    if (n) /* f->ids is NULL when n is 0: memcpy's pointers must be valid even then */
        memcpy(f->ids, q->u.ids.ids, (size_t)n * sizeof(*f->ids));
    f->tag = q->tag;
    f->type = q->type;
    f->n = n;
    f->missing = 0;
    f->timeout_ms = q->u.ids.timeout_ms;
    f->start_ns = clock_mono_ns();
    nodes = fetch_locations(ss, q);
    for (uint32_t i = 0; i < n; i++) {
        f->statuses[i] = fetch_start_one(ss, &q->u.ids.ids[i], i, fetch_location(q, nodes, i));
        fetch_note(f, f->statuses[i], ferry_errmsg());
        f->missing += f->statuses[i] == FETCH_PENDING;
    }
    free(nodes); /* each want that asks a location first holds its own share of it */
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

/* LOCATION: this node's, for the references to what is put here. */
int session_handle_location(struct session *ss, const struct proto_request *q)
{
    char text[FERRY_LOCATION_MAX];
    size_t start;
    int rc;

    if (!ss->srv->dir)
        return session_reply_status(
            ss, q, err_set(FERRY_EDIRECTORY, "this node has no directory (--directory)"));
    if ((rc = directory_location(ss->srv->dir, text, sizeof(text))) < 0)
        return session_reply_status(ss, q, rc);
    start = session_reply_begin(ss, q, 0);
    proto_put_loc(&ss->out, text);
    proto_frame_end(&ss->out, start);
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
    static const uint8_t no_root[DIGEST_LEN]; /* nothing recorded: the event drops no copy */
    struct session *ss = arg;
    struct server *srv = ss->srv;
    struct proto_request q = {.type = ss->dir.type, .tag = ss->dir.tag};
    const char *self = srv->cfg.node_id;
    int here = q.type == PROTO_WHERE && session_find_sealed(ss, &ss->dir.id) != NULL;
    size_t start;
    int rc;

    if (ss->dir.looking && a->status == 0) { /* the delete, of the put recorded */
        ss->dir.looking = 0;
        rc = directory_delete(srv->dir, &ss->dir.id,
                              ss->dir.known    ? ss->dir.root
                              : a->has_content ? a->digest
                                               : no_root,
                              a->gen, dir_done, ss);
        if (rc == 0)
            return;
        session_wait_end(ss, SESSION_DIR);
        server_schedule(srv, ss);
        session_reply_status(ss, &q, rc);
        return;
    }
    session_wait_end(ss, SESSION_DIR);
    server_schedule(srv, ss);
    if (a->status < 0 || q.type == PROTO_DELETE_CLUSTER) {
        session_reply_status(ss, &q, a->status < 0 ? dir_failure(srv, a->status) : 0);
        return;
    }
    start = session_reply_begin(ss, &q, 0);
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

/* Deletes id here and cluster-wide; answers once the directory has recorded it. The event names
 * the put deleted, the one the directory records for id, looked up first, and the content (other
 * nodes drop only a copy of both): the copy here, if hashed, else the content recorded. The
 * lookup is sent before the copy here goes: it writes what the directory queued (this put's
 * publication, maybe) ahead of it, and the copy's withdrawal, which may take the record with
 * it, comes after. */
int session_handle_delete_cluster(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    const struct object *o = store_find(&srv->store, &q->u.one.id);
    int known = o && object_sealed(o) && o->hashed, rc;

    if (!srv->dir)
        return session_reply_status(ss, q, err_set(FERRY_ESTANDALONE, "no cluster to delete from"));
    session_wait_begin(ss, SESSION_DIR);
    ss->dir = (struct pending_dir){
        .type = q->type, .tag = q->tag, .id = q->u.one.id, .looking = 1, .known = known};
    if (known)
        memcpy(ss->dir.root, o->root, DIGEST_LEN);
    rc = directory_lookup(srv->dir, &q->u.one.id, 1, dir_done, ss);
    server_drop_deleted(srv, &q->u.one.id, NULL, srv->cfg.node_id);
    if (rc < 0) {
        session_wait_end(ss, SESSION_DIR);
        return session_reply_status(ss, q, rc);
    }
    log_info("client %" PRIu64 " deleted an object cluster-wide", ss->client_id);
    return 0;
}

int session_handle_dir(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    int rc;

    if (!srv->dir)
        return session_reply_status(ss, q, err_set(FERRY_ESTANDALONE, "no directory to ask"));
    session_wait_begin(ss, SESSION_DIR);
    ss->dir = (struct pending_dir){.type = q->type, .tag = q->tag};
    if (q->type == PROTO_WHERE) {
        ss->dir.id = q->u.one.id;
        rc = directory_lookup(srv->dir, &q->u.one.id, 1, dir_done, ss);
    } else {
        rc = directory_nodes(srv->dir, dir_done, ss);
    }
    if (rc < 0) {
        session_wait_end(ss, SESSION_DIR);
        return session_reply_status(ss, q, rc);
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
int session_handle_peers(struct session *ss, const struct proto_request *q)
{
    struct engine *e = ss->srv->engine;
    const char *provider = e ? engine_provider(e) : NULL;
    struct engine_peer_info *v = NULL;
    size_t n = 0, start;

    if (e && q->u.peers.max) {
        if (!(v = calloc(q->u.peers.max, sizeof(*v))))
            return session_reply_status(ss, q,
                                        err_set(FERRY_ENOMEM, "peers: %u records", q->u.peers.max));
        n = engine_peers(e, v, q->u.peers.max);
    }
    start = session_reply_begin(ss, q, 0);
    proto_put_str(&ss->out, provider ? provider : "", sizeof(((ferry_peer *)0)->provider) - 1);
    pbuf_u32(&ss->out, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        put_engine_peer(ss, &v[i]);
    proto_frame_end(&ss->out, start);
    free(v);
    return 0;
}

int session_handle_eager_max(struct session *ss, const struct proto_request *q)
{
    struct engine *e = ss->srv->engine;

    if (!e)
        return session_reply_status(ss, q, err_set(FERRY_ESTANDALONE, "no transfers to tune"));
    engine_set_eager_max(e, q->u.eager.bytes);
    log_info("eager limit set to %" PRIu64 " bytes by client %" PRIu64, engine_eager_max(e),
             ss->client_id);
    return session_reply_status(ss, q, 0);
}

void session_fetch_init(struct session *ss)
{
    loop_timer_init(&ss->fetch.timer, fetch_timeout, ss);
}

void session_fetch_cancel(struct session *ss)
{
    struct server *srv = ss->srv;

    if (srv->engine)
        engine_cancel(srv->engine, ss);
    loop_timer_stop(&srv->loop, &ss->fetch.timer);
    fetch_free(ss);
}
