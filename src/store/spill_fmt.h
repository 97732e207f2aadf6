/*
 * spill_fmt.h - the on-disk form of the spill directory's records.
 *
 * A segment file is a chain of groups from offset 0. A group is a header of hdr_len bytes
 * listing its objects, then their bytes (each at its payload_off, 64-byte aligned), group_len
 * bytes in all; the next group starts at the group's offset + group_len. Every length and
 * offset is a multiple of SPILL_BLOCK, so that groups are written and read with O_DIRECT.
 *
 * A group's header is written only after its bytes, so a process killed while spilling
 * leaves a chain that ends either at a complete group or at zeroes (or a torn header, which
 * the checksum rejects): nothing half-written is ever taken for an object. A deleted object's
 * entry is flagged in its header, which is rewritten whole.
 *
 * Header, little-endian: magic u64, version u32, n u32, seq u64, hdr_len u64, group_len u64,
 * checksum u64 (XXH3 of the hdr_len bytes with this field and the MAC zero), MAC (32 bytes:
 * spill_hdr_sign, zero without a key), then n entries: id, data_size u64, metadata_size u64,
 * digest (DIGEST_LEN bytes: the root), created_ns u64, payload_off u64, flags u8, name as u8
 * length + bytes; zeroes to hdr_len.
 *
 * Version 2 carries the SHA-256 root (common/digest.h) and the MAC; version 1 carried an XXH3
 * digest. Segments of another version are left alone, neither taken nor cut (spill.c): bytes
 * only ever checked with a forgeable hash must not get the new digest's trust by a rehash, so
 * the operator decides (move the directory aside).
 */
#ifndef FERRY_SPILL_FMT_H
#define FERRY_SPILL_FMT_H

#include <stddef.h>
#include <stdint.h>

#include "common/digest.h"
#include "ferry.h"

#define SPILL_MAGIC 0x31504c5359525246ull /* "FRRYSLP1" */
#define SPILL_VERSION 2u
#define SPILL_BLOCK 4096u
#define SPILL_FIXED_SIZE 80u
#define SPILL_ENTRY_FIXED (FERRY_ID_SIZE + 5u * 8u + DIGEST_LEN + 1u + 1u)
#define SPILL_ENTRIES_MAX 256u /* objects in one group */
/* The largest header: every entry with the longest name. */
#define SPILL_HDR_MAX                                                                              \
    ((SPILL_FIXED_SIZE + SPILL_ENTRIES_MAX * (SPILL_ENTRY_FIXED + FERRY_NAME_MAX) + SPILL_BLOCK -  \
      1) /                                                                                         \
     SPILL_BLOCK * SPILL_BLOCK)

#define SPILL_ENTRY_DELETED 1u

struct spill_entry {
    ferry_id id;
    uint64_t data_size, metadata_size;
    uint8_t digest[DIGEST_LEN]; /* the object's root (ferry_digest) */
    uint64_t created_ns;
    uint64_t payload_off; /* from the group's start */
    uint8_t flags;        /* SPILL_ENTRY_DELETED */
    char name[FERRY_NAME_MAX + 1];
};

struct spill_group {
    uint64_t seq; /* increases with every group written to the directory */
    uint64_t hdr_len, group_len;
    uint32_t n;
};

/* 1 when a and b say the same (their names compared as strings). */
int spill_entry_equal(const struct spill_entry *a, const struct spill_entry *b);

/* Rounds up to SPILL_BLOCK. */
static inline uint64_t spill_round(uint64_t n)
{
    return (n + SPILL_BLOCK - 1) / SPILL_BLOCK * SPILL_BLOCK;
}

/* The header's length for these entries, a multiple of SPILL_BLOCK. */
uint64_t spill_hdr_len(const struct spill_entry *e, uint32_t n);

/* XXH3 of a header of len bytes with its checksum field taken as zero. */
uint64_t spill_hdr_checksum(const uint8_t *buf, uint64_t len);

/* Writes the header of g (g->hdr_len bytes, from spill_hdr_len) into buf, checksum included. */
void spill_hdr_encode(uint8_t *buf, const struct spill_group *g, const struct spill_entry *e);

/* With a key (MAC_LEN bytes, the spill's: derived from the cluster secret), a header is signed:
 * HMAC-SHA256 of its len bytes with the MAC field zero, bound to where it lies (segment seg, at
 * offset off), so that no header is valid elsewhere or without the key. 0, or FERRY_ESYS. */
int spill_hdr_sign(uint8_t *buf, uint64_t len, const uint8_t *key, uint32_t seg, uint64_t off);
/* 0 when buf's MAC is the one key gives it there; FERRY_EAUTH (detail set) or FERRY_ESYS. */
int spill_hdr_verify(const uint8_t *buf, uint64_t len, const uint8_t *key, uint32_t seg,
                     uint64_t off);

/* Reads the fixed part from the first len bytes (at least SPILL_FIXED_SIZE) and checks what it
 * can: magic, version, n, lengths. FERRY_EPROTO (detail set) when it is not a group's header,
 * among them one of another format version. */
int spill_hdr_decode_fixed(const uint8_t *buf, size_t len, struct spill_group *g);

/* Reads a whole header (g->hdr_len bytes, its fixed part decoded into g) into e[0..g->n),
 * checking the checksum and that every entry's bytes lie inside the group. FERRY_EPROTO. */
int spill_hdr_decode(const uint8_t *buf, const struct spill_group *g, struct spill_entry *e);

#endif
