/*
 * session_get.c - a session's gets: what is there is taken at once (a spilled object is
 * restored first), the rest is waited for in server.waiters until it is sealed or restored,
 * or the timeout passes (struct pending_get, get_wait in session.h).
 */
#include "server/session_int.h"

#include <stdlib.h>

#include "common/clock.h"
#include "common/err.h"

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
    session_wait_end(ss, SESSION_GET);
}

/* Sends the get's reply (found entries hold references) and ends it. */
static void get_finish(struct session *ss)
{
    struct pending_get *g = &ss->get;
    struct proto_request q = {.type = PROTO_GET, .tag = g->tag};
    size_t start = session_reply_begin(ss, &q, 0);

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
    hist_add(&ss->srv->counters.get_latency, clock_mono_ns() - g->start_ns);
    get_reset(ss);
}

/* Fills entry i from o and takes the reference it stands for. */
static int get_fill(struct session *ss, uint32_t i, struct object *o)
{
    struct proto_get_entry *e = &ss->get.entries[i];
    int rc = session_held_add(ss, o);

    if (rc < 0)
        return rc;
    store_fast_publish(&ss->srv->store, o); /* again, if a slot's hold unpublished it */
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

/* Ends the get once nothing it waits for can still come: everything is there, or only absent
 * ids are missing after the timeout (or with none), restores being over. */
static void get_maybe_finish(struct session *ss)
{
    struct pending_get *g = &ss->get;

    if (g->missing == 0 || (g->restoring == 0 && (g->expired || g->no_wait))) {
        get_finish(ss);
        server_schedule(ss->srv, ss);
    }
}

static void get_timeout(struct loop *l, struct loop_timer *t)
{
    struct session *ss = t->arg;

    ss->get.expired = 1; /* a restore under way still ends in its entry */
    get_maybe_finish(ss);
}

/* Ends the wait w (for a restore, if it was one); the get goes on without it. */
static struct session *get_unwait_one(struct server *srv, struct get_wait *w)
{
    struct session *ss = w->ss;

    if (w->restoring)
        ss->get.restoring--;
    w->restoring = 0;
    get_unwait(srv, w);
    return ss;
}

void session_wake_waiters(struct server *srv, struct object *o)
{
    struct get_wait *w = idmap_get(&srv->waiters, &o->id), *next;

    for (; w; w = next) {
        uint32_t index = w->index;
        struct session *ss = get_unwait_one(srv, w);
        next = w->next;
        if (get_fill(ss, index, o) < 0) {
            /* Closing frees ss's other waits, next among them when ss waits for this id
             * twice: start again from what is left. */
            session_close(ss, ferry_errmsg());
            next = idmap_get(&srv->waiters, &o->id);
            continue;
        }
        get_maybe_finish(ss);
    }
}

void session_restored(struct server *srv, struct object *o, int status)
{
    struct get_wait *w, *next;

    if (status == 0) {
        session_wake_waiters(srv, o);
        return;
    }
    for (w = idmap_get(&srv->waiters, &o->id); w; w = next) {
        struct session *ss;
        next = w->next;
        if (!w->restoring)
            continue; /* it waits for a seal of the id */
        ss = get_unwait_one(srv, w);
        ss->get.entries[w->index].status = status;
        ss->get.missing--;
        get_maybe_finish(ss);
    }
}

/* Entry i is a spilled object: its restore starts (or is under way) and the entry waits. */
static int get_restore(struct session *ss, uint32_t i, struct object *o)
{
    int rc = store_restore(&ss->srv->store, o, 0);

    if (rc == 0)
        return get_fill(ss, i, o);
    if (rc != FERRY_EAGAIN) { /* this entry fails; the others go on */
        ss->get.entries[i].status = rc;
        ss->get.missing--;
        return 0;
    }
    if ((rc = get_wait_for(ss, i, &o->id)) < 0)
        return rc;
    ss->get.waits[i].restoring = 1;
    ss->get.restoring++;
    return 0;
}

/* Takes what is there; waits for the rest unless the timeout is 0. */
static int get_start(struct session *ss, const struct proto_request *q)
{
    struct pending_get *g = &ss->get;
    uint32_t n = q->u.ids.n;
    int rc = 0;

    session_wait_begin(ss, SESSION_GET);
    g->tag = q->tag;
    g->start_ns = clock_mono_ns();
    g->n = g->missing = n;
    g->restoring = 0;
    g->expired = 0;
    g->no_wait = q->u.ids.timeout_ms == 0;
    g->entries = calloc(n ? n : 1, sizeof(*g->entries));
    g->waits = calloc(n ? n : 1, sizeof(*g->waits));
    if (!g->entries || !g->waits)
        return err_set(FERRY_ENOMEM, "get of %u ids", n);
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        struct object *o = session_find_sealed(ss, &q->u.ids.ids[i]);
        g->entries[i].status = FERRY_ENOENT;
        if (o && object_on_disk(o))
            rc = get_restore(ss, i, o);
        else if (o)
            rc = get_fill(ss, i, o);
        else if (q->u.ids.timeout_ms != 0)
            rc = get_wait_for(ss, i, &q->u.ids.ids[i]);
    }
    if (rc == 0 && g->missing && q->u.ids.timeout_ms > 0)
        rc = loop_timer_start(&ss->srv->loop, &g->timer,
                              loop_now_ms() + (uint64_t)q->u.ids.timeout_ms);
    return rc;
}

int session_handle_get(struct session *ss, const struct proto_request *q)
{
    int rc;

    ss->srv->counters.gets++;
    if ((rc = get_start(ss, q)) < 0) {
        /* A failed get holds nothing: give back what it took. */
        for (uint32_t i = 0; ss->get.entries && i < q->u.ids.n; i++) {
            if (ss->get.entries[i].status == 0)
                session_held_release(ss, &q->u.ids.ids[i]);
        }
        get_reset(ss);
        return session_reply_status(ss, q, rc);
    }
    if (ss->get.missing == 0 || (q->u.ids.timeout_ms == 0 && ss->get.restoring == 0))
        get_finish(ss);
    return 0;
}

void session_get_init(struct session *ss)
{
    loop_timer_init(&ss->get.timer, get_timeout, ss);
}

void session_get_cancel(struct session *ss)
{
    get_reset(ss);
}
