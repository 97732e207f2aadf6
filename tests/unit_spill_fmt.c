/* Unit tests of the spill directory's group headers (store/spill_fmt.c): what is written reads
 * back, names included; a flipped bit, another version, an entry outside its group or an
 * empty group is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/mac.h"
#include "store/spill_fmt.h"

static struct spill_entry entries[3];

/* A group of three objects (one named with the longest name) encoded into a new buffer. */
static uint8_t *three(struct spill_group *g)
{
    uint64_t pos;

    memset(entries, 0, sizeof(entries));
    for (int i = 0; i < 3; i++) {
        memset(entries[i].id.bytes, 'a' + i, FERRY_ID_SIZE);
        entries[i].data_size = 1000u * (i + 1);
        entries[i].metadata_size = 7;
        memset(entries[i].digest, 0xd0 + i, DIGEST_LEN);
        entries[i].created_ns = 1700000000000000000ull + i;
    }
    memset(entries[1].name, 'n', FERRY_NAME_MAX);
    entries[2].flags = SPILL_ENTRY_DELETED;
    *g = (struct spill_group){.seq = 42, .n = 3};
    g->hdr_len = spill_hdr_len(entries, 3);
    pos = g->hdr_len;
    for (int i = 0; i < 3; i++) {
        entries[i].payload_off = pos;
        pos += (entries[i].data_size + entries[i].metadata_size + 63) / 64 * 64;
    }
    g->group_len = spill_round(pos);
    uint8_t *buf = malloc(g->hdr_len);
    assert_non_null(buf);
    spill_hdr_encode(buf, g, entries);
    return buf;
}

static void test_a_header_reads_back(void **state)
{
    struct spill_group g, back;
    struct spill_entry e[3];
    uint8_t *buf = three(&g);

    assert_int_equal(g.hdr_len % SPILL_BLOCK, 0);
    assert_int_equal(spill_hdr_decode_fixed(buf, SPILL_BLOCK, &back), 0);
    assert_int_equal(back.n, 3);
    assert_int_equal(back.seq, 42);
    assert_int_equal(back.hdr_len, g.hdr_len);
    assert_int_equal(back.group_len, g.group_len);
    assert_int_equal(spill_hdr_decode(buf, &back, e), 0);
    for (int i = 0; i < 3; i++)
        assert_true(spill_entry_equal(&e[i], &entries[i]));
    assert_int_equal(strlen(e[1].name), FERRY_NAME_MAX);
    assert_int_equal(e[2].flags, SPILL_ENTRY_DELETED);
    free(buf);
}

static void test_a_flipped_bit_anywhere_is_refused(void **state)
{
    struct spill_group g, back;
    struct spill_entry e[3];
    uint8_t *buf = three(&g);

    for (uint64_t at = SPILL_FIXED_SIZE; at < g.hdr_len; at += 97) {
        buf[at] ^= 0x10;
        assert_int_equal(spill_hdr_decode_fixed(buf, SPILL_BLOCK, &back), 0);
        assert_int_equal(spill_hdr_decode(buf, &back, e), FERRY_EPROTO);
        buf[at] ^= 0x10;
    }
    assert_int_equal(spill_hdr_decode(buf, &g, e), 0);
    free(buf);
}

/* A signed header verifies with its key where it was signed, and nowhere else: not with another
 * key, at another offset or in another segment, nor with a bit of its MAC or entries changed. */
static void test_a_signed_header_verifies_only_where_it_was_signed(void **state)
{
    struct spill_group g;
    uint8_t key[MAC_LEN], other[MAC_LEN];
    uint8_t *buf = three(&g);

    memset(key, 7, sizeof(key));
    memset(other, 8, sizeof(other));
    assert_int_equal(spill_hdr_verify(buf, g.hdr_len, key, 3, 8192), FERRY_EAUTH); /* unsigned */
    assert_int_equal(spill_hdr_sign(buf, g.hdr_len, key, 3, 8192), 0);
    assert_int_equal(spill_hdr_verify(buf, g.hdr_len, key, 3, 8192), 0);
    assert_int_equal(spill_hdr_verify(buf, g.hdr_len, other, 3, 8192), FERRY_EAUTH);
    assert_int_equal(spill_hdr_verify(buf, g.hdr_len, key, 3, 0), FERRY_EAUTH);
    assert_int_equal(spill_hdr_verify(buf, g.hdr_len, key, 4, 8192), FERRY_EAUTH);
    for (uint64_t at = 0; at < g.hdr_len; at += 61) {
        buf[at] ^= 0x01;
        assert_int_equal(spill_hdr_verify(buf, g.hdr_len, key, 3, 8192), FERRY_EAUTH);
        buf[at] ^= 0x01;
    }
    assert_int_equal(spill_hdr_verify(buf, g.hdr_len, key, 3, 8192), 0);
    free(buf);
    (void)state;
}

static void test_other_versions_and_shapes_are_refused(void **state)
{
    struct spill_group g, back;
    uint8_t *buf = three(&g), zero[SPILL_BLOCK] = {0};

    assert_int_equal(spill_hdr_decode_fixed(zero, sizeof(zero), &back), FERRY_EPROTO);
    assert_int_equal(spill_hdr_decode_fixed(buf, SPILL_FIXED_SIZE - 1, &back), FERRY_EPROTO);
    buf[8] = SPILL_VERSION - 1; /* version */
    assert_int_equal(spill_hdr_decode_fixed(buf, SPILL_BLOCK, &back), FERRY_EPROTO);
    buf[8] = SPILL_VERSION;
    buf[12] = 0; /* n = 0 */
    assert_int_equal(spill_hdr_decode_fixed(buf, SPILL_BLOCK, &back), FERRY_EPROTO);
    buf[12] = 3;
    buf[24] = 1; /* hdr_len not a multiple of a block */
    assert_int_equal(spill_hdr_decode_fixed(buf, SPILL_BLOCK, &back), FERRY_EPROTO);
    free(buf);
}

static void test_an_entry_outside_its_group_is_refused(void **state)
{
    struct spill_group g;
    struct spill_entry e[3];
    uint8_t *buf;

    buf = three(&g);
    free(buf);
    entries[2].data_size = g.group_len; /* past the group's end */
    buf = malloc(g.hdr_len);
    spill_hdr_encode(buf, &g, entries);
    assert_int_equal(spill_hdr_decode(buf, &g, e), FERRY_EPROTO);
    entries[2].data_size = 1;
    entries[2].payload_off = 0; /* inside the header */
    spill_hdr_encode(buf, &g, entries);
    assert_int_equal(spill_hdr_decode(buf, &g, e), FERRY_EPROTO);
    entries[2].payload_off = g.hdr_len;
    entries[2].metadata_size = UINT64_MAX; /* sizes that overflow */
    spill_hdr_encode(buf, &g, entries);
    assert_int_equal(spill_hdr_decode(buf, &g, e), FERRY_EPROTO);
    free(buf);
}

static void test_the_largest_header_fits_its_bound(void **state)
{
    static struct spill_entry many[SPILL_ENTRIES_MAX];

    for (uint32_t i = 0; i < SPILL_ENTRIES_MAX; i++)
        memset(many[i].name, 'x', FERRY_NAME_MAX);
    assert_int_equal(spill_hdr_len(many, SPILL_ENTRIES_MAX), SPILL_HDR_MAX);
    assert_int_equal(spill_hdr_len(many, 1), SPILL_BLOCK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_header_reads_back),
        cmocka_unit_test(test_a_flipped_bit_anywhere_is_refused),
        cmocka_unit_test(test_a_signed_header_verifies_only_where_it_was_signed),
        cmocka_unit_test(test_other_versions_and_shapes_are_refused),
        cmocka_unit_test(test_an_entry_outside_its_group_is_refused),
        cmocka_unit_test(test_the_largest_header_fits_its_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
