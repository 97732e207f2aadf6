/*
 * proto.h - the client protocol between libferry and ferryd, over a Unix stream socket.
 *
 * Every message is a frame: a 16-byte header then `length` payload bytes, little-endian:
 *   u32 length   payload bytes (requests: at most PROTO_MAX_REQUEST)
 *   u16 type     enum proto_type; a reply has the request's type | PROTO_REPLY_BIT
 *   u16 flags    0 (reserved)
 *   u64 tag      chosen by the client, echoed in the reply
 * The first request on a connection must be HELLO; its reply carries the arena's memfd as
 * SCM_RIGHTS ancillary data. Every reply payload starts with an i32 status; a negative status
 * is followed by a detail string (u16 length + bytes) and nothing else.
 *
 * Messages carry offsets into the arena, never object bytes. Decoders check every length,
 * count and size against the payload and fail with FERRY_EPROTO and a reason (err_set);
 * checks against the arena (offsets, sizes) are the server's, which knows it.
 */
#ifndef FERRY_PROTO_H
#define FERRY_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

#define PROTO_MAGIC 0x31595246u /* "FRY1" */
/* 2: STATS by name; 3: reasons, DELETE_CLUSTER; 4: names; 5: spill; 6: HASH gives the 32-byte
 * SHA-256 root (common/digest.h) instead of a u64 XXH3; 7: KEEP; 8: HELLO's reply names the
 * shared index (common/fastidx.h) and the client's block of slots in it; 9: DELETE_UNUSED;
 * 10: CREATE's flags (PROTO_CREATE_OWN_PAGES); 11: LOCATION and FETCH_AT (locations that travel
 * with references); 12: RING, FLUSH and KICK (puts without a message, common/putring.h) */
#define PROTO_VERSION 12u
/* The first version whose HELLO reply names the shared index. */
#define PROTO_VERSION_FAST 8u
/* The oldest a daemon still serves: 7 and 9 only added KEEP and DELETE_UNUSED, which older
 * libraries never send, 8's HELLO reply is longer only for clients that ask with 8, and 10's
 * CREATE flags are optional. */
#define PROTO_VERSION_MIN 6u
#define PROTO_HEADER_SIZE 16u
#define PROTO_MAX_REQUEST (4u << 20) /* largest request payload the daemon accepts */
#define PROTO_MAX_REPLY (1u << 30)   /* largest reply payload the library accepts */
#define PROTO_MAX_IDS FERRY_MAX_IDS  /* ids in one GET, FETCH or REFRESH */
#define PROTO_MAX_BATCH 4096u        /* objects in one PUT_BATCH */
#define PROTO_MAX_DETAIL 400u        /* bytes of an error detail */
#define PROTO_MAX_PEERS 1024u        /* peers in one PEERS reply */
/* A location's bytes at most; a loc on the wire is a u16 length and the bytes. FETCH_AT
 * names each distinct location once, at most PROTO_MAX_LOCS of them. */
#define PROTO_MAX_LOCATION (FERRY_LOCATION_MAX - 1u)
#define PROTO_MAX_LOCS 256u
#define PROTO_REPLY_BIT 0x8000u
/* CREATE's flag for a creator that writes through pages of its own (store_create_paged). */
#define PROTO_CREATE_OWN_PAGES 0x1u

enum proto_type {
    PROTO_HELLO = 1,      /* u32 magic, u32 version, u32 pid -> u64 arena_size, u64 client_id
                           * [8: u64 index offset, u64 index size (0: none), u32 block,
                           * u64 the block's owner generation] */
    PROTO_CREATE = 2,     /* id, u64 data_size, u64 metadata_size[, u8 flags] -> u64 offset */
    PROTO_SEAL = 3,       /* id, u8 release -> status */
    PROTO_ABORT = 4,      /* id -> status */
    PROTO_GET = 5,        /* i64 timeout_ms, u32 n, n ids -> u32 n, n get entries */
    PROTO_RELEASE = 6,    /* id -> no reply */
    PROTO_CONTAINS = 7,   /* id -> u8 present */
    PROTO_DELETE = 8,     /* id -> status */
    PROTO_LIST = 9,       /* - -> u32 n, n list entries (each ends with its name, a str) */
    PROTO_EVICT = 10,     /* u64 bytes -> u64 freed */
    PROTO_REFRESH = 11,   /* u32 n, n ids -> status */
    PROTO_HASH = 12,      /* id -> 32-byte digest (the root, common/digest.h) */
    PROTO_STATS = 13,     /* - -> u32 n, n stat entries: the daemon's table, then its transports' */
    PROTO_SUBSCRIBE = 14, /* - -> status, with the subscription socket as SCM_RIGHTS */
    PROTO_STAGE = 15,     /* - -> u64 offset, u64 size: this client's staging area */
    PROTO_PUT_BATCH = 16, /* u32 n, n batch entries -> u32 n, n i32 statuses, str why */
    PROTO_FETCH = 17,     /* i64 timeout_ms, u32 n, n ids -> u32 n, n i32 statuses, str why */
    PROTO_NODES = 18,     /* - -> u32 n, n nodes */
    PROTO_WHERE = 19,     /* id -> u32 n, n nodes */
    PROTO_PEERS = 20,     /* u32 max -> str fabric provider, u32 n (<= max), n peers */
    PROTO_EAGER_MAX = 21, /* u64 bytes (UINT64_MAX: the provider's default) -> status */
    PROTO_DELETE_CLUSTER = 22, /* id -> status, once the directory has deleted it */
    PROTO_NAME = 23,           /* id, str name -> status */
    PROTO_KEEP = 24,           /* id, u8 keep (0 or 1) -> status */
    PROTO_DELETE_UNUSED = 25,  /* id -> status */
    PROTO_LOCATION = 26,       /* - -> loc: this node's location */
    /* i64 timeout_ms, u32 n, n ids, u16 m, m locs, n u16 (0: none, else the k-th loc): each
     * distinct location once -> as FETCH */
    PROTO_FETCH_AT = 27,
    PROTO_RING = 28,  /* - -> u64 size, with the ring of puts' memfd as SCM_RIGHTS (putring.h) */
    PROTO_FLUSH = 29, /* u8 report -> status, once the ring's puts are taken: with report, the
                       * first failure since the last report, and how many (then forgotten) */
    PROTO_KICK = 30,  /* - -> no reply: the ring has entries and the daemon slept */
    PROTO_TYPE_MAX = 30
};

/* GET: an object's place in the arena; metadata follows data at offset + data_size. */
struct proto_get_entry {
    int32_t status;
    uint64_t offset;
    uint64_t data_size;
    uint64_t metadata_size;
};

/* PUT_BATCH: an object whose data then metadata the client wrote at `offset` within its
 * staging area; the daemon copies them into a new object and seals it. */
struct proto_batch_entry {
    ferry_id id;
    uint64_t offset;
    uint64_t data_size;
    uint64_t metadata_size;
};

/* A decoded request. Arrays point into the frame's payload (ids are byte arrays, so this
 * needs no alignment); batch entries are decoded one at a time with proto_batch_entry(). */
struct proto_request {
    uint16_t type;
    uint64_t tag;
    union {
        struct {
            uint32_t magic, version, pid;
        } hello;
        struct {
            ferry_id id;
            uint64_t data_size, metadata_size;
            uint8_t flags; /* PROTO_CREATE_*; absent before version 10 */
        } create;
        struct {
            ferry_id id;
            uint8_t release;
        } seal;
        struct {
            ferry_id id;
            uint8_t keep;
        } keep;
        struct {
            ferry_id id;
        } one; /* ABORT, RELEASE, CONTAINS, DELETE, DELETE_UNUSED, HASH */
        struct {
            int64_t timeout_ms;
            uint32_t n;
            const ferry_id *ids;
            /* FETCH_AT: nlocs locs (checked; read them with proto_get_loc), then n u16 indexes
             * (checked: at most nlocs), read with proto_loc_index */
            const uint8_t *locs, *loc_index;
            size_t locs_len;
            uint16_t nlocs;
        } ids; /* GET, FETCH and FETCH_AT (with timeout), REFRESH */
        struct {
            uint64_t bytes;
        } evict;
        struct {
            uint64_t bytes;
        } eager;
        struct {
            uint8_t report;
        } flush;
        struct {
            uint32_t max;
        } peers;
        struct {
            uint32_t n;
            const uint8_t *entries;
        } batch;
        struct {
            ferry_id id;
            char text[FERRY_NAME_MAX + 1]; /* 1..FERRY_NAME_MAX bytes, no control characters */
        } name;
    } u;
};

/* 0 for an object's name ferry keeps (1..FERRY_NAME_MAX bytes, no control characters), else
 * FERRY_EINVAL with the reason. */
int proto_check_name(const char *name);

/* The request type's name ("GET"), or "?" for a type that is none. */
const char *proto_type_name(uint16_t type);

struct proto_header {
    uint32_t length;
    uint16_t type;
    uint16_t flags;
    uint64_t tag;
};

/* Decodes a header from PROTO_HEADER_SIZE bytes. FERRY_EPROTO when the flags are not 0 or
 * the length exceeds max_payload. */
int proto_decode_header(const uint8_t *buf, uint32_t max_payload, struct proto_header *out);

/* Decodes a request payload of the given header. FERRY_EPROTO (with a reason) for an unknown
 * type, a payload of the wrong size, or a count over its limit. */
int proto_decode_request(const struct proto_header *h, const uint8_t *payload,
                         struct proto_request *out);

/* Entry i of a decoded PUT_BATCH (i < n). */
void proto_batch_entry(const struct proto_request *r, uint32_t i, struct proto_batch_entry *out);

/* A growable byte buffer for building frames. */
struct pbuf {
    uint8_t *data;
    size_t len, cap;
    int oom; /* set when a growth failed; the buffer's content is then unusable */
};

void pbuf_free(struct pbuf *b);
void pbuf_reserve(struct pbuf *b, size_t extra);
void pbuf_put(struct pbuf *b, const void *p, size_t n);
void pbuf_u8(struct pbuf *b, uint8_t v);
void pbuf_u16(struct pbuf *b, uint16_t v);
void pbuf_u32(struct pbuf *b, uint32_t v);
void pbuf_u64(struct pbuf *b, uint64_t v);
void pbuf_id(struct pbuf *b, const ferry_id *id);
/* Drops the first n bytes. */
void pbuf_consume(struct pbuf *b, size_t n);

/* Starts a frame at the end of b and returns its start; proto_frame_end fills in length. */
size_t proto_frame_begin(struct pbuf *b, uint16_t type, uint64_t tag);
void proto_frame_end(struct pbuf *b, size_t start);

/* A bounds-checked reader over a payload: reads past the end set `bad` and yield zeroes. */
struct preader {
    const uint8_t *p;
    size_t left;
    int bad;
};

uint8_t prd_u8(struct preader *r);
uint16_t prd_u16(struct preader *r);
uint32_t prd_u32(struct preader *r);
uint64_t prd_u64(struct preader *r);
void prd_id(struct preader *r, ferry_id *out);
/* A pointer to the next n bytes, or NULL (and bad) when fewer are left. */
const uint8_t *prd_bytes(struct preader *r, size_t n);

/* Sizes on the wire. */
#define PROTO_GET_ENTRY_SIZE (4u + 8u + 8u + 8u)
#define PROTO_BATCH_ENTRY_SIZE (FERRY_ID_SIZE + 8u + 8u + 8u)
#define PROTO_LIST_ENTRY_SIZE (FERRY_ID_SIZE + 8u + 8u + 1u + 4u + 8u) /* then the name */

/* A string of at most max bytes (longer ones are cut): u8 length + bytes. */
void proto_put_str(struct pbuf *b, const char *s, size_t max);
/* Reads one into out (size bytes, NUL-terminated); one that does not fit sets r->bad. */
void proto_get_str(struct preader *r, char *out, size_t size);
/* A location (PROTO_MAX_LOCATION bytes at most, no NUL within) as a u16 length and its bytes;
 * proto_get_loc reads one into out (FERRY_LOCATION_MAX bytes), or marks r bad. */
void proto_put_loc(struct pbuf *b, const char *s);
void proto_get_loc(struct preader *r, char *out);
/* FETCH_AT's location index of id i: 0 for none, else 1 + its loc's place in the table. */
uint16_t proto_loc_index(const struct proto_request *q, uint32_t i);

/* A node in NODES and WHERE replies: id, address and transports as u8 length + bytes each,
 * then u8 self. */
void proto_put_node(struct pbuf *b, const ferry_node_info *n);
int proto_get_node(struct preader *r, ferry_node_info *out);

/* A peer in PEERS replies: node, transport, provider and why as u8 length + bytes each. */
/* STATS entry: str name, u8 kind (enum ferry_stat_kind), u64 value. A reply holds at most
 * PROTO_STATS_MAX entries (the daemon has about a hundred). */
#define PROTO_STATS_MAX 4096
void proto_put_stat(struct pbuf *b, const char *name, int kind, uint64_t value);
/* FERRY_EPROTO for a name too long or empty, or an unknown kind. */
int proto_get_stat(struct preader *r, ferry_stat *out);

void proto_put_peer(struct pbuf *b, const ferry_peer *p);
int proto_get_peer(struct preader *r, ferry_peer *out);

/* A notification on a subscription socket (SOCK_SEQPACKET, one record per datagram):
 * u8 event, id, u64 data_size, u64 metadata_size. */
#define PROTO_NOTIFY_SIZE (1u + FERRY_ID_SIZE + 8u + 8u)
void proto_encode_notification(uint8_t out[PROTO_NOTIFY_SIZE], const ferry_notification *n);
int proto_decode_notification(const uint8_t *buf, size_t len, ferry_notification *out);

#endif
