/* size.h - byte counts as people write them: 4096, 64K, 512M, 4G, 1T (powers of 1024). */
#ifndef FERRY_SIZE_H
#define FERRY_SIZE_H

#include <stdint.h>

/* FERRY_EINVAL (with a reason) for anything but digits and one optional suffix, or overflow. */
int size_parse(const char *text, uint64_t *out);

#endif
