/* Fuzzes the daemon's reading of a client's ring of puts (common/putring.h), which the client
 * can write anything into: the input is laid over the ring's header and entries, and the daemon
 * takes entries as session_ring.c does. A tail it accepts is within the ring; every entry it
 * accepts names bytes inside the data area, at most FERRY_SMALL_PUT_MAX of them. */
#include <stdlib.h>
#include <string.h>

#include "common/putring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *block;
    struct putring r;
    struct putring_item it;
    uint64_t head = 0;
    int64_t n;

    if (!block && !(block = aligned_alloc(64, PUTRING_MIN_SIZE)))
        abort();
    memset(block, 0, PUTRING_MIN_SIZE);
    if (putring_layout(&r, block, PUTRING_MIN_SIZE) < 0)
        abort();
    memcpy(block, data, size < r.data_off ? size : r.data_off);
    if (size >= 8) /* the head the daemon keeps: anywhere in its life */
        memcpy(&head, data + size - 8, 8);
    if ((n = putring_pending(&r, head)) < 0)
        return 0;
    if ((uint64_t)n > r.nentries)
        abort();
    for (; n > 0; n--, head++) {
        if (putring_take(&r, head, &it) < 0)
            break;
        if (it.data_size + it.metadata_size > FERRY_SMALL_PUT_MAX || it.offset < r.data_off ||
            it.offset + it.data_size + it.metadata_size > PUTRING_MIN_SIZE)
            abort();
    }
    return 0;
}
