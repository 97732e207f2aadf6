/*
 * arena.h - the shared-memory arena: one memfd (or hugetlbfs memfd) of a fixed size, with all
 * of its memory reserved at start so that clients never take SIGBUS from an overcommitted
 * /dev/shm, mapped once by the daemon and once by each client (the fd goes by SCM_RIGHTS). Its
 * size is sealed (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): a client cannot truncate it.
 *
 * No seal short of F_SEAL_WRITE (which clients, who write their objects in place, cannot live
 * with) stops a client from punching a hole in it (fallocate FALLOC_FL_PUNCH_HOLE): the pages go
 * back to the system, and a later touch faults them in again, zeroed. With huge pages, that
 * fault has nothing to take once another process took the freed pages, and the toucher gets
 * SIGBUS. arena_catch_faults makes the daemon survive it (see there).
 */
#ifndef FERRY_ARENA_H
#define FERRY_ARENA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct arena {
    int fd;
    uint8_t *base;
    uint64_t size;
    int hugepages;
    pthread_t prefaulter;
    int prefaulting;          /* the prefaulter thread was started and is not joined yet */
    atomic_int stop_prefault; /* set by arena_close, read by the prefaulter */
};

/* Creates, reserves and maps an arena of size bytes (rounded up to the page size in use).
 * Refuses, with the figures in ferry_errmsg(), when the machine cannot back it:
 * FERRY_ENOSPACE when the memory (or huge pages) is not available, FERRY_EINVAL for a bad
 * size, FERRY_ESYS for other failures. */
int arena_open(struct arena *a, uint64_t size, int hugepages);
/* The size of a's pages: what page protection (a client's writable view) goes by. */
uint64_t arena_page(const struct arena *a);
/* Stops the prefaulter (if any), unmaps and closes. */
void arena_close(struct arena *a);

/* Installs a SIGBUS handler (process-wide, for this one arena) that, for a fault inside a's
 * mapping, maps private anonymous memory over the faulting page (a huge page with
 * --hugepages) in the daemon's own view, so that the thread carries on, and counts it
 * (arena_faults). From then on the daemon's view of that page is its own: the objects there are
 * damaged (as any client can damage any object by writing the arena). A SIGBUS elsewhere, or
 * sent by kill, keeps the default action. FERRY_ESYS if sigaction fails. */
int arena_catch_faults(struct arena *a);
/* Pages replaced so far (any thread may have faulted). */
uint64_t arena_faults(void);

/* Maps every page of the daemon's view of the arena, in the background: fallocate reserves
 * the memory but leaves each page to be zeroed and mapped at its first touch, which costs the
 * loop a page fault per 4 KiB (several microseconds each on virtual machines) the first time a
 * transfer or a batch copy lands there. Signals must be blocked in the caller (the thread
 * inherits its mask). FERRY_ESYS if the thread cannot start. */
int arena_prefault_start(struct arena *a);

#endif
