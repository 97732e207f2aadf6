/* harness.c - see harness.h. */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/proto.h"
#include "free_port.h"
#include "transfer/wire.h"

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

/* FERRY_TEST_TRANSPORT runs the cluster suites over one transport: tcp, rxm (fabric over
 * tcp;ofi_rxm) or shm (fabric over shm); unset, the daemons choose (auto). */
static int transport_args(const char **argv, int argc)
{
    const char *t = getenv("FERRY_TEST_TRANSPORT");

    if (!t || !*t)
        return argc;
    if (strcmp(t, "tcp") == 0) {
        argv[argc++] = "--transport";
        argv[argc++] = "tcp";
        return argc;
    }
    argv[argc++] = "--transport";
    argv[argc++] = "fabric";
    argv[argc++] = "--fabric-provider";
    argv[argc++] = strcmp(t, "rxm") == 0 ? "tcp;ofi_rxm" : t;
    return argc;
}

/* FERRY_TEST_TIMERS (NAME=MS,..., tests/CMakeLists.txt sets it) becomes ferryd --timers: the
 * protocol's timers scaled down, so that a case waiting for one lasts seconds, not minutes.
 * Unset or empty (the cases that keep a timer at its real scale): the daemon's defaults. */
static int timers_args(const char **argv, int argc)
{
    const char *t = getenv("FERRY_TEST_TIMERS");

    if (!t || !*t)
        return argc;
    argv[argc++] = "--timers";
    argv[argc++] = t;
    return argc;
}

int h_timer_ms(const char *name, int real_ms)
{
    const char *t = getenv("FERRY_TEST_TIMERS");
    size_t len = strlen(name);

    for (const char *p = t; p; p = strchr(p, ',')) {
        p += *p == ','; /* NAME=MS[,NAME=MS...], as ferryd --timers reads it */
        if (strncmp(p, name, len) == 0 && p[len] == '=')
            return atoi(p + len + 1);
    }
    return real_ms;
}

rlim_t h_daemon_nofile;

static void exec_daemon(const struct ferryd *d, const char *log, const char *memory,
                        const char *const *extra)
{
    struct rlimit nofile = {h_daemon_nofile, h_daemon_nofile};

    const char *bin_dir = getenv("FERRY_BIN_DIR");
    char bin[512];
    snprintf(bin, sizeof(bin), "%s/ferryd", bin_dir ? bin_dir : ".");
    /* dies with the test process, however that ends */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        _exit(125);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
        _exit(126);
    if (h_daemon_nofile && setrlimit(RLIMIT_NOFILE, &nofile) != 0) {
        dprintf(STDERR_FILENO, "harness: setrlimit(RLIMIT_NOFILE, %llu): %s\n",
                (unsigned long long)h_daemon_nofile, strerror(errno));
        _exit(124);
    }
    const char *argv[40] = {bin, "--socket", d->sock, "--memory", memory};
    int argc = timers_args(argv, transport_args(argv, 5));
    for (int i = 0; extra && extra[i] && argc < 39; i++)
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
    kill(d->pid, SIGCONT); /* one a failed case left stopped (SIGSTOP) hears the SIGTERM too */
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

/* Removes dir and the files in it (no subdirectories). */
static void remove_dir(const char *path)
{
    DIR *dir = opendir(path);
    struct dirent *e;
    char file[512];
    while (dir && (e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
        unlink(file);
    }
    if (dir)
        closedir(dir);
    rmdir(path);
}

void h_daemon_cleanup(struct ferryd *d)
{
    if (!d->dir[0])
        return;
    remove_dir(d->dir);
    d->dir[0] = '\0';
}

/* What every fixture needs of the test process first. */
static void process_setup(void)
{
    /* A client killed mid-test must not kill the test process with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    /* A test that ctest times out still shows how far it came. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!getenv("FERRY_BIN_DIR"))
        fail_msg("FERRY_BIN_DIR is not set (run the tests through ctest)");
}

int h_setup(void **state, const char *memory, const char *const *extra)
{
    process_setup();
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
    int rc = ferry_stats_get(c, &s, sizeof(s));
    if (rc != FERRY_OK)
        fail_msg("ferry_stats_get: %s: %s", ferry_strerror(rc), ferry_errmsg());
    return s;
}

ferry_stats h_stats_bounded(ferry_client *c)
{
    H_OK(ferry_set_timeout(c, H_STAT_TIMEOUT_MS));
    ferry_stats s = h_stats(c);
    H_OK(ferry_set_timeout(c, FERRY_DEFAULT_TIMEOUT_MS));
    return s;
}

uint64_t h_open_create_bytes(uint64_t total)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (total + page - 1) / page * page;
}

uint64_t h_object_bytes(ferry_client *c)
{
    ferry_stats s = h_stats(c);
    assert_true(s.staging_bytes <= s.used_bytes);
    return s.used_bytes - s.staging_bytes;
}

uint64_t h_stat(ferry_client *c, const char *name)
{
    ferry_stat *all = NULL;
    size_t n = 0;
    int rc = ferry_stats_list(c, &all, &n);
    if (rc != FERRY_OK)
        fail_msg("ferry_stats_list: %s: %s", ferry_strerror(rc), ferry_errmsg());
    uint64_t v = ferry_stat_value(all, n, name);
    ferry_free(all);
    return v;
}

uint64_t h_wait_stat(ferry_client *c, const char *name, uint64_t want)
{
    struct h_wait w;
    uint64_t value;
    for (h_wait_begin(&w, H_EVENT_MS);;) {
        value = h_stat(c, name);
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
    assert_true(present >= FERRY_ABSENT && present <= FERRY_ON_DISK);
    return present != FERRY_ABSENT;
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

int h_read_exact(int fd, uint8_t *buf, size_t n)
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
    if (h_read_exact(fd, hdr, sizeof(hdr)) != 0)
        return -1;
    uint32_t len = h_rd32(hdr);
    uint16_t type = (uint16_t)(hdr[4] | hdr[5] << 8);
    if (type != (want_type | PROTO_REPLY_BIT) || len > cap)
        return -1;
    if (h_read_exact(fd, buf, len) != 0)
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

/* ---- cluster: Redis ---- */

int h_free_port(void)
{
    int port = free_port_pick();
    if (port < 0)
        fail_msg("no free TCP port on 127.0.0.1: %s", strerror(errno));
    return port;
}

/* A TCP connection to 127.0.0.1:port: the fd, or -1 with errno. */
static int tcp_connect(int port)
{
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* A listening socket on 127.0.0.1 (a free port, in *port). The kernel completes the TCP
 * handshake of a connecting node even while nobody accepts. */
int h_tcp_listen(int *port)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&addr, &len) != 0)
        fail_msg("bind/listen 127.0.0.1:0: %s", strerror(errno));
    *port = ntohs(addr.sin_port);
    return fd;
}

/* Reads one transfer frame: its type (the payload is read and dropped), or -1. */
int h_xfer_read_frame(int fd, uint8_t *payload, size_t cap, uint32_t *len)
{
    uint8_t hdr[PROTO_HEADER_SIZE];
    if (h_read_exact(fd, hdr, sizeof(hdr)) != 0)
        return -1;
    *len = h_rd32(hdr);
    if (*len > cap || h_read_exact(fd, payload, *len) != 0)
        return -1;
    return hdr[4] | hdr[5] << 8;
}

int h_xfer_hello(int fd, uint32_t magic)
{
    return h_xfer_hello_version(fd, magic, WIRE_VERSION);
}

int h_xfer_hello_version(int fd, uint32_t magic, uint32_t version)
{
    return h_xfer_hello_as(fd, magic, version, "intruder");
}

int h_xfer_hello_as(int fd, uint32_t magic, uint32_t version, const char *node)
{
    struct sockaddr_in sa;
    socklen_t salen = sizeof(sa);
    char addr[32];
    if (getpeername(fd, (struct sockaddr *)&sa, &salen) != 0)
        return -1;
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    size_t alen = strlen(addr);
    size_t nlen = strlen(node);
    uint8_t payload[4 + 4 + 1 + 32 + 8 + 2 + 32 + WIRE_NONCE] = {0}, *p = h_le32(payload, magic);
    if (nlen > 32)
        return -1;
    p = h_le32(p, version);
    *p++ = (uint8_t)nlen;
    memcpy(p, node, nlen);
    p = h_le64(p + nlen, 1);
    p = h_le16(p, (uint16_t)alen);
    memcpy(p, addr, alen);
    p += alen + WIRE_NONCE;
    return h_raw_frame(fd, WIRE_HELLO, 0, payload, (size_t)(p - payload));
}

/* HELLO, then the node's CHALLENGE read: 0, or -1. *keyed receives its keyed flag. */
int h_xfer_handshake_start(int fd, int *keyed)
{
    return h_xfer_handshake_start_as(fd, "intruder", keyed);
}

int h_xfer_handshake_start_as(int fd, const char *node, int *keyed)
{
    uint8_t payload[512];
    uint32_t len = 0;
    if (h_xfer_hello_as(fd, WIRE_MAGIC, WIRE_VERSION, node) != 0)
        return -1;
    int type = h_xfer_read_frame(fd, payload, sizeof(payload), &len);
    if (type != WIRE_CHALLENGE || len < 1 + WIRE_NONCE + 1 + WIRE_MAC)
        return -1;
    *keyed = payload[len - WIRE_MAC - 1];
    return 0;
}

int h_xfer_handshake(int fd)
{
    return h_xfer_handshake_as(fd, "intruder");
}

int h_xfer_handshake_as(int fd, const char *node)
{
    int keyed = -1;
    uint8_t zero_mac[WIRE_MAC] = {0};
    if (h_xfer_handshake_start_as(fd, node, &keyed) != 0 || keyed != 0)
        return -1;
    return h_raw_frame(fd, WIRE_AUTH, 0, zero_mac, sizeof(zero_mac));
}

uint8_t *h_xfer_pull_frame(uint64_t tag, const ferry_id *ids, uint32_t n, size_t *len)
{
    size_t plen = 1 + 8 + 4 + (size_t)n * FERRY_ID_SIZE;
    uint8_t *frame = malloc(PROTO_HEADER_SIZE + plen), *p = frame;
    if (!frame)
        return NULL;
    p = h_le32(p, (uint32_t)plen);
    p = h_le16(p, WIRE_PULL);
    p = h_le16(p, 0);
    p = h_le64(p, tag);
    *p++ = 0;                 /* no digests asked for */
    p = h_le64(p, 64u << 10); /* eager limit */
    p = h_le32(p, n);
    memcpy(p, ids, (size_t)n * FERRY_ID_SIZE);
    *len = PROTO_HEADER_SIZE + plen;
    return frame;
}

int h_xfer_pull(int fd, uint64_t tag, const ferry_id *ids, uint32_t n)
{
    size_t len;
    uint8_t *frame = h_xfer_pull_frame(tag, ids, n, &len);
    int rc = frame ? h_raw_write(fd, frame, len) : -1;
    free(frame);
    return rc;
}

int h_listen_ports(pid_t pid, int *ports, int max)
{
    char path[64], link[64], line[512];
    unsigned long inodes[256];
    int ninodes = 0, n = 0;
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    if (!dir)
        fail_msg("%s: %s", path, strerror(errno));
    for (struct dirent *de; (de = readdir(dir)) && ninodes < 256;) {
        char fdpath[400];
        snprintf(fdpath, sizeof(fdpath), "%s/%s", path, de->d_name);
        ssize_t len = readlink(fdpath, link, sizeof(link) - 1);
        if (len > 0) {
            link[len] = '\0';
            if (sscanf(link, "socket:[%lu]", &inodes[ninodes]) == 1)
                ninodes++;
        }
    }
    closedir(dir);
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        fail_msg("/proc/net/tcp: %s", strerror(errno));
    while (fgets(line, sizeof(line), f) && n < max) {
        unsigned port, state;
        unsigned long inode;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*d %*d %lu", &port, &state,
                   &inode) != 3 ||
            state != 0x0A)
            continue;
        for (int i = 0; i < ninodes; i++)
            if (inodes[i] == inode)
                ports[n++] = (int)port;
    }
    fclose(f);
    return n;
}

uint64_t h_cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long ut = 0, st = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, sizeof(buf), f))
        fail_msg("%s: cannot read", path);
    fclose(f);
    const char *p = strrchr(buf, ')'); /* the command may hold spaces */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        fail_msg("%s: unexpected format", path);
    return ut + st;
}

void h_rss_asan_quarantine(void)
{
#ifdef __SANITIZE_ADDRESS__
    const char *was = getenv("ASAN_OPTIONS");
    char opts[1024];
    snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=16", was ? was : "",
             was && *was ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
#endif
}

uint64_t h_rss_kib(pid_t pid)
{
    char path[64], line[256];
    unsigned long long kib = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("%s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f) && sscanf(line, "RssAnon: %llu kB", &kib) != 1)
        ;
    fclose(f);
    if (!kib)
        fail_msg("%s: no RssAnon", path);
    return kib;
}

int h_tcp_connect(int port)
{
    int fd = tcp_connect(port);
    if (fd < 0)
        fail_msg("connect 127.0.0.1:%d: %s", port, strerror(errno));
    return fd;
}

/* Reads into buf (NUL-terminated, up to cap - 1 bytes) until a CRLF arrives, the peer
 * closes or H_EVENT_MS pass. */
static void read_line(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    struct h_wait w;
    buf[0] = '\0';
    for (h_wait_begin(&w, H_EVENT_MS); len + 1 < cap && !strstr(buf, "\r\n");) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = (int)(w.deadline_ms - h_now_ms());
        if (left <= 0 || ++w.tries > 100000 || poll(&pfd, 1, left) <= 0)
            return;
        ssize_t got = recv(fd, buf + len, cap - 1 - len, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
            return;
        len += got > 0 ? (size_t)got : 0;
        buf[len] = '\0';
    }
}

int h_redis_ping(int port)
{
    int fd = tcp_connect(port);
    if (fd < 0)
        return 0;
    char reply[64];
    int ok = h_raw_write(fd, "PING\r\n", 6) == 0;
    if (ok)
        read_line(fd, reply, sizeof(reply));
    close(fd);
    return ok && strncmp(reply, "+PONG\r\n", 7) == 0;
}

static void exec_redis(const struct h_redis *r)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", r->port);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        _exit(125);
    int fd = open(r->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
        _exit(126);
    execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", r->dir, (char *)NULL);
    dprintf(STDERR_FILENO, "harness: exec redis-server: %s\n", strerror(errno));
    _exit(127);
}

/* 1 once the Redis answers PING, 0 if it exited or time ran out. */
static int redis_wait_ready(struct h_redis *r)
{
    struct h_wait w;
    for (h_wait_begin(&w, H_START_MS);;) {
        if (h_redis_ping(r->port))
            return 1;
        int status;
        if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
            fprintf(stderr, "redis-server exited during start (status 0x%x)\n", status);
            r->pid = 0;
            return 0;
        }
        if (!h_wait_next(&w))
            return 0;
    }
}

void h_redis_start(struct h_redis *r, int port)
{
    if (!r->dir[0]) {
        snprintf(r->dir, sizeof(r->dir), "/tmp/ferry-redis-XXXXXX");
        if (!mkdtemp(r->dir))
            fail_msg("mkdtemp: %s", strerror(errno));
        snprintf(r->log, sizeof(r->log), "%s/redis.log", r->dir);
    }
    r->port = port ? port : h_free_port();
    r->pid = fork();
    if (r->pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (r->pid == 0)
        exec_redis(r);
    if (redis_wait_ready(r))
        return;
    h_print_file(r->log);
    h_redis_kill(r);
    fail_msg("redis-server on port %d did not answer PING within %d ms", r->port, H_START_MS);
}

/* Sends argv to Redis and reads its reply's first line into reply (size > 2); fails the test
 * when none comes within H_EVENT_MS or it is an error. */
static void redis_ask(const struct h_redis *redis, const char *const *argv, char *reply,
                      size_t size)
{
    char req[1024];
    int n = 0, len = 0;
    while (argv[n])
        n++;
    len = snprintf(req, sizeof(req), "*%d\r\n", n);
    for (int i = 0; i < n && len < (int)sizeof(req); i++)
        len += snprintf(req + len, sizeof(req) - (size_t)len, "$%zu\r\n%s\r\n", strlen(argv[i]),
                        argv[i]);
    assert_true(len < (int)sizeof(req));
    int fd = h_tcp_connect(redis->port);
    assert_int_equal(h_raw_write(fd, req, (size_t)len), 0);
    size_t got = 0;
    struct h_wait w;
    reply[0] = '\0';
    for (h_wait_begin(&w, H_EVENT_MS); !strstr(reply, "\r\n") && got + 1 < size;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = (int)(w.deadline_ms - h_now_ms());
        if (left <= 0 || ++w.tries > 100000 || poll(&pfd, 1, left) <= 0)
            break;
        ssize_t r = recv(fd, reply + got, size - 1 - got, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            break;
        got += r > 0 ? (size_t)r : 0;
        reply[got] = '\0';
    }
    close(fd);
    if (!strstr(reply, "\r\n") || reply[0] == '-')
        fail_msg("redis %s: reply \"%s\"", argv[0], reply);
}

void h_redis_cmd(const struct h_redis *redis, const char *const *argv)
{
    char reply[256];

    redis_ask(redis, argv, reply, sizeof(reply));
}

long long h_redis_int(const struct h_redis *redis, const char *const *argv)
{
    char reply[256];

    redis_ask(redis, argv, reply, sizeof(reply));
    if (reply[0] != ':')
        fail_msg("redis %s: reply \"%s\", not an integer", argv[0], reply);
    return strtoll(reply + 1, NULL, 10);
}

void h_redis_kill(struct h_redis *r)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGKILL);
    while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    r->pid = 0;
}

void h_redis_cleanup(struct h_redis *r)
{
    if (!r->dir[0])
        return;
    remove_dir(r->dir);
    r->dir[0] = '\0';
}

/* ---- cluster: nodes ---- */

int h_cluster_setup(void **state)
{
    process_setup();
    struct h_cluster *cl = calloc(1, sizeof(*cl));
    assert_non_null(cl);
    *state = cl;
    h_redis_start(&cl->redis, 0);
    snprintf(cl->url, sizeof(cl->url), "redis://127.0.0.1:%d", cl->redis.port);
    return 0;
}

void h_cluster_print_logs(const struct h_cluster *cl)
{
    for (int i = 0; i < cl->n; i++) {
        fprintf(stderr, "log of %s (%s, pid %d):\n", cl->node[i].id, cl->node[i].listen,
                (int)cl->node[i].d.pid);
        h_print_file(cl->node[i].d.log);
    }
    if (cl->redis.dir[0])
        h_print_file(cl->redis.log);
}

/* Stops every node that still runs: 0, or -1 with the first reason in why. */
static int cluster_stop_nodes(struct h_cluster *cl, char *why, size_t why_size)
{
    int rc = 0;
    for (int i = 0; i < cl->n; i++) {
        struct h_node *nd = &cl->node[i];
        char reason[256];
        if (nd->d.pid > 0 && h_daemon_try_stop(&nd->d, reason, sizeof(reason)) != 0) {
            if (cl->ok)
                h_print_file(nd->d.log);
            if (rc == 0)
                snprintf(why, why_size, "%s: %s", nd->id, reason);
            rc = -1;
        }
        h_daemon_cleanup(&nd->d);
    }
    return rc;
}

int h_cluster_teardown(void **state)
{
    struct h_cluster *cl = *state;
    if (!cl)
        return 0;
    *state = NULL;
    if (!cl->ok) {
        fprintf(stderr, "test failed: the logs of its daemons and of Redis follow\n");
        h_cluster_print_logs(cl);
    }
    char why[320] = "";
    int rc = cluster_stop_nodes(cl, why, sizeof(why));
    h_redis_kill(&cl->redis);
    h_redis_cleanup(&cl->redis);
    free(cl);
    if (rc != 0)
        fail_msg("%s", why);
    return 0;
}

void h_node_start(struct h_cluster *cl, int i, const char *memory, const char *const *extra)
{
    assert_true(i >= 0 && i <= cl->n && i < H_CLUSTER_MAX);
    struct h_node *nd = &cl->node[i];
    if (i == cl->n) {
        h_daemon_init(&nd->d);
        snprintf(nd->id, sizeof(nd->id), "node-%c", 'a' + i);
        cl->n++;
    }
    assert_int_equal(nd->d.pid, 0);
    snprintf(nd->listen, sizeof(nd->listen), "127.0.0.1:%d", h_free_port());
    const char *argv[24] = {"--node-id", nd->id, "--listen", nd->listen, "--directory", cl->url};
    int argc = 6;
    for (int k = 0; extra && extra[k] && argc < 23; k++)
        argv[argc++] = extra[k];
    argv[argc] = NULL;
    h_daemon_start(&nd->d, memory, argv);
}

void h_cluster_start(struct h_cluster *cl, int n, const char *memory, const char *const *extra)
{
    int first = cl->n;
    for (int i = 0; i < n; i++)
        h_node_start(cl, first + i, memory, extra);
    for (int i = 0; i < cl->n; i++) {
        ferry_client *c = h_node_connect(cl, i);
        h_assert_nodes(c, cl, (1u << cl->n) - 1, H_CLUSTER_MS);
        ferry_disconnect(c);
    }
}

void h_node_kill(struct h_cluster *cl, int i)
{
    assert_true(i >= 0 && i < cl->n);
    h_daemon_kill(&cl->node[i].d);
}

ferry_client *h_node_connect(const struct h_cluster *cl, int i)
{
    assert_true(i >= 0 && i < cl->n);
    return h_connect(&cl->node[i].d);
}

int h_node_port(const struct h_cluster *cl, int i)
{
    const char *colon = strrchr(cl->node[i].listen, ':');
    assert_non_null(colon);
    return atoi(colon + 1);
}

/* The mask of cl's nodes that nodes[] lists, with their current addresses; bit 31 stands
 * for any entry that is none of them. Describes the list in seen. */
static unsigned nodes_mask(const struct h_cluster *cl, const ferry_node_info *nodes, size_t n,
                           char *seen, size_t seen_size)
{
    unsigned mask = 0;
    size_t used = 0;
    seen[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        unsigned bit = 1u << 31;
        for (int i = 0; i < cl->n; i++)
            if (strcmp(nodes[k].id, cl->node[i].id) == 0 &&
                strcmp(nodes[k].address, cl->node[i].listen) == 0)
                bit = 1u << i;
        mask |= bit;
        if (used < seen_size)
            used += (size_t)snprintf(seen + used, seen_size - used, "%s%s@%s[%s]%s", k ? " " : "",
                                     nodes[k].id, nodes[k].address, nodes[k].transports,
                                     nodes[k].self ? "(self)" : "");
    }
    return mask;
}

/* Polls list (ferry_nodes, or ferry_where of id) until it answers exactly mask. */
static int wait_mask(ferry_client *c, const struct h_cluster *cl, const ferry_id *id, unsigned mask,
                     int timeout_ms, char *seen, size_t seen_size)
{
    struct h_wait w;
    for (h_wait_begin(&w, timeout_ms);;) {
        ferry_node_info *nodes = NULL;
        size_t n = 0;
        int rc = id ? ferry_where(c, id, &nodes, &n) : ferry_nodes(c, &nodes, &n);
        unsigned got = 0;
        if (rc == FERRY_OK)
            got = nodes_mask(cl, nodes, n, seen, seen_size);
        else
            snprintf(seen, seen_size, "%s: %s", ferry_strerror(rc), ferry_errmsg());
        free(nodes);
        if (rc == FERRY_OK && got == mask)
            return 1;
        /* every 20 ms: each poll is a Redis round trip in the daemon */
        for (int k = 0; k < 10; k++)
            if (!h_wait_next(&w))
                return 0;
    }
}

int h_wait_nodes(ferry_client *c, const struct h_cluster *cl, unsigned mask, int timeout_ms,
                 char *seen, size_t seen_size)
{
    return wait_mask(c, cl, NULL, mask, timeout_ms, seen, seen_size);
}

int h_wait_where(ferry_client *c, const struct h_cluster *cl, const ferry_id *id, unsigned mask,
                 int timeout_ms, char *seen, size_t seen_size)
{
    return wait_mask(c, cl, id, mask, timeout_ms, seen, seen_size);
}

/* Names the nodes of mask, for messages. */
static void mask_names(const struct h_cluster *cl, unsigned mask, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < cl->n && used < size; i++)
        if (mask & (1u << i))
            used += (size_t)snprintf(out + used, size - used, "%s%s@%s", used ? " " : "",
                                     cl->node[i].id, cl->node[i].listen);
}

void h_assert_nodes(ferry_client *c, const struct h_cluster *cl, unsigned mask, int timeout_ms)
{
    char seen[1024], want[512];
    if (h_wait_nodes(c, cl, mask, timeout_ms, seen, sizeof(seen)))
        return;
    mask_names(cl, mask, want, sizeof(want));
    fail_msg("ferry_nodes did not list exactly {%s} within %d ms; last answer: {%s}", want,
             timeout_ms, seen);
}

void h_assert_where(ferry_client *c, const struct h_cluster *cl, const ferry_id *id, unsigned mask,
                    int timeout_ms)
{
    char seen[1024], want[512], hex[2 * FERRY_ID_SIZE + 1];
    if (h_wait_where(c, cl, id, mask, timeout_ms, seen, sizeof(seen)))
        return;
    mask_names(cl, mask, want, sizeof(want));
    ferry_id_format(id, hex);
    fail_msg("ferry_where(%s) did not list exactly {%s} within %d ms; last answer: {%s}", hex, want,
             timeout_ms, seen);
}

uint64_t h_wait_stat_min(ferry_client *c, const char *name, uint64_t want, int timeout_ms)
{
    struct h_wait w;
    uint64_t value;
    for (h_wait_begin(&w, timeout_ms);;) {
        value = h_stat(c, name);
        if (value >= want || !h_wait_next(&w))
            return value;
    }
}

void h_assert_same_object(ferry_client *c1, ferry_client *c2, const ferry_id *id)
{
    uint64_t digest1 = 0, digest2 = 1;
    H_OK(ferry_hash(c1, id, &digest1));
    H_OK(ferry_hash(c2, id, &digest2));
    assert_int_equal(digest1, digest2);
    ferry_buffer b1, b2;
    H_OK(ferry_get(c1, id, 1, 0, &b1));
    H_OK(ferry_get(c2, id, 1, 0, &b2));
    assert_int_equal(b1.data_size, b2.data_size);
    assert_int_equal(b1.metadata_size, b2.metadata_size);
    assert_true(b1.data_size == 0 || memcmp(b1.data, b2.data, b1.data_size) == 0);
    assert_true(b1.metadata_size == 0 || memcmp(b1.metadata, b2.metadata, b1.metadata_size) == 0);
    H_OK(ferry_release(c1, id));
    H_OK(ferry_release(c2, id));
}

/* ---- cluster: fetches in threads ---- */

/* What a fetch thread owns: it outlives a test that gave up waiting for it. */
struct h_fetch_run {
    ferry_client *c;
    ferry_id *ids;
    int *statuses;
    size_t n;
    int64_t timeout_ms, started_ms, ended_ms;
    int rc;
};

static void *fetch_thread(void *arg)
{
    struct h_fetch_run *r = arg;
    r->rc = ferry_fetch(r->c, r->ids, r->n, r->timeout_ms, r->statuses);
    __atomic_store_n(&r->ended_ms, h_now_ms(), __ATOMIC_RELEASE);
    return NULL;
}

int h_fetch_done(const struct h_fetch *f)
{
    return __atomic_load_n(&f->run->ended_ms, __ATOMIC_ACQUIRE) != 0;
}

int64_t h_stat_while_fetching(ferry_client *c, const struct h_fetch *f)
{
    int64_t worst = 0, end = h_now_ms() + f->timeout_ms + 5000;
    while (!h_fetch_done(f) && h_now_ms() < end) {
        int64_t t0 = h_now_ms();
        (void)h_stats_bounded(c);
        int64_t took = h_now_ms() - t0;
        worst = took > worst ? took : worst;
        h_sleep_ms(50);
    }
    return worst;
}

void h_fetch_start(struct h_fetch *f, ferry_client *c, const ferry_id *ids, size_t n,
                   int64_t timeout_ms, int *statuses)
{
    struct h_fetch_run *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->ids = malloc((n ? n : 1) * sizeof(*ids));
    r->statuses = malloc((n ? n : 1) * sizeof(int));
    assert_true(r->ids && r->statuses);
    memcpy(r->ids, ids, n * sizeof(*ids));
    for (size_t i = 0; i < n; i++)
        r->statuses[i] = 1; /* no status: one never filled in stays positive */
    r->c = c;
    r->n = n;
    r->timeout_ms = timeout_ms;
    r->rc = 1;
    r->started_ms = h_now_ms();
    *f = (struct h_fetch){.run = r, .timeout_ms = timeout_ms, .statuses = statuses, .rc = 1};
    assert_int_equal(pthread_create(&f->thread, NULL, fetch_thread, r), 0);
}

int h_join(pthread_t thread, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    int rc;
    while ((rc = pthread_timedjoin_np(thread, NULL, &deadline)) == EINTR)
        ;
    if (rc == 0)
        return 0;
    pthread_detach(thread);
    return ETIMEDOUT;
}

void h_fetch_join(struct h_fetch *f, int timeout_ms)
{
    if (h_join(f->thread, timeout_ms) != 0)
        fail_msg("ferry_fetch (timeout %lld ms) still running after %d ms",
                 (long long)f->timeout_ms, timeout_ms);
    struct h_fetch_run *r = f->run;
    f->rc = r->rc;
    f->ended_ms = r->ended_ms;
    f->elapsed_ms = r->ended_ms - r->started_ms;
    memcpy(f->statuses, r->statuses, r->n * sizeof(int));
    free(r->ids);
    free(r->statuses);
    free(r);
    f->run = NULL;
}

void h_write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        fail_msg("open %s: %s", path, strerror(errno));
    size_t len = strlen(text);
    int ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    if (!ok)
        fail_msg("write %s: failed", path);
}
