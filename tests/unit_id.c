/* Unit tests of printable ids (common/id.c): the hex rule, names through SHA-1, counted names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ferry.h"

static void test_forty_hex_digits_are_the_raw_id(void **state)
{
    ferry_id id;
    char text[41];

    assert_int_equal(ferry_id_parse("000102030405060708090A0b0c0d0e0f10111213", &id), 0);
    for (int i = 0; i < FERRY_ID_SIZE; i++)
        assert_int_equal(id.bytes[i], i);
    ferry_id_format(&id, text);
    assert_string_equal(text, "000102030405060708090a0b0c0d0e0f10111213");
}

static void test_names_are_hashed_with_sha1(void **state)
{
    ferry_id id, again;
    char text[41];

    assert_int_equal(ferry_id_parse("abc", &id), 0); /* FIPS 180 test vector */
    ferry_id_format(&id, text);
    assert_string_equal(text, "a9993e364706816aba3e25717850c26c9cd0d89d");
    assert_int_equal(ferry_id_from_name("abc", 3, &again), 0);
    assert_memory_equal(&id, &again, sizeof(id));
    /* 40 characters that are not all hex digits are a name too. */
    assert_int_equal(ferry_id_parse("g000000000000000000000000000000000000000", &id), 0);
    assert_int_equal(ferry_id_from_name("g000000000000000000000000000000000000000", 40, &again), 0);
    assert_memory_equal(&id, &again, sizeof(id));
}

static void test_counted_names_may_hold_nul(void **state)
{
    ferry_id a, b;

    assert_int_equal(ferry_id_parse_n("a\0b", 3, &a), 0);
    assert_int_equal(ferry_id_from_name("a\0b", 3, &b), 0);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_int_equal(ferry_id_parse_n("a\0c", 3, &b), 0);
    assert_memory_not_equal(&a, &b, sizeof(a));
    assert_int_equal(ferry_id_parse_n("abcdef", 3, &a), 0); /* only len bytes count */
    assert_int_equal(ferry_id_parse("abc", &b), 0);
    assert_memory_equal(&a, &b, sizeof(a));
}

static void test_empty_and_null_refused(void **state)
{
    ferry_id id;

    assert_int_equal(ferry_id_parse("", &id), FERRY_EINVAL);
    assert_int_equal(ferry_id_parse_n("x", 0, &id), FERRY_EINVAL);
    assert_int_equal(ferry_id_parse(NULL, &id), FERRY_EINVAL);
    assert_int_equal(ferry_id_from_name(NULL, 1, &id), FERRY_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forty_hex_digits_are_the_raw_id),
        cmocka_unit_test(test_names_are_hashed_with_sha1),
        cmocka_unit_test(test_counted_names_may_hold_nul),
        cmocka_unit_test(test_empty_and_null_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
