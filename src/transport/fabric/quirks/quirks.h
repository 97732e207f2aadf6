/*
 * quirks.h - the fabric transport's defences against bugs of the libfabric it runs on: the one
 * interface to them. The rest of the fabric code asks quirks_enabled(QUIRK_x) or calls the hooks
 * below (each a no-op while its workaround is off), and never reads a provider's private memory
 * layout itself: that lives in quirk_shmlock.c alone.
 *
 * quirks_init(fi_version(), provider) sets, once per endpoint, which workarounds are on: those
 * the running libfabric and provider need (quirks_needed, the gates below), less or plus what
 * FERRY_FABRIC_QUIRKS says: a comma-separated list of names, "-name" off, "+name" on even where
 * the gate says it is not needed, "none" all off (e.g. FERRY_FABRIC_QUIRKS=-watchdog). Each
 * counts how many times it acted, reported with the transport's counters (fabric_quirk_NAME,
 * and fabric_quirk_NAME_on, 1 while on).
 *
 * The workarounds (versions are libfabric releases; evidence from the ofiwg/libfabric history,
 * no upstream issue was found for any of them):
 *
 * recv (QUIRK_RECV, quirk_recv.c) - tcp providers, every release so far.
 *   Bug: the tcp provider reads a peer's connection request on its own listening port with a
 *   recv on a socket accept() left blocking, inside fi_cq_read and fi_trywait (1.17: tcpx
 *   rx_cm_data; 1.18 on: xnet_handle_conn -> xnet_recv_cm_msg / xnet_handle_cm_msg). A host
 *   that sends a valid header and then nothing holds the whole daemon in that recv.
 *   Fix: none. ofi_sockapi_accept_socket still calls plain accept() and xnet_handle_cm_msg
 *   still reads the announced data with a blocking recv in v2.5.0 and on master (v2.6.0rc1,
 *   af8ddbe92); 2.2's 1f236dcfa ("Enable keepalive during CM exchange") only covers the active
 *   side. Gate: provider name contains "tcp", any version, and only in a program that links the
 *   interposer (ferryd): elsewhere it is reported off.
 *
 * errno (QUIRK_ERRNO, quirks.c) - tcp providers before 2.2.
 *   Bug: on a short read or EOF of a connection request the provider returns errno as it found
 *   it; a stale EAGAIN (left by our own last non-blocking call) keeps the socket, readable for
 *   ever, and the loop spins. We clear errno before fi_cq_read and fi_trywait.
 *   Fix: 86ae6d745 "prov/tcp: handle the error correctly", first in v2.2.0.
 *   Gate: provider name contains "tcp", FI_VERSION < 2.2. Acted: a stale EAGAIN was cleared.
 *
 * shm_lock (QUIRK_SHM_LOCK, quirk_shmlock.c) - shm before 2.5.
 *   Bug: each shm endpoint's region holds a pthread spin lock shared between processes; a
 *   daemon killed inside it leaves it held for ever, and the next sender to it (or its owner's
 *   next completion read) spins without end, holding our loop. 1.17 holds it around every
 *   operation and progress; 017f27141 ("prov/shm: Optimize locking", v1.18.0) moved the
 *   command queue to an atomic queue but kept the region lock around the inject and SAR buffer
 *   pools, taken by senders (smr_get_txbuf on the peer) and by the owner's progress
 *   (smr_release_txbuf on its own region) through v2.4.0.
 *   Fix: 488dc58b5 "prov/shm: new shm architecture", first in v2.5.0: the region has no lock.
 *   Gate: provider "shm", FI_VERSION < 2.5; also the region must look as expected (our pid at
 *   offset 4, its own address followed by a free x86-64 glibc spin lock), else it stays off.
 *   Acted: a post or completion read put off while a lock was held, or our lock freed.
 *
 * watchdog (QUIRK_WATCHDOG, quirk_watch.c) - as shm_lock, which it needs.
 *   Bug: the same lock, taken by a process killed between our look and the provider's call:
 *   a thread of its own frees a lock a call spins on once its holder is gone.
 *   Fix and gate: as shm_lock (on only while shm_lock found the lock). Acted: a lock freed.
 */
#ifndef FERRY_FABRIC_QUIRKS_H
#define FERRY_FABRIC_QUIRKS_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport/transport.h"

/* X(id, name, help): the workarounds, in the order they are reported. */
#define QUIRKS(X)                                                                                  \
    X(QUIRK_RECV, recv, "tcp provider reads on the loop's thread that would block: refused")       \
    X(QUIRK_ERRNO, errno, "stale errno values cleared before a tcp provider call")                 \
    X(QUIRK_SHM_LOCK, shm_lock, "shm posts and polls put off for a held region lock, or freed")    \
    X(QUIRK_WATCHDOG, watchdog, "shm region locks of killed processes freed under a stuck call")

enum quirk {
#define QUIRK_ENUM(id, name, help) id,
    QUIRKS(QUIRK_ENUM)
#undef QUIRK_ENUM
        QUIRK_N
};

#define QUIRK_BIT(q) (1u << (q))

/* The workarounds libfabric version (FI_VERSION(major, minor), as fi_version() says) and
 * provider (its fabric_attr->prov_name) need: a mask of QUIRK_BIT. */
uint32_t quirks_needed(uint32_t version, const char *provider);
/* mask changed by spec (FERRY_FABRIC_QUIRKS' syntax; NULL or "": unchanged) into *out: 0, or
 * FERRY_EINVAL (nothing changed) for a name it does not know. Dependencies are applied: the
 * watchdog is off without shm_lock. */
int quirks_switch(uint32_t mask, const char *spec, uint32_t *out);
/* Sets the workarounds on for this process: needed, switched by $FERRY_FABRIC_QUIRKS (an
 * invalid one is logged and ignored), recv dropped where the interposer is not linked. Logs
 * the result. Returns the mask. */
uint32_t quirks_init(uint32_t version, const char *provider);
/* Whether q is on (any thread). */
int quirks_enabled(enum quirk q);
/* Turns q off: a workaround that finds it cannot act here (the shm region not laid out as the
 * guard knows), so that its gauge says it is off. */
void quirks_off(enum quirk q);
const char *quirks_name(enum quirk q);
/* Whether this program links the recv interposer (ferryd does). */
int quirks_recv_linked(void);
/* Counts that q acted n times (any thread); how many times it did. */
void quirks_acted(enum quirk q, uint64_t n);
uint64_t quirks_count(enum quirk q);
/* Reports fabric_quirk_NAME (times acted) and fabric_quirk_NAME_on for each workaround. */
void quirks_report(xcounter_fn *fn, void *arg);
/* QUIRK_ERRNO: before a provider call that may read a connection request (fi_cq_read,
 * fi_trywait): clears errno. */
void quirks_before_call(void);

struct xlistener;
struct fconn;

/* The shm lock guard (quirk_shmlock.c). Each is a no-op while QUIRK_SHM_LOCK is off. */
/* A lock seen held at each look since since_ms (0: not seen held), looks times. */
struct quirks_held {
    uint64_t since_ms;
    uint32_t looks;
};

/* The watchdog of provider calls stuck in the lock of a killed process (quirk_watch.c, which
 * says who may touch what). */
#define QUIRKS_WATCH_PEERS 64u
struct quirks_watch {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running; /* the loop's thread only */
    int stop;
    volatile int *own;                      /* our region's lock, watched in every call */
    uint64_t since_ms;                      /* when the loop's call began; 0: not in one */
    volatile int *lock;                     /* the call's peer's lock, or NULL */
    pid_t pid;                              /* that peer's process, or 0 */
    struct quirks_held lock_held, own_held; /* in this call */
    pid_t peers[QUIRKS_WATCH_PEERS];        /* the peers' processes on this host, as last told */
    uint32_t npeers;
    uint64_t exit_ms; /* when a process on this host was last found gone */
    uint32_t freed;
};

/* An endpoint's guard: where a region's lock lies in its first page (0: the guard is off), our
 * own region's lock, and since when it has been seen held; the watchdog, started with it. */
struct quirks_shm {
    uint32_t lock_off;
    volatile int *own_lock;
    struct quirks_held own_held;
    struct quirks_watch watchdog;
};

/* Finds where the provider keeps a region's lock, from our own region (f's name); leaves the
 * guard off when the layout is not the one it knows; starts the watchdog when it is on. */
void quirks_shm_init(struct xlistener *f);
/* After the endpoint's last provider call. */
void quirks_shm_stop(struct xlistener *f);
/* Maps the first page of c's peer's region (guard on, peer on this host); unmaps it. */
void quirks_peer_map(struct fconn *c, const uint8_t *name, size_t len);
void quirks_peer_unmap(struct fconn *c);
/* 1 when posting to c's peer now could spin on its region's lock: try again later. */
int quirks_peer_locked(struct fconn *c);
/* 1 when our region's lock is held: skip reading completions this turn. A lock held past
 * FAB_LOCK_STUCK_MS while a peer was found exited (its holder was killed inside) is freed. */
int quirks_own_locked(struct xlistener *f);
/* Around a provider call that may take c's peer's region lock (c NULL: none) or ours: the
 * watchdog may free either while the call is stuck in it; the end counts and logs it. */
void quirks_call_begin(struct xlistener *f, struct fconn *c);
void quirks_call_end(struct xlistener *f);
/* Tells the watchdog the peers' processes on this host, or that one was found gone. */
void quirks_watch_peers(struct xlistener *f, const pid_t *pids, uint32_t n);
void quirks_watch_exited(struct xlistener *f);

/* Shared by quirk_shmlock.c and quirk_watch.c (and their tests). */
/* Notes a look at lock at now_ms in h: 1 when it is held. */
int quirks_held_look(struct quirks_held *h, volatile int *lock, uint64_t now_ms);
/* 1 when a lock h saw held was abandoned by a holder that died inside it: held for
 * FAB_LOCK_STUCK_MS over at least min_looks looks, while a process on this host was found gone
 * (at exit_ms; 0: none was) from around when it was first seen held. */
int quirks_held_abandoned(const struct quirks_held *h, uint32_t min_looks, uint64_t exit_ms,
                          uint64_t now_ms);
/* The watchdog thread: 0, or a negative errno. own: our region's lock. */
int quirks_watch_start(struct quirks_watch *w, volatile int *own);
void quirks_watch_stop(struct quirks_watch *w);
void quirks_watch_set_peers(struct quirks_watch *w, const pid_t *pids, uint32_t n);
void quirks_watch_note_exit(struct quirks_watch *w);
void quirks_watch_enter(struct quirks_watch *w, volatile int *lock, pid_t pid);
/* Ends what quirks_watch_enter began: how many locks the watchdog freed meanwhile. */
uint32_t quirks_watch_leave(struct quirks_watch *w);

#endif
