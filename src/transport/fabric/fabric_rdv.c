/*
 * fabric_rdv.c - the fabric transport's rendezvous reader: one-sided reads of a peer's
 * arena straight into ours, in chunks with many in flight, within the lease's deadline.
 */
#include "transport/fabric/fabric_int.h"

static void deadline_arm(struct fconn *c)
{
    uint64_t first = UINT64_MAX;

    for (struct rread *r = c->reads; r; r = r->next)
        first = r->deadline_ms < first ? r->deadline_ms : first;
    if (first == UINT64_MAX)
        loop_timer_stop(c->f->loop, &c->deadline);
    else
        loop_timer_start(c->f->loop, &c->deadline, first);
}

void fab_on_deadline(struct loop *l, struct loop_timer *t)
{
    fab_conn_fail(t->arg, "a one-sided read outlasted its lease");
}

static void read_queue(struct xlistener *f, struct rread *r)
{
    r->queued = 1;
    r->qnext = NULL;
    *f->readq_tail = r;
    f->readq_tail = &r->qnext;
}

static void early_free(struct rread *r)
{
    while (r->early) {
        struct rchunk *k = r->early;
        r->early = k->next;
        free(k);
    }
}

void fab_read_free(struct rread *r)
{
    early_free(r);
    free(r);
}

/* The chunk [off, off + len) of r is in place: tells ev->landed of it once every byte before
 * it is, in order, with those that completed early after it. Chunks complete out of order
 * when several are in flight; at most read_max wait here. */
static void read_landed(struct fconn *c, struct rread *r, uint64_t off, uint64_t len)
{
    void (*landed)(struct xconn *, void *, const uint8_t *, size_t) = c->base.ev->landed;

    if (!landed || r->untold)
        return;
    if (off != r->landed) {
        struct rchunk *k = malloc(sizeof(*k));
        if (!k) { /* the engine hashes it after, then */
            r->untold = 1;
            early_free(r);
            return;
        }
        *k = (struct rchunk){.off = off, .len = len, .next = r->early};
        r->early = k;
        return;
    }
    landed(&c->base, r->arg, r->dst + off, (size_t)len);
    r->landed += len;
    for (struct rchunk **pp = &r->early; *pp;) {
        struct rchunk *k = *pp;
        if (k->off != r->landed) {
            pp = &k->next;
            continue;
        }
        landed(&c->base, r->arg, r->dst + k->off, (size_t)k->len);
        r->landed += k->len;
        *pp = k->next;
        free(k);
        pp = &r->early; /* one that came before it in the list may follow it */
    }
}

/* Sends DONE for the read and hands the object over. */
static void read_finished(struct fconn *c, struct rread *r)
{
    struct rread **pp;
    void *arg = r->arg;

    for (pp = &c->reads; *pp != r; pp = &(*pp)->next)
        ;
    *pp = r->next;
    if (c->reads_tail == &r->next)
        c->reads_tail = pp;
    deadline_arm(c);
    if (!c->f->fault_skip_done) {
        struct fseg *d = calloc(1, sizeof(*d));
        if (!d) {
            fab_read_free(r);
            fab_conn_fail(c, "out of memory for a done message");
            return;
        }
        *d = (struct fseg){.kind = SEG_DONE, .cookie = r->cookie};
        *c->dq_tail = d;
        c->dq_tail = &d->next;
        fab_conn_mark(c);
    }
    fab_read_free(r);
    c->base.ev->received(&c->base, arg);
}

/* The key to read the peer's arena with, from its RDV: it travels only there, after the
 * engine has authenticated the peer. A raw key is mapped once per connection. */
static int rdv_key(struct fconn *c, const struct fmsg_rdv *d)
{
    struct xlistener *f = c->f;
    int rc;

    if (!f->raw) {
        if (d->key_len != 8)
            return err_set(FERRY_EPROTO, "a memory key of %zu bytes", d->key_len);
        c->rkey = fmsg_get64(d->key);
        return 0;
    }
    if (c->rkey_mapped && c->rawkey_len == d->key_len && memcmp(c->rawkey, d->key, d->key_len) == 0)
        return 0;
    if (c->rkey_mapped)
        fi_mr_unmap_key(f->domain, c->rkey);
    c->rkey_mapped = 0;
    if ((rc = fi_mr_map_raw(f->domain, c->rbase, (uint8_t *)d->key, d->key_len, &c->rkey, 0)))
        return fab_err(rc, "fi_mr_map_raw");
    c->rkey_mapped = 1;
    memcpy(c->rawkey, d->key, d->key_len);
    c->rawkey_len = d->key_len;
    return 0;
}

void fab_on_rdv(struct fconn *c, const uint8_t *p, size_t n, uint64_t at_ms)
{
    struct xlistener *f = c->f;
    struct frecv *fr = c->rq;
    struct fmsg_rdv d;
    struct rread *r;
    uint64_t lease;

    if (fmsg_rdv_get(p, n, &d) < 0 || rdv_key(c, &d) < 0) {
        fab_conn_fail_err(c, FERRY_EPROTO, ferry_errmsg());
        return;
    }
    lease = d.lease_ms;
    if (!fr || fr->started || fr->len != d.len || c->fr.hdr_got || d.offset > c->rlen ||
        d.len > c->rlen - d.offset) {
        fab_conn_fail_err(c, FERRY_EPROTO, "a rendezvous descriptor that matches no object");
        return;
    }
    if (f->fault_fail_reads) {
        fab_conn_fail(c, "one-sided read failed (test fault)");
        return;
    }
    if (!(r = calloc(1, sizeof(*r)))) {
        fab_conn_fail(c, "out of memory for a read");
        return;
    }
    *r = (struct rread){.c = c,
                        .dst = fr->dst,
                        .len = d.len,
                        .cookie = d.cookie,
                        .raddr = (c->rvirt ? c->rbase : 0) + d.offset,
                        .arg = fr->arg};
    /* From the RDV's arrival (it may have waited for its turn): never past the lease. */
    r->deadline_ms = at_ms + lease - (lease / 5 > FMSG_LEASE_MIN ? lease / 5 : FMSG_LEASE_MIN);
    c->rq = fr->next;
    if (!c->rq)
        c->rq_tail = &c->rq;
    free(fr);
    *c->reads_tail = r;
    c->reads_tail = &r->next;
    if (!r->dst) { /* dropped: nothing to read */
        r->issued = r->done = d.len;
        read_finished(c, r);
        return;
    }
    deadline_arm(c);
    read_queue(f, r);
    fab_reads_push(f);
}

void fab_on_read_pace(struct loop *l, struct loop_timer *t)
{
    fab_reads_push(t->arg);
}

/* Takes the head of the endpoint's queue out. */
static void read_dequeue_head(struct xlistener *f)
{
    struct rread *r = f->readq;

    f->readq = r->qnext;
    if (!f->readq)
        f->readq_tail = &f->readq;
    r->queued = 0;
}

/* Issues r's next chunk. 1 when issued, 0 when the provider is full (-FI_EAGAIN), -1 when r's
 * connection failed (r is out of the queue then). */
static int read_issue(struct xlistener *f, struct rread *r)
{
    uint64_t k = r->len - r->issued < f->read_chunk ? r->len - r->issued : f->read_chunk;
    struct rdop *op;
    ssize_t rc;

    if (fab_peer_exited(r->c)) {
        fab_conn_fail(r->c, "its process has exited");
        return -1;
    }
    if (!(op = calloc(1, sizeof(*op))))
        return 0;
    *op = (struct rdop){.op.kind = OP_READ, .r = r, .c = r->c, .off = r->issued, .len = k};
    errno = 0; /* posts may progress the provider: see fab_progress */
    quirks_call_begin(f, r->c);
    rc = fi_read(f->ep, r->dst + r->issued, k, f->arena_desc, r->c->addr, r->raddr + r->issued,
                 r->c->rkey, &op->op.ctx);
    quirks_call_end(f);
    if (rc < 0) {
        free(op);
        if (rc == -FI_EAGAIN) {
            f->stats.retries++;
            return 0;
        }
        fab_conn_fail(r->c, fi_strerror((int)-rc));
        return -1;
    }
    f->read_inflight++;
    r->c->inflight++;
    r->c->reading += k;
    op->next = f->reading;
    if (op->next)
        op->next->pprev = &op->next;
    op->pprev = &f->reading;
    f->reading = op;
    r->issued += k;
    f->stats.rdv_reads++;
    return 1;
}

/* Issues reads while the provider takes them, chunk by chunk: the queued reads in turn, at most
 * FAB_READ_BYTES_PER_CONN in flight to each peer, so that the peers are read from in turn (the
 * reads of one peer mostly one after another: the first in the queue takes the room a chunk
 * left). A holder's provider may serve the reads of all its readers in the order they came: a
 * reader that asked for every chunk of every object at once would queue the others behind its
 * bytes (and itself behind theirs), so that a peer sends nothing to some reader for seconds
 * while its link is full. */
void fab_reads_push(struct xlistener *f)
{
    for (int issued = 1; issued && f->readq;) {
        /* One pass, up to the read last in the queue when it began (readq_tail is its qnext):
         * each read at the head in turn issues a chunk if its peer has room, then goes to the
         * tail while it has bytes left. */
        const struct rread *last =
            (const struct rread *)((char *)f->readq_tail - offsetof(struct rread, qnext));
        int more = 1;

        issued = 0;
        while (more && f->readq && f->read_inflight < f->read_max &&
               f->read_pace.heap_index == SIZE_MAX) {
            struct rread *r = f->readq;
            int rc = 0;
            more = r != last;
            if (r->c->reading < FAB_READ_BYTES_PER_CONN && !quirks_peer_locked(r->c)) {
                if ((rc = read_issue(f, r)) == 0)
                    return; /* the provider is full: r stays first */
                issued = 1;
                if (rc < 0)
                    break; /* fab_conn_fail took its connection's reads out: from the head again */
                if (f->fault_read_delay_ms)
                    loop_timer_start(f->loop, &f->read_pace,
                                     loop_now_ms() + f->fault_read_delay_ms);
            }
            read_dequeue_head(f);
            if (r->issued < r->len)
                read_queue(f, r);
        }
    }
}

void fab_read_done(struct xlistener *f, struct rdop *op, int err)
{
    struct rread *r = op->r;
    struct fconn *c = op->c;

    if (!op->abandoned)
        f->read_inflight--;
    r->done += op->len;
    *op->pprev = op->next;
    if (op->next)
        op->next->pprev = op->pprev;
    if (c) {
        c->inflight--;
        c->reading -= op->len;
    }
    if (!r->c) { /* its connection closed: the record waited for this */
        if (r->done == r->issued && !r->queued)
            fab_read_free(r);
    } else if (err) {
        char reason[160];
        snprintf(reason, sizeof(reason), "one-sided read failed: %s", fi_strerror(err));
        fab_conn_fail(c, reason);
    } else {
        /* c == r->c here: fab_on_zombie clears op->c only after fab_conn_shut cleared r->c. */
        /* NOLINTNEXTLINE(clang-analyzer-core.NullDereference) */
        c->base.bytes_in += op->len;
        f->stats.rdv_bytes += op->len;
        read_landed(c, r, op->off, op->len);
        if (r->done == r->len) {
            if (loop_now_ms() > r->deadline_ms)
                fab_conn_fail(c, "a one-sided read completed after its lease");
            else
                read_finished(c, r);
        }
    }
    free(op);
    if (c)
        fab_conn_maybe_reap(c);
}
