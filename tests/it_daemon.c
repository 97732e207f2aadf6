/*
 * it_daemon.c - ferryd's life cycle: SIGTERM/SIGINT end it with exit 0 and no socket left,
 * even with busy clients; a second daemon on a live socket refuses to start and leaves the
 * first alone; a stale socket (a leftover, or a killed daemon's) is replaced; the socket's
 * mode; refusals, with figures, of memory the machine cannot give and of bad arguments.
 */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* Only the temporary directory: each test starts its daemons itself. */
static int setup(void **state)
{
    signal(SIGPIPE, SIG_IGN); /* writes to a killed daemon must fail, not kill the test */
    struct ferryd *d = calloc(1, sizeof(*d));
    assert_non_null(d);
    h_daemon_init(d);
    *state = d;
    return 0;
}

/* A put, get and check through a new client. */
static void serves(const struct ferryd *d, const char *name)
{
    ferry_client *c = h_connect(d);
    ferry_id id = h_id(name);
    H_OK(h_put_direct(c, &id, 12345, 6));
    h_assert_object(c, &id, 12345, 6);
    ferry_disconnect(c);
}

/* Runs ferryd with args that must make it refuse: it exits non-zero (not by a signal)
 * within H_START_MS, says why in its log, and leaves no socket. Returns the log's path. */
static void expect_refusal(struct ferryd *d, const char *log_name, const char *memory,
                           const char *const *extra, char *log, size_t log_cap)
{
    snprintf(log, log_cap, "%s/%s", d->dir, log_name);
    int64_t start = h_now_ms();
    pid_t pid = h_daemon_spawn(d, log, memory, extra);
    int status = 0;
    if (!h_wait_exit(pid, H_START_MS, &status)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        h_print_file(log);
        fail_msg("ferryd --memory %s did not refuse within %d ms", memory, H_START_MS);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 0) {
        h_print_file(log);
        fail_msg("ferryd --memory %s: status 0x%x, expected a non-zero exit", memory, status);
    }
    assert_true(h_now_ms() - start < H_START_MS);
    assert_true(h_file_size(log) > 0);
}

struct waiter {
    ferry_client *c;
    int rc;
    atomic_int done;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    ferry_id id;
    ferry_buffer b;
    ferry_id_parse("never", &id);
    w->rc = ferry_get(w->c, &id, 1, 20000, &b);
    atomic_store(&w->done, 1);
    return NULL;
}

/* SIGTERM with clients holding objects, subscribed and blocked in a get: exit 0, socket
 * removed, and the blocked client told the connection is gone. */
H_TEST(sigterm_with_busy_clients_exits_zero_and_removes_the_socket)
{
    h_daemon_start(d, "64M", NULL);
    ferry_client *a = h_connect(d);
    ferry_id open = h_id("open"), sealed = h_id("sealed");
    uint8_t *data;
    H_OK(ferry_create(a, &open, 1000, NULL, 0, &data));
    H_OK(h_put_direct(a, &sealed, 1000, 0));
    ferry_buffer buf;
    H_OK(ferry_get(a, &sealed, 1, 0, &buf));
    int sub;
    H_OK(ferry_subscribe(a, &sub));
    struct waiter *w = calloc(1, sizeof(*w)); /* leaked if it never returns */
    assert_non_null(w);
    w->c = h_connect(d);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, w), 0);
    assert_int_equal(H_WAIT_STAT(a, gets, 2), 2);

    h_daemon_stop(d); /* exit 0 and no socket, or fails */
    struct h_wait wait;
    for (h_wait_begin(&wait, H_EVENT_MS); !atomic_load(&w->done);)
        if (!h_wait_next(&wait))
            break;
    if (!atomic_load(&w->done)) /* a thread stuck for 20 s more cannot be joined: left */
        fail_msg("a get blocked when the daemon stopped did not return");
    pthread_join(t, NULL);
    assert_int_equal(w->rc, FERRY_ECONN);
    int present;
    H_RC(ferry_contains(a, &sealed, &present), FERRY_ECONN);
    close(sub);
    ferry_disconnect(w->c);
    free(w);
    ferry_disconnect(a);
}

/* SIGINT ends it the same way. */
H_TEST(sigint_exits_zero_and_removes_the_socket)
{
    h_daemon_start(d, "16M", NULL);
    serves(d, "x");
    assert_int_equal(kill(d->pid, SIGINT), 0);
    int status;
    assert_true(h_wait_exit(d->pid, H_START_MS, &status));
    d->pid = 0;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(access(d->sock, F_OK), -1);
}

/* A second ferryd on the socket of a live one exits non-zero at once, and the first one
 * keeps its socket and its objects. */
H_TEST(second_daemon_on_a_live_socket_refuses)
{
    h_daemon_start(d, "16M", NULL);
    serves(d, "before");
    char log[256];
    expect_refusal(d, "second.log", "16M", NULL, log, sizeof(log));
    ferry_client *c = h_connect(d);
    ferry_id before = h_id("before");
    h_assert_object(c, &before, 12345, 6);
    ferry_disconnect(c);
    serves(d, "after");
    h_daemon_stop(d);
}

/* Leaves a socket file with no listener at path. */
static void make_stale_socket(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    close(fd);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
}

/* A leftover socket file nobody listens on is replaced. */
H_TEST(stale_socket_file_is_replaced)
{
    make_stale_socket(d->sock);
    h_daemon_start(d, "16M", NULL);
    serves(d, "x");
    h_daemon_stop(d);
}

/* After kill -9 of the daemon its clients get ECONN, and a new daemon takes over the
 * socket it left behind, with an empty store. */
H_TEST(killed_daemon_gives_econn_and_its_socket_is_reused)
{
    h_daemon_start(d, "16M", NULL);
    ferry_client *c = h_connect(d);
    ferry_id id = h_id("lost");
    H_OK(h_put_direct(c, &id, 100, 0));
    h_daemon_kill(d);
    assert_int_equal(access(d->sock, F_OK), 0); /* stale now */
    int present;
    H_RC(ferry_contains(c, &id, &present), FERRY_ECONN);
    ferry_disconnect(c);

    h_daemon_start(d, "16M", NULL);
    c = h_connect(d);
    assert_int_equal(h_contains(c, &id), 0);
    ferry_disconnect(c);
    serves(d, "new");
    h_daemon_stop(d);
}

static unsigned socket_mode(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    return (unsigned)(st.st_mode & 07777);
}

/* The socket is 0600 unless told otherwise, whatever the umask. */
H_TEST(socket_mode_is_0600_by_default)
{
    mode_t old = umask(0);
    h_daemon_start(d, "16M", NULL);
    umask(old);
    assert_int_equal(socket_mode(d->sock), 0600);
    h_daemon_stop(d);
}

/* --socket-mode 0660 is honoured, whatever the umask. */
H_TEST(socket_mode_option_is_honoured)
{
    static const char *const extra[] = {"--socket-mode", "0660", NULL};
    mode_t old = umask(077);
    h_daemon_start(d, "16M", extra);
    umask(old);
    assert_int_equal(socket_mode(d->sock), 0660);
    serves(d, "x");
    h_daemon_stop(d);
}

/* More memory than the machine has: refused, saying how much was asked. */
H_TEST(memory_beyond_ram_is_refused_with_figures)
{
    static const char *const figures[] = {"100T", "100 T", "100.0", "109951162777600", "102400"};
    char log[256];
    expect_refusal(d, "ferryd.log", "100T", NULL, log, sizeof(log));
    int found = 0;
    for (size_t i = 0; i < sizeof(figures) / sizeof(figures[0]); i++)
        found = found || h_file_contains(log, figures[i]);
    if (!found) {
        h_print_file(log);
        fail_msg("the refusal does not mention the size asked for (100T)");
    }
    assert_int_equal(access(d->sock, F_OK), -1);
}

/* --hugepages with no huge pages reserved (vm.nr_hugepages 0) is refused. */
H_TEST(hugepages_are_refused_when_none_are_reserved)
{
    FILE *f = fopen("/proc/sys/vm/nr_hugepages", "r");
    long pages = -1;
    if (f) {
        if (fscanf(f, "%ld", &pages) != 1)
            pages = -1;
        fclose(f);
    }
    if (pages != 0) {
        d->ok = 1;
        H_SKIP("huge pages are reserved here (or unknown): nothing to refuse");
    }
    static const char *const extra[] = {"--hugepages", NULL};
    char log[256];
    expect_refusal(d, "ferryd.log", "64M", extra, log, sizeof(log));
    assert_int_equal(access(d->sock, F_OK), -1);
}

/* A size that is not one, and an unknown option, are refused. */
H_TEST(bad_arguments_are_refused)
{
    static const char *const bogus[] = {"--bogus", NULL};
    char log[256];
    expect_refusal(d, "bad-size.log", "lots", NULL, log, sizeof(log));
    expect_refusal(d, "bad-option.log", "16M", bogus, log, sizeof(log));
    assert_int_equal(access(d->sock, F_OK), -1);
}

/* CPU seconds (user + system) the process has used so far. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long utime = 0, stime = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields 14 and 15, counted after the parenthesised command name. */
    const char *p = strrchr(buf, ')');
    assert_non_null(p);
    assert_int_equal(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime), 2);
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* --busy-poll polls only after recent requests: the daemon serves, and an idle one sleeps
 * (regression guard: polling that never stops would burn a core forever). */
H_TEST(busy_poll_serves_and_sleeps_when_idle)
{
    static const char *const extra[] = {"--busy-poll", "200", NULL};
    h_daemon_start(d, "16M", extra);
    serves(d, "busy-poll");
    double before = cpu_seconds(d->pid);
    usleep(1000 * 1000);
    double used = cpu_seconds(d->pid) - before;
    if (used > 0.3)
        fail_msg("an idle daemon with --busy-poll used %.2f s of CPU in 1 s", used);
    h_daemon_stop(d);
    char log[256];
    static const char *const bogus[] = {"--busy-poll", "-5", NULL};
    expect_refusal(d, "bad-busy-poll.log", "16M", bogus, log, sizeof(log));
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(sigterm_with_busy_clients_exits_zero_and_removes_the_socket),
        T(sigint_exits_zero_and_removes_the_socket),
        T(second_daemon_on_a_live_socket_refuses),
        T(stale_socket_file_is_replaced),
        T(killed_daemon_gives_econn_and_its_socket_is_reused),
        T(socket_mode_is_0600_by_default),
        T(socket_mode_option_is_honoured),
        T(memory_beyond_ram_is_refused_with_figures),
        T(hugepages_are_refused_when_none_are_reserved),
        T(bad_arguments_are_refused),
        T(busy_poll_serves_and_sleeps_when_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
