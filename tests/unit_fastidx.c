/* Unit tests of the shared index (common/fastidx.c): lookups and claims against publishes and
 * unpublishes, and the hazard protocol under threads: a writer thread (the daemon) publishes,
 * unpublishes and reuses objects' memory while reader threads find, claim, read and release
 * them; no reader ever sees memory reused while it holds it. Built a second time with
 * ThreadSanitizer (unit_fastidx_tsan), which checks the memory orders too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <time.h>

#include "common/fastidx.h"

#define CAP (64ull << 20)

static ferry_id id_of(uint32_t n)
{
    ferry_id id = {{0}};
    uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15ull; /* spread, as SHA-1 ids are */

    memcpy(id.bytes, &h, sizeof(h));
    memcpy(id.bytes + 8, &n, sizeof(n));
    return id;
}

struct fixture {
    uint8_t *region;
    uint64_t size;
    struct fastidx fi;
    struct fastidx_view v;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    f->size = fastidx_region_size(CAP);
    f->region = aligned_alloc(64, (f->size + 63) / 64 * 64);
    memset(f->region, 0, f->size);
    assert_int_equal(fastidx_init(&f->fi, f->region, f->size, CAP), 0);
    assert_int_equal(fastidx_view_open(&f->v, f->region, f->size), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    fastidx_free(&f->fi);
    free(f->region);
    free(f);
    return 0;
}

static void test_find_claim_release_and_unpublish(void **state)
{
    struct fixture *f = *state;
    ferry_id a = id_of(1), b = id_of(2);
    struct fastidx_hit hit;
    uint32_t ia, ib, seq;
    uint64_t own;
    uint32_t b3 = fastidx_block_take(&f->fi, &own);
    int s;

    assert_int_equal(fastidx_find(&f->v, &a, &hit), 0);
    assert_int_equal(fastidx_publish(&f->fi, &a, 4096, 100, 7, &ia), 0);
    assert_int_equal(fastidx_publish(&f->fi, &b, 8192, 200, 0, &ib), 0);
    assert_int_equal(fastidx_find(&f->v, &a, &hit), 1);
    assert_int_equal(hit.index, ia);
    assert_int_equal(hit.offset, 4096);
    assert_int_equal(hit.data_size, 100);
    assert_int_equal(hit.metadata_size, 7);
    s = fastidx_claim(&f->v, b3, own, &hit);
    assert_true(s >= 0);
    assert_int_equal(fastidx_slots_used(&f->fi), 1);
    assert_int_equal(fastidx_gets(&f->fi), 0);
    fastidx_count_gets(&f->v, b3, 1);
    assert_int_equal(fastidx_gets(&f->fi), 1);
    /* Held: unpublishing says so, and the life stays held until the slot is given back. */
    assert_int_equal(fastidx_unpublish(&f->fi, ia, &seq), 1);
    assert_int_equal(fastidx_find(&f->v, &a, &hit), 0);
    assert_int_equal(fastidx_held(&f->fi, ia, seq), 1);
    fastidx_release(&f->v, b3, s);
    assert_int_equal(fastidx_held(&f->fi, ia, seq), 0);
    /* b is still found past a's old entry; unheld, it goes at once. */
    assert_int_equal(fastidx_find(&f->v, &b, &hit), 1);
    assert_int_equal(fastidx_unpublish(&f->fi, ib, &seq), 0);
    assert_int_equal(f->fi.used, 0);
}

/* A claim of an entry that changed after it was read fails and leaves no slot taken. */
static void test_a_claim_of_a_stale_entry_fails(void **state)
{
    struct fixture *f = *state;
    ferry_id a = id_of(7);
    struct fastidx_hit hit;
    uint32_t ia, seq;
    uint64_t own;
    uint32_t b = fastidx_block_take(&f->fi, &own);

    assert_int_equal(fastidx_publish(&f->fi, &a, 0, 1, 0, &ia), 0);
    assert_int_equal(fastidx_find(&f->v, &a, &hit), 1);
    assert_int_equal(fastidx_unpublish(&f->fi, ia, &seq), 0);
    assert_int_equal(fastidx_claim(&f->v, b, own, &hit), -1);
    assert_int_equal(fastidx_slots_used(&f->fi), 0);
    /* Published again (maybe in the same entry), the old copy is still stale. */
    assert_int_equal(fastidx_publish(&f->fi, &a, 64, 1, 0, &ia), 0);
    assert_int_equal(fastidx_claim(&f->v, b, own, &hit), -1);
}

/* The table stops taking entries at its load bound; a block's slots run out; both make the
 * caller take the daemon's way. A cleared block holds nothing. */
static void test_bounds(void **state)
{
    struct fixture *f = *state;
    struct fastidx_hit hit;
    uint32_t i, n = 0, idx[FASTIDX_SLOTS + 1];
    uint64_t own, own2;
    uint32_t b = fastidx_block_take(&f->fi, &own);
    int rc;

    while ((rc = fastidx_publish(&f->fi, &(ferry_id[1]){id_of(n + 100)}[0], 0, 1, 0, &i)) == 0)
        idx[n < FASTIDX_SLOTS + 1 ? n : 0] = i, n++;
    assert_int_equal(rc, FERRY_ENOSPACE);
    assert_true(n * 100 <= f->fi.nentries * FASTIDX_MAX_LOAD_PERCENT);
    for (uint32_t k = 0; k < FASTIDX_SLOTS; k++) {
        assert_int_equal(fastidx_find(&f->v, &(ferry_id[1]){id_of(k + 100)}[0], &hit), 1);
        assert_true(fastidx_claim(&f->v, b, own, &hit) >= 0);
    }
    assert_int_equal(fastidx_find(&f->v, &(ferry_id[1]){id_of(FASTIDX_SLOTS + 100)}[0], &hit), 1);
    assert_int_equal(fastidx_claim(&f->v, b, own, &hit), -1);
    assert_int_equal(fastidx_slots_used(&f->fi), FASTIDX_SLOTS);
    /* Given back (the client went): nothing held, and a claim of its old owner fails even in
     * the block taken again by another client. */
    fastidx_block_give(&f->fi, b);
    assert_int_equal(fastidx_slots_used(&f->fi), 0);
    assert_int_equal(fastidx_block_take(&f->fi, &own2), b);
    assert_true(own2 != own);
    assert_int_equal(fastidx_claim(&f->v, b, own, &hit), -1);
    assert_true(fastidx_claim(&f->v, b, own2, &hit) >= 0);
    /* The daemon stopped: every claim fails. */
    fastidx_close(&f->fi);
    assert_int_equal(fastidx_claim(&f->v, b, own2, &hit), -1);
    (void)idx;
}

/* A forged header is refused. */
static void test_view_checks_the_header(void **state)
{
    struct fixture *f = *state;
    struct fastidx_view v;

    assert_int_equal(fastidx_view_open(&v, f->region, 16), FERRY_EPROTO);
    ((struct fastidx_hdr *)(void *)f->region)->nentries = 3;
    assert_int_equal(fastidx_view_open(&v, f->region, f->size), FERRY_EPROTO);
}

/* ---- threads ---- */

#define OBJECTS 64u
#define OBJ_BYTES 256u
#define READERS 3u

struct race {
    struct fixture *f;
    uint8_t *memory; /* OBJECTS objects of OBJ_BYTES, each filled with its life's byte */
    uint32_t life[OBJECTS];
    int stop;
    uint64_t reads, misses, torn;
};

/* The daemon: makes each object live in turn under a new life (its bytes all equal to the
 * life's low byte), unpublishes it, and rewrites its memory only once no slot holds it. */
static void *writer(void *arg)
{
    struct race *r = arg;
    uint32_t index[OBJECTS], seq[OBJECTS], pending[OBJECTS] = {0};
    int live[OBJECTS] = {0};
    struct timespec end;

    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += 1;
    for (uint64_t turn = 0;; turn++) {
        struct timespec now;
        uint32_t o = (uint32_t)(turn * 7919u) % OBJECTS;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec > end.tv_nsec))
            break;
        if (pending[o] && fastidx_held(&r->f->fi, index[o], seq[o]))
            continue; /* a reader still holds its last life */
        pending[o] = 0;
        if (live[o]) {
            live[o] = 0;
            if (fastidx_unpublish(&r->f->fi, index[o], &seq[o]))
                pending[o] = 1;
            continue;
        }
        /* Reuse: the bytes change only when nothing can hold the old life. */
        r->life[o]++;
        __atomic_store_n(&r->memory[o * OBJ_BYTES], (uint8_t)0xEE, __ATOMIC_RELAXED);
        for (uint32_t k = 1; k < OBJ_BYTES; k++)
            __atomic_store_n(&r->memory[o * OBJ_BYTES + k], (uint8_t)r->life[o], __ATOMIC_RELAXED);
        __atomic_store_n(&r->memory[o * OBJ_BYTES], (uint8_t)r->life[o], __ATOMIC_RELAXED);
        if (fastidx_publish(&r->f->fi, &(ferry_id[1]){id_of(o)}[0], (uint64_t)o * OBJ_BYTES,
                            OBJ_BYTES, 0, &index[o]) == 0)
            live[o] = 1;
    }
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELAXED);
    return NULL;
}

struct reader_arg {
    struct race *r;
    uint32_t block;
    uint64_t owner;
};

/* A client thread: finds, claims, reads every byte (all equal while held), releases. */
static void *reader(void *arg)
{
    struct reader_arg *a = arg;
    struct race *r = a->r;
    uint64_t reads = 0, misses = 0, torn = 0;

    for (uint32_t n = 0; !__atomic_load_n(&r->stop, __ATOMIC_RELAXED); n++) {
        uint32_t o = (n * 31u + a->block) % OBJECTS;
        struct fastidx_hit hit;
        int s;
        if (!fastidx_find(&r->f->v, &(ferry_id[1]){id_of(o)}[0], &hit) ||
            (s = fastidx_claim(&r->f->v, a->block, a->owner, &hit)) < 0) {
            misses++;
            continue;
        }
        const uint8_t *p = r->memory + hit.offset;
        uint8_t first = __atomic_load_n(&p[0], __ATOMIC_RELAXED);
        for (uint32_t k = 1; k < OBJ_BYTES; k++)
            torn += __atomic_load_n(&p[k], __ATOMIC_RELAXED) != first;
        fastidx_release(&r->f->v, a->block, s);
        reads++;
    }
    __atomic_fetch_add(&r->reads, reads, __ATOMIC_RELAXED);
    __atomic_fetch_add(&r->misses, misses, __ATOMIC_RELAXED);
    __atomic_fetch_add(&r->torn, torn, __ATOMIC_RELAXED);
    return NULL;
}

static void test_readers_never_see_memory_reused_while_they_hold_it(void **state)
{
    struct race r = {.f = *state};
    struct reader_arg args[READERS];
    pthread_t w, t[READERS];

    r.memory = calloc(OBJECTS, OBJ_BYTES);
    /* The blocks first: the daemon's bookkeeping is its thread's alone once it runs. */
    for (uint32_t i = 0; i < READERS; i++) {
        args[i] = (struct reader_arg){.r = &r};
        args[i].block = fastidx_block_take(&r.f->fi, &args[i].owner);
    }
    assert_int_equal(pthread_create(&w, NULL, writer, &r), 0);
    for (uint32_t i = 0; i < READERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reader, &args[i]), 0);
    pthread_join(w, NULL);
    for (uint32_t i = 0; i < READERS; i++)
        pthread_join(t[i], NULL);
    print_message("%llu reads, %llu misses, %llu torn bytes\n", (unsigned long long)r.reads,
                  (unsigned long long)r.misses, (unsigned long long)r.torn);
    assert_true(r.reads > 1000);
    assert_int_equal(r.torn, 0);
    assert_int_equal(fastidx_slots_used(&r.f->fi), 0);
    free(r.memory);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_find_claim_release_and_unpublish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_claim_of_a_stale_entry_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_checks_the_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readers_never_see_memory_reused_while_they_hold_it,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
