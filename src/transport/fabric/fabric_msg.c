/* fabric_msg.c - the fabric transport's message codec (see fabric_msg.h). */
#include "transport/fabric/fabric_msg.h"

#include <string.h>

#include "common/err.h"

void fmsg_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void fmsg_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void fmsg_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint16_t fmsg_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

uint32_t fmsg_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t fmsg_get64(const uint8_t *p)
{
    return (uint64_t)fmsg_get32(p) | (uint64_t)fmsg_get32(p + 4) << 32;
}

void fmsg_hdr_put(uint8_t *p, const struct fmsg_hdr *h)
{
    p[0] = h->kind;
    p[1] = 0;
    for (int i = 0; i < FMSG_CLASSES; i++)
        fmsg_put16(p + 2 + 2 * i, h->credits[i]);
    p[6] = p[7] = 0;
    fmsg_put32(p + 8, h->conn);
    fmsg_put32(p + 12, h->seq);
}

int fmsg_hdr_get(const uint8_t *p, size_t n, struct fmsg_hdr *out)
{
    if (n < FMSG_HDR)
        return err_set(FERRY_EPROTO, "a fabric message of %zu bytes", n);
    if (p[0] < K_STREAM || p[0] > K_CLOSE || p[1] != 0 || p[6] != 0 || p[7] != 0)
        return err_set(FERRY_EPROTO, "a fabric message of unknown kind %u or flags", p[0]);
    out->kind = p[0];
    for (int i = 0; i < FMSG_CLASSES; i++)
        out->credits[i] = fmsg_get16(p + 2 + 2 * i);
    out->conn = fmsg_get32(p + 8);
    out->seq = fmsg_get32(p + 12);
    return 0;
}

size_t fmsg_rdv_put(uint8_t *p, const struct fmsg_rdv *r)
{
    fmsg_put64(p, r->offset);
    fmsg_put64(p + 8, r->len);
    fmsg_put64(p + 16, r->cookie);
    fmsg_put32(p + 24, r->lease_ms);
    fmsg_put16(p + 28, (uint16_t)r->key_len);
    memcpy(p + FMSG_RDV_FIXED, r->key, r->key_len);
    return FMSG_RDV_FIXED + r->key_len;
}

int fmsg_rdv_get(const uint8_t *p, size_t n, struct fmsg_rdv *out)
{
    if (n < FMSG_RDV_FIXED)
        return err_set(FERRY_EPROTO, "a rendezvous descriptor of %zu bytes", n);
    *out = (struct fmsg_rdv){.offset = fmsg_get64(p),
                             .len = fmsg_get64(p + 8),
                             .cookie = fmsg_get64(p + 16),
                             .lease_ms = fmsg_get32(p + 24),
                             .key = p + FMSG_RDV_FIXED,
                             .key_len = fmsg_get16(p + 28)};
    if (out->key_len == 0 || out->key_len > FMSG_KEY_MAX || FMSG_RDV_FIXED + out->key_len != n)
        return err_set(FERRY_EPROTO, "a rendezvous descriptor with a key of %zu bytes in %zu",
                       out->key_len, n);
    if (out->len == 0 || out->offset > UINT64_MAX - out->len || out->lease_ms < FMSG_LEASE_MIN)
        return err_set(FERRY_EPROTO, "a rendezvous descriptor with bad fields");
    return 0;
}

int fmsg_done_get(const uint8_t *p, size_t n, uint64_t *cookie)
{
    if (n != FMSG_DONE)
        return err_set(FERRY_EPROTO, "a done message of %zu bytes", n);
    *cookie = fmsg_get64(p);
    return 0;
}

size_t fmsg_hello_put(uint8_t *p, const struct fmsg_hello *h)
{
    fmsg_put32(p, FMSG_MAGIC);
    fmsg_put32(p + 4, FMSG_VERSION);
    fmsg_put32(p + 8, h->id);
    fmsg_put16(p + 12, (uint16_t)h->window);
    fmsg_put16(p + 14, (uint16_t)h->name_len);
    fmsg_put16(p + 16, 0);
    p[18] = (uint8_t)h->virt;
    p[19] = 0;
    fmsg_put64(p + 20, h->base);
    fmsg_put64(p + 28, h->len);
    memcpy(p + FMSG_HELLO_FIXED, h->name, h->name_len);
    return FMSG_HELLO_FIXED + h->name_len;
}

int fmsg_hello_get(const uint8_t *p, size_t n, struct fmsg_hello *out)
{
    if (n < FMSG_HELLO_FIXED || fmsg_get32(p) != FMSG_MAGIC || fmsg_get32(p + 4) != FMSG_VERSION)
        return err_set(FERRY_EPROTO, "a fabric hello with a wrong size, magic or version");
    *out = (struct fmsg_hello){.id = fmsg_get32(p + 8),
                               .window = fmsg_get16(p + 12),
                               .name_len = fmsg_get16(p + 14),
                               .virt = p[18],
                               .base = fmsg_get64(p + 20),
                               .len = fmsg_get64(p + 28)};
    out->name = p + FMSG_HELLO_FIXED;
    if (out->window == 0 || out->window > FMSG_WINDOW_MAX || out->name_len == 0 ||
        out->name_len > FMSG_NAME_MAX || fmsg_get16(p + 16) != 0 ||
        FMSG_HELLO_FIXED + out->name_len != n || out->virt > 1 || p[19] != 0 || out->len == 0 ||
        out->base > UINT64_MAX - out->len)
        return err_set(FERRY_EPROTO, "a fabric hello with bad fields");
    return 0;
}
