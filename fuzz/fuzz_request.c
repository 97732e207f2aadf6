/* Fuzzes the daemon's decoder of client frames: header, request body, batch entries. The
 * decoder must reject what it cannot vouch for and never read outside the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"

static void check_request(const struct proto_request *q, const uint8_t *payload, size_t len)
{
    struct proto_batch_entry e;

    switch (q->type) {
    case PROTO_GET:
    case PROTO_REFRESH:
        /* Every id the decoder vouched for must lie inside the payload. */
        if (q->u.ids.n && ((const uint8_t *)q->u.ids.ids < payload ||
                           (const uint8_t *)(q->u.ids.ids + q->u.ids.n) > payload + len))
            abort();
        break;
    case PROTO_PUT_BATCH:
        for (uint32_t i = 0; i < q->u.batch.n; i++)
            proto_batch_entry(q, i, &e);
        break;
    case PROTO_KEEP:
        /* The daemon passes the flag on as a boolean. */
        if (q->u.keep.keep > 1)
            abort();
        break;
    case PROTO_PEERS:
        /* The daemon allocates what the count says: it must be within the limit. */
        if (q->u.peers.max > PROTO_MAX_PEERS)
            abort();
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_header h;
    struct proto_request q;
    uint8_t *payload;

    if (size < PROTO_HEADER_SIZE)
        return 0;
    if (proto_decode_header(data, PROTO_MAX_REQUEST, &h) < 0)
        return 0;
    if (h.length > size - PROTO_HEADER_SIZE)
        return 0;
    /* An exact-size copy, so that ASan sees any read past the frame. */
    payload = malloc(h.length ? h.length : 1);
    memcpy(payload, data + PROTO_HEADER_SIZE, h.length);
    if (proto_decode_request(&h, payload, &q) == 0)
        check_request(&q, payload, h.length);
    free(payload);
    return 0;
}
