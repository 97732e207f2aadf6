/*
 * putring.h - a client's ring of puts in the arena (ferry_put_nowait): the client copies a small
 * object's bytes into the ring and publishes an entry naming them; the daemon takes entries in
 * order, copies each into an object of its own and seals it. A put then costs its caller a copy
 * and a few stores, no message; the daemon takes a whole burst in one turn.
 *
 * Layout (a block of the arena the daemon reserved for the client, 64-byte aligned):
 *   the header (two cache lines: the client's, the daemon's), then nentries entries of 64 bytes,
 *   then the data area of data_size bytes. Entry k of the ring's life lives at k % nentries.
 *   Positions in the data area are counted from the ring's start without wrapping (u64); an
 *   object's bytes lie whole at pos % data_size: one that would cross the end starts at the
 *   next turn of the area instead.
 *
 * Counters: tail (entries published: the client's alone), head and data_head (entries taken,
 * and the position up to which the data area is free again: the daemon's alone). The client
 * reuses an entry and bytes only once head and data_head have passed them.
 *
 * Waking: the daemon sets sleeping before it sleeps, then reads tail once more; the client stores
 * tail, then reads sleeping, and sends a kick (PROTO_KICK) when it is set. Both sides use
 * sequentially consistent fences between their store and their load (the store-buffering
 * pattern): either the daemon sees the new tail and does not sleep, or the client sees the flag
 * and wakes it.
 *
 * Trust: the client can write anything in its ring (and in the arena). The daemon keeps its own
 * head and data_head and only writes them out; it reads tail and each entry once, into its own
 * memory, and checks them there (putring_take): a tail more than nentries ahead, or an entry that
 * exceeds FERRY_SMALL_PUT_MAX or is not where the push places it (after the one before, so that
 * taking a full ring copies one data area at most), ends the client's connection. The
 * bytes of an object may change while the daemon copies them: the object is the client's, and
 * only the client's put is harmed.
 *
 * Thread safety: one client thread at a time pushes (the handle's lock); the daemon's loop thread
 * alone takes.
 */
#ifndef FERRY_PUTRING_H
#define FERRY_PUTRING_H

#include <stdatomic.h>
#include <stdint.h>

#include "ferry.h"

#define PUTRING_HEADER_SIZE 128u
#define PUTRING_ENTRY_SIZE 64u
/* Entries per byte of the block (one per 2 KiB), a power of two within these bounds. */
#define PUTRING_BYTES_PER_ENTRY 2048u
#define PUTRING_MIN_ENTRIES 16u
#define PUTRING_MAX_ENTRIES 1024u
/* The smallest block a ring lays out in: its data area then holds two of the largest objects,
 * so that one always fits in an empty ring, wherever the last one ended. */
#define PUTRING_MIN_SIZE                                                                           \
    (PUTRING_HEADER_SIZE + PUTRING_MIN_ENTRIES * PUTRING_ENTRY_SIZE + 2 * FERRY_SMALL_PUT_MAX)

struct putring_hdr {
    _Atomic uint64_t tail; /* the client's: entries published */
    uint8_t client_pad[56];
    _Atomic uint64_t head;      /* the daemon's: entries taken */
    _Atomic uint64_t data_head; /* the daemon's: the data area is free up to here */
    _Atomic uint32_t sleeping;  /* the daemon's: 1 when a put must kick it */
    uint8_t daemon_pad[44];
};
_Static_assert(sizeof(struct putring_hdr) == PUTRING_HEADER_SIZE, "the header's layout");

/* An entry as the ring holds it. */
struct putring_entry {
    uint64_t pos; /* of the data, then the metadata, in the data area */
    ferry_id id;
    uint32_t data_size, metadata_size;
    uint8_t pad[PUTRING_ENTRY_SIZE - 8 - FERRY_ID_SIZE - 8];
};
_Static_assert(sizeof(struct putring_entry) == PUTRING_ENTRY_SIZE, "an entry's layout");

/* A ring's geometry, as either side computes it from the block's size (never read back). */
struct putring {
    uint8_t *base; /* the block */
    uint32_t nentries;
    uint64_t entries_off, data_off, data_size;
};

/* An entry taken, checked: its bytes lie at offset (from the block's start), data then metadata. */
struct putring_item {
    ferry_id id;
    uint64_t offset, data_size, metadata_size;
    uint64_t end; /* the data area's position after it */
};

/* The geometry of a ring in the block at base of size bytes (64-byte aligned); FERRY_EINVAL
 * when the block is smaller than PUTRING_MIN_SIZE. Lays nothing out: a fresh block is zeroed
 * by whoever reserved it (putring_reset). */
int putring_layout(struct putring *r, uint8_t *base, uint64_t size);
/* Daemon: zeroes the header (a new client's ring). */
void putring_reset(const struct putring *r);

/* Client: copies the object into the ring and publishes its entry; tail is the client's own
 * count (advanced here). 1 when the daemon sleeps and must be kicked, 0 when not, FERRY_EAGAIN
 * when the ring is full (nothing written), FERRY_ETOOBIG when the object cannot go by a ring. */
int putring_push(const struct putring *r, uint64_t *tail, uint64_t *data_tail, const ferry_id *id,
                 const void *data, uint64_t data_size, const void *metadata,
                 uint64_t metadata_size);
/* Client: whether the daemon has taken everything published up to tail. */
int putring_drained(const struct putring *r, uint64_t tail);

/* Daemon: the entries published and not taken (tail - head), or FERRY_EPROTO when the client's
 * tail is not within nentries of head. */
int64_t putring_pending(const struct putring *r, uint64_t head);
/* Daemon: entry head, copied and checked, data_head being where the entry before it ended and
 * released where the data area was last given back (putring_release: the daemon's own counts);
 * FERRY_EPROTO (with the reason) when it exceeds FERRY_SMALL_PUT_MAX, does not lie where the
 * client's push places it (right after the one before), or ends more than one data area past
 * released (bytes the client could not have written yet). So the entries taken between two
 * releases copy one data area at most. */
int putring_take(const struct putring *r, uint64_t head, uint64_t data_head, uint64_t released,
                 struct putring_item *out);
/* Daemon: gives back what was taken up to head, its bytes up to data_head. */
void putring_release(const struct putring *r, uint64_t head, uint64_t data_head);
/* Daemon, before sleeping: putring_want_kick on every ring (sleeping = 1), one putring_fence,
 * then putring_waiting on each: nonzero when entries wait (do not sleep). putring_awake clears
 * the flag when it is set. */
void putring_want_kick(const struct putring *r);
void putring_fence(void);
int putring_waiting(const struct putring *r, uint64_t head);
void putring_awake(const struct putring *r);

#endif
