/*
 * fastidx.h - the index of sealed, resident objects that clients read without the daemon, and
 * the slots where they publish what they hold (hazard pointers). It lives in a region of the
 * arena (so every client maps it with the arena); the daemon is its only writer of entries,
 * each client writes only its own block of slots.
 *
 * Layout (the region, 64-byte aligned, sizes in struct fastidx_hdr):
 *   header, then nentries entries of 64 bytes (open addressing, linear probing from the first
 *   8 bytes of the id, which are uniform: SHA-1 of a name, or random), then nblocks blocks of
 *   one 64-byte block header and nslots 8-byte slots.
 *
 * An entry is a seqlock: seq is odd while the daemon writes it, and every change of the
 * entry (publish, unpublish) moves it on, so (entry index, seq) names one life of one entry.
 * A reader takes a copy between two equal, even reads of seq.
 *
 * A reference without the daemon (fastidx_claim): the reader stores (index + 1, seq) in a free
 * slot of its block, then reads seq again; equal, the object is held until the slot is
 * cleared. The daemon, before the memory of a published object can be reused, unpublishes it
 * (seq moves on), then scans every slot for (index + 1, old seq) (fastidx_unpublish): found,
 * the object is held and the daemon keeps it (as a reference of its own) until a later scan
 * finds no such slot (fastidx_held). Both sides use sequentially consistent operations for
 * the store then load (the store-buffering pattern): either the reader sees the new seq and
 * lets go, or the daemon sees the slot.
 *
 * Trust: a client can write anything into the region (it maps the arena writable). The daemon
 * reads only slots, and only compares them: a forged slot keeps an object in memory (as a
 * reference held would) until its client disconnects, when the daemon clears its block. A
 * reader checks what it copies out of an entry against the arena before using it.
 *
 * Thread safety: entries are written by the daemon's loop thread only; any number of client
 * threads (of any process) read them and claim slots of their own block, concurrently.
 */
#ifndef FERRY_FASTIDX_H
#define FERRY_FASTIDX_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

#define FASTIDX_MAGIC 0x58444946u /* "FIDX" */
#define FASTIDX_VERSION 1u
/* One entry per FASTIDX_BYTES_PER_ENTRY of arena, twice over (a half-full table keeps probes
 * short), at least FASTIDX_MIN_ENTRIES: objects past that many go the daemon's way. */
#define FASTIDX_BYTES_PER_ENTRY (64u << 10)
#define FASTIDX_MIN_ENTRIES 4096u
/* Clients with a block of slots at once, and the slots of a block: references held without
 * the daemon at once by one client; past them, gets go the daemon's way. */
#define FASTIDX_BLOCKS 1024u
#define FASTIDX_SLOTS 64u
#define FASTIDX_BLOCK_SIZE (64u + FASTIDX_SLOTS * 8u) /* a block: its header, its slots */
/* A client without a block of slots (all taken, or a library before the index). */
#define FASTIDX_NO_BLOCK UINT32_MAX
/* Load past which nothing more is published (used and dead entries). */
#define FASTIDX_MAX_LOAD_PERCENT 75u

struct fastidx_hdr {
    uint32_t magic, version;
    uint32_t nentries; /* a power of two */
    uint32_t nblocks, nslots;
    uint32_t alive; /* 1 while the daemon serves the index: a claim after it went fails */
    uint64_t entries_off, blocks_off, block_size; /* from the region's start */
    uint8_t reserved[24];
};

/* What a reader copies out of an entry. */
struct fastidx_hit {
    uint32_t index, seq;
    uint64_t offset, data_size, metadata_size;
};

/* The daemon's view: the region and its bookkeeping, in its own heap: each entry's state and
 * seq as the daemon wrote them, which it alone decides by (clients can write the region). */
struct fastidx {
    uint8_t *region;
    uint64_t region_size;
    uint32_t nentries, used, dead; /* entries published, and unpublished not yet reusable */
    uint8_t *states;
    uint32_t *seqs;
    uint64_t blocks_off;                 /* as laid out here, never read back */
    uint64_t taken[FASTIDX_BLOCKS / 64]; /* the blocks clients have */
    uint64_t generation;                 /* the last owner given to a block */
};

/* The region's size for an arena of capacity bytes. */
uint64_t fastidx_region_size(uint64_t capacity);
/* Lays out an empty index in region (region_size bytes, 64-byte aligned, zeroed);
 * FERRY_ENOMEM. fastidx_free frees the daemon's bookkeeping. */
int fastidx_init(struct fastidx *fi, uint8_t *region, uint64_t region_size, uint64_t capacity);
void fastidx_free(struct fastidx *fi);

/* Daemon: publishes an object; its entry index in *index. FERRY_ENOSPACE when the table is
 * full (the object stays the daemon's way). */
int fastidx_publish(struct fastidx *fi, const ferry_id *id, uint64_t offset, uint64_t data_size,
                    uint64_t metadata_size, uint32_t *index);
/* Daemon: unpublishes entry index; returns how many slots held it (0: its memory may go now;
 * else *seq names its last life, for fastidx_held). */
uint32_t fastidx_unpublish(struct fastidx *fi, uint32_t index, uint32_t *seq);
/* Daemon: how many slots hold (index, seq), a life unpublished before. */
uint32_t fastidx_held(const struct fastidx *fi, uint32_t index, uint32_t seq);
/* Daemon: whether a client got entry index since the last call (an LRU's "used"), clearing it. */
int fastidx_take_touched(struct fastidx *fi, uint32_t index);
/* Daemon: a free block for a new client, cleared and named for it (*owner, which the client
 * checks its claims against), or FASTIDX_NO_BLOCK; fastidx_block_give frees it again (the
 * client is gone), so that its slots hold nothing and a client that still claims there fails.
 * Only blocks clients have are scanned. */
uint32_t fastidx_block_take(struct fastidx *fi, uint64_t *owner);
void fastidx_block_give(struct fastidx *fi, uint32_t b);
/* Daemon: the index is served no more (the daemon stops): every claim fails from now on. */
void fastidx_close(struct fastidx *fi);
/* Daemon: every slot in use, sorted, into out (room for FASTIDX_BLOCKS * FASTIDX_SLOTS): one
 * scan for many questions (fastidx_snapshot_count: how many hold (index, seq)). */
size_t fastidx_snapshot(const struct fastidx *fi, uint64_t *out);
uint32_t fastidx_snapshot_count(const uint64_t *snap, size_t n, uint32_t index, uint32_t seq);
/* Daemon: references held through the slots now (for ferry stat), and fast gets counted by
 * the clients (their own counts: a client may lie about its own). */
uint64_t fastidx_slots_used(const struct fastidx *fi);
uint64_t fastidx_gets(const struct fastidx *fi);

/* The region as a client sees it: checked once, then read. */
struct fastidx_view {
    uint8_t *region;
    uint32_t mask, nblocks, nslots;
    uint64_t entries_off, blocks_off, block_size;
};

/* Client: the view of the region at region (size bytes), after checking its header; FERRY_EPROTO
 * when it is not a valid index. */
int fastidx_view_open(struct fastidx_view *v, uint8_t *region, uint64_t size);
/* Client: id's entry, copied; 1 found, 0 not (or being written: take the daemon's way). */
int fastidx_find(const struct fastidx_view *v, const ferry_id *id, struct fastidx_hit *out);
/* Client: holds hit in a free slot of block b, which HELLO gave it as owner; the slot's number,
 * or -1 (the entry changed since, no slot is free, the block is no longer this client's or
 * the daemon stopped: take the daemon's way). */
int fastidx_claim(const struct fastidx_view *v, uint32_t b, uint64_t owner,
                  const struct fastidx_hit *hit);
/* Client: counts n objects got without the daemon, in block b (its stats' fast_gets). */
void fastidx_count_gets(const struct fastidx_view *v, uint32_t b, uint64_t n);
/* Client: gives back slot s of block b. */
void fastidx_release(const struct fastidx_view *v, uint32_t b, int s);

#endif
