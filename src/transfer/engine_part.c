/*
 * engine_part.c - a part: one range of an object, a want of its own (not in e->wants) whose
 * bytes land in its parent's object at its offset; the parent's start of receiving in ranges.
 * What makes, begins and closes them, below the two features that deal ranges (engine_split.c
 * across whole holders, engine_relay.c from partial ones) and the checks, which close parts.
 */
#include "transfer/engine_int.h"

/* A part's retry timer is never started: it is initialised only so that freeing is safe. */
static void part_no_retry(struct loop *l, struct loop_timer *t) {}

void eng_part_close(struct want *part)
{
    struct want *w = part->parent;

    eng_check_reset(part);
    free(part);
    if (--w->split.parts_out == 0 && w->done && !w->drains)
        eng_want_free(w);
}

struct want *eng_part_new(struct want *w, uint32_t range, uint64_t off, uint64_t len)
{
    struct want *part = calloc(1, sizeof(*part));

    if (!part)
        return NULL;
    part->e = w->e;
    part->id = w->id;
    part->parent = w;
    part->range = range;
    part->off = off;
    part->size = len;
    part->has_content = 1; /* its size counts in its pull's bytes; with --verify its chunks are
                            * checked */
    eng_check_reset(part);
    part->born_ms = w->born_ms;
    part->born_ns = w->born_ns;
    loop_timer_init(&part->retry, part_no_retry, part);
    loop_timer_init(&part->orphan, part_no_retry, part); /* never armed: parts have no waiters */
    return part;
}

void eng_split_begin(struct want *w, uint32_t nranges)
{
    w->state = WANT_RECEIVING;
    w->split_made = 0;
    w->check.recheck = 0;
    eng_check_reset(w);
    w->split.nranges = nranges;
    /* For the log and a failed check: every holder of the split. */
    snprintf(w->holder, sizeof(w->holder), "%.40s and %u more", w->split.holders[0],
             (unsigned)(w->split.n - 1));
}
