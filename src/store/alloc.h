/*
 * alloc.h - the arena allocator: hands out 64-byte-aligned ranges of [0, capacity).
 *
 * It manages offsets only; it never touches the arena's bytes, and all its bookkeeping lives
 * in the daemon's private heap, because clients map the arena writable and must not be able
 * to corrupt the daemon's allocator by writing past an object.
 *
 * Two-level segregated fits (TLSF): free blocks sit in size-class lists found through two
 * bitmaps, so alloc and free are O(1), except that when no larger class has a free block
 * alloc scans the request's own class (so FERRY_ENOSPACE means no free block fits at all),
 * and alloc_largest_free scans the highest non-empty class. Freed blocks coalesce with free
 * neighbours at once, which with good-fit class search keeps fragmentation bounded.
 *
 * Not thread-safe: the daemon's event loop is its only user.
 */
#ifndef FERRY_ALLOC_H
#define FERRY_ALLOC_H

#include <stdint.h>

#define ALLOC_ALIGN 64u

typedef struct alloc alloc;
typedef struct alloc_block alloc_block; /* one allocated range; opaque */

/* capacity is rounded down to ALLOC_ALIGN; FERRY_EINVAL below ALLOC_ALIGN. */
int alloc_init(alloc **out, uint64_t capacity);
/* Frees the allocator and every block still handed out (their handles become invalid). */
void alloc_destroy(alloc *a);

/* A block of at least size bytes (size > 0), rounded up to ALLOC_ALIGN.
 * FERRY_ENOSPACE when no free block is large enough; FERRY_EINVAL for size 0 or > capacity;
 * FERRY_ENOMEM when a descriptor cannot be allocated (the allocator is then unchanged). */
int alloc_alloc(alloc *a, uint64_t size, alloc_block **out);

/* Keeps only [from, from + size) of b, a live block of a (from a multiple of ALLOC_ALIGN, size
 * > 0 rounded up to it, the range inside b), and returns the rest to the free space,
 * coalescing. 0, or FERRY_ENOMEM when a descriptor cannot be allocated (b is then unchanged). */
int alloc_trim(alloc *a, alloc_block *b, uint64_t from, uint64_t size);

/* The same, starting at a multiple of align (a power of two, at least ALLOC_ALIGN). When no
 * free block is large enough to hold it wherever it lies, at most ALLOC_ALIGNED_SCAN_MAX of
 * the smaller ones are looked at (the loop's work stays bounded in an arena of many small
 * free blocks): FERRY_ENOSPACE may then come while a fit exists further on. */
#define ALLOC_ALIGNED_SCAN_MAX 256u
int alloc_alloc_aligned(alloc *a, uint64_t size, uint64_t align, alloc_block **out);

/* Returns b, a live block of a, to the free space, coalescing with free neighbours. */
void alloc_free(alloc *a, alloc_block *b);

uint64_t alloc_block_offset(const alloc_block *b);
uint64_t alloc_block_size(const alloc_block *b); /* the rounded size */

uint64_t alloc_capacity(const alloc *a);
uint64_t alloc_used(const alloc *a);         /* sum of allocated block sizes */
uint64_t alloc_largest_free(const alloc *a); /* the largest block alloc_alloc could return */
uint64_t alloc_free_blocks(const alloc *a);  /* number of free blocks (fragmentation) */

#endif
