/*
 * quirk_watch.c - QUIRK_WATCHDOG (quirks.h): a watchdog over the provider calls that may spin
 * on a shm region's lock (shm before libfabric 2.5).
 *
 * Why: the lock guard (quirk_shmlock.c) looks at the locks before each call, but a process can
 * take a lock and be killed between our look and the provider taking it; the provider
 * (libfabric shm before 2.5) then spins inside the call for ever, holding our loop. A post or read
 * spins on the peer's lock (fi_tsendv, fi_read); a completion read on our own region's lock
 * (fi_cq_read). CI and a kill loop under a CPU hog saw the first (it_cluster_kills_shm, a
 * hello to a holder killed 2 ms into a fetch). Nothing on the loop's thread can end that spin,
 * so a thread of its own watches the call under way, and frees a lock that stays held:
 * - the peer's lock, after FAB_WATCH_STUCK_MS, when that peer's process is gone (exited, or
 *   killed and not yet reaped): it died inside it;
 * - any watched lock (the peer's, when a third process holds it, or ours, whose holder cannot
 *   be named), seen held at every look for FAB_LOCK_STUCK_MS while a process on this host was
 *   found gone from around the time it was first seen held: the rule quirks_own_locked keeps.
 * A live holder could be let in with another then (one stalled for 2 s in a 2-byte critical
 * section while a peer died); that is the trade for a loop that never ends.
 *
 * Locking: w->mu guards everything below but thread and running, which are the loop's. The
 * loop's thread sets the call's fields before a call and clears them after it; the watchdog
 * reads or frees the locks only under w->mu while since_ms is set, that is while the
 * loop is inside the call, so the mappings they lie in (the connection's peer_region, our
 * region, both unmapped on the loop's thread) are there. The watchdog looks every
 * FAB_PEER_CHECK_MS, connections or not: a completion read spins on our lock before any
 * connection of ours exists (a peer's first message), and a call signalling a sleeping
 * watchdog would cost a wake-up per call; the shm daemon polls every millisecond anyway.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "transport/fabric/fabric_int.h"

#define MS (1000000ull)
/* Looks of a watchdog that may be starved of the CPU: held "at every look" needs many. */
#define WATCH_MIN_LOOKS (FAB_LOCK_STUCK_MS / FAB_PEER_CHECK_MS / 2)

/* CLOCK_MONOTONIC in ms, the clock pthread_cond_timedwait is set to below. */
static struct timespec deadline_in(uint32_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

/* Under w->mu, once a call is stuck: a peer process found gone is noted in exit_ms. */
static void look_at_peers(struct quirks_watch *w, uint64_t now_ms)
{
    for (uint32_t i = 0; i < w->npeers; i++)
        if (fab_pid_gone(w->peers[i]))
            w->exit_ms = now_ms;
}

/* Under w->mu: frees lock (held by pid's process, 0: not known) by the rules above. */
static void free_if_dead(struct quirks_watch *w, volatile int *lock, pid_t pid,
                         struct quirks_held *h, uint64_t now_ms)
{
    if (!quirks_held_look(h, lock, now_ms))
        return;
    if (!(pid > 0 && fab_pid_gone(pid)) &&
        !quirks_held_abandoned(h, WATCH_MIN_LOOKS, w->exit_ms, now_ms))
        return;
    atomic_store((_Atomic int *)lock, 1);
    *h = (struct quirks_held){0};
    w->freed++;
}

static void look(struct quirks_watch *w)
{
    uint64_t now_ms = clock_mono_ns() / MS;

    if (!w->since_ms || now_ms - w->since_ms < FAB_WATCH_STUCK_MS)
        return;
    look_at_peers(w, now_ms);
    if (w->lock)
        free_if_dead(w, w->lock, w->pid, &w->lock_held, now_ms);
    if (w->own)
        free_if_dead(w, w->own, 0, &w->own_held, now_ms);
}

static void *watch_main(void *arg)
{
    struct quirks_watch *w = arg;

    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec until = deadline_in(FAB_PEER_CHECK_MS);
        look(w);
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int quirks_watch_start(struct quirks_watch *w, volatile int *own)
{
    pthread_condattr_t ca;
    sigset_t all, old;
    int rc;

    if (w->running)
        return 0;
    if ((rc = pthread_mutex_init(&w->mu, NULL)))
        return -rc;
    if ((rc = pthread_condattr_init(&ca)))
        goto destroy_mu;
    if (!(rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)))
        rc = pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc)
        goto destroy_mu;
    w->stop = 0;
    w->own = own;
    sigfillset(&all); /* signals are the loop's */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, watch_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc)
        goto destroy_cv;
    w->running = 1;
    return 0;

destroy_cv:
    pthread_cond_destroy(&w->cv);
destroy_mu:
    pthread_mutex_destroy(&w->mu);
    return -rc;
}

void quirks_watch_stop(struct quirks_watch *w)
{
    if (!w->running)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->running = 0;
}

void quirks_watch_set_peers(struct quirks_watch *w, const pid_t *pids, uint32_t n)
{
    if (!w->running)
        return;
    pthread_mutex_lock(&w->mu);
    w->npeers = n < QUIRKS_WATCH_PEERS ? n : QUIRKS_WATCH_PEERS;
    memcpy(w->peers, pids, w->npeers * sizeof(*pids));
    pthread_mutex_unlock(&w->mu);
}

void quirks_watch_note_exit(struct quirks_watch *w)
{
    if (!w->running)
        return;
    pthread_mutex_lock(&w->mu);
    w->exit_ms = clock_mono_ns() / MS;
    pthread_mutex_unlock(&w->mu);
}

void quirks_watch_enter(struct quirks_watch *w, volatile int *lock, pid_t pid)
{
    if (!w->running)
        return;
    pthread_mutex_lock(&w->mu);
    w->lock = lock;
    w->pid = pid;
    w->lock_held = w->own_held = (struct quirks_held){0};
    w->since_ms = clock_mono_ns() / MS;
    pthread_mutex_unlock(&w->mu);
}

uint32_t quirks_watch_leave(struct quirks_watch *w)
{
    uint32_t freed;

    if (!w->running)
        return 0;
    pthread_mutex_lock(&w->mu);
    w->since_ms = 0;
    w->lock = NULL;
    freed = w->freed;
    w->freed = 0;
    pthread_mutex_unlock(&w->mu);
    return freed;
}
