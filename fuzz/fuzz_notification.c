/* Fuzzes the library's decoder of subscription records. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ferry_notification n;
    uint8_t again[PROTO_NOTIFY_SIZE];
    uint8_t *copy = malloc(size ? size : 1);

    memcpy(copy, data, size);
    /* Whatever decodes must encode back to the same bytes. */
    if (proto_decode_notification(copy, size, &n) == 0) {
        proto_encode_notification(again, &n);
        if (memcmp(again, copy, PROTO_NOTIFY_SIZE) != 0)
            abort();
    }
    free(copy);
    return 0;
}
