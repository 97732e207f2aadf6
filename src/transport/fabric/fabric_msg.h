/*
 * fabric_msg.h - the fabric transport's message codec (fabric_int.h has the protocol).
 *
 * Every message starts with a 16-byte header, little-endian:
 *   u8 kind, u8 0, u16 credits returned per size class (small, large), u16 0, u32 the
 *   receiver's connection id, u32 sequence number (0 for messages outside the sequence)
 * Bodies:
 *   STREAM   stream bytes (frames and eager object bytes)
 *   RDV      u64 offset, u64 length, u64 cookie, u32 lease ms, u16 key length, key: the key
 *            travels only here, after the engine has authenticated the peer
 *   DONE     u64 cookie
 *   CREDIT, CLOSE   nothing
 *   CONNECT, ACCEPT u32 magic, u32 version, u32 connection id, u16 window, u16 name length,
 *            u16 0 (no key: see RDV), u8 virt, u8 0, u64 arena base, u64 arena length, name
 * Decoders check every length and field against the message and fail with FERRY_EPROTO and a
 * reason; what they return points into the message.
 */
#ifndef FERRY_FABRIC_MSG_H
#define FERRY_FABRIC_MSG_H

#include <stddef.h>
#include <stdint.h>

#define FMSG_HDR 16u
#define FMSG_RDV_FIXED 30u
#define FMSG_DONE 8u
#define FMSG_HELLO_FIXED 36u
#define FMSG_NAME_MAX 256u
#define FMSG_KEY_MAX 64u
#define FMSG_WINDOW_MAX 1024u
#define FMSG_MAGIC 0x42414646u /* "FFAB" */
#define FMSG_VERSION 2u
#define FMSG_CLASSES 2
#define FMSG_LEASE_MIN 1000u /* ms: a reader gives up a second before a lease ends */

enum fmsg_kind { K_STREAM = 1, K_RDV, K_DONE, K_CREDIT, K_CONNECT, K_ACCEPT, K_CLOSE };

struct fmsg_hdr {
    uint8_t kind;
    uint16_t credits[FMSG_CLASSES];
    uint32_t conn, seq;
};

struct fmsg_rdv {
    uint64_t offset, len, cookie;
    uint32_t lease_ms;
    const uint8_t *key; /* the holder's arena key (raw bytes with FI_MR_RAW) */
    size_t key_len;
};

struct fmsg_hello {
    uint32_t id, window;
    const uint8_t *name;
    size_t name_len;
    int virt;
    uint64_t base, len;
};

void fmsg_put16(uint8_t *p, uint16_t v);
void fmsg_put32(uint8_t *p, uint32_t v);
void fmsg_put64(uint8_t *p, uint64_t v);
uint16_t fmsg_get16(const uint8_t *p);
uint32_t fmsg_get32(const uint8_t *p);
uint64_t fmsg_get64(const uint8_t *p);

void fmsg_hdr_put(uint8_t *p, const struct fmsg_hdr *h);
/* A message of n bytes: its header, if n holds one and the kind is known. */
int fmsg_hdr_get(const uint8_t *p, size_t n, struct fmsg_hdr *out);

/* Returns the body's length (at most FMSG_RDV_FIXED + FMSG_KEY_MAX). */
size_t fmsg_rdv_put(uint8_t *p, const struct fmsg_rdv *r);
int fmsg_rdv_get(const uint8_t *p, size_t n, struct fmsg_rdv *out);
int fmsg_done_get(const uint8_t *p, size_t n, uint64_t *cookie);

/* Writes a CONNECT or ACCEPT body (at most FMSG_HELLO_FIXED + FMSG_NAME_MAX); returns its
 * length. */
size_t fmsg_hello_put(uint8_t *p, const struct fmsg_hello *h);
int fmsg_hello_get(const uint8_t *p, size_t n, struct fmsg_hello *out);

#endif
