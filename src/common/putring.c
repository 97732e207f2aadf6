/* putring.c - a client's ring of puts in the arena (putring.h). */
#include "common/putring.h"

#include <string.h>

#include "common/err.h"

static struct putring_hdr *hdr(const struct putring *r)
{
    return (struct putring_hdr *)r->base;
}

static struct putring_entry *entry(const struct putring *r, uint64_t k)
{
    return (struct putring_entry *)(r->base + r->entries_off +
                                    (k & (r->nentries - 1)) * PUTRING_ENTRY_SIZE);
}

int putring_layout(struct putring *r, uint8_t *base, uint64_t size)
{
    uint32_t n = PUTRING_MIN_ENTRIES;

    if (size < PUTRING_MIN_SIZE)
        return err_set(FERRY_EINVAL, "a ring of %llu bytes: at least %u are needed",
                       (unsigned long long)size, (unsigned)PUTRING_MIN_SIZE);
    /* more entries while the data area keeps two of the largest objects */
    while (n < PUTRING_MAX_ENTRIES && (uint64_t)n * 2 * PUTRING_BYTES_PER_ENTRY <= size &&
           size - PUTRING_HEADER_SIZE - (uint64_t)n * 2 * PUTRING_ENTRY_SIZE >=
               2 * FERRY_SMALL_PUT_MAX)
        n *= 2;
    r->base = base;
    r->nentries = n;
    r->entries_off = PUTRING_HEADER_SIZE;
    r->data_off = r->entries_off + (uint64_t)n * PUTRING_ENTRY_SIZE;
    r->data_size = size - r->data_off;
    return 0;
}

void putring_reset(const struct putring *r)
{
    memset(r->base, 0, PUTRING_HEADER_SIZE);
}

/* Where an object of len bytes goes from *data_tail on: the same place, or the start of the next
 * turn of the area when it would cross the end. */
static uint64_t place(const struct putring *r, uint64_t data_tail, uint64_t len)
{
    uint64_t off = data_tail % r->data_size;

    return off + len > r->data_size ? data_tail + (r->data_size - off) : data_tail;
}

int putring_push(const struct putring *r, uint64_t *tail, uint64_t *data_tail, const ferry_id *id,
                 const void *data, uint64_t data_size, const void *metadata, uint64_t metadata_size)
{
    struct putring_hdr *h = hdr(r);
    uint64_t len = data_size + metadata_size, pos;
    struct putring_entry *e;
    uint8_t *dst;

    if (data_size > FERRY_SMALL_PUT_MAX || metadata_size > FERRY_SMALL_PUT_MAX - data_size)
        return FERRY_ETOOBIG;
    pos = place(r, *data_tail, len);
    if (*tail - atomic_load_explicit(&h->head, memory_order_acquire) >= r->nentries ||
        pos + len - atomic_load_explicit(&h->data_head, memory_order_acquire) > r->data_size)
        return FERRY_EAGAIN;
    dst = r->base + r->data_off + pos % r->data_size;
    if (data_size)
        memcpy(dst, data, data_size);
    if (metadata_size)
        memcpy(dst + data_size, metadata, metadata_size);
    e = entry(r, *tail);
    e->id = *id;
    e->data_size = (uint32_t)data_size;
    e->metadata_size = (uint32_t)metadata_size;
    e->pos = pos;
    *data_tail = pos + len;
    atomic_store_explicit(&h->tail, ++*tail, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&h->sleeping, memory_order_relaxed) != 0;
}

int putring_drained(const struct putring *r, uint64_t tail)
{
    return atomic_load_explicit(&hdr(r)->head, memory_order_acquire) == tail;
}

int64_t putring_pending(const struct putring *r, uint64_t head)
{
    uint64_t tail = atomic_load_explicit(&hdr(r)->tail, memory_order_acquire);

    if (tail - head > r->nentries)
        return err_set(FERRY_EPROTO, "put ring: tail %llu is not within %u entries of head %llu",
                       (unsigned long long)tail, r->nentries, (unsigned long long)head);
    return (int64_t)(tail - head);
}

int putring_take(const struct putring *r, uint64_t head, uint64_t data_head, uint64_t released,
                 struct putring_item *out)
{
    struct putring_entry e;
    uint64_t len, pos;

    memcpy(&e, entry(r, head), sizeof(e)); /* read once: the client may be writing it */
    len = (uint64_t)e.data_size + e.metadata_size;
    if (len > FERRY_SMALL_PUT_MAX)
        return err_set(FERRY_EPROTO, "put ring: entry %llu of %llu bytes exceeds %u",
                       (unsigned long long)head, (unsigned long long)len, FERRY_SMALL_PUT_MAX);
    /* Where the client's push put it: right after the last entry taken. So entries name each
     * byte of the area once per turn of it, and a ring taken whole copies one area at most. */
    pos = place(r, data_head, len);
    if (e.pos != pos)
        return err_set(FERRY_EPROTO, "put ring: entry %llu at %llu, not at %llu where it belongs",
                       (unsigned long long)head, (unsigned long long)e.pos,
                       (unsigned long long)pos);
    if (pos + len - released > r->data_size)
        return err_set(FERRY_EPROTO,
                       "put ring: entry %llu ends %llu bytes past the area given back, of %llu",
                       (unsigned long long)head, (unsigned long long)(pos + len - released),
                       (unsigned long long)r->data_size);
    out->id = e.id;
    out->offset = r->data_off + pos % r->data_size;
    out->data_size = e.data_size;
    out->metadata_size = e.metadata_size;
    out->end = pos + len;
    return 0;
}

void putring_release(const struct putring *r, uint64_t head, uint64_t data_head)
{
    atomic_store_explicit(&hdr(r)->data_head, data_head, memory_order_release);
    atomic_store_explicit(&hdr(r)->head, head, memory_order_release);
}

void putring_want_kick(const struct putring *r)
{
    atomic_store_explicit(&hdr(r)->sleeping, 1, memory_order_relaxed);
}

void putring_fence(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}

int putring_waiting(const struct putring *r, uint64_t head)
{
    return atomic_load_explicit(&hdr(r)->tail, memory_order_relaxed) != head;
}

void putring_awake(const struct putring *r)
{
    if (atomic_load_explicit(&hdr(r)->sleeping, memory_order_relaxed))
        atomic_store_explicit(&hdr(r)->sleeping, 0, memory_order_relaxed);
}
