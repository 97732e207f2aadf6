/* client.c - libferry's connection: connect, the request/reply exchange, held references. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"

#include "common/cpuload.h"
#include "common/err.h"
#include "common/usock.h"

/* ---- the exchange ---- */

int client_broken(struct ferry_client *c, int err)
{
    c->broken = 1;
    return err;
}

static int write_all(struct ferry_client *c)
{
    size_t done = 0;

    while (done < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + done, c->out.len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return client_broken(c, err_set(FERRY_ECONN, "sending to ferryd: %s", strerror(errno)));
        done += (size_t)n;
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads into c->in until it holds at least `need` bytes, taking whatever more the socket has
 * room for (one system call for most replies). For the first spin_ns it polls rather than
 * sleeps: on virtual machines, waking a sleeping thread costs more than most requests take
 * to serve. A descriptor that arrives is returned in *fd (if fd is NULL, it is closed). */
static int read_at_least(struct ferry_client *c, size_t need, int *fd)
{
    uint64_t spin_until = c->spin_ns && cpuload_can_poll() ? now_ns() + c->spin_ns : 0;

    pbuf_reserve(&c->in, need - c->in.len);
    if (c->in.oom)
        return client_broken(c, err_set(FERRY_ENOMEM, "reply of %zu bytes", need));
    while (c->in.len < need) {
        int got = -1, flags = spin_until ? MSG_DONTWAIT : 0;
        ssize_t n =
            usock_recv_fd(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, &got, flags);
        if (got >= 0) {
            if (fd && *fd < 0)
                *fd = got;
            else
                close(got);
        }
        if (n == -EAGAIN && spin_until) {
            if (now_ns() >= spin_until)
                spin_until = 0;
            sched_yield(); /* lets the daemon run should it share this CPU */
            continue;
        }
        if (n == -EINTR)
            continue;
        if (n <= 0)
            return client_broken(c, err_set(FERRY_ECONN, "ferryd closed the connection%s%s",
                                            n < 0 ? ": " : "", n < 0 ? strerror((int)-n) : ""));
        c->in.len += (size_t)n;
    }
    return 0;
}

void client_req_begin(struct ferry_client *c, uint16_t type)
{
    c->out.len = 0;
    proto_frame_begin(&c->out, type, ++c->tag);
}

/* Sends a request that gets no reply. */
int client_req_send(struct ferry_client *c)
{
    if (c->out.oom)
        return err_set(FERRY_ENOMEM, "request buffer");
    proto_frame_end(&c->out, 0);
    return write_all(c);
}

/* Reads the reply to the request just sent; on success c->rd is positioned after the status.
 * A negative status from the daemon is returned with its detail. */
int client_reply_read(struct ferry_client *c, uint16_t type, int *fd)
{
    struct proto_header h;
    int32_t status;
    uint16_t dlen;
    const char *detail;
    int rc;

    c->in.len = 0;
    if ((rc = read_at_least(c, PROTO_HEADER_SIZE, fd)) < 0)
        return rc;
    if (proto_decode_header(c->in.data, PROTO_MAX_REPLY, &h) < 0)
        return client_broken(c, FERRY_EPROTO);
    if (h.type != (type | PROTO_REPLY_BIT) || h.tag != c->tag || h.length < 4)
        return client_broken(c, err_set(FERRY_EPROTO, "unexpected reply type 0x%x tag %llu to 0x%x",
                                        h.type, (unsigned long long)h.tag, type));
    if ((rc = read_at_least(c, PROTO_HEADER_SIZE + (size_t)h.length, NULL)) < 0)
        return rc;
    /* Requests are answered one at a time: bytes beyond this reply were never asked for. */
    if (c->in.len != PROTO_HEADER_SIZE + (size_t)h.length)
        return client_broken(c, err_set(FERRY_EPROTO, "unsolicited bytes after a reply"));
    c->rd = (struct preader){c->in.data + PROTO_HEADER_SIZE, h.length, 0};
    status = (int32_t)prd_u32(&c->rd);
    if (status >= 0)
        return 0;
    dlen = prd_u16(&c->rd);
    detail = (const char *)prd_bytes(&c->rd, dlen);
    if (status < FERRY_ERROR_MIN || !detail)
        return client_broken(c, err_set(FERRY_EPROTO, "malformed error reply"));
    return err_set(status, "%.*s", (int)dlen, detail);
}

/* Sends the request built in c->out and reads its reply. */
int client_call(struct ferry_client *c, uint16_t type)
{
    int rc = client_req_send(c);
    return rc < 0 ? rc : client_reply_read(c, type, NULL);
}

/* Checks that the reply was consumed exactly. */
int client_reply_end(struct ferry_client *c)
{
    if (c->rd.bad || c->rd.left)
        return client_broken(c, err_set(FERRY_EPROTO, "reply of the wrong size"));
    return 0;
}

int client_read_statuses(struct ferry_client *c, const char *what, size_t n, const size_t *idx,
                         int *statuses, int *first, char why[PROTO_MAX_DETAIL + 1])
{
    const char *text;
    uint16_t len;

    *first = 0;
    if (prd_u32(&c->rd) != n)
        return client_broken(c, err_set(FERRY_EPROTO, "%s: reply count", what));
    for (size_t k = 0; k < n; k++) {
        int32_t st = (int32_t)prd_u32(&c->rd);
        st = st > 0 || st < FERRY_ERROR_MIN ? FERRY_EPROTO : st;
        statuses[idx ? idx[k] : k] = st;
        if (st != 0 && *first == 0)
            *first = st;
    }
    len = prd_u16(&c->rd);
    if (len > PROTO_MAX_DETAIL || !(text = (const char *)prd_bytes(&c->rd, len)))
        return client_broken(c, err_set(FERRY_EPROTO, "%s: reply reason", what));
    snprintf(why, PROTO_MAX_DETAIL + 1, "%.*s", (int)len, text);
    return client_reply_end(c);
}

/* An object's place as the daemon gave it, checked against the mapping before any use. */
int client_check_range(struct ferry_client *c, uint64_t offset, uint64_t a, uint64_t b)
{
    if (a > c->arena_size || b > c->arena_size - a || offset > c->arena_size - a - b)
        return client_broken(c, err_set(FERRY_EPROTO, "daemon gave a range outside the arena"));
    return 0;
}

/* Locks c for a call; fails if the connection is gone. */
int client_enter(struct ferry_client *c)
{
    if (!c)
        return err_set(FERRY_EINVAL, "NULL client");
    pthread_mutex_lock(&c->lock);
    err_clear();
    if (c->broken) {
        pthread_mutex_unlock(&c->lock);
        return err_set(FERRY_ECONN, "the connection to ferryd was lost");
    }
    return 0;
}

int client_leave(struct ferry_client *c, int rc)
{
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- held references ---- */

int client_held_add(struct ferry_client *c, const ferry_id *id, int unsealed)
{
    struct cheld *h = idmap_get(&c->held, id);

    if (!h) {
        if (!(h = calloc(1, sizeof(*h))))
            return err_set(FERRY_ENOMEM, "reference record");
        if (idmap_put(&c->held, id, h) < 0) {
            free(h);
            return FERRY_ENOMEM;
        }
    }
    h->refs++;
    h->unsealed |= (uint32_t)unsealed;
    return 0;
}

void client_held_drop(struct ferry_client *c, const ferry_id *id)
{
    struct cheld *h = idmap_get(&c->held, id);

    if (h && --h->refs == 0)
        free(idmap_remove(&c->held, id));
}

/* ---- connection ---- */

static int hello(struct ferry_client *c)
{
    int fd = -1, rc;

    /* Room for most replies, so that each is read with one system call. */
    pbuf_reserve(&c->in, 64u << 10);
    client_req_begin(c, PROTO_HELLO);
    pbuf_u32(&c->out, PROTO_MAGIC);
    pbuf_u32(&c->out, PROTO_VERSION);
    pbuf_u32(&c->out, (uint32_t)getpid());
    if ((rc = client_req_send(c)) < 0 || (rc = client_reply_read(c, PROTO_HELLO, &fd)) < 0)
        goto close_fd;
    c->arena_size = prd_u64(&c->rd);
    prd_u64(&c->rd); /* client id: the daemon's name for us in its logs */
    if ((rc = client_reply_end(c)) < 0)
        goto close_fd;
    if (fd < 0) {
        rc = err_set(FERRY_EPROTO, "ferryd sent no arena descriptor");
        goto close_fd;
    }
    c->base = mmap(NULL, c->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c->base == MAP_FAILED) {
        c->base = NULL;
        rc = err_sys("mmap(arena)");
    }
close_fd:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* $FERRY_SPIN_US, microseconds to poll for each reply before sleeping (0 disables). */
static uint64_t spin_setting(void)
{
    const char *v = getenv("FERRY_SPIN_US");
    char *end;
    unsigned long us = FERRY_DEFAULT_SPIN_US;

    if (v && *v) {
        us = strtoul(v, &end, 10);
        if (*end || us > 1000000)
            us = FERRY_DEFAULT_SPIN_US;
    }
    return (uint64_t)us * 1000;
}

int ferry_connect(const char *socket_path, ferry_client **out)
{
    const char *env = getenv("FERRY_SOCKET");
    struct ferry_client *c;
    int rc;

    if (!out)
        return err_set(FERRY_EINVAL, "NULL output handle");
    if (!socket_path)
        socket_path = env && *env ? env : FERRY_DEFAULT_SOCKET;
    if (!(c = calloc(1, sizeof(*c))))
        return err_set(FERRY_ENOMEM, "client handle");
    c->spin_ns = spin_setting();
    if ((rc = usock_connect(socket_path, &c->fd)) < 0)
        goto free_client;
    pthread_mutex_init(&c->lock, NULL);
    if ((rc = hello(c)) < 0)
        goto close_socket;
    *out = c;
    return 0;

close_socket:
    pthread_mutex_destroy(&c->lock);
    close(c->fd);
    pbuf_free(&c->out);
    pbuf_free(&c->in);
free_client:
    free(c);
    return rc;
}

void ferry_disconnect(ferry_client *c)
{
    struct cheld *h;
    size_t pos = 0;

    if (!c)
        return;
    close(c->fd);
    if (c->base)
        munmap(c->base, c->arena_size);
    while ((h = idmap_next(&c->held, &pos, NULL)))
        free(h);
    idmap_free(&c->held);
    pbuf_free(&c->out);
    pbuf_free(&c->in);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
