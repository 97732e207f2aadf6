/* Unit tests of latency histograms (common/hist.c): a duration lands in the first bucket whose
 * bound it does not exceed, past the last bound in the overflow bucket; count and sum add up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/hist.h"

static void test_bounds_rise_from_10us_to_10s(void **state)
{
    assert_int_equal(hist_bound_ns(0), 10000);
    assert_int_equal(hist_bound_ns(HIST_BOUNDS - 1), 10000000000ull);
    for (unsigned i = 1; i < HIST_BOUNDS; i++)
        assert_true(hist_bound_ns(i) > hist_bound_ns(i - 1));
    assert_int_equal(hist_bound_ns(HIST_BOUNDS), UINT64_MAX);
}

static void test_a_bound_belongs_to_its_own_bucket(void **state)
{
    struct hist h = {0};

    hist_add(&h, 0);
    hist_add(&h, 10000);       /* on the first bound */
    hist_add(&h, 10001);       /* just past it */
    hist_add(&h, 1000000);     /* 1 ms, a bound */
    hist_add(&h, 20000000000); /* 20 s: past the last */
    assert_int_equal(h.bucket[0], 2);
    assert_int_equal(h.bucket[1], 1);
    unsigned ms = 0;
    while (hist_bound_ns(ms) != 1000000)
        ms++;
    assert_int_equal(h.bucket[ms], 1);
    assert_int_equal(h.bucket[HIST_BOUNDS], 1);
    assert_int_equal(h.count, 5);
    assert_int_equal(h.sum_ns, 10000 + 10001 + 1000000 + 20000000000ull);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounds_rise_from_10us_to_10s),
        cmocka_unit_test(test_a_bound_belongs_to_its_own_bucket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
