/* loop_driver.c - running an event loop until a condition holds (loop_driver.h). */
#include "loop_driver.h"

struct waiter {
    struct loop_timer timer;
    condition_fn *cond;
    void *arg;
    uint64_t deadline_ms;
    int met;
};

static void waiter_tick(struct loop *l, struct loop_timer *t)
{
    struct waiter *w = t->arg;

    w->met = w->cond(w->arg);
    if (w->met || loop_now_ms() >= w->deadline_ms)
        loop_stop(l);
    else
        loop_timer_start(l, t, loop_now_ms() + 5);
}

int run_until(struct loop *l, condition_fn *cond, void *arg, uint64_t ms)
{
    struct waiter w = {.cond = cond, .arg = arg, .deadline_ms = loop_now_ms() + ms};

    loop_timer_init(&w.timer, waiter_tick, &w);
    if (loop_timer_start(l, &w.timer, loop_now_ms()) < 0)
        return 0;
    l->stop = 0;
    if (loop_run(l) < 0)
        w.met = 0;
    loop_timer_stop(l, &w.timer);
    return w.met;
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

void run_for(struct loop *l, uint64_t ms)
{
    run_until(l, never, NULL, ms);
}
