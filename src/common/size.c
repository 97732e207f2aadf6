#include "common/size.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* The shift of a unit suffix: K, M, G, T (either case), alone or followed by B or iB; 0 for
 * none, -1 for anything else. */
static int suffix_shift(const char *end)
{
    static const char suffixes[] = "KMGT";
    const char *u = strchr(suffixes, *end >= 'a' ? *end - 32 : *end);

    if (!*end)
        return 0;
    if (!u || !*u)
        return -1;
    if (end[1] && strcmp(end + 1, "B") != 0 && strcmp(end + 1, "iB") != 0 &&
        strcmp(end + 1, "b") != 0)
        return -1;
    return 10 * (int)(u - suffixes + 1);
}

int size_parse(const char *text, uint64_t *out)
{
    unsigned long long v, frac = 0, scale = 1;
    char *end;
    int shift;

    if (!text || *text < '0' || *text > '9')
        return err_set(FERRY_EINVAL, "size '%s': expected a number like 4096, 64K, 1.5G or 2GiB",
                       text ? text : "");
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno)
        return err_set(FERRY_EINVAL, "size '%s' out of range", text);
    if (*end == '.') { /* a fraction of a unit: up to 9 digits count */
        for (end++; *end >= '0' && *end <= '9'; end++) {
            if (scale < 1000000000ull) {
                frac = frac * 10 + (unsigned long long)(*end - '0');
                scale *= 10;
            }
        }
    }
    if ((shift = suffix_shift(end)) < 0)
        return err_set(FERRY_EINVAL, "size '%s': unknown suffix '%s' (K, M, G, T; KiB, ...)", text,
                       end);
    if (scale > 1 && !shift)
        return err_set(FERRY_EINVAL, "size '%s': a fraction needs a unit (1.5K)", text);
    uint64_t part = (uint64_t)(((unsigned __int128)frac << shift) / scale); /* < 1 << shift */
    if (v > (UINT64_MAX >> shift) || (v << shift) > UINT64_MAX - part)
        return err_set(FERRY_EINVAL, "size '%s' out of range", text);
    *out = ((uint64_t)v << shift) + part;
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
