/*
 * loop.h - the daemon's event loop: epoll for file descriptors (level-triggered) and a binary
 * heap of timers, on one thread. Watches and timers are owned and embedded by their users;
 * the loop only links them. Every module of the daemon that waits for something (sessions, the
 * directory, the transports, the engine) runs on it; it depends on nothing but src/common.
 */
#ifndef FERRY_LOOP_H
#define FERRY_LOOP_H

#include <stddef.h>
#include <stdint.h>

struct loop;
struct loop_watch;
struct loop_timer;

/* Readiness of a watch, the loop's own flags: READ and WRITE are asked for and reported;
 * HANGUP (an error or a hang-up of the peer) is reported whether asked for or not. */
enum loop_flags { LOOP_READ = 1u, LOOP_WRITE = 2u, LOOP_HANGUP = 4u };

typedef void loop_fd_fn(struct loop *l, struct loop_watch *w, uint32_t events);
typedef void loop_timer_fn(struct loop *l, struct loop_timer *t);
/* Runs once per turn after the events and timers of the turn: deferred frees go here, so that
 * a callback may close what a later event of the same turn refers to. */
typedef void loop_turn_fn(struct loop *l, void *arg);
/* Runs before every wait for events; returns nonzero when it has work to do at once (then the
 * wait does not sleep). A completion queue whose wait fd is only trustworthy after a check
 * (libfabric's fi_trywait) goes here. */
typedef int loop_poll_fn(struct loop *l, void *arg);
/* Runs before a wait that would sleep (timeout_ms > 0, or -1: without end); returns the timeout
 * to sleep instead (0: do not). Whoever must be told that the loop sleeps goes here (clients'
 * rings of puts, which then kick it). */
typedef int loop_sleep_fn(struct loop *l, void *arg, int timeout_ms);

struct loop_watch {
    int fd;
    uint32_t events; /* enum loop_flags, as registered */
    loop_fd_fn *fn;
    void *arg;
};

struct loop_timer {
    uint64_t deadline_ms; /* CLOCK_MONOTONIC */
    size_t heap_index;    /* position in the heap, SIZE_MAX when not armed */
    loop_timer_fn *fn;
    void *arg;
};

struct loop {
    int epfd;
    int stop;
    int busy; /* work is pending: the next wait must not sleep */
    /* Waits for events, and those that did not sleep because work was pending (busy, or the
     * before_wait hook): a loop that spins shows as busy_turns growing with nothing to do. */
    uint64_t turns, busy_turns;
    /* Poll instead of sleeping for this long after the last event (0: never), while the
     * machine is not oversubscribed (common/cpuload.h): a sleeping thread is slow to wake on
     * virtual machines, and requests come in bursts. */
    uint64_t busy_poll_ns;
    uint64_t last_event_ns;
    struct loop_timer **heap;
    size_t heap_len, heap_cap;
    loop_turn_fn *after_turn;
    void *after_turn_arg;
    loop_poll_fn *before_wait; /* one, or NULL */
    void *before_wait_arg;
    loop_sleep_fn *before_sleep; /* one, or NULL */
    void *before_sleep_arg;
};

/* The thread that calls loop_init runs the loop: nothing on it may block (a blocking recv that
 * libfabric makes on it is turned non-blocking: transport/fabric/quirks/quirk_recv.c). */
int loop_init(struct loop *l);
/* Whether the calling thread is one that initialised a loop. */
int loop_is_loop_thread(void);
void loop_destroy(struct loop *l);

int loop_watch_add(struct loop *l, struct loop_watch *w, int fd, uint32_t events, loop_fd_fn *fn,
                   void *arg);
int loop_watch_mod(struct loop *l, struct loop_watch *w, uint32_t events);
void loop_watch_del(struct loop *l, struct loop_watch *w);

uint64_t loop_now_ms(void);
void loop_timer_init(struct loop_timer *t, loop_timer_fn *fn, void *arg);
/* Arms (or re-arms) t for deadline_ms. FERRY_ENOMEM when the heap cannot grow. */
int loop_timer_start(struct loop *l, struct loop_timer *t, uint64_t deadline_ms);
void loop_timer_stop(struct loop *l, struct loop_timer *t);
static inline int loop_timer_armed(const struct loop_timer *t)
{
    return t->heap_index != SIZE_MAX;
}

/* Runs the timers that are due now (closing code uses it to let deferred frees happen). */
void loop_fire_due(struct loop *l);

/* Runs until loop_stop(). Returns 0, or FERRY_ESYS if epoll_wait fails. */
int loop_run(struct loop *l);
void loop_stop(struct loop *l);

#endif
