/*
 * it_default_socket.c - the socket a client takes when it names none
 * (client_default_socket_at, src/client/default_socket.h): $FERRY_SOCKET, else the system
 * service's socket if anything is there, else FERRY_DEFAULT_SOCKET. The service's path is the
 * argument here (a real daemon's socket in a temporary directory), so that no case looks at
 * or touches the host's /run/ferry; ferry_connect(NULL) is checked to follow the rule with
 * FERRY_SERVICE_SOCKET, whatever the host has there.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/default_socket.h"
#include "common/usock.h"

static int setup(void **state)
{
    unsetenv("FERRY_SOCKET");
    return h_setup(state, "16M", NULL);
}

static int teardown(void **state)
{
    unsetenv("FERRY_SOCKET");
    return h_teardown(state);
}

H_TEST(the_environment_wins_over_a_service_socket)
{
    ferry_client *c;

    setenv("FERRY_SOCKET", d->sock, 1);
    assert_string_equal(client_default_socket_at("/nonexistent/ferry.sock"), d->sock);
    assert_string_equal(client_default_socket_at(d->dir), d->sock); /* d->dir exists */
    H_OK(ferry_connect(NULL, &c));
    ferry_disconnect(c);
}

H_TEST(an_empty_environment_counts_as_unset)
{
    setenv("FERRY_SOCKET", "", 1);
    assert_string_equal(client_default_socket_at(d->sock), d->sock);
    assert_string_equal(client_default_socket_at("/nonexistent/ferry.sock"), FERRY_DEFAULT_SOCKET);
}

H_TEST(the_service_socket_when_something_is_there)
{
    ferry_client *c;
    const char *path = client_default_socket_at(d->sock);

    assert_string_equal(path, d->sock);
    H_OK(ferry_connect(path, &c));
    ferry_disconnect(c);
}

H_TEST(the_users_daemon_socket_when_the_service_has_none)
{
    char gone[160];

    snprintf(gone, sizeof(gone), "%s/no-service/ferry.sock", d->dir);
    assert_string_equal(client_default_socket_at(gone), FERRY_DEFAULT_SOCKET);
    assert_string_equal(client_default_socket_at(NULL), FERRY_DEFAULT_SOCKET);
}

/* The service's socket is missing while it restarts or persists at stop; its directory stays
 * (RuntimeDirectoryPreserve): a client must not turn to /tmp, where any user can listen. */
H_TEST(the_service_socket_even_while_it_is_missing)
{
    char gone[160];

    snprintf(gone, sizeof(gone), "%s/restarting.sock", d->dir);
    assert_string_equal(client_default_socket_at(gone), gone);
}

/* A daemon at the default socket that runs as another user (not root) is refused unless
 * named; the check runs against a listener of nobody's (uid 65534) standing for it. */
H_TEST(another_users_daemon_at_the_default_socket_is_refused_unless_named)
{
    char path[160];
    int fd, ready[2], status;
    pid_t pid;

    if (geteuid() != 0)
        skip();
    snprintf(path, sizeof(path), "%s/other.sock", d->dir);
    assert_int_equal(chmod(d->dir, 0777), 0);
    assert_int_equal(pipe(ready), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        int l = socket(AF_UNIX, SOCK_STREAM, 0);
        if (snprintf(a.sun_path, sizeof(a.sun_path), "%s", path) >= (int)sizeof(a.sun_path))
            _exit(3);
        if (setgid(65534) < 0 || setuid(65534) < 0 || l < 0 ||
            bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0) {
            fprintf(stderr, "child: %s\n", strerror(errno));
            _exit(2);
        }
        (void)!write(ready[1], "r", 1);
        pause(); /* listening until the parent kills it */
        _exit(0);
    }
    close(ready[1]);
    assert_int_equal(read(ready[0], &status, 1), 1);
    H_OK(usock_connect_within(path, 2000, &fd));
    unsetenv("FERRY_SOCKET");
    assert_int_equal(client_peer_trusted(fd, path, path), FERRY_ECONN);
    assert_non_null(strstr(ferry_errmsg(), "uid 65534"));
    assert_int_equal(client_peer_trusted(fd, path, FERRY_DEFAULT_SOCKET), 0); /* named */
    setenv("FERRY_SOCKET", path, 1);
    assert_int_equal(client_peer_trusted(fd, path, path), 0);
    unsetenv("FERRY_SOCKET");
    close(fd);
    close(ready[0]);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
}

/* A service socket in a directory this user may not search (EACCES) is taken, so that its
 * connect says "permission denied" rather than the client going to another daemon unasked.
 * Root searches anything: the check then runs in a child that became nobody (uid 65534). */
H_TEST(a_service_socket_this_user_may_not_look_at_is_taken)
{
    char sub[160], path[200];
    pid_t pid;
    int status;

    snprintf(sub, sizeof(sub), "%s/closed", d->dir);
    snprintf(path, sizeof(path), "%s/ferry.sock", sub);
    assert_int_equal(mkdir(sub, 0700), 0);
    if (geteuid() != 0) {
        assert_int_equal(chmod(sub, 0), 0);
        assert_string_equal(client_default_socket_at(path), path);
        assert_int_equal(chmod(sub, 0700), 0);
        return;
    }
    assert_int_equal(chmod(d->dir, 0711), 0); /* nobody may search d->dir, not sub */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) < 0 || setuid(65534) < 0)
            _exit(2);
        _exit(strcmp(client_default_socket_at(path), path) == 0 ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ferry_connect(NULL) goes where the rule with FERRY_SERVICE_SOCKET says: connected, or its
 * failure names that path (the host may or may not run the service, or a daemon at
 * FERRY_DEFAULT_SOCKET). */
H_TEST(ferry_connect_without_a_path_follows_the_rule)
{
    const char *want = client_default_socket();
    ferry_client *c;
    int rc;

    assert_string_equal(want, client_default_socket_at(FERRY_SERVICE_SOCKET));
    rc = ferry_connect(NULL, &c);
    if (rc == 0)
        ferry_disconnect(c);
    else if (!strstr(ferry_errmsg(), want))
        fail_msg("ferry_connect(NULL): '%s' does not name %s", ferry_errmsg(), want);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(the_environment_wins_over_a_service_socket),
        T(an_empty_environment_counts_as_unset),
        T(the_service_socket_when_something_is_there),
        T(the_users_daemon_socket_when_the_service_has_none),
        T(the_service_socket_even_while_it_is_missing),
        T(another_users_daemon_at_the_default_socket_is_refused_unless_named),
        T(a_service_socket_this_user_may_not_look_at_is_taken),
        T(ferry_connect_without_a_path_follows_the_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
