/* Fuzzes the decoder of transfer messages from peers: header and body. A decoded PULL's ids
 * and REPLY's entries must lie inside the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_header h;
    struct wire_msg m;
    struct wire_reply_entry e;
    uint8_t *payload;

    if (size < PROTO_HEADER_SIZE || proto_decode_header(data, WIRE_MAX_FRAME, &h) < 0 ||
        h.length > size - PROTO_HEADER_SIZE)
        return 0;
    payload = malloc(h.length ? h.length : 1);
    memcpy(payload, data + PROTO_HEADER_SIZE, h.length);
    if (wire_decode(&h, payload, &m) == 0) {
        if (m.type == WIRE_PULL && m.n &&
            ((const uint8_t *)m.ids < payload ||
             (const uint8_t *)(m.ids + m.n) > payload + h.length))
            abort();
        size_t at = 0;
        for (uint32_t i = 0; m.type == WIRE_REPLY && i < m.n; i++) {
            wire_reply_entry(&m, i, &at, &e);
            if (e.nleaves && (e.leaves < payload ||
                              e.leaves + (size_t)e.nleaves * DIGEST_LEN > payload + h.length))
                abort(); /* the leaves must lie in the frame */
        }
        if ((m.type == WIRE_HELLO || m.type == WIRE_CHALLENGE) && strlen(m.node) > WIRE_NODE_MAX)
            abort();
    }
    free(payload);
    return 0;
}
