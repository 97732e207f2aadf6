/*
 * dir_owner.c - whether this node's id is free to take, at its first connection. An entry
 * under the id that another incarnation keeps refreshing is a live node using the id: this
 * node refuses it (the id_taken hook: the daemon stops, saying which node) rather than take
 * over its entry and remove its holdings. An entry that is not refreshed is an earlier run that
 * died: its TTL runs out within ttl_ms, and sooner a TCP connection to the transfer address it
 * names is refused (nothing listens there: a restart after a crash on the same host goes on at
 * once). One not signed with our secret was planted. In these cases the start goes on (the
 * registration replaces the entry). Two nodes that start at once under the same id, with no
 * entry yet, are not told apart.
 */
#include "directory/directory_int.h"

#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"

/* How often the entry is looked at while it may be refreshed (a heartbeat is
 * directory_config.heartbeat_ms apart). */
#define OWNER_POLL_MS 100u

static void on_owner(redisAsyncContext *ac, void *reply, void *priv);

static void owner_ask(struct directory *d)
{
    char key[NODE_KEY_MAX];
    const char *multi[] = {"MULTI"}, *all[] = {"HGETALL", key}, *pttl[] = {"PTTL", key};
    const char *exec[] = {"EXEC"};

    dir_entry_key(key, d->self.id);
    if (dir_send_command(d, dir_on_checked, "MULTI", 1, multi) < 0 ||
        dir_send_command(d, dir_on_checked, "HGETALL", 2, all) < 0 ||
        dir_send_command(d, dir_on_checked, "PTTL", 2, pttl) < 0 ||
        dir_send_command(d, on_owner, NULL, 1, exec) < 0)
        dir_drop(d, "cannot ask for this node id's entry");
}

void dir_owner_check(struct directory *d)
{
    d->owner_inc = 0;
    d->owner_ttl = 0;
    d->owner_decided = 0;
    owner_ask(d);
}

void dir_on_owner_timer(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (d->ac && !d->up && !d->owner_decided)
        owner_ask(d);
}

/* The id is free to take: the cleanup of earlier runs, then the registration. */
static void take(struct directory *d)
{
    d->owner_decided = 1;
    dir_owner_stop(d);
    dir_cleanup_start(d);
}

void dir_owner_stop(struct directory *d)
{
    loop_timer_stop(d->loop, &d->owner_timer);
    if (d->probe.fd < 0)
        return;
    loop_watch_del(d->loop, &d->probe);
    close(d->probe.fd);
    d->probe.fd = -1;
}

/* The probe's connection ended (closed by the caller): refused means that nothing listens
 * where the entry says. */
static void probe_done(struct directory *d, int err)
{
    if (err != ECONNREFUSED || d->owner_decided || !d->ac)
        return; /* something answers there, or cannot be reached: the TTL decides */
    log_info("directory: node id %s: nothing listens at %s, which its entry names: an earlier "
             "run that died; taking the id",
             d->self.id, d->owner_addr);
    take(d);
}

static void on_probe(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct directory *d = w->arg;
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    loop_watch_del(l, &d->probe);
    close(d->probe.fd);
    d->probe.fd = -1;
    probe_done(d, err);
}

/* Connects to addr (a numeric HOST:PORT, IPv6 in brackets) without waiting; no probe for a
 * name, which would need a resolver call that can block the loop. */
static void probe_start(struct directory *d, const char *addr)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                    *ai = NULL;
    char host[DIRECTORY_XPORT_ADDR_MAX + 1];
    const char *colon = strrchr(addr, ':');
    size_t hlen;
    int fd, rc, err;

    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host))
        return;
    hlen = (size_t)(colon - addr);
    if (addr[0] == '[' && addr[hlen - 1] == ']')
        snprintf(host, sizeof(host), "%.*s", (int)hlen - 2, addr + 1);
    else
        snprintf(host, sizeof(host), "%.*s", (int)hlen, addr);
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
    err = rc < 0 ? errno : 0;
    freeaddrinfo(ai);
    if (fd < 0)
        return;
    if (rc < 0 && err != EINPROGRESS) {
        close(fd);
        probe_done(d, err); /* refused at once: a closed port on this host */
    } else if (loop_watch_add(d->loop, &d->probe, fd, LOOP_WRITE, on_probe, d) < 0) {
        close(fd);
        d->probe.fd = -1; /* no probe: the TTL decides */
    }
}

/* The owner is alive: said, and the hook stops this node. Nothing is registered. */
static void refuse(struct directory *d, const struct directory_node *owner)
{
    char when[32];

    directory_inc_time(owner->inc, when, sizeof(when));
    snprintf(d->down_why, sizeof(d->down_why),
             "node id %s is in use by a live node (at %.80s, running since %s UTC)", d->self.id,
             owner->addr, when);
    log_error("directory: %s: this node stops; give it another --node-id, or stop that node "
              "first",
              d->down_why);
    d->refused = 1;
    d->owner_decided = 1;
    dir_owner_stop(d);
    if (d->hooks.id_taken)
        d->hooks.id_taken(d->hooks.ctx, d->down_why);
}

/* The reply to [HGETALL, PTTL] of the entry. */
static void on_owner(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct directory_node owner = {0};
    enum dir_entry kind;
    long long ttl;

    if (!rep)
        return;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[1]->type != REDIS_REPLY_INTEGER) {
        dir_drop(d, "this node id's entry: %s",
                 dir_reply_error(rep) ? dir_reply_error(rep) : "bad reply");
        return;
    }
    ttl = rep->element[1]->integer;
    snprintf(owner.id, sizeof(owner.id), "%s", d->self.id);
    kind = dir_wrongtype(rep->element[0]) ? DIR_ENTRY_MISSING
                                          : dir_parse_entry(d, rep->element[0], &owner);
    if (kind == DIR_ENTRY_UNSIGNED)
        dir_entry_refused(d, d->self.id);
    if (d->owner_decided)
        return; /* the probe decided while this was on its way */
    if (kind != DIR_ENTRY_OK || ttl < 0 || owner.inc == d->self.inc) {
        take(d); /* free, an earlier run's that expired, or planted */
        return;
    }
    /* A heartbeat sets the TTL back to its whole: a TTL longer than the last one seen, or
     * another incarnation, is a live node's. */
    if (d->owner_inc && (owner.inc != d->owner_inc || (uint64_t)ttl > d->owner_ttl)) {
        refuse(d, &owner);
        return;
    }
    if (!d->owner_inc) {
        log_info("directory: node id %s has an entry (at %s, %lld ms to live): waiting to see "
                 "whether its node is alive",
                 d->self.id, owner.addr, ttl);
        snprintf(d->owner_addr, sizeof(d->owner_addr), "%s", owner.addr);
        probe_start(d, owner.addr);
    }
    d->owner_inc = owner.inc;
    d->owner_ttl = (uint64_t)ttl;
    dir_arm(d, &d->owner_timer, loop_now_ms() + OWNER_POLL_MS);
}
