/* auth.c - the cluster secret's challenge-response (auth.h). */
#include "transfer/auth.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

int auth_init(struct auth *a, const uint8_t *secret, size_t len)
{
    a->secret = NULL;
    a->len = 0;
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

/* The proof of role over both nonces; zeros without a secret. */
static int proof(const struct auth *a, const char *role, const uint8_t *nonce_c,
                 const uint8_t *nonce_a, uint8_t mac[WIRE_MAC])
{
    memset(mac, 0, WIRE_MAC);
    if (!a->secret)
        return 0;
    return wire_mac(a->secret, a->len, role, nonce_c, nonce_a, mac);
}

int auth_acceptor_proof(const struct auth *a, const uint8_t nonce_c[WIRE_NONCE],
                        const uint8_t nonce_a[WIRE_NONCE], uint8_t mac[WIRE_MAC])
{
    return proof(a, "acceptor", nonce_c, nonce_a, mac);
}

int auth_answer(const struct auth *a, const uint8_t nonce_c[WIRE_NONCE],
                const uint8_t nonce_a[WIRE_NONCE], int keyed, const uint8_t mac[WIRE_MAC],
                uint8_t mine[WIRE_MAC], const char **why)
{
    uint8_t expect[WIRE_MAC];

    if (keyed != auth_keyed(a)) {
        *why = keyed ? "the holder has a cluster secret and we have none"
                     : "the holder has no cluster secret and we have one";
        return -1;
    }
    if (proof(a, "acceptor", nonce_c, nonce_a, expect) < 0 ||
        CRYPTO_memcmp(expect, mac, WIRE_MAC) != 0 ||
        proof(a, "connector", nonce_c, nonce_a, mine) < 0) {
        *why = "the holder proved another cluster secret than ours";
        return -1;
    }
    return 0;
}

int auth_check(const struct auth *a, const uint8_t nonce_c[WIRE_NONCE],
               const uint8_t nonce_a[WIRE_NONCE], const uint8_t proof_in[WIRE_MAC],
               const char **why)
{
    uint8_t expect[WIRE_MAC];

    if (proof(a, "connector", nonce_c, nonce_a, expect) < 0) {
        *why = "cannot check the proof";
        return -1;
    }
    if (CRYPTO_memcmp(expect, proof_in, WIRE_MAC) != 0) {
        *why = "wrong cluster secret";
        return -1;
    }
    return 0;
}
