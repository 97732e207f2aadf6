/*
 * digest.h - the content digest of an object: a two-level SHA-256 tree that nobody can forge
 * (XXH3, which it replaces, had second preimages in milliseconds).
 *
 * An object's bytes (data then metadata, one stream) are cut into DIGEST_CHUNK-byte chunks,
 * the last one shorter; an empty object has one chunk of no bytes. Then
 *   leaf_i = SHA-256(0x00 || le64 i || chunk_i)
 *   root   = SHA-256(0x01 || le64 data_size || le64 metadata_size || leaf_0 || ... || leaf_n-1)
 * The prefixes keep leaves and roots apart (a leaf can never pass for a root), the index binds
 * each chunk to its place and the sizes bind the data/metadata boundary. The root names the
 * content (directory, spill, REPLY); the leaves let a receiver check each chunk as it lands
 * and name the holder that sent a bad one.
 *
 * Pure computation (OpenSSL EVP, SHA-NI where the CPU has it); safe from any thread. Every
 * function returns 0, or FERRY_ESYS when OpenSSL fails (err_set says so).
 */
#ifndef FERRY_DIGEST_H
#define FERRY_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define DIGEST_LEN 32u
#define DIGEST_HEX (2u * DIGEST_LEN) /* characters, without the NUL */
/* 1 MiB: SHA-256 runs at ~1.9 GB/s here (openssl speed -evp sha256 -bytes 1048576), so a
 * chunk is ~0.5 ms of work, small enough to check as it lands while still in cache and to
 * spread one object over the threads; the leaves cost 32 B per MiB (0.003 %). */
#define DIGEST_CHUNK (1u << 20)
/* The most leaves an object may have (objects of up to 1 TiB): a bound for decoders. */
#define DIGEST_MAX_LEAVES (1u << 20)

/* How many chunks (leaves) an object of size bytes has: at least one. */
static inline uint64_t digest_leaves(uint64_t size)
{
    return size ? (size + DIGEST_CHUNK - 1) / DIGEST_CHUNK : 1;
}

/* The length of chunk i of an object of size bytes. */
static inline uint64_t digest_chunk_len(uint64_t size, uint64_t i)
{
    uint64_t off = i * (uint64_t)DIGEST_CHUNK;
    return off >= size ? 0 : (size - off < DIGEST_CHUNK ? size - off : DIGEST_CHUNK);
}

/* leaf_i of chunk (len bytes) into out. */
int digest_leaf(uint64_t i, const uint8_t *chunk, size_t len, uint8_t out[DIGEST_LEN]);
/* leaf_i of a chunk taken as its bytes come, in order (a receiver hashes them as they land):
 * start, add the bytes in pieces, end (which frees the stream; free frees one not ended).
 * The same value as digest_leaf. FERRY_ENOMEM too. */
struct digest_stream;
int digest_stream_start(struct digest_stream **out, uint64_t i);
int digest_stream_add(struct digest_stream *s, const uint8_t *p, size_t len);
int digest_stream_end(struct digest_stream *s, uint8_t out[DIGEST_LEN]);
void digest_stream_free(struct digest_stream *s);
/* The root over n leaves (n * DIGEST_LEN bytes) of an object of these sizes. */
int digest_root(uint64_t data_size, uint64_t metadata_size, const uint8_t *leaves, uint64_t n,
                uint8_t out[DIGEST_LEN]);
/* Leaves [first, first + n) of the object whose bytes start at bytes (size in all) into
 * leaves (n * DIGEST_LEN bytes). */
int digest_leaves_of(const uint8_t *bytes, uint64_t size, uint64_t first, uint64_t n,
                     uint8_t *leaves);
/* The root of a whole object (leaves not kept): for small objects. FERRY_ENOMEM too. */
int digest_object(const uint8_t *bytes, uint64_t data_size, uint64_t metadata_size,
                  uint8_t root[DIGEST_LEN]);

/* 64 lowercase hex characters and a NUL. */
void digest_hex(const uint8_t d[DIGEST_LEN], char out[DIGEST_HEX + 1]);
/* Exactly DIGEST_HEX hex characters (either case) into out: 0, or FERRY_EINVAL. */
int digest_parse(const char *hex, size_t len, uint8_t out[DIGEST_LEN]);

#endif
