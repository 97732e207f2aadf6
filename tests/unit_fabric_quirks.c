/*
 * unit_fabric_quirks.c - which libfabric workarounds are on (quirks/quirks.h): the gates by
 * version and provider, FERRY_FABRIC_QUIRKS's switch, and what a program without the recv
 * interposer (every one but ferryd, this test included) reports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transport/fabric/fabric_int.h"

#define RECV QUIRK_BIT(QUIRK_RECV)
#define ERRNO QUIRK_BIT(QUIRK_ERRNO)
#define SHM_LOCK QUIRK_BIT(QUIRK_SHM_LOCK)
#define WATCHDOG QUIRK_BIT(QUIRK_WATCHDOG)

/* Each gate: on for the releases with the bug, off from the first release with the fix, and
 * never for a provider the bug is not in. */
static void test_gates(void **state)
{
    assert_int_equal(quirks_needed(FI_VERSION(1, 17), "tcp;ofi_rxm"), RECV | ERRNO);
    assert_int_equal(quirks_needed(FI_VERSION(1, 17), "tcp"), RECV | ERRNO);
    assert_int_equal(quirks_needed(FI_VERSION(2, 1), "tcp;ofi_rxm"), RECV | ERRNO);
    assert_int_equal(quirks_needed(FI_VERSION(2, 2), "tcp;ofi_rxm"), RECV); /* 86ae6d745 */
    assert_int_equal(quirks_needed(FI_VERSION(2, 6), "tcp;ofi_rxm"), RECV); /* no fix yet */
    assert_int_equal(quirks_needed(FI_VERSION(1, 17), "shm"), SHM_LOCK | WATCHDOG);
    assert_int_equal(quirks_needed(FI_VERSION(2, 4), "shm"), SHM_LOCK | WATCHDOG);
    assert_int_equal(quirks_needed(FI_VERSION(2, 5), "shm"), 0); /* 488dc58b5: no lock */
    assert_int_equal(quirks_needed(FI_VERSION(1, 17), "verbs;ofi_rxm"), 0);
    assert_int_equal(quirks_needed(FI_VERSION(1, 17), "efa"), 0);
    assert_int_equal(quirks_needed(FI_VERSION(1, 17), "cxi"), 0);
    assert_int_equal(quirks_needed(FI_VERSION(1, 17), NULL), 0);
}

/* The switch turns one off or on, "none" all off; the watchdog never runs without the guard;
 * an unknown name changes nothing and says so. */
static void test_switch(void **state)
{
    uint32_t all = SHM_LOCK | WATCHDOG, m = 0;
    assert_int_equal(quirks_switch(all, NULL, &m), 0);
    assert_int_equal(m, all);
    assert_int_equal(quirks_switch(all, "", &m), 0);
    assert_int_equal(m, all);
    assert_int_equal(quirks_switch(all, "-watchdog", &m), 0);
    assert_int_equal(m, SHM_LOCK);
    assert_int_equal(quirks_switch(all, "-shm_lock", &m), 0);
    assert_int_equal(m, 0); /* the watchdog goes with it */
    assert_int_equal(quirks_switch(all, "none", &m), 0);
    assert_int_equal(m, 0);
    assert_int_equal(quirks_switch(RECV | ERRNO, "-errno,+watchdog", &m), 0);
    assert_int_equal(m, RECV); /* a watchdog without the guard: nothing to watch */
    assert_int_equal(quirks_switch(0, "none,+shm_lock,watchdog", &m), 0);
    assert_int_equal(m, all);
    m = 12345;
    assert_int_equal(quirks_switch(all, "-watchdog,-bogus", &m), FERRY_EINVAL);
    assert_int_equal(m, 12345);
    assert_int_equal(quirks_switch(all, "-", &m), FERRY_EINVAL);
}

/* What a process runs with: the gate, less what the environment switches off, less recv here
 * (only ferryd links the interposer); quirks_enabled and the report agree. */
struct seen {
    uint64_t on[QUIRK_N];
    int n;
};

static void collect(void *arg, const char *name, int kind, const char *help, uint64_t value)
{
    struct seen *s = arg;
    for (int q = 0; q < QUIRK_N; q++) {
        char want[64];
        snprintf(want, sizeof(want), "fabric_quirk_%s_on", quirks_name(q));
        if (strcmp(name, want) == 0) {
            assert_int_equal(kind, FERRY_STAT_GAUGE);
            s->on[q] = value;
        }
    }
    s->n++;
}

static void test_init(void **state)
{
    struct seen s = {0};
    assert_int_equal(quirks_recv_linked(), 0);
    unsetenv("FERRY_FABRIC_QUIRKS");
    assert_int_equal(quirks_init(FI_VERSION(1, 17), "tcp;ofi_rxm"), ERRNO);
    assert_int_equal(quirks_enabled(QUIRK_RECV), 0);
    assert_int_equal(quirks_enabled(QUIRK_ERRNO), 1);
    setenv("FERRY_FABRIC_QUIRKS", "-watchdog", 1);
    assert_int_equal(quirks_init(FI_VERSION(1, 17), "shm"), SHM_LOCK);
    assert_int_equal(quirks_enabled(QUIRK_WATCHDOG), 0);
    setenv("FERRY_FABRIC_QUIRKS", "-nonsense", 1); /* ignored, logged */
    assert_int_equal(quirks_init(FI_VERSION(1, 17), "shm"), SHM_LOCK | WATCHDOG);
    quirks_report(collect, &s);
    assert_int_equal(s.n, 2 * QUIRK_N);
    assert_int_equal(s.on[QUIRK_SHM_LOCK], 1);
    assert_int_equal(s.on[QUIRK_RECV], 0);
    quirks_off(QUIRK_SHM_LOCK); /* the guard found a layout it does not know */
    memset(&s, 0, sizeof(s));
    quirks_report(collect, &s);
    assert_int_equal(s.on[QUIRK_SHM_LOCK], 0);
    unsetenv("FERRY_FABRIC_QUIRKS");
}

/* The errno workaround clears errno where it is on, counts a stale EAGAIN, and leaves errno
 * alone where it is off. */
static void test_errno(void **state)
{
    uint64_t before = quirks_count(QUIRK_ERRNO);
    quirks_init(FI_VERSION(1, 17), "tcp;ofi_rxm");
    errno = EAGAIN;
    quirks_before_call();
    assert_int_equal(errno, 0);
    assert_int_equal(quirks_count(QUIRK_ERRNO), before + 1);
    quirks_init(FI_VERSION(2, 2), "tcp;ofi_rxm");
    errno = EAGAIN;
    quirks_before_call();
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(quirks_count(QUIRK_ERRNO), before + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gates),
        cmocka_unit_test(test_switch),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_errno),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
