/*
 * idmap.h - a hash map from ferry_id to a non-NULL pointer: open addressing, linear probing,
 * backward-shift deletion (no tombstones), doubling at 3/4 load. Used for the object table,
 * each session's references, and the get waiters. A zeroed struct is an empty map.
 * Not thread-safe; the map must not be changed while it is being iterated.
 */
#ifndef FERRY_IDMAP_H
#define FERRY_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

struct idmap_slot {
    ferry_id key;
    uint64_t hash;
    void *value; /* NULL: empty slot */
};

typedef struct idmap {
    struct idmap_slot *slots;
    size_t mask; /* capacity - 1, capacity a power of two; 0 when nothing is allocated */
    size_t count;
} idmap;

void idmap_free(idmap *m);
void *idmap_get(const idmap *m, const ferry_id *id);
/* Inserts or replaces. 0, or FERRY_ENOMEM (the map is unchanged); replacing cannot fail. */
int idmap_put(idmap *m, const ferry_id *id, void *value);
/* Removes id and returns its value, NULL when absent. */
void *idmap_remove(idmap *m, const ferry_id *id);
/* Iteration: start with *pos = 0; returns the next value (and its key) or NULL at the end. */
void *idmap_next(const idmap *m, size_t *pos, const ferry_id **key);

#endif
