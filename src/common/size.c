#include "common/size.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"

int size_parse(const char *text, uint64_t *out)
{
    static const char suffixes[] = "KMGT";
    unsigned long long v;
    char *end;
    int shift = 0;

    if (!text || *text < '0' || *text > '9')
        return err_set(FERRY_EINVAL, "size '%s': expected a number like 4096, 64K or 2G",
                       text ? text : "");
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno)
        return err_set(FERRY_EINVAL, "size '%s' out of range", text);
    if (*end) {
        for (int i = 0; suffixes[i]; i++) {
            if (*end == suffixes[i] || *end == suffixes[i] + 32)
                shift = 10 * (i + 1);
        }
        if (!shift || (end[1] && !((end[1] == 'B' || end[1] == 'b') && !end[2])))
            return err_set(FERRY_EINVAL, "size '%s': unknown suffix '%s'", text, end);
    }
    if (shift && v > (UINT64_MAX >> shift))
        return err_set(FERRY_EINVAL, "size '%s' out of range", text);
    *out = (uint64_t)v << shift;
    return 0;
}

const char *size_format(uint64_t bytes, char *buf, unsigned len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;

    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.*f %s", v < 10 ? 2 : 1, v, units[u]);
    return buf;
}
