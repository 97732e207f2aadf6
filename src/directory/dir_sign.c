/*
 * dir_sign.c - what the cluster secret signs in the directory: node entries, object records
 * and delete events (directory.h, "Trust"). Each signature is HMAC-SHA256 under the secret
 * over a label naming the kind and the fields, each text after its length ("5:hello"), so that
 * no two lists of fields make the same message. It calls no other file of the unit.
 */
#include "directory/directory_int.h"

/* Texts one signature covers, at most: a node's label, id, inc, addr and its transports. */
#define SIGNED_TEXTS_MAX (4 + 2 * DIRECTORY_XPORTS)

/* The signature of texts[0..n) under the secret, in hex. FERRY_ESYS. */
static int sign(const struct directory *d, const char *const *texts, size_t n,
                char hex[DIR_SIG_HEX])
{
    struct mac_part parts[2 * SIGNED_TEXTS_MAX];
    char lens[SIGNED_TEXTS_MAX][U64_TEXT];
    uint8_t mac[MAC_LEN];

    if (n > SIGNED_TEXTS_MAX)
        return err_set(FERRY_ESYS, "directory: %zu fields to sign (at most %d)", n,
                       SIGNED_TEXTS_MAX);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(texts[i]);
        int prefix = snprintf(lens[i], U64_TEXT, "%zu:", len);
        parts[2 * i] = (struct mac_part){lens[i], (size_t)prefix};
        parts[2 * i + 1] = (struct mac_part){texts[i], len};
    }
    if (mac_sha256(d->secret, d->secret_len, parts, 2 * n, mac) < 0)
        return FERRY_ESYS;
    for (size_t i = 0; i < MAC_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    return 0;
}

int dir_node_sign(const struct directory *d, const struct directory_node *n, char hex[DIR_SIG_HEX])
{
    const struct directory_xport *xp[DIRECTORY_XPORTS];
    const char *texts[SIGNED_TEXTS_MAX] = {"ferry node 1", n->id, NULL, n->addr};
    char inc[U64_TEXT];
    uint32_t nxp = n->nxp < DIRECTORY_XPORTS ? n->nxp : DIRECTORY_XPORTS;
    size_t at = 4;

    for (uint32_t i = 0; i < nxp; i++) { /* by name: Redis gives fields in any order */
        uint32_t j = i;
        for (; j > 0 && strcmp(xp[j - 1]->name, n->xp[i].name) > 0; j--)
            xp[j] = xp[j - 1];
        xp[j] = &n->xp[i];
    }
    snprintf(inc, sizeof(inc), "%" PRIu64, n->inc);
    texts[2] = inc;
    for (uint32_t i = 0; i < nxp; i++) {
        texts[at++] = xp[i]->name;
        texts[at++] = xp[i]->addr;
    }
    return sign(d, texts, at, hex);
}

int dir_record_sign(const struct directory *d, const char *hex_id, const char *size,
                    const char *digest, char hex[DIR_SIG_HEX])
{
    const char *texts[] = {"ferry record 1", hex_id, size, digest};

    return sign(d, texts, 4, hex);
}

int dir_beat_sign(const struct directory *d, const char *node_id, const char *inc, const char *beat,
                  char hex[DIR_SIG_HEX])
{
    const char *texts[] = {"ferry beat 1", node_id, inc, beat};

    return sign(d, texts, 4, hex);
}

int dir_event_sign(const struct directory *d, const struct dir_event *e, char hex[DIR_SIG_HEX])
{
    const char *texts[] = {"ferry event 3", e->type, e->id, e->node, e->inc, e->t, e->root, e->gen};

    if (!e->gen[0]) /* no put named: as nodes before puts signed it */
        texts[0] = "ferry event 2";
    return sign(d, texts, e->gen[0] ? 8 : 7, hex);
}

int dir_sig_matches(const char expect[DIR_SIG_HEX], const char *sig)
{
    return strlen(sig) == DIR_SIG_HEX - 1 &&
           mac_equal((const uint8_t *)expect, (const uint8_t *)sig, DIR_SIG_HEX - 1);
}
