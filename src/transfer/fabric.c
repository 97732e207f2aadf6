/*
 * fabric.c - the fabric transport: libfabric RDM endpoints (verbs;ofi_rxm, efa, cxi, and
 * tcp;ofi_rxm and shm everywhere), thesis ch. 3 done with the lessons of brpc, NCCL and RBP.
 *
 * One endpoint per node serves every peer: one completion queue, one address vector, the whole
 * arena registered once (plus one region for the bounce buffers). A connection is a pair of
 * ids agreed in a CONNECT/ACCEPT exchange; every message names the receiver's id.
 *
 * Messages (tagged by size class, so that each lands in a buffer of its class, RBP-style):
 *   header (16 bytes): u8 kind, u8 0, u16 credits[2] returned, u32 receiver's conn id, u32 seq
 *   STREAM   frames and eager object bytes, in order, exactly as the tcp transport's stream;
 *            object bytes go from the sender's registered arena (no copy on the sending side)
 *            into a bounce buffer, and are copied once into the new object
 *   RDV      u64 offset, u64 length, u64 cookie, u32 lease ms: the next object of the stream
 *            is to be read one-sided (fi_read) from the sender's arena
 *   DONE     u64 cookie: the reader is done; the sender unpins
 *   CREDIT   only credits
 *   CONNECT  u32 magic, u32 version, u32 conn id, u16 window, u16 name length, u16 key
 *            length, u8 virt, u8 0, u64 arena base, u64 arena length, name, key
 *   ACCEPT   the same fields, the acceptor's
 *   CLOSE    the sender closed the connection
 *
 * Flow control: each side reserves `window` posted buffers per size class for the other and
 * may send as many messages of a class as it holds credits; credits come back on every message
 * (or a CREDIT when half a window is owed). CREDIT and connection messages need no credit:
 * two extra buffers per class and connection cover them (a side sends a CREDIT only after
 * consuming half a window of the other's messages, so at most two are ever unread).
 *
 * Rendezvous leases: a range lent with RDV stays pinned until DONE or until its lease runs
 * out. The reader stops trusting a read that completes later than lease - margin after the
 * RDV arrived (measured on its own clock, which started after the sender's): such a read is
 * an error and its object is aborted, so a read that raced the sender's reuse of the memory
 * is never sealed.
 *
 * Ownership: all on the loop thread. A closed connection leaves the table at once (late
 * messages for it are dropped) but its record lives while operations it issued are in flight;
 * then drain callbacks run and it is freed.
 */
#include <errno.h>
#include <inttypes.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "transfer/fabric_msg.h"
#include "transfer/framer.h"
#include "transfer/transport.h"
#include "transfer/wire.h"

#define FAB_API FI_VERSION(1, 9)
#define FAB_HDR FMSG_HDR
#define FAB_SMALL 4096u       /* small class: control messages, frames, small objects */
#define FAB_LARGE (64u << 10) /* large class: eager object chunks */
#define FAB_SMALL_BUFS 1024u
#define FAB_LARGE_BUFS 512u
#define FAB_RESERVE 16u  /* small buffers for CONNECT, ACCEPT, CLOSE from anyone */
#define FAB_EXTRA 2u     /* per connection and class, for CREDIT messages */
#define FAB_TX_MAX 256u  /* registered send buffers (header and copied frame bytes) */
#define FAB_SLOTS 4096u  /* connection ids */
#define FAB_AV_MAX 4096u /* peer addresses kept (one per node that ever connected) */
#define FAB_CQ_BATCH 64
#define FAB_CQ_PER_TURN 4096
#define FAB_READ_CHUNK (4u << 20)
#define FAB_NAME_MAX FMSG_NAME_MAX
#define FAB_KEY_MAX FMSG_KEY_MAX
/* A lease covers the slowest reader we still want: 5 s plus the bytes at 50 MB/s. */
#define FAB_LEASE_BASE_MS 5000u
#define FAB_LEASE_RATE 50000u /* bytes per ms */
/* A closed connection whose operations have not completed this long after is given up on:
 * some providers never complete (nor report with a context) operations to a dead peer. */
#define FAB_ZOMBIE_MS 10000u
/* Without a wait fd the endpoint is polled every millisecond, and continuously while work is
 * under way and for this long after: an answer to what we sent comes without the 1 ms wait. */
#define FAB_SPIN_NS 200000u
#define FAB_STALL_SPIN_NS 10000000u /* and while waiting for credits, up to 10 ms */

enum { CL_SMALL, CL_LARGE, CL_N };
enum { OP_RECV, OP_SEND, OP_READ };
enum { ST_CONNECTING, ST_OPEN };

struct fop {
    struct fi_context2 ctx; /* first: the context libfabric hands back */
    int kind;
};

struct rbuf {
    struct fop op;
    int cls;
    uint8_t *p;
    size_t len;        /* of the message it holds, while held */
    uint64_t at_ms;    /* when it arrived (a rendezvous deadline counts from then) */
    struct rbuf *next; /* held by a paused connection, or waiting to be reposted */
};

struct fconn;

struct fseg;

struct txop {
    struct fop op;
    struct fconn *c;
    uint8_t *buf;       /* FAB_SMALL bytes in the registered buffer region */
    struct fseg *range; /* the eager range it carries a piece of, or NULL */
    int abandoned;      /* given up on (on_zombie): already uncounted */
    struct txop *next;  /* free list */
};

struct rread;

struct rdop {
    struct fop op;
    struct rread *r;
    struct fconn *c; /* the connection that issued it (its record waits for this) */
    uint64_t len;
    int abandoned;              /* given up on (on_zombie): already uncounted */
    struct rdop *next, **pprev; /* in the endpoint's reads in flight */
};

/* One object read one-sided into this node's arena. */
struct rread {
    struct fconn *c;
    uint8_t *dst;
    uint64_t len, issued, done, raddr, cookie, deadline_ms;
    void *arg;
    struct rread *next;  /* in c->reads, in RDV order */
    struct rread *qnext; /* in the endpoint's queue of reads with bytes left to issue */
    int queued;
};

/* A range lent to a reader: pinned until DONE or the lease runs out. */
struct lease {
    struct fconn *c;
    uint64_t cookie, len;
    void *arg;
    struct loop_timer timer;
    struct lease *next, **pprev;
};

enum { SEG_BYTES, SEG_RANGE, SEG_RDV, SEG_DONE };

/* A range is freed when it has left the queue and no message carrying a piece of it is in
 * flight; ev->sent comes then, once every piece has completed (completions of one connection
 * do not come in order: a large message may complete after a later small one). */
struct fseg {
    int kind;
    const uint8_t *p;
    uint64_t len, off; /* off: bytes of it already sent */
    uint8_t *owned;
    void *arg;
    uint64_t cookie;   /* SEG_RDV, SEG_DONE */
    uint32_t lease_ms; /* SEG_RDV, once sent */
    uint32_t pending;  /* SEG_RANGE: messages carrying it in flight */
    int queued;        /* SEG_RANGE: still in the send queue */
    struct fseg *next;
};

struct frecv {
    uint8_t *dst; /* NULL: drop */
    uint64_t len;
    void *arg;
    int started;
    struct frecv *next;
};

struct drain {
    void (*fn)(void *arg);
    void *arg;
    struct drain *next;
};

struct fconn {
    struct xconn base;
    struct xlistener *f;
    uint32_t id, peer_id;
    fi_addr_t addr;
    int state, closed, paused, dirty;
    uint32_t window;        /* buffers per class we reserved for the peer */
    uint32_t credits[CL_N]; /* messages of each class we may still send */
    uint32_t owed[CL_N];    /* the peer's messages we consumed and have not credited */
    uint32_t peer_window;
    uint32_t tx_seq, rx_seq;
    int need_credit;
    int stalled;                 /* waits for the peer's credits (counted in nstalled) */
    int hello_due;               /* our CONNECT or ACCEPT is still to be sent */
    uint64_t rbase, rlen, rkey;  /* the peer's arena: base (with FI_MR_VIRT_ADDR) and key */
    int rvirt, rkey_mapped;      /* rkey came from fi_mr_map_raw (unmapped with the record) */
    uint8_t rawkey[FAB_KEY_MAX]; /* the raw key rkey was mapped from */
    size_t rawkey_len;
    uint64_t connect_ns;
    struct fseg *sq, **sq_tail;
    struct fseg *dq, **dq_tail; /* DONEs: sent before the stream, on a credit kept for them */
    uint64_t lent_bytes;        /* of this connection's leases: later leases cover them too */
    uint32_t nleases;           /* leases running, kept after close (the pins wait for them) */
    struct frecv *rq, **rq_tail;
    struct framer fr;
    struct rbuf *held, **held_tail; /* received while paused */
    /* Messages that came before their turn: a provider completes small messages before a
     * large one sent earlier (its own rendezvous), so order is restored by sequence number. */
    struct rbuf **early;
    uint32_t nearly;
    struct rread *reads, **reads_tail;
    struct lease *leases;
    uint32_t inflight; /* sends and reads issued and not completed */
    struct drain *drains;
    struct loop_timer reaper, deadline;
    struct fconn *dnext;          /* in the endpoint's list of connections with something to send */
    struct fconn *anext, **aprev; /* every record, closed ones included, until freed */
};

struct avent {
    uint8_t name[FAB_NAME_MAX];
    size_t len;
    fi_addr_t addr;
    struct avent *next;
};

struct xlistener {
    struct loop *loop;
    const struct xconn_events *ev;
    xaccept_fn *fn;
    void *arg;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_mr *arena_mr, *buf_mr;
    void *arena_desc, *buf_desc;
    uint8_t *arena;
    uint64_t arena_len;
    uint8_t key[FAB_KEY_MAX]; /* what a peer needs to read our arena */
    size_t key_len;
    int virt, raw; /* FI_MR_VIRT_ADDR, FI_MR_RAW */
    uint8_t *bufs;
    size_t bufs_len;
    struct rbuf *rbufs;
    struct rbuf *repost; /* buffers the provider did not take back yet */
    struct txop *txops, *txfree;
    uint32_t tx_inflight, tx_max, read_inflight, read_max;
    uint64_t read_chunk;
    uint32_t window, free_bufs[CL_N];
    uint32_t nsmall, nlarge; /* receive buffers of each class (small ones beside the reserve) */
    struct fconn *slots[FAB_SLOTS];
    uint16_t gen[FAB_SLOTS];
    struct fconn *dirty, *all;
    struct rdop *reading; /* reads in flight */
    struct rread *readq, **readq_tail;
    struct avent *avs;
    uint32_t navs;
    int wait_fd;
    struct loop_watch watch;
    struct loop_timer kick, poll, read_pace;
    uint64_t next_cookie;
    char provider[64];
    uint8_t name[FAB_NAME_MAX];
    size_t name_len;
    char address[2 * FAB_NAME_MAX + 1];
    struct xstats stats;
    uint64_t unattributed_log_ms;
    uint64_t active_ns; /* when a completion last came or an operation was last posted */
    uint32_t lent;      /* ranges lent to readers (leases running): peers may be reading */
    uint32_t nstalled;  /* connections waiting for their peer's credits */
    uint64_t stall_ns;  /* when one last started waiting */
    int fault_skip_done, fault_fail_reads;
    uint32_t fault_read_delay_ms;
};

static void conn_fail_err(struct fconn *c, int err, const char *reason);
static void on_deadline(struct loop *l, struct loop_timer *t);
static void on_zombie(struct loop *l, struct loop_timer *t);
static void conn_push(struct fconn *c);
static void reads_push(struct xlistener *f);
static void process(struct xlistener *f, struct rbuf *b);
static void drain_held(struct fconn *c);
static void conn_wait(struct fconn *c);
static void lease_end(struct lease *ls);
static void stall_set(struct fconn *c, int stalled);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t class_size(int cls)
{
    return cls == CL_SMALL ? FAB_SMALL : FAB_LARGE;
}

static int fab_err(int rc, const char *what)
{
    return err_set(FERRY_ETRANSFER, "%s: %s", what, fi_strerror(rc < 0 ? -rc : rc));
}

/* ---- receive buffers ---- */

static void rbuf_post(struct xlistener *f, struct rbuf *b)
{
    ssize_t rc = fi_trecv(f->ep, b->p, class_size(b->cls), f->buf_desc, FI_ADDR_UNSPEC,
                          (uint64_t)b->cls, 0, &b->op.ctx);
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

static void repost_pending(struct xlistener *f)
{
    struct rbuf *list = f->repost;

    f->repost = NULL;
    while (list) {
        struct rbuf *b = list;
        list = b->next;
        rbuf_post(f, b);
    }
}

/* ---- connections: table, life, death ---- */

/* A random generation for a connection slot: a connection id names slot and generation, and
 * a message naming a stale or guessed id is dropped. */
static uint16_t random_gen(void)
{
    uint16_t g = 0;

    if (getrandom(&g, sizeof(g), 0) != sizeof(g))
        g = (uint16_t)now_ns();
    return g;
}

static struct fconn *conn_lookup(struct xlistener *f, uint32_t id)
{
    uint32_t slot = id & 0xffff;

    if (slot >= FAB_SLOTS || !f->slots[slot] || f->slots[slot]->id != id)
        return NULL;
    return f->slots[slot];
}

static void conn_reap(struct loop *l, struct loop_timer *t)
{
    struct fconn *c = t->arg;

    loop_timer_stop(l, &c->deadline);
    while (c->leases) { /* the endpoint is closing: nobody reads any more */
        struct lease *ls = c->leases;
        lease_end(ls);
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
    framer_free(&c->fr);
    free(c->early);
    free(c);
}

/* Frees the record once nothing it issued is in flight. */
static void conn_maybe_reap(struct fconn *c)
{
    if (c->closed && c->inflight == 0 && c->nleases == 0 && c->reaper.heap_index == SIZE_MAX)
        loop_timer_start(c->f->loop, &c->reaper, 0);
}

/* A range whose last reference went (see struct fseg). */
static void range_release(struct fseg *r)
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
            range_release(s);
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
        rbuf_post(f, b);
    }
    for (uint32_t i = 0; c->early && i < c->nearly; i++) {
        if (c->early[i])
            rbuf_post(f, c->early[i]);
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

static void post_close(struct fconn *c);

/* Forgets the operations of a closed connection that never completed: their completions,
 * if they ever come, find no connection. */
static void on_zombie(struct loop *l, struct loop_timer *t)
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
    conn_maybe_reap(c);
}

static void conn_shut(struct fconn *c)
{
    struct xlistener *f = c->f;
    uint32_t slot = c->id & 0xffff;

    if (c->closed)
        return;
    if (c->state == ST_OPEN)
        post_close(c);
    stall_set(c, 0);
    c->closed = 1;
    for (struct fconn **pp = &f->dirty; *pp; pp = &(*pp)->dnext) {
        if (*pp == c) {
            *pp = c->dnext;
            break;
        }
    }
    c->dirty = 0;
    f->slots[slot] = NULL;
    f->gen[slot] = random_gen(); /* the next id of this slot is not guessable from this one */
    for (int i = 0; i < CL_N; i++)
        f->free_bufs[i] += c->window + FAB_EXTRA;
    loop_timer_stop(f->loop, &c->deadline);
    if (c->inflight) {
        loop_timer_init(&c->deadline, on_zombie, c);
        loop_timer_start(f->loop, &c->deadline, loop_now_ms() + FAB_ZOMBIE_MS);
    }
    free_queues(c);
    while (c->reads) {
        struct rread *r = c->reads;
        c->reads = r->next;
        r->c = NULL; /* its reads in flight only count down now */
        if (r->issued == r->done)
            free(r);
    }
    conn_maybe_reap(c);
}

static void conn_fail_err(struct fconn *c, int err, const char *reason)
{
    if (c->closed)
        return;
    conn_shut(c);
    c->base.ev->closed(&c->base, err, reason);
}

static void conn_fail(struct fconn *c, const char *reason)
{
    conn_fail_err(c, FERRY_ECONN, reason);
}

/* c has something to send: at the end of this loop turn (conn_wait: after completions). */
static void conn_mark(struct fconn *c)
{
    struct xlistener *f = c->f;

    if (c->closed)
        return;
    conn_wait(c);
    if (f->kick.heap_index == SIZE_MAX)
        loop_timer_start(f->loop, &f->kick, 0);
}

/* Runs the sends that wait: from a 0 ms timer (never inside the engine's own call, so that
 * ev->sent cannot re-enter it) and after completions free send slots. */
static void push_dirty(struct xlistener *f)
{
    struct fconn *list = f->dirty;

    f->dirty = NULL;
    while (list) {
        struct fconn *c = list;
        list = c->dnext;
        c->dirty = 0;
        if (!c->paused && c->held)
            drain_held(c);
        conn_push(c);
    }
}

static void on_kick(struct loop *l, struct loop_timer *t)
{
    push_dirty(t->arg);
}

static struct fconn *conn_new(struct xlistener *f, fi_addr_t addr, const char *peer)
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
    c->base.max_frame = WIRE_MAX_FRAME;
    c->base.eager_max = UINT64_MAX;
    snprintf(c->base.peer, sizeof(c->base.peer), "%s", peer);
    c->f = f;
    c->id = slot | (uint32_t)f->gen[slot] << 16;
    c->dq_tail = &c->dq;
    c->addr = addr;
    c->window = f->window;
    c->sq_tail = &c->sq;
    c->rq_tail = &c->rq;
    c->held_tail = &c->held;
    c->reads_tail = &c->reads;
    loop_timer_init(&c->reaper, conn_reap, c);
    loop_timer_init(&c->deadline, on_deadline, c);
    for (int i = 0; i < CL_N; i++)
        f->free_bufs[i] -= c->window + FAB_EXTRA;
    c->anext = f->all;
    if (c->anext)
        c->anext->aprev = &c->anext;
    c->aprev = &f->all;
    f->all = c;
    f->slots[slot] = c;
    return c;
}

/* ---- sending ---- */

static struct txop *tx_get(struct xlistener *f)
{
    struct txop *t = f->txfree;

    if (t) {
        f->txfree = t->next;
        f->tx_inflight++;
    }
    return t;
}

static void tx_put(struct xlistener *f, struct txop *t)
{
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

    t->c = c;
    rc = fi_tsendv(f->ep, iov, desc, rlen ? 2 : 1, c->addr, (uint64_t)cls, &t->op.ctx);
    if (rc < 0) {
        tx_put(f, t);
        if (rc == -FI_EAGAIN)
            f->stats.retries++;
        return (int)rc;
    }
    c->inflight++;
    f->active_ns = now_ns();
    return 0;
}

/* A message with no credit: CREDIT, CLOSE, CONNECT, ACCEPT. */
static int post_unsolicited(struct fconn *c, int kind, const uint8_t *payload, size_t len)
{
    struct txop *t = tx_get(c->f);
    int rc;

    if (!t) {
        if (kind == K_CREDIT)
            conn_wait(c);
        return -FI_EAGAIN;
    }
    hdr_fill(c, t->buf, kind, 0);
    if (len)
        memcpy(t->buf + FAB_HDR, payload, len);
    t->range = NULL;
    if ((rc = tx_post(c, t, FAB_HDR + len, NULL, 0, CL_SMALL)) < 0) {
        owed_undo(c, t->buf);
        if (rc == -FI_EAGAIN && kind != K_CLOSE)
            conn_wait(c);
    }
    return rc;
}

static void post_close(struct fconn *c)
{
    if (post_unsolicited(c, K_CLOSE, NULL, 0) < 0)
        log_debug("fabric: could not tell %s we closed", c->base.peer);
}

/* Restores what hdr_fill took, when a post did not happen. */
static void hdr_undo(struct fconn *c, const uint8_t *h, int cls)
{
    owed_undo(c, h);
    c->tx_seq--;
    c->credits[cls]++;
}

static uint32_t lease_ms(uint64_t len)
{
    uint64_t ms = FAB_LEASE_BASE_MS + len / FAB_LEASE_RATE;
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
        stall_set(c, 1);
        return 0;
    }
    if (!(t = tx_get(f))) {
        conn_wait(c);
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
                             .lease_ms = lease_ms(s->len + c->lent_bytes),
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
            conn_fail(c, fi_strerror(-rc));
        else
            conn_wait(c);
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
    return loop_timer_start(c->f->loop, &ls->timer, loop_now_ms() + s->lease_ms + 1000);
}

static void lease_end(struct lease *ls)
{
    ls->c->f->lent--;
    ls->c->nleases--;
    ls->c->lent_bytes -= ls->len;
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

    lease_end(ls);
    free(ls);
    if (c->closed) { /* its pin goes with the connection's record (drain) */
        conn_maybe_reap(c);
        return;
    }
    c->f->stats.leases_expired++;
    log_warn("fabric: %s never said it was done reading a lent object; unpinning it", c->base.peer);
    c->base.ev->sent(&c->base, arg);
}

/* c's sends wait for credits (stalled = 1) or no longer do. */
static void stall_set(struct fconn *c, int stalled)
{
    struct xlistener *f = c->f;

    if (stalled)
        f->stats.credit_stalls++;
    if (stalled == c->stalled)
        return;
    c->stalled = stalled;
    if (stalled) {
        f->nstalled++;
        f->stall_ns = now_ns();
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
            range_release(range);
        }
    }
    if (!c->sq)
        c->sq_tail = &c->sq;
}

/* The connection waits for send buffers or for the provider: retried after completions. */
static void conn_wait(struct fconn *c)
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
        stall_set(c, 1);
        return 0;
    }
    if (!(t = tx_get(f))) {
        conn_wait(c);
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
            conn_fail(c, fi_strerror(-rc));
        else
            conn_wait(c);
        return 0;
    }
    if (t->range)
        range->pending++;
    c->base.bytes_out += copy + rlen;
    if (rlen) {
        f->stats.eager_bytes += rlen;
        f->stats.eager_msgs++;
    }
    stream_retire(c, copy, range, rlen);
    return 1;
}

static int send_hello(struct fconn *c);

static void conn_push(struct fconn *c)
{
    if (!c->closed && c->hello_due) {
        int rc = send_hello(c);
        if (rc == -FI_EAGAIN) {
            conn_wait(c);
            return;
        }
        if (rc < 0) {
            conn_fail(c, fi_strerror(-rc));
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
                conn_fail(c, "out of memory for a lease");
                return;
            }
            free(s);
        } else if (!push_stream(c)) {
            break;
        }
    }
    /* Credits owed go back even when our own sends wait for credits (or both sides would). */
    if (!c->closed && c->state == ST_OPEN && c->need_credit)
        post_unsolicited(c, K_CREDIT, NULL, 0); /* on -FI_EAGAIN, retried (conn_wait) */
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
    conn_mark(c);
    return s;
}

static int fab_send_frame(struct xconn *xc, const uint8_t *frame, size_t len)
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

static int fab_send_range(struct xconn *xc, const uint8_t *p, uint64_t len, void *arg)
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

/* ---- receiving: the stream ---- */

static int fab_recv_into(struct xconn *xc, uint8_t *dst, uint64_t len, void *arg)
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
        conn_fail_err(c, rc == FERRY_EPROTO ? FERRY_EPROTO : FERRY_ECONN, ferry_errmsg());
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

/* ---- receiving: rendezvous reads ---- */

static void on_deadline(struct loop *l, struct loop_timer *t);

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

static void on_deadline(struct loop *l, struct loop_timer *t)
{
    conn_fail(t->arg, "a one-sided read outlasted its lease");
}

static void read_queue(struct xlistener *f, struct rread *r)
{
    r->queued = 1;
    r->qnext = NULL;
    *f->readq_tail = r;
    f->readq_tail = &r->qnext;
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
            free(r);
            conn_fail(c, "out of memory for a done message");
            return;
        }
        *d = (struct fseg){.kind = SEG_DONE, .cookie = r->cookie};
        *c->dq_tail = d;
        c->dq_tail = &d->next;
        conn_mark(c);
    }
    free(r);
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

static void on_rdv(struct fconn *c, const uint8_t *p, size_t n, uint64_t at_ms)
{
    struct xlistener *f = c->f;
    struct frecv *fr = c->rq;
    struct fmsg_rdv d;
    struct rread *r;
    uint64_t lease;

    if (fmsg_rdv_get(p, n, &d) < 0 || rdv_key(c, &d) < 0) {
        conn_fail_err(c, FERRY_EPROTO, ferry_errmsg());
        return;
    }
    lease = d.lease_ms;
    if (!fr || fr->started || fr->len != d.len || c->fr.hdr_got || d.offset > c->rlen ||
        d.len > c->rlen - d.offset) {
        conn_fail_err(c, FERRY_EPROTO, "a rendezvous descriptor that matches no object");
        return;
    }
    if (f->fault_fail_reads) {
        conn_fail(c, "one-sided read failed (test fault)");
        return;
    }
    if (!(r = calloc(1, sizeof(*r)))) {
        conn_fail(c, "out of memory for a read");
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
    reads_push(f);
}

static void on_read_pace(struct loop *l, struct loop_timer *t)
{
    reads_push(t->arg);
}

/* Issues reads while the provider takes them, chunk by chunk, many in flight. */
static void reads_push(struct xlistener *f)
{
    struct rread *r;

    while ((r = f->readq) && f->read_inflight < f->read_max &&
           f->read_pace.heap_index == SIZE_MAX) {
        uint64_t k = r->len - r->issued < f->read_chunk ? r->len - r->issued : f->read_chunk;
        struct rdop *op = calloc(1, sizeof(*op));
        ssize_t rc;

        if (!op)
            return;
        *op = (struct rdop){.op.kind = OP_READ, .r = r, .c = r->c, .len = k};
        rc = fi_read(f->ep, r->dst + r->issued, k, f->arena_desc, r->c->addr, r->raddr + r->issued,
                     r->c->rkey, &op->op.ctx);
        if (rc < 0) {
            free(op);
            if (rc == -FI_EAGAIN) {
                f->stats.retries++;
                return;
            }
            conn_fail(r->c, fi_strerror((int)-rc));
            continue;
        }
        f->read_inflight++;
        r->c->inflight++;
        op->next = f->reading;
        if (op->next)
            op->next->pprev = &op->next;
        op->pprev = &f->reading;
        f->reading = op;
        r->issued += k;
        f->stats.rdv_reads++;
        if (r->issued == r->len) {
            f->readq = r->qnext;
            if (!f->readq)
                f->readq_tail = &f->readq;
            r->queued = 0;
        }
        if (f->fault_read_delay_ms)
            loop_timer_start(f->loop, &f->read_pace, loop_now_ms() + f->fault_read_delay_ms);
    }
}

static void read_done(struct xlistener *f, struct rdop *op, int err)
{
    struct rread *r = op->r;
    struct fconn *c = op->c;

    if (!op->abandoned)
        f->read_inflight--;
    r->done += op->len;
    *op->pprev = op->next;
    if (op->next)
        op->next->pprev = op->pprev;
    if (c)
        c->inflight--;
    if (!r->c) { /* its connection closed: the record waited for this */
        if (r->done == r->issued && !r->queued)
            free(r);
    } else if (err) {
        char reason[160];
        snprintf(reason, sizeof(reason), "one-sided read failed: %s", fi_strerror(err));
        conn_fail(c, reason);
    } else {
        c->base.bytes_in += op->len;
        f->stats.rdv_bytes += op->len;
        if (r->done == r->len) {
            if (loop_now_ms() > r->deadline_ms)
                conn_fail(c, "a one-sided read completed after its lease");
            else
                read_finished(c, r);
        }
    }
    free(op);
    if (c)
        conn_maybe_reap(c);
}

/* ---- receiving: messages ---- */

static void on_done(struct fconn *c, const uint8_t *p, size_t n)
{
    struct lease *ls;
    uint64_t cookie;
    void *arg;

    if (fmsg_done_get(p, n, &cookie) < 0) {
        conn_fail_err(c, FERRY_EPROTO, ferry_errmsg());
        return;
    }
    for (ls = c->leases; ls && ls->cookie != cookie; ls = ls->next)
        ;
    if (!ls)
        return; /* its lease ran out before: the pin is gone already */
    lease_end(ls);
    arg = ls->arg;
    free(ls);
    c->base.ev->sent(&c->base, arg);
}

/* Gives a consumed buffer back to the provider and owes the peer a credit for it. */
static void buf_done(struct fconn *c, struct rbuf *b, int counted)
{
    rbuf_post(c->f, b);
    if (!counted || c->closed)
        return;
    if (++c->owed[b->cls] >= (c->window + 1) / 2) {
        c->need_credit = 1;
        conn_mark(c);
    }
}

/* A STREAM or RDV message, in stream order. */
static void stream_msg(struct fconn *c, struct rbuf *b)
{
    if (b->p[0] == K_STREAM)
        feed(c, b->p + FAB_HDR, b->len - FAB_HDR);
    else
        on_rdv(c, b->p + FAB_HDR, b->len - FAB_HDR, b->at_ms);
    buf_done(c, b, 1);
}

static void drain_held(struct fconn *c)
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
            conn_fail_err(c, FERRY_EPROTO, "credits beyond the window");
            return -1;
        }
    }
    stall_set(c, 0);
    if (c->sq || c->dq)
        conn_mark(c);
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
        rbuf_post(c->f, b);
        conn_fail_err(c, FERRY_EPROTO, "unknown message kind");
    }
}

static void on_message(struct fconn *c, struct rbuf *b)
{
    uint32_t ahead;

    if (arrive(c, b->p) < 0) {
        rbuf_post(c->f, b);
        return;
    }
    if (b->p[0] == K_CREDIT) {
        buf_done(c, b, 0);
        return;
    }
    ahead = fmsg_get32(b->p + 12) - c->rx_seq;
    if (ahead >= c->nearly || c->early[(c->rx_seq + ahead) % c->nearly]) {
        rbuf_post(c->f, b);
        conn_fail_err(c, FERRY_EPROTO, "a message out of sequence");
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

/* ---- connection handshake ---- */

/* Our CONNECT or ACCEPT body for c. */
static size_t hello_put(const struct xlistener *f, const struct fconn *c, uint8_t *p)
{
    struct fmsg_hello h = {.id = c->id,
                           .window = c->window,
                           .name = f->name,
                           .name_len = f->name_len,
                           .virt = f->virt,
                           .base = (uint64_t)(uintptr_t)f->arena,
                           .len = f->arena_len};
    return fmsg_hello_put(p, &h);
}

/* The peer's arena: where its objects are and the key to read them. */
static int hello_apply(struct fconn *c, const struct fmsg_hello *h)
{
    struct xlistener *f = c->f;

    if (h->virt != f->virt)
        return err_set(FERRY_EPROTO, "the peer addresses memory differently (another provider?)");
    c->peer_id = h->id;
    c->peer_window = h->window;
    /* The peer can have at most its credits of both classes out at once; a power of two, so
     * that indexing by sequence number stays right when it wraps. */
    for (c->nearly = 1; c->nearly < 2 * (c->window + FAB_EXTRA); c->nearly *= 2)
        ;
    if (!(c->early = calloc(c->nearly, sizeof(*c->early))))
        return err_set(FERRY_ENOMEM, "reorder buffer");
    c->credits[CL_SMALL] = c->credits[CL_LARGE] = h->window;
    c->rbase = h->base;
    c->rlen = h->len;
    c->rvirt = h->virt;
    return 0;
}

/* The fi_addr of a peer's endpoint name, inserted once and cached. */
static int av_get(struct xlistener *f, const uint8_t *name, size_t len, fi_addr_t *out)
{
    struct avent *a;

    for (a = f->avs; a; a = a->next) {
        if (a->len == len && memcmp(a->name, name, len) == 0) {
            *out = a->addr;
            return 0;
        }
    }
    if (f->navs >= FAB_AV_MAX)
        return err_set(FERRY_ENOMEM, "fabric: %u peer addresses known already", FAB_AV_MAX);
    if (len > FAB_NAME_MAX || !(a = calloc(1, sizeof(*a))))
        return err_set(FERRY_ENOMEM, "address vector entry");
    memcpy(a->name, name, len);
    a->len = len;
    if (fi_av_insert(f->av, name, 1, &a->addr, 0, NULL) != 1) {
        free(a);
        return err_set(FERRY_EINVAL, "fabric: the provider rejects a peer's address");
    }
    f->stats.av_inserts++;
    f->navs++;
    a->next = f->avs;
    f->avs = a;
    *out = a->addr;
    return 0;
}

static void printable(struct xlistener *f, const uint8_t *name, size_t len, char *out, size_t n)
{
    size_t sz = n;

    if (!fi_av_straddr(f->av, name, out, &sz))
        snprintf(out, n, "?");
}

static int send_hello(struct fconn *c)
{
    uint8_t p[FMSG_HELLO_FIXED + FAB_NAME_MAX];
    size_t n = hello_put(c->f, c, p);

    return post_unsolicited(c, c->state == ST_CONNECTING ? K_CONNECT : K_ACCEPT, p, n);
}

static void on_connect_msg(struct xlistener *f, struct rbuf *b)
{
    struct fmsg_hello h;
    char peer[128];
    fi_addr_t addr;
    struct fconn *c;

    if (fmsg_hello_get(b->p + FAB_HDR, b->len - FAB_HDR, &h) < 0 ||
        av_get(f, h.name, h.name_len, &addr) < 0) {
        log_warn("fabric: refusing a connection: %s", ferry_errmsg());
        return;
    }
    printable(f, h.name, h.name_len, peer, sizeof(peer));
    if (!(c = conn_new(f, addr, peer))) {
        log_warn("fabric: refusing %s: %s", peer, ferry_errmsg());
        return;
    }
    if (hello_apply(c, &h) < 0) {
        log_warn("fabric: refusing %s: %s", peer, ferry_errmsg());
        conn_shut(c);
        return;
    }
    c->state = ST_OPEN;
    c->hello_due = 1;
    conn_mark(c);
    f->fn(f, &c->base, f->arg);
}

static void on_accept_msg(struct fconn *c, struct rbuf *b)
{
    struct xlistener *f = c->f;
    struct fmsg_hello h;

    if (c->state != ST_CONNECTING) {
        conn_fail_err(c, FERRY_EPROTO, "an accept on an open connection");
        return;
    }
    if (fmsg_hello_get(b->p + FAB_HDR, b->len - FAB_HDR, &h) < 0 || hello_apply(c, &h) < 0) {
        conn_fail_err(c, FERRY_EPROTO, ferry_errmsg());
        return;
    }
    c->state = ST_OPEN;
    f->stats.connects++;
    f->stats.connect_us += (now_ns() - c->connect_ns) / 1000;
    conn_mark(c);
}

static void process(struct xlistener *f, struct rbuf *b)
{
    struct fmsg_hdr h;
    struct fconn *c;
    int kind;

    if (fmsg_hdr_get(b->p, b->len, &h) < 0) {
        log_warn("fabric: dropping a message: %s", ferry_errmsg());
        rbuf_post(f, b);
        return;
    }
    kind = h.kind;
    if (kind == K_CONNECT) {
        on_connect_msg(f, b);
        rbuf_post(f, b);
        return;
    }
    if (!(c = conn_lookup(f, h.conn))) {
        rbuf_post(f, b); /* for a connection closed since: nobody to tell */
        return;
    }
    if (kind == K_ACCEPT || kind == K_CLOSE || c->state != ST_OPEN) {
        if (kind == K_ACCEPT)
            on_accept_msg(c, b);
        else if (kind == K_CLOSE)
            conn_fail(c, "the peer closed the connection");
        else
            conn_fail_err(c, FERRY_EPROTO, "a message before the connection was accepted");
        rbuf_post(f, b);
        return;
    }
    on_message(c, b);
}

/* ---- completions ---- */

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
    tx_put(f, t);
    c->inflight--;
    if (err) {
        char reason[160];
        snprintf(reason, sizeof(reason), "send failed: %s", fi_strerror(err));
        conn_fail(c, reason);
    }
    if (r && --r->pending == 0 && r->off == r->len && !r->queued && !c->closed)
        c->base.ev->sent(&c->base, r->arg);
    if (r)
        range_release(r);
    conn_maybe_reap(c);
}

static void complete(struct xlistener *f, void *ctx, size_t len, int err)
{
    struct fop *op = ctx;

    if (op->kind == OP_SEND) {
        send_done(f, ctx, err);
    } else if (op->kind == OP_READ) {
        read_done(f, ctx, err);
    } else if (err) {
        if (err != FI_ECANCELED)
            log_warn("fabric: a receive failed: %s", fi_strerror(err));
        rbuf_post(f, ctx);
    } else {
        ((struct rbuf *)ctx)->len = len;
        ((struct rbuf *)ctx)->at_ms = loop_now_ms();
        process(f, ctx);
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
static int progress(struct xlistener *f)
{
    struct fi_cq_msg_entry ents[FAB_CQ_BATCH];
    int total = 0;

    while (total < FAB_CQ_PER_TURN) {
        ssize_t n = fi_cq_read(f->cq, ents, FAB_CQ_BATCH);
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry e = {0};
            if (fi_cq_readerr(f->cq, &e, 0) == 1 && e.op_context)
                complete(f, e.op_context, 0, e.err ? e.err : FI_EIO);
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
            complete(f, ents[i].op_context, ents[i].len, 0);
        total += (int)n;
    }
    repost_pending(f);
    push_dirty(f);
    reads_push(f);
    if (total)
        f->active_ns = now_ns();
    return total;
}

static void on_cq(struct loop *l, struct loop_watch *w, uint32_t events)
{
    progress(w->arg);
}

/* Before the loop sleeps: progress, then sleep only if the provider says the wait fd will
 * tell us about what comes next (fi_trywait). */
static int before_wait(struct loop *l, void *arg)
{
    struct xlistener *f = arg;
    struct fid *fids[1] = {&f->cq->fid};

    if (progress(f) > 0 || f->dirty || f->repost)
        return 1;
    /* Without a wait fd, a peer reading what we lent it needs us to progress (shm copies on
     * the target's side): spin while anything is lent or in flight. */
    if (f->wait_fd < 0) {
        uint64_t now = now_ns();
        if (!f->tx_inflight && !f->read_inflight && !f->lent &&
            !(f->nstalled && now - f->stall_ns < FAB_STALL_SPIN_NS) &&
            now - f->active_ns > FAB_SPIN_NS)
            return 0;
        sched_yield(); /* spinning: let a client on this CPU run */
        return 1;
    }
    return fi_trywait(f->fabric, fids, 1) == FI_SUCCESS ? 0 : 1;
}

/* Without a wait fd, a timer keeps the endpoint progressing while the loop sleeps. */
static void on_poll(struct loop *l, struct loop_timer *t)
{
    struct xlistener *f = t->arg;

    progress(f);
    loop_timer_start(l, t, loop_now_ms() + 1);
}

/* ---- connections: the engine's operations ---- */

static int fab_connect(struct xlistener *f, const char *addr, const struct xconn_events *ev,
                       struct xconn **out)
{
    uint8_t name[FAB_NAME_MAX];
    size_t len = strlen(addr) / 2;
    char peer[128];
    fi_addr_t fa;
    struct fconn *c;
    int rc;

    if (len == 0 || len > FAB_NAME_MAX || strlen(addr) % 2)
        return err_set(FERRY_EINVAL, "fabric address '%.32s...': expected hex", addr);
    for (size_t i = 0; i < len; i++) {
        if (sscanf(addr + 2 * i, "%2hhx", &name[i]) != 1)
            return err_set(FERRY_EINVAL, "fabric address: expected hex");
    }
    if ((rc = av_get(f, name, len, &fa)) < 0)
        return rc;
    printable(f, name, len, peer, sizeof(peer));
    if (!(c = conn_new(f, fa, peer)))
        return FERRY_ENOMEM;
    c->base.ev = ev;
    c->state = ST_CONNECTING;
    c->connect_ns = now_ns();
    c->hello_due = 1;
    conn_mark(c);
    *out = &c->base;
    return 0;
}

static void fab_pause(struct xconn *xc, int paused)
{
    struct fconn *c = (struct fconn *)xc;

    c->paused = paused;
    if (!paused && c->held)
        conn_mark(c);
}

static void fab_close(struct xconn *xc)
{
    conn_shut((struct fconn *)xc);
}

static int fab_drain(struct xconn *xc, void (*fn)(void *arg), void *arg)
{
    struct fconn *c = (struct fconn *)xc;
    struct drain *d = calloc(1, sizeof(*d));

    if (!d)
        return err_set(FERRY_ENOMEM, "drain record");
    *d = (struct drain){.fn = fn, .arg = arg, .next = c->drains};
    c->drains = d;
    conn_maybe_reap(c);
    return 0;
}

/* ---- the endpoint ---- */

static struct fi_info *hints_for(const char *provider)
{
    struct fi_info *h = fi_allocinfo();

    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_REMOTE_READ;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    /* Every mode we can honour; the provider keeps those it needs. */
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                              FI_MR_ENDPOINT | FI_MR_RAW;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->tx_attr->msg_order = FI_ORDER_SAS;
    h->rx_attr->msg_order = FI_ORDER_SAS;
    if (provider && *provider && !(h->fabric_attr->prov_name = strdup(provider))) {
        fi_freeinfo(h);
        return NULL;
    }
    return h;
}

/* The listen address' host: the fabric binds where tcp listens (the interface peers reach),
 * when the provider takes an address; "" when there is none. */
static void listen_host(const char *addr, char *host, size_t len)
{
    char port[16];

    if (!addr || transport_split_addr(addr, host, len, port, sizeof(port)) < 0)
        host[0] = '\0';
}

static int is_sockaddr(uint32_t format)
{
    return format == FI_SOCKADDR || format == FI_SOCKADDR_IN || format == FI_SOCKADDR_IN6;
}

/* A name of our own for providers named by strings (shm): theirs is the process id, and a
 * daemon killed with SIGKILL leaves its shared-memory file behind, so a later process with
 * the same id could not open its endpoint (EBUSY). */
static void unique_name(char *name, size_t len)
{
    uint32_t r = 0;

    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = (uint32_t)now_ns();
    snprintf(name, len, "ferry-%d-%08x", (int)getpid(), r);
}

static int open_domain(struct xlistener *f, const char *provider, const char *addr)
{
    struct fi_info *hints = hints_for(provider);
    char host[128];
    struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_FD};
    struct fi_av_attr av = {.type = FI_AV_UNSPEC};
    int rc;

    if (!hints)
        return err_set(FERRY_ENOMEM, "fabric hints");
    rc = fi_getinfo(FAB_API, NULL, NULL, 0, hints, &f->info);
    listen_host(addr, host, sizeof(host));
    if (rc == 0 && f->info->addr_format == FI_ADDR_STR)
        unique_name(host, sizeof(host));
    if (rc == 0 && host[0] &&
        (is_sockaddr(f->info->addr_format) || f->info->addr_format == FI_ADDR_STR)) {
        struct fi_info *bound = NULL;
        if (fi_getinfo(FAB_API, host, NULL, FI_SOURCE, hints, &bound) == 0) {
            fi_freeinfo(f->info);
            f->info = bound;
        }
    }
    fi_freeinfo(hints);
    if (rc)
        return err_set(FERRY_ETRANSFER,
                       "no libfabric provider%s%s with reliable messages and "
                       "one-sided reads: %s",
                       provider ? " named " : "", provider ? provider : "", fi_strerror(-rc));
    snprintf(f->provider, sizeof(f->provider), "%s", f->info->fabric_attr->prov_name);
    if (f->info->tx_attr->iov_limit < 2) /* header and arena piece go in one message */
        return err_set(FERRY_ETRANSFER, "fabric provider %s sends only one buffer per message",
                       f->provider);
    if ((rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL)) ||
        (rc = fi_domain(f->fabric, f->info, &f->domain, NULL)))
        return fab_err(rc, "opening the fabric");
    cq.size = f->info->tx_attr->size + f->info->rx_attr->size;
    if ((rc = fi_cq_open(f->domain, &cq, &f->cq, NULL))) {
        cq.wait_obj = FI_WAIT_NONE; /* polled from a timer instead */
        if ((rc = fi_cq_open(f->domain, &cq, &f->cq, NULL)))
            return fab_err(rc, "fi_cq_open");
    }
    if (cq.wait_obj != FI_WAIT_FD || fi_control(&f->cq->fid, FI_GETWAIT, &f->wait_fd))
        f->wait_fd = -1;
    if ((rc = fi_av_open(f->domain, &av, &f->av, NULL)) ||
        (rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)) ||
        (rc = fi_ep_bind(f->ep, &f->av->fid, 0)) ||
        (rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(f->ep)))
        return fab_err(rc, "opening the endpoint");
    return 0;
}

static void say_memlock(uint64_t need)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        log_warn("fabric: RLIMIT_MEMLOCK is %llu KiB and registering the arena pins %llu KiB: "
                 "raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity in a systemd unit)",
                 (unsigned long long)rl.rlim_cur >> 10, (unsigned long long)need >> 10);
}

/* Registers [p, p + len) once; requested_key is used unless the provider picks keys. */
static int reg(struct xlistener *f, void *p, uint64_t len, uint64_t access, uint64_t key,
               struct fid_mr **mr)
{
    int rc = fi_mr_reg(f->domain, p, len, access, 0, key, 0, mr, NULL);

    if (rc) {
        say_memlock(len);
        return err_set(FERRY_ETRANSFER, "fabric: cannot register %llu bytes: %s",
                       (unsigned long long)len, fi_strerror(-rc));
    }
    f->stats.registrations++;
    if (f->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(*mr, &f->ep->fid, 0)) || (rc = fi_mr_enable(*mr)))
            return fab_err(rc, "binding memory to the endpoint");
    }
    return 0;
}

/* A key we choose (providers without FI_MR_PROV_KEY): random, so that it cannot be guessed by
 * whoever has not been sent it; within the provider's key size; never 0 (the buffers' key). */
static uint64_t random_key(const struct xlistener *f)
{
    size_t size = f->info->domain_attr->mr_key_size;
    uint64_t key = 0;

    if (getrandom(&key, sizeof(key), 0) != sizeof(key))
        key = now_ns();
    if (size && size < sizeof(key))
        key &= (1ull << (8 * size)) - 1;
    return key ? key : 1;
}

/* The arena, registered once: what peers need to read it goes into f->key. */
static int register_arena(struct xlistener *f)
{
    uint64_t base;
    int rc;

    f->virt = !!(f->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR);
    f->raw = !!(f->info->domain_attr->mr_mode & FI_MR_RAW);
    if (f->info->domain_attr->mr_mode & (FI_MR_LOCAL | FI_MR_ALLOCATED))
        say_memlock(f->arena_len + f->bufs_len);
    if ((rc = reg(f, f->arena, f->arena_len, FI_SEND | FI_READ | FI_REMOTE_READ, random_key(f),
                  &f->arena_mr)) < 0)
        return rc;
    f->arena_desc = fi_mr_desc(f->arena_mr);
    if (!f->raw) {
        fmsg_put64(f->key, fi_mr_key(f->arena_mr));
        f->key_len = 8;
        return 0;
    }
    f->key_len = FAB_KEY_MAX;
    if ((rc = fi_mr_raw_attr(f->arena_mr, &base, f->key, &f->key_len, 0)))
        return fab_err(rc, "fi_mr_raw_attr");
    return 0;
}

/* Bounce buffers (both classes) and send buffers: one region, registered once, all receive
 * buffers posted. */
static int open_buffers(struct xlistener *f)
{
    uint32_t nrecv = FAB_SMALL_BUFS + FAB_RESERVE + FAB_LARGE_BUFS;
    uint8_t *p;
    int rc;

    /* No more receives than the provider can have posted: a third large, the rest small. */
    if (f->info->rx_attr->size < nrecv)
        nrecv = (uint32_t)f->info->rx_attr->size;
    f->nlarge = nrecv / 3;
    f->nsmall = nrecv - f->nlarge - FAB_RESERVE;
    if (nrecv <= FAB_RESERVE || f->nlarge < f->window + FAB_EXTRA)
        return err_set(FERRY_ETRANSFER, "fabric: the provider takes only %u posted receives",
                       nrecv);

    f->tx_max =
        f->info->tx_attr->size / 2 < FAB_TX_MAX ? (uint32_t)f->info->tx_attr->size / 2 : FAB_TX_MAX;
    f->read_max = f->info->tx_attr->size / 2 ? (uint32_t)f->info->tx_attr->size / 2 : 1;
    if (f->tx_max == 0)
        f->tx_max = 1;
    f->bufs_len =
        (size_t)(f->nsmall + FAB_RESERVE + f->tx_max) * FAB_SMALL + (size_t)f->nlarge * FAB_LARGE;
    f->bufs = mmap(NULL, f->bufs_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f->bufs == MAP_FAILED) {
        f->bufs = NULL;
        return err_sys("fabric buffers");
    }
    f->rbufs = calloc(nrecv, sizeof(*f->rbufs));
    f->txops = calloc(f->tx_max, sizeof(*f->txops));
    if (!f->rbufs || !f->txops)
        return err_set(FERRY_ENOMEM, "fabric buffer records");
    if ((rc = reg(f, f->bufs, f->bufs_len, FI_SEND | FI_RECV, 0, &f->buf_mr)) < 0)
        return rc;
    f->buf_desc = fi_mr_desc(f->buf_mr);
    p = f->bufs;
    for (uint32_t i = 0; i < f->tx_max; i++, p += FAB_SMALL) {
        f->txops[i] = (struct txop){.op.kind = OP_SEND, .buf = p, .next = f->txfree};
        f->txfree = &f->txops[i];
    }
    for (uint32_t i = 0; i < nrecv; i++) {
        int cls = i < f->nsmall + FAB_RESERVE ? CL_SMALL : CL_LARGE;
        f->rbufs[i] = (struct rbuf){.op.kind = OP_RECV, .cls = cls, .p = p};
        p += class_size(cls);
        rbuf_post(f, &f->rbufs[i]);
    }
    f->free_bufs[CL_SMALL] = f->nsmall;
    f->free_bufs[CL_LARGE] = f->nlarge;
    return 0;
}

static int open_name(struct xlistener *f)
{
    int rc;

    f->name_len = sizeof(f->name);
    if ((rc = fi_getname(&f->ep->fid, f->name, &f->name_len)))
        return fab_err(rc, "fi_getname");
    for (size_t i = 0; i < f->name_len; i++)
        sprintf(f->address + 2 * i, "%02x", f->name[i]);
    return 0;
}

static void read_faults(struct xlistener *f)
{
    const char *s = getenv("FERRY_FAULT");

    /* Test hooks: a reader that never says it is done, reads slowed to a crawl, reads that
     * fail at once. */
    if (!s)
        return;
    f->fault_skip_done = strstr(s, "fabric-skip-done") != NULL;
    f->fault_fail_reads = strstr(s, "fabric-fail-reads") != NULL;
    if (strstr(s, "fabric-read-delay-ms="))
        f->fault_read_delay_ms = (uint32_t)atoi(strstr(s, "fabric-read-delay-ms=") + 21);
    log_warn("fabric: test faults on: %s", s);
}

static void fab_listener_close(struct xlistener *f);

static int fab_listen(struct loop *loop, const struct xconfig *cfg, const struct xconn_events *ev,
                      xaccept_fn *fn, void *arg, struct xlistener **out)
{
    struct xlistener *f;
    int rc;

    if (!cfg->arena || !cfg->arena_len || cfg->window == 0 ||
        cfg->window + FAB_EXTRA > FAB_LARGE_BUFS)
        return err_set(FERRY_EINVAL, "fabric: an arena and a window of 1..%u are needed",
                       FAB_LARGE_BUFS - FAB_EXTRA);
    if (!(f = calloc(1, sizeof(*f))))
        return err_set(FERRY_ENOMEM, "fabric endpoint");
    *f = (struct xlistener){.loop = loop,
                            .ev = ev,
                            .fn = fn,
                            .arg = arg,
                            .arena = cfg->arena,
                            .arena_len = cfg->arena_len,
                            .window = cfg->window,
                            .wait_fd = -1};
    f->readq_tail = &f->readq;
    for (uint32_t i = 0; i < FAB_SLOTS; i++)
        f->gen[i] = random_gen();
    loop_timer_init(&f->kick, on_kick, f);
    loop_timer_init(&f->poll, on_poll, f);
    loop_timer_init(&f->read_pace, on_read_pace, f);
    read_faults(f);
    f->read_chunk = f->fault_read_delay_ms ? (1u << 20) : FAB_READ_CHUNK;
    if ((rc = open_domain(f, cfg->provider, cfg->addr)) < 0 || (rc = open_name(f)) < 0 ||
        (rc = open_buffers(f)) < 0 || (rc = register_arena(f)) < 0)
        goto close_f;
    if (f->info->ep_attr->max_msg_size < f->read_chunk)
        f->read_chunk = f->info->ep_attr->max_msg_size;
    if (f->wait_fd >= 0)
        rc = loop_watch_add(loop, &f->watch, f->wait_fd, LOOP_READ, on_cq, f);
    else
        rc = loop_timer_start(loop, &f->poll, loop_now_ms() + 1);
    if (rc < 0)
        goto close_f;
    loop->before_wait = before_wait;
    loop->before_wait_arg = f;
    *out = f;
    return 0;

close_f:
    fab_listener_close(f);
    return rc;
}

static void close_fid(void *fid)
{
    if (fid)
        fi_close(fid);
}

static void close_regions(struct xlistener *f)
{
    close_fid(f->arena_mr ? &f->arena_mr->fid : NULL);
    close_fid(f->buf_mr ? &f->buf_mr->fid : NULL);
    f->arena_mr = f->buf_mr = NULL;
}

/* Closes the endpoint first: after that no operation can complete or touch memory. Then the
 * records of closed connections run their drain callbacks. */
static void fab_listener_close(struct xlistener *f)
{
    if (!f)
        return;
    if (f->loop->before_wait_arg == f) {
        f->loop->before_wait = NULL;
        f->loop->before_wait_arg = NULL;
    }
    if (f->wait_fd >= 0 && f->watch.fn)
        loop_watch_del(f->loop, &f->watch);
    loop_timer_stop(f->loop, &f->poll);
    loop_timer_stop(f->loop, &f->kick);
    loop_timer_stop(f->loop, &f->read_pace);
    for (uint32_t i = 0; i < FAB_SLOTS; i++) {
        if (f->slots[i])
            conn_shut(f->slots[i]);
    }
    /* Regions bound to the endpoint (FI_MR_ENDPOINT) must go before it. */
    if (f->info && (f->info->domain_attr->mr_mode & FI_MR_ENDPOINT))
        close_regions(f);
    close_fid(f->ep ? &f->ep->fid : NULL);
    f->ep = NULL;
    /* Nothing completes any more: what waited for completions is finished here. */
    for (uint32_t i = 0; f->txops && i < f->tx_max; i++) {
        struct fseg *r = f->txops[i].range;
        if (r && --r->pending == 0)
            range_release(r);
    }
    while (f->reading) {
        struct rdop *op = f->reading;
        struct rread *r = op->r;
        f->reading = op->next;
        r->done += op->len;
        if (r->done == r->issued && !r->queued)
            free(r);
        free(op);
    }
    while (f->all) {
        struct fconn *c = f->all;
        loop_timer_stop(f->loop, &c->reaper);
        loop_timer_stop(f->loop, &c->deadline);
        conn_reap(f->loop, &c->reaper);
    }
    close_regions(f);
    close_fid(f->av ? &f->av->fid : NULL);
    close_fid(f->cq ? &f->cq->fid : NULL);
    close_fid(f->domain ? &f->domain->fid : NULL);
    close_fid(f->fabric ? &f->fabric->fid : NULL);
    if (f->info)
        fi_freeinfo(f->info);
    while (f->avs) {
        struct avent *a = f->avs;
        f->avs = a->next;
        free(a);
    }
    if (f->bufs)
        munmap(f->bufs, f->bufs_len);
    free(f->rbufs);
    free(f->txops);
    free(f);
}

static const char *fab_address(const struct xlistener *f)
{
    return f->address;
}

static const char *fab_provider(const struct xlistener *f)
{
    return f->provider;
}

static int fab_stats(const struct xlistener *f, struct xstats *out)
{
    *out = f->stats;
    return 0;
}

const struct transport transport_fabric = {
    .name = "fabric",
    .listen = fab_listen,
    .listener_close = fab_listener_close,
    .address = fab_address,
    .provider = fab_provider,
    .stats = fab_stats,
    .connect = fab_connect,
    .send_frame = fab_send_frame,
    .send_range = fab_send_range,
    .recv_into = fab_recv_into,
    .pause = fab_pause,
    .close = fab_close,
    .drain = fab_drain,
};
