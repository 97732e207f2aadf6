/* store_fast.c - the store's side of the shared index (common/fastidx.h): sealed, resident
 * objects are published for gets without the daemon; before an object's memory can be
 * reused (evicted, spilled, deleted) it is unpublished, and one a client still holds through
 * a slot is kept, as with a reference of the store's own ("adopted"), until no slot holds it. */
#include "store/store_int.h"

#include "common/clock.h"
#include "common/fastidx.h"

void store_fast_publish(struct store *s, struct object *o)
{
    uint32_t index;

    /* Not while adopted: its slot may still hold the old life, which the sweep looks for. Not
     * one deleted when unused: its references must all be counted here. */
    if (!s->fast || o->fast_published || o->fast_adopted || !object_resident(o) || o->deleted ||
        o->unused)
        return;
    if (fastidx_publish(s->fast, &o->id, o->offset, o->data_size, o->metadata_size, &index) < 0)
        return; /* the index is full: this object stays the daemon's way */
    o->fast_published = 1;
    o->fast_index = index;
}

int store_fast_unpublish(struct store *s, struct object *o)
{
    if (!o->fast_published)
        return 0;
    o->fast_published = 0;
    if (!fastidx_unpublish(s->fast, o->fast_index, &o->fast_seq) || o->fast_adopted)
        return 0;
    /* Held by a client that got it without the daemon: kept until its slot is given back. */
    store_ref(s, o);
    o->fast_adopted = 1;
    o->fast_next = s->fast_held;
    s->fast_held = o;
    s->counters.fast_adopted++;
    return 1;
}

int store_fast_touched(struct store *s, struct object *o)
{
    if (!o->fast_published || !s->fast_chances || !fastidx_take_touched(s->fast, o->fast_index))
        return 0;
    s->fast_chances--;
    store_mark_read(o);
    store_lru_unlink(s, o);
    store_lru_push_young(s, o);
    return 1;
}

void store_fast_sweep(struct store *s, int now_or_later)
{
    struct object **pp = &s->fast_held, *o;
    uint64_t now = clock_mono_ns();
    size_t n;

    if (!s->fast_held || (now_or_later && now - s->fast_swept_ns < STORE_FAST_SWEEP_NS))
        return;
    s->fast_swept_ns = now;
    /* One scan of the slots for every adopted object. */
    n = fastidx_snapshot(s->fast, s->fast_snap);
    while ((o = *pp)) {
        if (fastidx_snapshot_count(s->fast_snap, n, o->fast_index, o->fast_seq)) {
            pp = &o->fast_next;
            continue;
        }
        *pp = o->fast_next;
        o->fast_next = NULL;
        o->fast_adopted = 0;
        store_unref(s, o);
    }
}
