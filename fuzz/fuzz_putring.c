/* Fuzzes the daemon's reading of a client's ring of puts (common/putring.h), which the client
 * can write anything into: the first byte picks the ring's size (and so its geometry), the rest
 * is laid over the ring's header and entries, its last 16 bytes are the head and data_head the
 * daemon keeps, and the daemon takes entries as session_ring.c does. A tail it accepts is within
 * the ring; every entry it accepts names at most FERRY_SMALL_PUT_MAX bytes inside the data area,
 * right after the entry before, and all of them within one data area of where the take began. */
#include <stdlib.h>
#include <string.h>

#include "common/putring.h"

#define MAX_BLOCK (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint64_t sizes[] = {PUTRING_MIN_SIZE, 256u << 10, MAX_BLOCK};
    static uint8_t *block;
    struct putring r;
    struct putring_item it;
    uint64_t head = 0, data_head = 0, released, block_size;
    int64_t n;

    if (size < 1)
        return 0;
    if (!block && !(block = aligned_alloc(64, MAX_BLOCK)))
        abort();
    block_size = sizes[data[0] % 3];
    data++, size--;
    memset(block, 0, block_size);
    if (putring_layout(&r, block, block_size) < 0)
        abort();
    memcpy(block, data, size < r.data_off ? size : r.data_off);
    if (size >= 16) {
        memcpy(&head, data + size - 8, 8);
        memcpy(&data_head, data + size - 16, 8);
    }
    released = data_head;
    if ((n = putring_pending(&r, head)) < 0)
        return 0;
    if ((uint64_t)n > r.nentries)
        abort();
    for (; n > 0; n--, head++) {
        uint64_t len;
        if (putring_take(&r, head, data_head, released, &it) < 0)
            break;
        len = it.data_size + it.metadata_size;
        if (len > FERRY_SMALL_PUT_MAX || it.offset < r.data_off ||
            it.offset + len > r.data_off + r.data_size || it.end - released > r.data_size)
            abort();
        data_head = it.end;
    }
    return 0;
}
