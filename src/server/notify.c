/*
 * notify.c - systemd's notify protocol: a datagram to the AF_UNIX socket in $NOTIFY_SOCKET (a
 * path, or an abstract name when it starts with '@'). See sd_notify(3).
 */
#include "server/notify.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/err.h"

int notify_send(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len;
    int fd, rc = 0;

    if (!path || !*path)
        return 0;
    len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
        return err_set(FERRY_EINVAL, "NOTIFY_SOCKET '%.64s': not a socket path", path);
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
        return err_set(FERRY_ESYS, "notify socket: %s", strerror(errno));
    if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
        rc = err_set(FERRY_ESYS, "telling %s '%.*s': %s", path, (int)strcspn(state, "\n"), state,
                     strerror(errno));
    close(fd);
    return rc;
}

int notify_extend(struct notify_extender *e, uint64_t now_ns, int final, const char *status)
{
    char msg[256];
    int rc;

    if (e->sent && !final && now_ns - e->last_ns < NOTIFY_EXTEND_EVERY_NS)
        return 0;
    e->sent = 1;
    e->last_ns = now_ns;
    snprintf(msg, sizeof(msg), "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=%s",
             (unsigned long long)NOTIFY_EXTEND_USEC, status);
    rc = notify_send(msg);
    return rc < 0 ? rc : 1;
}
