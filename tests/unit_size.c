/* Unit tests of sizes as people write them (common/size.c): plain bytes, K/M/G/T with B or iB,
 * fractions of a unit, and what is refused; sizes printed with units. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/size.h"
#include "ferry.h"

static uint64_t parsed(const char *text)
{
    uint64_t v = 0;
    assert_int_equal(size_parse(text, &v), 0);
    return v;
}

static void test_units_are_powers_of_1024(void **state)
{
    assert_int_equal(parsed("4096"), 4096);
    assert_int_equal(parsed("64K"), 65536);
    assert_int_equal(parsed("64k"), 65536);
    assert_int_equal(parsed("64KiB"), 65536);
    assert_int_equal(parsed("64KB"), 65536);
    assert_int_equal(parsed("3M"), 3ull << 20);
    assert_int_equal(parsed("2GiB"), 2ull << 30);
    assert_int_equal(parsed("1T"), 1ull << 40);
}

static void test_fractions_of_a_unit_round_down_to_bytes(void **state)
{
    assert_int_equal(parsed("1.5G"), 3ull << 29);
    assert_int_equal(parsed("0.5K"), 512);
    assert_int_equal(parsed("1.0009K"), 1024); /* 1024.92 bytes */
    assert_int_equal(parsed("2.25MiB"), 9ull << 18);
}

static void test_what_is_refused(void **state)
{
    static const char *const bad[] = {"",      "-1",   "K",  "1.5",       "12X",
                                      "1MiBs", "1Kb2", " 1", "16777216T", "99999999999999999999"};
    uint64_t v;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(size_parse(bad[i], &v), FERRY_EINVAL);
    assert_int_equal(parsed("16777215T"), 16777215ull << 40);
}

static void test_sizes_print_with_units(void **state)
{
    char buf[SIZE_FORMAT_LEN];
    assert_string_equal(size_format(512, buf, sizeof(buf)), "512 B");
    assert_string_equal(size_format(1536, buf, sizeof(buf)), "1.50 KiB");
    assert_string_equal(size_format(64ull << 20, buf, sizeof(buf)), "64.0 MiB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units_are_powers_of_1024),
        cmocka_unit_test(test_fractions_of_a_unit_round_down_to_bytes),
        cmocka_unit_test(test_what_is_refused),
        cmocka_unit_test(test_sizes_print_with_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
