/*
 * alloc.c - TLSF over offsets of [0, capacity), bookkeeping in the private heap.
 *
 * Sizes are counted in units of ALLOC_ALIGN bytes. A size u maps to a class (fl, sl): sizes
 * below SL_COUNT units each get a class of their own in level 0; above, fl picks the power of
 * two and sl one of SL_COUNT equal slices of it, so a class spans at most 1/SL_COUNT of its
 * smallest member. Each class has a LIFO list of free blocks, and the two bitmaps say which
 * lists are non-empty.
 *
 * Every block, free or allocated, has a descriptor on a list in address order, so that free
 * finds its physical neighbours in O(1). Free physical neighbours never coexist: free merges
 * them at once, so the free blocks are exactly the maximal free runs.
 */
#include "store/alloc.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/err.h"

#define UNIT_SHIFT 6 /* log2(ALLOC_ALIGN) */
#define SL_BITS 5
#define SL_COUNT (1u << SL_BITS)
/* A capacity below 2^64 bytes has fewer than 2^58 units, hence floor(log2(units)) <= 57. */
#define FL_COUNT (64 - UNIT_SHIFT - SL_BITS + 1)

_Static_assert(ALLOC_ALIGN == 1u << UNIT_SHIFT, "UNIT_SHIFT must match ALLOC_ALIGN");

struct alloc_block {
    uint64_t offset; /* in units */
    uint64_t units;
    alloc_block *prev_phys; /* address-order neighbours, NULL at the ends */
    alloc_block *next_phys;
    alloc_block *prev_free; /* class list while free; next_free also links the spare pool */
    alloc_block *next_free;
    bool free;
};

struct alloc {
    uint64_t capacity_units;
    uint64_t used_units;
    uint64_t free_blocks;
    uint64_t fl_bitmap;           /* bit fl: sl_bitmap[fl] != 0 */
    uint32_t sl_bitmap[FL_COUNT]; /* bit sl: heads[fl][sl] != NULL */
    alloc_block *heads[FL_COUNT][SL_COUNT];
    alloc_block *first_phys; /* the block at offset 0 */
    alloc_block *spare;      /* recycled descriptors, linked through next_free */
};

struct size_class {
    unsigned fl;
    unsigned sl;
};

static unsigned log2_floor(uint64_t x)
{
    return 63u - (unsigned)__builtin_clzll(x);
}

/* The class whose range holds u (u > 0). */
static struct size_class class_of(uint64_t u)
{
    if (u < SL_COUNT)
        return (struct size_class){0, (unsigned)u};
    unsigned f = log2_floor(u);
    return (struct size_class){f - SL_BITS + 1, (unsigned)(u >> (f - SL_BITS)) ^ SL_COUNT};
}

/* u rounded up to the lowest size of a class, so that every block in that class holds u. */
static uint64_t round_to_class(uint64_t u)
{
    if (u < SL_COUNT)
        return u;
    return u + (UINT64_C(1) << (log2_floor(u) - SL_BITS)) - 1;
}

static void list_insert(alloc *a, alloc_block *b)
{
    struct size_class c = class_of(b->units);
    alloc_block *head = a->heads[c.fl][c.sl];

    b->prev_free = NULL;
    b->next_free = head;
    if (head)
        head->prev_free = b;
    a->heads[c.fl][c.sl] = b;
    a->sl_bitmap[c.fl] |= 1u << c.sl;
    a->fl_bitmap |= UINT64_C(1) << c.fl;
    b->free = true;
    a->free_blocks++;
}

static void list_remove(alloc *a, alloc_block *b)
{
    struct size_class c = class_of(b->units);

    if (b->prev_free)
        b->prev_free->next_free = b->next_free;
    else
        a->heads[c.fl][c.sl] = b->next_free;
    if (b->next_free)
        b->next_free->prev_free = b->prev_free;
    if (!a->heads[c.fl][c.sl]) {
        a->sl_bitmap[c.fl] &= ~(1u << c.sl);
        if (!a->sl_bitmap[c.fl])
            a->fl_bitmap &= ~(UINT64_C(1) << c.fl);
    }
    b->free = false;
    a->free_blocks--;
}

static alloc_block *descriptor_get(alloc *a)
{
    alloc_block *b = a->spare;

    if (b) {
        a->spare = b->next_free;
        return b;
    }
    return malloc(sizeof(*b));
}

static void descriptor_put(alloc *a, alloc_block *b)
{
    b->next_free = a->spare;
    a->spare = b;
}

/* Head of the first non-empty list of class c or above, NULL if none. */
static alloc_block *find_from(const alloc *a, struct size_class c)
{
    if (c.fl >= FL_COUNT)
        return NULL;
    uint32_t sl_map = a->sl_bitmap[c.fl] & (~0u << c.sl);
    if (!sl_map) {
        uint64_t fl_map = a->fl_bitmap & (~UINT64_C(0) << (c.fl + 1));
        if (!fl_map)
            return NULL;
        c.fl = (unsigned)__builtin_ctzll(fl_map);
        sl_map = a->sl_bitmap[c.fl];
    }
    return a->heads[c.fl][(unsigned)__builtin_ctz(sl_map)];
}

/* The first unit of b at a multiple of au units. */
static uint64_t aligned_start(const alloc_block *b, uint64_t au)
{
    return (b->offset + au - 1) / au * au;
}

/* A free block holding u units from a multiple of au units on. Good fit first: any head of a
 * list from the rounded class of u + au - 1 up fits wherever it lies. When those are all
 * empty, the blocks that could still fit lie in the classes of u to u + au - 1, and those
 * lists are searched (for au 1, u's own class, whole: ENOSPACE means that no free block holds
 * u; for au > 1, ALLOC_ALIGNED_SCAN_MAX blocks at most). */
static alloc_block *find_free(const alloc *a, uint64_t u, uint64_t au)
{
    alloc_block *b = find_from(a, class_of(round_to_class(u + au - 1)));
    struct size_class c = class_of(u), last = class_of(u + au - 1);
    unsigned scanned = 0;

    if (b)
        return b;
    for (;;) { /* classes in size order: (fl, sl) in lexical order */
        for (b = a->heads[c.fl][c.sl]; b; b = b->next_free) {
            if (aligned_start(b, au) + u <= b->offset + b->units)
                return b;
            if (au > 1 && ++scanned == ALLOC_ALIGNED_SCAN_MAX)
                return NULL; /* bounded: the store evicts, and asks again */
        }
        if (c.fl == last.fl && c.sl == last.sl)
            return NULL;
        if (++c.sl == SL_COUNT) {
            c.sl = 0;
            c.fl++;
        }
    }
}

int alloc_init(alloc **out, uint64_t capacity)
{
    uint64_t units = capacity >> UNIT_SHIFT;

    if (units == 0)
        return err_set(FERRY_EINVAL, "arena capacity %llu below %u bytes",
                       (unsigned long long)capacity, ALLOC_ALIGN);
    alloc *a = calloc(1, sizeof(*a));
    if (!a)
        return err_set(FERRY_ENOMEM, "no memory for the allocator");
    alloc_block *b = calloc(1, sizeof(*b));
    if (!b)
        goto free_alloc;
    b->units = units;
    a->capacity_units = units;
    a->first_phys = b;
    list_insert(a, b);
    *out = a;
    return 0;

free_alloc:
    free(a);
    return err_set(FERRY_ENOMEM, "no memory for the allocator");
}

/* Frees every descriptor, the allocated ones included: their handles die with a. */
void alloc_destroy(alloc *a)
{
    if (!a)
        return;
    for (alloc_block *b = a->first_phys, *next; b; b = next) {
        next = b->next_phys;
        free(b);
    }
    for (alloc_block *b = a->spare, *next; b; b = next) {
        next = b->next_free;
        free(b);
    }
    free(a);
}

/* Cuts b down to u units and returns the rest to the free lists; rest is a spare descriptor. */
static void split(alloc *a, alloc_block *b, uint64_t u, alloc_block *rest)
{
    rest->offset = b->offset + u;
    rest->units = b->units - u;
    rest->prev_phys = b;
    rest->next_phys = b->next_phys;
    if (b->next_phys)
        b->next_phys->prev_phys = rest;
    b->next_phys = rest;
    b->units = u;
    list_insert(a, rest);
}

int alloc_alloc(alloc *a, uint64_t size, alloc_block **out)
{
    return alloc_alloc_aligned(a, size, ALLOC_ALIGN, out);
}

/* Takes [start, start + u) of b, a free block, where start is past b's first unit. */
static int take_inside(alloc *a, alloc_block *b, uint64_t start, uint64_t u)
{
    list_remove(a, b);
    a->used_units += b->units;
    if (alloc_trim(a, b, (start - b->offset) << UNIT_SHIFT, u << UNIT_SHIFT) < 0) {
        a->used_units -= b->units;
        list_insert(a, b);
        return FERRY_ENOMEM;
    }
    return 0;
}

int alloc_alloc_aligned(alloc *a, uint64_t size, uint64_t align, alloc_block **out)
{
    if (size == 0 || size > a->capacity_units << UNIT_SHIFT || align < ALLOC_ALIGN ||
        (align & (align - 1)) || align > a->capacity_units << UNIT_SHIFT)
        return err_set(FERRY_EINVAL, "allocation of %llu bytes aligned to %llu in an arena of %llu",
                       (unsigned long long)size, (unsigned long long)align,
                       (unsigned long long)(a->capacity_units << UNIT_SHIFT));
    uint64_t u = (size + ALLOC_ALIGN - 1) >> UNIT_SHIFT, au = align >> UNIT_SHIFT, start;
    alloc_block *b = find_free(a, u, au);
    if (!b)
        return err_set(FERRY_ENOSPACE,
                       "no free range of %llu bytes: %llu of %llu bytes used, %llu free ranges",
                       (unsigned long long)(u << UNIT_SHIFT),
                       (unsigned long long)(a->used_units << UNIT_SHIFT),
                       (unsigned long long)(a->capacity_units << UNIT_SHIFT),
                       (unsigned long long)a->free_blocks);
    if ((start = aligned_start(b, au)) != b->offset) {
        if (take_inside(a, b, start, u) < 0)
            return err_set(FERRY_ENOMEM, "no memory for a block descriptor");
        *out = b;
        return 0;
    }
    /* Take the descriptor for the remainder before changing anything, so ENOMEM leaves the
     * allocator as it was. */
    alloc_block *rest = NULL;
    if (b->units > u) {
        rest = descriptor_get(a);
        if (!rest)
            return err_set(FERRY_ENOMEM, "no memory for a block descriptor");
    }
    list_remove(a, b);
    if (rest)
        split(a, b, u, rest);
    a->used_units += u;
    *out = b;
    return 0;
}

/* Merges next, a physical successor of b, into b and recycles its descriptor. */
static void absorb_next(alloc *a, alloc_block *b, alloc_block *next)
{
    b->units += next->units;
    b->next_phys = next->next_phys;
    if (next->next_phys)
        next->next_phys->prev_phys = b;
    descriptor_put(a, next);
}

void alloc_free(alloc *a, alloc_block *b)
{
    assert(!b->free);
    a->used_units -= b->units;
    alloc_block *prev = b->prev_phys;
    if (prev && prev->free) {
        list_remove(a, prev);
        absorb_next(a, prev, b);
        b = prev;
    }
    alloc_block *next = b->next_phys;
    if (next && next->free) {
        list_remove(a, next);
        absorb_next(a, b, next);
    }
    list_insert(a, b);
}

/* Links d, a spare descriptor, in as an allocated block of b's first (head) or last units. */
static void carve(alloc *a, alloc_block *b, alloc_block *d, uint64_t units, bool head)
{
    d->units = units;
    d->free = false;
    b->units -= units;
    if (head) {
        d->offset = b->offset;
        b->offset += units;
        d->prev_phys = b->prev_phys;
        d->next_phys = b;
        if (b->prev_phys)
            b->prev_phys->next_phys = d;
        else
            a->first_phys = d;
        b->prev_phys = d;
    } else {
        d->offset = b->offset + b->units;
        d->prev_phys = b;
        d->next_phys = b->next_phys;
        if (b->next_phys)
            b->next_phys->prev_phys = d;
        b->next_phys = d;
    }
}

int alloc_trim(alloc *a, alloc_block *b, uint64_t from, uint64_t size)
{
    uint64_t hu = from >> UNIT_SHIFT, ku = (size + ALLOC_ALIGN - 1) >> UNIT_SHIFT;
    alloc_block *head = NULL, *tail = NULL;

    assert(!b->free && from % ALLOC_ALIGN == 0 && ku && hu + ku <= b->units);
    uint64_t tu = b->units - hu - ku;
    if ((hu && !(head = descriptor_get(a))) || (tu && !(tail = descriptor_get(a)))) {
        if (head)
            descriptor_put(a, head);
        return err_set(FERRY_ENOMEM, "no memory for a block descriptor");
    }
    /* Carved as allocated blocks, then freed: alloc_free counts and coalesces them. */
    if (head) {
        carve(a, b, head, hu, true);
        alloc_free(a, head);
    }
    if (tail) {
        carve(a, b, tail, tu, false);
        alloc_free(a, tail);
    }
    return 0;
}

uint64_t alloc_block_offset(const alloc_block *b)
{
    return b->offset << UNIT_SHIFT;
}

uint64_t alloc_block_size(const alloc_block *b)
{
    return b->units << UNIT_SHIFT;
}

uint64_t alloc_capacity(const alloc *a)
{
    return a->capacity_units << UNIT_SHIFT;
}

uint64_t alloc_used(const alloc *a)
{
    return a->used_units << UNIT_SHIFT;
}

/* Scans the list of the highest non-empty class: O(blocks in that one class). */
uint64_t alloc_largest_free(const alloc *a)
{
    if (!a->fl_bitmap)
        return 0;
    unsigned fl = log2_floor(a->fl_bitmap);
    unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]);
    uint64_t largest = 0;
    for (const alloc_block *b = a->heads[fl][sl]; b; b = b->next_free) {
        if (b->units > largest)
            largest = b->units;
    }
    return largest << UNIT_SHIFT;
}

uint64_t alloc_free_blocks(const alloc *a)
{
    return a->free_blocks;
}
