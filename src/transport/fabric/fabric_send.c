/*
 * fabric_send.c - the fabric transport's sending side: the stream of frames and eager ranges
 * (object bytes sent from the registered arena), credits per size class, control messages
 * (RDV, DONE, CREDIT, CLOSE) and the leases of ranges lent to one-sided readers.
 */
#include "transport/fabric/fabric_int.h"

static struct txop *tx_get(struct xlistener *f)
{
    struct txop *t = f->txfree;

    if (t) {
        f->txfree = t->next;
        f->tx_inflight++;
    }
    return t;
}

void fab_tx_put(struct xlistener *f, struct txop *t)
{
    /* A free op names no range: a post that failed after push_stream set it left it there, and
     * the listener's close, which walks every op, then released a range freed since (ASan:
     * heap-use-after-free in fab_listener_close, make test, shm). */
    t->range = NULL;
    t->c = NULL;
    t->next = f->txfree;
    f->txfree = t;
    f->tx_inflight--;
}

/* The header of a message to c's peer. Messages that use a credit (and CREDIT) carry the
 * credits owed; connection messages carry none. */
static void hdr_fill(struct fconn *c, uint8_t *h, int kind, int use_credit)
{
    int carry = use_credit || kind == K_CREDIT;
    struct fmsg_hdr m = {.kind = (uint8_t)kind, .conn = c->peer_id};

    for (int i = 0; i < CL_N && carry; i++) {
        m.credits[i] = (uint16_t)c->owed[i];
        c->owed[i] = 0;
    }
    if (carry)
        c->need_credit = 0;
    m.seq = use_credit ? c->tx_seq++ : 0;
    fmsg_hdr_put(h, &m);
}

/* Takes back the credits a header carried, when its message was not posted. */
static void owed_undo(struct fconn *c, const uint8_t *h)
{
    for (int i = 0; i < CL_N; i++) {
        c->owed[i] += fmsg_get16(h + 2 + 2 * i);
        if (fmsg_get16(h + 2 + 2 * i))
            c->need_credit = 1;
    }
}

/* Posts t (len bytes of its buffer, then an optional arena range) to the peer with tag cls.
 * 0, or -FI_EAGAIN (t is back in the free list), or another negative fi error. */
static int tx_post(struct fconn *c, struct txop *t, size_t len, const uint8_t *range, uint64_t rlen,
                   int cls)
{
    struct xlistener *f = c->f;
    struct iovec iov[2] = {{t->buf, len}, {(void *)range, (size_t)rlen}};
    void *desc[2] = {f->buf_desc, f->arena_desc};
    ssize_t rc;

    if (fab_peer_exited(c) || quirks_peer_locked(c)) {
        fab_tx_put(f, t);
        return c->peer_exited ? -FI_ECONNRESET : -FI_EAGAIN;
    }
    t->c = c;
    errno = 0; /* posts may progress the provider: see fab_progress */
    quirks_call_begin(f, c);
    rc = fi_tsendv(f->ep, iov, desc, rlen ? 2 : 1, c->addr, (uint64_t)cls, &t->op.ctx);
    quirks_call_end(f);
    if (rc < 0) {
        fab_tx_put(f, t);
        if (rc == -FI_EAGAIN)
            f->stats.retries++;
        return (int)rc;
    }
    c->inflight++;
    f->active_ns = clock_mono_ns();
    return 0;
}

/* A message with no credit: CREDIT, CLOSE, CONNECT, ACCEPT. */
int fab_post_unsolicited(struct fconn *c, int kind, const uint8_t *payload, size_t len)
{
    struct txop *t = tx_get(c->f);
    int rc;

    if (!t) {
        if (kind == K_CREDIT)
            fab_conn_wait(c);
        return -FI_EAGAIN;
    }
    hdr_fill(c, t->buf, kind, 0);
    if (len)
        memcpy(t->buf + FAB_HDR, payload, len);
    t->range = NULL;
    if ((rc = tx_post(c, t, FAB_HDR + len, NULL, 0, CL_SMALL)) < 0) {
        owed_undo(c, t->buf);
        if (rc == -FI_EAGAIN && kind != K_CLOSE)
            fab_conn_wait(c);
    }
    return rc;
}

void fab_post_close(struct fconn *c)
{
    if (fab_post_unsolicited(c, K_CLOSE, NULL, 0) < 0)
        log_debug("fabric: could not tell %s we closed", c->base.peer);
}

/* Restores what hdr_fill took, when a post did not happen. */
static void hdr_undo(struct fconn *c, const uint8_t *h, int cls)
{
    owed_undo(c, h);
    c->tx_seq--;
    c->credits[cls]++;
}

uint32_t fab_lease_ms(const struct xlistener *f, uint64_t len)
{
    uint64_t ms = f->lease_ms + len / FAB_LEASE_RATE;
    return ms > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)ms;
}

/* Small credits kept for DONE: a holder that stops reading our stream (backpressure) must
 * still hear that its lent objects are free, or neither side moves. */
static uint32_t done_reserve(const struct fconn *c)
{
    return c->peer_window > 1 ? 1 : 0;
}

/* Sends one RDV or DONE message for the head segment. 1 when sent, 0 when it must wait. */
static int push_control(struct fconn *c, struct fseg *s)
{
    struct xlistener *f = c->f;
    struct txop *t;
    size_t body;
    uint8_t *p;
    int rc;

    if (c->credits[CL_SMALL] <= (s->kind == SEG_DONE ? 0 : done_reserve(c))) {
        fab_stall_set(c, 1);
        return 0;
    }
    if (!(t = tx_get(f))) {
        fab_conn_wait(c);
        return 0;
    }
    c->credits[CL_SMALL]--;
    hdr_fill(c, t->buf, s->kind == SEG_RDV ? K_RDV : K_DONE, 1);
    p = t->buf + FAB_HDR;
    if (s->kind == SEG_RDV) {
        /* The lease covers the bytes already lent on this connection: they are read first. */
        struct fmsg_rdv r = {.offset = (uint64_t)(s->p - f->arena),
                             .len = s->len,
                             .cookie = s->cookie,
                             .lease_ms = fab_lease_ms(c->f, s->len + c->lent_bytes),
                             .key = f->key,
                             .key_len = f->key_len};
        s->lease_ms = r.lease_ms;
        body = fmsg_rdv_put(p, &r);
    } else {
        fmsg_put64(p, s->cookie);
        body = FMSG_DONE;
    }
    t->range = NULL;
    rc = tx_post(c, t, FAB_HDR + body, NULL, 0, CL_SMALL);
    if (rc < 0) {
        hdr_undo(c, t->buf, CL_SMALL);
        if (rc != -FI_EAGAIN)
            fab_conn_fail(c, fi_strerror(-rc));
        else
            fab_conn_wait(c);
        return 0;
    }
    if (s->kind == SEG_RDV) /* the reader's progress is the lease's business now */
        c->base.bytes_out += s->len;
    return 1;
}

static void lease_expired(struct loop *l, struct loop_timer *t);

/* The RDV for s went out: its range stays pinned under a lease until DONE. */
static int lease_start(struct fconn *c, struct fseg *s)
{
    struct lease *ls = calloc(1, sizeof(*ls));

    if (!ls)
        return err_set(FERRY_ENOMEM, "lease");
    *ls = (struct lease){.c = c, .cookie = s->cookie, .len = s->len, .arg = s->arg};
    loop_timer_init(&ls->timer, lease_expired, ls);
    ls->next = c->leases;
    if (ls->next)
        ls->next->pprev = &ls->next;
    ls->pprev = &c->leases;
    c->leases = ls;
    c->f->lent++;
    c->nleases++;
    c->lent_bytes += s->len;
    /* The holder's lease is the RDV's plus a second: the reader gives up before it. */
    uint64_t end = loop_now_ms() + s->lease_ms + 1000;
    if (end > c->base.quiet_until_ms)
        c->base.quiet_until_ms = end;
    return loop_timer_start(c->f->loop, &ls->timer, end);
}

void fab_lease_end(struct lease *ls)
{
    ls->c->f->lent--;
    ls->c->nleases--;
    ls->c->lent_bytes -= ls->len;
    if (!ls->c->nleases) /* the latest deadline of those left is past none of them */
        ls->c->base.quiet_until_ms = 0;
    *ls->pprev = ls->next;
    if (ls->next)
        ls->next->pprev = ls->pprev;
    loop_timer_stop(ls->c->f->loop, &ls->timer);
}

static void lease_expired(struct loop *l, struct loop_timer *t)
{
    struct lease *ls = t->arg;
    struct fconn *c = ls->c;
    void *arg = ls->arg;

    fab_lease_end(ls);
    free(ls);
    if (c->closed) { /* its pin goes with the connection's record (drain) */
        fab_conn_maybe_reap(c);
        return;
    }
    c->f->stats.leases_expired++;
    log_warn("fabric: %s never said it was done reading a lent object; unpinning it", c->base.peer);
    c->base.ev->sent(&c->base, arg);
}

/* c's sends wait for credits (stalled = 1) or no longer do. */
void fab_stall_set(struct fconn *c, int stalled)
{
    struct xlistener *f = c->f;

    if (stalled)
        f->stats.credit_stalls++;
    if (stalled == c->stalled)
        return;
    c->stalled = stalled;
    if (stalled) {
        f->nstalled++;
        f->stall_ns = clock_mono_ns();
    } else {
        f->nstalled--;
    }
}

/* How much of the queue's head one STREAM message carries: copied frame bytes (up to a small
 * message) and, if every byte before it fits, one arena piece, large class when credits allow. */
static void stream_plan(struct fconn *c, size_t *copy, struct fseg **range, uint64_t *rlen,
                        int *cls)
{
    struct fseg *s;
    size_t len = FAB_HDR;

    for (s = c->sq; s && s->kind == SEG_BYTES; s = s->next) {
        uint64_t left = s->len - s->off;
        if (left > FAB_SMALL - len) {
            len = FAB_SMALL;
            break;
        }
        len += left;
    }
    *copy = len - FAB_HDR;
    *range = s && s->kind == SEG_RANGE && len < FAB_SMALL ? s : NULL;
    *rlen = *range ? (*range)->len - (*range)->off : 0;
    *cls = *range && *rlen > FAB_SMALL - len && c->credits[CL_LARGE] ? CL_LARGE : CL_SMALL;
    if (*rlen > class_size(*cls) - len)
        *rlen = class_size(*cls) - len;
}

/* Retires what a STREAM message took from the queue. */
static void stream_retire(struct fconn *c, size_t copied, struct fseg *range, uint64_t rlen)
{
    struct fseg *s;

    while ((s = c->sq) && s->kind == SEG_BYTES && copied) {
        uint64_t k = s->len - s->off < copied ? s->len - s->off : copied;
        s->off += k;
        copied -= k;
        if (s->off < s->len)
            break;
        c->sq = s->next;
        free(s->owned);
        free(s);
    }
    if (range) {
        range->off += rlen;
        if (range->off == range->len) { /* gone from the queue; its messages hold it */
            c->sq = range->next;
            range->queued = 0;
            fab_range_release(range);
        }
    }
    if (!c->sq)
        c->sq_tail = &c->sq;
}

/* The connection waits for send buffers or for the provider: retried after completions. */
void fab_conn_wait(struct fconn *c)
{
    struct xlistener *f = c->f;

    if (c->dirty || c->closed)
        return;
    c->dirty = 1;
    c->dnext = f->dirty;
    f->dirty = c;
}

/* Sends one STREAM message from the head of the send queue. 1 when sent, 0 when it must wait. */
static int push_stream(struct fconn *c)
{
    struct xlistener *f = c->f;
    struct fseg *range, *s;
    size_t copy, len = FAB_HDR;
    uint64_t rlen;
    struct txop *t;
    int cls, rc;

    stream_plan(c, &copy, &range, &rlen, &cls);
    if (c->credits[cls] <= (cls == CL_SMALL ? done_reserve(c) : 0)) {
        fab_stall_set(c, 1);
        return 0;
    }
    if (!(t = tx_get(f))) {
        fab_conn_wait(c);
        return 0;
    }
    c->credits[cls]--;
    hdr_fill(c, t->buf, K_STREAM, 1);
    for (s = c->sq; s && s->kind == SEG_BYTES && len < FAB_HDR + copy; s = s->next) {
        uint64_t k = s->len - s->off;
        if (k > FAB_HDR + copy - len)
            k = FAB_HDR + copy - len;
        memcpy(t->buf + len, s->p + s->off, k);
        len += k;
    }
    t->range = rlen ? range : NULL;
    rc = tx_post(c, t, len, range ? range->p + range->off : NULL, rlen, cls);
    if (rc < 0) {
        hdr_undo(c, t->buf, cls);
        if (rc != -FI_EAGAIN)
            fab_conn_fail(c, fi_strerror(-rc));
        else
            fab_conn_wait(c);
        return 0;
    }
    /* t->range is still range: completions come only from fi_cq_read, never within the post. */
    if (t->range)
        range->pending++; /* NOLINT(clang-analyzer-core.NullDereference) */
    c->base.bytes_out += copy + rlen;
    if (rlen) {
        f->stats.eager_bytes += rlen;
        f->stats.eager_msgs++;
    }
    stream_retire(c, copy, range, rlen);
    return 1;
}

void fab_conn_push(struct fconn *c)
{
    if (!c->closed && c->hello_due) {
        int rc = fab_send_hello(c);
        if (rc == -FI_EAGAIN) {
            fab_conn_wait(c);
            return;
        }
        if (rc < 0) {
            fab_conn_fail(c, fi_strerror(-rc));
            return;
        }
        c->hello_due = 0;
    }
    while (!c->closed && c->state == ST_OPEN && c->dq && push_control(c, c->dq)) {
        struct fseg *d = c->dq;
        c->dq = d->next;
        if (!c->dq)
            c->dq_tail = &c->dq;
        free(d);
    }
    while (!c->closed && c->state == ST_OPEN && c->sq) {
        struct fseg *s = c->sq;
        int kind = s->kind;

        if (kind == SEG_RDV) {
            if (!push_control(c, s))
                break;
            c->sq = s->next;
            if (!c->sq)
                c->sq_tail = &c->sq;
            if (lease_start(c, s) < 0) {
                free(s);
                fab_conn_fail(c, "out of memory for a lease");
                return;
            }
            free(s);
        } else if (!push_stream(c)) {
            break;
        }
    }
    /* Credits owed go back even when our own sends wait for credits (or both sides would). */
    if (!c->closed && c->state == ST_OPEN && c->need_credit)
        fab_post_unsolicited(c, K_CREDIT, NULL, 0); /* on -FI_EAGAIN, retried (conn_wait) */
}

/* Queues a segment to send on an open connection; NULL when out of memory. */
static struct fseg *enqueue(struct fconn *c, int kind, const uint8_t *p, uint64_t len,
                            uint8_t *owned, void *arg)
{
    struct fseg *s;

    if (!(s = calloc(1, sizeof(*s)))) {
        err_set(FERRY_ENOMEM, "send segment");
        return NULL;
    }
    *s = (struct fseg){
        .kind = kind, .p = p, .len = len, .owned = owned, .arg = arg, .queued = kind == SEG_RANGE};
    if (kind == SEG_RDV)
        s->cookie = ++c->f->next_cookie;
    *c->sq_tail = s;
    c->sq_tail = &s->next;
    fab_conn_mark(c);
    return s;
}

int fab_send_frame(struct xconn *xc, const uint8_t *frame, size_t len)
{
    struct fconn *c = (struct fconn *)xc;
    uint8_t *copy;

    if (c->closed)
        return err_set(FERRY_ECONN, "connection to %s closed", xc->peer);
    if (!(copy = malloc(len ? len : 1)))
        return err_set(FERRY_ENOMEM, "frame of %zu bytes", len);
    memcpy(copy, frame, len);
    if (!enqueue(c, SEG_BYTES, copy, len, copy, NULL)) {
        free(copy);
        return FERRY_ENOMEM;
    }
    return 0;
}

int fab_send_range(struct xconn *xc, const uint8_t *p, uint64_t len, void *arg)
{
    struct fconn *c = (struct fconn *)xc;
    struct xlistener *f = c->f;

    if (c->closed)
        return err_set(FERRY_ECONN, "connection to %s closed", xc->peer);
    if (p < f->arena || len > f->arena_len || (uint64_t)(p - f->arena) > f->arena_len - len)
        return err_set(FERRY_EINVAL, "fabric: a range outside the registered arena");
    return enqueue(c, len > xc->eager_max ? SEG_RDV : SEG_RANGE, p, len, NULL, arg) ? 0
                                                                                    : FERRY_ENOMEM;
}
