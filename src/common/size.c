#include "common/size.h"

#include <errno.h>
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
