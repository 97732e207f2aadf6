/* size.h - byte counts as people write them: 4096, 64K, 512M, 4G, 1T (powers of 1024). */
#ifndef FERRY_SIZE_H
#define FERRY_SIZE_H

#include <stdint.h>

/* FERRY_EINVAL (with a reason) for anything but digits and one optional suffix, or overflow. */
int size_parse(const char *text, uint64_t *out);

/* Writes bytes for people ("512 B", "1.50 MiB", "100.0 TiB") into buf and returns buf. */
const char *size_format(uint64_t bytes, char *buf, unsigned len);

/* Room for any size_format() result. */
#define SIZE_FORMAT_LEN 24

#endif
