/* Fuzzes the decoder of put_object's metadata (python/_ferry/objfmt.c), which reads what any
 * local client may have stored: the first 8 bytes of the input are the data part's size, the
 * rest the metadata. What it accepts must lie inside the data, in order, and encode back to
 * the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "objfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct objfmt_part *parts;
    uint64_t data_size, end = 0;
    uint8_t *again;
    size_t n;

    if (size < 8)
        return 0;
    memcpy(&data_size, data, 8);
    if (objfmt_check(data + 8, size - 8, data_size, &n, NULL) < 0)
        return 0;
    if (n == 0 || objfmt_header_size(n) != size - 8 || !(parts = calloc(n, sizeof(*parts))))
        abort();
    for (size_t i = 0; i < n; i++) {
        parts[i] = objfmt_part_at(data + 8, i);
        if (parts[i].offset < end || parts[i].offset > data_size ||
            parts[i].length > data_size - parts[i].offset)
            abort();
        end = parts[i].offset + parts[i].length;
    }
    if (!(again = malloc(size - 8)))
        abort();
    objfmt_encode(parts, n, again);
    if (memcmp(again, data + 8, size - 8) != 0)
        abort();
    free(again);
    free(parts);
    return 0;
}
