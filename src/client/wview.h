/*
 * wview.h - the writable view of the arena: how a client writes only what it may.
 *
 * Sealed objects are immutable for every process, and the MMU, not a contract, keeps them so.
 * The view every get returns is read-only (a write through a get's pointer, a const cast, a
 * tensor over a sealed object, faults); this view is read-only too, except the pages of the
 * objects this client created with ferry_create and has not sealed yet. ferry_create's pointer
 * lies here, and its pages turn read-only before the seal is asked (or at the abort), so a
 * pointer kept past the seal can read but no longer write.
 *
 * Protection is by page (the arena's page size: 2 MiB on huge pages), objects are aligned to
 * 64 bytes: an open object's first and last page may hold a neighbour's bytes, writable here
 * only by reaching outside the object's range. A page stays writable while any open range
 * touches it, and turns read-only when the last one closes.
 *
 * What it costs: two protection changes per create, each a page-table walk of the object's
 * pages (on this project's 2-core VM, nested, about 2.5 us per 4 KiB page to make pages
 * writable and 0.7 us to make them read-only again, against 0.3 us to copy a warm page). So
 * libferry's own copies (ferry_put, the staging area, the Python module's puts) do not go
 * through this view but through a third mapping, writable and never handed out (client.h:
 * copy_base); only ferry_create's caller, who gets a pointer, pays for the protection.
 *
 * Not thread-safe: the client's lock covers every call. A process holding the arena's
 * descriptor can still map it writable itself; what another node receives is checked against
 * the root recorded at the seal (docs/design/threat-model.md).
 */
#ifndef FERRY_CLIENT_WVIEW_H
#define FERRY_CLIENT_WVIEW_H

#include <stddef.h>
#include <stdint.h>

struct wrange {
    uint64_t off, len;
};

struct wview {
    uint8_t *base; /* the second mapping; NULL until wview_map */
    uint64_t size;
    uint64_t page;         /* protection's unit: the arena's page size */
    struct wrange *open;   /* the ranges writable now, in no order */
    size_t nopen, capopen; /* at most one per unsealed object of ours */
};

/* Maps the arena of fd (size bytes) a second time, read-only; page is the mapping's page size.
 * FERRY_ESYS (the detail says why) when it cannot be mapped. */
int wview_map(struct wview *v, int fd, uint64_t size, uint64_t page);

/* Makes [off, off+len) writable (len 0: nothing) and records it as open: 0, FERRY_ENOMEM
 * without room to record it, FERRY_ESYS when the pages' protection cannot change. The range
 * must lie in the arena (the caller checked it). */
int wview_open(struct wview *v, uint64_t off, uint64_t len);

/* Closes the open range that starts at off: its pages turn read-only but those another open
 * range touches. A range not open is ignored. */
void wview_close(struct wview *v, uint64_t off);

/* Unmaps the view and forgets every open range. */
void wview_unmap(struct wview *v);

#endif
