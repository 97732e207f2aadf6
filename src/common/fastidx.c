/* fastidx.c - the shared index of sealed, resident objects and the clients' slots (the
 * protocol is in fastidx.h). Every access to the region goes through GCC's __atomic builtins:
 * other processes read and write it at the same time. */
#include "common/fastidx.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

enum { ENTRY_EMPTY = 0, ENTRY_USED = 1, ENTRY_DEAD = 2 };

#define ID_WORDS (FERRY_ID_SIZE / 4)

struct entry {
    uint32_t seq;
    uint32_t state;
    uint32_t id[ID_WORDS];
    uint32_t touched; /* set by a claim, taken by the daemon (fastidx_take_touched) */
    uint64_t offset, data_size, metadata_size, pad1;
};
_Static_assert(sizeof(struct entry) == 64, "an entry is one cache line");
_Static_assert(FERRY_ID_SIZE % 4 == 0, "ids are copied in 4-byte words");

struct block {
    uint64_t gets; /* counted by the client */
    uint32_t hint; /* where its next claim starts looking */
    uint8_t pad[52];
    uint64_t slots[];
};
_Static_assert(sizeof(struct block) == 64, "a block's header is one cache line");

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

static uint64_t id_hash(const ferry_id *id)
{
    uint64_t h;

    memcpy(&h, id->bytes, sizeof(h));
    return h;
}

static uint64_t slot_value(uint32_t index, uint32_t seq)
{
    return ((uint64_t)index + 1) << 32 | seq;
}

uint64_t fastidx_region_size(uint64_t capacity)
{
    uint64_t want = 2 * (capacity / FASTIDX_BYTES_PER_ENTRY), n = FASTIDX_MIN_ENTRIES;

    while (n < want && n < (1u << 30))
        n <<= 1;
    return sizeof(struct fastidx_hdr) + n * sizeof(struct entry) +
           (uint64_t)FASTIDX_BLOCKS * (sizeof(struct block) + FASTIDX_SLOTS * sizeof(uint64_t));
}

static struct entry *entries(uint8_t *region, uint64_t off)
{
    return (struct entry *)(void *)(region + off);
}

static struct block *block_at(uint8_t *region, uint64_t off, uint64_t size, uint32_t b)
{
    return (struct block *)(void *)(region + off + (uint64_t)b * size);
}

int fastidx_init(struct fastidx *fi, uint8_t *region, uint64_t region_size, uint64_t capacity)
{
    struct fastidx_hdr h = {.magic = FASTIDX_MAGIC,
                            .version = FASTIDX_VERSION,
                            .nblocks = FASTIDX_BLOCKS,
                            .nslots = FASTIDX_SLOTS,
                            .entries_off = sizeof(struct fastidx_hdr),
                            .block_size = sizeof(struct block) + FASTIDX_SLOTS * sizeof(uint64_t)};
    uint64_t rest = fastidx_region_size(capacity) - sizeof(h) - FASTIDX_BLOCKS * h.block_size;

    h.nentries = (uint32_t)(rest / sizeof(struct entry));
    h.blocks_off = h.entries_off + (uint64_t)h.nentries * sizeof(struct entry);
    memcpy(region, &h, sizeof(h));
    *fi = (struct fastidx){.region = region,
                           .region_size = region_size,
                           .nentries = h.nentries,
                           .states = calloc(h.nentries, 1),
                           .seqs = calloc(h.nentries, sizeof(uint32_t))};
    if (!fi->states || !fi->seqs) {
        fastidx_free(fi);
        return err_set(FERRY_ENOMEM, "the shared index's bookkeeping (%u entries)", h.nentries);
    }
    return 0;
}

void fastidx_free(struct fastidx *fi)
{
    free(fi->states);
    free(fi->seqs);
    fi->states = NULL;
    fi->seqs = NULL;
}

static struct entry *fi_entry(const struct fastidx *fi, uint32_t i)
{
    return &entries(fi->region, sizeof(struct fastidx_hdr))[i];
}

/* The writer's side of the seqlock: odd while the fields change. The daemon's own copy of
 * seq is the truth (a client may have written the region's). */
static void write_begin(struct fastidx *fi, uint32_t i)
{
    __atomic_store_n(&fi_entry(fi, i)->seq, ++fi->seqs[i], __ATOMIC_SEQ_CST);
}

static void write_end(struct fastidx *fi, uint32_t i, uint32_t state)
{
    STORE(&fi_entry(fi, i)->state, state);
    fi->states[i] = (uint8_t)state;
    __atomic_store_n(&fi_entry(fi, i)->seq, ++fi->seqs[i], __ATOMIC_RELEASE);
}

int fastidx_publish(struct fastidx *fi, const ferry_id *id, uint64_t offset, uint64_t data_size,
                    uint64_t metadata_size, uint32_t *index)
{
    uint32_t mask = fi->nentries - 1, i = (uint32_t)id_hash(id) & mask, words[ID_WORDS];
    struct entry *e;

    if ((uint64_t)(fi->used + fi->dead + 1) * 100 >
        (uint64_t)fi->nentries * FASTIDX_MAX_LOAD_PERCENT)
        return err_set(FERRY_ENOSPACE, "the shared index is full");
    while (fi->states[i] == ENTRY_USED)
        i = (i + 1) & mask;
    e = fi_entry(fi, i);
    if (fi->states[i] == ENTRY_DEAD)
        fi->dead--;
    memcpy(words, id->bytes, sizeof(words));
    write_begin(fi, i);
    STORE(&e->touched, 0u);
    for (int w = 0; w < ID_WORDS; w++)
        STORE(&e->id[w], words[w]);
    STORE(&e->offset, offset);
    STORE(&e->data_size, data_size);
    STORE(&e->metadata_size, metadata_size);
    write_end(fi, i, ENTRY_USED);
    fi->used++;
    *index = i;
    return 0;
}

/* Dead entries just before an empty one are empty too: no probe needs to pass them. */
static void trim_dead(struct fastidx *fi, uint32_t i)
{
    uint32_t mask = fi->nentries - 1;

    while (fi->states[(i + 1) & mask] == ENTRY_EMPTY && fi->states[i] == ENTRY_DEAD) {
        write_begin(fi, i);
        write_end(fi, i, ENTRY_EMPTY);
        fi->dead--;
        i = (i - 1) & mask;
    }
}

uint32_t fastidx_held(const struct fastidx *fi, uint32_t index, uint32_t seq)
{
    const struct fastidx_hdr *h = (const struct fastidx_hdr *)(const void *)fi->region;
    uint64_t want = slot_value(index, seq);
    uint32_t n = 0;

    for (uint32_t b = 0; b < FASTIDX_BLOCKS; b++) {
        struct block *k = block_at(fi->region, h->blocks_off, h->block_size, b);
        for (uint32_t s = 0; s < FASTIDX_SLOTS; s++)
            n += __atomic_load_n(&k->slots[s], __ATOMIC_SEQ_CST) == want;
    }
    return n;
}

uint32_t fastidx_unpublish(struct fastidx *fi, uint32_t index, uint32_t *seq)
{
    *seq = fi->seqs[index];
    write_begin(fi, index); /* sequentially consistent: before the scan below in every order */
    write_end(fi, index, ENTRY_DEAD);
    fi->used--;
    fi->dead++;
    trim_dead(fi, index);
    /* The slots' loads are sequentially consistent, as write_begin's store: in the single
     * order of such operations each comes after it (a standalone fence would do the same,
     * but ThreadSanitizer checks no fences). */
    return fastidx_held(fi, index, *seq);
}

int fastidx_take_touched(struct fastidx *fi, uint32_t index)
{
    struct entry *e = fi_entry(fi, index);

    return LOAD(&e->touched) && __atomic_exchange_n(&e->touched, 0u, __ATOMIC_RELAXED);
}

uint32_t fastidx_holders(const struct fastidx *fi, uint32_t index)
{
    return fastidx_held(fi, index, fi->seqs[index]);
}

void fastidx_block_clear(struct fastidx *fi, uint32_t b)
{
    const struct fastidx_hdr *h = (const struct fastidx_hdr *)(const void *)fi->region;
    struct block *k = block_at(fi->region, h->blocks_off, h->block_size, b);

    for (uint32_t s = 0; s < FASTIDX_SLOTS; s++)
        __atomic_store_n(&k->slots[s], 0, __ATOMIC_RELEASE);
    STORE(&k->hint, 0u);
}

uint64_t fastidx_slots_used(const struct fastidx *fi)
{
    const struct fastidx_hdr *h = (const struct fastidx_hdr *)(const void *)fi->region;
    uint64_t n = 0;

    for (uint32_t b = 0; b < FASTIDX_BLOCKS; b++) {
        struct block *k = block_at(fi->region, h->blocks_off, h->block_size, b);
        for (uint32_t s = 0; s < FASTIDX_SLOTS; s++)
            n += LOAD(&k->slots[s]) != 0;
    }
    return n;
}

uint64_t fastidx_gets(const struct fastidx *fi)
{
    const struct fastidx_hdr *h = (const struct fastidx_hdr *)(const void *)fi->region;
    uint64_t n = 0;

    for (uint32_t b = 0; b < FASTIDX_BLOCKS; b++)
        n += LOAD(&block_at(fi->region, h->blocks_off, h->block_size, b)->gets);
    return n;
}

/* ---- the clients' side ---- */

int fastidx_view_open(struct fastidx_view *v, uint8_t *region, uint64_t size)
{
    struct fastidx_hdr h;

    if (size < sizeof(h))
        return err_set(FERRY_EPROTO, "shared index of %llu bytes", (unsigned long long)size);
    memcpy(&h, region, sizeof(h));
    if (h.magic != FASTIDX_MAGIC || h.version != FASTIDX_VERSION || !h.nentries ||
        (h.nentries & (h.nentries - 1)) || h.nslots == 0 || h.nslots > 4096 ||
        h.block_size != sizeof(struct block) + (uint64_t)h.nslots * sizeof(uint64_t) ||
        h.entries_off != sizeof(h) ||
        h.blocks_off != h.entries_off + (uint64_t)h.nentries * sizeof(struct entry) ||
        h.blocks_off + (uint64_t)h.nblocks * h.block_size > size)
        return err_set(FERRY_EPROTO, "the shared index's header is not one of ours");
    *v = (struct fastidx_view){.region = region,
                               .mask = h.nentries - 1,
                               .nblocks = h.nblocks,
                               .nslots = h.nslots,
                               .entries_off = h.entries_off,
                               .blocks_off = h.blocks_off,
                               .block_size = h.block_size};
    return 0;
}

/* A consistent copy of entry e into out (1), or 0 while it is being written. */
static int entry_read(struct entry *e, uint32_t *state, uint32_t id[ID_WORDS],
                      struct fastidx_hit *out)
{
    uint32_t s1 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE), s2;

    if (s1 & 1)
        return 0;
    /* Acquire loads: none of them moves after the second read of seq (the seqlock's check). */
    *state = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
    for (int w = 0; w < ID_WORDS; w++)
        id[w] = __atomic_load_n(&e->id[w], __ATOMIC_ACQUIRE);
    out->offset = __atomic_load_n(&e->offset, __ATOMIC_ACQUIRE);
    out->data_size = __atomic_load_n(&e->data_size, __ATOMIC_ACQUIRE);
    out->metadata_size = __atomic_load_n(&e->metadata_size, __ATOMIC_ACQUIRE);
    s2 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    out->seq = s1;
    return s1 == s2;
}

int fastidx_find(const struct fastidx_view *v, const ferry_id *id, struct fastidx_hit *out)
{
    struct entry *all = entries(v->region, v->entries_off);
    uint32_t i = (uint32_t)id_hash(id) & v->mask, words[ID_WORDS], state;

    memcpy(words, id->bytes, sizeof(words));
    for (uint32_t probes = 0; probes <= v->mask; probes++, i = (i + 1) & v->mask) {
        uint32_t got[ID_WORDS];
        if (!entry_read(&all[i], &state, got, out) || state == ENTRY_EMPTY)
            return 0;
        if (state == ENTRY_USED && memcmp(got, words, sizeof(words)) == 0) {
            out->index = i;
            return 1;
        }
    }
    return 0;
}

int fastidx_claim(const struct fastidx_view *v, uint32_t b, const struct fastidx_hit *hit)
{
    struct block *k = block_at(v->region, v->blocks_off, v->block_size, b);
    struct entry *e = &entries(v->region, v->entries_off)[hit->index];
    uint64_t value = slot_value(hit->index, hit->seq);
    uint32_t start = LOAD(&k->hint) % v->nslots;

    for (uint32_t n = 0; n < v->nslots; n++) {
        uint32_t s = (start + n) % v->nslots;
        uint64_t free_slot = 0;
        if (!__atomic_compare_exchange_n(&k->slots[s], &free_slot, value, 0, __ATOMIC_SEQ_CST,
                                         __ATOMIC_RELAXED))
            continue;
        /* Published, then looked at again: unchanged, the daemon sees the slot before it
         * reuses the memory (fastidx.h). */
        if (__atomic_load_n(&e->seq, __ATOMIC_SEQ_CST) != hit->seq) {
            __atomic_store_n(&k->slots[s], 0, __ATOMIC_RELEASE);
            return -1;
        }
        STORE(&k->hint, s + 1);
        if (!LOAD(&e->touched))
            STORE(&e->touched, 1u);
        return (int)s;
    }
    return -1;
}

void fastidx_count_gets(const struct fastidx_view *v, uint32_t b, uint64_t n)
{
    __atomic_fetch_add(&block_at(v->region, v->blocks_off, v->block_size, b)->gets, n,
                       __ATOMIC_RELAXED);
}

void fastidx_release(const struct fastidx_view *v, uint32_t b, int s)
{
    struct block *k = block_at(v->region, v->blocks_off, v->block_size, b);

    __atomic_store_n(&k->slots[s], 0, __ATOMIC_RELEASE);
}
