/* client.c - libferry's connection: connect, the request/reply exchange, held references. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/client.h"
#include "client/default_socket.h"

#include "common/clock.h"
#include "common/cpuload.h"
#include "common/err.h"
#include "common/usock.h"

/* ---- the exchange ---- */

int client_broken(struct ferry_client *c, int err)
{
    c->broken = 1;
    snprintf(c->broken_why, sizeof(c->broken_why), "%s",
             *ferry_errmsg() ? ferry_errmsg() : ferry_strerror(err));
    return err;
}

/* Longest bound kept (about 31 years): beyond it an exchange waits without end. */
#define BOUND_MAX_MS 1000000000000ll

/* Starts the deadline of an exchange the daemon may hold for wait_ms by contract. */
static void deadline_start(struct ferry_client *c, int64_t wait_ms)
{
    int64_t ms =
        c->timeout_ms < 0 || wait_ms < 0 || wait_ms > BOUND_MAX_MS ? -1 : c->timeout_ms + wait_ms;

    c->wait_ms = wait_ms;
    c->deadline_ns = ms < 0 || ms > BOUND_MAX_MS ? 0 : clock_mono_ns() + (uint64_t)ms * 1000000ull;
}

/* The exchange's deadline passed: the reply may still come, so the stream is out of step and
 * the handle is given up. */
static int timed_out(struct ferry_client *c, const char *doing)
{
    const char *type = proto_type_name(c->req_type);

    if (c->wait_ms > 0)
        return client_broken(
            c, err_set(FERRY_ETIMEDOUT,
                       "ferryd did not %s %s within %lld ms (its wait of %lld ms and the "
                       "connection's timeout of %lld ms); the handle is unusable now",
                       doing, type, (long long)(c->wait_ms + c->timeout_ms), (long long)c->wait_ms,
                       (long long)c->timeout_ms));
    return client_broken(c, err_set(FERRY_ETIMEDOUT,
                                    "ferryd did not %s %s within %lld ms (the connection's "
                                    "timeout); the handle is unusable now",
                                    doing, type, (long long)c->timeout_ms));
}

/* Waits until the socket is ready for events or the exchange's deadline passes (then
 * FERRY_ETIMEDOUT, the handle broken). */
static int wait_ready(struct ferry_client *c, short events, const char *doing)
{
    struct pollfd p = {.fd = c->fd, .events = events};

    for (;;) {
        uint64_t now = c->deadline_ns ? clock_mono_ns() : 0;
        uint64_t left_ms = c->deadline_ns > now ? (c->deadline_ns - now + 999999) / 1000000 : 0;
        int n;
        if (c->deadline_ns && now >= c->deadline_ns)
            return timed_out(c, doing);
        n = poll(&p, 1, c->deadline_ns ? (int)(left_ms < INT_MAX ? left_ms : INT_MAX) : -1);
        if (n > 0)
            return 0; /* readiness, a hang-up or an error: the next send or recv tells */
        if (n < 0 && errno != EINTR)
            return client_broken(c, err_sys("poll(ferryd's socket)"));
    }
}

static int write_all(struct ferry_client *c)
{
    size_t done = 0;
    int rc;

    while (done < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + done, c->out.len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if ((rc = wait_ready(c, POLLOUT, "take")) < 0)
                return rc;
            continue;
        }
        if (n <= 0)
            return client_broken(c, err_set(FERRY_ECONN, "sending to ferryd: %s", strerror(errno)));
        done += (size_t)n;
    }
    return 0;
}

/* Reads into c->in until it holds at least `need` bytes, taking whatever more the socket has
 * room for (one system call for most replies). For the first spin_ns it polls rather than
 * sleeps: on virtual machines, waking a sleeping thread costs more than most requests take
 * to serve. Then it sleeps until the exchange's deadline at most. A descriptor that arrives is
 * returned in *fd (if fd is NULL, it is closed). */
static int read_at_least(struct ferry_client *c, size_t need, int *fd)
{
    uint64_t spin_until = c->spin_ns && cpuload_can_poll() ? clock_mono_ns() + c->spin_ns : 0;
    int rc;

    pbuf_reserve(&c->in, need - c->in.len);
    if (c->in.oom)
        return client_broken(c, err_set(FERRY_ENOMEM, "reply of %zu bytes", need));
    while (c->in.len < need) {
        /* Once spinning is over: a blocking read without a deadline; with one, a wait for the
         * deadline first (a read that could only fail would cost a system call more). */
        int got = -1, flags = spin_until || c->deadline_ns ? MSG_DONTWAIT : 0;
        ssize_t n;
        if (!spin_until && c->deadline_ns && (rc = wait_ready(c, POLLIN, "answer")) < 0)
            return rc;
        n = usock_recv_fd(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, &got, flags);
        if (got >= 0) {
            if (fd && *fd < 0)
                *fd = got;
            else
                close(got);
        }
        if (n == -EAGAIN && spin_until) {
            if (clock_mono_ns() >= spin_until)
                spin_until = 0;
            sched_yield(); /* lets the daemon run should it share this CPU */
            continue;
        }
        if (n == -EAGAIN || n == -EINTR)
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
    c->req_type = type;
    proto_frame_begin(&c->out, type, ++c->tag);
}

/* Sends the request in c->out within the connection's timeout plus wait_ms. */
static int send_within(struct ferry_client *c, int64_t wait_ms)
{
    if (c->out.oom)
        return err_set(FERRY_ENOMEM, "request buffer");
    deadline_start(c, wait_ms);
    proto_frame_end(&c->out, 0);
    return write_all(c);
}

/* Sends a request that gets no reply. */
int client_req_send(struct ferry_client *c)
{
    return send_within(c, 0);
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
    return client_call_wait(c, type, 0);
}

int client_call_wait(struct ferry_client *c, uint16_t type, int64_t wait_ms)
{
    int rc = send_within(c, wait_ms);
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

int client_alive(struct ferry_client *c, uint64_t every_ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    uint64_t now = clock_mono_ns();

    if (every_ms && now - c->alive_ns < every_ms * 1000000ull)
        return 0;
    c->alive_ns = now;
    if (poll(&p, 1, 0) < 1 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
        return 0;
    return client_broken(c, err_set(FERRY_ECONN, "the daemon closed the connection (it stopped, "
                                                 "or was killed)"));
}

int ferry_connected(ferry_client *c)
{
    if (client_enter(c) < 0) /* NULL, or broken already: not locked */
        return 0;
    return client_leave(c, client_alive(c, 0)) == 0;
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
        return err_set(FERRY_ECONN,
                       "the connection to ferryd is unusable since an earlier call: %s",
                       c->broken_why);
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

    if (h && --h->refs == 0) {
        free(h->fast);
        free(idmap_remove(&c->held, id));
    }
}

/* ---- connection ---- */

/* The shared index the daemon named, unless $FERRY_FASTPATH is 0: gets go its way then. A
 * region that is not inside the arena, or not a valid index, leaves it off. */
static void fast_open(struct ferry_client *c, uint64_t off, uint64_t size)
{
    const char *v = getenv("FERRY_FASTPATH");

    c->fast_on = 0;
    if ((v && strcmp(v, "0") == 0) || c->fast_block == FASTIDX_NO_BLOCK || !size ||
        off > c->arena_size || size > c->arena_size - off)
        return;
    /* The index is the one region of the read-only view clients write (their slots): its own
     * pages, rounded to huge pages by the daemon. */
    c->fast_on = mprotect(c->base + off, size, PROT_READ | PROT_WRITE) == 0 &&
                 fastidx_view_open(&c->fast, c->base + off, size) == 0 &&
                 c->fast_block < c->fast.nblocks;
}

/* Maps the arena three times: read-only for gets, writable for libferry's own copies, and the
 * writable view of ferry_create (wview.h), whose protection goes by the arena's page size
 * (st_blksize: 2 MiB on huge pages). */
static int map_arena(struct ferry_client *c, int fd)
{
    struct stat st;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

    if (fstat(fd, &st) == 0 && st.st_blksize > 0 && (uint64_t)st.st_blksize > page)
        page = (uint64_t)st.st_blksize;
    /* MAP_NORESERVE: a shared hugetlb mapping otherwise reserves huge pages for the whole
     * range, and once any client has punched a hole in the arena whose page someone else
     * then took, that reservation fails and no new client could connect. Without it a hole
     * costs only whoever touches it: a client that reads or writes a punched page whose
     * memory cannot be found again gets SIGBUS (the daemon catches its own). */
    c->base = mmap(NULL, c->arena_size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (c->base == MAP_FAILED) {
        c->base = NULL;
        return err_sys("mmap(arena)");
    }
    c->copy_base =
        mmap(NULL, c->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (c->copy_base == MAP_FAILED) {
        c->copy_base = NULL;
        return err_sys("mmap(arena, libferry's copies)");
    }
    return wview_map(&c->wv, fd, c->arena_size, page);
}

static void unmap_arena(struct ferry_client *c)
{
    if (c->base)
        munmap(c->base, c->arena_size);
    if (c->copy_base)
        munmap(c->copy_base, c->arena_size);
    wview_unmap(&c->wv);
}

static int hello(struct ferry_client *c)
{
    uint64_t fast_off, fast_size;
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
    fast_off = prd_u64(&c->rd);
    fast_size = prd_u64(&c->rd);
    c->fast_block = prd_u32(&c->rd);
    c->fast_owner = prd_u64(&c->rd);
    if ((rc = client_reply_end(c)) < 0)
        goto close_fd;
    if (fd < 0) {
        rc = err_set(FERRY_EPROTO, "ferryd sent no arena descriptor");
        goto close_fd;
    }
    rc = map_arena(c, fd);
    if (rc == 0)
        fast_open(c, fast_off, fast_size);
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

/* $FERRY_TIMEOUT_MS, the connection's timeout of ferry_connect: milliseconds, or -1 for none. */
static int64_t timeout_setting(void)
{
    const char *v = getenv("FERRY_TIMEOUT_MS");
    char *end;
    long long ms;

    if (!v || !*v)
        return FERRY_DEFAULT_TIMEOUT_MS;
    ms = strtoll(v, &end, 10);
    return *end || ms == 0 || ms < -1 || ms > BOUND_MAX_MS ? FERRY_DEFAULT_TIMEOUT_MS : ms;
}

static int check_timeout(int64_t timeout_ms)
{
    if (timeout_ms == 0 || timeout_ms < -1 || timeout_ms > BOUND_MAX_MS)
        return err_set(FERRY_EINVAL, "timeout of %lld ms: -1 (none) or 1 to %lld",
                       (long long)timeout_ms, BOUND_MAX_MS);
    return 0;
}

const char *client_default_socket_at(const char *service_path)
{
    const char *env = getenv("FERRY_SOCKET"), *slash;
    char dir[PATH_MAX];
    struct stat st;

    if (env && *env)
        return env;
    if (!service_path || !(slash = strrchr(service_path, '/')) ||
        (size_t)(slash - service_path) >= sizeof(dir))
        return FERRY_DEFAULT_SOCKET;
    /* The service's directory, not its socket: the socket is missing while the service
     * restarts or persists, and a client must not turn to /tmp then. */
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - service_path), service_path);
    if (stat(dir[0] ? dir : "/", &st) == 0 || errno == EACCES)
        return service_path;
    return FERRY_DEFAULT_SOCKET;
}

int client_peer_trusted(int fd, const char *path, const char *default_path)
{
    const char *env = getenv("FERRY_SOCKET");
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (strcmp(path, default_path) != 0 || (env && *env))
        return 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return err_sys("getsockopt(SO_PEERCRED)");
    if (cred.uid == getuid() || cred.uid == 0)
        return 0;
    return err_set(FERRY_ECONN,
                   "the daemon at %s runs as uid %u, neither this user nor root: name its socket "
                   "(FERRY_SOCKET, --socket) to use it anyway",
                   path, (unsigned)cred.uid);
}

const char *client_default_socket(void)
{
    return client_default_socket_at(FERRY_SERVICE_SOCKET);
}

int ferry_connect(const char *socket_path, ferry_client **out)
{
    return ferry_connect_timeout(socket_path, timeout_setting(), out);
}

int ferry_connect_timeout(const char *socket_path, int64_t timeout_ms, ferry_client **out)
{
    struct ferry_client *c;
    int rc;

    if (!out)
        return err_set(FERRY_EINVAL, "NULL output handle");
    if ((rc = check_timeout(timeout_ms)) < 0)
        return rc;
    if (!socket_path)
        socket_path = client_default_socket();
    if (!(c = calloc(1, sizeof(*c))))
        return err_set(FERRY_ENOMEM, "client handle");
    c->spin_ns = spin_setting();
    c->timeout_ms = timeout_ms;
    if ((rc = usock_connect_within(socket_path, timeout_ms, &c->fd)) < 0)
        goto free_client;
    if ((rc = client_peer_trusted(c->fd, socket_path, FERRY_DEFAULT_SOCKET)) < 0) {
        close(c->fd);
        goto free_client;
    }
    pthread_mutex_init(&c->lock, NULL);
    if ((rc = hello(c)) < 0)
        goto close_socket;
    *out = c;
    return 0;

close_socket:
    unmap_arena(c);
    pthread_mutex_destroy(&c->lock);
    close(c->fd);
    pbuf_free(&c->out);
    pbuf_free(&c->in);
free_client:
    free(c);
    return rc;
}

int ferry_set_timeout(ferry_client *c, int64_t timeout_ms)
{
    int rc;

    if ((rc = check_timeout(timeout_ms)) < 0 || (rc = client_enter(c)) < 0)
        return rc;
    c->timeout_ms = timeout_ms;
    return client_leave(c, 0);
}

void ferry_disconnect(ferry_client *c)
{
    struct cheld *h;
    size_t pos = 0;

    if (!c)
        return;
    close(c->fd);
    unmap_arena(c);
    if (c->ring_state > 0)
        munmap(c->ring.base, (size_t)c->ring_size);
    while ((h = idmap_next(&c->held, &pos, NULL))) {
        free(h->fast); /* their slots: the daemon clears our block when it sees us go */
        free(h);
    }
    idmap_free(&c->held);
    pbuf_free(&c->out);
    pbuf_free(&c->in);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
