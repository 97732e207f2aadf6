/*
 * fabric_recv.c - the fabric transport's receiving side: posted bounce buffers, the stream
 * restored to its order by sequence numbers, frames and eager bytes delivered to the engine.
 */
#include "transport/fabric/fabric_int.h"

void fab_rbuf_post(struct xlistener *f, struct rbuf *b)
{
    ssize_t rc;

    errno = 0; /* posts may progress the provider: see fab_progress */
    rc = fi_trecv(f->ep, b->p, class_size(b->cls), f->buf_desc, FI_ADDR_UNSPEC, (uint64_t)b->cls, 0,
                  &b->op.ctx);
    if (rc == 0)
        return;
    if (rc != -FI_EAGAIN) { /* the buffer is lost to the pool; the windows were sized for it */
        log_error("fabric: cannot post a receive buffer: %s", fi_strerror((int)-rc));
        return;
    }
    f->stats.retries++;
    b->next = f->repost;
    f->repost = b;
}

void fab_repost_pending(struct xlistener *f)
{
    struct rbuf *list = f->repost;

    f->repost = NULL;
    while (list) {
        struct rbuf *b = list;
        list = b->next;
        fab_rbuf_post(f, b);
    }
}

int fab_recv_into(struct xconn *xc, uint8_t *dst, uint64_t len, void *arg)
{
    struct fconn *c = (struct fconn *)xc;
    struct frecv *r;

    if (c->closed)
        return err_set(FERRY_ECONN, "connection to %s closed", xc->peer);
    if (!(r = calloc(1, sizeof(*r))))
        return err_set(FERRY_ENOMEM, "receive record");
    *r = (struct frecv){.dst = dst, .len = len, .arg = arg};
    *c->rq_tail = r;
    c->rq_tail = &r->next;
    return 0;
}

static void frecv_pop(struct fconn *c)
{
    struct frecv *r = c->rq;

    c->rq = r->next;
    if (!c->rq)
        c->rq_tail = &c->rq;
    c->base.ev->received(&c->base, r->arg);
    free(r);
}

/* Takes up to n bytes for the frame being read (framer.h); returns how many. */
static size_t feed_frame(struct fconn *c, const uint8_t *p, size_t n)
{
    size_t k = framer_wanted(&c->fr) < n ? framer_wanted(&c->fr) : n;
    int rc = framer_put(&c->fr, p, k, c->base.max_frame);

    if (rc < 0)
        fab_conn_fail_err(c, rc == FERRY_EPROTO ? FERRY_EPROTO : FERRY_ECONN, ferry_errmsg());
    else if (rc == 1)
        c->base.ev->frame(&c->base, &c->fr.h, c->fr.frame.data);
    return k;
}

/* Stream bytes, in order, to the receives asked for and to frames. */
static void feed(struct fconn *c, const uint8_t *p, size_t n)
{
    c->base.bytes_in += n;
    while (!c->closed && n) {
        struct frecv *r = c->rq;
        size_t k;

        if (!r) {
            k = feed_frame(c, p, n);
        } else {
            k = r->len < n ? (size_t)r->len : n;
            if (r->dst) {
                memcpy(r->dst, p, k);
                if (c->base.ev->landed)
                    c->base.ev->landed(&c->base, r->arg, r->dst, k);
                r->dst += k;
            }
            r->len -= k;
            r->started = 1;
            if (!r->len)
                frecv_pop(c);
        }
        p += k;
        n -= k;
    }
}

static void on_done(struct fconn *c, const uint8_t *p, size_t n)
{
    struct lease *ls;
    uint64_t cookie;
    void *arg;

    if (fmsg_done_get(p, n, &cookie) < 0) {
        fab_conn_fail_err(c, FERRY_EPROTO, ferry_errmsg());
        return;
    }
    for (ls = c->leases; ls && ls->cookie != cookie; ls = ls->next)
        ;
    if (!ls)
        return; /* its lease ran out before: the pin is gone already */
    fab_lease_end(ls);
    arg = ls->arg;
    free(ls);
    c->base.ev->sent(&c->base, arg);
}

/* Gives a consumed buffer back to the provider and owes the peer a credit for it. */
static void buf_done(struct fconn *c, struct rbuf *b, int counted)
{
    fab_rbuf_post(c->f, b);
    if (!counted || c->closed)
        return;
    if (++c->owed[b->cls] >= (c->window + 1) / 2) {
        c->need_credit = 1;
        fab_conn_mark(c);
    }
}

/* A STREAM or RDV message, in stream order. */
static void stream_msg(struct fconn *c, struct rbuf *b)
{
    if (b->p[0] == K_STREAM)
        feed(c, b->p + FAB_HDR, b->len - FAB_HDR);
    else
        fab_on_rdv(c, b->p + FAB_HDR, b->len - FAB_HDR, b->at_ms);
    buf_done(c, b, 1);
}

void fab_drain_held(struct fconn *c)
{
    while (!c->paused && !c->closed && c->held) {
        struct rbuf *b = c->held;
        c->held = b->next;
        if (!c->held)
            c->held_tail = &c->held;
        stream_msg(c, b);
    }
}

/* Checks the order and the credits a message of an open connection brings. */
static int arrive(struct fconn *c, const uint8_t *h)
{
    for (int i = 0; i < CL_N; i++) {
        c->credits[i] += fmsg_get16(h + 2 + 2 * i);
        if (c->credits[i] > c->peer_window) {
            fab_conn_fail_err(c, FERRY_EPROTO, "credits beyond the window");
            return -1;
        }
    }
    fab_stall_set(c, 0);
    if (c->sq || c->dq)
        fab_conn_mark(c);
    return 0;
}

/* One message of the peer's sequence, in its turn. */
static void in_turn(struct fconn *c, struct rbuf *b)
{
    switch (b->p[0]) {
    case K_DONE:
        on_done(c, b->p + FAB_HDR, b->len - FAB_HDR);
        buf_done(c, b, 1);
        return;
    case K_STREAM:
    case K_RDV:
        if (c->paused || c->held) { /* backpressure: kept, and not credited, until resumed */
            b->next = NULL;
            *c->held_tail = b;
            c->held_tail = &b->next;
            return;
        }
        stream_msg(c, b);
        return;
    default:
        fab_rbuf_post(c->f, b);
        fab_conn_fail_err(c, FERRY_EPROTO, "unknown message kind");
    }
}

void fab_on_message(struct fconn *c, struct rbuf *b)
{
    uint32_t ahead;

    if (arrive(c, b->p) < 0) {
        fab_rbuf_post(c->f, b);
        return;
    }
    if (b->p[0] == K_CREDIT) {
        buf_done(c, b, 0);
        return;
    }
    ahead = fmsg_get32(b->p + 12) - c->rx_seq;
    if (ahead >= c->nearly || c->early[(c->rx_seq + ahead) % c->nearly]) {
        fab_rbuf_post(c->f, b);
        fab_conn_fail_err(c, FERRY_EPROTO, "a message out of sequence");
        return;
    }
    c->early[(c->rx_seq + ahead) % c->nearly] = b;
    /* Everything now in turn, in order. */
    while (!c->closed && (b = c->early[c->rx_seq % c->nearly])) {
        c->early[c->rx_seq % c->nearly] = NULL;
        c->rx_seq++;
        in_turn(c, b);
    }
}
