/*
 * engine_conn.c - what the holder's and the puller's connections share, below both: the stall
 * watchdogs' rate, the release of objects a closed connection was moving, and this node's
 * incarnation. It calls no other file of the engine.
 */
#include "transfer/engine_int.h"

/* Lets go of an object a closed connection was moving, once the transport says nothing of
 * that connection can still touch it (drain): a partial object we received is aborted (a
 * one-sided read may still be landing in it), an object we lent is unpinned (a peer may still
 * be reading it until its lease ends). */
struct release {
    struct engine *e;
    struct object *o;
    int abort;
    int broken; /* a pin broken for a local create (engine_break_pins), which waits for it */
};

static void on_drained(void *arg)
{
    struct release *r = arg;
    struct store *st = r->e->store;

    if (r->abort)
        store_abort(st, r->o);
    else
        store_unref(st, r->o);
    if (r->broken && --r->e->breaks_draining == 0 && st->events.room)
        st->events.room(st->events.ctx); /* the creates that wait for that room try again */
    free(r);
}

void eng_watch_start(struct engine *e, struct watch_rate *w, uint64_t value)
{
    if (w->timer.heap_index != SIZE_MAX)
        return;
    w->bytes = value;
    w->last_ms = w->window_ms = loop_now_ms();
    w->window = 0;
    loop_timer_start(e->loop, &w->timer, w->last_ms + e->check_ms);
}

void eng_watch_stop(struct engine *e, struct watch_rate *w)
{
    loop_timer_stop(e->loop, &w->timer);
}

uint64_t eng_watch_idle(const struct engine *e, struct watch_rate *w, uint64_t value,
                        uint64_t *rate)
{
    uint64_t now = loop_now_ms();

    if (value != w->bytes) {
        w->window += value - w->bytes;
        w->bytes = value;
        w->last_ms = now;
    }
    *rate = UINT64_MAX;
    if (now - w->window_ms >= e->timers.stall_ms) {
        *rate = w->window * 1000 / (now - w->window_ms);
        w->window = 0;
        w->window_ms = now;
    }
    return now - w->last_ms;
}

uint64_t eng_incarnation(const struct engine *e)
{
    return e->dir ? directory_incarnation(e->dir) : 0;
}

void eng_release_after(struct engine *e, struct xconn *c, struct object *o, int abort)
{
    struct release *r = malloc(sizeof(*r));

    if (r) {
        *r = (struct release){.e = e, .o = o, .abort = abort, .broken = e->breaking};
        if (c->type->drain(c, on_drained, r) == 0) {
            e->breaks_draining += r->broken;
            return; /* cppcheck-suppress memleak ; r is drain's now: on_drained frees it */
        }
        free(r);
    }
    if (c->type->flags & XPORT_ONE_SIDED) {
        /* A one-sided read may still land: keeping it is safe, letting it go is not. */
        log_error("out of memory: keeping an object a peer may still be reading or writing");
        return;
    }
    if (abort)
        store_abort(e->store, o);
    else
        store_unref(e->store, o);
}
