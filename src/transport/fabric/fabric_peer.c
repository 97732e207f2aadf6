/*
 * fabric_peer.c - peers on this host (providers that name endpoints by string: shm). Our
 * endpoint's name carries our process id and pid namespace, so that a peer in the same
 * namespace can tell when we are gone, and the shared-memory regions of killed daemons can be
 * removed.
 *
 * The shm provider's region locks (a daemon killed inside one) are the business of
 * quirks/quirk_shmlock.c; here only what every provider on this host needs: nothing is posted to
 * a peer whose process has exited (one kill(pid, 0) per post), quiet peers of tcp providers are
 * probed, and the regions of killed daemons are swept.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "transport/fabric/fabric_int.h"

#define NAME_PREFIX "ferry-"
#define SHM_DIR "/dev/shm"

/* Our pid namespace (its inode): a process id means something only inside it. */
static unsigned long long pid_ns(void)
{
    struct stat st;

    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

void fab_local_name(char *name, size_t len)
{
    uint32_t r = 0;

    /* The random part: a daemon killed with SIGKILL leaves its region behind, and a later
     * process with the same id must not find its name taken (EBUSY). */
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = (uint32_t)clock_mono_ns();
    snprintf(name, len, NAME_PREFIX "%d-%llu-%08x", (int)getpid(), pid_ns(), r);
}

/* The process id in s (at a name of ours, as fab_local_name writes it) when its namespace is
 * ours; else 0. A name a peer made up can only make us check another process. */
static pid_t name_pid(const char *s)
{
    const char *at = strstr(s, NAME_PREFIX);
    char *end;
    unsigned long long ns;
    long pid;

    if (!at)
        return 0;
    pid = strtol(at + strlen(NAME_PREFIX), &end, 10);
    if (*end != '-' || pid <= 1 || pid > INT_MAX)
        return 0;
    ns = strtoull(end + 1, &end, 10);
    if (*end != '-' || ns == 0 || ns != pid_ns())
        return 0;
    return (pid_t)pid;
}

pid_t fab_name_pid(const struct xlistener *f, const uint8_t *name, size_t len)
{
    char s[FAB_NAME_MAX + 1];

    if (f->info->addr_format != FI_ADDR_STR || len > FAB_NAME_MAX)
        return 0;
    memcpy(s, name, len);
    s[len] = '\0';
    return name_pid(s);
}

static int process_exited(pid_t pid)
{
    return pid > 1 && kill(pid, 0) < 0 && errno == ESRCH;
}

int fab_pid_gone(pid_t pid)
{
    char path[32], stat[256];
    ssize_t n = -1;
    int fd;

    if (pid <= 1)
        return 0;
    if (process_exited(pid))
        return 1;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
        n = read(fd, stat, sizeof(stat) - 1);
        close(fd);
    }
    if (n <= 0)
        return 0;
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* "pid (comm) S ...": comm may hold anything */
    return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

/* Marks c's peer exited (counted and logged once): 1. */
static int peer_exited_now(struct fconn *c)
{
    if (!c->peer_exited) {
        c->peer_exited = 1;
        c->f->peer_exit_ms = loop_now_ms();
        quirks_watch_exited(c->f);
        c->f->stats.peers_exited++;
        log_warn("fabric: %s: its process %d has exited; nothing more is posted to it",
                 c->base.peer, (int)c->peer_pid);
    }
    return 1;
}

int fab_peer_exited(struct fconn *c)
{
    return process_exited(c->peer_pid) && peer_exited_now(c);
}

void fab_probe_init(struct fconn *c, const uint8_t *name, size_t len)
{
    uint32_t fmt = c->f->info->addr_format;

    if ((fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6 || fmt == FI_SOCKADDR) &&
        strstr(c->f->provider, "tcp") && len >= sizeof(struct sockaddr_in) &&
        len <= sizeof(c->probe_sa)) {
        memcpy(&c->probe_sa, name, len);
        c->probe_len = (socklen_t)len;
    }
}

/* Closes a probe with a reset, never a FIN: libfabric 1.17's tcp provider reads a stale errno
 * for an EOF on a connection-request socket (rx_cm_data) and may keep that socket, and what it
 * allocated for it, for ever (the peer then backs off as if it had garbage on its port); a
 * reset gives its recv an errno of its own. */
static void probe_close(int s)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    (void)setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(s);
}

void fab_probe_end(struct fconn *c)
{
    if (c->probe_fd >= 0)
        probe_close(c->probe_fd);
    c->probe_fd = -1;
}

/* Starts a TCP connect to c's peer address, never waiting: 1 when it is refused at once. */
static int probe_start(struct fconn *c)
{
    int s = socket(c->probe_sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (s < 0)
        return 0;
    if (connect(s, (struct sockaddr *)&c->probe_sa, c->probe_len) == 0) {
        probe_close(s); /* something listens: the peer's provider sees a stranger come and go */
        return 0;
    }
    if (errno == ECONNREFUSED) {
        close(s);
        return 1;
    }
    if (errno == EINPROGRESS)
        c->probe_fd = s;
    else
        close(s);
    return 0;
}

/* The probe under way: 1 refused (nothing listens: the peer's process is gone), 0 connected
 * or failed otherwise (which says nothing), -1 still under way (a remote host). */
static int probe_result(struct fconn *c)
{
    struct pollfd p = {.fd = c->probe_fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);

    if (poll(&p, 1, 0) == 0)
        return -1;
    if (getsockopt(c->probe_fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    fab_probe_end(c);
    return err == ECONNREFUSED;
}

/* A connection the peer made to us is probed at the address we dial it at, when we do: the
 * address is then the directory's, not one a stranger's CONNECT names. */
static void probe_adopt(struct fconn *c)
{
    for (struct fconn *d = c->f->all; d && !c->probe_len; d = d->anext) {
        if (d != c && d->addr == c->addr && d->probe_len) {
            c->probe_sa = d->probe_sa;
            c->probe_len = d->probe_len;
        }
    }
}

static int peer_gone(struct fconn *c)
{
    uint64_t quiet = (clock_mono_ns() - c->heard_ns) / 1000000;
    int refused = 0;

    if (c->peer_pid > 0 && fab_pid_gone(c->peer_pid)) /* a zombie too, here: one read a tick */
        return peer_exited_now(c);
    if (!c->probe_len && quiet >= FAB_PROBE_FIRST_MS)
        probe_adopt(c);
    if (c->probe_fd >= 0)
        refused = probe_result(c) == 1;
    else if (c->probe_len && c->probes < FAB_PROBE_MAX && quiet >= FAB_PROBE_FIRST_MS &&
             (!c->probes || clock_mono_ns() - c->probe_ns >= FAB_PROBE_EVERY_MS * 1000000ull)) {
        c->probes++;
        c->probe_ns = clock_mono_ns();
        refused = probe_start(c);
    }
    if (!refused)
        return 0;
    c->f->stats.peers_exited++;
    log_warn("fabric: %s refuses connections: its process is gone", c->base.peer);
    return 1;
}

void fab_peers_check(struct xlistener *f)
{
    uint64_t now = loop_now_ms();

    if (now - f->peers_checked_ms < FAB_PEER_CHECK_MS)
        return;
    f->peers_checked_ms = now;
    for (struct fconn *c = f->all; c; c = c->anext)
        if (!c->closed && peer_gone(c))
            fab_conn_fail(c, "its process is gone");
    fab_peers_watch(f);
}

void fab_peers_watch(struct xlistener *f)
{
    pid_t pids[QUIRKS_WATCH_PEERS];
    uint32_t n = 0;

    for (struct fconn *c = f->all; c; c = c->anext)
        if (!c->closed && c->peer_pid > 0 && n < QUIRKS_WATCH_PEERS)
            pids[n++] = c->peer_pid;
    quirks_watch_peers(f, pids, n);
}

void fab_peer_timer_arm(struct xlistener *f)
{
    if (f->peer_timer.heap_index == SIZE_MAX)
        (void)loop_timer_start(f->loop, &f->peer_timer, loop_now_ms() + FAB_PEER_CHECK_MS);
}

void fab_on_peer_timer(struct loop *l, struct loop_timer *t)
{
    struct xlistener *f = t->arg;

    fab_peers_check(f);
    for (struct fconn *c = f->all; c; c = c->anext) {
        if (!c->closed) { /* an idle daemon with no connection sleeps */
            fab_peer_timer_arm(f);
            return;
        }
    }
}

/* The only user who could truncate a region file of ours under our mapping can kill us anyway. */
int fab_region_file_ok(const struct stat *st, off_t min)
{
    return S_ISREG(st->st_mode) && st->st_uid == geteuid() && st->st_size >= min;
}

void fab_sweep_regions(void)
{
    DIR *d = opendir(SHM_DIR);
    struct dirent *e;
    char path[sizeof(SHM_DIR) + 256];
    struct stat st;
    unsigned removed = 0;

    if (!d)
        return;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, NAME_PREFIX, strlen(NAME_PREFIX)) ||
            !process_exited(name_pid(e->d_name)))
            continue;
        snprintf(path, sizeof(path), SHM_DIR "/%s", e->d_name);
        if (lstat(path, &st) == 0 && fab_region_file_ok(&st, 0))
            removed += unlink(path) == 0;
    }
    closedir(d);
    if (removed)
        log_info("fabric: removed %u shared-memory regions left by killed daemons", removed);
}
