/* stats.c - libferry's counters: ferry_stats_get and the table that names each field. */
#include <stddef.h>
#include <string.h>

#include "client/client.h"
#include "common/err.h"

#define FIELD(f) #f, offsetof(struct ferry_stats, f)
static const ferry_stat_field stat_fields[] = {
    {FIELD(capacity_bytes)},
    {FIELD(used_bytes)},
    {FIELD(staging_bytes)},
    {FIELD(objects)},
    {FIELD(sealed_objects)},
    {FIELD(clients)},
    {FIELD(evicted_objects)},
    {FIELD(evicted_bytes)},
    {FIELD(created_objects)},
    {FIELD(sealed_total)},
    {FIELD(aborted_objects)},
    {FIELD(deleted_objects)},
    {FIELD(gets)},
    {FIELD(get_timeouts)},
    {FIELD(refused_creates)},
    {FIELD(protocol_errors)},
    {FIELD(connections_total)},
    {FIELD(subscribers)},
    {FIELD(notifications_dropped)},
    {FIELD(connections_opened)},
    {FIELD(connections_accepted)},
    {FIELD(fetches)},
    {FIELD(transfers_in)},
    {FIELD(transfers_out)},
    {FIELD(transfer_failures)},
    {FIELD(bytes_in)},
    {FIELD(bytes_out)},
    {FIELD(peer_errors)},
    {FIELD(directory_up)},
    {FIELD(directory_lookups)},
    {FIELD(directory_cache_hits)},
    {FIELD(directory_reconnects)},
    {FIELD(eager_max)},
    {FIELD(fabric_registrations)},
    {FIELD(fabric_av_inserts)},
    {FIELD(fabric_connects)},
    {FIELD(fabric_connect_us)},
    {FIELD(fabric_eager_msgs)},
    {FIELD(fabric_eager_bytes)},
    {FIELD(fabric_rdv_reads)},
    {FIELD(fabric_rdv_bytes)},
    {FIELD(fabric_leases_expired)},
    {FIELD(fabric_credit_stalls)},
    {FIELD(fabric_retries)},
    {FIELD(fabric_failures)},
    {FIELD(fabric_fallbacks)},
    {FIELD(fabric_unattributed_errors)},
};
#undef FIELD
#define N_STAT_FIELDS (sizeof(stat_fields) / sizeof(stat_fields[0]))
_Static_assert(N_STAT_FIELDS * sizeof(uint64_t) == sizeof(ferry_stats),
               "a field of struct ferry_stats is missing from stat_fields");

const ferry_stat_field *ferry_stat_fields(size_t *n)
{
    if (n)
        *n = N_STAT_FIELDS;
    return stat_fields;
}

int ferry_stats_get(ferry_client *c, ferry_stats *out)
{
    uint64_t *fields = (uint64_t *)out;
    size_t nfields = sizeof(*out) / sizeof(uint64_t);
    uint32_t n;
    int rc;

    if (!out)
        return err_set(FERRY_EINVAL, "stats: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_STATS);
    if ((rc = client_call(c, PROTO_STATS)) < 0)
        return client_leave(c, rc);
    /* A newer daemon may send more fields, an older one fewer: take what both know. */
    n = prd_u32(&c->rd);
    memset(out, 0, sizeof(*out));
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v = prd_u64(&c->rd);
        if (i < nfields)
            fields[i] = v;
    }
    return client_leave(c, client_reply_end(c));
}
