/*
 * fabric_conn.c - the fabric transport's connections: the table of connection ids, a record's
 * life and death (shut, given up on, reaped once nothing it issued is in flight, drains), and
 * the engine's connect, pause, close and drain.
 */
#include "transport/fabric/fabric_int.h"

/* A random generation for a connection slot: a connection id names slot and generation, and
 * a message naming a stale or guessed id is dropped. */
uint16_t fab_random_gen(void)
{
    uint16_t g = 0;

    if (getrandom(&g, sizeof(g), 0) != sizeof(g))
        g = (uint16_t)clock_mono_ns();
    return g;
}

struct fconn *fab_conn_lookup(struct xlistener *f, uint32_t id)
{
    uint32_t slot = id & 0xffff;

    if (slot >= FAB_SLOTS || !f->slots[slot] || f->slots[slot]->id != id)
        return NULL;
    return f->slots[slot];
}

void fab_conn_reap(struct loop *l, struct loop_timer *t)
{
    struct fconn *c = t->arg;

    loop_timer_stop(l, &c->deadline);
    while (c->leases) { /* the endpoint is closing: nobody reads any more */
        /* fab_lease_end (fabric_send.c, unseen by the analyzer) unlinks ls from c->leases. */
        struct lease *ls = c->leases;
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
        fab_lease_end(ls);
        free(ls);
    }
    *c->aprev = c->anext;
    if (c->anext)
        c->anext->aprev = c->aprev;
    while (c->drains) {
        struct drain *d = c->drains;
        c->drains = d->next;
        d->fn(d->arg);
        free(d);
    }
    if (c->rkey_mapped)
        fi_mr_unmap_key(c->f->domain, c->rkey);
    quirks_peer_unmap(c);
    framer_free(&c->fr);
    free(c->early);
    free(c);
}

/* Frees the record once nothing it issued is in flight. */
void fab_conn_maybe_reap(struct fconn *c)
{
    if (c->closed && c->inflight == 0 && c->nleases == 0 && c->reaper.heap_index == SIZE_MAX)
        loop_timer_start(c->f->loop, &c->reaper, 0);
}

/* A range whose last reference went (see struct fseg). */
void fab_range_release(struct fseg *r)
{
    if (!r->queued && !r->pending)
        free(r);
}

static void free_segs(struct fseg **head)
{
    while (*head) {
        struct fseg *s = *head;
        *head = s->next;
        free(s->owned);
        if (s->kind == SEG_RANGE) {
            s->queued = 0;
            fab_range_release(s);
        } else {
            free(s);
        }
    }
}

/* Drops what a closed connection had queued. Leases stay: the pins they hold go only when
 * they end, as a reader may still be reading. */
static void free_queues(struct fconn *c)
{
    struct xlistener *f = c->f;

    free_segs(&c->sq);
    c->sq_tail = &c->sq;
    free_segs(&c->dq);
    c->dq_tail = &c->dq;
    while (c->rq) {
        struct frecv *r = c->rq;
        c->rq = r->next;
        free(r);
    }
    while (c->held) {
        struct rbuf *b = c->held;
        c->held = b->next;
        fab_rbuf_post(f, b);
    }
    for (uint32_t i = 0; c->early && i < c->nearly; i++) {
        if (c->early[i])
            fab_rbuf_post(f, c->early[i]);
        c->early[i] = NULL;
    }
    /* Reads not yet issued are dropped; issued ones keep the record alive. */
    for (struct rread **pp = &f->readq; *pp;) {
        if ((*pp)->c == c) {
            (*pp)->queued = 0;
            *pp = (*pp)->qnext;
        } else {
            pp = &(*pp)->qnext;
        }
    }
    f->readq_tail = &f->readq;
    for (struct rread *r = f->readq; r; r = r->qnext)
        f->readq_tail = &r->qnext;
}

/* Forgets the operations of a closed connection that never completed: their completions,
 * if they ever come, find no connection. */
void fab_on_zombie(struct loop *l, struct loop_timer *t)
{
    struct fconn *c = t->arg;
    struct xlistener *f = c->f;

    log_warn("fabric: %u operations to %s never completed; giving up on them", c->inflight,
             c->base.peer);
    /* Uncounted now, so that they hold no slot; a late completion finds them abandoned. Their
     * send buffers stay out of the pool until then (the provider may still own them). */
    for (struct rdop *op = f->reading; op; op = op->next) {
        if (op->c == c) {
            op->c = NULL;
            op->abandoned = 1;
            f->read_inflight--;
        }
    }
    for (uint32_t i = 0; i < f->tx_max; i++) {
        if (f->txops[i].c == c) {
            f->txops[i].c = NULL;
            f->txops[i].abandoned = 1;
            f->tx_inflight--;
        }
    }
    c->inflight = 0;
    c->reading = 0;
    fab_conn_maybe_reap(c);
}

void fab_conn_shut(struct fconn *c)
{
    struct xlistener *f = c->f;
    uint32_t slot = c->id & 0xffff;

    if (c->closed)
        return;
    if (c->state == ST_OPEN)
        fab_post_close(c);
    fab_stall_set(c, 0);
    c->closed = 1;
    for (struct fconn **pp = &f->dirty; *pp; pp = &(*pp)->dnext) {
        if (*pp == c) {
            *pp = c->dnext;
            break;
        }
    }
    c->dirty = 0;
    f->slots[slot] = NULL;
    f->gen[slot] = fab_random_gen(); /* the next id of this slot is not guessable from this one */
    for (int i = 0; i < CL_N; i++)
        f->free_bufs[i] += c->window + FAB_EXTRA;
    loop_timer_stop(f->loop, &c->deadline);
    if (c->inflight) { /* a peer whose process is gone can no longer write into our memory */
        loop_timer_init(&c->deadline, fab_on_zombie, c);
        loop_timer_start(f->loop, &c->deadline,
                         loop_now_ms() + (c->peer_exited ? 0 : FAB_ZOMBIE_MS));
    }
    free_queues(c);
    fab_probe_end(c);
    while (c->reads) {
        struct rread *r = c->reads;
        c->reads = r->next;
        r->c = NULL; /* its reads in flight only count down now */
        if (r->issued == r->done)
            fab_read_free(r);
    }
    fab_conn_maybe_reap(c);
}

void fab_conn_fail_err(struct fconn *c, int err, const char *reason)
{
    if (c->closed)
        return;
    fab_conn_shut(c);
    c->base.ev->closed(&c->base, err, reason);
}

void fab_conn_fail(struct fconn *c, const char *reason)
{
    fab_conn_fail_err(c, FERRY_ECONN, reason);
}

/* c has something to send: at the end of this loop turn (conn_wait: after completions). */
void fab_conn_mark(struct fconn *c)
{
    struct xlistener *f = c->f;

    if (c->closed)
        return;
    fab_conn_wait(c);
    if (f->kick.heap_index == SIZE_MAX)
        loop_timer_start(f->loop, &f->kick, 0);
}

/* Runs the sends that wait: from a 0 ms timer (never inside the engine's own call, so that
 * ev->sent cannot re-enter it) and after completions free send slots. */
void fab_push_dirty(struct xlistener *f)
{
    struct fconn *list = f->dirty;

    f->dirty = NULL;
    while (list) {
        struct fconn *c = list;
        list = c->dnext;
        c->dirty = 0;
        if (!c->paused && c->held)
            fab_drain_held(c);
        fab_conn_push(c);
    }
}

void fab_on_kick(struct loop *l, struct loop_timer *t)
{
    fab_push_dirty(t->arg);
}

/* A record for the peer at addr, whose endpoint name is name. */
struct fconn *fab_conn_new(struct xlistener *f, fi_addr_t addr, const uint8_t *name, size_t len)
{
    struct fconn *c;
    uint32_t slot;

    for (int i = 0; i < CL_N; i++) {
        if (f->free_bufs[i] < f->window + FAB_EXTRA) {
            err_set(FERRY_ENOMEM, "fabric: receive buffers for %u connections are all taken",
                    f->nlarge / (f->window + FAB_EXTRA));
            return NULL;
        }
    }
    for (slot = 1; slot < FAB_SLOTS && f->slots[slot]; slot++)
        ;
    if (slot == FAB_SLOTS || !(c = calloc(1, sizeof(*c)))) {
        err_set(FERRY_ENOMEM, "fabric connection");
        return NULL;
    }
    c->base.type = &transport_fabric;
    c->base.local = f;
    c->base.ev = f->ev;
    c->base.max_frame = f->max_frame;
    c->base.eager_max = UINT64_MAX;
    fab_printable(f, name, len, c->base.peer, sizeof(c->base.peer));
    c->f = f;
    c->peer_pid = fab_name_pid(f, name, len);
    quirks_peer_map(c, name, len);
    c->probe_fd = -1;
    c->heard_ns = clock_mono_ns();
    fab_peer_timer_arm(f);
    c->id = slot | (uint32_t)f->gen[slot] << 16;
    c->dq_tail = &c->dq;
    c->addr = addr;
    c->window = f->window;
    c->sq_tail = &c->sq;
    c->rq_tail = &c->rq;
    c->held_tail = &c->held;
    c->reads_tail = &c->reads;
    loop_timer_init(&c->reaper, fab_conn_reap, c);
    loop_timer_init(&c->deadline, fab_on_deadline, c);
    for (int i = 0; i < CL_N; i++)
        f->free_bufs[i] -= c->window + FAB_EXTRA;
    c->anext = f->all;
    if (c->anext)
        c->anext->aprev = &c->anext;
    c->aprev = &f->all;
    f->all = c;
    f->slots[slot] = c;
    fab_peers_watch(f); /* its process, before any call to it */
    return c;
}

int fab_connect(struct xlistener *f, const char *addr, const struct xconn_events *ev,
                struct xconn **out)
{
    const char *at = strchr(addr, '@');
    uint8_t name[FAB_NAME_MAX];
    size_t len;
    fi_addr_t fa;
    struct fconn *c;
    int rc;

    /* PROVIDER@HEX, as fab_address publishes it: the name is the hex digits. */
    if (!at)
        return err_set(FERRY_EINVAL, "fabric address '%.32s': expected PROVIDER@HEX", addr);
    addr = at + 1;
    len = strlen(addr) / 2;
    if (len == 0 || len > FAB_NAME_MAX || strlen(addr) % 2)
        return err_set(FERRY_EINVAL, "fabric address '%.32s...': expected hex", addr);
    for (size_t i = 0; i < len; i++) {
        if (sscanf(addr + 2 * i, "%2hhx", &name[i]) != 1)
            return err_set(FERRY_EINVAL, "fabric address: expected hex");
    }
    if ((rc = fab_av_get(f, name, len, &fa)) < 0)
        return rc;
    if (!(c = fab_conn_new(f, fa, name, len)))
        return FERRY_ENOMEM;
    fab_probe_init(c, name, len); /* only peers we dial: their address is the directory's */
    c->base.ev = ev;
    c->state = ST_CONNECTING;
    c->connect_ns = clock_mono_ns();
    c->hello_due = 1;
    fab_conn_mark(c);
    *out = &c->base;
    return 0;
}

void fab_pause(struct xconn *xc, int paused)
{
    struct fconn *c = (struct fconn *)xc;

    c->paused = paused;
    if (!paused && c->held)
        fab_conn_mark(c);
}

void fab_close(struct xconn *xc)
{
    fab_conn_shut((struct fconn *)xc);
}

int fab_drain(struct xconn *xc, void (*fn)(void *arg), void *arg)
{
    struct fconn *c = (struct fconn *)xc;
    struct drain *d = calloc(1, sizeof(*d));

    if (!d)
        return err_set(FERRY_ENOMEM, "drain record");
    *d = (struct drain){.fn = fn, .arg = arg, .next = c->drains};
    c->drains = d;
    fab_conn_maybe_reap(c);
    return 0;
}
