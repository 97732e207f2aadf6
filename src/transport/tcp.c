/*
 * tcp.c - the tcp transport: frames and object bytes on one TCP stream per peer pair.
 *
 * Object bytes do not pass through a user-space buffer: sending writes straight from the
 * mapped arena (sendmsg of queued frames and arena ranges), receiving reads straight into the
 * new objects (readv over the queued destinations). The exception is small: a read that is
 * due for a frame header goes into an 8 KiB lookahead, and object bytes that came with it are
 * copied from there (see "receiving" below).
 *
 * Ownership: a connection is the transport's; closing it frees it after the loop turn (a
 * 0 ms timer), because events later in the same turn may still name it.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "loop/accept.h"
#include "transport/framer.h"
#include "transport/registry.h"

#define TCP_IOV_MAX 64
#define TCP_ACCEPTS_PER_TURN 64
/* Bytes moved per readiness event before other connections get their turn. */
#define TCP_BYTES_PER_TURN (8u << 20)
#define TCP_LOOKAHEAD (8u << 10)
/* Test hook (FERRY_FAULT=tcp-send-delay-ms=N): a node writes at most this many bytes per N ms
 * on each connection, so that a test can kill a sender in the middle of an object's bytes
 * however fast the machine (as fabric-read-delay-ms paces a fabric reader). */
#define TCP_FAULT_CHUNK (1u << 20)

struct tcp_seg {
    const uint8_t *p;
    uint64_t len;
    uint8_t *owned; /* a copied frame, freed when sent; NULL for an arena range */
    void *arg;      /* for ev->sent, ranges only */
    struct tcp_seg *next;
};

struct tcp_recv {
    uint8_t *dst; /* NULL: drop */
    uint64_t len;
    void *arg;
    struct tcp_recv *next;
};

struct tcp_conn {
    struct xconn base;
    struct loop *loop;
    int fd;
    int connecting, closed;
    int paused; /* reading stopped by the engine */
    struct loop_watch watch;
    struct loop_timer reaper;
    struct loop_timer writer;       /* writes what was queued, later in the same loop turn */
    struct tcp_seg *sq, **sq_tail;  /* send queue */
    struct tcp_recv *rq, **rq_tail; /* receive-into queue */
    uint64_t paced_until;           /* the fault hook: no write before this loop_now_ms() */
    struct framer fr;
    uint8_t la[TCP_LOOKAHEAD]; /* read but not yet handed out: la[la_off .. la_len) */
    size_t la_off, la_len;
};

struct xlistener {
    struct loop *loop;
    char addr[128];
    int fd;
    struct acceptor acceptor;
    const struct xconn_events *ev;
    xaccept_fn *fn;
    void *arg;
    uint32_t max_frame;           /* xconfig's */
    uint32_t fault_send_delay_ms; /* the test hook (TCP_FAULT_CHUNK); 0: off */
};

/* ---- addresses ---- */

int transport_split_addr(const char *addr, char *host, size_t host_len, char *port, size_t port_len)
{
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    const char *h = addr;
    size_t hl;

    if (!colon || colon == addr || !colon[1] || strlen(colon + 1) >= port_len)
        return err_set(FERRY_EINVAL, "address '%s': expected HOST:PORT", addr ? addr : "");
    hl = (size_t)(colon - addr);
    if (addr[0] == '[' && colon[-1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= host_len)
        return err_set(FERRY_EINVAL, "address '%s': bad host", addr);
    memcpy(host, h, hl);
    host[hl] = '\0';
    snprintf(port, port_len, "%s", colon + 1); /* fits: checked above */
    return 0;
}

/* Numeric hosts only: a name would make getaddrinfo wait for DNS on the event loop. */
static int resolve(const char *addr, int passive, struct addrinfo **out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char host[256], port[16];
    int rc;

    if ((rc = transport_split_addr(addr, host, sizeof(host), port, sizeof(port))) < 0)
        return rc;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    if ((rc = getaddrinfo(host, port, &hints, out)) != 0)
        return err_set(FERRY_EINVAL, "address '%s': %s (numeric IP address and port needed)", addr,
                       gai_strerror(rc));
    return 0;
}

int transport_listen_tcp(const char *addr, int backlog, int *fd)
{
    struct addrinfo *ai;
    int one = 1, rc;

    if ((rc = resolve(addr, 1, &ai)) < 0)
        return rc;
    *fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (*fd < 0) {
        rc = err_sys("socket");
        goto free_ai;
    }
    setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(*fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(*fd, backlog) < 0) {
        rc = err_set(FERRY_ESYS, "listen on %s: %s", addr, strerror(errno));
        goto close_fd;
    }
    freeaddrinfo(ai);
    return 0;

close_fd:
    close(*fd);
    *fd = -1;
free_ai:
    freeaddrinfo(ai);
    return rc;
}

/* ---- connections ---- */

static void reap(struct loop *l, struct loop_timer *t)
{
    struct tcp_conn *c = t->arg;

    while (c->sq) {
        struct tcp_seg *s = c->sq;
        c->sq = s->next;
        free(s->owned);
        free(s);
    }
    while (c->rq) {
        struct tcp_recv *r = c->rq;
        c->rq = r->next;
        free(r);
    }
    framer_free(&c->fr);
    free(c);
}

static void conn_shut(struct tcp_conn *c)
{
    if (c->closed)
        return;
    c->closed = 1;
    loop_timer_stop(c->loop, &c->writer);
    loop_watch_del(c->loop, &c->watch);
    close(c->fd);
    c->fd = -1;
    loop_timer_start(c->loop, &c->reaper, 0);
}

/* Closes on a failure and tells the engine. */
static void conn_fail_err(struct tcp_conn *c, int err, const char *reason)
{
    if (c->closed)
        return;
    conn_shut(c);
    c->base.ev->closed(&c->base, err, reason);
}

static void conn_fail(struct tcp_conn *c, const char *reason)
{
    conn_fail_err(c, FERRY_ECONN, reason);
}

static void conn_interest(struct tcp_conn *c)
{
    /* A paced connection (the fault hook) writes from its timer only. */
    int write = c->sq && !c->base.local->fault_send_delay_ms;
    uint32_t ev =
        c->connecting ? LOOP_WRITE : (c->paused ? 0 : LOOP_READ) | (write ? LOOP_WRITE : 0);
    if (!c->closed && loop_watch_mod(c->loop, &c->watch, ev) < 0)
        conn_fail(c, "epoll_ctl failed");
}

/* ---- sending ---- */

/* The fault hook's pace: 1 when c may not write yet, else its budget for this turn in
 * *budget (unchanged when the hook is off). */
static int pace_wait(struct tcp_conn *c, uint64_t *budget)
{
    uint32_t delay = c->base.local->fault_send_delay_ms;
    uint64_t now = loop_now_ms();

    if (!delay)
        return 0;
    if (now < c->paced_until)
        return 1;
    c->paced_until = now + delay;
    *budget = TCP_FAULT_CHUNK;
    return 0;
}

/* Writes up to budget bytes of the queue, what the socket takes; -1 when the connection
 * failed. */
static int write_queued(struct tcp_conn *c, uint64_t budget)
{
    while (c->sq && budget) {
        struct iovec iov[TCP_IOV_MAX];
        struct msghdr msg = {.msg_iov = iov};
        struct tcp_seg *s = c->sq;
        uint64_t room = budget; /* a call writes no more than the turn's budget */
        ssize_t n;

        for (; s && msg.msg_iovlen < TCP_IOV_MAX && room; s = s->next) {
            uint64_t len = s->len < room ? s->len : room;
            iov[msg.msg_iovlen++] = (struct iovec){(void *)s->p, (size_t)len};
            room -= len;
        }
        n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            conn_fail(c, strerror(errno));
            return -1;
        }
        budget = (uint64_t)n >= budget ? 0 : budget - (uint64_t)n;
        c->base.bytes_out += (uint64_t)n;
        while ((s = c->sq) && (uint64_t)n >= s->len) {
            n -= (ssize_t)s->len;
            c->sq = s->next;
            if (!c->sq)
                c->sq_tail = &c->sq;
            if (!s->owned)
                c->base.ev->sent(&c->base, s->arg);
            free(s->owned);
            free(s);
            if (c->closed)
                return -1;
        }
        if (s && n) {
            s->p += n;
            s->len -= (uint64_t)n;
        }
    }
    return 0;
}

/* Writes what the socket takes, within the turn's budget; -1 when the connection failed. */
static int flush(struct tcp_conn *c)
{
    uint64_t budget = TCP_BYTES_PER_TURN;
    int rc = pace_wait(c, &budget) ? 0 : write_queued(c, budget);

    /* A paced connection has no write interest (conn_interest): what is left, or what the
     * socket did not take, goes from its timer at the next pace. */
    if (rc == 0 && c->sq && c->base.local->fault_send_delay_ms && c->writer.heap_index == SIZE_MAX)
        loop_timer_start(c->loop, &c->writer, c->paced_until);
    return rc;
}

static void on_write_timer(struct loop *l, struct loop_timer *t)
{
    struct tcp_conn *c = t->arg;

    if (!c->closed && c->connecting == 0 && flush(c) == 0)
        conn_interest(c); /* LOOP_WRITE only if the socket did not take it all */
}

static int enqueue(struct tcp_conn *c, const uint8_t *p, uint64_t len, uint8_t *owned, void *arg)
{
    struct tcp_seg *s = calloc(1, sizeof(*s));

    if (!s)
        return err_set(FERRY_ENOMEM, "send segment");
    *s = (struct tcp_seg){.p = p, .len = len, .owned = owned, .arg = arg};
    *c->sq_tail = s;
    c->sq_tail = &s->next;
    /* Written from a 0 ms timer, later in this loop turn: never from inside the engine's own
     * call (so that ev->sent cannot re-enter it), and without waiting for another epoll round
     * to report the socket writable. */
    if (c->writer.heap_index == SIZE_MAX)
        loop_timer_start(c->loop, &c->writer, 0);
    return 0;
}

static int tcp_send_frame(struct xconn *xc, const uint8_t *frame, size_t len)
{
    struct tcp_conn *c = (struct tcp_conn *)xc;
    uint8_t *copy;
    int rc;

    if (c->closed)
        return err_set(FERRY_ECONN, "connection to %s closed", xc->peer);
    if (!(copy = malloc(len ? len : 1)))
        return err_set(FERRY_ENOMEM, "frame of %zu bytes", len);
    memcpy(copy, frame, len);
    if ((rc = enqueue(c, copy, len, copy, NULL)) < 0)
        free(copy);
    return rc;
}

static int tcp_send_range(struct xconn *xc, const uint8_t *p, uint64_t len, void *arg)
{
    struct tcp_conn *c = (struct tcp_conn *)xc;

    if (c->closed)
        return err_set(FERRY_ECONN, "connection to %s closed", xc->peer);
    return enqueue(c, p, len, NULL, arg);
}

/* ---- receiving ---- */

static int tcp_recv_into(struct xconn *xc, uint8_t *dst, uint64_t len, void *arg)
{
    struct tcp_conn *c = (struct tcp_conn *)xc;
    struct tcp_recv *r;

    if (c->closed)
        return err_set(FERRY_ECONN, "connection to %s closed", xc->peer);
    if (!(r = calloc(1, sizeof(*r))))
        return err_set(FERRY_ENOMEM, "receive record");
    *r = (struct tcp_recv){.dst = dst, .len = len, .arg = arg};
    *c->rq_tail = r;
    c->rq_tail = &r->next;
    return 0;
}

/* ---- receiving ----
 * Bytes come off the socket either into the lookahead buffer (when a frame header is due,
 * one read then usually brings the whole frame and the small payloads after it) or straight
 * into their destination (the rest of a large frame; object bytes, with readv over the queued
 * objects). Object bytes are copied from the lookahead only when a read brought them along,
 * at most TCP_LOOKAHEAD bytes a read: one copy of a few KiB costs less than a system call. */

/* n bytes of the head receive are in place: move on, completing it when it is full. */
static void payload_advanced(struct tcp_conn *c, size_t n)
{
    struct tcp_recv *r = c->rq;

    if (r->dst) {
        if (c->base.ev->landed)
            c->base.ev->landed(&c->base, r->arg, r->dst, n);
        r->dst += n;
    }
    r->len -= n;
    if (r->len)
        return;
    c->rq = r->next;
    if (!c->rq)
        c->rq_tail = &c->rq;
    c->base.ev->received(&c->base, r->arg);
    free(r);
}

/* What the framer said of the frame being read (framer.h): delivered when whole. */
static void frame_advanced(struct tcp_conn *c, int rc)
{
    if (rc < 0)
        conn_fail_err(c, rc == FERRY_EPROTO ? FERRY_EPROTO : FERRY_ECONN, ferry_errmsg());
    else if (rc == 1)
        c->base.ev->frame(&c->base, &c->fr.h, c->fr.frame.data);
}

/* How many bytes the current consumer takes next. */
static size_t wanted(const struct tcp_conn *c)
{
    if (c->rq)
        return c->rq->len > SIZE_MAX ? SIZE_MAX : (size_t)c->rq->len;
    return framer_wanted(&c->fr);
}

/* Hands out what the lookahead holds, in order, to frames and receives. */
static void drain_lookahead(struct tcp_conn *c)
{
    while (!c->closed && c->la_off < c->la_len) {
        size_t n = c->la_len - c->la_off, w = wanted(c);
        const uint8_t *p = c->la + c->la_off;

        if (w < n)
            n = w;
        c->la_off += n;
        if (!c->rq) {
            frame_advanced(c, framer_put(&c->fr, p, n, c->base.max_frame));
            continue;
        }
        if (c->rq->dst)
            memcpy(c->rq->dst, p, n);
        payload_advanced(c, n);
    }
}

/* Where the next read goes: the destinations when large enough, else the lookahead. */
static int read_targets(struct tcp_conn *c, struct iovec *iov)
{
    int cnt = 0;

    if (c->rq && c->rq->dst && c->rq->len >= TCP_LOOKAHEAD) {
        for (struct tcp_recv *r = c->rq; r && r->dst && cnt < TCP_IOV_MAX; r = r->next)
            iov[cnt++] = (struct iovec){r->dst, r->len > SIZE_MAX ? SIZE_MAX : (size_t)r->len};
    } else if (!c->rq && c->fr.hdr_got == PROTO_HEADER_SIZE &&
               framer_wanted(&c->fr) >= TCP_LOOKAHEAD) {
        iov[cnt++] = (struct iovec){c->fr.frame.data + c->fr.frame.len, framer_wanted(&c->fr)};
    } else {
        c->la_off = c->la_len = 0;
        iov[cnt++] = (struct iovec){c->la, sizeof(c->la)};
    }
    return cnt;
}

/* One read from the socket. Returns the bytes read, 0 when none are there now, -1 when the
 * connection failed or closed meanwhile; *short_read when it filled less than it offered (the
 * socket is empty now: the loop's level-triggered watch says when more comes). */
static ssize_t read_some(struct tcp_conn *c, int *short_read)
{
    struct iovec iov[TCP_IOV_MAX];
    int cnt = read_targets(c, iov);
    ssize_t n = readv(c->fd, iov, cnt);
    size_t offered = 0;

    for (int i = 0; i < cnt; i++)
        offered += iov[i].iov_len;
    *short_read = n >= 0 && (size_t)n < offered;

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        conn_fail(c, n == 0 ? "peer closed the connection" : strerror(errno));
        return -1;
    }
    c->base.bytes_in += (uint64_t)n;
    if (iov[0].iov_base == c->la) {
        c->la_len = (size_t)n;
        drain_lookahead(c);
    } else if (c->rq) {
        for (size_t left = (size_t)n; left && c->rq && !c->closed;) {
            size_t k = left < wanted(c) ? left : wanted(c);
            payload_advanced(c, k);
            left -= k;
        }
    } else {
        frame_advanced(c, framer_grew(&c->fr, (size_t)n));
    }
    return c->closed ? -1 : n;
}

static void on_readable(struct tcp_conn *c)
{
    uint64_t budget = TCP_BYTES_PER_TURN;

    while (!c->closed && budget) {
        int short_read;
        ssize_t n = read_some(c, &short_read);
        if (n <= 0 || short_read)
            return; /* failed, or nothing more to read now: no read just to hear EAGAIN */
        budget = (uint64_t)n >= budget ? 0 : budget - (uint64_t)n;
    }
}

static void on_connected(struct tcp_conn *c)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err) {
        char reason[160];
        snprintf(reason, sizeof(reason), "connect: %s", strerror(err));
        conn_fail(c, reason);
        return;
    }
    c->connecting = 0;
}

static void on_event(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct tcp_conn *c = w->arg;

    if (c->closed)
        return;
    if (c->connecting) {
        on_connected(c);
        if (c->closed)
            return;
    }
    if ((events & LOOP_HANGUP) && c->paused) {
        conn_fail(c, "peer hung up"); /* reported even while not reading: would spin */
        return;
    }
    if ((events & (LOOP_READ | LOOP_HANGUP)) && !c->paused)
        on_readable(c);
    if (!c->closed && c->sq && flush(c) < 0)
        return;
    conn_interest(c);
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static struct tcp_conn *conn_new(struct xlistener *ls, int fd, const struct xconn_events *ev,
                                 const char *peer)
{
    struct tcp_conn *c = calloc(1, sizeof(*c));

    if (!c) {
        err_set(FERRY_ENOMEM, "connection");
        return NULL;
    }
    c->base.type = &transport_tcp;
    c->base.local = ls;
    c->base.ev = ev;
    c->base.max_frame = ls->max_frame;
    snprintf(c->base.peer, sizeof(c->base.peer), "%s", peer);
    c->loop = ls->loop;
    c->fd = fd;
    c->sq_tail = &c->sq;
    c->rq_tail = &c->rq;
    loop_timer_init(&c->reaper, reap, c);
    loop_timer_init(&c->writer, on_write_timer, c);
    if (loop_watch_add(c->loop, &c->watch, fd, LOOP_READ, on_event, c) < 0) {
        free(c);
        return NULL;
    }
    return c;
}

static int tcp_connect(struct xlistener *ls, const char *addr, const struct xconn_events *ev,
                       struct xconn **out)
{
    struct addrinfo *ai;
    struct tcp_conn *c;
    int fd, rc;

    if ((rc = resolve(addr, 0, &ai)) < 0)
        return rc;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = err_sys("socket");
        goto free_ai;
    }
    tune(fd);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
        rc = err_set(FERRY_ECONN, "connect to %s: %s", addr, strerror(errno));
        goto close_fd;
    }
    if (!(c = conn_new(ls, fd, ev, addr))) {
        rc = FERRY_ENOMEM;
        goto close_fd;
    }
    c->connecting = 1;
    conn_interest(c);
    freeaddrinfo(ai);
    *out = &c->base;
    return 0;

close_fd:
    close(fd);
free_ai:
    freeaddrinfo(ai);
    return rc;
}

static void tcp_pause(struct xconn *xc, int paused)
{
    struct tcp_conn *c = (struct tcp_conn *)xc;

    c->paused = paused;
    conn_interest(c);
}

static void tcp_close(struct xconn *xc)
{
    conn_shut((struct tcp_conn *)xc);
}

/* ---- listening ---- */

static void peer_name(const struct sockaddr_storage *ss, socklen_t len, char *out, size_t n)
{
    char host[64], port[NI_MAXSERV]; /* numeric: an IPv6 address fits in 46 bytes */

    if (getnameinfo((const struct sockaddr *)ss, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(out, n, "?");
    else
        snprintf(out, n, "%s:%s", host, port);
}

static void on_accept(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct xlistener *ls = w->arg;

    for (int i = 0; i < TCP_ACCEPTS_PER_TURN; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        char peer[128];
        struct tcp_conn *c;
        int fd = acceptor_next(&ls->acceptor, (struct sockaddr *)&ss, &len);

        if (fd < 0)
            return;
        tune(fd);
        peer_name(&ss, len, peer, sizeof(peer));
        if (!(c = conn_new(ls, fd, ls->ev, peer))) {
            log_warn("transfer: refusing %s: %s", peer, ferry_errmsg());
            close(fd);
            continue;
        }
        ls->fn(ls, &c->base, ls->arg);
    }
}

/* The test hook, from FERRY_FAULT (tcp-send-delay-ms=N). */
static void read_faults(struct xlistener *ls)
{
    if (!(ls->fault_send_delay_ms = fault_value("tcp-send-delay-ms", 60000)))
        return;
    log_warn("tcp: test fault on: %u KiB written per %u ms", TCP_FAULT_CHUNK >> 10,
             ls->fault_send_delay_ms);
}

static int tcp_listen(struct loop *loop, const struct xconfig *cfg, const struct xconn_events *ev,
                      xaccept_fn *fn, void *arg, struct xlistener **out)
{
    const char *addr = cfg->addr;
    struct xlistener *ls;
    int rc;

    if (!cfg->max_frame)
        return err_set(FERRY_EINVAL, "tcp: a maximum frame length is needed");
    if (!(ls = calloc(1, sizeof(*ls))))
        return err_set(FERRY_ENOMEM, "listener");
    *ls = (struct xlistener){
        .loop = loop, .ev = ev, .fn = fn, .arg = arg, .max_frame = cfg->max_frame};
    snprintf(ls->addr, sizeof(ls->addr), "%s", addr);
    read_faults(ls);
    if ((rc = transport_listen_tcp(addr, 128, &ls->fd)) < 0)
        goto free_ls;
    if ((rc = acceptor_open(loop, &ls->acceptor, ls->fd, "transfer port", on_accept, ls)) < 0)
        goto close_fd;
    *out = ls;
    return 0;

close_fd:
    close(ls->fd);
free_ls:
    free(ls);
    return rc;
}

static void tcp_listener_close(struct xlistener *ls)
{
    if (!ls)
        return;
    acceptor_close(&ls->acceptor);
    close(ls->fd);
    free(ls);
}

static const char *tcp_address(const struct xlistener *ls)
{
    return ls->addr;
}

static const char *tcp_provider(const struct xlistener *ls)
{
    return "tcp";
}

/* tcp reaches every node (it is the fallback); what makes it the choice is said by whoever
 * passed over the others. */
static int tcp_reaches(const struct xlistener *ls, const char *addr, char *why, size_t len)
{
    snprintf(why, len, "tcp");
    return 1;
}

/* The engine counts tcp's connections and bytes itself; tcp adds its listener's pauses. */
static void tcp_counters(const struct xlistener *ls, xcounter_fn *fn, void *arg)
{
    fn(arg, "tcp_accept_pauses", FERRY_STAT_COUNTER,
       "times the transfer port stopped accepting for 100 ms: out of descriptors or memory",
       ls->acceptor.pauses);
}

static int tcp_eager_default(const struct xlistener *ls, uint64_t *out)
{
    return err_set(FERRY_ENOSYS, "tcp moves every object as a stream");
}

/* Not an error but the usual answer: no message, or it would overwrite the caller's. */
static int tcp_drain(struct xconn *xc, void (*fn)(void *arg), void *arg)
{
    return FERRY_ENOSYS;
}

const struct transport transport_tcp = {
    .name = "tcp",
    .flags = XPORT_FALLBACK,
    .listen = tcp_listen,
    .listener_close = tcp_listener_close,
    .address = tcp_address,
    .provider = tcp_provider,
    .reaches = tcp_reaches,
    .counters = tcp_counters,
    .eager_default = tcp_eager_default,
    .connect = tcp_connect,
    .send_frame = tcp_send_frame,
    .send_range = tcp_send_range,
    .recv_into = tcp_recv_into,
    .pause = tcp_pause,
    .close = tcp_close,
    .drain = tcp_drain,
};
