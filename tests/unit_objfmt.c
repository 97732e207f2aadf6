/* unit_objfmt - the layout of put_object's objects (python/_ferry/objfmt.c): placement,
 * encoding, and the decoder's refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "objfmt.h"

static void test_layout_aligns_every_part(void **state)
{
    struct objfmt_part p[4] = {{.length = 10}, {.length = 64}, {.length = 0}, {.length = 1}};
    uint64_t size;

    assert_int_equal(objfmt_layout(p, 4, &size), 0);
    assert_int_equal(p[0].offset, 0);
    assert_int_equal(p[1].offset, 64);
    assert_int_equal(p[2].offset, 128);
    assert_int_equal(p[3].offset, 128);
    assert_int_equal(size, 129);
}

static void test_layout_refuses_overflow_and_nothing(void **state)
{
    struct objfmt_part p[2] = {{.length = UINT64_MAX - 10}, {.length = 1}};
    uint64_t size;

    assert_int_equal(objfmt_layout(p, 2, &size), -1);
    assert_int_equal(objfmt_layout(p, 0, &size), -1);
}

static void test_round_trip(void **state)
{
    struct objfmt_part p[3] = {{.length = 5}, {.length = 100}, {.length = 7}};
    uint8_t meta[64];
    uint64_t size;
    size_t n;

    assert_int_equal(objfmt_header_size(3), 64);
    assert_int_equal(objfmt_layout(p, 3, &size), 0);
    objfmt_encode(p, 3, meta);
    assert_memory_equal(meta, "FERRYPK5\x01\0\0\0\x03\0\0\0", 16);
    assert_int_equal(objfmt_check(meta, sizeof(meta), size, &n, NULL), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < 3; i++) {
        struct objfmt_part q = objfmt_part_at(meta, i);
        assert_int_equal(q.offset, p[i].offset);
        assert_int_equal(q.length, p[i].length);
    }
}

/* Encodes parts as given (no layout) and checks the decoder's verdict. */
static int check_parts(const struct objfmt_part *p, size_t n, uint64_t size)
{
    uint8_t meta[16 + 4 * 16];
    size_t got;

    objfmt_encode(p, n, meta);
    return objfmt_check(meta, objfmt_header_size(n), size, &got, NULL);
}

static void test_refusals(void **state)
{
    struct objfmt_part good[2] = {{0, 10}, {64, 10}};
    struct objfmt_part overlap[2] = {{0, 65}, {64, 10}};
    struct objfmt_part reversed[2] = {{64, 10}, {0, 10}};
    struct objfmt_part outside[1] = {{0, 75}};
    struct objfmt_part far[1] = {{UINT64_MAX, 1}};
    uint8_t meta[48];
    const char *why = NULL;
    size_t n;

    assert_int_equal(check_parts(good, 2, 74), 0);
    assert_int_equal(check_parts(good, 2, 73), -1);
    assert_int_equal(check_parts(overlap, 2, 100), -1);
    assert_int_equal(check_parts(reversed, 2, 100), -1);
    assert_int_equal(check_parts(outside, 1, 74), -1);
    assert_int_equal(check_parts(far, 1, UINT64_MAX), -1);
    objfmt_encode(good, 2, meta);
    assert_int_equal(objfmt_check(meta, 47, 100, &n, &why), -1); /* wrong length */
    assert_non_null(why);
    assert_int_equal(objfmt_check(meta, 15, 100, &n, NULL), -1);
    meta[8] = 2; /* another version */
    assert_int_equal(objfmt_check(meta, 48, 100, &n, NULL), -1);
    meta[8] = 1;
    meta[0] = 'X'; /* not the magic */
    assert_int_equal(objfmt_check(meta, 48, 100, &n, NULL), -1);
    memset(meta, 0, sizeof(meta));
    memcpy(meta, "FERRYPK5\x01\0\0\0\0\0\0\0", 16); /* no parts */
    assert_int_equal(objfmt_check(meta, 16, 100, &n, NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_aligns_every_part),
        cmocka_unit_test(test_layout_refuses_overflow_and_nothing),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
