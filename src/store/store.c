#include "store/store_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/size.h"

uint64_t store_block_size(const struct object *o)
{
    return o->block ? alloc_block_size(o->block) : 0;
}

/* ---- LRU and dirty list ---- */

/* The list o goes in when it becomes evictable: the dirty one while it has no copy on disk. */
static int goes_dirty(const struct store *s, const struct object *o)
{
    return s->spill && !o->rec;
}

void store_lru_unlink(struct store *s, struct object *o)
{
    o->lru_prev->lru_next = o->lru_next;
    o->lru_next->lru_prev = o->lru_prev;
    o->lru_prev = o->lru_next = NULL;
    if (o->in_dirty)
        s->dirty_bytes -= store_block_size(o);
    else
        s->evictable_bytes -= store_block_size(o);
    o->in_dirty = 0;
}

int store_in_lru(const struct object *o)
{
    return o->lru_next != NULL;
}

/* Links o after `after`, which must be its predecessor in lru_seq order in its list. */
static void lru_link(struct store *s, struct object *o, struct object *after)
{
    o->lru_prev = after;
    o->lru_next = after->lru_next;
    after->lru_next->lru_prev = o;
    after->lru_next = o;
    o->in_dirty = (uint8_t)goes_dirty(s, o);
    if (o->in_dirty)
        s->dirty_bytes += store_block_size(o);
    else
        s->evictable_bytes += store_block_size(o);
}

/* A kept object stays out of the LRU where eviction would drop it (no spill directory). */
static int kept_out(const struct store *s, const struct object *o)
{
    return o->kept && !s->spill;
}

/* o's flag and the counts, without touching the lists. */
static void kept_set(struct store *s, struct object *o, int keep)
{
    uint64_t size = o->data_size + o->metadata_size;

    o->kept = (uint8_t)keep;
    s->kept_objects += keep ? 1 : (uint64_t)-1;
    s->kept_bytes += keep ? size : (uint64_t)0 - size;
}

static struct object *list_of(struct store *s, const struct object *o)
{
    return goes_dirty(s, o) ? &s->dirty : &s->lru;
}

/* Whether o may join a list now: its bytes are here and nothing else holds them. An object
 * being hashed is evictable (its jobs are dropped: store_object_free), but not written: its
 * spill entry needs its root. */
static int listable(const struct store *s, const struct object *o)
{
    return !(o->hashing && goes_dirty(s, o)) && o->life == OBJECT_SEALED && !kept_out(s, o);
}

/* o was just used and is now unreferenced: it becomes the youngest (once hashed). */
void store_lru_push_young(struct store *s, struct object *o)
{
    o->lru_seq = ++s->lru_clock;
    if (listable(s, o))
        lru_link(s, o, list_of(s, o)->lru_prev);
}

/* Links o where its lru_seq places it; objects used since are few, so the walk from the
 * young end is short. */
void store_lru_insert_ordered(struct store *s, struct object *o)
{
    struct object *head = list_of(s, o), *after = head->lru_prev;

    if (kept_out(s, o))
        return;
    while (after != head && after->lru_seq > o->lru_seq)
        after = after->lru_prev;
    lru_link(s, o, after);
}

/* ---- table ---- */

_Static_assert(STORE_OBJECTS_MIN / STORE_HELD_SHARE >= PROTO_MAX_BATCH,
               "by default a client's share of the table holds a whole put batch");

int store_init(struct store *s, uint8_t *base, uint64_t capacity, uint64_t max_objects,
               const struct store_events *ev)
{
    int rc;

    memset(s, 0, sizeof(*s));
    s->base = base;
    s->max_objects = max_objects ? max_objects : capacity / STORE_BYTES_PER_OBJECT;
    if (!max_objects && s->max_objects < STORE_OBJECTS_MIN)
        s->max_objects = STORE_OBJECTS_MIN;
    s->max_held = s->max_objects / STORE_HELD_SHARE ? s->max_objects / STORE_HELD_SHARE : 1;
    s->max_kept_bytes = capacity / 2;
    s->fast_chances = STORE_FAST_CHANCES;
    s->lru.lru_next = s->lru.lru_prev = &s->lru;
    s->dirty.lru_next = s->dirty.lru_prev = &s->dirty;
    if (ev)
        s->events = *ev;
    if ((rc = alloc_init(&s->alloc, capacity)) < 0)
        return rc;
    return 0;
}

static void drop_hashes(struct store *s, struct object *o);

void store_object_free(struct store *s, struct object *o)
{
    drop_hashes(s, o); /* before its bytes go: no thread reads them after */
    if (o->block) {
        alloc_free(s->alloc, o->block);
        s->room_freed = 1;
    }
    free(o->leaves);
    free(o->name);
    free(o);
}

int store_set_name(struct store *s, struct object *o, const char *name)
{
    char *copy = strdup(name);

    if (!copy)
        return err_set(FERRY_ENOMEM, "name of %zu bytes", strlen(name));
    free(o->name);
    o->name = copy;
    /* A copy on disk carries the old name: one in memory is written again. */
    o->renamed = o->life == OBJECT_WRITING;
    if (o->rec && !object_on_disk(o)) {
        spill_forget(s->spill, o->rec);
        o->rec = NULL;
        if (store_in_lru(o)) {
            store_lru_unlink(s, o);
            store_lru_insert_ordered(s, o);
        }
    }
    return 0;
}

static void hash_now(struct store *s, struct object *o);

/* An object marked unused lost its last reference. */
static void delete_now_unused(struct store *s, struct object *o)
{
    s->counters.deleted_unused++;
    store_delete(s, o);
}

/* o's hash is over: it is hashed, and (unreferenced) joins its list if it is not in it. */
static void hash_over(struct store *s, struct object *o)
{
    o->hash_failed = 0;
    o->hashed = 1;
    o->hashing = 0;
    if (o->hash_counted)
        s->hashing_bytes -= store_block_size(o);
    o->hash_counted = 0;
    /* A reference across the hook: what it does with o (answer and unpin replies that waited
     * for the digest) cannot free it or put it in the LRU under our feet. */
    o->refcount++;
    if (s->events.hashed)
        s->events.hashed(s->events.ctx, o);
    o->refcount--;
    if (o->deleted && o->refcount == 0)
        store_object_free(s, o);
    else if (o->unused && o->refcount == 0)
        delete_now_unused(s, o);
    else if (!o->deleted && o->refcount == 0 && !store_in_lru(o))
        store_lru_insert_ordered(s, o);
}

/* Jobs are back; with the last of an object, its root is taken over its leaves
 * (microseconds). The jobs wait in s->hashes_back, where drop_hashes finds those of an object a
 * hook frees. */
static void finish_hashes(struct store *s, struct hasher_job *jobs)
{
    struct hasher_job *job, **tail = &s->hashes_back;

    while (*tail)
        tail = &(*tail)->next;
    *tail = jobs;
    while ((job = s->hashes_back)) {
        struct object *o = job->arg;
        s->hashes_back = job->next;
        o->hash_failed |= job->status < 0;
        free(job);
        if (--o->hash_jobs)
            continue;
        if (o->hash_failed ||
            digest_root(o->data_size, o->metadata_size, o->leaves ? o->leaves : o->root,
                        digest_leaves(o->data_size + o->metadata_size), o->root) < 0)
            hash_now(s, o); /* OpenSSL failed on a thread: once more here */
        else
            s->counters.hashed_bytes += o->data_size + o->metadata_size;
        hash_over(s, o);
    }
    store_spill_pump(s);
    /* Creates that wait for bytes on their way to disk look again (store_after_turn): these
     * are no longer hashed, and if spilling is held up by a failed write, nothing else would
     * tell them that none are going (they then fail with ENOSPACE). */
    if (s->spill && s->room_wanted)
        s->room_freed = 1;
}

/* Frees o's jobs in the list at pp: how many. */
static uint32_t drop_jobs(struct hasher_job **pp, struct object *o)
{
    struct hasher_job *job;
    uint32_t n = 0;

    while ((job = *pp)) {
        if (job->arg != o) {
            pp = &job->next;
            continue;
        }
        *pp = job->next;
        free(job);
        o->hash_jobs--;
        n++;
    }
    return n;
}

/* Takes back o's jobs (o is going): those queued are dropped, those running finish first. */
static void drop_hashes(struct store *s, struct object *o)
{
    struct hasher_job *job, *jobs;
    uint32_t dropped = 0;

    if (!o->hash_jobs)
        return;
    drop_jobs(&s->hashes_back, o);
    s->counters.hash_jobs_dropped += drop_jobs(&s->hashes_later, o);
    jobs = o->hash_jobs ? hasher_cancel(s->hasher, o, o->hash_jobs, &dropped) : NULL;
    while ((job = jobs)) {
        jobs = job->next;
        free(job);
    }
    s->counters.hash_jobs_dropped += dropped;
    o->hash_jobs = 0;
    o->hashing = 0;
    if (o->hash_counted)
        s->hashing_bytes -= store_block_size(o);
    o->hash_counted = 0;
}

/* Computes the jobs of a list on this thread, and takes them back. */
static void run_here(struct store *s, struct hasher_job *jobs)
{
    for (struct hasher_job *job = jobs; job; job = job->next)
        job->status = digest_leaves_of(job->bytes, job->size, job->first, job->n, job->leaves);
    finish_hashes(s, jobs);
}

void store_run_hashes_later(struct store *s)
{
    struct hasher_job *jobs = s->hashes_later;

    if (!jobs)
        return;
    s->hashes_later = NULL;
    run_here(s, jobs);
}

int store_hash_finish(struct store *s, struct object *o)
{
    struct hasher_job *mine = NULL, **pp = &s->hashes_later, *job;

    while ((job = *pp)) {
        if (job->arg != o) {
            pp = &job->next;
            continue;
        }
        *pp = job->next;
        job->next = mine;
        mine = job;
    }
    if (mine)
        run_here(s, mine);
    return o->hashed;
}

int store_hashes_pending(const struct store *s)
{
    return s->hashes_later != NULL;
}

void store_collect_hashes(struct store *s)
{
    store_run_hashes_later(s);
    finish_hashes(s, hasher_take_done(s->hasher));
}

void store_destroy(struct store *s)
{
    struct object *o;
    size_t pos = 0;

    if (s->hasher) {
        store_run_hashes_later(s);
        finish_hashes(s, hasher_stop(s->hasher));
    }
    s->hasher = NULL;
    store_spill_close(s);

    /* Adopted objects already deleted are in no table: freed here (the others are below). */
    while ((o = s->fast_held)) {
        s->fast_held = o->fast_next;
        if (o->deleted)
            store_object_free(s, o);
    }
    while ((o = idmap_next(&s->table, &pos, NULL)))
        store_object_free(s, o);
    idmap_free(&s->table);
    free(s->fast_snap);
    s->fast_snap = NULL;
    alloc_destroy(s->alloc);
    s->alloc = NULL;
}

struct object *store_find(const struct store *s, const ferry_id *id)
{
    return idmap_get(&s->table, id);
}

/* Unlinks o from the table and the LRU, and forgets its copy on disk (one being written is
 * forgotten when the write ends); frees it unless it is still referenced. */
void store_remove(struct store *s, struct object *o, int event)
{
    idmap_remove(&s->table, &o->id);
    store_fast_unpublish(s, o); /* held by a slot: freed with the store's reference */
    if (o->kept)
        kept_set(s, o, 0);
    if (store_in_lru(o))
        store_lru_unlink(s, o);
    if (o->rec) {
        spill_forget(s->spill, o->rec);
        o->rec = NULL;
    }
    if (object_on_disk(o)) {
        s->spilled_objects--;
        s->spilled_bytes -= o->data_size + o->metadata_size;
    }
    if (object_sealed(o)) {
        s->sealed_objects--;
        if (s->events.removed)
            s->events.removed(s->events.ctx, o, event);
    }
    o->deleted = 1;
    if (o->refcount == 0 && o->life != OBJECT_WRITING)
        store_object_free(s, o);
}

static int kept_room(const struct store *s, const struct object *o)
{
    uint64_t size = o->data_size + o->metadata_size;
    char f[3][SIZE_FORMAT_LEN];

    /* With a spill directory kept objects hold no memory (they are spilled like any): only
     * their count is bounded. */
    if (s->kept_objects < s->max_objects / 2 &&
        (s->spill || (size <= s->max_kept_bytes && s->kept_bytes <= s->max_kept_bytes - size)))
        return 0;
    return err_set(FERRY_ENOSPACE,
                   "keeping %s more would pass the bounds on kept objects: %s in %" PRIu64
                   " kept, at most %s (--max-kept) in %" PRIu64
                   " objects (half of --max-objects): unkeep or delete some",
                   size_format(size, f[0], SIZE_FORMAT_LEN),
                   size_format(s->kept_bytes, f[1], SIZE_FORMAT_LEN), s->kept_objects,
                   size_format(s->max_kept_bytes, f[2], SIZE_FORMAT_LEN), s->max_objects / 2);
}

int store_keep(struct store *s, struct object *o, int keep)
{
    int rc;

    if (!o->kept == !keep)
        return 0;
    if (keep && o->unused)
        return err_set(FERRY_EINVAL, "the object is deleted when unused (ferry_delete_unused): "
                                     "it cannot be kept");
    if (keep && (rc = kept_room(s, o)) < 0)
        return rc;
    kept_set(s, o, keep != 0);
    if (keep) {
        if (kept_out(s, o) && store_in_lru(o))
            store_lru_unlink(s, o);
        return 0;
    }
    /* Let go, it becomes evictable as if just released (the spill lists never lost it). */
    if (!s->spill && object_sealed(o) && !o->deleted && o->refcount == 0 && !store_in_lru(o)) {
        store_lru_push_young(s, o);
        s->room_freed = 1;
    }
    return 0;
}

/* An object evicted before anyone read it was most likely put for a reader that comes too
 * late: counted, and warned of (all since the last warning, at most one per
 * STORE_UNREAD_WARN_NS) with what to do. */
static void evicted_unread(struct store *s, const struct object *o)
{
    uint64_t now = clock_mono_ns();
    char f[SIZE_FORMAT_LEN];

    s->counters.evicted_unread++;
    s->unread_unlogged++;
    s->unread_unlogged_bytes += o->data_size + o->metadata_size;
    if (s->unread_warned_ns && now - s->unread_warned_ns < STORE_UNREAD_WARN_NS)
        return;
    log_info("evicted %" PRIu64 " object%s (%s) that no reader had taken, to make room: keep what "
             "must wait for its reader (put with keep, ferry_keep, ferry keep), or give the store "
             "more --memory or a --spill-dir",
             s->unread_unlogged, s->unread_unlogged == 1 ? "" : "s",
             size_format(s->unread_unlogged_bytes, f, sizeof(f)));
    s->unread_warned_ns = now;
    s->unread_unlogged = s->unread_unlogged_bytes = 0;
}

/* Frees the oldest LRU object's memory: with a spill directory it stays, on disk; without one
 * it is gone. */
static uint64_t evict_oldest(struct store *s, int for_room)
{
    struct object *victim = s->lru.lru_next;
    uint64_t freed = store_block_size(victim);

    if (store_fast_touched(s, victim))
        return 0; /* got without the daemon since it joined the LRU: young again */
    if (store_fast_unpublish(s, victim))
        return 0; /* a client holds it without the daemon: out of the LRU now */
    if (s->spill) {
        store_spill_out(s, victim);
        return freed;
    }
    s->counters.evicted_objects++;
    s->counters.evicted_bytes += freed;
    if (!victim->read && for_room)
        evicted_unread(s, victim);
    store_remove(s, victim, FERRY_EVENT_EVICTED);
    return freed;
}

static int have_victim(const struct store *s)
{
    return s->lru.lru_next != &s->lru;
}

uint64_t store_evict(struct store *s, uint64_t bytes)
{
    uint64_t freed = 0;

    store_fast_sweep(s, 0);
    while (freed < bytes && have_victim(s))
        freed += evict_oldest(s, 0); /* asked for: no warning */
    return freed;
}

/* What else keeps a full store from making room, for its ENOSPACE messages (short_by: what a
 * create lacks; UINT64_MAX for a full table, where kept objects are only counted): kept objects
 * (never evicted without a spill directory), named as the cause when letting them go would make the
 * room, then the spill directory's state. */
static void describe_full(const struct store *s, uint64_t short_by, char *buf, size_t size)
{
    char f[SIZE_FORMAT_LEN];
    int n = 0;

    if (s->kept_objects && !s->spill && s->kept_bytes >= short_by)
        n = snprintf(buf, size,
                     "; the store is full of kept objects: %s in %" PRIu64
                     " kept, never evicted (unkeep or delete some)",
                     size_format(s->kept_bytes, f, sizeof(f)), s->kept_objects);
    else if (s->kept_objects && !s->spill)
        n = snprintf(buf, size, "; %s of it in %" PRIu64 " kept objects",
                     size_format(s->kept_bytes, f, sizeof(f)), s->kept_objects);
    if (n < 0 || (size_t)n >= size)
        n = 0;
    store_spill_describe(s, buf + n, size - (size_t)n);
}

/* Allocates size bytes at a multiple of align, evicting LRU objects while that can help. Nothing is
 * evicted when even evicting every candidate could not make room: a create that must fail does no
 * damage. With a spill directory the candidates include the objects still to be written, and a
 * create that must wait for them gets FERRY_EAGAIN. */
int store_alloc(struct store *s, uint64_t size, uint64_t align, alloc_block **out)
{
    /* Objects released without the daemon (it hears nothing of it) can go too: the references
     * it kept for their slots are given back first, when there may be a need to evict. */
    if (s->fast_held && size > alloc_capacity(s->alloc) - alloc_used(s->alloc))
        store_fast_sweep(s, 0);
    uint64_t cap = alloc_capacity(s->alloc), used = alloc_used(s->alloc);
    uint64_t rounded = (size + align - 1) / align * align;
    uint64_t candidates = s->evictable_bytes + s->hashing_bytes + s->dirty_bytes + s->writing_bytes;
    char f[4][SIZE_FORMAT_LEN], disk[512];
    int rc;

    if (size > cap) {
        s->counters.refused++;
        return err_set(FERRY_ETOOBIG, "%" PRIu64 " bytes exceed the arena's %" PRIu64, size, cap);
    }
    if (rounded > cap - used + candidates) {
        s->counters.refused++;
        describe_full(s, rounded - (cap - used + candidates), disk, sizeof(disk));
        return err_set(FERRY_ENOSPACE,
                       "need %s; arena %s, used %s of which %s evictable (the rest is "
                       "referenced, unsealed or kept)%s",
                       size_format(rounded, f[0], SIZE_FORMAT_LEN),
                       size_format(cap, f[1], SIZE_FORMAT_LEN),
                       size_format(used, f[2], SIZE_FORMAT_LEN),
                       size_format(candidates, f[3], SIZE_FORMAT_LEN), disk);
    }
    rc = alloc_alloc_aligned(s->alloc, size, align, out);
    while (rc == FERRY_ENOSPACE && have_victim(s)) {
        evict_oldest(s, 1);
        rc = alloc_alloc_aligned(s->alloc, size, align, out);
    }
    if (rc == FERRY_ENOSPACE && store_spill_make_room(s, rounded) == FERRY_EAGAIN)
        return FERRY_EAGAIN;
    if (rc == FERRY_ENOSPACE) {
        s->counters.refused++;
        describe_full(s, rounded - alloc_largest_free(s->alloc), disk, sizeof(disk));
        return err_set(FERRY_ENOSPACE,
                       "need %s; arena %s, used %s, largest free block %s, nothing left to "
                       "evict%s",
                       size_format(rounded, f[0], SIZE_FORMAT_LEN),
                       size_format(cap, f[1], SIZE_FORMAT_LEN),
                       size_format(alloc_used(s->alloc), f[2], SIZE_FORMAT_LEN),
                       size_format(alloc_largest_free(s->alloc), f[3], SIZE_FORMAT_LEN), disk);
    }
    return rc;
}

/* Room in the table for one more object, evicting the oldest LRU objects while the table is
 * full and eviction shrinks it (without a spill directory: with one, evicted objects stay in
 * the table, on disk). */
static int count_room(struct store *s)
{
    char why[512];

    if (s->table.count >= s->max_objects)
        store_fast_sweep(s, 0);
    while (s->table.count >= s->max_objects && !s->spill && have_victim(s))
        evict_oldest(s, 1);
    if (s->table.count >= s->max_objects) {
        s->counters.refused_objects++;
        describe_full(s, UINT64_MAX, why, sizeof(why)); /* by count: kept ones are named */
        return err_set(FERRY_ENOSPACE,
                       "the store holds %zu objects, at most %" PRIu64
                       " (--max-objects), none of them evictable%s",
                       s->table.count, s->max_objects, why);
    }
    return 0;
}

static int create(struct store *s, const ferry_id *id, uint64_t data_size, uint64_t metadata_size,
                  uint64_t page, void *creator, struct object **out)
{
    uint64_t total = data_size + metadata_size;
    struct object *o;
    int rc;

    if (store_find(s, id))
        return err_set(FERRY_EEXIST, "an object with this id exists");
    if (total < data_size) {
        s->counters.refused++;
        return err_set(FERRY_ETOOBIG, "data and metadata sizes overflow");
    }
    if ((rc = count_room(s)) < 0)
        return rc;
    if (!(o = calloc(1, sizeof(*o))))
        return err_set(FERRY_ENOMEM, "object record");
    /* A page of its own is a whole one: the block ends on a page boundary too. A size the
     * arena cannot hold so is placed as any other (or refused as any other: ETOOBIG). */
    if (page && (total > alloc_capacity(s->alloc) ||
                 alloc_capacity(s->alloc) - total < (page - total % page) % page))
        page = 0;
    if (total && (rc = store_alloc(s, page ? (total + page - 1) / page * page : total,
                                   page ? page : ALLOC_ALIGN, &o->block)) < 0)
        goto free_object;
    o->id = *id;
    o->offset = o->block ? alloc_block_offset(o->block) : 0;
    o->data_size = data_size;
    o->metadata_size = metadata_size;
    o->created_ns = clock_real_ns();
    o->refcount = 1;
    o->life = OBJECT_CREATED; /* born */
    o->creator = creator;
    if ((rc = idmap_put(&s->table, id, o)) < 0)
        goto free_block;
    s->counters.created++;
    *out = o;
    return 0;

free_block:
    if (o->block)
        alloc_free(s->alloc, o->block);
free_object:
    free(o);
    return rc;
}

int store_create(struct store *s, const ferry_id *id, uint64_t data_size, uint64_t metadata_size,
                 void *creator, struct object **out)
{
    return create(s, id, data_size, metadata_size, 0, creator, out);
}

int store_create_paged(struct store *s, const ferry_id *id, uint64_t data_size,
                       uint64_t metadata_size, uint64_t page, void *creator, struct object **out)
{
    return create(s, id, data_size, metadata_size, page, creator, out);
}

/* Gives back the rest of the last page of a paged create (store_create_paged) at its seal:
 * its bytes take no more room than any other object's from then on. Without memory for the
 * allocator's records, the rest stays with the object (counted, freed with it). */
static void fit_block(struct store *s, struct object *o)
{
    uint64_t total = o->data_size + o->metadata_size;

    if (o->block && !o->hashing &&
        alloc_block_size(o->block) > (total + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN)
        (void)alloc_trim(s->alloc, o->block, 0, total);
}

/* Submits o's chunks in jobs of HASHER_JOB_CHUNKS: to the hasher, whose threads share them, or,
 * up to STORE_INLINE_HASH_MAX and with small_later, to hashes_later for the loop after this
 * turn (the put is answered first); 0 when started, -1 when o is to be hashed now. o stays
 * evictable (its jobs are then dropped), but for a list of objects to spill: it leaves the
 * dirty list until hashed, its bytes counted in hashing_bytes (to be written soon: creates wait
 * for them). */
static int hash_later(struct store *s, struct object *o, uint64_t len, int small_later)
{
    uint64_t n = digest_leaves(len), njobs = (n + HASHER_JOB_CHUNKS - 1) / HASHER_JOB_CHUNKS;
    struct hasher_job **jobs;

    if (!s->hasher || (len <= STORE_INLINE_HASH_MAX && !small_later) ||
        !(jobs = calloc(njobs, sizeof(*jobs))))
        return -1;
    free(o->leaves);
    o->leaves = n > 1 ? malloc(n * DIGEST_LEN) : NULL;
    for (uint64_t j = 0; j < njobs && (o->leaves || n == 1); j++) {
        if (!(jobs[j] = calloc(1, sizeof(*jobs[j])))) {
            while (j) { /* all or none: hashed on the loop */
                free(jobs[--j]);
                jobs[j] = NULL;
            }
            break;
        }
        uint64_t first = j * HASHER_JOB_CHUNKS;
        *jobs[j] =
            (struct hasher_job){.bytes = s->base + o->offset,
                                .size = len,
                                .first = first,
                                .n = n - first < HASHER_JOB_CHUNKS ? n - first : HASHER_JOB_CHUNKS,
                                .leaves = (o->leaves ? o->leaves : o->root) + first * DIGEST_LEN,
                                .arg = o,
                                .next = j ? jobs[j - 1] : s->hashes_later}; /* if kept here */
    }
    if (!jobs[0]) { /* no memory: hashed on the loop */
        free(jobs);
        return -1;
    }
    o->hashing = 1;
    o->hash_jobs = (uint32_t)njobs;
    if (store_in_lru(o) && !listable(s, o))
        store_lru_unlink(s, o);
    o->hash_counted = (uint8_t)goes_dirty(s, o);
    if (o->hash_counted)
        s->hashing_bytes += store_block_size(o);
    if (len > STORE_INLINE_HASH_MAX) {
        for (uint64_t j = 0; j < njobs; j++)
            hasher_submit(s->hasher, jobs[j]);
    } else {
        s->hashes_later = jobs[njobs - 1]; /* each links the one before */
    }
    free(jobs);
    return 0;
}

/* Makes o sealed and visible; its digest is set or under way. */
static void seal_visible(struct store *s, struct object *o)
{
    object_life_set(o, OBJECT_SEALED);
    o->creator = NULL;
    s->sealed_objects++;
    s->counters.sealed++;
    if (s->events.sealed)
        s->events.sealed(s->events.ctx, o);
    if (o->refcount == 0)
        store_lru_push_young(s, o);
    store_fast_publish(s, o);
    store_spill_pump(s);
}

/* o's root and leaves, on the loop. Only OpenSSL failing to allocate fails: then the
 * root is zero, which matches no content (its fetches fail, its publication conflicts). */
static void hash_now(struct store *s, struct object *o)
{
    uint64_t len = o->data_size + o->metadata_size, n = digest_leaves(len);
    uint8_t *leaves = n > 1 ? malloc(n * DIGEST_LEN) : o->root;

    if (!leaves || digest_leaves_of(s->base + o->offset, len, 0, n, leaves) < 0 ||
        digest_root(o->data_size, o->metadata_size, leaves, n, o->root) < 0) {
        log_error("the digest of an object of %" PRIu64 " bytes failed: %s", len, ferry_errmsg());
        memset(o->root, 0, sizeof(o->root));
    }
    s->counters.hashed_bytes += len;
    if (leaves != o->root) {
        free(o->leaves);
        o->leaves = leaves;
    }
}

/* store_hash; with small_later 0, a small object is hashed now. */
static int hash_start(struct store *s, struct object *o, int small_later)
{
    if (o->hashed)
        return 1;
    if (o->hashing || hash_later(s, o, o->data_size + o->metadata_size, small_later) == 0)
        return 0;
    hash_now(s, o);
    o->hashed = 1;
    return 1;
}

int store_hash(struct store *s, struct object *o)
{
    return hash_start(s, o, 1);
}

int store_hash_here(struct store *s, struct object *o)
{
    return hash_start(s, o, 0);
}

void store_seal(struct store *s, struct object *o)
{
    fit_block(s, o);
    if (!s->hash_on_demand)
        store_hash(s, o);
    seal_visible(s, o);
}

void store_seal_digest(struct store *s, struct object *o, const uint8_t root[DIGEST_LEN],
                       uint8_t *leaves)
{
    fit_block(s, o);
    memcpy(o->root, root, DIGEST_LEN);
    if (leaves != o->leaves) {
        free(o->leaves);
        o->leaves = leaves;
    }
    o->hashed = 1;
    seal_visible(s, o);
}

void store_abort(struct store *s, struct object *o)
{
    s->counters.aborted++;
    if (o->refcount) /* the creator's; peers' pins of a copy being received keep it */
        o->refcount--;
    store_remove(s, o, 0);
}

void store_ref(struct store *s, struct object *o)
{
    if (store_in_lru(o))
        store_lru_unlink(s, o);
    o->refcount++;
}

void store_unref(struct store *s, struct object *o)
{
    if (--o->refcount > 0)
        return;
    s->room_freed = 1;
    if (o->deleted) {
        if (o->life != OBJECT_WRITING)
            store_object_free(s, o);
    } else if (o->unused && object_sealed(o)) {
        delete_now_unused(s, o);
    } else if (object_sealed(o)) {
        store_lru_push_young(s, o);
        store_spill_pump(s);
    }
}

void store_delete(struct store *s, struct object *o)
{
    s->counters.deleted++;
    store_remove(s, o, FERRY_EVENT_DELETED);
}

void store_delete_unused(struct store *s, struct object *o)
{
    if (o->unused)
        return;
    o->unused = 1;
    if (o->kept)
        kept_set(s, o, 0);
    store_fast_unpublish(s, o); /* held by a slot: adopted, and so referenced */
    if (o->refcount == 0)
        delete_now_unused(s, o); /* sealed: an unsealed object has its creator's */
}

void store_touch(struct store *s, struct object *o)
{
    if (store_in_lru(o)) {
        store_lru_unlink(s, o);
        store_lru_push_young(s, o);
    } else if (o->hashing && o->refcount == 0) {
        o->lru_seq = ++s->lru_clock; /* it joins the LRU as the youngest */
    }
}

int store_reserve(struct store *s, uint64_t size, alloc_block **out)
{
    return store_alloc(s, size, ALLOC_ALIGN, out);
}

void store_unreserve(struct store *s, alloc_block *b)
{
    alloc_free(s->alloc, b);
}

uint64_t store_capacity(const struct store *s)
{
    return alloc_capacity(s->alloc);
}

uint64_t store_used(const struct store *s)
{
    return alloc_used(s->alloc);
}
