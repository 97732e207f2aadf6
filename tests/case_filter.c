/*
 * case_filter.c - linked into every cmocka test binary: FERRY_TEST_CASE=NAME runs only the case
 * NAME (ctest runs each case as a test of its own, tests/CMakeLists.txt); unset, every case.
 *
 * It runs before main, so that no test file has to ask for it; cmocka only keeps the pointer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

__attribute__((constructor)) static void case_filter(void)
{
    const char *name = getenv("FERRY_TEST_CASE");

    if (name && *name)
        cmocka_set_test_filter(name);
}
