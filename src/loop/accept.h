/*
 * accept.h - a listening socket on the loop, accepted from without spinning: every listener of
 * the daemon (the client socket, the transfer port, /metrics) accepts through it.
 *
 * The loop is level-triggered: a listener whose accept fails for want of a descriptor or of
 * memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) stays readable, and accepting again at once would
 * burn a core until something closes. So on those errors the listener is not watched for
 * ACCEPT_PAUSE_MS (counted in `pauses`, logged at most LOG_LIMIT_PER_SECOND times a second),
 * and the pending connections wait in the kernel's backlog meanwhile.
 */
#ifndef FERRY_ACCEPT_H
#define FERRY_ACCEPT_H

#include <sys/socket.h>

#include "common/log.h"
#include "loop/loop.h"

#define ACCEPT_PAUSE_MS 100

struct acceptor {
    struct loop *loop;
    int fd;
    const char *what; /* names the listener in the log ("client socket") */
    struct loop_watch watch;
    struct loop_timer resume;
    struct log_limit log;
    uint64_t pauses;
};

/* Watches the listening socket fd (non-blocking): fn(l, &a->watch, events) when a connection
 * may be waiting, a->watch.arg being arg. FERRY_ESYS from the loop. */
int acceptor_open(struct loop *l, struct acceptor *a, int fd, const char *what, loop_fd_fn *fn,
                  void *arg);
/* A new connection (non-blocking, close-on-exec; sa and len as accept4's, may be NULL), or -1
 * when there is none now, it was aborted, or the listener pauses (see above). */
int acceptor_next(struct acceptor *a, struct sockaddr *sa, socklen_t *len);
/* Stops watching; the socket stays open (its owner closes it). */
void acceptor_close(struct acceptor *a);

#endif
