/*
 * mac.h - HMAC-SHA256 over a message given in parts, for the cluster secret's proofs, the
 * keys and tags of transfer frames, and signed directory entries.
 *
 * Pure computation (OpenSSL's EVP_MAC); safe from any thread.
 */
#ifndef FERRY_MAC_H
#define FERRY_MAC_H

#include <stddef.h>
#include <stdint.h>

#define MAC_LEN 32u

struct mac_part {
    const void *p;
    size_t len;
};

/* HMAC-SHA256(key, parts[0] || ... || parts[n-1]). 0, or FERRY_ESYS if OpenSSL fails. */
int mac_sha256(const uint8_t *key, size_t key_len, const struct mac_part *parts, size_t n,
               uint8_t out[MAC_LEN]);

/* 1 when a and b (len bytes) are equal, in time independent of where they differ. */
int mac_equal(const uint8_t *a, const uint8_t *b, size_t len);

#endif
