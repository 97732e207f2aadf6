/* Unit tests of the content digest (common/digest.c): roots of fixed objects against vectors
 * computed independently (python3 hashlib, the script in the comment below), chunk boundaries,
 * leaves computed in pieces, the sizes bound into the root, and hex. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/digest.h"
#include "ferry.h"

/* The vectors come from this script (python3), over the bytes b[i] = (7 * i + 3) & 255:
 *   C = 1 << 20
 *   def root(b, ds, ms):
 *       n = max(1, (len(b) + C - 1) // C)
 *       L = b''.join(sha256(b'\0' + pack('<Q', i) + b[i*C:(i+1)*C]).digest() for i in range(n))
 *       return sha256(b'\1' + pack('<QQ', ds, ms) + L).hexdigest() */
static const struct vector {
    uint64_t data_size, metadata_size;
    const char *root;
} VECTORS[] = {
    {0, 0, "2fb93db45cb4a25c74cdaa691f5abcf0bb179d1b26255ed479c1af02d91430aa"},
    {3, 0, "74074c090277b3187b13b75727a65e393260e9904110d8ceabb5f71ee8276bee"},
    {0, 3, "36e704ac66d197b02ebab18dcb5ef7d8e9d223ddc52b74c9d31ff100efc2a0d9"},
    {1u << 20, 0, "96b54d5471e9c153596b8b0624a6f63a350d9662b3c5619bdc7272e254a62e55"},
    {(1u << 20) - 1, 1, "663e0efea5125a4b8a42a1bdbbb27d149b7fea9bd2f17f150393b82ad4f8e525"},
    {1u << 20, 1, "6a5dd5454df3a4b7f3bdcda241bdab0afaedc94e370cb7fc47bca918535875f7"},
    {(2u << 20) - 5, (1u << 20) + 5,
     "82d5837db2a72f9fddcf4e3ccc752fcce4877dd2849d4eb952ee6057b0a31983"},
};
/* leaf_0 of "\x03\x0a\x11" (3 bytes), and of the first full chunk. */
static const char LEAF0_3[] = "56cbf7484c9c39db6b1aa916f1ef2cac657094eb6ca4bd605a4551cae09ea19f";
static const char LEAF0_FULL[] = "98d05100b373674c97589c00f2e70bab10b197a9e1ba75d5da22c521c4c4627a";

static uint8_t *pattern(uint64_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    assert_non_null(b);
    for (uint64_t i = 0; i < n; i++)
        b[i] = (uint8_t)(7 * i + 3);
    return b;
}

static void assert_hex(const uint8_t d[DIGEST_LEN], const char *want)
{
    char hex[DIGEST_HEX + 1];
    digest_hex(d, hex);
    assert_string_equal(hex, want);
}

static void test_roots_match_independent_vectors(void **state)
{
    for (size_t v = 0; v < sizeof(VECTORS) / sizeof(VECTORS[0]); v++) {
        const struct vector *t = &VECTORS[v];
        uint8_t *b = pattern(t->data_size + t->metadata_size), root[DIGEST_LEN];
        assert_int_equal(digest_object(b, t->data_size, t->metadata_size, root), 0);
        assert_hex(root, t->root);
        free(b);
    }
}

static void test_leaves_match_independent_vectors(void **state)
{
    uint8_t *b = pattern(1u << 20), leaf[DIGEST_LEN];
    assert_int_equal(digest_leaf(0, b, 3, leaf), 0);
    assert_hex(leaf, LEAF0_3);
    assert_int_equal(digest_leaf(0, b, 1u << 20, leaf), 0);
    assert_hex(leaf, LEAF0_FULL);
    free(b);
}

/* Chunk counts and lengths at the boundaries; leaves computed in pieces (as the threads do)
 * give the same root as one pass. */
static void test_chunk_boundaries(void **state)
{
    const uint64_t C = DIGEST_CHUNK, size = 3 * C + 17;
    uint8_t *b = pattern(size), *leaves = calloc(4, DIGEST_LEN), root[DIGEST_LEN],
            whole[DIGEST_LEN];

    assert_int_equal(digest_leaves(0), 1);
    assert_int_equal(digest_leaves(1), 1);
    assert_int_equal(digest_leaves(C), 1);
    assert_int_equal(digest_leaves(C + 1), 2);
    assert_int_equal(digest_chunk_len(0, 0), 0);
    assert_int_equal(digest_chunk_len(C + 1, 0), C);
    assert_int_equal(digest_chunk_len(C + 1, 1), 1);
    assert_int_equal(digest_chunk_len(C, 1), 0);
    assert_non_null(leaves);
    assert_int_equal(digest_leaves_of(b, size, 2, 2, leaves + 2 * DIGEST_LEN), 0);
    assert_int_equal(digest_leaves_of(b, size, 0, 2, leaves), 0);
    assert_int_equal(digest_root(size - 5, 5, leaves, 4, root), 0);
    assert_int_equal(digest_object(b, size - 5, 5, whole), 0);
    assert_memory_equal(root, whole, DIGEST_LEN);
    free(leaves);
    free(b);
}

/* Moving the data/metadata boundary, a byte, or a chunk's place changes the root. */
static void test_sizes_bytes_and_places_are_bound(void **state)
{
    const uint64_t size = 2 * DIGEST_CHUNK;
    uint8_t *b = pattern(size), r0[DIGEST_LEN], r1[DIGEST_LEN], l0[DIGEST_LEN], l1[DIGEST_LEN];

    assert_int_equal(digest_object(b, size, 0, r0), 0);
    assert_int_equal(digest_object(b, size - 1, 1, r1), 0);
    assert_memory_not_equal(r0, r1, DIGEST_LEN);
    b[size - 1] ^= 1;
    assert_int_equal(digest_object(b, size, 0, r1), 0);
    assert_memory_not_equal(r0, r1, DIGEST_LEN);
    assert_int_equal(digest_leaf(0, b, 64, l0), 0);
    assert_int_equal(digest_leaf(1, b, 64, l1), 0);
    assert_memory_not_equal(l0, l1, DIGEST_LEN);
    free(b);
}

/* A leaf taken in pieces as bytes come (the receiver's stream) is the leaf taken at once, for
 * any cut, an empty chunk and another index included; a stream freed unended leaks nothing. */
static void test_a_streamed_leaf_is_the_leaf(void **state)
{
    static uint8_t chunk[65536 + 7];
    const size_t cuts[] = {1, 1448, 4096, 65536, sizeof(chunk)};
    uint8_t whole[DIGEST_LEN], streamed[DIGEST_LEN];
    struct digest_stream *s;

    (void)state;
    for (size_t i = 0; i < sizeof(chunk); i++)
        chunk[i] = (uint8_t)(i * 131 + 7);
    for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
        assert_int_equal(digest_leaf(3, chunk, sizeof(chunk), whole), 0);
        assert_int_equal(digest_stream_start(&s, 3), 0);
        for (size_t at = 0; at < sizeof(chunk); at += cuts[c])
            assert_int_equal(
                digest_stream_add(s, chunk + at,
                                  sizeof(chunk) - at < cuts[c] ? sizeof(chunk) - at : cuts[c]),
                0);
        assert_int_equal(digest_stream_end(s, streamed), 0);
        assert_memory_equal(whole, streamed, DIGEST_LEN);
    }
    assert_int_equal(digest_leaf(0, chunk, 0, whole), 0);
    assert_int_equal(digest_stream_start(&s, 0), 0);
    assert_int_equal(digest_stream_end(s, streamed), 0);
    assert_memory_equal(whole, streamed, DIGEST_LEN);
    assert_int_equal(digest_stream_start(&s, 1), 0);
    assert_int_equal(digest_stream_add(s, chunk, 10), 0);
    assert_int_equal(digest_stream_end(s, streamed), 0);
    assert_int_equal(digest_leaf(0, chunk, 10, whole), 0);
    assert_memory_not_equal(whole, streamed, DIGEST_LEN); /* the index is bound */
    assert_int_equal(digest_stream_start(&s, 0), 0);
    digest_stream_free(s);
    digest_stream_free(NULL);
}

static void test_hex_round_trips_and_refuses(void **state)
{
    uint8_t d[DIGEST_LEN], back[DIGEST_LEN];
    char hex[DIGEST_HEX + 1];
    for (unsigned i = 0; i < DIGEST_LEN; i++)
        d[i] = (uint8_t)(i * 37 + 1);
    digest_hex(d, hex);
    assert_int_equal(digest_parse(hex, strlen(hex), back), 0);
    assert_memory_equal(d, back, DIGEST_LEN);
    assert_int_equal(digest_parse(hex, 16, back), FERRY_EINVAL);
    hex[5] = 'g';
    assert_int_equal(digest_parse(hex, DIGEST_HEX, back), FERRY_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roots_match_independent_vectors),
        cmocka_unit_test(test_leaves_match_independent_vectors),
        cmocka_unit_test(test_chunk_boundaries),
        cmocka_unit_test(test_sizes_bytes_and_places_are_bound),
        cmocka_unit_test(test_a_streamed_leaf_is_the_leaf),
        cmocka_unit_test(test_hex_round_trips_and_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
