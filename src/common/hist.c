/* hist.c - latency histograms with fixed bounds (hist.h). */
#include "common/hist.h"

static const uint64_t bounds_ns[HIST_BOUNDS] = {
    10000,     25000,      50000,      100000,     250000,      500000,    1000000,
    2500000,   5000000,    10000000,   25000000,   50000000,    100000000, 250000000,
    500000000, 1000000000, 2500000000, 5000000000, 10000000000,
};

void hist_add(struct hist *h, uint64_t ns)
{
    unsigned i = 0;

    while (i < HIST_BOUNDS && ns > bounds_ns[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum_ns += ns;
}

uint64_t hist_bound_ns(unsigned i)
{
    return i < HIST_BOUNDS ? bounds_ns[i] : UINT64_MAX;
}
