/* auth.c - the cluster secret's challenge-response and frame tags (auth.h). */
#include "transfer/auth.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* OpenSSL makes its random generators at their first use and loads HMAC at its first:
 * milliseconds of CPU here, so both are made at the node's start rather than on the first
 * handshake (ferry-bench cluster --workloads hot: a first read from a new holder took 3388 us,
 * 1365-1801 us since). The generators are per thread: this runs on the loop's, which makes
 * every handshake. */
static int warm(int keyed)
{
    uint8_t nonce[WIRE_NONCE], out[MAC_LEN];
    struct mac_part part = {nonce, sizeof(nonce)};
    int rc = auth_nonce(nonce);

    return rc < 0 || !keyed ? rc : mac_sha256(nonce, sizeof(nonce), &part, 1, out);
}

int auth_init(struct auth *a, const uint8_t *secret, size_t len)
{
    int rc;

    a->secret = NULL;
    a->len = 0;
    if ((rc = warm(secret && len)) < 0)
        return rc;
    if (!secret || !len)
        return 0;
    if (!(a->secret = malloc(len)))
        return err_set(FERRY_ENOMEM, "secret");
    memcpy(a->secret, secret, len);
    a->len = len;
    return 0;
}

void auth_free(struct auth *a)
{
    if (a->secret)
        OPENSSL_cleanse(a->secret, a->len);
    free(a->secret);
    a->secret = NULL;
    a->len = 0;
}

int auth_keyed(const struct auth *a)
{
    return a->secret != NULL;
}

int auth_nonce(uint8_t nonce[WIRE_NONCE])
{
    if (RAND_bytes(nonce, WIRE_NONCE) != 1)
        return err_set(FERRY_ESYS, "no random bytes for a nonce");
    return 0;
}

/* Room for the longest transcript: two node ids, an address, two incarnations, two nonces
 * and their lengths. */
#define TRANSCRIPT_MAX (2 * (1 + WIRE_NODE_MAX + 8 + WIRE_NONCE) + 2 + WIRE_ADDR_MAX)

static size_t put(uint8_t *t, size_t at, const void *p, size_t len)
{
    memcpy(t + at, p, len);
    return at + len;
}

/* The handshake as bytes: each text after its length, so that no two handshakes read alike. */
static size_t transcript(const struct auth_hs *hs, uint8_t t[TRANSCRIPT_MAX])
{
    uint8_t lc = (uint8_t)strnlen(hs->node_c, WIRE_NODE_MAX);
    uint8_t la = (uint8_t)strnlen(hs->node_a, WIRE_NODE_MAX);
    uint16_t ld = (uint16_t)strnlen(hs->addr, WIRE_ADDR_MAX);
    size_t at = 0;

    at = put(t, at, &lc, 1);
    at = put(t, at, hs->node_c, lc);
    at = put(t, at, &hs->inc_c, 8);
    at = put(t, at, &ld, 2);
    at = put(t, at, hs->addr, ld);
    at = put(t, at, hs->nonce_c, WIRE_NONCE);
    at = put(t, at, &la, 1);
    at = put(t, at, hs->node_a, la);
    at = put(t, at, &hs->inc_a, 8);
    return put(t, at, hs->nonce_a, WIRE_NONCE);
}

/* HMAC(secret, label NUL transcript): a proof ("acceptor", "connector") or a key. */
static int derive(const struct auth *a, const char *label, const struct auth_hs *hs,
                  uint8_t out[MAC_LEN])
{
    uint8_t t[TRANSCRIPT_MAX];
    struct mac_part parts[] = {{"ferry transfer 4", 17}, {label, strlen(label) + 1}, {t, 0}};

    parts[2].len = transcript(hs, t);
    return mac_sha256(a->secret, a->len, parts, 3, out);
}

/* The proof of role; zeros without a secret. */
static int proof(const struct auth *a, const char *role, const struct auth_hs *hs,
                 uint8_t mac[WIRE_MAC])
{
    memset(mac, 0, WIRE_MAC);
    return a->secret ? derive(a, role, hs, mac) : 0;
}

int auth_acceptor_proof(const struct auth *a, const struct auth_hs *hs, uint8_t mac[WIRE_MAC])
{
    return proof(a, "acceptor", hs, mac);
}

int auth_answer(const struct auth *a, const struct auth_hs *hs, int keyed,
                const uint8_t mac[WIRE_MAC], uint8_t mine[WIRE_MAC], const char **why)
{
    uint8_t expect[WIRE_MAC];

    if (keyed != auth_keyed(a)) {
        *why = keyed ? "the holder has a cluster secret and we have none"
                     : "the holder has no cluster secret and we have one";
        return -1;
    }
    if (proof(a, "acceptor", hs, expect) < 0 || !mac_equal(expect, mac, WIRE_MAC) ||
        proof(a, "connector", hs, mine) < 0) {
        *why = "the holder proved another cluster secret than ours, or for another connection";
        return -1;
    }
    return 0;
}

int auth_check(const struct auth *a, const struct auth_hs *hs, const uint8_t proof_in[WIRE_MAC],
               const char **why)
{
    uint8_t expect[WIRE_MAC];

    if (proof(a, "connector", hs, expect) < 0) {
        *why = "cannot check the proof";
        return -1;
    }
    if (!mac_equal(expect, proof_in, WIRE_MAC)) {
        *why = "wrong cluster secret, or a proof made for another connection";
        return -1;
    }
    return 0;
}

int auth_session_start(const struct auth *a, const struct auth_hs *hs, int connector,
                       struct auth_session *s)
{
    memset(s, 0, sizeof(*s));
    if (!a->secret)
        return 0;
    if (derive(a, connector ? "key connector" : "key acceptor", hs, s->tx) < 0 ||
        derive(a, connector ? "key acceptor" : "key connector", hs, s->rx) < 0) {
        auth_session_end(s);
        return FERRY_ESYS;
    }
    s->on = 1;
    return 0;
}

void auth_session_end(struct auth_session *s)
{
    OPENSSL_cleanse(s, sizeof(*s));
}

/* The tag of a frame: its sequence number, header and payload (without the tag). */
static int tag_of(const uint8_t key[MAC_LEN], uint64_t seq, const uint8_t header[PROTO_HEADER_SIZE],
                  const uint8_t *payload, size_t len, uint8_t out[MAC_LEN])
{
    struct mac_part parts[] = {{&seq, 8}, {header, PROTO_HEADER_SIZE}, {payload, len}};

    return mac_sha256(key, MAC_LEN, parts, 3, out);
}

void auth_seal(struct auth_session *s, struct pbuf *b, size_t start)
{
    uint8_t tag[MAC_LEN] = {0};

    if (s->on)
        pbuf_put(b, tag, WIRE_TAG);
    proto_frame_end(b, start);
    if (!s->on || b->oom)
        return;
    if (tag_of(s->tx, s->tx_seq++, b->data + start, b->data + start + PROTO_HEADER_SIZE,
               b->len - start - PROTO_HEADER_SIZE - WIRE_TAG, tag) < 0) {
        b->oom = 1;
        return;
    }
    memcpy(b->data + b->len - WIRE_TAG, tag, WIRE_TAG);
}

int auth_open(struct auth_session *s, struct proto_header *h, const uint8_t *payload)
{
    uint8_t header[PROTO_HEADER_SIZE], tag[MAC_LEN];

    if (!s->on)
        return 0;
    if (h->length < WIRE_TAG)
        return err_set(FERRY_EPROTO, "a frame of %u bytes has no room for its tag", h->length);
    memcpy(header, &h->length, 4);
    memcpy(header + 4, &h->type, 2);
    memcpy(header + 6, &h->flags, 2);
    memcpy(header + 8, &h->tag, 8);
    if (tag_of(s->rx, s->rx_seq++, header, payload, h->length - WIRE_TAG, tag) < 0)
        return FERRY_EPROTO;
    if (!mac_equal(tag, payload + h->length - WIRE_TAG, WIRE_TAG))
        return err_set(FERRY_EPROTO, "a frame failed its tag (altered, replayed or injected)");
    h->length -= WIRE_TAG;
    return 0;
}
