/*
 * quirk_recv.c - QUIRK_RECV (quirks.h): no blocking recv on the loop's thread, whoever calls it.
 *
 * The tcp provider (under tcp;ofi_rxm) reads a connection request on its own listening port
 * inside fi_trywait and fi_cq_read: a header, then the data the header announces, with a recv
 * on a blocking socket. A host that sends a valid header and then nothing held the whole daemon
 * in that recv until it closed the connection (seen: a stat timed out at 3 s for every such
 * header). Anyone who can reach the provider's port could do it, secret or not.
 *
 * This file defines recv for the program, and only ferryd links it (CMakeLists.txt): no other
 * program that links the server library gets its libc recv replaced. libfabric's calls to recv
 * bind to it (the executable comes first in symbol lookup, and the linker exports it because
 * libfabric refers to it). While the workaround is on, on the loop's thread, a recv that would
 * block (a blocking socket, no MSG_DONTWAIT) waits at most FAB_RECV_WAIT_MS for data, then
 * fails with EAGAIN, which the provider takes as "not yet": it drops or retries that connection
 * request, and the loop goes on. Every other call, and every call on other threads, is the
 * plain system call. The daemon's own sockets are all non-blocking, so nothing of ours changes.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "loop/loop.h"
#include "transport/fabric/fabric_int.h"

/* Tells quirks.c that the interposer is linked (a weak reference there). */
const int quirks_recv_interposer = 1;

/* Whether a recv on fd with flags would wait for data on the loop's thread. */
static int would_block_loop(int fd, int flags)
{
    if (flags & MSG_DONTWAIT || !loop_is_loop_thread() || !quirks_enabled(QUIRK_RECV))
        return 0;
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && !(fl & O_NONBLOCK);
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    if (would_block_loop(fd, flags)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n;
        while ((n = poll(&p, 1, FAB_RECV_WAIT_MS)) < 0 && errno == EINTR)
            ;
        if (n == 0) {
            quirks_acted(QUIRK_RECV, 1);
            errno = EAGAIN;
            return -1;
        }
    }
    return syscall(SYS_recvfrom, fd, buf, len, flags, NULL, NULL);
}
