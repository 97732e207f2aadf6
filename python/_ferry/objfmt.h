/*
 * objfmt.h - the layout of objects stored by put_object: a pickle (protocol 5) stream and its
 * out-of-band buffers in one object, described by its metadata. Plain C, no Python, so that a
 * fuzz target can drive the decoder.
 *
 * Data part: the parts one after another, each starting at a multiple of OBJFMT_ALIGN bytes
 * (part 0 the pickle stream, parts 1.. the out-of-band buffers in the order pickle gave them),
 * zero bytes between. Metadata part, little-endian:
 *   8 bytes  magic "FERRYPK5"
 *   u32      version, OBJFMT_VERSION
 *   u32      count of parts (at least 1: the stream)
 *   count x (u64 offset, u64 length) in the data part
 * and nothing else. A reader accepts a metadata part only if every field checks: magic,
 * version, a count that the length matches exactly, and parts in order, inside the data part,
 * not overlapping.
 */
#ifndef PYF_OBJFMT_H
#define PYF_OBJFMT_H

#include <stddef.h>
#include <stdint.h>

#define OBJFMT_VERSION 1u
#define OBJFMT_ALIGN 64u
#define OBJFMT_MAX_PARTS (1u << 20)

struct objfmt_part {
    uint64_t offset;
    uint64_t length;
};

/* Bytes of the metadata part for n parts. */
size_t objfmt_header_size(size_t n);

/* Gives parts[0..n) (their lengths set) their offsets, and *data_size the data part's size.
 * -1 when n is 0 or above OBJFMT_MAX_PARTS, or the sizes overflow. */
int objfmt_layout(struct objfmt_part *parts, size_t n, uint64_t *data_size);

/* Writes the metadata part of parts[0..n) to out (objfmt_header_size(n) bytes). */
void objfmt_encode(const struct objfmt_part *parts, size_t n, uint8_t *out);

/* 0 and *n when meta (len bytes) is a metadata part of this format whose parts lie inside a
 * data part of data_size bytes; -1 otherwise, with the reason in why (may be NULL). */
int objfmt_check(const uint8_t *meta, size_t len, uint64_t data_size, size_t *n, const char **why);

/* Part i of a metadata part that objfmt_check accepted. */
struct objfmt_part objfmt_part_at(const uint8_t *meta, size_t i);

#endif
