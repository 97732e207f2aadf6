/*
 * hex.h - bytes as lowercase hex and back (ids, digests). Pure; safe from any thread.
 */
#ifndef FERRY_HEX_H
#define FERRY_HEX_H

#include <stddef.h>
#include <stdint.h>

/* The 2 n hex digits of p[0..n) and a NUL into out (2 n + 1 bytes). */
void hex_format(const uint8_t *p, size_t n, char *out);
/* 2 n hex digits (either case) of text into out[0..n): 0, or the index of the first pair that
 * is not hex, plus one (out is then partly written). */
size_t hex_parse(const char *text, size_t n, uint8_t *out);

#endif
