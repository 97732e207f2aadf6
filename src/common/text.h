/*
 * text.h - untrusted text (object names, node ids) made safe to show: on a terminal, in a log
 * line or in a metric label, where a control character could move the cursor, forge a log
 * record or end a line, and a bidi override could reorder what a reader sees.
 *
 * Escaped: '\' as "\\"; C0 controls, DEL and every byte of invalid UTF-8 (overlong forms,
 * surrogates, past U+10FFFF, cut sequences) as \xNN; C1 controls (U+0080-U+009F), the line
 * and paragraph separators (U+2028, U+2029) and every format character (Unicode category Cf:
 * the bidi marks, embeddings, overrides and isolates, the Arabic letter mark U+061C, the
 * zero-width space and joiners, the word joiner, the byte order mark U+FEFF, the soft hyphen,
 * tags; text.c lists them) as \u{NNNN}. Everything else (printable ASCII, other UTF-8) is
 * kept as it is, so names in any script read as they were given.
 */
#ifndef FERRY_TEXT_H
#define FERRY_TEXT_H

#include <stddef.h>

/* s escaped into buf (len bytes, at least 1), cut at a whole character or escape when it
 * does not fit; returns buf. */
const char *text_safe(const char *s, char *buf, size_t len);
/* s as the inside of a JSON string (no quotes) into buf, by the same rules in JSON's forms:
 * '"' and '\' after a backslash, C0 controls, DEL and the characters above as \uNNNN (a
 * surrogate pair past U+FFFF; a JSON parser gives back the name itself), every byte of
 * invalid UTF-8 as \ufffd (JSON holds no raw bytes). At most 6 bytes of buf per byte of s;
 * cut like text_safe. */
#define TEXT_JSON_MAX(n) (6 * (n) + 1)
const char *text_json(const char *s, char *buf, size_t len);
/* 1 when text_safe leaves s as it is. */
int text_is_safe(const char *s);

#endif
