/* clock.h - the two clocks the daemon reads, in ns: monotonic for durations and deadlines,
 * real time for what people and other hosts read (creation times, the start time). */
#ifndef FERRY_CLOCK_H
#define FERRY_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

static inline uint64_t clock_real_ns(void)
{
    return clock_ns(CLOCK_REALTIME);
}

#endif
