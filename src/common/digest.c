/* digest.c - the SHA-256 tree of an object's bytes (digest.h). */
#include "common/digest.h"

#include <openssl/evp.h>

#include <inttypes.h>
#include <stdlib.h>

#include "common/err.h"
#include "common/hex.h"

static const uint8_t LEAF_TAG = 0x00, ROOT_TAG = 0x01;

static void le64(uint8_t out[8], uint64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

/* One hash: a one-byte tag, a header of hlen bytes, then len bytes; 0 or FERRY_ESYS. */
/* SHA-256 begun over tag || head: 1, or 0 when OpenSSL failed. */
static int tagged_begin(EVP_MD_CTX *ctx, uint8_t tag, const uint8_t *head, size_t hlen)
{
    return EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(ctx, &tag, 1) == 1 &&
           EVP_DigestUpdate(ctx, head, hlen) == 1;
}

static int tagged_end(EVP_MD_CTX *ctx, uint8_t out[DIGEST_LEN])
{
    unsigned outlen = 0;

    return EVP_DigestFinal_ex(ctx, out, &outlen) == 1 && outlen == DIGEST_LEN;
}

static int sha256_tagged(EVP_MD_CTX *ctx, uint8_t tag, const uint8_t *head, size_t hlen,
                         const uint8_t *p, size_t len, uint8_t out[DIGEST_LEN])
{
    if (!tagged_begin(ctx, tag, head, hlen) || (len && EVP_DigestUpdate(ctx, p, len) != 1) ||
        !tagged_end(ctx, out))
        return err_set(FERRY_ESYS, "SHA-256 failed");
    return 0;
}

struct digest_stream {
    EVP_MD_CTX *ctx;
};

void digest_stream_free(struct digest_stream *s)
{
    if (!s)
        return;
    EVP_MD_CTX_free(s->ctx);
    free(s);
}

int digest_stream_start(struct digest_stream **out, uint64_t i)
{
    struct digest_stream *s = malloc(sizeof(*s));
    uint8_t head[8];

    if (!s)
        return err_set(FERRY_ENOMEM, "a digest stream");
    le64(head, i);
    if (!(s->ctx = EVP_MD_CTX_new()) || !tagged_begin(s->ctx, LEAF_TAG, head, sizeof(head))) {
        digest_stream_free(s);
        return err_set(FERRY_ESYS, "SHA-256 failed");
    }
    *out = s;
    return 0;
}

int digest_stream_add(struct digest_stream *s, const uint8_t *p, size_t len)
{
    return !len || EVP_DigestUpdate(s->ctx, p, len) == 1 ? 0
                                                         : err_set(FERRY_ESYS, "SHA-256 failed");
}

int digest_stream_end(struct digest_stream *s, uint8_t out[DIGEST_LEN])
{
    int ok = tagged_end(s->ctx, out);

    digest_stream_free(s);
    return ok ? 0 : err_set(FERRY_ESYS, "SHA-256 failed");
}

/* leaf_i of len bytes at p. */
static int leaf(EVP_MD_CTX *ctx, uint64_t i, const uint8_t *p, size_t len, uint8_t out[DIGEST_LEN])
{
    uint8_t head[8];

    le64(head, i);
    return sha256_tagged(ctx, LEAF_TAG, head, sizeof(head), p, len, out);
}

int digest_leaves_of(const uint8_t *bytes, uint64_t size, uint64_t first, uint64_t n,
                     uint8_t *leaves)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = ctx ? 0 : err_set(FERRY_ESYS, "EVP_MD_CTX_new failed");

    for (uint64_t i = first; rc == 0 && i < first + n; i++)
        rc = leaf(ctx, i, bytes + i * DIGEST_CHUNK, digest_chunk_len(size, i),
                  leaves + (i - first) * DIGEST_LEN);
    EVP_MD_CTX_free(ctx);
    return rc;
}

int digest_leaf(uint64_t i, const uint8_t *chunk, size_t len, uint8_t out[DIGEST_LEN])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = ctx ? leaf(ctx, i, chunk, len, out) : err_set(FERRY_ESYS, "EVP_MD_CTX_new failed");

    EVP_MD_CTX_free(ctx);
    return rc;
}

int digest_root(uint64_t data_size, uint64_t metadata_size, const uint8_t *leaves, uint64_t n,
                uint8_t out[DIGEST_LEN])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t head[16];
    int rc;

    if (!ctx)
        return err_set(FERRY_ESYS, "EVP_MD_CTX_new failed");
    le64(head, data_size);
    le64(head + 8, metadata_size);
    rc = sha256_tagged(ctx, ROOT_TAG, head, sizeof(head), leaves, n * DIGEST_LEN, out);
    EVP_MD_CTX_free(ctx);
    return rc;
}

int digest_object(const uint8_t *bytes, uint64_t data_size, uint64_t metadata_size,
                  uint8_t root[DIGEST_LEN])
{
    uint64_t size = data_size + metadata_size, n = digest_leaves(size);
    uint8_t one[DIGEST_LEN] = {0}, *leaves = n == 1 ? one : malloc(n * DIGEST_LEN);
    int rc;

    if (!leaves)
        return err_set(FERRY_ENOMEM, "%" PRIu64 " leaves", n);
    rc = digest_leaves_of(bytes, size, 0, n, leaves);
    if (rc == 0)
        rc = digest_root(data_size, metadata_size, leaves, n, root);
    if (leaves != one)
        free(leaves);
    return rc;
}

void digest_hex(const uint8_t d[DIGEST_LEN], char out[DIGEST_HEX + 1])
{
    hex_format(d, DIGEST_LEN, out);
}

int digest_parse(const char *hex, size_t len, uint8_t out[DIGEST_LEN])
{
    size_t bad;

    if (len != DIGEST_HEX)
        return err_set(FERRY_EINVAL, "a digest is %u hex characters, not %zu", DIGEST_HEX, len);
    if ((bad = hex_parse(hex, DIGEST_LEN, out)))
        return err_set(FERRY_EINVAL, "a digest is hex: '%c%c' at %zu", hex[2 * bad - 2],
                       hex[2 * bad - 1], 2 * bad - 2);
    return 0;
}
