/*
 * it_ops.c - every operation of libferry against a real ferryd, and every error code the
 * daemon answers with: the object life cycle, visibility, references, list, hash, delete,
 * evict, refresh, stats, subscriptions and the staged puts.
 */
#include "harness.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024u * 1024u)

static int setup(void **state)
{
    return h_setup(state, "64M", NULL);
}

static uint64_t round64(uint64_t n)
{
    return (n + 63) / 64 * 64;
}

static void put(ferry_client *c, const char *name, uint64_t data_size, uint64_t meta_size)
{
    ferry_id id = h_id(name);
    H_OK(h_put_direct(c, &id, data_size, meta_size));
}

/* A sealed object is read back by another client with its data and metadata intact. */
H_TEST(create_seal_get_roundtrip_to_another_client)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("roundtrip");
    uint8_t meta[] = "some metadata", *data = NULL;
    H_OK(ferry_create(a, &id, 100000, meta, sizeof(meta), &data));
    assert_non_null(data);
    h_fill(data, 100000, 7);
    H_OK(ferry_seal(a, &id));
    H_OK(ferry_release(a, &id));

    ferry_buffer buf;
    H_OK(ferry_get(b, &id, 1, 0, &buf));
    assert_int_equal(buf.status, FERRY_OK);
    assert_int_equal(buf.data_size, 100000);
    assert_int_equal(buf.metadata_size, sizeof(meta));
    assert_int_equal(h_check(buf.data, 100000, 7), -1);
    assert_memory_equal(buf.metadata, meta, sizeof(meta));
    H_OK(ferry_release(b, &id));
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* An unsealed object is seen by nobody (contains false, get times out) until its seal. */
H_TEST(unsealed_object_is_invisible_until_sealed)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("unsealed");
    uint8_t *data;
    H_OK(ferry_create(a, &id, 64, NULL, 0, &data));
    h_fill(data, 64, h_seed(&id));
    assert_int_equal(h_contains(a, &id), 0);
    assert_int_equal(h_contains(b, &id), 0);
    ferry_buffer buf;
    H_RC(ferry_get(b, &id, 1, 0, &buf), FERRY_ENOENT);
    assert_int_equal(buf.status, FERRY_ENOENT);

    H_OK(ferry_seal(a, &id));
    assert_int_equal(h_contains(b, &id), 1);
    assert_int_equal(h_contains(a, &id), 1);
    h_assert_object(b, &id, 64, 0);
    H_OK(ferry_release(a, &id));
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Only the creator may seal or abort; the object stays unsealed and the creator's. */
H_TEST(seal_and_abort_by_non_creator_are_eperm)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("mine");
    uint8_t *data;
    H_OK(ferry_create(a, &id, 10, NULL, 0, &data));
    H_RC(ferry_seal(b, &id), FERRY_EPERM);
    H_RC(ferry_abort(b, &id), FERRY_EPERM);
    ferry_object_info info;
    assert_true(h_list_find(a, &id, &info));
    assert_int_equal(info.state, FERRY_STATE_CREATED);
    assert_int_equal(h_contains(b, &id), 0);
    H_OK(ferry_seal(a, &id));
    assert_int_equal(h_contains(b, &id), 1);
    H_OK(ferry_release(a, &id));
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Seal and abort of an id nobody created are ENOENT and create nothing. */
H_TEST(seal_and_abort_of_missing_id_are_enoent)
{
    ferry_client *a = h_connect(d);
    ferry_id id = h_id("nobody");
    H_RC(ferry_seal(a, &id), FERRY_ENOENT);
    H_RC(ferry_abort(a, &id), FERRY_ENOENT);
    assert_int_equal(h_stats(a).objects, 0);
    ferry_disconnect(a);
}

/* Abort drops the object and its memory at once, and the id can be created again. */
H_TEST(abort_frees_the_object_and_its_id)
{
    ferry_client *a = h_connect(d);
    ferry_id id = h_id("aborted");
    uint64_t before = h_object_bytes(a);
    uint8_t *data;
    H_OK(ferry_create(a, &id, 4096, NULL, 0, &data));
    assert_int_equal(h_object_bytes(a), before + h_open_create_bytes(4096));
    H_OK(ferry_abort(a, &id));
    assert_int_equal(h_object_bytes(a), before);
    ferry_object_info info;
    assert_false(h_list_find(a, &id, &info));
    H_RC(ferry_release(a, &id), FERRY_EINVAL);
    assert_int_equal(h_stats(a).aborted_objects, 1);
    put(a, "aborted", 100, 1);
    h_assert_object(a, &id, 100, 1);
    ferry_disconnect(a);
}

/* A second create of an id, sealed or not, by its creator or anyone else, is EEXIST and
 * leaves the first object as it was. */
H_TEST(create_of_existing_id_is_eexist)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id sealed = h_id("sealed"), open = h_id("open");
    uint8_t *data;
    put(a, "sealed", 300, 2);
    H_OK(ferry_create(a, &open, 10, NULL, 0, &data));
    H_RC(ferry_create(a, &sealed, 5, NULL, 0, &data), FERRY_EEXIST);
    H_RC(ferry_create(b, &sealed, 5, NULL, 0, &data), FERRY_EEXIST);
    H_RC(ferry_create(a, &open, 5, NULL, 0, &data), FERRY_EEXIST);
    H_RC(ferry_create(b, &open, 5, NULL, 0, &data), FERRY_EEXIST);
    h_assert_object(b, &sealed, 300, 2);
    ferry_object_info info;
    assert_true(h_list_find(a, &open, &info));
    assert_int_equal(info.data_size, 10);
    assert_int_equal(info.state, FERRY_STATE_CREATED);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* data + metadata over the arena's capacity is ETOOBIG, with a reason. */
H_TEST(create_larger_than_the_arena_is_etoobig)
{
    ferry_client *a = h_connect(d);
    ferry_stats s = h_stats(a);
    assert_int_equal(s.capacity_bytes, 64 * MIB);
    ferry_id id = h_id("huge");
    uint8_t *data;
    uint8_t meta[64] = {0};
    H_RC(ferry_create(a, &id, s.capacity_bytes + 1, NULL, 0, &data), FERRY_ETOOBIG);
    assert_true(strlen(ferry_errmsg()) > 0);
    H_RC(ferry_create(a, &id, s.capacity_bytes - 32, meta, sizeof(meta), &data), FERRY_ETOOBIG);
    H_RC(ferry_create(a, &id, UINT64_MAX - 8, meta, sizeof(meta), &data), FERRY_ETOOBIG);
    assert_int_equal(h_stats(a).objects, 0);
    /* the whole arena is fine */
    H_OK(ferry_create(a, &id, s.capacity_bytes - 64, meta, sizeof(meta), &data));
    H_OK(ferry_abort(a, &id));
    ferry_disconnect(a);
}

/* Objects with no data, with no metadata, and with neither work end to end. */
H_TEST(empty_data_and_empty_objects_round_trip)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id meta_only = h_id("meta-only"), empty = h_id("empty"), data_only = h_id("data");
    uint64_t before = h_object_bytes(a);
    uint8_t *data = NULL;
    H_OK(ferry_create(a, &empty, 0, NULL, 0, &data));
    assert_non_null(data);
    assert_int_equal(h_object_bytes(a), before); /* 0 + 0 takes no space */
    H_OK(ferry_seal(a, &empty));
    H_OK(ferry_release(a, &empty));
    put(a, "meta-only", 0, 7);
    put(a, "data", 9, 0);

    ferry_id ids[3] = {meta_only, empty, data_only};
    ferry_buffer out[3];
    H_OK(ferry_get(b, ids, 3, 0, out));
    h_assert_buffer(&out[0], &meta_only, 0, 7);
    h_assert_buffer(&out[1], &empty, 0, 0);
    h_assert_buffer(&out[2], &data_only, 9, 0);
    for (int i = 0; i < 3; i++)
        H_OK(ferry_release(b, &ids[i]));
    assert_int_equal(h_contains(b, &empty), 1);
    assert_int_equal(h_object_bytes(a), before + 64 + 64);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* used_bytes counts one allocation per sealed object, data and metadata together, rounded to
 * 64. An open create holds pages of its own (the creator writes through them) and gives the
 * rest of its last page back at its seal. */
H_TEST(used_bytes_rounds_each_object_to_64)
{
    static const struct {
        uint64_t data, meta;
    } sizes[] = {{1, 0}, {64, 0}, {65, 0}, {60, 4}, {60, 5}, {0, 0}, {0, 1}, {1000, 1000}};
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    ferry_client *a = h_connect(d);
    uint64_t base = h_object_bytes(a), expect = base;
    uint8_t meta[1000] = {0}, *data;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        ferry_id id = h_idf("size-%zu", i);
        uint64_t total = sizes[i].data + sizes[i].meta;
        H_OK(ferry_create(a, &id, sizes[i].data, meta, sizes[i].meta, &data));
        assert_int_equal((uintptr_t)data % page, 0);
        assert_int_equal(h_object_bytes(a) - expect, h_open_create_bytes(total));
        H_OK(ferry_seal(a, &id));
        expect += round64(total);
        assert_int_equal(h_object_bytes(a), expect);
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        ferry_id id = h_idf("size-%zu", i);
        H_OK(ferry_release(a, &id));
        H_OK(ferry_delete(a, &id));
    }
    assert_int_equal(h_object_bytes(a), base);
    ferry_disconnect(a);
}

/* The pages a creator writes through hold no other object: the byte before its object faults
 * (the page before is not writable), the rest of its last page is its padding, and every other
 * object keeps its bytes. Creates shared pages with sealed objects, which the creator's pointer
 * could then rewrite (64-byte placement). */
H_TEST(a_creators_pages_hold_no_other_object)
{
    enum { N = 8, SIZE = 100 };
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    ferry_client *a = h_connect(d);
    ferry_id ids[N], open = h_id("open-create");
    uint8_t *p;
    int st;
    for (int i = 0; i < N; i++) { /* small sealed neighbours, put by copy */
        ids[i] = h_idf("neighbour-%d", i);
        uint8_t *bytes = h_pattern(SIZE, h_seed(&ids[i]));
        H_OK(ferry_put(a, &ids[i], bytes, SIZE, NULL, 0));
        free(bytes);
    }
    H_OK(ferry_create(a, &open, SIZE, NULL, 0, &p));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        uint8_t *end = (uint8_t *)(((uintptr_t)p + SIZE + page - 1) / page * page);
        memset(p, 0x5a, (size_t)(end - p)); /* its object, then its padding */
        p[-1] ^= 0xff;                      /* must fault */
        _exit(0);
    }
    assert_true(h_wait_exit(pid, 10000, &st));
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    for (int i = 0; i < N; i++)
        h_assert_object(a, &ids[i], SIZE, 0);
    H_OK(ferry_seal(a, &open));
    ferry_buffer b;
    H_OK(ferry_get(a, &open, 1, 0, &b));
    for (int i = 0; i < SIZE; i++)
        assert_int_equal(b.data[i], 0x5a);
    H_OK(ferry_release(a, &open));
    H_OK(ferry_release(a, &open));
    ferry_disconnect(a);
}

/* An id listed twice in one get is returned twice and holds two references. */
H_TEST(get_same_id_twice_holds_two_references)
{
    ferry_client *a = h_connect(d);
    ferry_id id = h_id("twice"), ids[2] = {id, id};
    put(a, "twice", 500, 5);
    ferry_buffer out[2];
    H_OK(ferry_get(a, ids, 2, 0, out));
    h_assert_buffer(&out[0], &id, 500, 5);
    h_assert_buffer(&out[1], &id, 500, 5);
    ferry_object_info info;
    assert_true(h_list_find(a, &id, &info));
    assert_int_equal(info.refcount, 2);
    H_OK(ferry_release(a, &id));
    assert_true(h_list_find(a, &id, &info));
    assert_int_equal(info.refcount, 1);
    H_OK(ferry_release(a, &id));
    assert_true(h_list_find(a, &id, &info));
    assert_int_equal(info.refcount, 0);
    H_RC(ferry_release(a, &id), FERRY_EINVAL);
    ferry_disconnect(a);
}

/* Releasing what this handle does not hold is ENOENT, and does not take another client's
 * reference away. */
H_TEST(release_without_a_reference_is_enoent)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("held-by-b"), missing = h_id("missing");
    put(a, "held-by-b", 10, 0);
    ferry_buffer buf;
    H_OK(ferry_get(b, &id, 1, 0, &buf));
    H_RC(ferry_release(a, &id), FERRY_EINVAL);
    H_RC(ferry_release(a, &missing), FERRY_EINVAL);
    ferry_object_info info;
    assert_true(h_list_find(a, &id, &info));
    assert_int_equal(info.refcount, 1);
    H_OK(ferry_release(b, &id));
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* SHA-256 of the n bytes at p behind a tag byte and a little-endian u64 (and, for the root,
 * a second one): the tree of common/digest.h, written here again from its documentation. */
static void sha_tagged(uint8_t tag, uint64_t a, const uint64_t *b, const uint8_t *p, size_t n,
                       uint8_t out[32])
{
    uint8_t *buf = malloc(1 + 16 + n);
    size_t at = 1 + 8;
    assert_non_null(buf);
    buf[0] = tag;
    for (int k = 0; k < 8; k++)
        buf[1 + k] = (uint8_t)(a >> (8 * k));
    for (int k = 0; b && k < 8; k++)
        buf[at++] = (uint8_t)(*b >> (8 * k));
    memcpy(buf + at, p, n);
    assert_non_null(SHA256(buf, at + n, out));
    free(buf);
}

/* The root of data then metadata: a leaf per MiB, SHA-256(0x00, i, chunk); the root
 * SHA-256(0x01, data size, metadata size, the leaves). */
static void tree_of(const uint8_t *data, size_t n, const uint8_t *meta, size_t m, uint8_t root[32])
{
    size_t total = n + m, chunk = 1u << 20, nl = total ? (total + chunk - 1) / chunk : 1;
    uint8_t *all = malloc(total + 1), *leaves = malloc(nl * 32);
    uint64_t ms = m;
    assert_true(all && leaves);
    memcpy(all, data, n);
    memcpy(all + n, meta, m);
    for (size_t i = 0; i < nl; i++) {
        size_t len = total - i * chunk < chunk ? total - i * chunk : chunk;
        sha_tagged(0x00, i, NULL, all + i * chunk, len, leaves + 32 * i);
    }
    sha_tagged(0x01, n, &ms, leaves, nl * 32, root);
    free(leaves);
    free(all);
}

/* hash: equal for equal content, different when data or metadata differ, ENOENT when
 * absent. */
H_TEST(hash_is_equal_for_equal_content_and_differs_otherwise)
{
    ferry_client *a = h_connect(d);
    uint8_t *data = h_pattern(5000, 1);
    ferry_id ids[4] = {h_id("h-a"), h_id("h-b"), h_id("h-data-differs"), h_id("h-meta-differs")};
    H_OK(ferry_put(a, &ids[0], data, 5000, "meta", 4));
    H_OK(ferry_put(a, &ids[1], data, 5000, "meta", 4));
    data[4999] ^= 1;
    H_OK(ferry_put(a, &ids[2], data, 5000, "meta", 4));
    data[4999] ^= 1;
    H_OK(ferry_put(a, &ids[3], data, 5000, "mets", 4));
    uint64_t h[4];
    for (int i = 0; i < 4; i++)
        H_OK(ferry_hash(a, &ids[i], &h[i]));
    assert_int_equal(h[0], h[1]);
    assert_int_not_equal(h[0], h[2]);
    assert_int_not_equal(h[0], h[3]);
    assert_int_not_equal(h[2], h[3]);
    ferry_id missing = h_id("h-missing");
    uint64_t unused;
    H_RC(ferry_hash(a, &missing, &unused), FERRY_ENOENT);
    free(data);
    ferry_disconnect(a);
}

/* A standalone daemon (no directory to publish to) hashes nothing at seal: the digest is
 * computed when a client asks for it (the request waits), once (hashed_bytes). */
H_TEST(standalone_digest_is_computed_when_asked_not_at_seal)
{
    const size_t size = 3u << 20; /* on the hasher's threads */
    ferry_client *a = h_connect(d);
    uint8_t *data = h_pattern(size, 2), root[2][FERRY_DIGEST_LEN];
    ferry_id id[2] = {h_id("lazy-1"), h_id("lazy-2")};
    for (int i = 0; i < 2; i++)
        H_OK(ferry_put(a, &id[i], data, size, "meta", 4));
    assert_int_equal(h_stats(a).hashed_bytes, 0);
    for (int i = 0; i < 2; i++)
        H_OK(ferry_digest(a, &id[i], root[i]));
    assert_memory_equal(root[0], root[1], FERRY_DIGEST_LEN);
    H_OK(ferry_digest(a, &id[0], root[1]));
    assert_int_equal(h_stats(a).hashed_bytes, 2 * (size + 4));
    free(data);
    ferry_disconnect(a);
}

/* The digest is what ferry.h documents, so a client can compute it itself: the SHA-256 tree of
 * data then metadata (ferry_digest), and ferry_hash its first 8 bytes as a little-endian u64.
 * Checked for a small object (hashed on the loop) and one of four chunks (on the hasher
 * threads). */
H_TEST(digest_is_the_documented_sha256_tree_of_data_then_metadata)
{
    static const size_t sizes[] = {5000, 3u << 20};
    ferry_client *a = h_connect(d);
    for (size_t i = 0; i < 2; i++) {
        uint8_t *data = h_pattern(sizes[i], 1), root[32], got[FERRY_DIGEST_LEN];
        ferry_id id = h_id(i ? "h-tree-large" : "h-tree");
        uint64_t h, first = 0;
        H_OK(ferry_put(a, &id, data, sizes[i], "meta", 4));
        tree_of(data, sizes[i], (const uint8_t *)"meta", 4, root);
        H_OK(ferry_digest(a, &id, got));
        assert_memory_equal(got, root, 32);
        H_OK(ferry_hash(a, &id, &h));
        for (int k = 7; k >= 0; k--)
            first = first << 8 | root[k];
        assert_int_equal(h, first);
        free(data);
    }
    ferry_disconnect(a);
}

static void assert_info(const ferry_object_info *info, uint64_t data, uint64_t meta, int state,
                        uint32_t refs)
{
    assert_int_equal(info->data_size, data);
    assert_int_equal(info->metadata_size, meta);
    assert_int_equal(info->state, state);
    assert_int_equal(info->refcount, refs);
    assert_true(info->age_ms < 60000);
}

/* list shows every object, sealed or not, with its sizes, state and references. */
H_TEST(list_shows_state_refcount_and_sizes)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id open = h_id("l-open"), held = h_id("l-held"), idle = h_id("l-idle");
    uint8_t meta[5] = {1, 2, 3, 4, 5}, *data;
    H_OK(ferry_create(a, &open, 10, meta, 5, &data));
    put(a, "l-held", 100, 3);
    put(a, "l-idle", 7, 0);
    ferry_buffer buf;
    H_OK(ferry_get(b, &held, 1, 0, &buf));

    ferry_object_info *all = NULL;
    size_t n = 0;
    H_OK(ferry_list(b, &all, &n));
    assert_int_equal(n, 3);
    free(all);
    ferry_object_info info;
    assert_true(h_list_find(b, &open, &info));
    assert_info(&info, 10, 5, FERRY_STATE_CREATED, 1);
    assert_true(h_list_find(b, &held, &info));
    assert_info(&info, 100, 3, FERRY_STATE_SEALED, 1);
    assert_true(h_list_find(b, &idle, &info));
    assert_info(&info, 7, 0, FERRY_STATE_SEALED, 0);
    H_OK(ferry_release(b, &held));
    assert_true(h_list_find(b, &held, &info));
    assert_info(&info, 100, 3, FERRY_STATE_SEALED, 0);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* delete of an absent id is ENOENT; of one's own unsealed object ENOTSEALED (it stays). */
H_TEST(delete_of_absent_is_enoent_and_of_unsealed_is_enotsealed)
{
    ferry_client *a = h_connect(d);
    ferry_id missing = h_id("d-missing"), open = h_id("d-open");
    uint8_t *data;
    H_RC(ferry_delete(a, &missing), FERRY_ENOENT);
    H_OK(ferry_create(a, &open, 10, NULL, 0, &data));
    H_RC(ferry_delete(a, &open), FERRY_ENOTSEALED);
    ferry_object_info info;
    assert_true(h_list_find(a, &open, &info));
    H_OK(ferry_seal(a, &open));
    H_OK(ferry_release(a, &open));
    H_OK(ferry_delete(a, &open));
    assert_int_equal(h_contains(a, &open), 0);
    H_RC(ferry_delete(a, &open), FERRY_ENOENT);
    assert_int_equal(h_stats(a).deleted_objects, 1);
    assert_int_equal(h_stats(a).objects, 0);
    ferry_disconnect(a);
}

/* A referenced object that is deleted disappears at once, keeps its bytes for its reader,
 * lets its id be reused, and frees its memory at the last release. */
H_TEST(delete_of_referenced_object_frees_at_last_release)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("d-held");
    put(a, "d-held", MIB, 16);
    ferry_buffer buf;
    H_OK(ferry_get(b, &id, 1, 0, &buf));
    uint64_t before = h_object_bytes(a);

    H_OK(ferry_delete(a, &id));
    assert_int_equal(h_contains(a, &id), 0);
    assert_int_equal(h_contains(b, &id), 0);
    ferry_buffer again;
    H_RC(ferry_get(a, &id, 1, 0, &again), FERRY_ENOENT);
    assert_int_equal(again.status, FERRY_ENOENT);
    ferry_object_info info;
    assert_false(h_list_find(a, &id, &info));
    H_RC(ferry_delete(a, &id), FERRY_ENOENT);
    assert_int_equal(h_object_bytes(a), before); /* still referenced */

    put(a, "d-held", 100, 0); /* the id is free again */
    h_assert_buffer(&buf, &id, MIB, 16);
    H_OK(ferry_release(b, &id));
    h_sync(b);
    /* Freed at the last release, or when the digest taken after its seal is done with it
     * (the hasher holds it while it reads it: 1 run in 20 was still reading here). */
    uint64_t want = before - round64(MIB + 16) + 128, now;
    struct h_wait w;
    for (h_wait_begin(&w, H_EVENT_MS); (now = h_object_bytes(a)) != want && h_wait_next(&w);)
        ;
    assert_int_equal(now, want);
    h_assert_object(b, &id, 100, 0);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A client holding a deleted object puts a new one under the same id: the put's release
 * must drop the reference on the new object, not on the old one it still reads
 * (regression: seal-and-release once released the oldest reference under the id). */
H_TEST(put_over_a_held_deleted_id_releases_the_new_object)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("d-reput");
    put(a, "d-reput", 100, 0);
    ferry_buffer old;
    H_OK(ferry_get(b, &id, 1, 0, &old));
    H_OK(ferry_delete(a, &id));
    put(b, "d-reput", MIB, 0); /* large: create, copy, seal-and-release */
    ferry_object_info info;
    assert_true(h_list_find(a, &id, &info));
    assert_int_equal(info.data_size, MIB);
    assert_int_equal(info.refcount, 0);
    h_assert_buffer(&old, &id, 100, 0); /* the old bytes are still b's to read */
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* evict frees sealed unreferenced objects oldest first until enough, and no others. */
H_TEST(evict_frees_lru_objects_until_enough)
{
    ferry_client *a = h_connect(d);
    ferry_id e1 = h_id("e1"), e2 = h_id("e2"), e3 = h_id("e3"), held = h_id("e-held"),
             open = h_id("e-open");
    uint8_t *data;
    put(a, "e-held", 64 * 1024, 0);
    ferry_buffer buf;
    H_OK(ferry_get(a, &held, 1, 0, &buf));
    H_OK(ferry_create(a, &open, 64 * 1024, NULL, 0, &data));
    put(a, "e1", 64 * 1024, 0);
    put(a, "e2", 64 * 1024, 0);
    put(a, "e3", 64 * 1024, 0);

    uint64_t freed = 0;
    H_OK(ferry_evict(a, 1, &freed));
    assert_int_equal(freed, 64 * 1024);
    assert_int_equal(h_contains(a, &e1), 0);
    assert_int_equal(h_contains(a, &e2), 1);
    H_OK(ferry_evict(a, 64 * 1024 + 1, &freed));
    assert_int_equal(freed, 2 * 64 * 1024);
    assert_int_equal(h_contains(a, &e2) + h_contains(a, &e3), 0);
    H_OK(ferry_evict(a, 1 << 30, &freed));
    assert_int_equal(freed, 0);
    h_assert_buffer(&buf, &held, 64 * 1024, 0);
    ferry_stats s = h_stats(a);
    assert_int_equal(s.evicted_objects, 3);
    assert_int_equal(s.evicted_bytes, 3 * 64 * 1024);
    assert_int_equal(s.objects, 2);
    H_OK(ferry_evict(a, 1, NULL));
    ferry_disconnect(a);
}

/* refresh moves objects to the young end; a missing id is ENOENT, the others are still
 * refreshed. */
H_TEST(refresh_reports_missing_and_still_refreshes_the_others)
{
    ferry_client *a = h_connect(d);
    ferry_id ra = h_id("r-a"), rb = h_id("r-b"), rc = h_id("r-c");
    ferry_id some[2] = {ra, h_id("r-missing")};
    put(a, "r-a", 1000, 0);
    put(a, "r-b", 1000, 0);
    put(a, "r-c", 1000, 0);
    H_RC(ferry_refresh(a, some, 2), FERRY_ENOENT);
    uint64_t freed;
    H_OK(ferry_evict(a, 1, &freed)); /* b is the oldest now */
    assert_int_equal(freed, 1024);
    assert_int_equal(h_contains(a, &rb), 0);
    assert_int_equal(h_contains(a, &ra), 1);
    H_OK(ferry_refresh(a, &rc, 1));
    H_OK(ferry_evict(a, 1, &freed)); /* then a */
    assert_int_equal(h_contains(a, &ra), 0);
    assert_int_equal(h_contains(a, &rc), 1);
    ferry_disconnect(a);
}

/* stats count clients, objects and operations exactly. */
H_TEST(stats_count_clients_objects_and_operations)
{
    ferry_client *a = h_connect(d);
    assert_int_equal(H_WAIT_STAT(a, clients, 1), 1);
    ferry_client *b = h_connect(d);
    assert_int_equal(h_stats(a).clients, 2);
    ferry_id keep = h_id("s-keep"), gone = h_id("s-gone"), open = h_id("s-open");
    uint8_t *data;
    put(a, "s-keep", 10, 0);
    put(a, "s-gone", 10, 0);
    H_OK(ferry_create(b, &open, 10, NULL, 0, &data));
    H_OK(ferry_abort(b, &open));
    H_OK(ferry_delete(b, &gone));
    h_assert_object(b, &keep, 10, 0);
    ferry_buffer buf;
    H_RC(ferry_get(b, &gone, 1, 0, &buf), FERRY_ENOENT);
    ferry_disconnect(b);
    assert_int_equal(H_WAIT_STAT(a, clients, 1), 1);

    ferry_stats s = h_stats(a);
    assert_int_equal(s.capacity_bytes, 64 * MIB);
    assert_int_equal(s.objects, 1);
    assert_int_equal(s.sealed_objects, 1);
    assert_int_equal(s.created_objects, 3);
    assert_int_equal(s.sealed_total, 2);
    assert_int_equal(s.aborted_objects, 1);
    assert_int_equal(s.deleted_objects, 1);
    assert_int_equal(s.gets, 2);
    assert_int_equal(s.get_timeouts, 1);
    assert_int_equal(s.used_bytes, 64);
    assert_int_equal(s.protocol_errors, 0);
    assert_true(s.connections_total >= 2);
    ferry_disconnect(a);
}

/* Reads one notification, waiting at most H_EVENT_MS, and checks it. */
static void expect_event(int fd, int event, const char *name, uint64_t data, uint64_t meta)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, H_EVENT_MS), 1);
    ferry_notification n;
    H_OK(ferry_notification_read(fd, &n));
    ferry_id id = h_id(name);
    assert_int_equal(n.event, event);
    assert_memory_equal(n.id.bytes, id.bytes, FERRY_ID_SIZE);
    assert_int_equal(n.data_size, data);
    assert_int_equal(n.metadata_size, meta);
}

/* One notification per seal, delete (when it happens, not at the last release) and
 * eviction, in order, with sizes; aborts and releases emit nothing. */
H_TEST(subscription_reports_seals_deletes_evictions_in_order)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    int fd = -1;
    H_OK(ferry_subscribe(a, &fd));
    assert_true(fd >= 0);
    assert_int_equal(h_stats(a).subscribers, 1);
    ferry_id z = h_id("n-aborted"), nb = h_id("n-b");
    uint8_t *data;
    H_OK(ferry_create(a, &z, 10, NULL, 0, &data));
    H_OK(ferry_abort(a, &z));
    put(a, "n-a", 10, 2);
    put(a, "n-b", 20, 0);
    expect_event(fd, FERRY_EVENT_SEALED, "n-a", 10, 2);
    expect_event(fd, FERRY_EVENT_SEALED, "n-b", 20, 0);

    ferry_buffer buf;
    H_OK(ferry_get(b, &nb, 1, 0, &buf));
    H_OK(ferry_delete(a, &nb));
    expect_event(fd, FERRY_EVENT_DELETED, "n-b", 20, 0); /* while b still holds it */
    H_OK(ferry_release(b, &nb));
    h_sync(b); /* before the marker below */

    ferry_id na = h_id("n-a");
    H_OK(ferry_delete(a, &na));
    put(a, "n-c", 65536, 0);
    uint64_t freed;
    H_OK(ferry_evict(a, 1, &freed));
    put(a, "n-marker", 1, 0);
    expect_event(fd, FERRY_EVENT_DELETED, "n-a", 10, 2);
    expect_event(fd, FERRY_EVENT_SEALED, "n-c", 65536, 0);
    expect_event(fd, FERRY_EVENT_EVICTED, "n-c", 65536, 0);
    expect_event(fd, FERRY_EVENT_SEALED, "n-marker", 1, 0);

    assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    ferry_notification extra;
    H_RC(ferry_notification_read(fd, &extra), FERRY_EAGAIN);
    close(fd);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

struct batch {
    ferry_put_item *items;
    uint8_t **bufs;
    int *statuses;
    size_t n;
};

/* Item i: id name-i, data of size data[i] with the id's pattern, metadata likewise. */
static void batch_init(struct batch *bt, size_t n, const char *name, const uint64_t *data,
                       const uint64_t *meta)
{
    bt->n = n;
    bt->items = calloc(n, sizeof(*bt->items));
    bt->bufs = calloc(2 * n, sizeof(*bt->bufs));
    bt->statuses = calloc(n, sizeof(*bt->statuses));
    assert_true(bt->items && bt->bufs && bt->statuses);
    for (size_t i = 0; i < n; i++) {
        ferry_put_item *it = &bt->items[i];
        it->id = h_idf("%s-%zu", name, i);
        bt->bufs[2 * i] = h_pattern(data[i], h_seed(&it->id));
        bt->bufs[2 * i + 1] = h_pattern(meta[i], ~h_seed(&it->id));
        it->data = bt->bufs[2 * i];
        it->data_size = data[i];
        it->metadata = bt->bufs[2 * i + 1];
        it->metadata_size = meta[i];
        bt->statuses[i] = 12345;
    }
}

static void batch_free(struct batch *bt)
{
    for (size_t i = 0; i < 2 * bt->n; i++)
        free(bt->bufs[i]);
    free(bt->bufs);
    free(bt->items);
    free(bt->statuses);
}

/* 1000 small objects in one put_many are all stored, sealed, and read back intact. */
H_TEST(put_many_of_1000_small_objects_round_trips)
{
    enum { N = 1000 };
    ferry_client *a = h_connect(d), *b = h_connect(d);
    static uint64_t data[N], meta[N];
    for (size_t i = 0; i < N; i++) {
        data[i] = (i * 37) % 700;
        meta[i] = i % 9;
    }
    struct batch bt;
    batch_init(&bt, N, "pm", data, meta);
    H_OK(ferry_put_many(a, bt.items, N, bt.statuses));
    for (size_t i = 0; i < N; i++)
        assert_int_equal(bt.statuses[i], FERRY_OK);
    assert_true(h_stats(a).staging_bytes > 0);

    static ferry_id ids[N];
    static ferry_buffer out[N];
    for (size_t i = 0; i < N; i++)
        ids[i] = bt.items[i].id;
    H_OK(ferry_get(b, ids, N, 0, out));
    for (size_t i = 0; i < N; i++) {
        h_assert_buffer(&out[i], &ids[i], data[i], meta[i]);
        H_OK(ferry_release(b, &ids[i]));
    }
    ferry_stats s = h_stats(b);
    assert_int_equal(s.objects, N);
    assert_int_equal(s.sealed_objects, N);
    batch_free(&bt);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* put_many with small and large items and duplicates: the duplicates are EEXIST (and the
 * call returns it), every other item is stored intact, the first of a pair wins. */
H_TEST(put_many_mixed_sizes_reports_duplicates_as_eexist)
{
    enum { N = 8 };
    static const uint64_t data[N] = {100, 2 * MIB, 0, 50, 2 * MIB + 1, 3000, 2 * MIB, 10};
    static const uint64_t meta[N] = {10, 0, 5, 0, 3, 0, 0, 1};
    ferry_client *a = h_connect(d), *b = h_connect(d);
    put(b, "pre-existing", 10, 1);
    struct batch bt;
    batch_init(&bt, N, "mix", data, meta);
    bt.items[3].id = bt.items[0].id; /* small duplicate of a small one */
    bt.items[6].id = bt.items[1].id; /* large duplicate of a large one */
    bt.items[7].id = h_id("pre-existing");
    H_RC(ferry_put_many(a, bt.items, N, bt.statuses), FERRY_EEXIST);
    for (size_t i = 0; i < N; i++) {
        int dup = i == 3 || i == 6 || i == 7;
        assert_int_equal(bt.statuses[i], dup ? FERRY_EEXIST : FERRY_OK);
        if (!dup)
            h_assert_object(b, &bt.items[i].id, data[i], meta[i]);
    }
    h_assert_object(b, &bt.items[7].id, 10, 1);
    assert_int_equal(h_stats(b).objects, 6);
    batch_free(&bt);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A client's staging area appears with its first small put and is freed when it leaves. */
H_TEST(staging_area_is_freed_at_disconnect)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("staged");
    assert_int_equal(h_stats(a).staging_bytes, 0);
    uint8_t *data = h_pattern(16, h_seed(&id));
    H_OK(ferry_put(b, &id, data, 16, NULL, 0));
    free(data);
    ferry_stats s = h_stats(a);
    assert_true(s.staging_bytes > 0);
    assert_int_equal(s.used_bytes, s.staging_bytes + 64);
    ferry_disconnect(b);
    assert_int_equal(H_WAIT_STAT(a, staging_bytes, 0), 0);
    assert_int_equal(h_stats(a).used_bytes, 64);
    h_assert_object(a, &id, 16, 0);
    ferry_disconnect(a);
}

/* Connecting where no daemon listens is ECONN, with a reason. */
H_TEST(connect_without_a_daemon_is_econn)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/nobody.sock", d->dir);
    ferry_client *c = NULL;
    H_RC(ferry_connect(path, &c), FERRY_ECONN);
    assert_true(strlen(ferry_errmsg()) > 0);
    ferry_disconnect(NULL);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(create_seal_get_roundtrip_to_another_client),
        T(unsealed_object_is_invisible_until_sealed),
        T(seal_and_abort_by_non_creator_are_eperm),
        T(seal_and_abort_of_missing_id_are_enoent),
        T(abort_frees_the_object_and_its_id),
        T(create_of_existing_id_is_eexist),
        T(create_larger_than_the_arena_is_etoobig),
        T(empty_data_and_empty_objects_round_trip),
        T(used_bytes_rounds_each_object_to_64),
        T(a_creators_pages_hold_no_other_object),
        T(get_same_id_twice_holds_two_references),
        T(release_without_a_reference_is_enoent),
        T(hash_is_equal_for_equal_content_and_differs_otherwise),
        T(digest_is_the_documented_sha256_tree_of_data_then_metadata),
        T(standalone_digest_is_computed_when_asked_not_at_seal),
        T(list_shows_state_refcount_and_sizes),
        T(delete_of_absent_is_enoent_and_of_unsealed_is_enotsealed),
        T(delete_of_referenced_object_frees_at_last_release),
        T(put_over_a_held_deleted_id_releases_the_new_object),
        T(evict_frees_lru_objects_until_enough),
        T(refresh_reports_missing_and_still_refreshes_the_others),
        T(stats_count_clients_objects_and_operations),
        T(subscription_reports_seals_deletes_evictions_in_order),
        T(put_many_of_1000_small_objects_round_trips),
        T(put_many_mixed_sizes_reports_duplicates_as_eexist),
        T(staging_area_is_freed_at_disconnect),
        T(connect_without_a_daemon_is_econn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
