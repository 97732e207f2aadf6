/* hist.h - latency histograms with fixed bounds, for the metrics endpoint: cumulative counts
 * per bound are what Prometheus' histogram type wants. Owned by whoever counts; not shared
 * between threads. */
#ifndef FERRY_HIST_H
#define FERRY_HIST_H

#include <stdint.h>

/* Upper bounds of the buckets in ns, from 10 us to 10 s (1-2.5-5 steps); a last bucket holds
 * everything above. */
#define HIST_BOUNDS 19

struct hist {
    uint64_t count;
    uint64_t sum_ns;
    uint64_t bucket[HIST_BOUNDS + 1]; /* not cumulative; [HIST_BOUNDS] is above the last bound */
};

/* Counts one duration. */
void hist_add(struct hist *h, uint64_t ns);

/* The upper bound of bucket i < HIST_BOUNDS, in ns. */
uint64_t hist_bound_ns(unsigned i);

#endif
