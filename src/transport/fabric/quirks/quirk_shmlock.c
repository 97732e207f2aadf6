/*
 * quirk_shmlock.c - QUIRK_SHM_LOCK (quirks.h): the shm lock guard, the only code that reads the
 * shm provider's private region layout.
 *
 * Why: libfabric's shm provider before 2.5 guards each endpoint's region with a spin lock
 * shared between processes (senders take the receiver's, the receiver its own to progress). A
 * daemon killed while it holds one leaves it held for ever, and the next send to it, or the
 * next completion read of the region's owner, spins without end, holding our loop (2.5 made the
 * region lockless). So, while the workaround is on: where the provider keeps a region's lock is
 * found in our own region (checked against what we know of it: our pid, the region's own
 * address, an unlocked lock; anything else leaves the guard off). Nothing is posted to a peer
 * while its lock is held, and completions are not read while ours is: the loop comes back (1 ms
 * later) instead of spinning. Ours held past FAB_LOCK_STUCK_MS, while a peer was found exited,
 * has lost its holder (live ones hold it for microseconds) and is freed.
 * What remains: a holder killed in the instant between our look and the provider taking the
 * lock: the watchdog (quirk_watch.c) frees that one.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "transport/fabric/fabric_int.h"

#define SHM_DIR "/dev/shm"

/* The region file of an endpoint name ("fi_shm://NAME" or "NAME"): /dev/shm/NAME. 0, or -1
 * for a name that is no file name (a peer's name is only what it says). */
static int region_path(const uint8_t *name, size_t len, char *path, size_t n)
{
    char s[FAB_NAME_MAX + 1];
    const char *at;

    memcpy(s, name, len < FAB_NAME_MAX ? len : FAB_NAME_MAX);
    s[len < FAB_NAME_MAX ? len : FAB_NAME_MAX] = '\0';
    at = strstr(s, "://");
    at = at ? at + 3 : s;
    if (!*at || strchr(at, '/') || !strcmp(at, ".") || !strcmp(at, ".."))
        return -1;
    snprintf(path, n, SHM_DIR "/%s", at);
    return 0;
}

/* Where the provider mapped path in our process (from /proc/self/maps); NULL if it did not. */
static uint8_t *mapped_at(const char *path)
{
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512 + FAB_NAME_MAX];
    unsigned long long start = 0;
    size_t n = strlen(path);

    if (!m)
        return NULL;
    while (fgets(line, sizeof(line), m)) {
        size_t l = strcspn(line, "\n");
        line[l] = '\0';
        if (l >= n && strcmp(line + l - n, path) == 0 && sscanf(line, "%llx-", &start) == 1)
            break;
        start = 0;
    }
    fclose(m);
    return (uint8_t *)(uintptr_t)start;
}

/* struct smr_region (libfabric 1.17 to 2.4) begins u8 version, u8, u16 flags, int pid (fields
 * upstream keeps "for backwards compatibility"); later void *base_addr (where the owner mapped
 * it) and right after it the spin lock. */
#define REGION_PID_OFF 4
#define REGION_SCAN_END 256

/* Starts the watchdog over own (the guard is on), when its workaround is. */
static void watch_start(struct xlistener *f)
{
    int rc;

    if (!quirks_enabled(QUIRK_WATCHDOG))
        return;
    if ((rc = quirks_watch_start(&f->shm.watchdog, f->shm.own_lock)) < 0)
        log_warn("fabric: no watchdog thread (%s): a call stuck in the lock of a killed "
                 "process would not be freed",
                 strerror(-rc));
}

/* Where r's lock lies: the 8-byte offset after the region's own address (r) holding a free
 * lock; 0 when none does. */
static uint32_t find_lock(const uint8_t *r)
{
    for (uint32_t off = 8; off + 12 <= REGION_SCAN_END; off += 8) {
        uint64_t base;
        memcpy(&base, r + off, sizeof(base));
        if (base == (uintptr_t)r && *(const int *)(r + off + 8) == 1) /* x86-64 glibc: free */
            return off + 8;
    }
    return 0;
}

void quirks_shm_init(struct xlistener *f)
{
    char path[sizeof(SHM_DIR) + FAB_NAME_MAX + 1];
    uint8_t *r;

    if (!quirks_enabled(QUIRK_SHM_LOCK) || f->info->addr_format != FI_ADDR_STR ||
        strcmp(f->provider, "shm"))
        return;
    if (region_path(f->name, f->name_len, path, sizeof(path)) < 0 || !(r = mapped_at(path)) ||
        *(int *)(r + REGION_PID_OFF) != getpid() || !(f->shm.lock_off = find_lock(r))) {
        log_info("fabric: shm region layout not recognised: no guard against locks of killed "
                 "peers");
        quirks_off(QUIRK_SHM_LOCK);
        quirks_off(QUIRK_WATCHDOG);
        return;
    }
    f->shm.own_lock = (volatile int *)(r + f->shm.lock_off);
    log_info("fabric: guarding against shm region locks of killed peers");
    watch_start(f);
}

void quirks_shm_stop(struct xlistener *f)
{
    quirks_watch_stop(&f->shm.watchdog);
}

void quirks_peer_map(struct fconn *c, const uint8_t *name, size_t len)
{
    char path[sizeof(SHM_DIR) + FAB_NAME_MAX + 1];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct stat st;
    void *p = MAP_FAILED;
    int fd;

    if (!c->f->shm.lock_off || c->peer_pid <= 0 || region_path(name, len, path, sizeof(path)) < 0)
        return;
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return;
    if (fstat(fd, &st) == 0 && fab_region_file_ok(&st, (off_t)page)) /* writable: quirk_watch.c */
        p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return;
    if (*(int *)((uint8_t *)p + REGION_PID_OFF) != c->peer_pid) { /* not the peer's region */
        munmap(p, (size_t)sysconf(_SC_PAGESIZE));
        return;
    }
    c->peer_region = p;
}

void quirks_peer_unmap(struct fconn *c)
{
    if (c->peer_region)
        munmap(c->peer_region, (size_t)sysconf(_SC_PAGESIZE));
    c->peer_region = NULL;
}

int quirks_peer_locked(struct fconn *c)
{
    volatile int *lock;

    if (!c->peer_region)
        return 0;
    lock = (volatile int *)(c->peer_region + c->f->shm.lock_off);
    if (*lock == 1)
        return 0;
    quirks_acted(QUIRK_SHM_LOCK, 1);
    return 1;
}

void quirks_call_begin(struct xlistener *f, struct fconn *c)
{
    volatile int *lock =
        c && c->peer_region ? (volatile int *)(c->peer_region + f->shm.lock_off) : NULL;

    quirks_watch_enter(&f->shm.watchdog, lock, c ? c->peer_pid : 0);
}

void quirks_call_end(struct xlistener *f)
{
    uint32_t freed = quirks_watch_leave(&f->shm.watchdog);

    if (!freed)
        return;
    quirks_acted(QUIRK_WATCHDOG, freed);
    log_error("fabric: a provider call was stuck in a shared-memory lock whose holder was killed "
              "inside it; the watchdog freed it");
}

int quirks_held_look(struct quirks_held *h, volatile int *lock, uint64_t now_ms)
{
    if (*lock == 1) { /* x86-64 glibc: 1 is free (quirks_shm_init checks it) */
        *h = (struct quirks_held){0};
        return 0;
    }
    if (!h->since_ms)
        h->since_ms = now_ms;
    h->looks++;
    return 1;
}

int quirks_held_abandoned(const struct quirks_held *h, uint32_t min_looks, uint64_t exit_ms,
                          uint64_t now_ms)
{
    return h->since_ms && h->looks >= min_looks && now_ms - h->since_ms >= FAB_LOCK_STUCK_MS &&
           exit_ms && exit_ms + FAB_LOCK_STUCK_MS >= h->since_ms;
}

int quirks_own_locked(struct xlistener *f)
{
    uint64_t now = loop_now_ms();

    if (!f->shm.own_lock || !quirks_held_look(&f->shm.own_held, f->shm.own_lock, now))
        return 0;
    quirks_acted(QUIRK_SHM_LOCK, 1);
    if (!quirks_held_abandoned(&f->shm.own_held, FAB_LOCK_STUCK_POLLS, f->peer_exit_ms, now))
        return 1;
    log_error("fabric: our shared-memory region's lock has been held for %llu ms (%u looks): "
              "its holder was killed inside it; freeing it",
              (unsigned long long)(now - f->shm.own_held.since_ms), f->shm.own_held.looks);
    atomic_store((_Atomic int *)f->shm.own_lock, 1);
    f->stats.locks_recovered++;
    f->shm.own_held = (struct quirks_held){0};
    return 0;
}

void quirks_watch_peers(struct xlistener *f, const pid_t *pids, uint32_t n)
{
    quirks_watch_set_peers(&f->shm.watchdog, pids, n);
}

void quirks_watch_exited(struct xlistener *f)
{
    quirks_watch_note_exit(&f->shm.watchdog);
}
