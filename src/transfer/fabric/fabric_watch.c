/*
 * fabric_watch.c - a watchdog over the provider calls that take a peer's shared-memory lock.
 *
 * Why: the lock guard (fabric_peer.c) looks at a peer's lock before each post, but a peer can
 * take its lock and be killed between our look and the provider taking it; the provider
 * (libfabric 1.17 shm) then spins inside fi_tsendv or fi_read for ever, holding our loop. CI
 * and a kill loop under a CPU hog saw it (it_cluster_kills_shm, a hello to a holder killed
 * 2 ms into a fetch). Nothing on the loop's thread can end that spin, so a thread of its own
 * watches: a call that has run past FAB_WATCH_STUCK_MS, on a peer whose lock is held and
 * whose process is gone (exited, or killed and not yet reaped), has its peer's lock freed.
 * The holder is dead; a live third process holding that dead peer's lock at the same instant
 * could only disorder queues nobody reads any more.
 *
 * Locking: w->mu guards since_ns, lock, pid and freed. The loop's thread sets them before a
 * call and clears them after it; the watchdog reads the lock (and may free it) only under
 * w->mu while since_ns is set, that is while the loop is inside the call, so the mapping the
 * lock lies in (the connection's peer_region, unmapped on the loop's thread) is still there.
 * stop is set under w->mu and signalled on w->cv; running and entered are the loop's alone.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "transfer/fabric/fabric_int.h"

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

/* Under w->mu: frees the watched lock if the loop is stuck on it and its holder is gone. */
static void look(struct fab_watch *w)
{
    if (!w->since_ns || !w->lock || now_ns() - w->since_ns < FAB_WATCH_STUCK_MS * 1000000ull)
        return;
    if (*w->lock == 1 || !fab_pid_gone(w->pid)) /* x86-64 glibc: 1 is free */
        return;
    atomic_store((_Atomic int *)w->lock, 1);
    w->freed++;
}

static void *watch_main(void *arg)
{
    struct fab_watch *w = arg;

    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec until = deadline_in(FAB_PEER_CHECK_MS);
        look(w);
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int fab_watch_start(struct fab_watch *w)
{
    pthread_condattr_t ca;
    sigset_t all, old;
    int rc;

    if (w->running)
        return 0;
    if (pthread_mutex_init(&w->mu, NULL))
        return -1;
    if (pthread_condattr_init(&ca))
        goto destroy_mu;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) || pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc)
        goto destroy_mu;
    w->stop = 0;
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
    return -1;
}

void fab_watch_stop(struct fab_watch *w)
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

void fab_watch_enter(struct fab_watch *w, volatile int *lock, pid_t pid)
{
    if (!w->running || !lock || pid <= 0)
        return;
    w->entered = 1;
    pthread_mutex_lock(&w->mu);
    w->lock = lock;
    w->pid = pid;
    w->since_ns = now_ns();
    pthread_mutex_unlock(&w->mu);
}

uint32_t fab_watch_leave(struct fab_watch *w)
{
    uint32_t freed;

    if (!w->entered)
        return 0;
    w->entered = 0;
    pthread_mutex_lock(&w->mu);
    w->since_ns = 0;
    w->lock = NULL;
    freed = w->freed;
    w->freed = 0;
    pthread_mutex_unlock(&w->mu);
    return freed;
}
