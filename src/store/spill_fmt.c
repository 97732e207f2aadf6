/* spill_fmt.c - encoding and checking of spill group headers (spill_fmt.h). */
#include "store/spill_fmt.h"

#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "common/err.h"
#include "common/mac.h"

#define CHECKSUM_AT 40u /* the checksum's offset in the fixed part */
#define MAC_AT 48u      /* the MAC's, right after it */

uint64_t spill_hdr_len(const struct spill_entry *e, uint32_t n)
{
    uint64_t len = SPILL_FIXED_SIZE;

    for (uint32_t i = 0; i < n; i++)
        len += SPILL_ENTRY_FIXED + strnlen(e[i].name, FERRY_NAME_MAX);
    return spill_round(len);
}

int spill_entry_equal(const struct spill_entry *a, const struct spill_entry *b)
{
    return memcmp(a->id.bytes, b->id.bytes, FERRY_ID_SIZE) == 0 && a->data_size == b->data_size &&
           a->metadata_size == b->metadata_size && memcmp(a->digest, b->digest, DIGEST_LEN) == 0 &&
           a->created_ns == b->created_ns && a->payload_off == b->payload_off &&
           a->flags == b->flags && strcmp(a->name, b->name) == 0;
}

uint64_t spill_hdr_checksum(const uint8_t *buf, uint64_t len)
{
    static const uint8_t zero[8 + MAC_LEN];
    XXH3_state_t st;

    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, buf, CHECKSUM_AT);
    XXH3_64bits_update(&st, zero, sizeof(zero));
    XXH3_64bits_update(&st, buf + SPILL_FIXED_SIZE, len - SPILL_FIXED_SIZE);
    return XXH3_64bits_digest(&st);
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void spill_hdr_encode(uint8_t *buf, const struct spill_group *g, const struct spill_entry *e)
{
    uint8_t *p = buf;

    memset(buf, 0, g->hdr_len);
    p = put64(p, SPILL_MAGIC);
    p = put64(p, (uint64_t)SPILL_VERSION | (uint64_t)g->n << 32);
    p = put64(p, g->seq);
    p = put64(p, g->hdr_len);
    p = put64(p, g->group_len);
    p += 8 + MAC_LEN; /* the checksum, last, and the MAC, later */
    for (uint32_t i = 0; i < g->n; i++) {
        size_t name_len = strnlen(e[i].name, FERRY_NAME_MAX);
        memcpy(p, e[i].id.bytes, FERRY_ID_SIZE);
        p += FERRY_ID_SIZE;
        p = put64(p, e[i].data_size);
        p = put64(p, e[i].metadata_size);
        memcpy(p, e[i].digest, DIGEST_LEN);
        p += DIGEST_LEN;
        p = put64(p, e[i].created_ns);
        p = put64(p, e[i].payload_off);
        *p++ = e[i].flags;
        *p++ = (uint8_t)name_len;
        memcpy(p, e[i].name, name_len);
        p += name_len;
    }
    put64(buf + CHECKSUM_AT, spill_hdr_checksum(buf, g->hdr_len));
}

static int hdr_mac(const uint8_t *buf, uint64_t len, const uint8_t *key, uint32_t seg, uint64_t off,
                   uint8_t out[MAC_LEN])
{
    static const uint8_t zero[MAC_LEN];
    uint8_t where[12];
    const struct mac_part parts[] = {{where, sizeof(where)},
                                     {buf, MAC_AT},
                                     {zero, MAC_LEN},
                                     {buf + SPILL_FIXED_SIZE, len - SPILL_FIXED_SIZE}};

    put64(where, off);
    for (int i = 0; i < 4; i++)
        where[8 + i] = (uint8_t)(seg >> (8 * i));
    return mac_sha256(key, MAC_LEN, parts, sizeof(parts) / sizeof(parts[0]), out);
}

int spill_hdr_sign(uint8_t *buf, uint64_t len, const uint8_t *key, uint32_t seg, uint64_t off)
{
    return hdr_mac(buf, len, key, seg, off, buf + MAC_AT);
}

int spill_hdr_verify(const uint8_t *buf, uint64_t len, const uint8_t *key, uint32_t seg,
                     uint64_t off)
{
    uint8_t mac[MAC_LEN];
    int rc = hdr_mac(buf, len, key, seg, off, mac);

    if (rc == 0 && !mac_equal(mac, buf + MAC_AT, MAC_LEN))
        rc = err_set(FERRY_EAUTH, "its MAC is not the secret's (written without it, or forged)");
    return rc;
}

int spill_hdr_decode_fixed(const uint8_t *buf, size_t len, struct spill_group *g)
{
    uint64_t word;

    if (len < SPILL_FIXED_SIZE)
        return err_set(FERRY_EPROTO, "%zu bytes, shorter than a group header", len);
    if (get64(buf) != SPILL_MAGIC)
        return err_set(FERRY_EPROTO, "no group header (magic 0x%016llx)",
                       (unsigned long long)get64(buf));
    word = get64(buf + 8);
    if ((uint32_t)word != SPILL_VERSION)
        return err_set(FERRY_EPROTO, "format version %u, this ferryd reads %u", (unsigned)word,
                       SPILL_VERSION);
    g->n = (uint32_t)(word >> 32);
    g->seq = get64(buf + 16);
    g->hdr_len = get64(buf + 24);
    g->group_len = get64(buf + 32);
    if (g->n == 0 || g->n > SPILL_ENTRIES_MAX)
        return err_set(FERRY_EPROTO, "a group of %u objects", g->n);
    if (g->hdr_len < SPILL_BLOCK || g->hdr_len > SPILL_HDR_MAX || g->hdr_len % SPILL_BLOCK ||
        g->group_len < g->hdr_len || g->group_len % SPILL_BLOCK)
        return err_set(FERRY_EPROTO, "header of %llu bytes in a group of %llu",
                       (unsigned long long)g->hdr_len, (unsigned long long)g->group_len);
    return 0;
}

/* Entry i at *p (at most end): 0, or FERRY_EPROTO. */
static int decode_entry(const uint8_t **pp, const uint8_t *end, const struct spill_group *g,
                        struct spill_entry *e)
{
    const uint8_t *p = *pp;
    uint64_t len;

    if (end - p < (ptrdiff_t)SPILL_ENTRY_FIXED)
        return err_set(FERRY_EPROTO, "entries overrun the header");
    memcpy(e->id.bytes, p, FERRY_ID_SIZE);
    p += FERRY_ID_SIZE;
    e->data_size = get64(p);
    e->metadata_size = get64(p + 8);
    memcpy(e->digest, p + 16, DIGEST_LEN);
    p += 16 + DIGEST_LEN;
    e->created_ns = get64(p);
    e->payload_off = get64(p + 8);
    e->flags = p[16];
    len = p[17];
    p += 18;
    if ((uint64_t)(end - p) < len)
        return err_set(FERRY_EPROTO, "a name overruns the header");
    memcpy(e->name, p, len);
    e->name[len] = '\0';
    p += len;
    /* The bytes must lie in the group's payload: sizes that overflow, or reach into the
     * header or past the group, are a damaged entry. */
    if (e->data_size > g->group_len || e->metadata_size > g->group_len - e->data_size ||
        e->payload_off < g->hdr_len || e->payload_off > g->group_len ||
        e->data_size + e->metadata_size > g->group_len - e->payload_off)
        return err_set(FERRY_EPROTO, "an entry's bytes lie outside its group");
    if (memchr(e->name, '\0', len))
        return err_set(FERRY_EPROTO, "a name with a NUL byte");
    *pp = p;
    return 0;
}

int spill_hdr_decode(const uint8_t *buf, const struct spill_group *g, struct spill_entry *e)
{
    const uint8_t *p = buf + SPILL_FIXED_SIZE, *end = buf + g->hdr_len;
    int rc;

    if (get64(buf + CHECKSUM_AT) != spill_hdr_checksum(buf, g->hdr_len))
        return err_set(FERRY_EPROTO, "header checksum mismatch");
    for (uint32_t i = 0; i < g->n; i++) {
        if ((rc = decode_entry(&p, end, g, &e[i])) < 0)
            return rc;
    }
    return 0;
}
