#include "loop/loop.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/cpuload.h"
#include "common/err.h"

#define LOOP_MAX_EVENTS 256

static _Thread_local int loop_thread;

int loop_is_loop_thread(void)
{
    return loop_thread;
}

int loop_init(struct loop *l)
{
    memset(l, 0, sizeof(*l));
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0)
        return err_sys("epoll_create1");
    loop_thread = 1;
    return 0;
}

void loop_destroy(struct loop *l)
{
    if (l->epfd >= 0)
        close(l->epfd);
    free(l->heap);
    l->heap = NULL;
    l->epfd = -1;
}

static uint32_t to_epoll(uint32_t flags)
{
    return (flags & LOOP_READ ? EPOLLIN : 0) | (flags & LOOP_WRITE ? EPOLLOUT : 0);
}

static uint32_t from_epoll(uint32_t events)
{
    return (events & EPOLLIN ? LOOP_READ : 0) | (events & EPOLLOUT ? LOOP_WRITE : 0) |
           (events & (EPOLLHUP | EPOLLERR) ? LOOP_HANGUP : 0);
}

static int watch_ctl(struct loop *l, int op, struct loop_watch *w)
{
    struct epoll_event ev = {.events = to_epoll(w->events), .data.ptr = w};
    if (epoll_ctl(l->epfd, op, w->fd, &ev) < 0)
        return err_sys("epoll_ctl");
    return 0;
}

int loop_watch_add(struct loop *l, struct loop_watch *w, int fd, uint32_t events, loop_fd_fn *fn,
                   void *arg)
{
    w->fd = fd;
    w->events = events;
    w->fn = fn;
    w->arg = arg;
    return watch_ctl(l, EPOLL_CTL_ADD, w);
}

int loop_watch_mod(struct loop *l, struct loop_watch *w, uint32_t events)
{
    if (w->events == events)
        return 0;
    w->events = events;
    return watch_ctl(l, EPOLL_CTL_MOD, w);
}

void loop_watch_del(struct loop *l, struct loop_watch *w)
{
    if (w->fd >= 0)
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
}

uint64_t loop_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- timer heap ---- */

static void heap_set(struct loop *l, size_t i, struct loop_timer *t)
{
    l->heap[i] = t;
    t->heap_index = i;
}

static void heap_up(struct loop *l, size_t i)
{
    struct loop_timer *t = l->heap[i];
    while (i > 0 && l->heap[(i - 1) / 2]->deadline_ms > t->deadline_ms) {
        heap_set(l, i, l->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(l, i, t);
}

static void heap_down(struct loop *l, size_t i)
{
    struct loop_timer *t = l->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->heap_len)
            break;
        if (c + 1 < l->heap_len && l->heap[c + 1]->deadline_ms < l->heap[c]->deadline_ms)
            c++;
        if (l->heap[c]->deadline_ms >= t->deadline_ms)
            break;
        heap_set(l, i, l->heap[c]);
        i = c;
    }
    heap_set(l, i, t);
}

void loop_timer_init(struct loop_timer *t, loop_timer_fn *fn, void *arg)
{
    t->deadline_ms = 0;
    t->heap_index = SIZE_MAX;
    t->fn = fn;
    t->arg = arg;
}

int loop_timer_start(struct loop *l, struct loop_timer *t, uint64_t deadline_ms)
{
    loop_timer_stop(l, t);
    if (l->heap_len == l->heap_cap) {
        size_t cap = l->heap_cap ? l->heap_cap * 2 : 64;
        struct loop_timer **h = realloc(l->heap, cap * sizeof(*h));
        if (!h)
            return err_set(FERRY_ENOMEM, "timer heap");
        l->heap = h;
        l->heap_cap = cap;
    }
    t->deadline_ms = deadline_ms;
    heap_set(l, l->heap_len++, t);
    heap_up(l, t->heap_index);
    return 0;
}

void loop_timer_stop(struct loop *l, struct loop_timer *t)
{
    size_t i = t->heap_index;

    if (i >= l->heap_len || l->heap[i] != t) /* not armed (SIZE_MAX), or never initialised */
        return;
    t->heap_index = SIZE_MAX;
    if (i == --l->heap_len)
        return;
    heap_set(l, i, l->heap[l->heap_len]);
    heap_down(l, i);
    heap_up(l, l->heap[i]->heap_index);
}

static int next_timeout(const struct loop *l)
{
    uint64_t now, d;

    if (l->busy)
        return 0;
    if (!l->heap_len)
        return -1;
    now = loop_now_ms();
    d = l->heap[0]->deadline_ms;
    return d <= now ? 0 : (int)(d - now > 60000 ? 60000 : d - now);
}

void loop_fire_due(struct loop *l)
{
    uint64_t now = loop_now_ms();

    while (l->heap_len && l->heap[0]->deadline_ms <= now) {
        struct loop_timer *t = l->heap[0];
        loop_timer_stop(l, t);
        t->fn(l, t);
    }
}

/* The wait before the next turn: none while busy-polling after recent events, as long as the
 * machine has a CPU for every runnable task, yielding between polls so that a client sharing
 * this CPU is not kept from running. */
static int wait_ms(struct loop *l)
{
    int timeout;

    l->turns++;
    if ((l->before_wait && l->before_wait(l, l->before_wait_arg)) || l->busy) {
        l->busy_turns++;
        return 0;
    }
    timeout = next_timeout(l);

    if (timeout != 0 && l->busy_poll_ns && clock_mono_ns() - l->last_event_ns < l->busy_poll_ns &&
        cpuload_can_poll()) {
        sched_yield();
        return 0;
    }
    if (timeout != 0 && l->before_sleep &&
        (timeout = l->before_sleep(l, l->before_sleep_arg, timeout)) == 0)
        l->busy_turns++;
    return timeout;
}

int loop_run(struct loop *l)
{
    struct epoll_event events[LOOP_MAX_EVENTS];

    while (!l->stop) {
        int n = epoll_wait(l->epfd, events, LOOP_MAX_EVENTS, wait_ms(l));
        if (n < 0 && errno != EINTR)
            return err_sys("epoll_wait");
        if (n > 0 && l->busy_poll_ns)
            l->last_event_ns = clock_mono_ns();
        for (int i = 0; i < n; i++) {
            struct loop_watch *w = events[i].data.ptr;
            w->fn(l, w, from_epoll(events[i].events));
        }
        loop_fire_due(l);
        if (l->after_turn)
            l->after_turn(l, l->after_turn_arg);
    }
    return 0;
}

void loop_stop(struct loop *l)
{
    l->stop = 1;
}
