/* stats.c - libferry's counters: ferry_stats_get and ferry_stats_list, from the daemon's keyed
 * STATS reply (common/stats.c has the table of names). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/err.h"

/* Sends STATS and reads every entry into a new array. */
static int stats_call(struct ferry_client *c, ferry_stat **out, size_t *n)
{
    ferry_stat *v;
    uint32_t count;
    int rc;

    client_req_begin(c, PROTO_STATS);
    if ((rc = client_call(c, PROTO_STATS)) < 0)
        return rc;
    count = prd_u32(&c->rd);
    /* Each entry takes at least 11 bytes: a bound on the count before allocating. */
    if (count > PROTO_STATS_MAX || count > c->rd.left / 11)
        return client_broken(
            c, err_set(FERRY_EPROTO, "stats: %u entries in %zu bytes", count, c->rd.left));
    if (!(v = calloc(count ? count : 1, sizeof(*v))))
        return err_set(FERRY_ENOMEM, "%u stats", count);
    for (uint32_t i = 0; i < count; i++) {
        if (proto_get_stat(&c->rd, &v[i]) < 0) {
            free(v);
            return client_broken(c, FERRY_EPROTO);
        }
    }
    if ((rc = client_reply_end(c)) < 0) {
        free(v);
        return rc;
    }
    *out = v;
    *n = count;
    return 0;
}

uint64_t ferry_stat_value(const ferry_stat *v, size_t n, const char *name)
{
    for (size_t i = 0; v && name && i < n; i++)
        if (strcmp(v[i].name, name) == 0)
            return v[i].value;
    return 0;
}

int ferry_stats_list(ferry_client *c, ferry_stat **out, size_t *n)
{
    int rc;

    if (!out || !n)
        return err_set(FERRY_EINVAL, "stats: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    return client_leave(c, stats_call(c, out, n));
}

/* Fills the field of st named name, if it has one (a newer daemon may send more, an older one
 * fewer: what both know is taken, the rest stays 0). */
static void stats_set(ferry_stats *st, const ferry_stat *s)
{
    size_t n;
    const ferry_stat_field *f = ferry_stat_fields(&n);

    for (size_t i = 0; i < n; i++) {
        if (strcmp(f[i].name, s->name) == 0) {
            memcpy((char *)st + f[i].offset, &s->value, sizeof(s->value));
            return;
        }
    }
}

int ferry_stats_get(ferry_client *c, ferry_stats *out, size_t size)
{
    ferry_stat *all = NULL;
    ferry_stats st;
    size_t n = 0;
    int rc;

    if (!out || size == 0 || size % sizeof(uint64_t))
        return err_set(FERRY_EINVAL, "stats: %s, size %zu (a whole number of counters)",
                       out ? "a struct" : "NULL struct", size);
    if ((rc = ferry_stats_list(c, &all, &n)) < 0) {
        free(all); /* NULL: a failed list hands nothing out */
        return rc;
    }
    memset(&st, 0, sizeof(st));
    for (size_t i = 0; i < n; i++)
        stats_set(&st, &all[i]);
    free(all);
    /* The caller's struct may be an older release's (smaller: its counters are a prefix of
     * ours) or a newer one's (larger: the counters this release does not know are 0). */
    memcpy(out, &st, size < sizeof(st) ? size : sizeof(st));
    if (size > sizeof(st))
        memset((char *)out + sizeof(st), 0, size - sizeof(st));
    return 0;
}
