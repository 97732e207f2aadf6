/*
 * wire.h - the transfer protocol between ferryd nodes, carried by a transport.
 *
 * Frames use the client protocol's 16-byte header (common/proto.h), little-endian payloads:
 *   HELLO      connector -> acceptor: u32 magic, u32 version, node id, u64 incarnation,
 *              the address dialled (u16 length, text), 32-byte nonce
 *   CHALLENGE  acceptor -> connector: node id, u64 incarnation, 32-byte nonce, u8 keyed,
 *              32-byte mac
 *   AUTH       connector -> acceptor: 32-byte mac
 *   PULL       receiver -> holder: u8 flags, u64 eager max, u32 n, n ids; objects larger
 *              than eager max are sent one-sided where the transport can (fabric rendezvous);
 *              with WIRE_PULL_RANGES, n ranges {u64 offset, u64 length} follow the ids: only
 *              that range of each object's bytes (data then metadata) is sent, cut to the
 *              object (wire_range_cut); a range {0, UINT64_MAX} is the whole object
 *   REPLY      holder -> receiver: u32 n, n entries {i32 status (0; FERRY_ENOENT: not here;
 *              FERRY_EBUSY: ask again once the earlier pulls are done; FERRY_EAGAIN, for a
 *              range of at most RELAY_RANGE of a copy the holder is still receiving: not in
 *              yet, ask again), u64 data_size,
 *              u64 metadata_size, digest (DIGEST_LEN bytes: the root), u32 nleaves}, then
 *              the leaves of every entry in order (nleaves * DIGEST_LEN bytes each; nleaves is
 *              0, or digest_leaves(size) for an object of more than one chunk whose digest
 *              is known: common/digest.h); on the tcp transport the bytes (data then
 *              metadata) of every entry with status 0 follow the frame on the stream, in order
 *              (of a ranged PULL: the range's bytes)
 *   REFUSE     acceptor -> connector, before it closes a connection it refuses: u8 length,
 *              that many bytes of printable text (why: "wrong cluster secret", ...)
 *   SUSPECT    receiver -> holder: id, u64 chunk: chunk `chunk` of the holder's copy of id
 *              did not match the leaf its REPLY gave; the holder checks its copy (a node that
 *              does not know the type drops the connection, which the receiver no longer
 *              asks for that object anyway)
 * Mutual authentication with the cluster secret (transfer/auth.h): each side proves it knows
 * the secret with HMAC-SHA256 over everything both HELLO and CHALLENGE said (node ids,
 * incarnations, the address dialled, nonces) and its role; with no secret configured the macs
 * are zero and `keyed` is 0, and a keyed node refuses an unkeyed peer. The acceptor handles
 * nothing but AUTH before authentication succeeds. Between keyed nodes every later frame
 * (PULL, REPLY) ends with a WIRE_TAG-byte tag under a key of its direction (auth_seal), which
 * the payload lengths above do not count.
 *
 * Decoders check every length and count against the payload; failures are FERRY_EPROTO with
 * a reason. A holder serves only sealed objects, named by id.
 */
#ifndef FERRY_WIRE_H
#define FERRY_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/digest.h"
#include "common/proto.h"

#define WIRE_MAGIC 0x58595246u /* "FRYX" */
/* 6: FERRY_EAGAIN in REPLY; 5: SHA-256 roots and leaves in REPLY (4: XXH3) */
#define WIRE_VERSION 6u
#define WIRE_MAX_FRAME (4u << 20)
#define WIRE_MAX_IDS 65536u
#define WIRE_NONCE 32u
#define WIRE_MAC 32u
#define WIRE_NODE_MAX 63u
#define WIRE_ADDR_MAX 639u /* an address dialled (directory.h: DIRECTORY_XPORT_ADDR_MAX) */
#define WIRE_TAG 16u
#define WIRE_REASON_MAX 120u
#define WIRE_PULL_VERIFY 1u /* the holder must give each object's digest */
/* Ranges follow the ids (nodes before this flag refuse the PULL: unknown flags). */
#define WIRE_PULL_RANGES 2u
#define WIRE_RANGE_SIZE (8u + 8u)
#define WIRE_REPLY_ENTRY_SIZE (4u + 8u + 8u + DIGEST_LEN + 4u)

enum wire_type {
    WIRE_HELLO = 1,
    WIRE_CHALLENGE = 2,
    WIRE_AUTH = 3,
    WIRE_PULL = 4,
    WIRE_REPLY = 5,
    WIRE_REFUSE = 6,
    WIRE_SUSPECT = 7,
};

struct wire_reply_entry {
    int32_t status;
    uint64_t data_size, metadata_size;
    uint8_t digest[DIGEST_LEN]; /* the root; zero when the holder had not hashed it yet */
    uint32_t nleaves;
    const uint8_t *leaves; /* nleaves * DIGEST_LEN bytes (in the frame, or the holder's) */
};

/* Bytes [off, off + len) of an object: the range a ranged PULL asks for. */
struct wire_range {
    uint64_t off, len;
};

/* How many bytes of an object of total bytes the range r names: what the holder sends and the
 * receiver reads, both from the reply's sizes. */
static inline uint64_t wire_range_cut(const struct wire_range *r, uint64_t total)
{
    if (r->off >= total)
        return 0;
    return r->len < total - r->off ? r->len : total - r->off;
}

struct wire_msg {
    uint16_t type;
    uint64_t tag;
    char node[WIRE_NODE_MAX + 1];     /* HELLO, CHALLENGE */
    uint64_t inc;                     /* HELLO, CHALLENGE */
    char addr[WIRE_ADDR_MAX + 1];     /* HELLO: the address dialled */
    uint8_t nonce[WIRE_NONCE];        /* HELLO, CHALLENGE */
    uint8_t mac[WIRE_MAC];            /* CHALLENGE, AUTH */
    uint8_t keyed;                    /* CHALLENGE */
    uint32_t magic, version;          /* HELLO */
    uint8_t flags;                    /* PULL */
    uint64_t eager_max;               /* PULL */
    uint32_t n;                       /* PULL, REPLY */
    const ferry_id *ids;              /* PULL: n ids inside the payload */
    const uint8_t *ranges;            /* PULL with WIRE_PULL_RANGES: n ranges in the payload */
    const uint8_t *entries;           /* REPLY: n entries inside the payload */
    const uint8_t *leaves;            /* REPLY: the entries' leaves, in order */
    uint64_t chunk;                   /* SUSPECT, its id in ids[0] */
    char reason[WIRE_REASON_MAX + 1]; /* REFUSE */
};

int wire_decode(const struct proto_header *h, const uint8_t *payload, struct wire_msg *out);
/* Entry i (< n) of a decoded REPLY, read in order: *leaves_at (0 before entry 0) is where
 * entry i's leaves start among the frame's, and moves past them. */
void wire_reply_entry(const struct wire_msg *m, uint32_t i, size_t *leaves_at,
                      struct wire_reply_entry *out);
/* Range i (< n) of a decoded PULL: the whole object ({0, UINT64_MAX}) without ranges. */
void wire_pull_range(const struct wire_msg *m, uint32_t i, struct wire_range *out);

/* Encoders append one frame to b (check b->oom). */
void wire_hello(struct pbuf *b, const char *node, uint64_t inc, const char *addr,
                const uint8_t nonce[WIRE_NONCE]);
void wire_challenge(struct pbuf *b, const char *node, uint64_t inc, const uint8_t nonce[WIRE_NONCE],
                    int keyed, const uint8_t mac[WIRE_MAC]);
void wire_auth(struct pbuf *b, const uint8_t mac[WIRE_MAC]);
/* reason is cut at WIRE_REASON_MAX bytes. */
void wire_refuse(struct pbuf *b, const char *reason);
/* ranges: NULL, or n ranges (flags must then have WIRE_PULL_RANGES). */
void wire_suspect(struct pbuf *b, const ferry_id *id, uint64_t chunk);
void wire_pull(struct pbuf *b, uint64_t tag, uint8_t flags, uint64_t eager_max, const ferry_id *ids,
               const struct wire_range *ranges, uint32_t n);
/* A reply is built in place: begin, n entries, then the leaves of each (wire_reply_leaves, in
 * the same order). */
size_t wire_reply_begin(struct pbuf *b, uint64_t tag, uint32_t n);
void wire_reply_add(struct pbuf *b, const struct wire_reply_entry *e);
void wire_reply_leaves(struct pbuf *b, const struct wire_reply_entry *e);

#endif
