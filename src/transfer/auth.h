/*
 * auth.h - the cluster secret's challenge-response between two nodes, for both sides of the
 * transfer engine: the connector sends a nonce (HELLO); the acceptor answers with its own
 * nonce and its proof (CHALLENGE); the connector checks that proof and sends its own (AUTH).
 * A proof is HMAC-SHA256 over both nonces under the secret, labelled by role (wire_mac). A
 * node without a secret accepts only peers without one, and says so in its challenge.
 *
 * Holds its own copy of the secret. Pure computation: no I/O, no state per connection.
 */
#ifndef FERRY_AUTH_H
#define FERRY_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "transfer/wire.h"

struct auth {
    uint8_t *secret; /* NULL: this node has none */
    size_t len;
};

/* Keeps a copy of secret (len bytes; NULL or 0: none). FERRY_ENOMEM. */
int auth_init(struct auth *a, const uint8_t *secret, size_t len);
void auth_free(struct auth *a);

/* 1 when this node has a secret. */
int auth_keyed(const struct auth *a);

/* A fresh random nonce. FERRY_ESYS when the random source fails. */
int auth_nonce(uint8_t nonce[WIRE_NONCE]);

/* The acceptor's proof for the connector's nonce_c and its own nonce_a (zeros without a
 * secret). */
int auth_acceptor_proof(const struct auth *a, const uint8_t nonce_c[WIRE_NONCE],
                        const uint8_t nonce_a[WIRE_NONCE], uint8_t mac[WIRE_MAC]);

/* The connector's side: checks the acceptor's challenge (keyed: whether it has a secret; mac:
 * its proof) and makes the connector's proof in mine. 0, or -1 with the reason in *why. */
int auth_answer(const struct auth *a, const uint8_t nonce_c[WIRE_NONCE],
                const uint8_t nonce_a[WIRE_NONCE], int keyed, const uint8_t mac[WIRE_MAC],
                uint8_t mine[WIRE_MAC], const char **why);

/* The acceptor's side: checks the connector's proof. 0, or -1 with the reason in *why. */
int auth_check(const struct auth *a, const uint8_t nonce_c[WIRE_NONCE],
               const uint8_t nonce_a[WIRE_NONCE], const uint8_t proof[WIRE_MAC], const char **why);

#endif
