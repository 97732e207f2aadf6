#include "store/store.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/size.h"

static uint64_t block_size(const struct object *o)
{
    return o->block ? alloc_block_size(o->block) : 0;
}

/* ---- LRU ---- */

static void lru_unlink(struct store *s, struct object *o)
{
    o->lru_prev->lru_next = o->lru_next;
    o->lru_next->lru_prev = o->lru_prev;
    o->lru_prev = o->lru_next = NULL;
    s->evictable_bytes -= block_size(o);
}

static int in_lru(const struct object *o)
{
    return o->lru_next != NULL;
}

/* Links o after `after`, which must be its predecessor in lru_seq order. */
static void lru_link(struct store *s, struct object *o, struct object *after)
{
    o->lru_prev = after;
    o->lru_next = after->lru_next;
    after->lru_next->lru_prev = o;
    after->lru_next = o;
    s->evictable_bytes += block_size(o);
}

/* o was just used and is now unreferenced: it becomes the youngest (once hashed). */
static void lru_push_young(struct store *s, struct object *o)
{
    o->lru_seq = ++s->lru_clock;
    if (!o->hashing)
        lru_link(s, o, s->lru.lru_prev);
}

/* Links o where its lru_seq places it; objects used since are few, so the walk from the
 * young end is short. */
static void lru_insert_ordered(struct store *s, struct object *o)
{
    struct object *after = s->lru.lru_prev;

    while (after != &s->lru && after->lru_seq > o->lru_seq)
        after = after->lru_prev;
    lru_link(s, o, after);
}

/* ---- table ---- */

int store_init(struct store *s, uint8_t *base, uint64_t capacity, const struct store_events *ev)
{
    int rc;

    memset(s, 0, sizeof(*s));
    s->base = base;
    s->lru.lru_next = s->lru.lru_prev = &s->lru;
    if (ev)
        s->events = *ev;
    if ((rc = alloc_init(&s->alloc, capacity)) < 0)
        return rc;
    return 0;
}

static void object_free(struct store *s, struct object *o)
{
    if (o->block)
        alloc_free(s->alloc, o->block);
    free(o->name);
    free(o);
}

int store_set_name(struct object *o, const char *name)
{
    char *copy = strdup(name);

    if (!copy)
        return err_set(FERRY_ENOMEM, "name of %zu bytes", strlen(name));
    free(o->name);
    o->name = copy;
    return 0;
}

static void finish_hashes(struct store *s, struct hasher_job *jobs)
{
    struct hasher_job *job;

    while ((job = jobs)) {
        struct object *o = job->arg;
        jobs = job->next;
        o->hash = job->digest;
        free(job);
        o->hashed = 1;
        o->hashing = 0;
        if (o->hash_counted)
            s->hashing_bytes -= block_size(o);
        o->hash_counted = 0;
        /* A reference across the hook: what it does with o (answer and unpin replies that
         * waited for the digest) cannot free it or put it in the LRU under our feet. */
        o->refcount++;
        if (s->events.hashed)
            s->events.hashed(s->events.ctx, o);
        o->refcount--;
        if (o->deleted && o->refcount == 0)
            object_free(s, o);
        else if (!o->deleted && o->refcount == 0)
            lru_insert_ordered(s, o);
    }
}

void store_collect_hashes(struct store *s)
{
    finish_hashes(s, hasher_take_done(s->hasher));
}

void store_destroy(struct store *s)
{
    struct object *o;
    size_t pos = 0;

    if (s->hasher)
        finish_hashes(s, hasher_stop(s->hasher));
    s->hasher = NULL;

    while ((o = idmap_next(&s->table, &pos, NULL)))
        object_free(s, o);
    idmap_free(&s->table);
    alloc_destroy(s->alloc);
    s->alloc = NULL;
}

struct object *store_find(const struct store *s, const ferry_id *id)
{
    return idmap_get(&s->table, id);
}

/* Unlinks o from the table and the LRU; frees it unless it is still referenced. */
static void remove_object(struct store *s, struct object *o, int event)
{
    idmap_remove(&s->table, &o->id);
    if (in_lru(o))
        lru_unlink(s, o);
    if (o->state == FERRY_STATE_SEALED) {
        s->sealed_objects--;
        if (s->events.removed)
            s->events.removed(s->events.ctx, o, event);
    }
    o->deleted = 1;
    if (o->refcount == 0 && !o->hashing)
        object_free(s, o);
}

static uint64_t evict_oldest(struct store *s)
{
    struct object *victim = s->lru.lru_next;
    uint64_t freed = block_size(victim);

    s->counters.evicted_objects++;
    s->counters.evicted_bytes += freed;
    remove_object(s, victim, FERRY_EVENT_EVICTED);
    return freed;
}

/* Waits for the digests being computed and takes them in, so that eviction sees every
 * candidate in its LRU place and deleted objects are freed first. Only under memory pressure,
 * and for as long as the queued digests take. */
static void settle_hashes(struct store *s)
{
    if (s->hashing_bytes && s->hasher) {
        hasher_wait_idle(s->hasher);
        store_collect_hashes(s);
    }
}

static int have_victim(const struct store *s)
{
    return s->lru.lru_next != &s->lru;
}

uint64_t store_evict(struct store *s, uint64_t bytes)
{
    uint64_t freed = 0;

    settle_hashes(s);
    while (freed < bytes && have_victim(s))
        freed += evict_oldest(s);
    return freed;
}

/* Allocates size bytes, evicting LRU objects while that can help. Nothing is evicted when even
 * evicting every candidate could not make room: a create that must fail does no damage. */
static int alloc_evicting(struct store *s, uint64_t size, alloc_block **out)
{
    uint64_t cap = alloc_capacity(s->alloc), used = alloc_used(s->alloc);
    uint64_t rounded = (size + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN;
    uint64_t candidates = s->evictable_bytes + s->hashing_bytes;
    char f[4][SIZE_FORMAT_LEN];
    int rc;

    if (size > cap) {
        s->counters.refused++;
        return err_set(FERRY_ETOOBIG, "%" PRIu64 " bytes exceed the arena's %" PRIu64, size, cap);
    }
    if (rounded > cap - used + candidates) {
        s->counters.refused++;
        return err_set(FERRY_ENOSPACE,
                       "need %s; arena %s, used %s of which %s evictable (the rest is "
                       "referenced or unsealed)",
                       size_format(rounded, f[0], SIZE_FORMAT_LEN),
                       size_format(cap, f[1], SIZE_FORMAT_LEN),
                       size_format(used, f[2], SIZE_FORMAT_LEN),
                       size_format(candidates, f[3], SIZE_FORMAT_LEN));
    }
    if ((rc = alloc_alloc(s->alloc, size, out)) == FERRY_ENOSPACE) {
        settle_hashes(s);
        rc = alloc_alloc(s->alloc, size, out);
    }
    while (rc == FERRY_ENOSPACE && have_victim(s)) {
        evict_oldest(s);
        rc = alloc_alloc(s->alloc, size, out);
    }
    if (rc == FERRY_ENOSPACE) {
        s->counters.refused++;
        return err_set(FERRY_ENOSPACE,
                       "need %s; arena %s, used %s, largest free block %s, nothing left to evict",
                       size_format(rounded, f[0], SIZE_FORMAT_LEN),
                       size_format(cap, f[1], SIZE_FORMAT_LEN),
                       size_format(alloc_used(s->alloc), f[2], SIZE_FORMAT_LEN),
                       size_format(alloc_largest_free(s->alloc), f[3], SIZE_FORMAT_LEN));
    }
    return rc;
}

int store_create(struct store *s, const ferry_id *id, uint64_t data_size, uint64_t metadata_size,
                 void *creator, struct object **out)
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
    if (!(o = calloc(1, sizeof(*o))))
        return err_set(FERRY_ENOMEM, "object record");
    if (total && (rc = alloc_evicting(s, total, &o->block)) < 0)
        goto free_object;
    o->id = *id;
    o->offset = o->block ? alloc_block_offset(o->block) : 0;
    o->data_size = data_size;
    o->metadata_size = metadata_size;
    o->created_ns = clock_real_ns();
    o->refcount = 1;
    o->state = FERRY_STATE_CREATED;
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

/* Starts the digest of o on the hasher, pinning o until it is in; 0 when started. */
/* Submits o to the hasher; evictable: o will be evictable once hashed (a seal), so that its
 * bytes count in hashing_bytes, which eviction may wait for. */
static int hash_later(struct store *s, struct object *o, uint64_t len, int evictable)
{
    struct hasher_job *job;

    if (!s->hasher || len <= STORE_INLINE_HASH_MAX || !(job = calloc(1, sizeof(*job))))
        return -1;
    job->bytes = s->base + o->offset;
    job->len = len;
    job->seed = o->data_size;
    job->arg = o;
    o->hashing = 1;
    o->hash_counted = (uint8_t)evictable;
    if (evictable)
        s->hashing_bytes += block_size(o);
    hasher_submit(s->hasher, job);
    return 0;
}

/* Makes o sealed and visible; its digest is set or under way. */
static void seal_visible(struct store *s, struct object *o)
{
    o->state = FERRY_STATE_SEALED;
    o->creator = NULL;
    s->sealed_objects++;
    s->counters.sealed++;
    if (s->events.sealed)
        s->events.sealed(s->events.ctx, o);
    if (o->refcount == 0)
        lru_push_young(s, o);
}

/* o's digest, now (1) or from the hasher (0). */
static int hash_object(struct store *s, struct object *o, int evictable)
{
    uint64_t len = o->data_size + o->metadata_size;

    if (hash_later(s, o, len, evictable) == 0)
        return 0;
    /* The sizes seed the digest so that moving the data/metadata boundary changes it. */
    o->hash = XXH3_64bits_withSeed(s->base + o->offset, len, o->data_size);
    o->hashed = 1;
    return 1;
}

int store_hash_created(struct store *s, struct object *o)
{
    return hash_object(s, o, 0); /* unsealed and referenced: not evictable once hashed */
}

void store_seal(struct store *s, struct object *o)
{
    hash_object(s, o, 1);
    seal_visible(s, o);
}

void store_seal_digest(struct store *s, struct object *o, uint64_t digest)
{
    o->hash = digest;
    o->hashed = 1;
    seal_visible(s, o);
}

void store_abort(struct store *s, struct object *o)
{
    s->counters.aborted++;
    o->refcount = 0;
    remove_object(s, o, 0);
}

void store_ref(struct store *s, struct object *o)
{
    if (in_lru(o))
        lru_unlink(s, o);
    o->refcount++;
}

void store_unref(struct store *s, struct object *o)
{
    if (--o->refcount > 0)
        return;
    if (o->deleted) {
        if (!o->hashing)
            object_free(s, o);
    } else if (o->state == FERRY_STATE_SEALED)
        lru_push_young(s, o);
}

void store_delete(struct store *s, struct object *o)
{
    s->counters.deleted++;
    remove_object(s, o, FERRY_EVENT_DELETED);
}

void store_touch(struct store *s, struct object *o)
{
    if (in_lru(o)) {
        lru_unlink(s, o);
        lru_push_young(s, o);
    } else if (o->hashing && o->refcount == 0) {
        o->lru_seq = ++s->lru_clock; /* it joins the LRU as the youngest */
    }
}

int store_reserve(struct store *s, uint64_t size, alloc_block **out)
{
    return alloc_evicting(s, size, out);
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
