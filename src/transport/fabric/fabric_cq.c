/*
 * fabric_cq.c - the fabric transport's completions and progress, on the daemon's loop: the
 * completion queue's wait fd with fi_trywait, or polling where the provider has none.
 */
#include "transport/fabric/fabric_int.h"

static void send_done(struct xlistener *f, struct txop *t, int err)
{
    struct fconn *c = t->c;
    struct fseg *r = t->range;

    t->c = NULL;
    t->range = NULL;
    if (t->abandoned) { /* given up on (on_zombie): uncounted then */
        t->abandoned = 0;
        t->next = f->txfree;
        f->txfree = t;
        return;
    }
    fab_tx_put(f, t);
    c->inflight--;
    if (err) {
        char reason[160];
        snprintf(reason, sizeof(reason), "send failed: %s", fi_strerror(err));
        fab_conn_fail(c, reason);
    }
    if (r && --r->pending == 0 && r->off == r->len && !r->queued && !c->closed)
        c->base.ev->sent(&c->base, r->arg);
    if (r)
        fab_range_release(r);
    fab_conn_maybe_reap(c);
}

void fab_complete(struct xlistener *f, void *ctx, size_t len, int err)
{
    struct fop *op = ctx;

    if (op->kind == OP_SEND) {
        send_done(f, ctx, err);
    } else if (op->kind == OP_READ) {
        fab_read_done(f, ctx, err);
    } else if (err) {
        if (err != FI_ECANCELED)
            log_warn("fabric: a receive failed: %s", fi_strerror(err));
        fab_rbuf_post(f, ctx);
    } else {
        ((struct rbuf *)ctx)->len = len;
        ((struct rbuf *)ctx)->at_ms = loop_now_ms();
        fab_process(f, ctx);
    }
}

/* An error completion without the operation's context (shm 1.17 reports reads from a dead
 * peer so): nothing to fail but the deadlines of what is in flight. Logged once a minute. */
static void unattributed(struct xlistener *f, int err)
{
    uint64_t now = loop_now_ms();

    f->stats.unattributed_errors++;
    if (now - f->unattributed_log_ms < 60000 && f->unattributed_log_ms)
        return;
    f->unattributed_log_ms = now;
    log_warn("fabric: the provider reports a failed operation without saying which (%s); "
             "deadlines will end what it was",
             fi_strerror(err));
}

/* Drives the provider (manual progress) and handles what completed; bounded per call. */
int fab_progress(struct xlistener *f)
{
    struct fi_cq_msg_entry ents[FAB_CQ_BATCH];
    int total = 0;

    while (total < FAB_CQ_PER_TURN && !quirks_own_locked(f)) {
        ssize_t n;
        quirks_before_call();       /* QUIRK_ERRNO: the tcp provider may read errno stale */
        quirks_call_begin(f, NULL); /* shm spins on our region's lock in it */
        n = fi_cq_read(f->cq, ents, FAB_CQ_BATCH);
        quirks_call_end(f);
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry e = {0};
            if (fi_cq_readerr(f->cq, &e, 0) == 1 && e.op_context)
                fab_complete(f, e.op_context, 0, e.err ? e.err : FI_EIO);
            else
                unattributed(f, e.err);
            total++;
            continue;
        }
        if (n <= 0) {
            if (n != -FI_EAGAIN)
                log_warn("fabric: reading completions: %s", fi_strerror((int)-n));
            break;
        }
        for (ssize_t i = 0; i < n; i++)
            fab_complete(f, ents[i].op_context, ents[i].len, 0);
        total += (int)n;
    }
    fab_peers_check(f);
    fab_repost_pending(f);
    fab_push_dirty(f);
    fab_reads_push(f);
    if (total) {
        f->active_ns = clock_mono_ns();
        f->backoff_ms = 0;
    }
    return total;
}

/* Whether anything of ours is under way: the provider may then need us to spin. */
static int busy(const struct xlistener *f)
{
    return f->tx_inflight || f->read_inflight || f->lent || f->dirty || f->repost;
}

/* Sets the wait fd aside for backoff_ms (doubling from 1 ms): see FAB_AGAIN_SPIN_NS. */
static void back_off(struct xlistener *f)
{
    uint64_t now = loop_now_ms();

    f->backoff_ms = f->backoff_ms ? f->backoff_ms * 2 : 1;
    if (f->backoff_ms > FAB_BACKOFF_MAX_MS)
        f->backoff_ms = FAB_BACKOFF_MAX_MS;
    f->stats.backoffs++;
    /* Short back-offs are how providers behave (rxm wakes its fd without work in healthy
     * pairs: an operator chased the warning in 6 of 6 node logs); only one that reached its
     * longest, every wake-up fruitless for a while, says something is wrong. */
    if (f->backoff_ms == FAB_BACKOFF_MAX_MS &&
        (!f->backoff_log_ms || now - f->backoff_log_ms >= 60000)) {
        f->backoff_log_ms = now;
        log_warn("fabric: the provider keeps waking the loop with nothing to do (garbage on "
                 "its port?): polling it every %u ms until it settles",
                 f->backoff_ms);
    }
    (void)loop_watch_mod(f->loop, &f->watch, 0);
    (void)loop_timer_start(f->loop, &f->backoff, now + f->backoff_ms);
}

void fab_on_backoff(struct loop *l, struct loop_timer *t)
{
    struct xlistener *f = t->arg;

    (void)loop_watch_mod(l, &f->watch, LOOP_READ);
    if (fab_progress(f) > 0 || busy(f)) /* things move again: back to the wait fd */
        f->backoff_ms = 0;
    /* else the next fruitless wake-up backs off at once, for twice as long */
}

/* Notes a wake-up that brought nothing while nothing of ours is under way: FAB_FRUITLESS_MAX
 * of them within FAB_FRUITLESS_NS (or one, right after a back-off that changed nothing), and
 * the endpoint backs off. */
static void fruitless(struct xlistener *f)
{
    uint64_t now = clock_mono_ns();

    if (f->backoff_ms) {
        back_off(f);
        return;
    }
    if (now - f->again_ns > FAB_FRUITLESS_NS) {
        f->again_ns = now;
        f->fruitless = 0;
    }
    if (++f->fruitless >= FAB_FRUITLESS_MAX)
        back_off(f);
}

void fab_on_cq(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct xlistener *f = w->arg;

    if (fab_progress(f) == 0 && !busy(f)) /* a wait fd readable with nothing behind it */
        fruitless(f);
}

/* Before the loop sleeps: progress, then sleep only if the provider says the wait fd will
 * tell us about what comes next (fi_trywait). */
int fab_before_wait(struct loop *l, void *arg)
{
    struct xlistener *f = arg;
    struct fid *fids[1] = {&f->cq->fid};

    if (fab_progress(f) > 0 || f->dirty || f->repost)
        return 1;
    /* Without a wait fd, a peer reading what we lent it needs us to progress (shm copies on
     * the target's side): spin while anything is lent or in flight. */
    if (f->wait_fd < 0) {
        uint64_t now = clock_mono_ns();
        if (!f->tx_inflight && !f->read_inflight && !f->lent &&
            !(f->nstalled && now - f->stall_ns < FAB_STALL_SPIN_NS) &&
            now - f->active_ns > FAB_SPIN_NS)
            return 0;
        sched_yield(); /* spinning: let a client on this CPU run */
        return 1;
    }
    if (f->backoff.heap_index != SIZE_MAX)
        return 0;         /* backing off: the timer progresses */
    quirks_before_call(); /* see fab_progress */
    if (fi_trywait(f->fabric, fids, 1) == FI_SUCCESS)
        return 0;
    if (!busy(f))
        fruitless(f);
    return f->backoff.heap_index == SIZE_MAX;
}

/* Without a wait fd, a timer keeps the endpoint progressing while the loop sleeps. */
void fab_on_poll(struct loop *l, struct loop_timer *t)
{
    struct xlistener *f = t->arg;

    fab_progress(f);
    loop_timer_start(l, t, loop_now_ms() + 1);
}
