/*
 * store_int.h - what store.c (the table, the LRU, eviction) and store_spill.c (memory as a
 * cache over the spill directory) share. Same rules as store.h: the loop's thread only.
 */
#ifndef FERRY_STORE_INT_H
#define FERRY_STORE_INT_H

#include "store/store.h"

uint64_t store_block_size(const struct object *o);
int store_in_lru(const struct object *o);
void store_lru_unlink(struct store *s, struct object *o);
void store_lru_push_young(struct store *s, struct object *o);
void store_lru_insert_ordered(struct store *s, struct object *o);
void store_object_free(struct store *s, struct object *o);
void store_remove(struct store *s, struct object *o, int event);
/* store_hash, but a small object is hashed now, on this thread (store_persist: steps of
 * bytes hashed, no hook run while it walks the table). */
int store_hash_here(struct store *s, struct object *o);
/* Computes the small objects' digests started this turn (store_after_turn). */
void store_run_hashes_later(struct store *s);
/* Room for size bytes (see store_create's errors). */
int store_alloc(struct store *s, uint64_t size, uint64_t align, alloc_block **out);

/* Starts writes while the arena's use passes spill_at or room is wanted (none without a spill
 * directory). */
void store_spill_pump(struct store *s);
/* Frees the memory of o, an LRU object with a copy on disk: it stays, spilled. */
void store_spill_out(struct store *s, struct object *o);
/* Asked when nothing more can be evicted: FERRY_EAGAIN when writes under way will make room
 * for rounded bytes, else FERRY_ENOSPACE. */
int store_spill_make_room(struct store *s, uint64_t rounded);
/* "; spill directory D: X of Y" for room errors, or "" without one. */
void store_spill_describe(const struct store *s, char *buf, size_t size);
/* Finishes the I/O under way and closes the spill directory, keeping its records. */
void store_spill_close(struct store *s);

#endif
