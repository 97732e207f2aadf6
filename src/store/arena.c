#include "store/arena.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/size.h"

#define HUGE_PAGE_SIZE ((uint64_t)2 << 20)

/* The arena the SIGBUS handler patches (arena_catch_faults), read in the handler. */
static atomic_uintptr_t fault_base;
static atomic_uint_fast64_t fault_size, fault_page, fault_count;

/* A "Key: N kB" figure from /proc/meminfo in bytes, 0 when absent. */
static uint64_t meminfo_bytes(const char *key)
{
    char line[256];
    unsigned long long kb = 0;
    size_t klen = strlen(key);
    FILE *f = fopen("/proc/meminfo", "r");

    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            sscanf(line + klen + 1, "%llu", &kb);
            break;
        }
    }
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* Checks before reserving: fallocate on a memfd of more than the machine can back would
 * drive the machine into the OOM killer rather than fail. */
static int check_available(uint64_t size, int hugepages)
{
    char want[SIZE_FORMAT_LEN], have[SIZE_FORMAT_LEN];
    uint64_t avail;

    size_format(size, want, sizeof(want));
    if (hugepages) {
        avail = meminfo_bytes("HugePages_Free") * HUGE_PAGE_SIZE / 1024;
        if (size > avail)
            return err_set(FERRY_ENOSPACE,
                           "arena of %s needs %" PRIu64 " free 2 MiB huge pages, the machine "
                           "has %" PRIu64 " (raise /proc/sys/vm/nr_hugepages)",
                           want, size / HUGE_PAGE_SIZE, avail / HUGE_PAGE_SIZE);
        return 0;
    }
    avail = meminfo_bytes("MemAvailable");
    if (avail && size > avail)
        return err_set(FERRY_ENOSPACE, "arena of %s exceeds the machine's available memory of %s",
                       want, size_format(avail, have, sizeof(have)));
    return 0;
}

static int reserve(struct arena *a)
{
    char want[SIZE_FORMAT_LEN];
    int rc = fallocate(a->fd, 0, 0, (off_t)a->size);

    if (rc == 0)
        return 0;
    if (errno == ENOSPC || errno == ENOMEM)
        return err_set(FERRY_ENOSPACE, "cannot reserve an arena of %s%s: %s",
                       size_format(a->size, want, sizeof(want)),
                       a->hugepages ? " of huge pages" : "", strerror(errno));
    return err_sys("fallocate(arena)");
}

static uint64_t page_of(int hugepages)
{
    return hugepages ? HUGE_PAGE_SIZE : (uint64_t)sysconf(_SC_PAGESIZE);
}

uint64_t arena_page(const struct arena *a)
{
    return page_of(a->hugepages);
}

int arena_open(struct arena *a, uint64_t size, int hugepages)
{
    uint64_t page = page_of(hugepages);
    int rc;

    memset(a, 0, sizeof(*a));
    a->fd = -1;
    if (size == 0 || size > UINT64_MAX - page)
        return err_set(FERRY_EINVAL, "arena size %" PRIu64 " out of range", size);
    a->size = (size + page - 1) / page * page;
    a->hugepages = hugepages;
    if ((rc = check_available(a->size, hugepages)) < 0)
        return rc;
    if (a->size > (uint64_t)INT64_MAX)
        return err_set(FERRY_EINVAL, "arena size %" PRIu64 " out of range", size);
    a->fd = memfd_create("ferry-arena",
                         MFD_CLOEXEC | MFD_ALLOW_SEALING | (hugepages ? MFD_HUGETLB : 0));
    if (a->fd < 0) {
        rc = err_sys(hugepages ? "memfd_create(MFD_HUGETLB)" : "memfd_create");
        goto fail;
    }
    if (ftruncate(a->fd, (off_t)a->size) < 0) {
        rc = err_sys("ftruncate(arena)");
        goto close_fd;
    }
    if ((rc = reserve(a)) < 0)
        goto close_fd;
    /* Every client gets this fd, writable: its size is sealed, so that no client can shrink
     * the arena under the others (SIGBUS for every mapping) or grow it. */
    if (fcntl(a->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        rc = err_sys("sealing the arena's size");
        goto close_fd;
    }
    a->base = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (a->base == MAP_FAILED) {
        a->base = NULL;
        rc = err_sys("mmap(arena)");
        goto close_fd;
    }
    return 0;

close_fd:
    close(a->fd);
    a->fd = -1;
fail:
    return rc;
}

/* Small: populating holds the address space's lock (read), and the loop thread's mmap and
 * munmap (large allocations: often, under ASan) wait for it to finish a chunk. */
#define PREFAULT_CHUNK (256ull << 10)

static void *prefaulter(void *arg)
{
    struct arena *a = arg;
    struct timespec t0, t1;
    uint64_t off;

    /* At the loop's own priority, not below it: the loop waits for a chunk's lock, and a thread
     * at nice 19 on a busy machine held it for seconds between turns on a CPU (an inversion: a
     * node starting beside a full suite answered no hello for over 3 s, its arena mapped only
     * after 13.6 s). */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (off = 0; off < a->size && !atomic_load(&a->stop_prefault); off += PREFAULT_CHUNK) {
        uint64_t len = a->size - off < PREFAULT_CHUNK ? a->size - off : PREFAULT_CHUNK;
        /* Maps without writing: pages clients filled meanwhile keep their bytes. */
        if (madvise(a->base + off, len, MADV_POPULATE_WRITE) < 0) {
            /* kernels before 5.14: pages are mapped at first touch, as without this */
            log_info("arena mapped at first touch: madvise(MADV_POPULATE_WRITE): %s",
                     strerror(errno));
            return NULL;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (off >= a->size) /* "arena mapped" either way: scripts/testbed.sh waits for it */
        log_info("arena mapped in %.0f ms",
                 (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    return NULL;
}

int arena_prefault_start(struct arena *a)
{
    int rc = pthread_create(&a->prefaulter, NULL, prefaulter, a);

    if (rc != 0)
        return err_set(FERRY_ESYS, "pthread_create(prefaulter): %s", strerror(rc));
    a->prefaulting = 1;
    return 0;
}

/* Async-signal-safe: atomics, mmap and sigaction only. */
static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
    uintptr_t base = atomic_load(&fault_base), addr = (uintptr_t)si->si_addr;
    uint64_t size = atomic_load(&fault_size), page = atomic_load(&fault_page);
    struct sigaction dfl = {.sa_handler = SIG_DFL};

    (void)uctx;
    if (si->si_code > 0 && base && addr >= base && addr - base < size) {
        void *at = (void *)(base + (addr - base) / page * page);
        if (mmap(at, page, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1,
                 0) != MAP_FAILED) {
            atomic_fetch_add(&fault_count, 1);
            return; /* the faulting access runs again, on the new page */
        }
    }
    /* Not the arena's: the default action, as without this handler (a fault repeats on return;
     * a signal sent by kill is sent again). */
    sigaction(SIGBUS, &dfl, NULL);
    if (si->si_code <= 0)
        raise(sig);
}

int arena_catch_faults(struct arena *a)
{
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO};

    atomic_store(&fault_size, a->size);
    atomic_store(&fault_page, arena_page(a));
    atomic_store(&fault_base, (uintptr_t)a->base);
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) < 0)
        return err_sys("sigaction(SIGBUS)");
    return 0;
}

uint64_t arena_faults(void)
{
    return atomic_load(&fault_count);
}

void arena_close(struct arena *a)
{
    if (a->prefaulting) {
        atomic_store(&a->stop_prefault, 1);
        pthread_join(a->prefaulter, NULL);
        a->prefaulting = 0;
    }
    if (a->base && atomic_load(&fault_base) == (uintptr_t)a->base)
        atomic_store(&fault_base, 0);
    if (a->base)
        munmap(a->base, a->size);
    if (a->fd >= 0)
        close(a->fd);
    a->base = NULL;
    a->fd = -1;
}
