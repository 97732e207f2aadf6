#include "common/proto.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- growable buffer ---- */

void pbuf_free(struct pbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void pbuf_reserve(struct pbuf *b, size_t extra)
{
    size_t cap;
    uint8_t *p;

    if (b->oom || b->len + extra <= b->cap)
        return;
    cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    p = realloc(b->data, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->data = p;
    b->cap = cap;
}

void pbuf_put(struct pbuf *b, const void *p, size_t n)
{
    pbuf_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void pbuf_u8(struct pbuf *b, uint8_t v)
{
    pbuf_put(b, &v, 1);
}

/* The wire is little-endian; so is every machine ferry targets, which the build asserts. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "ferry's wire format assumes LE");

void pbuf_u16(struct pbuf *b, uint16_t v)
{
    pbuf_put(b, &v, 2);
}

void pbuf_u32(struct pbuf *b, uint32_t v)
{
    pbuf_put(b, &v, 4);
}

void pbuf_u64(struct pbuf *b, uint64_t v)
{
    pbuf_put(b, &v, 8);
}

void pbuf_id(struct pbuf *b, const ferry_id *id)
{
    pbuf_put(b, id->bytes, FERRY_ID_SIZE);
}

void pbuf_consume(struct pbuf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

size_t proto_frame_begin(struct pbuf *b, uint16_t type, uint64_t tag)
{
    size_t start = b->len;
    pbuf_u32(b, 0);
    pbuf_u16(b, type);
    pbuf_u16(b, 0);
    pbuf_u64(b, tag);
    return start;
}

void proto_frame_end(struct pbuf *b, size_t start)
{
    uint32_t length;

    if (b->oom)
        return;
    length = (uint32_t)(b->len - start - PROTO_HEADER_SIZE);
    memcpy(b->data + start, &length, 4);
}

/* ---- bounds-checked reader ---- */

const uint8_t *prd_bytes(struct preader *r, size_t n)
{
    const uint8_t *p = r->p;

    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    r->p += n;
    r->left -= n;
    return p;
}

#define PRD_SCALAR(name, type)                                                                     \
    type name(struct preader *r)                                                                   \
    {                                                                                              \
        type v = 0;                                                                                \
        const uint8_t *p = prd_bytes(r, sizeof(type));                                             \
        if (p)                                                                                     \
            memcpy(&v, p, sizeof(type));                                                           \
        return v;                                                                                  \
    }

PRD_SCALAR(prd_u8, uint8_t)
PRD_SCALAR(prd_u16, uint16_t)
PRD_SCALAR(prd_u32, uint32_t)
PRD_SCALAR(prd_u64, uint64_t)

void prd_id(struct preader *r, ferry_id *out)
{
    const uint8_t *p = prd_bytes(r, FERRY_ID_SIZE);
    if (p)
        memcpy(out->bytes, p, FERRY_ID_SIZE);
    else
        memset(out->bytes, 0, FERRY_ID_SIZE);
}

/* ---- frames ---- */

const char *proto_type_name(uint16_t type)
{
    static const char *const names[PROTO_TYPE_MAX + 1] = {
        [PROTO_HELLO] = "HELLO",
        [PROTO_CREATE] = "CREATE",
        [PROTO_SEAL] = "SEAL",
        [PROTO_ABORT] = "ABORT",
        [PROTO_GET] = "GET",
        [PROTO_RELEASE] = "RELEASE",
        [PROTO_CONTAINS] = "CONTAINS",
        [PROTO_DELETE] = "DELETE",
        [PROTO_LIST] = "LIST",
        [PROTO_EVICT] = "EVICT",
        [PROTO_REFRESH] = "REFRESH",
        [PROTO_HASH] = "HASH",
        [PROTO_STATS] = "STATS",
        [PROTO_SUBSCRIBE] = "SUBSCRIBE",
        [PROTO_STAGE] = "STAGE",
        [PROTO_PUT_BATCH] = "PUT_BATCH",
        [PROTO_FETCH] = "FETCH",
        [PROTO_LOCATION] = "LOCATION",
        [PROTO_FETCH_AT] = "FETCH_AT",
        [PROTO_NODES] = "NODES",
        [PROTO_WHERE] = "WHERE",
        [PROTO_PEERS] = "PEERS",
        [PROTO_EAGER_MAX] = "EAGER_MAX",
        [PROTO_DELETE_CLUSTER] = "DELETE_CLUSTER",
        [PROTO_NAME] = "NAME",
        [PROTO_KEEP] = "KEEP",
        [PROTO_DELETE_UNUSED] = "DELETE_UNUSED",
        [PROTO_RING] = "RING",
        [PROTO_FLUSH] = "FLUSH",
        [PROTO_KICK] = "KICK",
    };
    return type <= PROTO_TYPE_MAX && names[type] ? names[type] : "?";
}

int proto_decode_header(const uint8_t *buf, uint32_t max_payload, struct proto_header *out)
{
    struct preader r = {buf, PROTO_HEADER_SIZE, 0};

    out->length = prd_u32(&r);
    out->type = prd_u16(&r);
    out->flags = prd_u16(&r);
    out->tag = prd_u64(&r);
    if (out->flags != 0)
        return err_set(FERRY_EPROTO, "frame flags 0x%x, expected 0", out->flags);
    if (out->length > max_payload)
        return err_set(FERRY_EPROTO, "frame of %u bytes exceeds the limit of %u", out->length,
                       max_payload);
    return 0;
}

/* Reads n ids after a u32 count; the count is checked against its limit and the payload. */
int proto_check_name(const char *name)
{
    size_t len = strlen(name);

    if (len == 0 || len > FERRY_NAME_MAX)
        return err_set(FERRY_EINVAL, "a name has 1 to %d bytes, not %zu", FERRY_NAME_MAX, len);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return err_set(FERRY_EINVAL, "a name holds no control characters (byte %zu)", i);
    return 0;
}

static int decode_ids(struct preader *r, uint32_t max, uint32_t *n, const ferry_id **ids)
{
    *n = prd_u32(r);
    if (*n > max)
        return err_set(FERRY_EPROTO, "%u ids exceed the limit of %u", *n, max);
    *ids = (const ferry_id *)prd_bytes(r, (size_t)*n * FERRY_ID_SIZE);
    return 0;
}

/* FETCH_AT's table of locations, each of at most PROTO_MAX_LOCATION bytes and no NUL, then
 * an index per id, none past the table. */
static int decode_locs(struct preader *r, struct proto_request *q)
{
    size_t before;

    q->u.ids.nlocs = prd_u16(r);
    if (q->u.ids.nlocs > PROTO_MAX_LOCS)
        return err_set(FERRY_EPROTO, "fetch: %u locations exceed the limit of %u", q->u.ids.nlocs,
                       PROTO_MAX_LOCS);
    before = r->left;
    q->u.ids.locs = r->p;
    for (uint32_t i = 0; i < q->u.ids.nlocs && !r->bad; i++) {
        uint16_t k = prd_u16(r);
        const uint8_t *p = prd_bytes(r, k);
        if (k > PROTO_MAX_LOCATION || (p && memchr(p, '\0', k)))
            return err_set(FERRY_EPROTO, "fetch: location %u of %u bytes, or with a NUL", i, k);
    }
    q->u.ids.locs_len = before - r->left;
    q->u.ids.loc_index = prd_bytes(r, (size_t)q->u.ids.n * 2);
    for (uint32_t i = 0; q->u.ids.loc_index && i < q->u.ids.n; i++)
        if (proto_loc_index(q, i) > q->u.ids.nlocs)
            return err_set(FERRY_EPROTO, "fetch: id %u names location %u of %u", i,
                           proto_loc_index(q, i), q->u.ids.nlocs);
    return 0;
}

uint16_t proto_loc_index(const struct proto_request *q, uint32_t i)
{
    uint16_t k;

    memcpy(&k, q->u.ids.loc_index + 2 * (size_t)i, 2); /* as pbuf_u16 wrote it */
    return k;
}

/* An id, then a u8 that is a boolean (what names it in the error). */
static int decode_id_flag(struct preader *r, ferry_id *id, uint8_t *flag, const char *what)
{
    prd_id(r, id);
    *flag = prd_u8(r);
    if (*flag > 1)
        return err_set(FERRY_EPROTO, "%s flag %u", what, *flag);
    return 0;
}

static int decode_body(struct preader *r, struct proto_request *q)
{
    switch (q->type) {
    case PROTO_HELLO:
        q->u.hello.magic = prd_u32(r);
        q->u.hello.version = prd_u32(r);
        q->u.hello.pid = prd_u32(r);
        return 0;
    case PROTO_CREATE:
        prd_id(r, &q->u.create.id);
        q->u.create.data_size = prd_u64(r);
        q->u.create.metadata_size = prd_u64(r);
        q->u.create.flags = r->left ? prd_u8(r) : 0;
        if (q->u.create.flags & ~PROTO_CREATE_OWN_PAGES)
            return err_set(FERRY_EPROTO, "create: flags 0x%x", q->u.create.flags);
        return 0;
    case PROTO_SEAL:
        return decode_id_flag(r, &q->u.seal.id, &q->u.seal.release, "seal: release");
    case PROTO_KEEP:
        return decode_id_flag(r, &q->u.keep.id, &q->u.keep.keep, "keep: keep");
    case PROTO_ABORT:
    case PROTO_RELEASE:
    case PROTO_CONTAINS:
    case PROTO_DELETE:
    case PROTO_DELETE_UNUSED:
    case PROTO_DELETE_CLUSTER:
    case PROTO_HASH:
    case PROTO_WHERE:
        prd_id(r, &q->u.one.id);
        return 0;
    case PROTO_GET:
    case PROTO_FETCH:
        q->u.ids.timeout_ms = (int64_t)prd_u64(r);
        if (q->u.ids.timeout_ms < -1)
            return err_set(FERRY_EPROTO, "get: timeout %lld ms", (long long)q->u.ids.timeout_ms);
        return decode_ids(r, PROTO_MAX_IDS, &q->u.ids.n, &q->u.ids.ids);
    case PROTO_FETCH_AT:
        q->u.ids.timeout_ms = (int64_t)prd_u64(r);
        if (q->u.ids.timeout_ms < -1)
            return err_set(FERRY_EPROTO, "fetch: timeout %lld ms", (long long)q->u.ids.timeout_ms);
        if (decode_ids(r, PROTO_MAX_IDS, &q->u.ids.n, &q->u.ids.ids) < 0)
            return FERRY_EPROTO;
        return decode_locs(r, q);
    case PROTO_REFRESH:
        return decode_ids(r, PROTO_MAX_IDS, &q->u.ids.n, &q->u.ids.ids);
    case PROTO_EVICT:
        q->u.evict.bytes = prd_u64(r);
        return 0;
    case PROTO_EAGER_MAX:
        q->u.eager.bytes = prd_u64(r);
        return 0;
    case PROTO_PEERS:
        q->u.peers.max = prd_u32(r);
        if (q->u.peers.max > PROTO_MAX_PEERS)
            return err_set(FERRY_EPROTO, "peers: %u exceed the limit of %u", q->u.peers.max,
                           PROTO_MAX_PEERS);
        return 0;
    case PROTO_NAME:
        prd_id(r, &q->u.name.id);
        proto_get_str(r, q->u.name.text, sizeof(q->u.name.text));
        return 0; /* the handler checks it: a bad name is answered, not a broken stream */
    case PROTO_LIST:
    case PROTO_LOCATION:
    case PROTO_NODES:
    case PROTO_STATS:
    case PROTO_SUBSCRIBE:
    case PROTO_STAGE:
    case PROTO_RING:
    case PROTO_KICK:
        return 0;
    case PROTO_FLUSH:
        q->u.flush.report = prd_u8(r);
        if (q->u.flush.report > 1)
            return err_set(FERRY_EPROTO, "flush: report flag %u", q->u.flush.report);
        return 0;
    case PROTO_PUT_BATCH:
        q->u.batch.n = prd_u32(r);
        if (q->u.batch.n > PROTO_MAX_BATCH)
            return err_set(FERRY_EPROTO, "put batch of %u exceeds the limit of %u", q->u.batch.n,
                           PROTO_MAX_BATCH);
        q->u.batch.entries = prd_bytes(r, (size_t)q->u.batch.n * PROTO_BATCH_ENTRY_SIZE);
        return 0;
    default:
        return err_set(FERRY_EPROTO, "unknown message type %u", q->type);
    }
}

int proto_decode_request(const struct proto_header *h, const uint8_t *payload,
                         struct proto_request *out)
{
    struct preader r = {payload, h->length, 0};
    int rc;

    memset(out, 0, sizeof(*out));
    out->type = h->type;
    out->tag = h->tag;
    rc = decode_body(&r, out);
    if (rc < 0)
        return rc;
    if (r.bad)
        return err_set(FERRY_EPROTO, "message type %u truncated (%u bytes)", h->type, h->length);
    if (r.left)
        return err_set(FERRY_EPROTO, "message type %u has %zu trailing bytes", h->type, r.left);
    return 0;
}

void proto_batch_entry(const struct proto_request *q, uint32_t i, struct proto_batch_entry *out)
{
    struct preader r = {q->u.batch.entries + (size_t)i * PROTO_BATCH_ENTRY_SIZE,
                        PROTO_BATCH_ENTRY_SIZE, 0};

    prd_id(&r, &out->id);
    out->offset = prd_u64(&r);
    out->data_size = prd_u64(&r);
    out->metadata_size = prd_u64(&r);
}

/* ---- strings, nodes and peers ---- */

_Static_assert(PROTO_MAX_PEERS == FERRY_PEERS_MAX, "the daemon answers what ferry_peers asks");

void proto_put_str(struct pbuf *b, const char *s, size_t max)
{
    size_t len = strnlen(s, max < UINT8_MAX ? max : UINT8_MAX);
    pbuf_u8(b, (uint8_t)len);
    pbuf_put(b, s, len);
}

void proto_get_str(struct preader *r, char *out, size_t size)
{
    uint8_t len = prd_u8(r);
    const uint8_t *p = prd_bytes(r, len);

    if (!p || len >= size) {
        r->bad = 1;
        out[0] = '\0';
        return;
    }
    memcpy(out, p, len);
    out[len] = '\0';
}

void proto_put_loc(struct pbuf *b, const char *s)
{
    size_t len = strnlen(s, PROTO_MAX_LOCATION);

    pbuf_u16(b, (uint16_t)len);
    pbuf_put(b, s, len);
}

void proto_get_loc(struct preader *r, char *out)
{
    uint16_t len = prd_u16(r);
    const uint8_t *p = prd_bytes(r, len);

    if (!p || len > PROTO_MAX_LOCATION || memchr(p, '\0', len)) {
        r->bad = 1;
        out[0] = '\0';
        return;
    }
    memcpy(out, p, len);
    out[len] = '\0';
}

void proto_put_node(struct pbuf *b, const ferry_node_info *n)
{
    proto_put_str(b, n->id, sizeof(n->id) - 1);
    proto_put_str(b, n->address, sizeof(n->address) - 1);
    proto_put_str(b, n->transports, sizeof(n->transports) - 1);
    pbuf_u8(b, (uint8_t)(n->self != 0));
}

int proto_get_node(struct preader *r, ferry_node_info *out)
{
    proto_get_str(r, out->id, sizeof(out->id));
    proto_get_str(r, out->address, sizeof(out->address));
    proto_get_str(r, out->transports, sizeof(out->transports));
    out->self = prd_u8(r) != 0;
    return r->bad ? err_set(FERRY_EPROTO, "malformed node entry") : 0;
}

void proto_put_stat(struct pbuf *b, const char *name, int kind, uint64_t value)
{
    proto_put_str(b, name, FERRY_STAT_NAME_MAX);
    pbuf_u8(b, (uint8_t)kind);
    pbuf_u64(b, value);
}

int proto_get_stat(struct preader *r, ferry_stat *out)
{
    proto_get_str(r, out->name, sizeof(out->name));
    out->kind = prd_u8(r);
    out->value = prd_u64(r);
    if (r->bad || !out->name[0] ||
        (out->kind != FERRY_STAT_COUNTER && out->kind != FERRY_STAT_GAUGE))
        return err_set(FERRY_EPROTO, "malformed stat entry");
    return 0;
}

void proto_put_peer(struct pbuf *b, const ferry_peer *p)
{
    proto_put_str(b, p->node, sizeof(p->node) - 1);
    proto_put_str(b, p->transport, sizeof(p->transport) - 1);
    proto_put_str(b, p->provider, sizeof(p->provider) - 1);
    proto_put_str(b, p->why, sizeof(p->why) - 1);
}

int proto_get_peer(struct preader *r, ferry_peer *out)
{
    proto_get_str(r, out->node, sizeof(out->node));
    proto_get_str(r, out->transport, sizeof(out->transport));
    proto_get_str(r, out->provider, sizeof(out->provider));
    proto_get_str(r, out->why, sizeof(out->why));
    return r->bad ? err_set(FERRY_EPROTO, "malformed peer entry") : 0;
}

/* ---- notifications ---- */

void proto_encode_notification(uint8_t out[PROTO_NOTIFY_SIZE], const ferry_notification *n)
{
    out[0] = (uint8_t)n->event;
    memcpy(out + 1, n->id.bytes, FERRY_ID_SIZE);
    memcpy(out + 1 + FERRY_ID_SIZE, &n->data_size, 8);
    memcpy(out + 1 + FERRY_ID_SIZE + 8, &n->metadata_size, 8);
}

int proto_decode_notification(const uint8_t *buf, size_t len, ferry_notification *out)
{
    struct preader r = {buf, len, 0};

    if (len != PROTO_NOTIFY_SIZE)
        return err_set(FERRY_EPROTO, "notification of %zu bytes, expected %u", len,
                       PROTO_NOTIFY_SIZE);
    out->event = prd_u8(&r);
    prd_id(&r, &out->id);
    out->data_size = prd_u64(&r);
    out->metadata_size = prd_u64(&r);
    if (out->event < FERRY_EVENT_SEALED || out->event > FERRY_EVENT_EVICTED)
        return err_set(FERRY_EPROTO, "notification event %d", out->event);
    return 0;
}
