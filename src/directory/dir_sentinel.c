/*
 * dir_sentinel.c - a directory behind Redis Sentinel (redis-sentinel://): before each connection
 * to the master, the sentinels are asked in turn where it is (SENTINEL get-master-addr-by-name),
 * each over a short connection of its own that goes through the same adapter, watchdog and
 * cleanup as the master's; the master's connection then starts with ROLE, so that a server
 * that is not (or no longer) the master is given up before anything is written to it. A
 * failover ends the master's connection (it dies, or answers READONLY), and the next one asks
 * again; the registration's republish puts this node's holdings on the new master.
 */
#include "directory/directory_int.h"

/* The answer: [ip, port], or nil when the sentinel knows no master of that name. The sentinel's
 * connection is dropped either way; connection_lost goes on from there. */
static void on_master_addr(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *r = reply;
    const struct sentinel_addr *s = &d->sentinels[d->sentinel_at];
    struct in_addr ip;
    uint64_t port = 0;

    if (!r)
        return;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= INET_ADDRSTRLEN ||
        inet_pton(AF_INET, r->element[0]->str, &ip) != 1 ||
        !dir_reply_u64(r->element[1], 10, &port) || port < 1 || port > 65535) {
        dir_drop(d, "sentinel %s:%d %s master %s", s->ip, s->port,
                 r->type == REDIS_REPLY_NIL ? "knows no" : "gave no usable address for", d->master);
        return;
    }
    inet_ntop(AF_INET, &ip, d->ip, sizeof(d->ip));
    d->port = (int)port;
    d->resolved = 1;
    snprintf(d->where, sizeof(d->where), "%s:%d/%d (master %s)", d->ip, d->port, d->db, d->master);
    dir_drop(d, "asked");
}

int dir_sentinel_ask(struct directory *d)
{
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", d->master};

    return dir_send_command(d, on_master_addr, NULL, 3, argv);
}

static void on_role(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *r = reply;
    char role[16];

    if (!r)
        return;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        !dir_string_copy(role, sizeof(role), r->element[0]))
        snprintf(role, sizeof(role), "no role");
    if (strcmp(role, "master") != 0)
        dir_drop(d, "%s is not the master (%s)", d->where, role);
}

int dir_sentinel_check_role(struct directory *d)
{
    const char *argv[] = {"ROLE"};

    return dir_send_command(d, on_role, NULL, 1, argv);
}

int dir_sentinel_next(struct directory *d)
{
    if (!d->resolved) {
        log_debug("directory: sentinel %s:%d: %s", d->sentinels[d->sentinel_at].ip,
                  d->sentinels[d->sentinel_at].port, d->why);
        if (++d->sentinel_at == d->nsentinels) {
            d->sentinel_at = 0;
            return 0;
        }
    }
    dir_arm(d, &d->reconnect, loop_now_ms());
    return 1;
}
