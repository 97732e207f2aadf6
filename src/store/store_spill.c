/* store_spill.c - memory as a cache over the spill directory: writes of dirty objects,
 * restores on demand, recovery and persistence (store.h states the rules). */
#include "store/store_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/size.h"

/* After a failed write (a full disk, the limit), no new write starts for this long. */
#define SPILL_BACKOFF_NS 1000000000ull

static uint64_t object_len(const struct object *o)
{
    return o->data_size + o->metadata_size;
}

/* ---- writes ---- */

static int write_object(struct store *s, struct object *o)
{
    struct spill_job *job = calloc(1, sizeof(*job));
    int rc;

    if (!job)
        return err_set(FERRY_ENOMEM, "spill job");
    job->entry = (struct spill_entry){.id = o->id,
                                      .data_size = o->data_size,
                                      .metadata_size = o->metadata_size,
                                      .created_ns = o->created_ns};
    memcpy(job->entry.digest, o->root, DIGEST_LEN);
    snprintf(job->entry.name, sizeof(job->entry.name), "%s", o->name ? o->name : "");
    job->mem = s->base + o->offset;
    job->arg = o;
    if (store_in_lru(o))
        store_lru_unlink(s, o);
    object_life_set(o, OBJECT_WRITING);
    s->writing_bytes += store_block_size(o);
    if ((rc = spill_write(s->spill, job)) < 0) {
        static struct log_limit lim;
        object_life_set(o, OBJECT_SEALED);
        s->writing_bytes -= store_block_size(o);
        free(job);
        if (o->refcount == 0)
            store_lru_insert_ordered(s, o);
        s->spill_blocked_ns = clock_mono_ns() + SPILL_BACKOFF_NS;
        s->counters.spill_failures++;
        log_limited(&lim, LOG_WARN, "%s", ferry_errmsg());
    }
    return rc;
}

/* Bytes on their way to disk: being written, or hashed first. */
static uint64_t going_bytes(const struct store *s)
{
    return s->writing_bytes + s->hashing_bytes;
}

/* Memory that cannot be freed at once: neither evictable nor on its way to disk. */
static uint64_t held_bytes(const struct store *s)
{
    uint64_t used = alloc_used(s->alloc), free_soon = s->evictable_bytes + going_bytes(s);
    return used > free_soon ? used - free_soon : 0;
}

void store_spill_pump(struct store *s)
{
    uint64_t threshold, limit;

    if (!s->spill || s->dirty.lru_next == &s->dirty)
        return;
    if (s->spill_blocked_ns && clock_mono_ns() < s->spill_blocked_ns)
        return;
    threshold = alloc_capacity(s->alloc) / 100 * s->spill_at;
    limit = s->room_wanted > STORE_SPILL_INFLIGHT ? s->room_wanted : STORE_SPILL_INFLIGHT;
    while (s->dirty.lru_next != &s->dirty && going_bytes(s) < limit) {
        struct object *o = s->dirty.lru_next;
        if (held_bytes(s) <= threshold && s->room_wanted <= going_bytes(s))
            break;
        if (!store_hash(s, o))
            continue; /* out of the list until hashed; then written */
        if (write_object(s, o) < 0)
            break;
    }
}

void store_spill_out(struct store *s, struct object *o)
{
    store_lru_unlink(s, o);
    if (o->block)
        alloc_free(s->alloc, o->block);
    o->block = NULL;
    object_life_set(o, OBJECT_SPILLED);
    s->spilled_objects++;
    s->spilled_bytes += object_len(o);
}

int store_spill_make_room(struct store *s, uint64_t rounded)
{
    char f[2][SIZE_FORMAT_LEN];

    if (!s->spill)
        return FERRY_ENOSPACE;
    if (rounded > s->room_wanted)
        s->room_wanted = rounded;
    store_spill_pump(s);
    if (going_bytes(s) == 0) {
        s->room_wanted = 0;
        return FERRY_ENOSPACE;
    }
    s->counters.creates_waited++;
    return err_set(FERRY_EAGAIN, "%s needed: waiting for %s being spilled",
                   size_format(rounded, f[0], sizeof(f[0])),
                   size_format(going_bytes(s), f[1], sizeof(f[1])));
}

void store_spill_describe(const struct store *s, char *buf, size_t size)
{
    char f[2][SIZE_FORMAT_LEN];
    const struct spill_counters *c;

    buf[0] = '\0';
    if (!s->spill)
        return;
    c = spill_counters(s->spill);
    snprintf(
        buf, size, "; spill directory %s: %s used of %s (%s)%s", spill_dir(s->spill),
        size_format(c->disk_bytes + spill_queued_bytes(s->spill), f[0], sizeof(f[0])),
        size_format(spill_max_bytes(s->spill), f[1], sizeof(f[1])), spill_bound_origin(s->spill),
        s->spill_blocked_ns && clock_mono_ns() < s->spill_blocked_ns ? ", the last write failed"
                                                                     : "");
}

static void write_done(struct store *s, struct spill_job *job)
{
    struct object *o = job->arg;
    int renamed = o->renamed;

    object_life_set(o, OBJECT_SEALED);
    o->renamed = 0;
    s->writing_bytes -= store_block_size(o);
    if (job->status == 0 && renamed) { /* it carries the old name: written again */
        spill_forget(s->spill, job->rec);
    } else if (job->status == 0) {
        o->rec = job->rec;
    } else {
        static struct log_limit lim;
        s->counters.spill_failures++;
        s->spill_blocked_ns = clock_mono_ns() + SPILL_BACKOFF_NS;
        log_limited(&lim, LOG_WARN, "%s", job->why);
    }
    if (o->deleted) {
        if (o->rec)
            spill_forget(s->spill, o->rec);
        o->rec = NULL;
        if (o->refcount == 0 && !o->hashing)
            store_object_free(s, o);
    } else if (o->refcount == 0) {
        store_lru_insert_ordered(s, o);
    }
}

/* ---- restores ---- */

/* Takes room and starts the read of o (which holds the restore's reference): 0, FERRY_EAGAIN
 * (queued until there is room), or why not. */
static int restore_start(struct store *s, struct object *o)
{
    uint64_t len = object_len(o), align = spill_align(s->spill), pad = 0, phase;
    struct spill_job *job;
    int rc;

    if (len >= SPILL_DIRECT_MIN)
        pad = align - ALLOC_ALIGN; /* room to place it as the file has it (spill.h) */
    if (!(job = calloc(1, sizeof(*job))))
        return err_set(FERRY_ENOMEM, "restore job");
    if (len && (rc = store_alloc(s, len + pad, ALLOC_ALIGN, &o->block)) < 0) {
        free(job);
        o->block = NULL;
        if (rc == FERRY_ENOSPACE && o->restore_waits)
            rc = FERRY_EAGAIN; /* room comes when references go (store_after_turn) */
        if (rc == FERRY_EAGAIN) {
            o->restore_next = s->restore_wait;
            s->restore_wait = o;
        }
        return rc;
    }
    o->offset = o->block ? alloc_block_offset(o->block) : 0;
    if (pad) {
        phase = spill_rec_phase(s->spill, o->rec);
        o->offset += (phase + align - o->offset % align) % align;
    }
    job->entry = (struct spill_entry){
        .id = o->id, .data_size = o->data_size, .metadata_size = o->metadata_size};
    memcpy(job->entry.digest, o->root, DIGEST_LEN);
    job->mem = s->base + o->offset;
    job->rec = o->rec;
    job->arg = o;
    spill_read(s->spill, job);
    return 0;
}

/* A restore ended, its bytes back in the arena (OBJECT_SEALED: read, though its object may be
 * deleted meanwhile) or not (OBJECT_SPILLED): it tells and lets go. */
static void restore_end(struct store *s, struct object *o, enum object_life to, int status)
{
    object_life_set(o, to);
    if (s->events.restored)
        s->events.restored(s->events.ctx, o, status);
    store_unref(s, o);
}

int store_restore(struct store *s, struct object *o, int wait)
{
    int rc;

    if (!object_on_disk(o))
        return 0;
    if (object_len(o) == 0) { /* nothing to read: it is back at once */
        object_life_set(o, OBJECT_SEALED);
        s->spilled_objects--;
        return 0;
    }
    if (o->life == OBJECT_RESTORING)
        return FERRY_EAGAIN;
    o->refcount++;
    object_life_set(o, OBJECT_RESTORING);
    o->restore_waits = (uint8_t)wait;
    o->restore_start_ns = clock_mono_ns();
    rc = restore_start(s, o);
    if (rc < 0 && rc != FERRY_EAGAIN) {
        object_life_set(o, OBJECT_SPILLED);
        store_unref(s, o);
        return rc;
    }
    return FERRY_EAGAIN;
}

static void read_done(struct store *s, struct spill_job *job)
{
    struct object *o = job->arg;
    char hex[2 * FERRY_ID_SIZE + 1];
    int status = job->status;

    if (status == 0 && !o->leaves) { /* found on disk at start: its leaves are new */
        o->leaves = job->leaves;
        job->leaves = NULL;
    }
    free(job->leaves);
    job->leaves = NULL;
    if (status == 0 && o->deleted) { /* its waiters are not for this one any more (a delete */
        err_set(FERRY_ENOENT, "deleted while it was being restored"); /* counted it out) */
        restore_end(s, o, OBJECT_SEALED, FERRY_ENOENT);
        return;
    }
    if (status == 0) {
        s->spilled_objects--;
        s->spilled_bytes -= object_len(o);
        s->counters.restores++;
        s->counters.restore_wait_ns += clock_mono_ns() - o->restore_start_ns;
        restore_end(s, o, OBJECT_SEALED, 0);
        return;
    }
    if (o->block)
        alloc_free(s->alloc, o->block);
    o->block = NULL;
    if (o->deleted) { /* its record was forgotten, its blocks punched: nothing was damaged */
        err_set(FERRY_ENOENT, "deleted while it was being restored");
        restore_end(s, o, OBJECT_SPILLED, FERRY_ENOENT);
        return;
    }
    s->counters.restore_failures++;
    ferry_id_format(&o->id, hex);
    log_warn("object %s: %s; it is dropped", hex, job->why);
    err_set(FERRY_EIO, "object %s: %s", hex, job->why);
    /* Its bytes are lost: it leaves the table (and its record the disk) once its waiters know. */
    o->refcount++;
    restore_end(s, o, OBJECT_SPILLED, FERRY_EIO);
    if (!o->deleted)
        store_remove(s, o, FERRY_EVENT_DELETED);
    store_unref(s, o);
}

/* Room was freed: the restores that waited for it try again. */
static void retry_restores(struct store *s)
{
    struct object *o, *list = s->restore_wait;
    int rc;

    s->restore_wait = NULL;
    while ((o = list)) {
        list = o->restore_next;
        o->restore_next = NULL;
        if (o->deleted) {
            err_set(FERRY_ENOENT, "deleted while it waited to be restored");
            restore_end(s, o, OBJECT_SPILLED, FERRY_ENOENT);
        } else if ((rc = restore_start(s, o)) < 0 && rc != FERRY_EAGAIN) {
            restore_end(s, o, OBJECT_SPILLED, rc);
        }
    }
}

/* Memory was freed or became evictable: what waits for room tries again. */
static void room_now(struct store *s)
{
    s->room_freed = 0;
    s->room_wanted = 0;
    retry_restores(s);
    if (s->events.room)
        s->events.room(s->events.ctx);
    store_spill_pump(s);
}

void store_collect_spill(struct store *s)
{
    struct spill_job *job = spill_take_done(s->spill), *next;
    int freed = job != NULL;

    for (; job; job = next) {
        next = job->next;
        if (job->kind == SPILL_JOB_WRITE)
            write_done(s, job);
        else
            read_done(s, job);
        free(job);
    }
    if (freed)
        room_now(s);
}

void store_after_turn(struct store *s)
{
    store_run_hashes_later(s);
    store_fast_sweep(s, 1);
    s->fast_chances = STORE_FAST_CHANCES;
    if (s->spill && s->room_freed && (s->restore_wait || s->room_wanted))
        room_now(s);
    s->room_freed = 0;
}

/* ---- recovery, persistence ---- */

/* An object found on disk joins the table, spilled; of two records of an id the newer (the
 * larger group sequence) stays and the other is forgotten. One that the arena could never hold
 * stays on disk (a restart with a larger arena takes it), out of the table. */
static void found(void *ctx, struct spill *sp, const struct spill_entry *e, struct spill_rec *r)
{
    struct store *s = ctx;
    struct object *o = store_find(s, &e->id);
    char hex[2 * FERRY_ID_SIZE + 1], f[2][SIZE_FORMAT_LEN];

    if (e->data_size + e->metadata_size > alloc_capacity(s->alloc)) {
        s->counters.recovered_too_large++;
        ferry_id_format(&e->id, hex);
        log_warn("spill: object %s of %s found on disk, larger than the arena of %s: left there",
                 hex, size_format(e->data_size + e->metadata_size, f[0], sizeof(f[0])),
                 size_format(alloc_capacity(s->alloc), f[1], sizeof(f[1])));
        return;
    }
    if (o && spill_rec_seq(o->rec) > spill_rec_seq(r)) {
        spill_forget(sp, r);
        return;
    }
    if (o) {
        spill_forget(sp, o->rec);
        s->spilled_bytes -= object_len(o);
    } else {
        if (!(o = calloc(1, sizeof(*o))) || idmap_put(&s->table, &e->id, o) < 0) {
            free(o);
            log_warn("spill: out of memory taking in an object found on disk");
            return;
        }
        o->id = e->id;
        o->life = OBJECT_SPILLED; /* born on disk */
        o->hashed = 1;
        s->sealed_objects++;
        s->spilled_objects++;
    }
    o->data_size = e->data_size;
    o->metadata_size = e->metadata_size;
    memcpy(o->root, e->digest, DIGEST_LEN);
    free(o->leaves); /* another record's: this one's come with its first restore */
    o->leaves = NULL;
    o->created_ns = e->created_ns;
    o->rec = r;
    free(o->name);
    o->name = e->name[0] ? strdup(e->name) : NULL;
    s->spilled_bytes += object_len(o);
}

int store_spill_open(struct store *s, const char *dir, uint64_t max_bytes, unsigned spill_at,
                     const uint8_t *key)
{
    int rc;

    s->spill_at = spill_at;
    if ((rc = spill_open(&s->spill, dir, max_bytes, key, found, s)) < 0)
        s->spill = NULL;
    return rc;
}

int store_spill_fd(const struct store *s)
{
    return s->spill ? spill_fd(s->spill) : -1;
}

/* Tells progress (when there is one) how far p is. */
static void persist_report(store_progress_fn *progress, void *arg, struct store_progress *p)
{
    if (progress)
        progress(arg, p);
}

/* Sealed and with no copy on disk, nor one on its way. */
static int persist_wants(const struct object *o)
{
    return o->life == OBJECT_SEALED && !o->rec;
}

void store_persist(struct store *s, store_progress_fn *progress, void *arg)
{
    struct object *o;
    size_t pos = 0;
    uint64_t n = 0, failed = 0, step = 0;
    struct store_progress hashed = {.stage = "hashed"}, written = {.stage = "written"};
    char f[SIZE_FORMAT_LEN];

    if (!s->spill)
        return;
    /* Those never asked for are hashed now, STORE_PERSIST_STEP bytes at a time. */
    while ((o = idmap_next(&s->table, &pos, NULL)))
        if (persist_wants(o) && !o->hashed)
            hashed.total += object_len(o);
    if (hashed.total)
        persist_report(progress, arg, &hashed);
    pos = 0;
    while (hashed.total && (o = idmap_next(&s->table, &pos, NULL))) {
        if (!persist_wants(o) || o->hashed)
            continue;
        store_hash_here(s, o);
        step += object_len(o);
        if (step >= STORE_PERSIST_STEP) {
            if (s->hasher)
                hasher_wait_idle(s->hasher);
            hashed.done += step;
            step = 0;
            persist_report(progress, arg, &hashed);
        }
    }
    if (s->hasher) {
        hasher_wait_idle(s->hasher);
        store_collect_hashes(s);
    }
    pos = 0;
    while ((o = idmap_next(&s->table, &pos, NULL)))
        if (persist_wants(o) && o->hashed)
            written.total += object_len(o);
    if (written.total)
        persist_report(progress, arg, &written);
    pos = 0;
    step = 0;
    while ((o = idmap_next(&s->table, &pos, NULL))) {
        if (!persist_wants(o) || !o->hashed)
            continue;
        if (write_object(s, o) == 0) {
            n++;
            step += object_len(o);
        } else {
            failed++;
        }
        if (step >= STORE_PERSIST_STEP) { /* the queue is run dry: a step is on disk */
            spill_wait_idle(s->spill);
            written.done += step;
            step = 0;
            persist_report(progress, arg, &written);
        }
    }
    spill_wait_idle(s->spill);
    store_collect_spill(s);
    written.done += step;
    written.finished = 1;
    if (written.total)
        persist_report(progress, arg, &written);
    log_info("spill: %" PRIu64 " objects (%s) written to %s at exit%s", n,
             size_format(written.done, f, sizeof(f)), spill_dir(s->spill),
             failed || s->counters.spill_failures ? "; some could not be: see above" : "");
}

void store_spill_close(struct store *s)
{
    struct object *o, *waiting = s->restore_wait;

    if (!s->spill)
        return;
    /* Restores still waiting for room are not started now; each holds a reference, and a
     * deleted one is in no table, so it is freed here. */
    s->restore_wait = NULL;
    spill_wait_idle(s->spill);
    store_collect_spill(s);
    while ((o = waiting)) {
        waiting = o->restore_next;
        o->refcount--;
        if (o->deleted && o->refcount == 0)
            store_object_free(s, o);
    }
    spill_close(s->spill);
    s->spill = NULL;
}
