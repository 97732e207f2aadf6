/*
 * dir_owner.c - whether this node's id is free to take, at a connection before its first
 * registration. A node is taken for alive, and the id refused, when all hold: another
 * incarnation's entry under the id is refreshed (its TTL rises, as a heartbeat sets it back),
 * it carries a heartbeat time (beat, signed with the id and incarnation under the secret when
 * there is one: bsig) that rose between two looks to at least this run's start, and a TCP
 * connection to the transfer address the entry names is accepted. A writer of Redis can keep a
 * dead run's signed entry alive and something can listen at its old address, but nobody
 * without the secret can sign a heartbeat made after this run began: such an entry is a replay
 * (counted in replayed_entries once it is taken over). Without a secret, an entry without beat
 * (a node of an earlier version) is judged by its TTL and address alone. Anything else is
 * an earlier run that died, or a planted entry, and the start goes on (the registration
 * replaces the entry):
 * - an entry naming this node's own address: this run is bound there, so no other is;
 * - a connection to its address refused: nothing listens there (a crash on this host);
 * - an entry not signed with our secret, or without an incarnation;
 * - an entry that expires, or is refreshed while its address does not answer or its heartbeat
 *   time does not pass this run's start, for longer than a TTL and a heartbeat (a writer of
 *   Redis refreshing a dead node's entry, even with something answering at its address, cannot
 *   hold a restart back for longer). A live node whose clock is behind this one's by more than
 *   about a TTL is not told apart either.
 * Within OWNER_EXIT_WINDOW_MS of directory_open a refusal ends the node (hooks.id_taken, from
 * the turn timer); later (Redis was down at start, the node serves already) the node stays up
 * and unregistered, says why (directory_down_why) and looks again at each reconnection. Two
 * nodes that start at once under one id, before either registered, are not told apart, nor is
 * a duplicate started while the live node's entry had expired (its Redis connection down).
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
/* A refusal this long after directory_open no longer ends the node (see above). */
#define OWNER_EXIT_WINDOW_MS 60000u

static void on_owner(redisAsyncContext *ac, void *reply, void *priv);

/* Whether the check is over or moot: decided, or the directory is going. */
static int owner_over(const struct directory *d)
{
    return d->owner_decided || d->leaving || d->closing || !d->ac;
}

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

void dir_owner_check(struct directory *d, void (*then)(struct directory *d))
{
    dir_owner_stop(d);
    d->owner_then = then;
    d->owner_inc = 0;
    d->owner_ttl = 0;
    d->owner_since_ms = 0;
    d->owner_beat = 0;
    d->owner_listening = 0;
    d->owner_decided = 0;
    owner_ask(d);
}

void dir_on_owner_timer(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (!owner_over(d))
        owner_ask(d);
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

/* The id is free to take: the owner's next step (the cleanup of earlier runs, then the
 * registration). */
static void take(struct directory *d, const char *why)
{
    d->owner_decided = 1;
    dir_owner_stop(d);
    if (why)
        log_info("directory: node id %s: %s; taking the id", d->self.id, why);
    d->down_why[0] = '\0';
    d->owner_then(d);
}

/* The owner is alive: said; early in the node's life the hook ends it (from the turn),
 * later the connection is dropped with the reason and the check runs again after it. */
static void refuse(struct directory *d, const struct directory_node *owner)
{
    char when[32], why[sizeof(d->down_why)];

    d->owner_decided = 1;
    dir_owner_stop(d);
    directory_inc_time(owner->inc, when, sizeof(when));
    snprintf(why, sizeof(why),
             "node id %s is in use by a live node (at %.80s, running since %s UTC)", d->self.id,
             owner->addr, when);
    if (loop_now_ms() - d->opened_ms < OWNER_EXIT_WINDOW_MS && d->hooks.id_taken) {
        log_error("directory: %s: this node stops; give it another --node-id, or stop that "
                  "node first",
                  why);
        snprintf(d->down_why, sizeof(d->down_why), "%s", why);
        d->refused = 1;
        dir_turn_soon(d);
        return;
    }
    log_error("directory: %s: this node stays unregistered and looks again", why);
    dir_drop(d, "%s", why);
}

void dir_owner_deliver(struct directory *d)
{
    if (d->refused != 1)
        return;
    d->refused = 2;
    d->hooks.id_taken(d->hooks.ctx, d->down_why);
}

/* The probe's connection ended (closed by the caller): refused means that nothing listens
 * where the entry says; accepted, that something does. */
static void probe_done(struct directory *d, int err)
{
    d->owner_listening = err == 0;
    if (err == ECONNREFUSED && !owner_over(d))
        take(d, "nothing listens at the address its entry names: an earlier run that died");
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

/* Connects to addr (a numeric HOST:PORT, IPv6 in brackets) without waiting: no probe of a
 * name, which would need a resolver call that can block the loop (the TTL then decides). */
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
    if (addr[0] == '[' && hlen >= 2 && addr[hlen - 1] == ']')
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
    if (rc == 0 || err != EINPROGRESS) {
        close(fd);
        probe_done(d, err); /* answered at once: this host's own port */
    } else if (loop_watch_add(d->loop, &d->probe, fd, LOOP_WRITE, on_probe, d) < 0) {
        close(fd);
        d->probe.fd = -1; /* no probe: the TTL decides */
    }
}

/* The first look at a live-looking entry: said, and its address probed. */
static void owner_seen(struct directory *d, const struct directory_node *owner, long long ttl)
{
    snprintf(d->down_why, sizeof(d->down_why),
             "looking whether node id %s, whose entry names %.80s, is alive", d->self.id,
             owner->addr);
    log_info("directory: node id %s has an entry (at %s, %lld ms to live): waiting to see "
             "whether its node is alive",
             d->self.id, owner->addr, ttl);
    d->owner_since_ms = loop_now_ms();
    probe_start(d, owner->addr);
}

/* What an entry says of its node's last heartbeat. */
enum beat { BEAT_NONE, BEAT_UNSIGNED, BEAT_OK };

/* The heartbeat time of entry r (a reply to HGETALL) of owner into *beat: BEAT_OK when it has
 * one, signed with our secret when there is one; BEAT_UNSIGNED when it has one that is not (or
 * malformed); BEAT_NONE when it has none. */
static enum beat entry_beat(const struct directory *d, const redisReply *r,
                            const struct directory_node *owner, uint64_t *beat)
{
    char text[U64_TEXT] = "", sig[DIR_SIG_HEX] = "", inc[U64_TEXT], expect[DIR_SIG_HEX];
    int have = 0;

    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *f = r->element[i], *v = r->element[i + 1];
        if (f->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(f->str, "beat") == 0)
            have = 1 + (dir_string_copy(text, sizeof(text), v) && dir_reply_u64(v, 10, beat));
        else if (strcmp(f->str, "bsig") == 0)
            (void)dir_string_copy(sig, sizeof(sig), v);
    }
    if (!have)
        return BEAT_NONE;
    if (have == 1)
        return BEAT_UNSIGNED;
    if (!d->secret_len)
        return BEAT_OK;
    snprintf(inc, sizeof(inc), "%" PRIu64, owner->inc);
    return dir_beat_sign(d, owner->id, inc, text, expect) == 0 && dir_sig_matches(expect, sig)
               ? BEAT_OK
               : BEAT_UNSIGNED;
}

/* Whether the entry shows its node alive since this run began: a heartbeat time later than
 * the one seen at the last look and not before this run's start; without a secret, an entry
 * with no heartbeat time at all (an earlier version's) passes. Notes the time seen. */
static int beat_since_start(struct directory *d, enum beat kind, uint64_t beat)
{
    int live = kind == BEAT_OK && beat > d->owner_beat && beat >= (d->self.inc >> 12);

    if (kind == BEAT_OK && beat > d->owner_beat)
        d->owner_beat = beat;
    return live || (kind == BEAT_NONE && !d->secret_len);
}

/* An entry looked at for longer than a TTL and a heartbeat without showing a live node: an
 * earlier run's kept alive, or one whose address does not answer. */
static void take_stale(struct directory *d)
{
    if (!d->owner_listening) {
        take(d, "its entry is refreshed but nothing answers at its address: not a live node's");
        return;
    }
    dir_distrust(d, DISTRUST_ENTRY, &d->counters.replayed_entries,
                 "node id %s: its entry is refreshed and its address answers, but it carries no "
                 "heartbeat signed since this run began: an earlier run's entry replayed",
                 d->self.id);
    take(d, "its entry shows no heartbeat since this run began: not a live node's");
}

/* The reply to [HGETALL, PTTL] of the entry. */
static void on_owner(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct directory_node owner = {0};
    enum dir_entry kind;
    enum beat beat_kind;
    uint64_t beat = 0;
    long long ttl;
    int refreshed, beating;

    if (!rep || owner_over(d))
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
    if (kind != DIR_ENTRY_OK || !owner.inc || ttl < 0 || owner.inc == d->self.inc) {
        take(d, NULL); /* free, an earlier run's that expired, or planted */
        return;
    }
    if (strcmp(owner.addr, d->self.addr) == 0) {
        take(d, "its entry names this node's own address, where this run listens: an earlier "
                "run that died");
        return;
    }
    /* A heartbeat sets the TTL back to its whole: a TTL longer than the last one seen, or
     * another incarnation, is a live node's, if its address answers too and it signed a
     * heartbeat since this run began. */
    beat_kind = entry_beat(d, rep->element[0], &owner, &beat);
    refreshed = d->owner_inc && (owner.inc != d->owner_inc || (uint64_t)ttl > d->owner_ttl);
    beating = beat_since_start(d, beat_kind, beat);
    if (refreshed && d->owner_listening && beating && d->owner_inc) {
        refuse(d, &owner);
        return;
    }
    if (!d->owner_inc) {
        owner_seen(d, &owner, ttl);
    } else if (loop_now_ms() - d->owner_since_ms > (uint64_t)d->ttl_ms + d->heartbeat_ms) {
        take_stale(d);
        return;
    }
    if (owner_over(d))
        return; /* the probe decided at once */
    d->owner_inc = owner.inc;
    d->owner_ttl = (uint64_t)ttl;
    dir_arm(d, &d->owner_timer, loop_now_ms() + OWNER_POLL_MS);
}
