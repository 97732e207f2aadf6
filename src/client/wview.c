/* wview.c - the writable view of the arena (rules in wview.h). */
#include <stdlib.h>
#include <sys/mman.h>

#include "client/wview.h"
#include "common/err.h"

int wview_map(struct wview *v, int fd, uint64_t size, uint64_t page)
{
    *v = (struct wview){.size = size, .page = page};
    /* MAP_NORESERVE as the read-only view (client.c says why). */
    v->base = mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (v->base == MAP_FAILED) {
        v->base = NULL;
        return err_sys("mmap(the arena's writable view)");
    }
    return 0;
}

static uint64_t page_down(const struct wview *v, uint64_t off)
{
    return off / v->page * v->page;
}

static uint64_t page_up(const struct wview *v, uint64_t end)
{
    uint64_t up = (end + v->page - 1) / v->page * v->page;
    return up < v->size ? up : v->size;
}

static int protect(struct wview *v, uint64_t from, uint64_t to, int prot)
{
    if (from >= to)
        return 0;
    if (mprotect(v->base + from, to - from, prot) < 0)
        return err_sys(prot & PROT_WRITE ? "mprotect(an object's pages, writable)"
                                         : "mprotect(an object's pages, read-only)");
    return 0;
}

int wview_open(struct wview *v, uint64_t off, uint64_t len)
{
    struct wrange *grown;
    int rc;

    if (!len)
        return 0;
    if (v->nopen == v->capopen) {
        size_t cap = v->capopen ? 2 * v->capopen : 8;
        if (!(grown = realloc(v->open, cap * sizeof(*grown))))
            return err_set(FERRY_ENOMEM, "the writable view's record of %zu ranges", cap);
        v->open = grown;
        v->capopen = cap;
    }
    if ((rc = protect(v, page_down(v, off), page_up(v, off + len), PROT_READ | PROT_WRITE)) < 0)
        return rc;
    v->open[v->nopen++] = (struct wrange){off, len};
    return 0;
}

/* 1 when an open range touches the page that starts at p. */
static int page_open(const struct wview *v, uint64_t p)
{
    for (size_t i = 0; i < v->nopen; i++)
        if (v->open[i].off < p + v->page && v->open[i].off + v->open[i].len > p)
            return 1;
    return 0;
}

void wview_close(struct wview *v, uint64_t off)
{
    uint64_t from, to;
    size_t i;

    for (i = 0; i < v->nopen && v->open[i].off != off; i++)
        ;
    if (i == v->nopen)
        return;
    from = page_down(v, off);
    to = page_up(v, off + v->open[i].len);
    v->open[i] = v->open[--v->nopen];
    /* Pages inside the range belong to it alone (objects never overlap): only the first and
     * the last may be shared with another open range. */
    if (page_open(v, from))
        from += v->page;
    if (to > from && page_open(v, to - v->page))
        to -= v->page;
    /* Cannot fail but for a kernel out of memory to split the mapping: the pages then stay
     * writable through this view only, which only this client reaches. */
    (void)protect(v, from, to, PROT_READ);
}

void wview_unmap(struct wview *v)
{
    if (v->base)
        munmap(v->base, v->size);
    free(v->open);
    *v = (struct wview){0};
}
