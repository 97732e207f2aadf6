/* Fuzzes the decoder of spill group headers, read from files a crash (or anyone who can write
 * the spill directory) may have damaged. The checksum is fixed up first, so that the entries'
 * decoder is reached; decoded entries must lie inside their group and re-encode to a header
 * that decodes to the same entries. */
#include <stdlib.h>
#include <string.h>

#include "store/spill_fmt.h"

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct spill_entry e[SPILL_ENTRIES_MAX], again[SPILL_ENTRIES_MAX];
    struct spill_group g, g2;
    uint8_t *buf;

    if (spill_hdr_decode_fixed(data, size, &g) < 0)
        return 0;
    buf = calloc(1, g.hdr_len);
    memcpy(buf, data, size < g.hdr_len ? size : g.hdr_len);
    put64(buf + 40, spill_hdr_checksum(buf, g.hdr_len));
    if (spill_hdr_decode(buf, &g, e) == 0) {
        for (uint32_t i = 0; i < g.n; i++) {
            uint64_t len = e[i].data_size + e[i].metadata_size;
            if (e[i].payload_off < g.hdr_len || e[i].payload_off + len > g.group_len ||
                strlen(e[i].name) > FERRY_NAME_MAX)
                abort();
        }
        g2 = g;
        g2.hdr_len = spill_hdr_len(e, g.n);
        if (g2.hdr_len <= g.hdr_len) { /* a longer header would move the entries' bytes */
            uint8_t *out = calloc(1, g2.hdr_len);
            spill_hdr_encode(out, &g2, e);
            if (spill_hdr_decode_fixed(out, g2.hdr_len, &g2) < 0 ||
                spill_hdr_decode(out, &g2, again) < 0)
                abort();
            for (uint32_t i = 0; i < g.n; i++)
                if (!spill_entry_equal(&e[i], &again[i]))
                    abort();
            free(out);
        }
    }
    free(buf);
    return 0;
}
