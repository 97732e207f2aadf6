/*
 * object.h - one object's record, and its life: where its bytes are (enum object_life), the
 * moves allowed between those places (object_life_set checks them), and the questions the rest
 * of the daemon asks of it (object_sealed, object_resident, object_on_disk). The store (store.c,
 * store_spill.c, store_fast.c) is the only writer of a record; the server and the engine read
 * it through these. Same rules as store.h: the loop's thread only.
 *
 * Its life (store.h states the rules around each move):
 *
 *     CREATED --seal--> SEALED --a write starts--> WRITING --the write ends (or fails)--> SEALED
 *                       |    ^
 *     evicted, a copy   |    | read back (an empty object at once)
 *     on disk           v    |
 *                     SPILLED --a restore starts--> RESTORING --the read ends--> SEALED
 *                        ^--- the read fails, the restore cannot start, or its object was ---'
 *                             deleted while it waited for room
 *
 * It is born CREATED (store_create) or SPILLED (found on disk at start, store_spill.c). Deleted
 * is apart (`deleted`): in any life an object may leave the table while references remain (one
 * deleted while its read is under way still ends SEALED, and goes with its last reference).
 * Restores still waiting when the spill directory closes stay RESTORING until store_destroy.
 */
#ifndef FERRY_OBJECT_H
#define FERRY_OBJECT_H

#include <assert.h>
#include <stdint.h>

#include "common/digest.h"
#include "store/alloc.h"

#include "ferry.h"

enum object_life {
    OBJECT_CREATED,  /* unsealed: its creator writes its bytes */
    OBJECT_SEALED,   /* sealed, its bytes in the arena */
    OBJECT_WRITING,  /* sealed, its bytes in the arena and being written to disk */
    OBJECT_SPILLED,  /* sealed, its bytes on disk only (no block) */
    OBJECT_RESTORING /* sealed, its bytes being read back (or waiting for room to be) */
};

struct spill_rec;

struct object {
    ferry_id id;
    uint64_t offset; /* of the data part; the metadata follows it */
    uint64_t data_size;
    uint64_t metadata_size;
    uint8_t root[DIGEST_LEN]; /* the digest of data and metadata (common/digest.h), once hashed */
    uint8_t *leaves;          /* its digest_leaves() leaves, or NULL for an object of one chunk */
    uint64_t created_ns;
    alloc_block *block; /* NULL when data and metadata are both empty */
    uint32_t refcount;
    uint8_t life;         /* enum object_life: only object_life_set writes it, after its birth */
    uint8_t deleted;      /* unlinked from the table, waiting for its last reference */
    uint8_t hashed;       /* `root` (and `leaves`) are set */
    uint8_t hashing;      /* the hasher's threads are reading the bytes */
    uint8_t hash_counted; /* while hashing: its bytes are in hashing_bytes (to be spilled) */
    uint8_t hash_failed;  /* while hashing: a job failed (the rest is hashed on the loop) */
    uint32_t hash_jobs;   /* while hashing: the hasher's jobs not taken back yet */
    uint64_t lru_seq;     /* logical time of last use (seal, release to zero, refresh) */
    void *creator;        /* opaque owner while unsealed (the client session) */
    char *name;           /* what people call it (store_set_name), or NULL; freed with o */
    struct object *lru_prev, *lru_next;
    struct spill_rec *rec; /* its copy in the spill directory, or NULL */
    uint8_t in_dirty;      /* linked in the dirty list, not the LRU */
    uint8_t restore_waits; /* its restore waits for room rather than fail */
    uint8_t renamed;       /* named while its bytes were written: written again after */
    uint8_t kept;          /* store_keep: never dropped for room (spilled, with a spill dir) */
    uint8_t read;          /* a reader took it (store_mark_read) since it was sealed */
    uint8_t unused;        /* store_delete_unused: deleted when its last reference goes */
    struct object *restore_next; /* in the list of restores waiting for room */
    uint64_t restore_start_ns;
    /* The shared index (store_fast.c): published there at fast_index; after unpublishing, a
     * client's slot may still hold the life fast_seq: adopted (a reference of the store's),
     * linked in fast_held until no slot does. */
    uint32_t fast_index, fast_seq;
    uint8_t fast_published, fast_adopted;
    struct object *fast_next;
};

/* Whether the arrow from -> to is in the diagram above. */
static inline int object_life_allowed(enum object_life from, enum object_life to)
{
    switch (from) {
    case OBJECT_CREATED:
        return to == OBJECT_SEALED;
    case OBJECT_SEALED:
        return to == OBJECT_WRITING || to == OBJECT_SPILLED;
    case OBJECT_WRITING:
        return to == OBJECT_SEALED;
    case OBJECT_SPILLED:
        return to == OBJECT_RESTORING || to == OBJECT_SEALED;
    case OBJECT_RESTORING:
        return to == OBJECT_SEALED || to == OBJECT_SPILLED;
    }
    return 0;
}

/* Moves o along an arrow; a move off the diagram is a bug of the store's, stopped in Debug
 * builds (make asan: assert). */
static inline void object_life_set(struct object *o, enum object_life to)
{
    assert(object_life_allowed((enum object_life)o->life, to));
    o->life = (uint8_t)to;
}

/* Sealed: its bytes never change again, wherever they are. */
static inline int object_sealed(const struct object *o)
{
    return o->life != OBJECT_CREATED;
}

/* Sealed with its bytes in the arena, where a reader can take them now. */
static inline int object_resident(const struct object *o)
{
    return o->life == OBJECT_SEALED || o->life == OBJECT_WRITING;
}

/* Sealed with its bytes on disk only: a reader waits for a restore. */
static inline int object_on_disk(const struct object *o)
{
    return o->life == OBJECT_SPILLED || o->life == OBJECT_RESTORING;
}

/* What clients are told of its state (ferry_object_info.state). */
static inline uint8_t object_public_state(const struct object *o)
{
    return o->life == OBJECT_CREATED ? FERRY_STATE_CREATED
           : object_on_disk(o)       ? FERRY_STATE_SPILLED
                                     : FERRY_STATE_SEALED;
}

#endif
