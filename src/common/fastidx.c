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
    uint64_t gets;  /* counted by the client */
    uint64_t owner; /* the daemon's: its client's generation (fastidx_block_take), 0 free */
    uint32_t hint;  /* where its client's next claim starts looking */
    uint8_t pad[44];
    uint64_t slots[];
};
_Static_assert(sizeof(struct block) == 64, "a block's header is one cache line");
_Static_assert(FASTIDX_BLOCK_SIZE == sizeof(struct block) + FASTIDX_SLOTS * sizeof(uint64_t),
               "FASTIDX_BLOCK_SIZE is a block's size");

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
           (uint64_t)FASTIDX_BLOCKS * FASTIDX_BLOCK_SIZE;
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
                            .block_size = FASTIDX_BLOCK_SIZE};
    uint64_t rest = fastidx_region_size(capacity) - sizeof(h) - FASTIDX_BLOCKS * h.block_size;

    h.nentries = (uint32_t)(rest / sizeof(struct entry));
    h.blocks_off = h.entries_off + (uint64_t)h.nentries * sizeof(struct entry);
    h.alive = 1;
    memcpy(region, &h, sizeof(h));
    *fi = (struct fastidx){.region = region,
                           .region_size = region_size,
                           .nentries = h.nentries,
                           .blocks_off = h.blocks_off,
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

/* Block b, where the daemon laid it out (never where the region's header, which clients can
 * write, says). */
static struct block *fi_block(const struct fastidx *fi, uint32_t b)
{
    return block_at(fi->region, fi->blocks_off, FASTIDX_BLOCK_SIZE, b);
}

/* The writer's side of the seqlock: odd while the fields change. The daemon's own copy of
 * seq is the truth (a client may have written the region's). */
static void write_begin(struct fastidx *fi, uint32_t i)
{
    __atomic_store_n(&fi_entry(fi, i)->seq, ++fi->seqs[i], __ATOMIC_SEQ_CST);
}

static void write_end(struct fastidx *fi, uint32_t i, uint32_t state)
{
    __atomic_store_n(&fi_entry(fi, i)->state, state, __ATOMIC_RELEASE);
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
    /* Release stores: none of them becomes visible before the odd seq above (the readers'
     * loads are acquire), so a copy taken between two equal even seqs is never half new. */
    __atomic_store_n(&e->touched, 0u, __ATOMIC_RELEASE);
    for (int w = 0; w < ID_WORDS; w++)
        __atomic_store_n(&e->id[w], words[w], __ATOMIC_RELEASE);
    __atomic_store_n(&e->offset, offset, __ATOMIC_RELEASE);
    __atomic_store_n(&e->data_size, data_size, __ATOMIC_RELEASE);
    __atomic_store_n(&e->metadata_size, metadata_size, __ATOMIC_RELEASE);
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

/* Whether block b is a client's now (only those are scanned: a free one is cleared when taken). */
static int taken(const struct fastidx *fi, uint32_t b)
{
    return fi->taken[b / 64] >> (b % 64) & 1;
}

uint32_t fastidx_held(const struct fastidx *fi, uint32_t index, uint32_t seq)
{
    uint64_t want = slot_value(index, seq);
    uint32_t n = 0;

    for (uint32_t b = 0; b < FASTIDX_BLOCKS; b++) {
        struct block *k = fi_block(fi, b);
        for (uint32_t s = 0; taken(fi, b) && s < FASTIDX_SLOTS; s++)
            n += __atomic_load_n(&k->slots[s], __ATOMIC_SEQ_CST) == want;
    }
    return n;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

size_t fastidx_snapshot(const struct fastidx *fi, uint64_t *out)
{
    size_t n = 0;

    for (uint32_t b = 0; b < FASTIDX_BLOCKS; b++) {
        struct block *k = fi_block(fi, b);
        for (uint32_t s = 0; taken(fi, b) && s < FASTIDX_SLOTS; s++) {
            uint64_t v = __atomic_load_n(&k->slots[s], __ATOMIC_SEQ_CST);
            if (v)
                out[n++] = v;
        }
    }
    qsort(out, n, sizeof(*out), cmp_u64);
    return n;
}

uint32_t fastidx_snapshot_count(const uint64_t *snap, size_t n, uint32_t index, uint32_t seq)
{
    uint64_t want = slot_value(index, seq);
    size_t lo = 0, hi = n;
    uint32_t count = 0;

    while (lo < hi) { /* the first not below want */
        size_t mid = lo + (hi - lo) / 2;
        if (snap[mid] < want)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo < n && snap[lo++] == want)
        count++;
    return count;
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

/* Empties block b and names its owner (0: none), so that a client that still writes there
 * sees that the block is no longer its own. */
static void block_reset(struct fastidx *fi, uint32_t b, uint64_t owner)
{
    struct block *k = fi_block(fi, b);

    __atomic_store_n(&k->owner, owner, __ATOMIC_SEQ_CST);
    for (uint32_t s = 0; s < FASTIDX_SLOTS; s++)
        __atomic_store_n(&k->slots[s], 0, __ATOMIC_RELEASE);
    STORE(&k->hint, 0u);
}

uint32_t fastidx_block_take(struct fastidx *fi, uint64_t *owner)
{
    for (uint32_t w = 0; w < FASTIDX_BLOCKS / 64; w++) {
        uint64_t free_bits = ~fi->taken[w];
        if (free_bits) {
            uint32_t b = w * 64 + (uint32_t)__builtin_ctzll(free_bits);
            *owner = ++fi->generation;
            block_reset(fi, b, *owner); /* anything written there while free goes */
            fi->taken[w] |= 1ull << (b % 64);
            return b;
        }
    }
    return FASTIDX_NO_BLOCK;
}

void fastidx_block_give(struct fastidx *fi, uint32_t b)
{
    if (b >= FASTIDX_BLOCKS || !taken(fi, b))
        return;
    block_reset(fi, b, 0);
    fi->taken[b / 64] &= ~(1ull << (b % 64));
}

void fastidx_close(struct fastidx *fi)
{
    struct fastidx_hdr *h = (struct fastidx_hdr *)(void *)fi->region;

    __atomic_store_n(&h->alive, 0u, __ATOMIC_SEQ_CST);
}

uint64_t fastidx_slots_used(const struct fastidx *fi)
{
    uint64_t n = 0;

    for (uint32_t b = 0; b < FASTIDX_BLOCKS; b++)
        for (uint32_t s = 0; taken(fi, b) && s < FASTIDX_SLOTS; s++)
            n += LOAD(&fi_block(fi, b)->slots[s]) != 0;
    return n;
}

uint64_t fastidx_gets(const struct fastidx *fi)
{
    uint64_t n = 0;

    for (uint32_t b = 0; b < FASTIDX_BLOCKS; b++)
        n += LOAD(&fi_block(fi, b)->gets);
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

int fastidx_claim(const struct fastidx_view *v, uint32_t b, uint64_t owner,
                  const struct fastidx_hit *hit)
{
    struct fastidx_hdr *hdr = (struct fastidx_hdr *)(void *)v->region;
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
         * reuses the memory (fastidx.h), if the block is still ours and the daemon serves. */
        if (__atomic_load_n(&e->seq, __ATOMIC_SEQ_CST) != hit->seq ||
            __atomic_load_n(&k->owner, __ATOMIC_SEQ_CST) != owner ||
            !__atomic_load_n(&hdr->alive, __ATOMIC_SEQ_CST)) {
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
