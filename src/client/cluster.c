/* cluster.c - libferry's cluster calls: fetch, get with fetch, nodes, where, and the
 * transports: peers, fabric provider, eager limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "common/err.h"

/* FETCH_AT's table of the distinct locations in locs (the first PROTO_MAX_LOCS; ids of
 * others, and of none or one too long to be a location, go without: looked up) into table,
 * and each id's index into index (0: none, else 1 + its place). The table's size. */
static uint16_t locations_table(const char *const *locs, size_t n, const char **table,
                                uint16_t *index)
{
    uint16_t m = 0, last = 0;

    for (size_t i = 0; i < n; i++) {
        const char *s = locs[i];
        uint16_t k = 0;
        index[i] = 0;
        if (!s || !*s || strnlen(s, PROTO_MAX_LOCATION + 1) > PROTO_MAX_LOCATION)
            continue;
        if (last && table[last - 1] == s) { /* the same as the id before: the common case */
            index[i] = last;
            continue;
        }
        while (k < m && strcmp(table[k], s) != 0)
            k++;
        if (k == PROTO_MAX_LOCS)
            continue;
        if (k == m)
            table[m++] = s;
        index[i] = last = (uint16_t)(k + 1);
    }
    return m;
}

/* Sends FETCH (FETCH_AT with locs) and reads the statuses; the return is the first failure,
 * or 0. */
static int fetch_locked(struct ferry_client *c, const ferry_id *ids, const char *const *locs,
                        size_t n, int64_t timeout_ms, int *statuses)
{
    uint16_t type = locs ? PROTO_FETCH_AT : PROTO_FETCH, *index = NULL, m = 0;
    const char *table[PROTO_MAX_LOCS];
    char text[PROTO_MAX_DETAIL + 1];
    int rc, first;

    if (locs) {
        if (!(index = malloc((n ? n : 1) * sizeof(*index))))
            return err_set(FERRY_ENOMEM, "fetch: %zu location indexes", n);
        m = locations_table(locs, n, table, index);
    }
    client_req_begin(c, type);
    pbuf_u64(&c->out, (uint64_t)timeout_ms);
    pbuf_u32(&c->out, (uint32_t)n);
    pbuf_put(&c->out, ids, n * sizeof(ferry_id));
    if (locs) {
        pbuf_u16(&c->out, m);
        for (uint16_t k = 0; k < m; k++)
            proto_put_loc(&c->out, table[k]);
        for (size_t i = 0; i < n; i++)
            pbuf_u16(&c->out, index[i]);
        free(index);
    }
    /* The first failure's reason: which holders were tried, and why each failed. */
    if ((rc = client_call_wait(c, type, timeout_ms)) < 0 ||
        (rc = client_read_statuses(c, "fetch", n, NULL, statuses, &first, text)) < 0) {
        for (size_t i = 0; c->broken && i < n; i++)
            statuses[i] = FERRY_ECONN;
        return rc;
    }
    if (first)
        return err_set(first, "%s", text[0] ? text : ferry_strerror(first));
    return 0;
}

int ferry_fetch_at(ferry_client *c, const ferry_id *ids, const char *const *locations, size_t n,
                   int64_t timeout_ms, int *statuses)
{
    int rc;

    if ((n && (!ids || !statuses)) || n > PROTO_MAX_IDS || timeout_ms < -1)
        return err_set(FERRY_EINVAL, "fetch: %zu ids (at most %u), timeout %lld ms", n,
                       PROTO_MAX_IDS, (long long)timeout_ms);
    if ((rc = client_enter(c)) < 0)
        return rc;
    return client_leave(c, fetch_locked(c, ids, locations, n, timeout_ms, statuses));
}

int ferry_fetch(ferry_client *c, const ferry_id *ids, size_t n, int64_t timeout_ms, int *statuses)
{
    return ferry_fetch_at(c, ids, NULL, n, timeout_ms, statuses);
}

int ferry_location(ferry_client *c, char out[FERRY_LOCATION_MAX])
{
    int rc;

    if (!out)
        return err_set(FERRY_EINVAL, "location: NULL argument");
    out[0] = '\0';
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_LOCATION);
    if ((rc = client_call(c, PROTO_LOCATION)) == 0) {
        proto_get_loc(&c->rd, out);
        rc = client_reply_end(c);
    }
    return client_leave(c, rc);
}

int ferry_get_fetch(ferry_client *c, const ferry_id *ids, size_t n, int64_t timeout_ms,
                    ferry_buffer *out)
{
    int *statuses = calloc(n ? n : 1, sizeof(*statuses));
    char why[256];
    int rc, got;

    if (!statuses)
        return err_set(FERRY_ENOMEM, "get_fetch of %zu ids", n);
    /* The fetch spends the time budget; the get then takes what is local. */
    rc = ferry_fetch(c, ids, n, timeout_ms, statuses);
    if (rc == FERRY_EINVAL || rc == FERRY_ECONN || rc == FERRY_EPROTO || rc == FERRY_ENOMEM ||
        (n && statuses[0] == FERRY_ECONN)) {
        /* The call failed as a whole (a broken handle: its timeout, too): nothing is held. */
        for (size_t i = 0; i < n; i++)
            out[i] = (ferry_buffer){.status = FERRY_ECONN};
        free(statuses);
        return rc;
    }
    snprintf(why, sizeof(why), "%s", ferry_errmsg());
    got = ferry_get(c, ids, n, 0, out);
    /* What is missing is better explained by why its fetch failed than by "not there". */
    for (size_t i = 0; got == FERRY_ENOENT && i < n; i++)
        if (out[i].status != 0 && statuses[i] != 0)
            out[i].status = statuses[i];
    free(statuses);
    if (got == FERRY_ENOENT && rc < 0)
        return err_set(rc, "%s", why);
    return got;
}

/* Reads a node list reply into a new array. */
static int read_nodes(struct ferry_client *c, ferry_node_info **out, size_t *n)
{
    uint32_t count = prd_u32(&c->rd);
    ferry_node_info *v;

    /* Each entry takes at least 4 bytes: a bound on the count before allocating. */
    if (count > c->rd.left / 4)
        return client_broken(c, err_set(FERRY_EPROTO, "node list of %u entries", count));
    if (!(v = calloc(count ? count : 1, sizeof(*v))))
        return err_set(FERRY_ENOMEM, "node list");
    for (uint32_t i = 0; i < count; i++) {
        if (proto_get_node(&c->rd, &v[i]) < 0) {
            free(v);
            return client_broken(c, FERRY_EPROTO);
        }
    }
    if (client_reply_end(c) < 0) {
        free(v);
        return FERRY_EPROTO;
    }
    *out = v;
    *n = count;
    return 0;
}

int ferry_nodes(ferry_client *c, ferry_node_info **out, size_t *n)
{
    int rc;

    if (!out || !n)
        return err_set(FERRY_EINVAL, "nodes: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_NODES);
    if ((rc = client_call(c, PROTO_NODES)) == 0)
        rc = read_nodes(c, out, n);
    return client_leave(c, rc);
}

int ferry_where(ferry_client *c, const ferry_id *id, ferry_node_info **out, size_t *n)
{
    int rc;

    if (!id || !out || !n)
        return err_set(FERRY_EINVAL, "where: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_WHERE);
    pbuf_id(&c->out, id);
    if ((rc = client_call(c, PROTO_WHERE)) == 0)
        rc = read_nodes(c, out, n);
    return client_leave(c, rc);
}

/* Sends PEERS for up to max peers and reads the reply: the provider into provider (32
 * bytes), the peers into a new array *out (when out is not NULL) and their count into *n. */
static int peers_call(struct ferry_client *c, uint32_t max, char *provider, ferry_peer **out,
                      size_t *n)
{
    ferry_peer *v;
    uint32_t count;
    int rc;

    client_req_begin(c, PROTO_PEERS);
    pbuf_u32(&c->out, max);
    if ((rc = client_call(c, PROTO_PEERS)) < 0)
        return rc;
    proto_get_str(&c->rd, provider, sizeof(v->provider));
    count = prd_u32(&c->rd);
    if (c->rd.bad || count > max)
        return client_broken(c, err_set(FERRY_EPROTO, "peers: %u of at most %u", count, max));
    if (!(v = calloc(count ? count : 1, sizeof(*v))))
        return err_set(FERRY_ENOMEM, "%u peers", count);
    for (uint32_t i = 0; i < count; i++) {
        if (proto_get_peer(&c->rd, &v[i]) < 0) {
            free(v);
            return client_broken(c, FERRY_EPROTO);
        }
    }
    if ((rc = client_reply_end(c)) < 0) {
        free(v);
        return rc;
    }
    if (out)
        *out = v;
    else
        free(v);
    *n = count;
    return 0;
}

int ferry_peers(ferry_client *c, ferry_peer **out, size_t *n)
{
    char provider[sizeof((*out)->provider)];
    int rc;

    if (!out || !n)
        return err_set(FERRY_EINVAL, "peers: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    return client_leave(c, peers_call(c, PROTO_MAX_PEERS, provider, out, n));
}

int ferry_fabric_info(ferry_client *c, char provider[32])
{
    size_t n;
    int rc;

    if (!provider)
        return err_set(FERRY_EINVAL, "fabric info: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    return client_leave(c, peers_call(c, 0, provider, NULL, &n));
}

int ferry_set_eager_max(ferry_client *c, uint64_t bytes)
{
    int rc;

    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_EAGER_MAX);
    pbuf_u64(&c->out, bytes);
    if ((rc = client_call(c, PROTO_EAGER_MAX)) == 0)
        rc = client_reply_end(c);
    return client_leave(c, rc);
}
