#include "common/cpuload.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "common/clock.h"

#define CPULOAD_CACHE_NS 10000000ull

/* The last reading: (time in ns << 1) | verdict. Racing readers at worst both read the file. */
static _Atomic uint64_t cpuload_cached;

/* The "running" of /proc/loadavg's "running/total" field; -1 if unreadable. */
static long runnable_tasks(void)
{
    char buf[128];
    long running = -1;
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%*s %*s %*s %ld/", &running) != 1)
        return -1;
    return running;
}

int cpuload_can_poll(void)
{
    uint64_t now = clock_mono_ns(), c = atomic_load_explicit(&cpuload_cached, memory_order_relaxed);
    long running, cpus;
    int ok;

    if (c && now - (c >> 1) < CPULOAD_CACHE_NS)
        return (int)(c & 1);
    running = runnable_tasks();
    cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ok = running > 0 && cpus > 0 && running <= cpus;
    atomic_store_explicit(&cpuload_cached, now << 1 | (uint64_t)ok, memory_order_relaxed);
    return ok;
}
