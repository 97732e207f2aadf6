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

/* Unicode's format characters (category Cf): invisible, they change how the text around them
 * is shown (bidi marks, embeddings, overrides and isolates, the Arabic letter mark) or hide in
 * it (zero-width spaces and joiners, the word joiner, the byte order mark, the soft hyphen,
 * tags). Unicode 15's, by ascending code point: Python's
 * [c for c in range(0x110000) if unicodedata.category(chr(c)) == 'Cf'] gives the same but
 * U+13439-U+1343F, which its Unicode 14 does not have yet. */
static const uint32_t format_chars[][2] = {
    {0x00ad, 0x00ad},   {0x0600, 0x0605},   {0x061c, 0x061c},   {0x06dd, 0x06dd},
    {0x070f, 0x070f},   {0x0890, 0x0891},   {0x08e2, 0x08e2},   {0x180e, 0x180e},
    {0x200b, 0x200f},   {0x202a, 0x202e},   {0x2060, 0x2064},   {0x2066, 0x206f},
    {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
    {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a}, {0xe0001, 0xe0001},
    {0xe0020, 0xe007f},
};

/* 1 for what is escaped although valid: C1 controls, the line and paragraph separators
 * (U+2028, U+2029: a line break to many readers) and the format characters. */
static int hidden(uint32_t cp)
{
    if (cp <= 0x9f)
        return cp >= 0x80;
    if (cp == 0x2028 || cp == 0x2029)
        return 1;
    for (size_t i = 0; i < sizeof(format_chars) / sizeof(format_chars[0]); i++)
        if (cp <= format_chars[i][1])
            return cp >= format_chars[i][0];
    return 0;
}

/* The longest escape of one character, with its NUL: a surrogate pair, "\\udb40\\udc01". */
#define ESCAPE_MAX 16

/* The escape of the character at s into out (ESCAPE_MAX bytes), and its length in s: for a
 * JSON string (json: the same characters escaped, in JSON's forms, '"' too, and an invalid
 * byte as U+FFFD, which JSON has no escape for) or else text_safe's. */
static size_t escape_one(const unsigned char *s, char *out, int json)
{
    uint32_t cp;
    size_t n;

    if (s[0] == '\\' || (json && s[0] == '"')) {
        snprintf(out, ESCAPE_MAX, "\\%c", s[0]);
        return 1;
    }
    if (s[0] < 0x20 || s[0] == 0x7f) {
        snprintf(out, ESCAPE_MAX, json ? "\\u%04x" : "\\x%02x", s[0]);
        return 1;
    }
    if (s[0] < 0x80) {
        out[0] = (char)s[0];
        out[1] = '\0';
        return 1;
    }
    if (!(n = utf8_next(s, &cp))) {
        if (json)
            snprintf(out, ESCAPE_MAX, "\\ufffd");
        else
            snprintf(out, ESCAPE_MAX, "\\x%02x", s[0]);
        return 1;
    }
    if (hidden(cp) && json && cp > 0xffff) /* JSON writes those as a UTF-16 surrogate pair */
        snprintf(out, ESCAPE_MAX, "\\u%04x\\u%04x", (unsigned)(0xd800 + ((cp - 0x10000) >> 10)),
                 (unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)));
    else if (hidden(cp))
        snprintf(out, ESCAPE_MAX, json ? "\\u%04x" : "\\u{%04x}", (unsigned)cp);
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
    char one[ESCAPE_MAX];

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
    char one[ESCAPE_MAX];

    while (*p) {
        size_t used = escape_one(p, one, 0);
        if (strlen(one) != used || memcmp(one, p, used) != 0)
            return 0;
        p += used;
    }
    return 1;
}
