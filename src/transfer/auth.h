/*
 * auth.h - the cluster secret's challenge-response between two nodes, and the tags of the
 * frames that follow it, for both sides of the transfer engine.
 *
 * The connector sends HELLO: its node id, incarnation, the address it dialled and a nonce.
 * The acceptor answers CHALLENGE: its node id, incarnation, nonce and proof. The connector
 * checks that proof and sends its own (AUTH). A proof is HMAC-SHA256 under the secret over
 * everything both messages said (struct auth_hs) and the prover's role, so a proof is worth
 * nothing on another connection: a node that relays one peer's HELLO to another cannot pass
 * the second's proof off as its own (its node id, or the address the first dialled, differ),
 * and neither node takes it for anyone but who the directory says it dialled. A node without
 * a secret accepts only peers without one, and says so in its challenge.
 *
 * Between keyed nodes, every later frame carries a WIRE_TAG-byte tag: HMAC-SHA256 under a key
 * of its direction (derived from the secret and the handshake) over a sequence number, the
 * header and the payload. A frame injected, replayed, reordered or altered on the stream fails
 * its tag and ends the connection. Object bytes are not tagged: REPLY (tagged) carries each
 * object's SHA-256 root and leaves, and a receiver with --verify checks every chunk against
 * them before sealing; without it, it trusts the bytes of the connection it authenticated.
 *
 * Holds its own copy of the secret. Pure computation: no I/O.
 */
#ifndef FERRY_AUTH_H
#define FERRY_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "common/mac.h"
#include "transfer/wire.h"

struct auth {
    uint8_t *secret; /* NULL: this node has none */
    size_t len;
};

/* What HELLO and CHALLENGE said; every proof and key is bound to all of it. */
struct auth_hs {
    char node_c[WIRE_NODE_MAX + 1]; /* the connector */
    uint64_t inc_c;
    char addr[WIRE_ADDR_MAX + 1]; /* the address the connector dialled */
    uint8_t nonce_c[WIRE_NONCE];
    char node_a[WIRE_NODE_MAX + 1]; /* the acceptor */
    uint64_t inc_a;
    uint8_t nonce_a[WIRE_NONCE];
};

/* The tags of one connection after its handshake; on is 0 between unkeyed nodes. */
struct auth_session {
    int on;
    uint8_t tx[MAC_LEN], rx[MAC_LEN];
    uint64_t tx_seq, rx_seq;
};

/* Keeps a copy of secret (len bytes; NULL or 0: none), and makes OpenSSL's random generators
 * (and HMAC, keyed) ready on the calling thread: call it on the one that makes the handshakes.
 * FERRY_ENOMEM, FERRY_ESYS. */
int auth_init(struct auth *a, const uint8_t *secret, size_t len);
void auth_free(struct auth *a);

/* 1 when this node has a secret. */
int auth_keyed(const struct auth *a);

/* A fresh random nonce. FERRY_ESYS when the random source fails. */
int auth_nonce(uint8_t nonce[WIRE_NONCE]);

/* The acceptor's proof (zeros without a secret). */
int auth_acceptor_proof(const struct auth *a, const struct auth_hs *hs, uint8_t mac[WIRE_MAC]);

/* The connector's side: checks the acceptor's challenge (keyed: whether it has a secret; mac:
 * its proof) and makes the connector's proof in mine. 0, or -1 with the reason in *why. */
int auth_answer(const struct auth *a, const struct auth_hs *hs, int keyed,
                const uint8_t mac[WIRE_MAC], uint8_t mine[WIRE_MAC], const char **why);

/* The acceptor's side: checks the connector's proof. 0, or -1 with the reason in *why. */
int auth_check(const struct auth *a, const struct auth_hs *hs, const uint8_t proof[WIRE_MAC],
               const char **why);

/* Derives the keys of the frames after the handshake (connector: 1 on the connecting side).
 * Without a secret, s->on is 0 and frames go untagged. FERRY_ESYS. */
int auth_session_start(const struct auth *a, const struct auth_hs *hs, int connector,
                       struct auth_session *s);
void auth_session_end(struct auth_session *s);

/* Ends the frame begun at start in b (proto_frame_begin), with its tag when s->on. A failure
 * sets b->oom. */
void auth_seal(struct auth_session *s, struct pbuf *b, size_t start);

/* Checks the tag that ends a received frame (when s->on) and takes it off h->length. 0, or
 * FERRY_EPROTO with the reason. */
int auth_open(struct auth_session *s, struct proto_header *h, const uint8_t *payload);

#endif
