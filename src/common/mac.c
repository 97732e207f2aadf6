/* mac.c - HMAC-SHA256 over parts (mac.h). */
#include "common/mac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "common/err.h"

int mac_sha256(const uint8_t *key, size_t key_len, const struct mac_part *parts, size_t n,
               uint8_t out[MAC_LEN])
{
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_end()};
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    size_t len = 0;
    int ok = ctx && EVP_MAC_init(ctx, key, key_len, params) == 1;

    for (size_t i = 0; ok && i < n; i++)
        ok = EVP_MAC_update(ctx, parts[i].p, parts[i].len) == 1;
    ok = ok && EVP_MAC_final(ctx, out, &len, MAC_LEN) == 1 && len == MAC_LEN;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok ? 0 : err_set(FERRY_ESYS, "HMAC-SHA256 failed");
}

int mac_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}
