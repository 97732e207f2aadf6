/* Unit tests of the event loop (loop/loop.c): timers in deadline order, readiness flags of
 * watches (read, write, hang-up), interest changes, the per-turn and before-wait hooks. Every
 * run is bounded by a timer that stops the loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "loop/loop.h"

struct record {
    int order[8];
    int n;
};

struct tagged_timer {
    struct loop_timer t;
    struct record *r;
    int tag;
};

static void on_tagged(struct loop *l, struct loop_timer *t)
{
    struct tagged_timer *tt = (struct tagged_timer *)t;
    tt->r->order[tt->r->n++] = tt->tag;
}

static void on_stop(struct loop *l, struct loop_timer *t)
{
    loop_stop(l);
}

/* Arms a timer that stops the loop after ms: the bound of every run below. */
static void stop_after(struct loop *l, struct loop_timer *t, uint64_t ms)
{
    loop_timer_init(t, on_stop, NULL);
    assert_int_equal(loop_timer_start(l, t, loop_now_ms() + ms), 0);
}

static void test_timers_fire_in_deadline_order(void **state)
{
    struct loop l;
    struct record r = {0};
    struct tagged_timer t[4];
    struct loop_timer stop;
    const int delays[4] = {30, 10, 20, 40};

    assert_int_equal(loop_init(&l), 0);
    for (int i = 0; i < 4; i++) {
        t[i].r = &r;
        t[i].tag = i;
        loop_timer_init(&t[i].t, on_tagged, NULL);
        assert_int_equal(loop_timer_start(&l, &t[i].t, loop_now_ms() + (uint64_t)delays[i]), 0);
    }
    loop_timer_stop(&l, &t[3].t); /* a stopped timer never fires */
    assert_int_equal(loop_timer_start(&l, &t[2].t, loop_now_ms() + 5), 0); /* re-armed earlier */
    stop_after(&l, &stop, 100);
    assert_int_equal(loop_run(&l), 0);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.order[0], 2);
    assert_int_equal(r.order[1], 1);
    assert_int_equal(r.order[2], 0);
    loop_destroy(&l);
}

struct watched {
    struct loop_watch w;
    uint32_t seen; /* every flag reported */
    int calls;
    int stop_on; /* stop the loop once this flag is seen */
};

static void on_watch(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct watched *x = (struct watched *)w;
    char buf[16];

    x->seen |= events;
    x->calls++;
    if (events & LOOP_READ)
        (void)!read(w->fd, buf, sizeof(buf));
    if (events & x->stop_on)
        loop_stop(l);
}

static void test_read_write_and_hangup_flags(void **state)
{
    struct loop l;
    struct watched x = {.stop_on = LOOP_READ};
    struct loop_timer stop;
    int sv[2];

    assert_int_equal(loop_init(&l), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(loop_watch_add(&l, &x.w, sv[0], LOOP_READ, on_watch, NULL), 0);
    assert_int_equal(write(sv[1], "x", 1), 1);
    stop_after(&l, &stop, 2000);
    assert_int_equal(loop_run(&l), 0);
    assert_true(x.seen & LOOP_READ);
    assert_false(x.seen & LOOP_WRITE); /* not asked for */

    /* Writable as soon as it is asked for. */
    x = (struct watched){.w = x.w, .stop_on = LOOP_WRITE};
    assert_int_equal(loop_watch_mod(&l, &x.w, LOOP_WRITE), 0);
    l.stop = 0;
    assert_int_equal(loop_run(&l), 0);
    assert_true(x.seen & LOOP_WRITE);

    /* A hang-up is reported with no interest at all. */
    x = (struct watched){.w = x.w, .stop_on = LOOP_HANGUP};
    assert_int_equal(loop_watch_mod(&l, &x.w, 0), 0);
    close(sv[1]);
    l.stop = 0;
    assert_int_equal(loop_run(&l), 0);
    assert_true(x.seen & LOOP_HANGUP);

    loop_watch_del(&l, &x.w);
    loop_timer_stop(&l, &stop);
    close(sv[0]);
    loop_destroy(&l);
}

static int turns, polls;

static void after_turn(struct loop *l, void *arg)
{
    turns++;
}

/* Asks for three turns without sleeping, then lets the loop sleep. */
static int before_wait(struct loop *l, void *arg)
{
    return ++polls <= 3;
}

static void test_hooks_run_every_turn(void **state)
{
    struct loop l;
    struct loop_timer stop;

    assert_int_equal(loop_init(&l), 0);
    l.after_turn = after_turn;
    l.before_wait = before_wait;
    turns = polls = 0;
    stop_after(&l, &stop, 50);
    assert_int_equal(loop_run(&l), 0);
    assert_true(polls >= 4);        /* three busy turns, then the sleep to the timer */
    assert_int_equal(turns, polls); /* one after_turn per wait */
    loop_destroy(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timers_fire_in_deadline_order),
        cmocka_unit_test(test_read_write_and_hangup_flags),
        cmocka_unit_test(test_hooks_run_every_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
