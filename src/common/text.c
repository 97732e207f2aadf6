/* text.c - untrusted text made safe to show (text.h). */
#include "common/text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at s (1 to 4) and its code point, or 0. */
static size_t utf8_next(const unsigned char *s, uint32_t *cp)
{
    size_t n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};

    if (s[0] > 0xf4 || n == 0)
        return 0;
    *cp = s[0] & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) /* also the NUL of a cut sequence */
            return 0;
        *cp = (*cp << 6) | (s[i] & 0x3f);
    }
    if (*cp < min[n] || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff))
        return 0;
    return n;
}

static int hidden(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* The escape of the character at s into out (at least 12 bytes), and its length in s: for a
 * JSON string (json: the same characters escaped, in JSON's forms, '"' too, and an invalid
 * byte as U+FFFD, which JSON has no escape for) or else text_safe's. */
static size_t escape_one(const unsigned char *s, char *out, int json)
{
    uint32_t cp;
    size_t n;

    if (s[0] == '\\' || (json && s[0] == '"')) {
        snprintf(out, 12, "\\%c", s[0]);
        return 1;
    }
    if (s[0] < 0x20 || s[0] == 0x7f) {
        snprintf(out, 12, json ? "\\u%04x" : "\\x%02x", s[0]);
        return 1;
    }
    if (s[0] < 0x80) {
        out[0] = (char)s[0];
        out[1] = '\0';
        return 1;
    }
    if (!(n = utf8_next(s, &cp))) {
        if (json)
            snprintf(out, 12, "\\ufffd");
        else
            snprintf(out, 12, "\\x%02x", s[0]);
        return 1;
    }
    if (hidden(cp))
        snprintf(out, 12, json ? "\\u%04x" : "\\u{%04x}", (unsigned)cp);
    else {
        memcpy(out, s, n);
        out[n] = '\0';
    }
    return n;
}

static const char *escape(const char *s, char *buf, size_t len, int json)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    char one[12];

    while (*p) {
        size_t used = escape_one(p, one, json), w = strlen(one);
        if (o + w >= len)
            break;
        memcpy(buf + o, one, w);
        o += w;
        p += used;
    }
    buf[o] = '\0';
    return buf;
}

const char *text_safe(const char *s, char *buf, size_t len)
{
    return escape(s, buf, len, 0);
}

const char *text_json(const char *s, char *buf, size_t len)
{
    return escape(s, buf, len, 1);
}

int text_is_safe(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    char one[12];

    while (*p) {
        size_t used = escape_one(p, one, 0);
        if (strlen(one) != used || memcmp(one, p, used) != 0)
            return 0;
        p += used;
    }
    return 1;
}
