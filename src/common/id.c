/* id.c - printable ids: 40 hex digits are raw, anything else is named through SHA-1. */
#include "common/err.h"
#include "common/hex.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

/* SHA-1, fetched once: EVP_sha1() makes OpenSSL 3 look the algorithm up on every digest,
 * which more than doubles the cost of naming a short id (344 against 148 ns here). */
static EVP_MD *sha1;
static pthread_once_t sha1_once = PTHREAD_ONCE_INIT;

static void sha1_fetch(void)
{
    sha1 = EVP_MD_fetch(NULL, "SHA1", NULL);
}

static int id_parse_hex(const char *text, ferry_id *out)
{
    return hex_parse(text, FERRY_ID_SIZE, out->bytes) ? -1 : 0;
}

int ferry_id_parse(const char *text, ferry_id *out)
{
    if (!text)
        return err_set(FERRY_EINVAL, "id: NULL argument");
    return ferry_id_parse_n(text, strlen(text), out);
}

int ferry_id_parse_n(const char *text, size_t len, ferry_id *out)
{
    if (!text || !out)
        return err_set(FERRY_EINVAL, "id: NULL argument");
    if (len == 0)
        return err_set(FERRY_EINVAL, "id: empty string");
    if (len == 2 * FERRY_ID_SIZE && id_parse_hex(text, out) == 0)
        return 0;
    return ferry_id_from_name(text, len, out);
}

int ferry_id_from_name(const void *name, size_t len, ferry_id *out)
{
    unsigned int got = 0;

    if ((len && !name) || !out)
        return err_set(FERRY_EINVAL, "id: NULL argument");
    pthread_once(&sha1_once, sha1_fetch);
    if (!sha1 || !EVP_Digest(name, len, out->bytes, &got, sha1, NULL) || got != FERRY_ID_SIZE)
        return err_set(FERRY_ESYS, "id: SHA-1 failed");
    return 0;
}

void ferry_id_format(const ferry_id *id, char out[2 * FERRY_ID_SIZE + 1])
{
    hex_format(id->bytes, FERRY_ID_SIZE, out);
}
