#include "common/usock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/err.h"

static int make_addr(const char *path, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (!path || !*path || strlen(path) >= sizeof(sa->sun_path))
        return err_set(FERRY_EINVAL, "socket path '%s' is empty or longer than %zu bytes",
                       path ? path : "", sizeof(sa->sun_path) - 1);
    memcpy(sa->sun_path, path, strlen(path));
    return 0;
}

/* Why connecting to path failed with err, and what to do, for people. */
static int connect_failed(const char *path, int err)
{
    struct stat st;
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    const char *slash = strrchr(path, '/');

    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (err == ENOENT && stat(dir[0] ? dir : "/", &st) < 0)
        return err_set(FERRY_ECONN, "no ferryd at %s: the directory %s does not exist", path, dir);
    if (err == ENOENT)
        return err_set(FERRY_ECONN,
                       "no ferryd at %s: no such socket (is ferryd running, with "
                       "--socket %s?)",
                       path, path);
    if (err == ECONNREFUSED && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return err_set(FERRY_ECONN,
                       "no ferryd at %s: a directory, not a socket (ferryd --socket "
                       "%s/ferry.sock?)",
                       path, path);
    if (err == ECONNREFUSED && stat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
        return err_set(FERRY_ECONN, "no ferryd at %s: not a socket", path);
    if (err == ECONNREFUSED)
        return err_set(FERRY_ECONN, "no ferryd at %s: nothing listens (a stopped ferryd's socket)",
                       path);
    if (err == EACCES && stat(path, &st) == 0)
        return err_set(FERRY_ECONN,
                       "no access to %s: mode %04o, owner uid %u, group %u; you are "
                       "uid %u (ferryd --socket-mode 0660 shares it with the group)",
                       path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
                       (unsigned)st.st_gid, (unsigned)geteuid());
    return err_set(FERRY_ECONN, "no ferryd at %s: %s", path, strerror(err));
}

int usock_connect(const char *path, int *fd_out)
{
    return usock_connect_within(path, -1, fd_out);
}

/* A Unix socket's connect waits for room in the listener's backlog as long as SO_SNDTIMEO
 * says (EAGAIN after it), which is then put back to none for the sends that follow. */
int usock_connect_within(const char *path, int64_t timeout_ms, int *fd_out)
{
    struct sockaddr_un sa;
    struct timeval tv = {0, 0};
    int fd, rc;

    if ((rc = make_addr(path, &sa)) < 0)
        return rc;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_sys("socket");
    if (timeout_ms > 0) {
        tv = (struct timeval){timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    while ((rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa))) < 0 && errno == EINTR)
        ;
    if (rc < 0) {
        rc = errno == EAGAIN && timeout_ms > 0
                 ? err_set(FERRY_ETIMEDOUT, "ferryd at %s accepted no connection within %lld ms",
                           path, (long long)timeout_ms)
                 : connect_failed(path, errno);
        close(fd);
        return rc;
    }
    if (timeout_ms > 0) {
        tv = (struct timeval){0, 0};
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    *fd_out = fd;
    return 0;
}

/* A socket file at path with nothing behind it is stale (its daemon died); anything else is
 * left alone. */
static int clear_stale(const char *path)
{
    struct stat st;
    int fd;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : err_sys("lstat(socket path)");
    if (!S_ISSOCK(st.st_mode))
        return err_set(FERRY_EEXIST, "%s exists and is not a socket; not replacing it", path);
    if (usock_connect(path, &fd) == 0) {
        close(fd);
        return err_set(FERRY_EBUSY, "another ferryd is serving %s", path);
    }
    if (unlink(path) < 0 && errno != ENOENT)
        return err_sys("unlink(stale socket)");
    return 0;
}

int usock_listen(const char *path, mode_t mode, int backlog, int *fd_out)
{
    struct sockaddr_un sa;
    mode_t old_mask;
    int fd, rc;

    if ((rc = make_addr(path, &sa)) < 0 || (rc = clear_stale(path)) < 0)
        return rc;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_sys("socket");
    /* Bind under a umask that lets nobody else in, so there is no moment at which the socket
     * is more open than asked; then widen it to mode. */
    old_mask = umask(0177);
    rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old_mask);
    if (rc < 0) {
        rc = err_sys("bind");
        goto close_fd;
    }
    if (chmod(path, mode) < 0) {
        rc = err_sys("chmod(socket)");
        goto unlink_path;
    }
    if (listen(fd, backlog) < 0) {
        rc = err_sys("listen");
        goto unlink_path;
    }
    *fd_out = fd;
    return 0;

unlink_path:
    unlink(path);
close_fd:
    close(fd);
    return rc;
}

ssize_t usock_send_fd(int sock, const void *buf, size_t len, int fd)
{
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;

    if (fd >= 0) {
        struct cmsghdr *cm;
        memset(control, 0, sizeof(control));
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    while ((n = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    return n < 0 ? -errno : n;
}

ssize_t usock_recv_fd(int sock, void *buf, size_t len, int *fd, int flags)
{
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *cm;
    ssize_t n;

    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    *fd = -1;
    while ((n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags)) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return -errno;
    for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(fd, CMSG_DATA(cm), sizeof(int));
    }
    return n;
}
