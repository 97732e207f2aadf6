/*
 * fabric_int.h - the fabric transport's internals, shared by its files. The transport runs
 * libfabric RDM endpoints (verbs;ofi_rxm, efa, cxi, and tcp;ofi_rxm and shm everywhere): thesis
 * ch. 3 done with the lessons of brpc, NCCL and RBP.
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
 *   CONNECT  u32 magic, u32 version, u32 conn id, u16 window, u16 name length, u16 0 (no
 *            key: it travels in RDV only), u8 virt, u8 0, u64 arena base, u64 arena length, name
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
 *
 * Files (one concern each, the way libfabric lays out its providers):
 *   fabric_ep.c     the endpoint: domain, endpoint, queues, registrations; the transport table
 *   fabric_conn.c   connections: the id table, life and death, the engine's connection calls
 *   fabric_hello.c  the connection handshake (CONNECT / ACCEPT) and peer addresses
 *   fabric_send.c   sending: the stream, credits, control messages, leases of lent ranges
 *   fabric_recv.c   receiving: posted buffers, the stream in order, messages
 *   fabric_rdv.c    rendezvous: one-sided reads of a peer's arena into ours
 *   fabric_cq.c     completions and progress, in the daemon's loop
 *   fabric_msg.c    the message codec (fuzzed on its own)
 *   fabric_peer.c   peers on this host: liveness, probes, regions left by the killed
 *   quirks/         workarounds for bugs of the libfabric we run on, gated by version and
 *                   provider (quirks/quirks.h, the interface, lists them): the recv interposer
 *                   (ferryd only), the shm lock guard and its watchdog thread
 */
#ifndef FERRY_FABRIC_INT_H
#define FERRY_FABRIC_INT_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
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
#include <sys/stat.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "transport/fabric/fabric_msg.h"
#include "transport/fabric/quirks/quirks.h"
#include "transport/framer.h"
#include "transport/registry.h"

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
/* Bytes read from one peer at once (two whole chunks): enough to keep a link busy while one
 * completes, few enough that a holder serving several readers serves each in turn
 * (fab_reads_push). In bytes, so that a provider with a small max_msg_size, whose chunks are
 * smaller, keeps as much in flight. */
#define FAB_READ_BYTES_PER_CONN (2ull * FAB_READ_CHUNK)
#define FAB_NAME_MAX FMSG_NAME_MAX
#define FAB_KEY_MAX FMSG_KEY_MAX
/* A lease covers the slowest reader we still want: 5 s (xconfig's lease_ms when set) plus the
 * bytes at 50 MB/s. */
#define FAB_LEASE_BASE_MS 5000u
#define FAB_LEASE_RATE 50000u /* bytes per ms */
/* A closed connection whose operations have not completed this long after is given up on:
 * some providers never complete (nor report with a context) operations to a dead peer. */
#define FAB_ZOMBIE_MS 10000u
/* Without a wait fd the endpoint is polled every millisecond, and continuously while work is
 * under way and for this long after: an answer to what we sent comes without the 1 ms wait. */
#define FAB_SPIN_NS 200000u
#define FAB_STALL_SPIN_NS 10000000u /* and while waiting for credits, up to 10 ms */
/* A provider whose wait fd stays readable (or whose fi_trywait keeps saying "again") while
 * nothing is in flight and nothing completes would keep the loop from ever sleeping: libfabric
 * 1.17's tcp provider leaves a peer's half-read connection request readable for ever. After
 * FAB_FRUITLESS_MAX such wake-ups within FAB_FRUITLESS_NS, the wait fd is set aside and a timer
 * progresses the endpoint, after 1 ms and doubling up to FAB_BACKOFF_MAX_MS while still nothing
 * completes. */
#define FAB_FRUITLESS_MAX 64u
#define FAB_FRUITLESS_NS 10000000u
#define FAB_BACKOFF_MAX_MS 16u
/* A shm region lock seen held this long, over at least FAB_LOCK_STUCK_POLLS looks, while a
 * peer on this host was found exited, has lost its holder (held for microseconds by live
 * processes; one stopped with SIGSTOP holds it as long, which is why an exit must be seen). */
#define FAB_LOCK_STUCK_MS 2000u
#define FAB_LOCK_STUCK_POLLS 200u
#define FAB_PEER_CHECK_MS 20u
/* A provider call on a peer that has run this long while the peer's lock is held and its
 * process is gone is stuck in that lock: the watchdog frees it (quirks/quirk_watch.c). */
#define FAB_WATCH_STUCK_MS 100u
/* A peer of a tcp-based provider that has sent nothing for 50 ms is probed, then every 200 ms
 * up to 10 times while it stays quiet: a refused TCP connect to its address means its process
 * is gone (one probe alone was seen to miss a peer killed a moment before). A live peer's
 * provider sees a connection come and go with a reset: cheap, and no garbage to it. */
#define FAB_PROBE_FIRST_MS 50u
#define FAB_PROBE_EVERY_MS 200u
#define FAB_PROBE_MAX 10u
/* How long a recv that would block on the loop's thread may wait for data (QUIRK_RECV): a
 * connection request's data comes with its header, or within a round trip. */
#define FAB_RECV_WAIT_MS 5

/* The endpoint's counters: X(name, kind, help), reported as fabric_<name>. */
#define FAB_COUNTERS(X)                                                                            \
    X(registrations, COUNTER, "memory regions registered (the arena and the bounce buffers)")      \
    X(av_inserts, COUNTER, "peer addresses resolved (first contact only)")                         \
    X(av_removals, COUNTER, "unused peer addresses dropped to make room (4096 are kept)")          \
    X(connects, COUNTER, "fabric handshakes this node completed")                                  \
    X(connect_us, COUNTER, "their total time (_us: microseconds)")                                 \
    X(eager_msgs, COUNTER, "messages that carried object bytes (sent)")                            \
    X(eager_bytes, COUNTER, "object bytes they carried")                                           \
    X(rdv_reads, COUNTER, "one-sided reads issued (rendezvous)")                                   \
    X(rdv_bytes, COUNTER, "object bytes they moved")                                               \
    X(leases_expired, COUNTER, "ranges lent to a reader that never said it was done")              \
    X(credit_stalls, COUNTER, "sends that waited for the receiver's credits")                      \
    X(retries, COUNTER, "operations the provider refused for the moment (-FI_EAGAIN)")             \
    X(backoffs, COUNTER, "idle spins cut short: the provider said again with nothing to do")       \
    X(peers_exited, COUNTER, "peers found gone (process exited, or its port refuses): dropped")    \
    X(locks_recovered, COUNTER, "our region's lock freed after its holder held it past 2 s")       \
    X(unattributed_errors, COUNTER, "failures the provider reported without their operation")

struct fab_counters {
#define FAB_COUNTER_MEMBER(name, kind, help) uint64_t name;
    FAB_COUNTERS(FAB_COUNTER_MEMBER)
#undef FAB_COUNTER_MEMBER
};

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
    struct fconn *c;            /* the connection that issued it (its record waits for this) */
    uint64_t off, len;          /* the chunk of r */
    int abandoned;              /* given up on (on_zombie): already uncounted */
    struct rdop *next, **pprev; /* in the endpoint's reads in flight */
};

/* One object read one-sided into this node's arena. */
/* A chunk of a read that completed before those ahead of it: told as landed once they are. */
struct rchunk {
    uint64_t off, len;
    struct rchunk *next;
};

struct rread {
    struct fconn *c;
    uint8_t *dst;
    uint64_t len, issued, done, raddr, cookie, deadline_ms;
    uint64_t landed;      /* the prefix told as landed (ev->landed), in order */
    struct rchunk *early; /* completed chunks past that prefix */
    int untold;           /* no memory to keep a chunk: nothing more is told */
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
    int stalled;          /* waits for the peer's credits (counted in nstalled) */
    int hello_due;        /* our CONNECT or ACCEPT is still to be sent */
    pid_t peer_pid;       /* its process, for peers on this host (fabric_peer.c); or 0 */
    int peer_exited;      /* that process is gone: nothing is posted to the peer */
    uint8_t *peer_region; /* the first page of its shared-memory region, mapped; or NULL */
    struct sockaddr_storage probe_sa; /* tcp-based providers: the peer's listening address */
    socklen_t probe_len;              /* 0: not probed */
    int probe_fd;                     /* a probe's connect under way, or -1 */
    uint64_t heard_ns;                /* when a message of the peer last arrived (or we dialled) */
    uint32_t probes;                  /* probes made since */
    uint64_t probe_ns;                /* when the last one started */
    uint64_t rbase, rlen, rkey;       /* the peer's arena: base (with FI_MR_VIRT_ADDR) and key */
    int rvirt, rkey_mapped;           /* rkey came from fi_mr_map_raw (unmapped with the record) */
    uint8_t rawkey[FAB_KEY_MAX];      /* the raw key rkey was mapped from */
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
    uint64_t reading;  /* bytes of those that are one-sided reads (FAB_READ_BYTES_PER_CONN) */
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
    uint32_t lease_ms;       /* a one-sided read's lease before its per-byte share (xconfig) */
    uint32_t max_frame;      /* the longest frame a new connection takes (xconfig) */
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
    struct loop_timer backoff; /* armed while the wait fd is set aside (FAB_AGAIN_SPIN_NS) */
    uint64_t again_ns;         /* when the current count of fruitless wake-ups began */
    uint32_t fruitless;        /* fruitless wake-ups since again_ns */
    uint32_t backoff_ms;       /* the current back-off; 0 when none */
    uint64_t backoff_log_ms;
    uint64_t next_cookie;
    char provider[64];
    uint8_t name[FAB_NAME_MAX];
    size_t name_len;
    char address[64 + 2 * FAB_NAME_MAX + 2]; /* what peers connect to: PROVIDER@HEX */
    struct fab_counters stats;
    uint64_t unattributed_log_ms;
    uint64_t active_ns; /* when a completion last came or an operation was last posted */
    uint32_t lent;      /* ranges lent to readers (leases running): peers may be reading */
    uint32_t nstalled;  /* connections waiting for their peer's credits */
    uint64_t stall_ns;  /* when one last started waiting */
    int fault_skip_done, fault_fail_reads;
    uint32_t fault_read_delay_ms;
    struct quirks_shm shm;        /* the shm lock guard and its watchdog (QUIRK_SHM_LOCK) */
    uint64_t peer_exit_ms;        /* when a peer on this host was last found exited */
    uint64_t peers_checked_ms;    /* when fab_peers_check last looked */
    struct loop_timer peer_timer; /* runs it while connections are open */
};

static inline size_t class_size(int cls)
{
    return cls == CL_SMALL ? FAB_SMALL : FAB_LARGE;
}

static inline int fab_err(int rc, const char *what)
{
    return err_set(FERRY_ETRANSFER, "%s: %s", what, fi_strerror(rc < 0 ? -rc : rc));
}

/* fabric_conn.c: connections */
uint16_t fab_random_gen(void);
struct fconn *fab_conn_lookup(struct xlistener *f, uint32_t id);
void fab_conn_reap(struct loop *l, struct loop_timer *t);
void fab_conn_maybe_reap(struct fconn *c);
void fab_range_release(struct fseg *r);
void fab_on_zombie(struct loop *l, struct loop_timer *t);
void fab_conn_shut(struct fconn *c);
void fab_conn_fail_err(struct fconn *c, int err, const char *reason);
void fab_conn_fail(struct fconn *c, const char *reason);
void fab_conn_mark(struct fconn *c);
void fab_push_dirty(struct xlistener *f);
void fab_on_kick(struct loop *l, struct loop_timer *t);
struct fconn *fab_conn_new(struct xlistener *f, fi_addr_t addr, const uint8_t *name, size_t len);
int fab_connect(struct xlistener *f, const char *addr, const struct xconn_events *ev,
                struct xconn **out);
void fab_pause(struct xconn *xc, int paused);
void fab_close(struct xconn *xc);
int fab_drain(struct xconn *xc, void (*fn)(void *arg), void *arg);

/* fabric_peer.c: peers on this host */
/* Our endpoint's name, for providers named by string: our process and pid namespace in it. */
void fab_local_name(char *name, size_t len);
/* The process behind a peer's endpoint name when it is one of ours in our pid namespace; or 0. */
pid_t fab_name_pid(const struct xlistener *f, const uint8_t *name, size_t len);
/* 1 (said once in the log, counted) when c's peer process is known to have exited. */
int fab_peer_exited(struct fconn *c);
/* Removes the shared-memory regions of our daemons whose process has exited. */
void fab_sweep_regions(void);
/* 1 when st is a region file we may rely on: a regular file of our user of at least min bytes. */
int fab_region_file_ok(const struct stat *st, off_t min);
/* Where c's peer can be probed (tcp-based providers), from its endpoint name: only for peers we
 * dial (an address from the directory), never one a stranger's CONNECT names. */
void fab_probe_init(struct fconn *c, const uint8_t *name, size_t len);
/* Drops a probe under way (the connection closes). */
void fab_probe_end(struct fconn *c);
/* Every FAB_PEER_CHECK_MS: fails the connections whose peer is gone (its process exited, or,
 * quiet, its address refuses connections): providers report a peer that dies before it
 * answers, or while we only read from it, late or never. */
void fab_peers_check(struct xlistener *f);
/* Starts the timer that runs fab_peers_check while f has connections. */
void fab_peer_timer_arm(struct xlistener *f);
void fab_on_peer_timer(struct loop *l, struct loop_timer *t);
/* 1 when pid's process is gone: exited, or killed and not yet reaped (a zombie). */
int fab_pid_gone(pid_t pid);
/* Tells the watchdog the peers' processes on this host. */
void fab_peers_watch(struct xlistener *f);

/* fabric_hello.c: the handshake */
int fab_av_get(struct xlistener *f, const uint8_t *name, size_t len, fi_addr_t *out);
/* The address name (a peer's) as text for logs, escaped (common/text.h), into out. */
void fab_printable(struct xlistener *f, const uint8_t *name, size_t len, char *out, size_t n);
int fab_send_hello(struct fconn *c);
void fab_process(struct xlistener *f, struct rbuf *b);

/* fabric_send.c: sending */
void fab_tx_put(struct xlistener *f, struct txop *t);
int fab_post_unsolicited(struct fconn *c, int kind, const uint8_t *payload, size_t len);
void fab_post_close(struct fconn *c);
uint32_t fab_lease_ms(const struct xlistener *f, uint64_t len);
void fab_lease_end(struct lease *ls);
void fab_stall_set(struct fconn *c, int stalled);
void fab_conn_wait(struct fconn *c);
void fab_conn_push(struct fconn *c);
int fab_send_frame(struct xconn *xc, const uint8_t *frame, size_t len);
int fab_send_range(struct xconn *xc, const uint8_t *p, uint64_t len, void *arg);

/* fabric_recv.c: receiving */
void fab_rbuf_post(struct xlistener *f, struct rbuf *b);
void fab_repost_pending(struct xlistener *f);
int fab_recv_into(struct xconn *xc, uint8_t *dst, uint64_t len, void *arg);
void fab_drain_held(struct fconn *c);
void fab_on_message(struct fconn *c, struct rbuf *b);

/* fabric_rdv.c: rendezvous reads */
void fab_on_deadline(struct loop *l, struct loop_timer *t);
void fab_on_rdv(struct fconn *c, const uint8_t *p, size_t n, uint64_t at_ms);
void fab_on_read_pace(struct loop *l, struct loop_timer *t);
void fab_reads_push(struct xlistener *f);
/* Frees a read record and the early chunks it keeps. */
void fab_read_free(struct rread *r);
void fab_read_done(struct xlistener *f, struct rdop *op, int err);

/* fabric_cq.c: completions and progress */
void fab_complete(struct xlistener *f, void *ctx, size_t len, int err);
int fab_progress(struct xlistener *f);
void fab_on_cq(struct loop *l, struct loop_watch *w, uint32_t events);
int fab_before_wait(struct loop *l, void *arg);
void fab_on_poll(struct loop *l, struct loop_timer *t);
void fab_on_backoff(struct loop *l, struct loop_timer *t);

#endif
