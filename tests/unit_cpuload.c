/* Unit test of common/cpuload.c: polling is called off when runnable threads outnumber the
 * CPUs (regression guard: polling under oversubscription turned each request into a wait
 * for the scheduler tick, ~4 ms). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "common/cpuload.h"

static atomic_int stop;

static void *spin(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop))
        ;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_no_polling_when_oversubscribed(void **state)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t threads[64];
    int n = (int)(cpus + 2 < 64 ? cpus + 2 : 64), verdict = 1;
    double deadline = now_s() + 2.0;

    (void)state;
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, spin, NULL), 0);
    /* The verdict is cached for 10 ms and the kernel's count is instantaneous: poll. */
    while (verdict && now_s() < deadline) {
        usleep(20000);
        verdict = cpuload_can_poll();
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    assert_int_equal(verdict, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_polling_when_oversubscribed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
