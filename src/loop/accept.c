/* accept.c - listeners accepted from without spinning (accept.h). */
#include "loop/accept.h"

#include <errno.h>
#include <string.h>

static void on_resume(struct loop *l, struct loop_timer *t)
{
    struct acceptor *a = t->arg;

    (void)loop_watch_mod(l, &a->watch, LOOP_READ);
}

int acceptor_open(struct loop *l, struct acceptor *a, int fd, const char *what, loop_fd_fn *fn,
                  void *arg)
{
    *a = (struct acceptor){.loop = l, .fd = fd, .what = what};
    loop_timer_init(&a->resume, on_resume, a);
    return loop_watch_add(l, &a->watch, fd, LOOP_READ, fn, arg);
}

/* Out of descriptors or memory: stop watching for a while rather than spin on a listener that
 * stays readable. Without room for the timer the watch stays on: spinning beats going deaf. */
static void pause_accepting(struct acceptor *a, int err)
{
    a->pauses++;
    if (loop_timer_start(a->loop, &a->resume, loop_now_ms() + ACCEPT_PAUSE_MS) < 0)
        return;
    (void)loop_watch_mod(a->loop, &a->watch, 0);
    log_limited(&a->log, LOG_WARN, "%s: accept: %s; not accepting for %d ms (%llu times so far)",
                a->what, strerror(err), ACCEPT_PAUSE_MS, (unsigned long long)a->pauses);
}

int acceptor_next(struct acceptor *a, struct sockaddr *sa, socklen_t *len)
{
    int fd = accept4(a->fd, sa, len, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd >= 0)
        return fd;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        pause_accepting(a, errno);
    else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
        log_limited(&a->log, LOG_WARN, "%s: accept: %s", a->what, strerror(errno));
    return -1;
}

void acceptor_close(struct acceptor *a)
{
    if (!a->loop)
        return;
    loop_timer_stop(a->loop, &a->resume);
    loop_watch_del(a->loop, &a->watch);
    a->loop = NULL;
}
