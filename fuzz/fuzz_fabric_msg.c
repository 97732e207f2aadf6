/* Fuzzes the decoders of fabric messages from peers: header, rendezvous descriptor, done, and
 * the connection hello. What a decoded hello points at must lie inside the input, and what
 * decodes must encode back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/fabric/fabric_msg.h"

static void check_hello(const uint8_t *body, size_t n)
{
    struct fmsg_hello h;
    uint8_t again[FMSG_HELLO_FIXED + FMSG_NAME_MAX];

    if (fmsg_hello_get(body, n, &h) < 0)
        return;
    if (h.name < body || h.name + h.name_len > body + n || h.name_len > FMSG_NAME_MAX)
        abort();
    if (fmsg_hello_put(again, &h) != n || memcmp(again, body, n) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fmsg_hdr h;
    struct fmsg_rdv r;
    uint8_t again[FMSG_HDR + FMSG_RDV_FIXED + FMSG_KEY_MAX];
    uint64_t cookie;

    if (fmsg_hdr_get(data, size, &h) < 0)
        return 0;
    fmsg_hdr_put(again, &h);
    if (memcmp(again, data, FMSG_HDR) != 0)
        abort();
    data += FMSG_HDR;
    size -= FMSG_HDR;
    if (h.kind == K_RDV && fmsg_rdv_get(data, size, &r) == 0) {
        if (r.key < data || r.key + r.key_len > data + size || fmsg_rdv_put(again, &r) != size ||
            memcmp(again, data, size) != 0 || r.len == 0)
            abort();
    }
    if (h.kind == K_DONE && fmsg_done_get(data, size, &cookie) == 0 && size != FMSG_DONE)
        abort();
    if (h.kind == K_CONNECT || h.kind == K_ACCEPT)
        check_hello(data, size);
    return 0;
}
