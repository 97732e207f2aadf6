#include "transfer/wire.h"

#include <inttypes.h>
#include <string.h>

#include "common/err.h"

/* Text on the wire: its length (u8, or u16 when max exceeds 255), then that many bytes of
 * printable text. */
static void put_text(struct pbuf *b, const char *text, size_t max)
{
    size_t len = strnlen(text, max);
    if (max > UINT8_MAX)
        pbuf_u16(b, (uint16_t)len);
    else
        pbuf_u8(b, (uint8_t)len);
    pbuf_put(b, text, len);
}

/* Text of at most max bytes, each in [low, 0x7e] (node ids: no spaces). */
static int get_text(struct preader *r, char *out, size_t max, uint8_t low, const char *what)
{
    size_t len = max > UINT8_MAX ? prd_u16(r) : prd_u8(r);
    const uint8_t *p;

    if (len > max)
        return err_set(FERRY_EPROTO, "%s of %zu bytes", what, len);
    if (!(p = prd_bytes(r, len)))
        return 0; /* truncation is reported by the caller */
    for (size_t i = 0; i < len; i++) {
        if (p[i] < low || p[i] > 0x7e)
            return err_set(FERRY_EPROTO, "%s with a non-printable byte", what);
    }
    memcpy(out, p, len);
    out[len] = '\0';
    return 0;
}

static void put_node(struct pbuf *b, const char *node)
{
    put_text(b, node, WIRE_NODE_MAX);
}

static int get_node(struct preader *r, char out[WIRE_NODE_MAX + 1])
{
    return get_text(r, out, WIRE_NODE_MAX, 0x21, "node id");
}

static void get_fixed(struct preader *r, uint8_t *out, size_t n)
{
    const uint8_t *p = prd_bytes(r, n);
    if (p)
        memcpy(out, p, n);
}

/* The leaves after a REPLY's entries: each entry's count is 0, or its object's number of
 * chunks when it has more than one (and is there); the bytes must follow. */
static int decode_leaves(struct preader *r, struct wire_msg *m)
{
    uint64_t total = 0;

    for (uint32_t i = 0; m->entries && i < m->n; i++) {
        size_t leaves_at = 0;
        struct wire_reply_entry e;
        wire_reply_entry(m, i, &leaves_at, &e);
        uint64_t size = e.data_size + e.metadata_size;
        if (!e.nleaves)
            continue;
        if (e.status != 0 || size < e.data_size || e.nleaves > DIGEST_MAX_LEAVES || e.nleaves < 2 ||
            e.nleaves != digest_leaves(size))
            return err_set(FERRY_EPROTO,
                           "reply entry %u: %u leaves for %" PRIu64 " + %" PRIu64
                           " bytes (status %d)",
                           i, e.nleaves, e.data_size, e.metadata_size, e.status);
        total += e.nleaves;
    }
    m->leaves = prd_bytes(r, (size_t)(total * DIGEST_LEN));
    return 0;
}

static int decode_body(struct preader *r, struct wire_msg *m)
{
    switch (m->type) {
    case WIRE_HELLO:
        m->magic = prd_u32(r);
        m->version = prd_u32(r);
        if (m->magic != WIRE_MAGIC || m->version != WIRE_VERSION) {
            (void)prd_bytes(r, r->left); /* laid out otherwise: the acceptor refuses it */
            return 0;
        }
        if (get_node(r, m->node) < 0)
            return FERRY_EPROTO;
        m->inc = prd_u64(r);
        if (get_text(r, m->addr, WIRE_ADDR_MAX, 0x21, "address") < 0)
            return FERRY_EPROTO;
        get_fixed(r, m->nonce, WIRE_NONCE);
        return 0;
    case WIRE_CHALLENGE:
        if (get_node(r, m->node) < 0)
            return FERRY_EPROTO;
        m->inc = prd_u64(r);
        get_fixed(r, m->nonce, WIRE_NONCE);
        m->keyed = prd_u8(r);
        get_fixed(r, m->mac, WIRE_MAC);
        if (m->keyed > 1)
            return err_set(FERRY_EPROTO, "challenge: keyed flag %u", m->keyed);
        return 0;
    case WIRE_AUTH:
        get_fixed(r, m->mac, WIRE_MAC);
        return 0;
    case WIRE_PULL:
        m->flags = prd_u8(r);
        m->eager_max = prd_u64(r);
        m->n = prd_u32(r);
        if (m->flags & ~(WIRE_PULL_VERIFY | WIRE_PULL_RANGES))
            return err_set(FERRY_EPROTO, "pull: unknown flags 0x%x", m->flags);
        if (m->n > WIRE_MAX_IDS)
            return err_set(FERRY_EPROTO, "pull of %u ids exceeds %u", m->n, WIRE_MAX_IDS);
        m->ids = (const ferry_id *)prd_bytes(r, (size_t)m->n * FERRY_ID_SIZE);
        if (m->flags & WIRE_PULL_RANGES)
            m->ranges = prd_bytes(r, (size_t)m->n * WIRE_RANGE_SIZE);
        return 0;
    case WIRE_REPLY:
        m->n = prd_u32(r);
        if (m->n > WIRE_MAX_IDS)
            return err_set(FERRY_EPROTO, "reply of %u entries exceeds %u", m->n, WIRE_MAX_IDS);
        m->entries = prd_bytes(r, (size_t)m->n * WIRE_REPLY_ENTRY_SIZE);
        return decode_leaves(r, m);
    case WIRE_REFUSE:
        return get_text(r, m->reason, WIRE_REASON_MAX, 0x20, "refusal");
    case WIRE_SUSPECT:
        m->n = 1;
        m->ids = (const ferry_id *)prd_bytes(r, FERRY_ID_SIZE);
        m->chunk = prd_u64(r);
        return 0;
    default:
        return err_set(FERRY_EPROTO, "unknown transfer message type %u", m->type);
    }
}

int wire_decode(const struct proto_header *h, const uint8_t *payload, struct wire_msg *out)
{
    struct preader r = {payload, h->length, 0};
    int rc;

    memset(out, 0, sizeof(*out));
    out->type = h->type;
    out->tag = h->tag;
    if ((rc = decode_body(&r, out)) < 0)
        return rc;
    if (r.bad)
        return err_set(FERRY_EPROTO, "transfer message type %u truncated (%u bytes)", h->type,
                       h->length);
    if (r.left)
        return err_set(FERRY_EPROTO, "transfer message type %u has %zu trailing bytes", h->type,
                       r.left);
    return 0;
}

void wire_reply_entry(const struct wire_msg *m, uint32_t i, size_t *leaves_at,
                      struct wire_reply_entry *out)
{
    struct preader r = {m->entries + (size_t)i * WIRE_REPLY_ENTRY_SIZE, WIRE_REPLY_ENTRY_SIZE, 0};

    out->status = (int32_t)prd_u32(&r);
    out->data_size = prd_u64(&r);
    out->metadata_size = prd_u64(&r);
    memcpy(out->digest, prd_bytes(&r, DIGEST_LEN), DIGEST_LEN);
    out->nleaves = prd_u32(&r);
    out->leaves = out->nleaves && m->leaves ? m->leaves + *leaves_at : NULL;
    *leaves_at += (size_t)out->nleaves * DIGEST_LEN;
}

void wire_pull_range(const struct wire_msg *m, uint32_t i, struct wire_range *out)
{
    struct preader r;

    if (!m->ranges) {
        *out = (struct wire_range){0, UINT64_MAX};
        return;
    }
    r = (struct preader){m->ranges + (size_t)i * WIRE_RANGE_SIZE, WIRE_RANGE_SIZE, 0};
    out->off = prd_u64(&r);
    out->len = prd_u64(&r);
}

void wire_hello(struct pbuf *b, const char *node, uint64_t inc, const char *addr,
                const uint8_t nonce[WIRE_NONCE])
{
    size_t start = proto_frame_begin(b, WIRE_HELLO, 0);
    pbuf_u32(b, WIRE_MAGIC);
    pbuf_u32(b, WIRE_VERSION);
    put_node(b, node);
    pbuf_u64(b, inc);
    put_text(b, addr, WIRE_ADDR_MAX);
    pbuf_put(b, nonce, WIRE_NONCE);
    proto_frame_end(b, start);
}

void wire_challenge(struct pbuf *b, const char *node, uint64_t inc, const uint8_t nonce[WIRE_NONCE],
                    int keyed, const uint8_t mac[WIRE_MAC])
{
    size_t start = proto_frame_begin(b, WIRE_CHALLENGE, 0);
    put_node(b, node);
    pbuf_u64(b, inc);
    pbuf_put(b, nonce, WIRE_NONCE);
    pbuf_u8(b, (uint8_t)keyed);
    pbuf_put(b, mac, WIRE_MAC);
    proto_frame_end(b, start);
}

void wire_auth(struct pbuf *b, const uint8_t mac[WIRE_MAC])
{
    size_t start = proto_frame_begin(b, WIRE_AUTH, 0);
    pbuf_put(b, mac, WIRE_MAC);
    proto_frame_end(b, start);
}

void wire_refuse(struct pbuf *b, const char *reason)
{
    size_t start = proto_frame_begin(b, WIRE_REFUSE, 0);
    put_text(b, reason, WIRE_REASON_MAX);
    proto_frame_end(b, start);
}

void wire_suspect(struct pbuf *b, const ferry_id *id, uint64_t chunk)
{
    size_t start = proto_frame_begin(b, WIRE_SUSPECT, 0);
    pbuf_put(b, id, FERRY_ID_SIZE);
    pbuf_u64(b, chunk);
    proto_frame_end(b, start);
}

void wire_pull(struct pbuf *b, uint64_t tag, uint8_t flags, uint64_t eager_max, const ferry_id *ids,
               const struct wire_range *ranges, uint32_t n)
{
    size_t start = proto_frame_begin(b, WIRE_PULL, tag);
    pbuf_u8(b, flags);
    pbuf_u64(b, eager_max);
    pbuf_u32(b, n);
    pbuf_put(b, ids, (size_t)n * FERRY_ID_SIZE);
    for (uint32_t i = 0; ranges && i < n; i++) {
        pbuf_u64(b, ranges[i].off);
        pbuf_u64(b, ranges[i].len);
    }
    proto_frame_end(b, start);
}

size_t wire_reply_begin(struct pbuf *b, uint64_t tag, uint32_t n)
{
    size_t start = proto_frame_begin(b, WIRE_REPLY, tag);
    pbuf_u32(b, n);
    return start;
}

void wire_reply_add(struct pbuf *b, const struct wire_reply_entry *e)
{
    pbuf_u32(b, (uint32_t)e->status);
    pbuf_u64(b, e->data_size);
    pbuf_u64(b, e->metadata_size);
    pbuf_put(b, e->digest, DIGEST_LEN);
    pbuf_u32(b, e->nleaves);
}

void wire_reply_leaves(struct pbuf *b, const struct wire_reply_entry *e)
{
    if (e->nleaves)
        pbuf_put(b, e->leaves, (size_t)e->nleaves * DIGEST_LEN);
}
