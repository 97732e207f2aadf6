/*
 * unit_notify.c - the service manager's datagrams (server/notify.c): a stopping daemon's
 * EXTEND_TIMEOUT_USEC comes at the first step, then at most once per NOTIFY_EXTEND_EVERY_NS,
 * and always at the final one, with the STATUS= line in the same datagram. The test binds
 * the $NOTIFY_SOCKET itself and passes the clock, so no case waits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "ferry.h"
#include "server/notify.h"

#define SEC 1000000000ull

struct manager {
    char dir[64];
    char path[96];
    int fd;
};

static int setup(void **state)
{
    struct manager *m = calloc(1, sizeof(*m));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    assert_non_null(m);
    snprintf(m->dir, sizeof(m->dir), "/tmp/unit_notify.XXXXXX");
    assert_non_null(mkdtemp(m->dir));
    snprintf(m->path, sizeof(m->path), "%s/notify", m->dir);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", m->path);
    m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(m->fd >= 0);
    assert_int_equal(bind(m->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setenv("NOTIFY_SOCKET", m->path, 1);
    *state = m;
    return 0;
}

static int teardown(void **state)
{
    struct manager *m = *state;

    unsetenv("NOTIFY_SOCKET");
    close(m->fd);
    unlink(m->path);
    rmdir(m->dir);
    free(m);
    return 0;
}

/* The next datagram the manager got, "" when none is waiting. */
static const char *received(struct manager *m)
{
    static char buf[512];
    ssize_t n = recv(m->fd, buf, sizeof(buf) - 1, 0);

    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void test_the_first_step_extends_at_once(void **state)
{
    struct manager *m = *state;
    struct notify_extender e = {0};
    char want[128];

    assert_int_equal(notify_extend(&e, 5 * SEC, 0, "persisting: 0 B of 2 GiB written"), 1);
    snprintf(want, sizeof(want), "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=%s",
             (unsigned long long)NOTIFY_EXTEND_USEC, "persisting: 0 B of 2 GiB written");
    assert_string_equal(received(m), want);
    assert_string_equal(received(m), "");
}

static void test_steps_within_the_interval_are_not_told(void **state)
{
    struct manager *m = *state;
    struct notify_extender e = {0};
    uint64_t t = 7 * SEC;

    assert_int_equal(notify_extend(&e, t, 0, "a"), 1);
    assert_int_equal(notify_extend(&e, t + NOTIFY_EXTEND_EVERY_NS / 2, 0, "b"), 0);
    assert_int_equal(notify_extend(&e, t + NOTIFY_EXTEND_EVERY_NS - 1, 0, "c"), 0);
    assert_int_equal(notify_extend(&e, t + NOTIFY_EXTEND_EVERY_NS, 0, "d"), 1);
    /* The interval runs from the last one sent, not from the last step. */
    assert_int_equal(notify_extend(&e, t + NOTIFY_EXTEND_EVERY_NS * 3 / 2, 0, "e"), 0);
    assert_int_equal(notify_extend(&e, t + NOTIFY_EXTEND_EVERY_NS * 2, 0, "f"), 1);
    assert_non_null(strstr(received(m), "\nSTATUS=a"));
    assert_non_null(strstr(received(m), "\nSTATUS=d"));
    assert_non_null(strstr(received(m), "\nSTATUS=f"));
    assert_string_equal(received(m), "");
}

static void test_the_final_step_is_always_told(void **state)
{
    struct manager *m = *state;
    struct notify_extender e = {0};

    assert_int_equal(notify_extend(&e, SEC, 0, "first"), 1);
    assert_int_equal(notify_extend(&e, SEC + 1, 1, "done"), 1);
    assert_non_null(strstr(received(m), "STATUS=first"));
    assert_non_null(strstr(received(m), "STATUS=done"));
}

/* The extension must outlast the interval by far: a step that ends just after a datagram that
 * was not sent has NOTIFY_EXTEND_USEC - NOTIFY_EXTEND_EVERY_NS left. */
static void test_the_extension_outlasts_the_interval(void **state)
{
    assert_true(NOTIFY_EXTEND_USEC * 1000 >= 10 * NOTIFY_EXTEND_EVERY_NS);
}

static void test_no_manager_no_datagram(void **state)
{
    struct manager *m = *state;
    struct notify_extender e = {0};

    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(notify_extend(&e, SEC, 0, "nobody listens"), 1);
    assert_int_equal(notify_extend(&e, SEC + 1, 0, "nor now"), 0);
    assert_string_equal(received(m), "");
}

static void test_a_manager_that_cannot_be_told_is_an_error(void **state)
{
    struct notify_extender e = {0};

    setenv("NOTIFY_SOCKET", "/nonexistent/notify", 1);
    assert_int_equal(notify_extend(&e, SEC, 0, "lost"), FERRY_ESYS);
    assert_non_null(strstr(ferry_errmsg(), "EXTEND_TIMEOUT_USEC="));
    assert_null(strchr(ferry_errmsg(), '\n')); /* one line for the log */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_the_first_step_extends_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_steps_within_the_interval_are_not_told, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_final_step_is_always_told, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_extension_outlasts_the_interval, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_manager_no_datagram, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_manager_that_cannot_be_told_is_an_error, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
