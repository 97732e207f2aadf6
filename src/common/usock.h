/* usock.h - Unix stream sockets: listening with stale-socket detection, connecting, and
 * messages that carry a file descriptor (SCM_RIGHTS). Like Redis' anet, it knows sockets and
 * nothing of ferry's protocol. */
#ifndef FERRY_USOCK_H
#define FERRY_USOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Binds and listens on path with the given permission bits, non-blocking and close-on-exec.
 * A live socket at path (something accepts a connection) is refused with FERRY_EBUSY; a stale
 * socket file is replaced; any other file there is refused with FERRY_EEXIST. */
int usock_listen(const char *path, mode_t mode, int backlog, int *fd_out);

/* Connects to path (blocking socket, close-on-exec). FERRY_ECONN when nothing listens. */
int usock_connect(const char *path, int *fd_out);

/* usock_connect waiting at most timeout_ms (-1: no bound) while the listener's backlog is full
 * (a stopped daemon): FERRY_ETIMEDOUT then. */
int usock_connect_within(const char *path, int64_t timeout_ms, int *fd_out);

/* Sends len bytes with fd attached to the first byte (fd < 0: none). Returns the bytes sent,
 * or a negative errno. */
ssize_t usock_send_fd(int sock, const void *buf, size_t len, int fd);

/* Receives up to len bytes (flags as for recvmsg); an attached descriptor is stored in *fd
 * (else *fd = -1). Returns the bytes received, 0 at end of stream, or a negative errno. */
ssize_t usock_recv_fd(int sock, void *buf, size_t len, int *fd, int flags);

#endif
