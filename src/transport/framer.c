/* framer.c - transfer frames assembled from a stream (see framer.h). */
#include "transport/framer.h"

#include <string.h>

#include "common/err.h"

size_t framer_wanted(const struct framer *fr)
{
    if (fr->hdr_got < PROTO_HEADER_SIZE)
        return PROTO_HEADER_SIZE - fr->hdr_got;
    return fr->h.length - fr->frame.len;
}

/* 1 when the frame is whole, and ready for the next one's header. */
static int whole(struct framer *fr)
{
    if (fr->frame.len < fr->h.length)
        return 0;
    fr->hdr_got = 0;
    return 1;
}

int framer_grew(struct framer *fr, size_t n)
{
    fr->frame.len += n;
    return whole(fr);
}

int framer_put(struct framer *fr, const uint8_t *p, size_t n, uint32_t max_frame)
{
    int rc;

    if (fr->hdr_got == PROTO_HEADER_SIZE) {
        memcpy(fr->frame.data + fr->frame.len, p, n);
        return framer_grew(fr, n);
    }
    memcpy(fr->hdr + fr->hdr_got, p, n);
    fr->hdr_got += n;
    if (fr->hdr_got < PROTO_HEADER_SIZE)
        return 0;
    if ((rc = proto_decode_header(fr->hdr, max_frame, &fr->h)) < 0)
        return rc;
    fr->frame.len = 0;
    pbuf_reserve(&fr->frame, fr->h.length);
    if (fr->frame.oom)
        return err_set(FERRY_ENOMEM, "out of memory for a frame of %u bytes", fr->h.length);
    return whole(fr);
}

void framer_free(struct framer *fr)
{
    pbuf_free(&fr->frame);
}
