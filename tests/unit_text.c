/* Unit tests of untrusted text made safe to show (common/text.c): every Unicode format
 * character, the line and paragraph separators and the C1 controls come out escaped, in
 * text_safe's form and in JSON's; every other valid character stays as it is. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/text.h"

/* Escaped although valid. The Cf ranges are what
 *   python3 -c "import unicodedata as u; print([hex(c) for c in range(0x110000)
 *               if u.category(chr(c)) == 'Cf'])"
 * printed here (Python 3.11, Unicode 14.0), with U+13439-U+1343F, Cf since Unicode 15. */
static const uint32_t escaped[][2] = {
    {0x0080, 0x009f}, /* C1 controls */
    {0x2028, 0x2029}, /* line and paragraph separators */
    {0x00ad, 0x00ad},   {0x0600, 0x0605},   {0x061c, 0x061c},   {0x06dd, 0x06dd},
    {0x070f, 0x070f},   {0x0890, 0x0891},   {0x08e2, 0x08e2},   {0x180e, 0x180e},
    {0x200b, 0x200f},   {0x202a, 0x202e},   {0x2060, 0x2064},   {0x2066, 0x206f},
    {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
    {0x13430, 0x13438}, {0x13439, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},
    {0xe0001, 0xe0001}, {0xe0020, 0xe007f},
};
#define N_ESCAPED (sizeof(escaped) / sizeof(escaped[0]))

static int is_escaped(uint32_t cp)
{
    for (size_t i = 0; i < N_ESCAPED; i++)
        if (cp >= escaped[i][0] && cp <= escaped[i][1])
            return 1;
    return 0;
}

/* "a", cp in UTF-8, "b" into s. */
static void with_char(uint32_t cp, char *s)
{
    unsigned char *p = (unsigned char *)s;

    *p++ = 'a';
    if (cp < 0x800) {
        *p++ = (unsigned char)(0xc0 | cp >> 6);
    } else if (cp < 0x10000) {
        *p++ = (unsigned char)(0xe0 | cp >> 12);
        *p++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    } else {
        *p++ = (unsigned char)(0xf0 | cp >> 18);
        *p++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        *p++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    }
    *p++ = (unsigned char)(0x80 | (cp & 0x3f));
    *p++ = 'b';
    *p = '\0';
}

static void test_format_characters_separators_and_c1_are_escaped(void **state)
{
    char s[8], out[64], want[64];
    size_t n = 0;

    for (size_t i = 0; i < N_ESCAPED; i++) {
        for (uint32_t cp = escaped[i][0]; cp <= escaped[i][1]; cp++, n++) {
            with_char(cp, s);
            snprintf(want, sizeof(want), "a\\u{%04x}b", (unsigned)cp);
            assert_string_equal(text_safe(s, out, sizeof(out)), want);
            assert_false(text_is_safe(s));
            if (cp > 0xffff)
                snprintf(want, sizeof(want), "a\\u%04x\\u%04xb",
                         (unsigned)(0xd800 + ((cp - 0x10000) >> 10)),
                         (unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)));
            else
                snprintf(want, sizeof(want), "a\\u%04xb", (unsigned)cp);
            assert_string_equal(text_json(s, out, sizeof(out)), want);
        }
    }
    assert_int_equal(n, 32 + 2 + 170); /* C1, the separators, Unicode 15's Cf */
    (void)state;
}

static void test_every_other_character_is_kept(void **state)
{
    char s[8], out[64];

    assert_string_equal(text_safe("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac", out, sizeof(out)),
                        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac"); /* café 日本 */
    assert_string_equal(text_json("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac", out, sizeof(out)),
                        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac");
    for (uint32_t cp = 0x80; cp <= 0x10ffff; cp++) {
        if (is_escaped(cp) || (cp >= 0xd800 && cp <= 0xdfff)) /* surrogates: invalid UTF-8 */
            continue;
        with_char(cp, s);
        if (strcmp(text_safe(s, out, sizeof(out)), s) != 0)
            fail_msg("U+%04X shown as %s", (unsigned)cp, out);
        assert_true(text_is_safe(s));
    }
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_characters_separators_and_c1_are_escaped),
        cmocka_unit_test(test_every_other_character_is_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
