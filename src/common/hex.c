/* hex.c - bytes as hex and back (hex.h). */
#include "common/hex.h"

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void hex_format(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

size_t hex_parse(const char *text, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(text[2 * i]), lo = hex_value(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return i + 1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
