/* stats.c - the table of the daemon's own counters (ferry.h's FERRY_STATS_FIELDS), shared by
 * the daemon, which reports by it, and the library, which reads by it. */
#include <stddef.h>
#include <string.h>

#include "ferry.h"

#define FIELD(name, kind, help)                                                                    \
    {#name, offsetof(struct ferry_stats, name), FERRY_STAT_##kind, help},
static const ferry_stat_field stat_fields[] = {FERRY_STATS_FIELDS(FIELD)};
#undef FIELD
#define N_STAT_FIELDS (sizeof(stat_fields) / sizeof(stat_fields[0]))
_Static_assert(N_STAT_FIELDS * sizeof(uint64_t) == sizeof(ferry_stats),
               "every field of struct ferry_stats is in the table");

const ferry_stat_field *ferry_stat_fields(size_t *n)
{
    if (n)
        *n = N_STAT_FIELDS;
    return stat_fields;
}

const ferry_stat_field *ferry_stat_field_find(const char *name)
{
    for (size_t i = 0; name && i < N_STAT_FIELDS; i++)
        if (strcmp(stat_fields[i].name, name) == 0)
            return &stat_fields[i];
    return NULL;
}
