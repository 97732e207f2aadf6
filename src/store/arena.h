/*
 * arena.h - the shared-memory arena: one memfd (or hugetlbfs memfd) of a fixed size, with all
 * of its memory reserved at start so that clients never take SIGBUS from an overcommitted
 * /dev/shm, mapped once by the daemon and once by each client (the fd goes by SCM_RIGHTS).
 */
#ifndef FERRY_ARENA_H
#define FERRY_ARENA_H

#include <stdint.h>

struct arena {
    int fd;
    uint8_t *base;
    uint64_t size;
    int hugepages;
};

/* Creates, reserves and maps an arena of size bytes (rounded up to the page size in use).
 * Refuses, with the figures in ferry_errmsg(), when the machine cannot back it:
 * FERRY_ENOSPACE when the memory (or huge pages) is not available, FERRY_EINVAL for a bad
 * size, FERRY_ESYS for other failures. */
int arena_open(struct arena *a, uint64_t size, int hugepages);
void arena_close(struct arena *a);

#endif
