/*
 * store.h - the object table of one arena: ids to objects, their states and reference
 * counts, the LRU of evictable objects, and eviction.
 *
 * Ownership and rules (the daemon's event loop is the only thread that calls in):
 * - An object is created (unsealed) with one reference, its creator's. It is in the table
 *   (by id) from create until abort, delete or eviction.
 * - It is in the LRU exactly when it is OBJECT_SEALED (resident, not being written),
 *   unreferenced, not deleted and not kept (without a spill directory); the LRU runs
 *   from oldest (lru.next) to youngest (lru.prev), ordered by lru_seq, the logical time of
 *   last use. Only LRU members are ever evicted.
 * - Its digest is computed after its seal, on the hasher's threads (`hashing`), or only when
 *   asked for (store_hash: hash_on_demand, a daemon with no directory to publish it to). An
 *   object being hashed is evicted and deleted like any other: its jobs not started yet are
 *   dropped, those running (HASHER_JOB_CHUNKS chunks at most) finish first, so no thread reads
 *   freed bytes and no create waits for digests.
 * - Delete of a referenced object unlinks it from the table at once (`deleted`); its memory
 *   goes with its last reference. So a new object may take the id while old readers remain.
 *   Delete when unused (store_delete_unused, `unused`) waits instead: the object stays in the
 *   table while referenced, and is deleted when its last reference goes (the lifetime of a
 *   framework's intermediate result, shared by several processes of a node).
 * - Object bytes live at base + offset: data_size bytes of data, then the metadata.
 * - A kept object (store_keep) is never dropped for room: without a spill directory it stays
 *   out of the LRU until let go or deleted, so a producer's object waits for its consumer; a
 *   create that finds the arena full of kept objects fails with FERRY_ENOSPACE saying so.
 *   With one it is spilled like any other (spilling drops nothing). Kept is a flag, not a count
 *   (one let-go ends it), the store's and not a client's (it outlives the connection), and
 *   bounded store-wide: max_kept_bytes of data and metadata (half the arena by default; not
 *   with a spill directory, where they hold no memory) and max_objects / 2 objects, so that
 *   kept objects never take all the room puts need. It is not
 *   written to the spill directory: a restart forgets it.
 *
 * With a spill directory (store_spill_open) memory is a cache over the disk:
 * - A sealed, unreferenced, resident object without a copy on disk (`rec`) is in the dirty
 *   list instead of the LRU: it must be written before its memory can go, and hashed before
 *   it is written (its entry holds its root): while being hashed it is in neither list and
 *   its bytes count in hashing_bytes (creates wait for them as for writes). Writes start, oldest
 *   first, when the arena's use less what can go at once passes spill_at percent, or when a
 *   create or restore needs room; while its bytes are written (OBJECT_WRITING) an object is in
 *   neither list and is not freed (readers may still take and use it: reading wins).
 * - The LRU then holds only objects with a copy on disk; eviction frees their memory and keeps
 *   them in the table (OBJECT_SPILLED). Nothing is dropped for room: without room now, a create
 *   gets FERRY_EAGAIN while writes make some, and store_events.room tells when to try again.
 * - A spilled object is read back on demand (store_restore): one read for any number of
 *   accesses, holding a reference meanwhile; store_events.restored tells how it went.
 * - Deleting an object forgets its record on disk; destroying the store keeps the records.
 */
#ifndef FERRY_STORE_H
#define FERRY_STORE_H

#include <stdint.h>

#include "common/digest.h"
#include "common/idmap.h"
#include "store/alloc.h"
#include "store/hasher.h"
#include "store/object.h"
#include "store/spill.h"

struct fastidx;

/* Objects up to this size are hashed on the loop's thread (0.13 ms of SHA-256), after the turn
 * that sealed them (store_after_turn: their seal is answered first); larger ones on the
 * hasher's threads (see `hashing`). */
#define STORE_INLINE_HASH_MAX (256u << 10)
/* The hasher's threads: this machine's two cores (an object's chunks are spread over them). */
#define STORE_HASHER_THREADS 2u

/* What one object costs in the daemon's own memory (its record, its slot in the table, the
 * allocator's block), measured: 200,000 sealed empty objects grew ferryd's RSS by 80 MiB,
 * STORE_OBJECT_COST bytes each. The default bound on objects keeps that to about 5 % of the
 * arena: one object per STORE_BYTES_PER_OBJECT of it, and never fewer than STORE_OBJECTS_MIN,
 * whose sixteenth (a client's share, max_held) is a whole put batch (PROTO_MAX_BATCH, 4096):
 * 65536 objects, about 26 MiB of daemon memory when all are there (the table grows as they
 * come). */
#define STORE_OBJECT_COST 420u
#define STORE_BYTES_PER_OBJECT (8u << 10)
#define STORE_OBJECTS_MIN 65536u
#define STORE_HELD_SHARE 16u /* a client may hold 1/STORE_HELD_SHARE of max_objects */

/* Called as things become visible or disappear, for subscriptions: sealed() after a seal,
 * removed() with FERRY_EVENT_DELETED or FERRY_EVENT_EVICTED when an object leaves the table,
 * hashed() when a digest computed off the loop is in; restored() when a restore ended (0: o
 * is resident; else the status, ferry_errmsg() saying why, and o leaves the table after),
 * room() when memory was freed that creates and restores told FERRY_EAGAIN may now take. */
struct store_events {
    void (*sealed)(void *ctx, const struct object *o);
    void (*removed)(void *ctx, const struct object *o, int event);
    void (*hashed)(void *ctx, struct object *o);
    void (*restored)(void *ctx, struct object *o, int status);
    void (*room)(void *ctx);
    void *ctx;
};

struct store_counters {
    uint64_t created, sealed, aborted, deleted, evicted_objects, evicted_bytes, refused;
    uint64_t restores, restore_wait_ns, restore_failures, spill_failures, creates_waited;
    uint64_t recovered_too_large; /* found on disk, larger than the arena: left there */
    uint64_t refused_objects;     /* creates refused by max_objects, or by a client's share */
    uint64_t hashed_bytes;        /* of the digests computed here */
    uint64_t hash_jobs_dropped;   /* of objects that went before their turn (hasher_cancel) */
    uint64_t evicted_unread;      /* evicted before any reader took them (see `read`) */
    uint64_t fast_adopted;        /* objects kept after unpublishing: a slot still held them */
    uint64_t deleted_unused;      /* deleted at their last reference (store_delete_unused) */
};

/* Evictions of objects nobody read are warned of at most this often, together. */
#define STORE_UNREAD_WARN_NS (10ull * 1000000000ull)

/* Writes in flight at most (more when one create or restore needs more). */
#define STORE_SPILL_INFLIGHT (128ull << 20)

struct store {
    uint8_t *base;
    alloc *alloc;
    idmap table;
    struct object lru; /* sentinel */
    uint64_t evictable_bytes;
    uint64_t hashing_bytes; /* of objects hashed before they are written (hash_counted) */
    uint64_t lru_clock;
    uint64_t sealed_objects;
    uint64_t max_objects; /* in the table at most (store_init: the default for the arena) */
    uint64_t max_held;    /* objects one client may hold (server.h) when it creates one */
    struct store_events events;
    struct store_counters counters;
    struct hasher *hasher;           /* NULL: every digest is computed inline */
    struct hasher_job *hashes_back;  /* taken from the hasher, being finished (finish_hashes) */
    struct hasher_job *hashes_later; /* small objects' jobs, for the loop after the turn */
    int hash_on_demand;              /* seals do not hash: store_hash does, when asked */
    /* Spilling (all zero without a spill directory). */
    struct spill *spill;
    struct object dirty; /* sentinel of the dirty list, oldest first */
    uint64_t dirty_bytes, writing_bytes, spilled_objects, spilled_bytes;
    unsigned spill_at;                 /* percent of the arena */
    uint64_t room_wanted;              /* the largest room a create or restore waits for */
    uint64_t spill_blocked_ns;         /* after a failed write: no new write before this time */
    struct object *restore_wait;       /* restores waiting for room (each holds a reference) */
    int room_freed;                    /* memory became free or evictable since the last turn */
    uint64_t kept_objects, kept_bytes; /* in the table with `kept` (bytes: data + metadata) */
    uint64_t max_kept_bytes;           /* kept_bytes at most (store_init: half the arena) */
    /* Evicted unread and not yet warned of; the last warning's time (one per
     * STORE_UNREAD_WARN_NS at most). */
    uint64_t unread_unlogged, unread_unlogged_bytes, unread_warned_ns;
    struct fastidx *fast;     /* the shared index (NULL: none), its owner's (store_fast.c) */
    struct object *fast_held; /* adopted objects, until no slot holds them */
    uint64_t *fast_snap;      /* the sweep's copy of the slots (FASTIDX_BLOCKS * FASTIDX_SLOTS) */
    uint64_t fast_swept_ns;
    /* Second chances left in this loop turn (STORE_FAST_CHANCES): clients that keep getting
     * every object cannot keep an eviction going round the LRU for ever. */
    uint32_t fast_chances;
};

/* max_objects 0: one per STORE_BYTES_PER_OBJECT of capacity, at least STORE_OBJECTS_MIN.
 * max_held: a sixteenth of them (at least 1) in every case, so that sixteen clients are needed
 * to fill the table; a whole put batch at the default, fewer under a smaller --max-objects. */
int store_init(struct store *s, uint8_t *base, uint64_t capacity, uint64_t max_objects,
               const struct store_events *ev);
/* Stops the hasher (if any), collecting its digests, then frees every object whatever its
 * references (the daemon is going away). */
void store_destroy(struct store *s);

/* The object with this id in the table (sealed or not), or NULL. */
struct object *store_find(const struct store *s, const ferry_id *id);

/* A new unsealed object holding one reference for creator. FERRY_EEXIST, FERRY_ETOOBIG,
 * FERRY_ENOSPACE (evicting LRU objects first as needed, for bytes and for max_objects; figures in
 * ferry_errmsg()), and with a spill directory FERRY_EAGAIN: writes under way will make room (see
 * room()). */
int store_create(struct store *s, const ferry_id *id, uint64_t data_size, uint64_t metadata_size,
                 void *creator, struct object **out);
/* The same, for a creator that writes through pages of its own (a client's writable view:
 * pages turn writable for it alone while the object is open): the object takes whole pages
 * (page a power of two; 0 places it as store_create does) and no other object shares them
 * until its seal, which gives back the rest of its last page. */
int store_create_paged(struct store *s, const ferry_id *id, uint64_t data_size,
                       uint64_t metadata_size, uint64_t page, void *creator, struct object **out);

/* Seals an unsealed object and makes it visible; its digest is started (on the hasher, or for
 * the loop after this turn), computed now if neither can take it (o->hashed tells), or with
 * hash_on_demand left for store_hash. */
void store_seal(struct store *s, struct object *o);

/* Makes sure o's digest is computed or under way: 1 when it is in (o->hashed), 0 when the
 * hasher computes it and hashed() follows (unless o goes first: keep a reference to wait for
 * it). Also for a created object whose bytes are final, ahead of its seal (a seal that waits
 * for the directory: ferryd --strict-ids); it stays unsealed and invisible. */
int store_hash(struct store *s, struct object *o);
/* o's digest, if it waits for the end of the turn (a small object's), computed now, its hashed()
 * hook run: 1 when o is hashed after (a sealed object that is not deleted stays). */
int store_hash_finish(struct store *s, struct object *o);
/* 1 while small objects' digests wait for the next store_after_turn (the loop must not sleep). */
int store_hashes_pending(const struct store *s);

/* Seals o with a digest computed elsewhere from the same bytes (a fetched copy inherits the
 * holder's root and leaves, which its transfer checked): nothing is hashed again. leaves
 * (malloc'd, digest_leaves() of them, or NULL for one chunk) become o's. */
void store_seal_digest(struct store *s, struct object *o, const uint8_t root[DIGEST_LEN],
                       uint8_t *leaves);

/* Takes in the digests the hasher finished (call when hasher_fd() is readable). */
void store_collect_hashes(struct store *s);

/* Drops an unsealed object and its creator's reference: it leaves the table now, and its memory
 * goes with the last other reference (a peer's pin of a copy being received, sent onward). */
void store_abort(struct store *s, struct object *o);

void store_ref(struct store *s, struct object *o);
/* Drops a reference; at zero a deleted object is freed and a sealed one joins the young end
 * of the LRU. */
void store_unref(struct store *s, struct object *o);

/* Deletes a sealed object (see the rules above). */
void store_delete(struct store *s, struct object *o);

/* Deletes o when its last reference goes: at once if it has none; until then it stays in the
 * table, so gets still find it and take references, which delay it further. It is let go if
 * kept, and no longer in the shared index (gets go through the daemon, so that every reference
 * is counted here); a client holding it through a slot delays it too (adopted). o is sealed, or
 * unsealed and so still its creator's (then it goes at the last release after its seal). */
void store_delete_unused(struct store *s, struct object *o);

/* Makes an evictable object (or one that will be once hashed) the youngest; referenced ones
 * are left alone (they join the LRU at the young end when released). */
void store_touch(struct store *s, struct object *o);

/* Keeps o (keep 1) or lets it go (keep 0): see the rules above. o is sealed, or unsealed and
 * so still its creator's. FERRY_ENOSPACE (nothing changed) when keeping it would pass the
 * bounds on kept objects. */
int store_keep(struct store *s, struct object *o, int keep);

/* A reader took o (a get, or a peer's pull): its eviction is not a producer's loss. */
static inline void store_mark_read(struct object *o)
{
    o->read = 1;
}

/* The shared index (store_fast.c). Publishes o when it is sealed, resident and not yet
 * published (a seal does; a get through the daemon does again after an unpublish). */
void store_fast_publish(struct store *s, struct object *o);
/* Unpublishes o before its memory can go: 1 when a client's slot held it, and the store now
 * holds a reference until none does (store_fast_sweep gives it back). */
int store_fast_unpublish(struct store *s, struct object *o);
/* An LRU member got without the daemon since it was last looked at is moved to the young end
 * (1): the eviction's second chance, which keeps LRU order for gets the daemon does not see. */
int store_fast_touched(struct store *s, struct object *o);
/* Gives back the references of adopted objects that no slot holds any more: after every loop
 * turn at most once per STORE_FAST_SWEEP_NS (later 1), and at once before an eviction (0), as
 * releases without the daemon send it nothing. */
void store_fast_sweep(struct store *s, int later);
#define STORE_FAST_SWEEP_NS (1000000ull)
#define STORE_FAST_CHANCES 4096u

/* Evicts LRU objects, oldest first, until at least bytes are freed or none is left; returns
 * the bytes freed. */
uint64_t store_evict(struct store *s, uint64_t bytes);

/* Space that is not an object (a client's staging area), evicting as needed; FERRY_EAGAIN as
 * store_create. */
int store_reserve(struct store *s, uint64_t size, alloc_block **out);
void store_unreserve(struct store *s, alloc_block *b);

/* Opens the spill directory (spill.h) and takes in the objects found there as spilled, sealed
 * ones (but for those larger than the arena: left on disk, counted); spill_at is the percent of
 * the arena past which writes start; key: NULL, or the MAC_LEN bytes that sign the directory's
 * records (spill_open). */
int store_spill_open(struct store *s, const char *dir, uint64_t max_bytes, unsigned spill_at,
                     const uint8_t *key);
/* Readable when spill I/O finished: call store_collect_spill. -1 without a spill directory. */
int store_spill_fd(const struct store *s);
void store_collect_spill(struct store *s);
/* Makes a sealed object's bytes resident: 0 when they are, FERRY_EAGAIN when a read is under
 * way or waits for room (restored() follows), or why it cannot be (FERRY_ENOSPACE: the arena
 * is held by references and unsealed objects; with wait, the restore waits for room instead). */
int store_restore(struct store *s, struct object *o, int wait);
/* After the loop's turn: the small objects' digests started in it are computed (hashed()
 * follows each); when memory was freed meanwhile and restores or creates wait for it, they
 * try again (room()). Deferred so that no release re-enters them where it happens. */
void store_after_turn(struct store *s);
/* How store_persist is getting on: in stage "hashed" (the digests of objects never asked for)
 * or "written" (bytes whose writes were queued and have ended: one that failed is logged),
 * done of total bytes; finished on the last report, once every write has ended (done falls
 * short of total by the writes the spill refused: its limit, a full disk). */
struct store_progress {
    const char *stage;
    uint64_t done, total;
    int finished;
};
typedef void store_progress_fn(void *arg, const struct store_progress *p);
/* store_persist reports after each step of at most this many bytes hashed or written. */
#define STORE_PERSIST_STEP (256ull << 20)

/* Writes every sealed object that has no copy on disk, and waits (the daemon is stopping).
 * progress (NULL: none), on the calling thread, hears of each stage's start, of each step of
 * STORE_PERSIST_STEP bytes at most, and of the end; never when there is nothing to write. */
void store_persist(struct store *s, store_progress_fn *progress, void *arg);

/* Keeps a copy of name (checked by the caller) with o, replacing one given before. An object
 * in memory with a copy on disk is written again; one on disk only keeps its old name there
 * (a restart shows it). */
int store_set_name(struct store *s, struct object *o, const char *name);
uint64_t store_capacity(const struct store *s);
uint64_t store_used(const struct store *s);

#endif
