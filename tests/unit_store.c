/* Unit tests of the object table (store/store.c) over a private buffer as the arena. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <poll.h>
#include <unistd.h>
#include <xxhash.h>

#include "store/store.h"

#define CAP (1u << 20)

struct fixture {
    struct store st;
    uint8_t *base;
    int events[64]; /* kinds of the notifications seen, in order */
    ferry_id ids[64];
    int nevents;
};

static void record(struct fixture *f, int event, const struct object *o)
{
    if (f->nevents < 64) {
        f->ids[f->nevents] = o->id;
        f->events[f->nevents++] = event;
    }
}

static void on_sealed(void *ctx, const struct object *o)
{
    record(ctx, FERRY_EVENT_SEALED, o);
}

static void on_removed(void *ctx, const struct object *o, int event)
{
    record(ctx, event, o);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct store_events ev = {.sealed = on_sealed, .removed = on_removed, .ctx = f};

    f->base = calloc(1, CAP);
    assert_int_equal(store_init(&f->st, f->base, CAP, 0, &ev), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    store_destroy(&f->st);
    free(f->base);
    free(f);
    return 0;
}

static ferry_id id_of(int n)
{
    ferry_id id = {{0}};
    memcpy(id.bytes, &n, sizeof(n));
    return id;
}

/* An lvalue id for store_find. */
#define ID(n) ((ferry_id[1]){id_of(n)})[0]

/* Creates, fills and seals an object and drops the creator's reference: evictable. */
static struct object *put(struct fixture *f, int n, uint64_t size)
{
    struct object *o;
    ferry_id id = id_of(n);

    assert_int_equal(store_create(&f->st, &id, size, 0, f, &o), 0);
    memset(f->base + o->offset, n, size);
    store_seal(&f->st, o);
    store_unref(&f->st, o);
    return o;
}

static void test_create_states_and_errors(void **state)
{
    struct fixture *f = *state;
    struct object *o, *o2;
    ferry_id id = id_of(1);

    assert_int_equal(store_create(&f->st, &id, 100, 20, f, &o), 0);
    assert_int_equal(o->life, OBJECT_CREATED);
    assert_int_equal(o->refcount, 1);
    assert_int_equal(o->offset % 64, 0);
    assert_int_equal(store_used(&f->st), 128);
    assert_ptr_equal(store_find(&f->st, &id), o);
    assert_int_equal(store_create(&f->st, &id, 1, 0, f, &o2), FERRY_EEXIST);
    id = id_of(2);
    assert_int_equal(store_create(&f->st, &id, CAP + 1, 0, f, &o2), FERRY_ETOOBIG);
    assert_int_equal(store_create(&f->st, &id, UINT64_MAX, 2, f, &o2), FERRY_ETOOBIG);
    /* Nothing is evictable (the only object is unsealed): no room, and the figures say so. */
    assert_int_equal(store_create(&f->st, &id, CAP, 0, f, &o2), FERRY_ENOSPACE);
    assert_non_null(strstr(ferry_errmsg(), "evictable"));
    assert_int_equal(f->st.counters.refused, 3);
}

static void test_empty_object_takes_no_space(void **state)
{
    struct fixture *f = *state;
    struct object *o = put(f, 1, 0);

    assert_null(o->block);
    assert_int_equal(store_used(&f->st), 0);
    assert_int_equal(o->life, OBJECT_SEALED);
}

/* The digest covers data and metadata and where the boundary between them lies. */
static void test_hash_depends_on_content_and_boundary(void **state)
{
    struct fixture *f = *state;
    struct object *a, *b, *c;
    ferry_id ia = id_of(1), ib = id_of(2), ic = id_of(3);

    assert_int_equal(store_create(&f->st, &ia, 4, 4, f, &a), 0);
    assert_int_equal(store_create(&f->st, &ib, 4, 4, f, &b), 0);
    assert_int_equal(store_create(&f->st, &ic, 3, 5, f, &c), 0);
    memcpy(f->base + a->offset, "abcdefgh", 8);
    memcpy(f->base + b->offset, "abcdefgh", 8);
    memcpy(f->base + c->offset, "abcdefgh", 8);
    store_seal(&f->st, a);
    store_seal(&f->st, b);
    store_seal(&f->st, c);
    assert_memory_equal(a->root, b->root, DIGEST_LEN);
    assert_memory_not_equal(a->root, c->root, DIGEST_LEN);
}

static void test_eviction_in_lru_order(void **state)
{
    struct fixture *f = *state;
    struct object *big;
    ferry_id id = id_of(99);

    for (int i = 1; i <= 4; i++)
        put(f, i, CAP / 4);
    /* Using 1 makes it the youngest: 2 is now the oldest. */
    store_ref(&f->st, store_find(&f->st, &ID(1)));
    store_unref(&f->st, store_find(&f->st, &ID(1)));
    f->nevents = 0;
    assert_int_equal(store_create(&f->st, &id, CAP / 2, 0, f, &big), 0);
    assert_int_equal(f->nevents, 2);
    assert_int_equal(f->events[0], FERRY_EVENT_EVICTED);
    assert_memory_equal(f->ids[0].bytes, id_of(2).bytes, FERRY_ID_SIZE);
    assert_memory_equal(f->ids[1].bytes, id_of(3).bytes, FERRY_ID_SIZE);
    assert_non_null(store_find(&f->st, &ID(1)));
    assert_int_equal(f->st.counters.evicted_objects, 2);
}

/* Referenced and unsealed objects are never evicted, and a create that cannot succeed
 * evicts nothing. */
static void test_referenced_never_evicted_and_no_useless_eviction(void **state)
{
    struct fixture *f = *state;
    struct object *held = put(f, 1, CAP / 4), *o;
    ferry_id unsealed = id_of(2), big = id_of(3);

    store_ref(&f->st, held);
    assert_int_equal(store_create(&f->st, &unsealed, CAP / 4, 0, f, &o), 0);
    put(f, 4, CAP / 4);
    f->nevents = 0;
    assert_int_equal(store_create(&f->st, &big, CAP / 2 + 64, 0, f, &o), FERRY_ENOSPACE);
    assert_int_equal(f->nevents, 0);
    assert_int_equal(store_evict(&f->st, CAP), CAP / 4);
    assert_non_null(store_find(&f->st, &held->id));
    assert_non_null(store_find(&f->st, &unsealed));
}

/* A kept object is never evicted for room: a create that would need it fails and says the
 * store is full of kept objects; let go, it is evictable again (in its LRU place); deleted,
 * it leaves the kept counts. Evictions of objects nobody read are counted, of read ones not. */
static void test_kept_objects_stay_until_let_go(void **state)
{
    struct fixture *f = *state;
    struct object *kept = put(f, 1, CAP / 2), *read = put(f, 2, CAP / 4), *o;
    ferry_id big = id_of(3);

    assert_int_equal(store_keep(&f->st, kept, 1), 0);
    assert_int_equal(store_keep(&f->st, kept, 1), 0); /* twice counts once */
    assert_int_equal(f->st.kept_objects, 1);
    assert_int_equal(f->st.kept_bytes, CAP / 2);
    assert_int_equal(f->st.evictable_bytes, CAP / 4);
    store_mark_read(read);
    f->nevents = 0;
    assert_int_equal(store_create(&f->st, &big, CAP / 2 + 64, 0, f, &o), FERRY_ENOSPACE);
    assert_non_null(strstr(ferry_errmsg(), "full of kept objects"));
    assert_int_equal(f->nevents, 0);
    assert_int_equal(store_evict(&f->st, CAP), CAP / 4);
    assert_non_null(store_find(&f->st, &ID(1)));
    assert_int_equal(f->st.counters.evicted_unread, 0); /* asked for, and read anyway */

    store_keep(&f->st, kept, 0);
    assert_int_equal(f->st.kept_objects, 0);
    assert_int_equal(f->st.evictable_bytes, CAP / 2);
    assert_int_equal(store_create(&f->st, &big, CAP / 2 + 64, 0, f, &o), 0);
    assert_null(store_find(&f->st, &ID(1)));
    assert_int_equal(f->st.counters.evicted_unread, 1); /* put, never read, evicted for room */
    store_abort(&f->st, o);

    /* Kept while referenced: not in the LRU after its release either; deleted, uncounted. */
    kept = put(f, 4, CAP / 4);
    store_ref(&f->st, kept);
    store_keep(&f->st, kept, 1);
    store_unref(&f->st, kept);
    assert_int_equal(f->st.evictable_bytes, 0);
    store_delete(&f->st, kept);
    assert_int_equal(f->st.kept_objects, 0);
    assert_int_equal(f->st.kept_bytes, 0);
}

/* Delete when unused: an unreferenced object goes at once; a referenced one stays findable
 * (new references delay it) and goes with the last one, counted; a kept one is let go, and a
 * keep is refused after. */
static void test_deleted_when_unused_goes_with_its_last_reference(void **state)
{
    struct fixture *f = *state;
    struct object *idle = put(f, 1, CAP / 4), *held = put(f, 2, CAP / 4);
    uint64_t used = store_used(&f->st);

    store_delete_unused(&f->st, idle);
    assert_null(store_find(&f->st, &ID(1)));
    assert_int_equal(f->st.counters.deleted_unused, 1);

    store_ref(&f->st, held);
    assert_int_equal(store_keep(&f->st, held, 1), 0);
    store_delete_unused(&f->st, held);
    store_delete_unused(&f->st, held); /* twice counts once */
    assert_int_equal(f->st.kept_objects, 0);
    assert_int_equal(store_keep(&f->st, held, 1), FERRY_EINVAL);
    assert_ptr_equal(store_find(&f->st, &ID(2)), held); /* visible while referenced */
    store_ref(&f->st, held);                            /* a second reader */
    store_unref(&f->st, held);
    assert_ptr_equal(store_find(&f->st, &ID(2)), held);
    assert_int_equal(f->st.evictable_bytes, 0); /* never evictable: it is deleted instead */
    store_unref(&f->st, held);
    assert_null(store_find(&f->st, &ID(2)));
    assert_int_equal(f->st.counters.deleted_unused, 2);
    assert_int_equal(f->st.counters.deleted, 2);
    assert_true(store_used(&f->st) < used);
    assert_int_equal(store_used(&f->st), 0);
}

/* Kept objects stay within max_kept_bytes and half of max_objects, whoever keeps them: a keep
 * past either is refused and changes nothing. */
static void test_kept_objects_stay_within_their_bounds(void **state)
{
    struct fixture *f = *state;
    struct object *a = put(f, 1, CAP / 4), *b = put(f, 2, CAP / 4), *c = put(f, 3, CAP / 4);

    assert_int_equal(f->st.max_kept_bytes, CAP / 2); /* half the arena by default */
    assert_int_equal(store_keep(&f->st, a, 1), 0);
    assert_int_equal(store_keep(&f->st, b, 1), 0);
    assert_int_equal(store_keep(&f->st, c, 1), FERRY_ENOSPACE);
    assert_non_null(strstr(ferry_errmsg(), "--max-kept"));
    assert_int_equal(c->kept, 0);
    assert_int_equal(f->st.kept_objects, 2);
    assert_int_equal(f->st.evictable_bytes, CAP / 4); /* c, still evictable */
    /* By count: half of max_objects. */
    f->st.max_objects = 4;
    assert_int_equal(store_keep(&f->st, a, 0), 0);
    f->st.max_kept_bytes = CAP;
    assert_int_equal(store_keep(&f->st, c, 1), 0);
    assert_int_equal(store_keep(&f->st, a, 1), FERRY_ENOSPACE);
    assert_non_null(strstr(ferry_errmsg(), "half of --max-objects"));
    /* a, let go, is the only evictable object. */
    assert_int_equal(store_evict(&f->st, CAP), CAP / 4);
    assert_null(store_find(&f->st, &ID(1)));
}

static void test_delete_referenced_waits_for_last_reference(void **state)
{
    struct fixture *f = *state;
    struct object *o = put(f, 1, 1000), *again;
    ferry_id id = id_of(1);

    store_ref(&f->st, o);
    store_delete(&f->st, o);
    assert_null(store_find(&f->st, &id));
    assert_int_equal(store_used(&f->st), 1024); /* still there for its reader */
    /* The id is free for a new object meanwhile. */
    assert_int_equal(store_create(&f->st, &id, 10, 0, f, &again), 0);
    store_unref(&f->st, o);
    assert_int_equal(store_used(&f->st), 64);
    assert_int_equal(f->events[f->nevents - 1], FERRY_EVENT_DELETED);
}

static void test_abort_frees_and_emits_nothing(void **state)
{
    struct fixture *f = *state;
    struct object *o;
    ferry_id id = id_of(1);

    assert_int_equal(store_create(&f->st, &id, 5000, 0, f, &o), 0);
    store_abort(&f->st, o);
    assert_int_equal(store_used(&f->st), 0);
    assert_null(store_find(&f->st, &id));
    assert_int_equal(f->nevents, 0);
}

static void test_touch_and_reserve(void **state)
{
    struct fixture *f = *state;
    alloc_block *b;

    put(f, 1, CAP / 2);
    put(f, 2, CAP / 2);
    store_touch(&f->st, store_find(&f->st, &ID(1)));
    /* Reserving evicts like a create: 2 is now the oldest. */
    assert_int_equal(store_reserve(&f->st, 1000, &b), 0);
    assert_null(store_find(&f->st, &ID(2)));
    assert_non_null(store_find(&f->st, &ID(1)));
    store_unreserve(&f->st, b);
    assert_int_equal(store_used(&f->st), CAP / 2);
}

/* Waits (bounded) until the hasher has finished something, and takes it in. */
static void collect(struct fixture *f)
{
    struct pollfd pfd = {.fd = hasher_fd(f->st.hasher), .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    store_collect_hashes(&f->st);
}

/* A large object's digest is computed off the loop: meanwhile the object is in the LRU
 * (evictable); afterwards it has the digest an inline one would have. */
static void test_large_digest_on_hasher_stays_evictable(void **state)
{
    struct fixture *f = *state;
    uint64_t size = STORE_INLINE_HASH_MAX + 4096;
    struct object *o;

    assert_int_equal(hasher_start(&f->st.hasher, STORE_HASHER_THREADS), 0);
    o = put(f, 7, size);
    assert_int_equal(o->hashed, 0);
    assert_non_null(o->lru_next); /* evictable while being hashed */
    collect(f);
    assert_int_equal(o->hashed, 1);
    uint8_t root[DIGEST_LEN];
    assert_int_equal(digest_object(f->base + o->offset, size, 0, root), 0);
    assert_memory_equal(o->root, root, DIGEST_LEN);
    assert_null(o->leaves); /* one chunk */
    assert_int_equal(store_evict(&f->st, 1), (size + 63) / 64 * 64);
}

/* A small object's digest is computed on the loop after the turn that sealed it
 * (store_after_turn), so that the seal is answered first; one deleted before then takes its job
 * with it (ASan: nothing reads its freed record or memory). */
static void test_small_digest_after_the_turn(void **state)
{
    struct fixture *f = *state;
    uint8_t root[DIGEST_LEN];
    struct object *o;

    assert_int_equal(hasher_start(&f->st.hasher, STORE_HASHER_THREADS), 0);
    o = put(f, 1, 4096);
    store_delete(&f->st, put(f, 2, 8192));
    assert_int_equal(o->hashed, 0);
    assert_int_equal(o->hashing, 1);
    assert_non_null(o->lru_next); /* evictable meanwhile */
    store_after_turn(&f->st);
    assert_int_equal(o->hashed + o->hashing, 1);
    assert_int_equal(f->st.counters.hashed_bytes, 4096);
    assert_int_equal(digest_object(f->base + o->offset, 4096, 0, root), 0);
    assert_memory_equal(o->root, root, DIGEST_LEN);
    assert_null(f->st.hashes_later);
}

/* Hashing must not reorder the LRU: an object sealed first but hashed last is still the
 * oldest (regression: a hashing pin once re-queued objects in hash-completion order). */
static void test_hashing_keeps_lru_order(void **state)
{
    struct fixture *f = *state;
    uint64_t size = STORE_INLINE_HASH_MAX + 64;
    struct object *big;

    assert_int_equal(hasher_start(&f->st.hasher, STORE_HASHER_THREADS), 0);
    big = put(f, 1, size); /* oldest, being hashed */
    put(f, 2, 1000);       /* hashed after the turn (collect runs it), in the LRU at once */
    for (int i = 0; i < 100 && !big->hashed; i++)
        collect(f);
    assert_int_equal(big->hashed, 1);
    f->nevents = 0;
    assert_int_equal(store_evict(&f->st, 1), (size + 63) / 64 * 64);
    assert_memory_equal(f->ids[0].bytes, id_of(1).bytes, FERRY_ID_SIZE);
}

/* A create evicts objects whose digests are still queued rather than wait for them. */
static void test_a_create_evicts_objects_being_hashed(void **state)
{
    struct fixture *f = *state;
    uint64_t size = CAP / 2;
    struct object *o;
    ferry_id id = id_of(3);

    assert_int_equal(hasher_start(&f->st.hasher, STORE_HASHER_THREADS), 0);
    put(f, 1, size);
    put(f, 2, size);
    assert_int_equal(store_create(&f->st, &id, size, 0, f, &o), 0);
    assert_int_equal(f->st.counters.evicted_objects, 1);
    assert_null(store_find(&f->st, &ID(1)));
    o = store_find(&f->st, &ID(2));
    for (int i = 0; i < 100 && !o->hashed; i++)
        collect(f);
    assert_int_equal(o->hashed, 1);
}

/* An object deleted while it is being hashed is freed at once; its queued jobs are dropped
 * (32 MiB: 8 jobs, 2 threads), those running finish first. */
static void test_delete_while_hashing_frees_at_once(void **state)
{
    struct fixture *f = *state;
    uint64_t size = 32u << 20;
    struct object *o;
    ferry_id id = id_of(1);
    uint8_t *base = calloc(1, size);
    struct store st;

    (void)f;
    assert_non_null(base);
    assert_int_equal(store_init(&st, base, size, 0, NULL), 0);
    assert_int_equal(hasher_start(&st.hasher, STORE_HASHER_THREADS), 0);
    assert_int_equal(store_create(&st, &id, size, 0, NULL, &o), 0);
    store_seal(&st, o);
    store_unref(&st, o);
    assert_int_equal(o->hashing, 1);
    store_delete(&st, o);
    assert_int_equal(store_used(&st), 0);
    assert_true(st.counters.hash_jobs_dropped > 0);
    store_collect_hashes(&st);
    store_destroy(&st);
    free(base);
}

/* With hash_on_demand (no directory) a seal hashes nothing; store_hash computes the digest. */
static void test_hash_on_demand_hashes_when_asked(void **state)
{
    struct fixture *f = *state;
    uint64_t size = STORE_INLINE_HASH_MAX + 4096;
    uint8_t root[DIGEST_LEN];
    struct object *o;

    assert_int_equal(hasher_start(&f->st.hasher, STORE_HASHER_THREADS), 0);
    f->st.hash_on_demand = 1;
    o = put(f, 5, size);
    assert_int_equal(o->hashed + o->hashing, 0);
    assert_int_equal(f->st.counters.hashed_bytes, 0);
    assert_int_equal(store_hash(&f->st, o), 0);
    for (int i = 0; i < 100 && !o->hashed; i++)
        collect(f);
    assert_int_equal(o->hashed, 1);
    assert_int_equal(f->st.counters.hashed_bytes, size);
    assert_int_equal(digest_object(f->base + o->offset, size, 0, root), 0);
    assert_memory_equal(o->root, root, DIGEST_LEN);
    assert_int_equal(store_hash(&f->st, o), 1);
}

/* Runs the spill directory's completions until o's life is want (5 s at most). */
static void spill_wait(struct store *st, const struct object *o, enum object_life want)
{
    struct pollfd p = {.fd = store_spill_fd(st), .events = POLLIN};

    for (int i = 0; i < 500 && o->life != want; i++) {
        (void)poll(&p, 1, 10);
        store_collect_spill(st);
    }
    assert_int_equal(o->life, want);
}

/* Removes dir and the files in it (a spill directory has no subfolders). */
static void remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    assert_non_null(d);
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            (void)unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    assert_int_equal(rmdir(dir), 0);
}

/* A store over a page-aligned arena with a spill directory (spill_at 0: every sealed object is
 * written at once), and the bytes of its objects. */
struct spilling {
    char dir[32];
    uint8_t *base, *want;
    struct store st;
};

#define SPILL_SIZE (64u << 10)

static void spilling_open(struct spilling *sp)
{
    snprintf(sp->dir, sizeof(sp->dir), "/tmp/unit_store.XXXXXX");
    sp->base = aligned_alloc(4096, CAP);
    sp->want = malloc(SPILL_SIZE);
    assert_non_null(sp->base);
    assert_non_null(sp->want);
    assert_non_null(mkdtemp(sp->dir));
    for (uint64_t i = 0; i < SPILL_SIZE; i++)
        sp->want[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(store_init(&sp->st, sp->base, CAP, 0, NULL), 0);
    assert_int_equal(store_spill_open(&sp->st, sp->dir, 64u << 20, 0, NULL), 0);
}

static void spilling_close(struct spilling *sp)
{
    store_destroy(&sp->st);
    remove_flat_dir(sp->dir);
    free(sp->want);
    free(sp->base);
}

/* An object taken along the diagram to SPILLED: created, sealed, written (WRITING, then SEALED
 * with its copy on disk), evicted for a create that needs the arena. */
static struct object *spilled_object(struct spilling *sp)
{
    struct store *st = &sp->st;
    ferry_id id = id_of(1), other = id_of(2);
    struct object *o, *big;

    assert_int_equal(store_create(st, &id, SPILL_SIZE, 0, NULL, &o), 0);
    assert_int_equal(o->life, OBJECT_CREATED);
    memcpy(sp->base + o->offset, sp->want, SPILL_SIZE);
    store_seal(st, o);
    assert_int_equal(o->life, OBJECT_SEALED);
    store_unref(st, o); /* spill_at 0: written at once */
    assert_int_equal(o->life, OBJECT_WRITING);
    spill_wait(st, o, OBJECT_SEALED);
    assert_non_null(o->rec);
    assert_int_equal(store_create(st, &other, CAP - 4096, 0, NULL, &big), 0);
    assert_int_equal(o->life, OBJECT_SPILLED);
    assert_null(o->block);
    store_abort(st, big);
    return o;
}

/* The object of spilled_object(sp), its read back started: RESTORING. */
static struct object *restoring_object(struct spilling *sp)
{
    struct object *o;

    spilling_open(sp);
    o = spilled_object(sp);
    assert_int_equal(store_restore(&sp->st, o, 0), FERRY_EAGAIN);
    assert_int_equal(o->life, OBJECT_RESTORING);
    return o;
}

/* With a spill directory an object lives along object.h's diagram to SPILLED, and is read back
 * (RESTORING, then SEALED) with its bytes intact. */
static void test_an_object_lives_along_its_diagram(void **state)
{
    struct spilling sp;
    struct object *o = restoring_object(&sp);

    (void)state;
    assert_int_equal(store_restore(&sp.st, o, 0), FERRY_EAGAIN); /* one read for both */
    spill_wait(&sp.st, o, OBJECT_SEALED);
    assert_memory_equal(sp.base + o->offset, sp.want, SPILL_SIZE);
    assert_int_equal(o->refcount, 0);
    assert_int_equal(sp.st.spilled_objects, 0);
    spilling_close(&sp);
}

/* An object deleted while its read is under way: the read still ends (SEALED: its bytes are
 * in), the store counts no spilled object, and the object goes with its last reference. */
static void test_deleted_while_restoring_ends_sealed(void **state)
{
    struct spilling sp;
    struct object *o = restoring_object(&sp);

    (void)state;
    store_ref(&sp.st, o); /* kept to be looked at once deleted */
    store_delete(&sp.st, o);
    assert_int_equal(sp.st.spilled_objects, 0);
    spill_wait(&sp.st, o, OBJECT_SEALED);
    assert_int_equal(o->deleted, 1);
    assert_int_equal(o->refcount, 1);
    store_unref(&sp.st, o);
    assert_int_equal(sp.st.spilled_objects, 0);
    assert_int_equal(store_used(&sp.st), 0);
    spilling_close(&sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_states_and_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_object_takes_no_space, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_depends_on_content_and_boundary, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_in_lru_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_referenced_never_evicted_and_no_useless_eviction,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_objects_stay_until_let_go, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_objects_stay_within_their_bounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_deleted_when_unused_goes_with_its_last_reference,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_referenced_waits_for_last_reference, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_abort_frees_and_emits_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_touch_and_reserve, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_digest_on_hasher_stays_evictable, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hashing_keeps_lru_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_while_hashing_frees_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_digest_after_the_turn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_create_evicts_objects_being_hashed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_on_demand_hashes_when_asked, setup, teardown),
        cmocka_unit_test(test_an_object_lives_along_its_diagram),
        cmocka_unit_test(test_deleted_while_restoring_ends_sealed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
