/* harness.c - see harness.h. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/proto.h"

/* ---- time and bounded waits ---- */

int64_t h_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void h_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void h_wait_begin(struct h_wait *w, int timeout_ms)
{
    w->deadline_ms = h_now_ms() + timeout_ms;
    w->tries = 0;
}

int h_wait_next(struct h_wait *w)
{
    /* 2 ms steps: the try count bounds the loop even if the clock misbehaves. */
    if (h_now_ms() >= w->deadline_ms || ++w->tries > 100000)
        return 0;
    h_sleep_ms(2);
    return 1;
}

int h_wait_exit(pid_t pid, int timeout_ms, int *status)
{
    struct h_wait w;
    for (h_wait_begin(&w, timeout_ms);;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 1;
        if (r < 0 && errno != EINTR)
            return 0;
        if (!h_wait_next(&w))
            return 0;
    }
}

/* ---- files ---- */

long h_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger)
                free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

int h_file_contains(const char *path, const char *s)
{
    char *text = read_file(path);
    int found = text && strstr(text, s) != NULL;
    free(text);
    return found;
}

void h_print_file(const char *path)
{
    char *text = read_file(path);
    fprintf(stderr, "---- %s ----\n%s---- end of %s ----\n", path, text ? text : "(unreadable)\n",
            path);
    free(text);
}

/* ---- daemons ---- */

void h_daemon_init(struct ferryd *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/ferry-it-XXXXXX");
    if (!mkdtemp(d->dir))
        fail_msg("mkdtemp: %s", strerror(errno));
    snprintf(d->sock, sizeof(d->sock), "%s/ferry.sock", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/ferryd.log", d->dir);
}

static void exec_daemon(const struct ferryd *d, const char *log, const char *memory,
                        const char *const *extra)
{
    const char *bin_dir = getenv("FERRY_BIN_DIR");
    char bin[512];
    snprintf(bin, sizeof(bin), "%s/ferryd", bin_dir ? bin_dir : ".");
    /* dies with the test process, however that ends */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        _exit(125);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
        _exit(126);
    const char *argv[32] = {bin, "--socket", d->sock, "--memory", memory};
    int argc = 5;
    for (int i = 0; extra && extra[i] && argc < 31; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    execv(bin, (char *const *)argv);
    dprintf(STDERR_FILENO, "harness: exec %s: %s\n", bin, strerror(errno));
    _exit(127);
}

pid_t h_daemon_spawn(const struct ferryd *d, const char *log, const char *memory,
                     const char *const *extra)
{
    if (!getenv("FERRY_BIN_DIR"))
        fail_msg("FERRY_BIN_DIR is not set (run the tests through ctest)");
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0)
        exec_daemon(d, log, memory, extra);
    return pid;
}

/* 1 once a libferry client can connect, 0 if the daemon exited or time ran out. */
static int wait_ready(struct ferryd *d, int timeout_ms)
{
    struct h_wait w;
    for (h_wait_begin(&w, timeout_ms);;) {
        ferry_client *c = NULL;
        if (ferry_connect(d->sock, &c) == FERRY_OK) {
            ferry_disconnect(c);
            return 1;
        }
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            fprintf(stderr, "ferryd exited during start (status 0x%x)\n", status);
            d->pid = 0;
            return 0;
        }
        if (!h_wait_next(&w))
            return 0;
    }
}

int h_daemon_try_start(struct ferryd *d, const char *memory, const char *const *extra)
{
    d->pid = h_daemon_spawn(d, d->log, memory, extra);
    if (wait_ready(d, H_START_MS))
        return 0;
    fprintf(stderr, "ferryd --memory %s did not accept connections within %d ms\n", memory,
            H_START_MS);
    h_print_file(d->log);
    h_daemon_kill(d);
    return -1;
}

void h_daemon_start(struct ferryd *d, const char *memory, const char *const *extra)
{
    if (h_daemon_try_start(d, memory, extra) != 0)
        fail_msg("ferryd did not start");
}

void h_daemon_kill(struct ferryd *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    int status;
    while (waitpid(d->pid, &status, 0) < 0 && errno == EINTR)
        ;
    d->pid = 0;
}

int h_daemon_try_stop(struct ferryd *d, char *why, size_t why_size)
{
    int status = 0;
    if (d->pid <= 0 || kill(d->pid, SIGTERM) != 0) {
        snprintf(why, why_size, "no ferryd to stop (pid %d)", (int)d->pid);
        return -1;
    }
    if (!h_wait_exit(d->pid, H_START_MS, &status)) {
        h_daemon_kill(d);
        snprintf(why, why_size, "ferryd did not exit within %d ms of SIGTERM", H_START_MS);
        return -1;
    }
    d->pid = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, why_size, "ferryd ended with status 0x%x after SIGTERM, not exit 0", status);
        return -1;
    }
    if (access(d->sock, F_OK) == 0) {
        snprintf(why, why_size, "ferryd left its socket %s behind", d->sock);
        return -1;
    }
    return 0;
}

void h_daemon_stop(struct ferryd *d)
{
    char why[256];
    if (h_daemon_try_stop(d, why, sizeof(why)) != 0) {
        h_print_file(d->log);
        fail_msg("%s", why);
    }
}

void h_daemon_cleanup(struct ferryd *d)
{
    if (!d->dir[0])
        return;
    DIR *dir = opendir(d->dir);
    struct dirent *e;
    char path[512];
    while (dir && (e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", d->dir, e->d_name);
        unlink(path);
    }
    if (dir)
        closedir(dir);
    rmdir(d->dir);
    d->dir[0] = '\0';
}

int h_setup(void **state, const char *memory, const char *const *extra)
{
    /* A client killed mid-test must not kill the test process with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    if (!getenv("FERRY_BIN_DIR"))
        fail_msg("FERRY_BIN_DIR is not set (run the tests through ctest)");
    struct ferryd *d = calloc(1, sizeof(*d));
    assert_non_null(d);
    h_daemon_init(d);
    if (h_daemon_try_start(d, memory, extra) != 0) {
        h_daemon_cleanup(d);
        free(d);
        fail_msg("ferryd did not start");
    }
    *state = d;
    return 0;
}

int h_teardown(void **state)
{
    struct ferryd *d = *state;
    if (!d)
        return 0;
    if (!d->ok) {
        fprintf(stderr, "test failed: log of its daemon follows\n");
        h_print_file(d->log);
    }
    *state = NULL;
    char why[256];
    int stopped = d->pid <= 0 || h_daemon_try_stop(d, why, sizeof(why)) == 0;
    if (!stopped && d->ok)
        h_print_file(d->log);
    h_daemon_cleanup(d);
    free(d);
    if (!stopped)
        fail_msg("%s", why);
    return 0;
}

/* ---- clients ---- */

ferry_client *h_connect(const struct ferryd *d)
{
    ferry_client *c = NULL;
    int rc = ferry_connect(d->sock, &c);
    if (rc != FERRY_OK)
        fail_msg("ferry_connect(%s): %s: %s", d->sock, ferry_strerror(rc), ferry_errmsg());
    assert_non_null(c);
    return c;
}

ferry_id h_id(const char *name)
{
    ferry_id id;
    assert_int_equal(ferry_id_parse(name, &id), FERRY_OK);
    return id;
}

ferry_id h_idf(const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    return h_id(name);
}

ferry_stats h_stats(ferry_client *c)
{
    ferry_stats s;
    memset(&s, 0xff, sizeof(s));
    int rc = ferry_stats_get(c, &s);
    if (rc != FERRY_OK)
        fail_msg("ferry_stats_get: %s: %s", ferry_strerror(rc), ferry_errmsg());
    return s;
}

uint64_t h_object_bytes(ferry_client *c)
{
    ferry_stats s = h_stats(c);
    assert_true(s.staging_bytes <= s.used_bytes);
    return s.used_bytes - s.staging_bytes;
}

uint64_t h_wait_stat(ferry_client *c, size_t field_offset, uint64_t want)
{
    struct h_wait w;
    uint64_t value;
    for (h_wait_begin(&w, H_EVENT_MS);;) {
        ferry_stats s = h_stats(c);
        memcpy(&value, (const char *)&s + field_offset, sizeof(value));
        if (value == want || !h_wait_next(&w))
            return value;
    }
}

int h_list_find(ferry_client *c, const ferry_id *id, ferry_object_info *out)
{
    ferry_object_info *all = NULL;
    size_t n = 0;
    int found = 0;
    assert_int_equal(ferry_list(c, &all, &n), FERRY_OK);
    for (size_t i = 0; i < n && !found; i++) {
        if (memcmp(all[i].id.bytes, id->bytes, FERRY_ID_SIZE) == 0) {
            *out = all[i];
            found = 1;
        }
    }
    free(all);
    return found;
}

void h_sync(ferry_client *c)
{
    ferry_id id = h_id("h_sync");
    h_contains(c, &id);
}

int h_contains(ferry_client *c, const ferry_id *id)
{
    int present = -1;
    assert_int_equal(ferry_contains(c, id, &present), FERRY_OK);
    assert_true(present == 0 || present == 1);
    return present;
}

/* ---- patterned data ---- */

static uint8_t pattern_byte(size_t i, uint32_t seed)
{
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    return (uint8_t)x;
}

void h_fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = pattern_byte(i, seed);
}

long h_check(const uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern_byte(i, seed))
            return (long)i;
    return -1;
}

uint32_t h_seed(const ferry_id *id)
{
    uint32_t s;
    memcpy(&s, id->bytes, sizeof(s));
    return s;
}

uint8_t *h_pattern(size_t n, uint32_t seed)
{
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    h_fill(p, n, seed);
    return p;
}

int h_put_direct(ferry_client *c, const ferry_id *id, uint64_t data_size, uint64_t meta_size)
{
    uint8_t *meta = h_pattern(meta_size, ~h_seed(id));
    uint8_t *data = NULL;
    int rc = ferry_create(c, id, data_size, meta, meta_size, &data);
    free(meta);
    if (rc != FERRY_OK)
        return rc;
    h_fill(data, data_size, h_seed(id));
    rc = ferry_seal(c, id);
    if (rc != FERRY_OK)
        return rc;
    return ferry_release(c, id);
}

void h_assert_buffer(const ferry_buffer *b, const ferry_id *id, uint64_t data_size,
                     uint64_t meta_size)
{
    assert_int_equal(b->status, FERRY_OK);
    assert_int_equal(b->data_size, data_size);
    assert_int_equal(b->metadata_size, meta_size);
    if (data_size)
        assert_non_null(b->data);
    if (meta_size)
        assert_non_null(b->metadata);
    assert_int_equal(h_check(b->data, data_size, h_seed(id)), -1);
    assert_int_equal(h_check(b->metadata, meta_size, ~h_seed(id)), -1);
}

void h_assert_object(ferry_client *c, const ferry_id *id, uint64_t data_size, uint64_t meta_size)
{
    ferry_buffer b;
    int rc = ferry_get(c, id, 1, 0, &b);
    if (rc != FERRY_OK)
        fail_msg("get: %s: %s", ferry_strerror(rc), ferry_errmsg());
    h_assert_buffer(&b, id, data_size, meta_size);
    assert_int_equal(ferry_release(c, id), FERRY_OK);
}

/* ---- raw protocol ---- */

uint8_t *h_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    return p + 2;
}

uint8_t *h_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}

uint8_t *h_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}

uint32_t h_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t h_rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int h_raw_connect(const char *sock)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
        fail_msg("connect(%s): %s", sock, strerror(errno));
    return fd;
}

int h_raw_write(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int h_raw_frame(int fd, uint16_t type, uint64_t tag, const void *payload, uint32_t len)
{
    uint8_t hdr[PROTO_HEADER_SIZE];
    uint8_t *p = h_le32(hdr, len);
    p = h_le16(p, type);
    p = h_le16(p, 0);
    h_le64(p, tag);
    if (h_raw_write(fd, hdr, sizeof(hdr)) != 0)
        return -1;
    return len ? h_raw_write(fd, payload, len) : 0;
}

/* Waits up to H_EVENT_MS for fd to be readable: 1 when it is. */
static int wait_readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r;
    while ((r = poll(&pfd, 1, H_EVENT_MS)) < 0 && errno == EINTR)
        ;
    return r > 0;
}

/* Reads exactly n bytes, closing any file descriptors that come along. 0 or -1. */
static int raw_read_exact(int fd, uint8_t *buf, size_t n)
{
    while (n > 0) {
        char cbuf[CMSG_SPACE(4 * sizeof(int))];
        struct iovec iov = {buf, n};
        struct msghdr m = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        if (!wait_readable(fd))
            return -1;
        ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; i++) {
                int got;
                memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                close(got);
            }
        }
        buf += r;
        n -= (size_t)r;
    }
    return 0;
}

long h_raw_reply(int fd, uint16_t want_type, void *buf, size_t cap)
{
    uint8_t hdr[PROTO_HEADER_SIZE];
    if (raw_read_exact(fd, hdr, sizeof(hdr)) != 0)
        return -1;
    uint32_t len = h_rd32(hdr);
    uint16_t type = (uint16_t)(hdr[4] | hdr[5] << 8);
    if (type != (want_type | PROTO_REPLY_BIT) || len > cap)
        return -1;
    if (raw_read_exact(fd, buf, len) != 0)
        return -1;
    return len;
}

int h_raw_hello(int fd)
{
    uint8_t payload[12], *p = h_le32(payload, PROTO_MAGIC);
    p = h_le32(p, PROTO_VERSION);
    h_le32(p, (uint32_t)getpid());
    if (h_raw_frame(fd, PROTO_HELLO, 1, payload, sizeof(payload)) != 0)
        return -1;
    uint8_t reply[512];
    long len = h_raw_reply(fd, PROTO_HELLO, reply, sizeof(reply));
    if (len < 4)
        return -1;
    int32_t status = (int32_t)h_rd32(reply);
    return status == 0 && len >= 4 + 16 ? 0 : -1;
}

int h_raw_wait_closed(int fd, int timeout_ms)
{
    struct h_wait w;
    uint8_t buf[4096];
    for (h_wait_begin(&w, timeout_ms);;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = (int)(w.deadline_ms - h_now_ms());
        if (left <= 0 || ++w.tries > 100000)
            return 0;
        int r = poll(&pfd, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        ssize_t got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno == ECONNRESET))
            return 1;
        if (got < 0 && errno != EAGAIN && errno != EINTR)
            return 0;
    }
}
