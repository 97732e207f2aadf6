/*
 * framer.h - transfer frames (common/proto.h's 16-byte header, then its payload) assembled
 * from the bytes of a stream, for the transports that carry one (tcp, fabric).
 */
#ifndef FERRY_FRAMER_H
#define FERRY_FRAMER_H

#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"

struct framer {
    uint8_t hdr[PROTO_HEADER_SIZE];
    size_t hdr_got;
    struct proto_header h; /* once hdr_got is PROTO_HEADER_SIZE */
    struct pbuf frame;     /* the payload so far: frame.len of h.length bytes */
};

/* How many bytes the frame being read still wants: the header's rest, else the payload's. */
size_t framer_wanted(const struct framer *fr);
/* Adds n bytes (at most framer_wanted). 1 when the frame is whole: fr->h and fr->frame.data
 * hold it until the next framer_put or framer_grew; 0 when it wants more; FERRY_EPROTO (a bad
 * header, max_frame exceeded) or FERRY_ENOMEM, with the reason set. */
int framer_put(struct framer *fr, const uint8_t *p, size_t n, uint32_t max_frame);
/* n payload bytes were written in place, at frame.data + frame.len: as framer_put. */
int framer_grew(struct framer *fr, size_t n);
void framer_free(struct framer *fr);

#endif
