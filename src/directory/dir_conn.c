/*
 * dir_conn.c - the directory's connection to Redis: the cleanup of earlier incarnations,
 * registration and heartbeat, the turn (which flushes the queue of dir_queue.c), the hiredis
 * adapter on the daemon's loop, the watchdog and reconnection.
 */
#include "directory/directory_int.h"

#include <poll.h>

#include "common/clock.h"

void dir_queue_flush(struct directory *d)
{
    size_t end =
        d->queue_len - d->queue_head > FLUSH_BATCH ? d->queue_head + FLUSH_BATCH : d->queue_len;
    int sent;

    if (d->queue_head < end)
        d->queue_sent_ms = loop_now_ms();
    while (d->up && d->queue_head < end &&
           (sent = dir_send_pubops(d, &d->queue[d->queue_head], end - d->queue_head)) > 0)
        d->queue_head += (size_t)sent;
    if (d->up && d->queue_head == end && end < d->queue_len) {
        dir_turn_soon(d);
        return;
    }
    dir_queue_drop(d);
}

/* What is owed for an id: a bit per kind (OWED_WITHDRAW, OWED_UNRELAY), as the address of one
 * of these (the map holds pointers). */
static char owed_marks[4];

void dir_owe(struct directory *d, const ferry_id *id, int bit, const char *what)
{
    const char *had = idmap_get(&d->owed, id);
    int bits = (had ? (int)(had - owed_marks) : 0) | bit;

    if (d->leaving || d->closing || (!had && d->owed.count >= OWED_MAX))
        return;
    if (idmap_put(&d->owed, id, &owed_marks[bits]) < 0)
        dir_command_failed(d, what, "out of memory to keep it for the next connection");
}

void dir_owe_clear(struct directory *d, const ferry_id *id, int bit)
{
    const char *had = idmap_get(&d->owed, id);
    int bits = had ? (int)(had - owed_marks) & ~bit : 0;

    if (!had)
        return;
    if (bits)
        (void)idmap_put(&d->owed, id, &owed_marks[bits]); /* replaces: no memory taken */
    else
        idmap_remove(&d->owed, id);
}

/* Queues the withdrawals (of holders and partial holders) owed since the last connection
 * (before the republish's publications, so that an id sealed again meanwhile ends up
 * published). */
static void pay_owed(struct directory *d)
{
    const ferry_id *id;
    const char *mark;
    size_t pos = 0;

    while ((mark = idmap_next(&d->owed, &pos, &id))) {
        int bits = (int)(mark - owed_marks);
        struct pubop op = {.id = *id, .kind = OP_WITHDRAW};
        if ((bits & OWED_WITHDRAW) && dir_queue_push(d, &op) < 0)
            break;
        op.kind = OP_UNRELAY;
        if ((bits & OWED_UNRELAY) && dir_queue_push(d, &op) < 0)
            break;
    }
    idmap_free(&d->owed);
}

/* The deferred work: the republish hook, the queued publications, the answers, the deletes
 * heard, the end of a leave. */
void dir_on_turn(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (d->republish_due) {
        d->republish_due = 0;
        if (d->up)
            pay_owed(d);
        if (d->up && d->hooks.republish)
            d->hooks.republish(d->hooks.ctx);
    }
    dir_queue_flush(d);
    dir_deliver(d);
    dir_events_deliver(d);
    dir_leave_deliver(d);
    dir_owner_deliver(d);
}

/* Writes the node's entry and its TTL in one transaction: an entry must never be left without
 * a TTL (by a failure between two commands), or a dead node would stay listed for ever. Each
 * write carries beat, the wall clock's time in ms, and (with a secret) bsig, its signature with
 * the node's id and incarnation: what shows a node starting under the same id that this run is
 * alive now, which a replay of an earlier entry cannot (dir_owner.c). */
static int send_registration(struct directory *d, redisCallbackFn *done)
{
    char key[NODE_KEY_MAX], ttl[16];
    char fields[DIRECTORY_XPORTS][sizeof(XPORT_FIELD) + DIRECTORY_XPORT_NAME_MAX];
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"}, *del[] = {"DEL", key};
    const char *hset[ARGV_MAX] = {"HSET", key,         "addr", d->self.addr,
                                  "inc",  d->inc_text, "ver",  ferry_version()};
    const char *pexpire[] = {"PEXPIRE", key, ttl};
    char sig[DIR_SIG_HEX], beat[U64_TEXT], bsig[DIR_SIG_HEX];
    int nhset = 8;

    dir_entry_key(key, d->self.id);
    snprintf(ttl, sizeof(ttl), "%u", (unsigned)d->ttl_ms);
    for (uint32_t i = 0; i < d->self.nxp; i++) {
        snprintf(fields[i], sizeof(fields[i]), "%s%s", XPORT_FIELD, d->self.xp[i].name);
        hset[nhset++] = fields[i];
        hset[nhset++] = d->self.xp[i].addr;
    }
    snprintf(beat, sizeof(beat), "%" PRIu64, clock_real_ns() / 1000000);
    hset[nhset++] = "beat";
    hset[nhset++] = beat;
    if (d->secret_len) {
        if (dir_node_sign(d, &d->self, sig) < 0 ||
            dir_beat_sign(d, d->self.id, d->inc_text, beat, bsig) < 0)
            return FERRY_EDIRECTORY;
        hset[nhset++] = "sig";
        hset[nhset++] = sig;
        hset[nhset++] = "bsig";
        hset[nhset++] = bsig;
    }
    /* DEL first: the fields of an earlier run (a transport not open now) must not linger. */
    if (dir_send_command(d, dir_on_checked, "MULTI", 1, multi) < 0 ||
        dir_send_command(d, dir_on_checked, "DEL", 2, del) < 0 ||
        dir_send_command(d, dir_on_checked, "HSET", nhset, hset) < 0 ||
        dir_send_command(d, dir_on_checked, "PEXPIRE", 3, pexpire) < 0 ||
        dir_send_command(d, done, "heartbeat", 1, exec) < 0)
        return FERRY_EDIRECTORY;
    return 0;
}

/* The reply to a heartbeat's EXEC: [DEL, HSET, PEXPIRE]. A DEL that found no entry means it
 * had expired: others took this node for dead meanwhile, so it publishes everything again. */
static void on_heartbeat(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;

    if (!rep)
        return;
    if (dir_reply_error(rep)) {
        dir_check_reply(d, rep, "heartbeat");
        return;
    }
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
        rep->element[0]->type == REDIS_REPLY_INTEGER && rep->element[0]->integer == 0 && d->up) {
        log_warn("directory: this node's entry had expired (no heartbeat for %u ms): "
                 "publishing again",
                 (unsigned)d->ttl_ms);
        d->counters.lapses++;
        d->republish_due = 1;
        dir_turn_soon(d);
    }
}

void dir_on_heartbeat(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (send_registration(d, on_heartbeat) < 0)
        dir_command_failed(d, "heartbeat", ferry_errmsg());
    dir_arm(d, t, loop_now_ms() + d->heartbeat_ms);
}

/* The reply to the registration's EXEC: the directory is up. */
static void on_registered(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const char *why;

    if (!reply)
        return;
    why = dir_reply_error(reply);
    if (why) {
        dir_drop(d, "registration refused: %s", why);
        return;
    }
    d->up = 1;
    if (d->ever_up)
        d->counters.reconnects++;
    d->ever_up = 1;
    d->failures = 0;
    d->backoff_ms = BACKOFF_MIN_MS;
    log_info("directory: registered as %s at Redis %s", d->self.id, d->where);
    dir_arm(d, &d->heartbeat, loop_now_ms() + d->heartbeat_ms);
    dir_events_start(d);
    d->republish_due = 1;
    dir_turn_soon(d);
}

static void register_node(struct directory *d)
{
    if (send_registration(d, on_registered) < 0)
        dir_drop(d, "cannot send the registration");
}

/* A batch of the cleanup of earlier incarnations: {ids taken, fields removed}; the next one,
 * or the registration once the index is empty. */
static void on_cleanup(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    uint64_t taken, removed;

    if (!rep)
        return;
    if (!dir_cleanup_reply(d, rep, &taken, &removed)) {
        dir_drop(d, "cleanup: %s", dir_reply_error(rep) ? dir_reply_error(rep) : "bad reply");
        return;
    }
    d->counters.cleaned += removed;
    if (taken > 0) {
        dir_cleanup_start(d);
        return;
    }
    if (d->counters.cleaned)
        log_info("directory: removed %" PRIu64 " holder entries of earlier runs of %s",
                 d->counters.cleaned, d->self.id);
    d->cleaned = 1;
    register_node(d);
}

void dir_cleanup_start(struct directory *d)
{
    if (dir_cleanup_send(d, d->inc_text, on_cleanup) < 0)
        dir_drop(d, "cannot send the cleanup");
}

static void on_selected(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const char *why;

    if (!reply)
        return;
    why = dir_reply_error(reply);
    if (why)
        dir_drop(d, "SELECT %d refused: %s", d->db, why);
    else if (d->cleaned)
        register_node(d);
    else
        dir_owner_check(d, dir_cleanup_start);
}

/* The connection is gone or never came up. hiredis has failed every command that was due, so
 * nothing waits on it any more. Schedules the next attempt. */
static void connection_lost(struct directory *d, const char *why)
{
    int was_up = d->up;

    d->ac = NULL;
    d->up = 0;
    d->inflight = 0;
    loop_timer_stop(d->loop, &d->flush);
    d->events_reading = 0;
    loop_timer_stop(d->loop, &d->watchdog);
    loop_timer_stop(d->loop, &d->heartbeat);
    loop_timer_stop(d->loop, &d->events);
    dir_owner_stop(d);
    if (d->leaving)
        dir_leave_finish(d);
    if (d->closing || d->leaving || d->refused)
        return;
    if (d->asking) {
        d->asking = 0;
        if (dir_sentinel_next(d))
            return;
        why = "no sentinel told where the master is";
    } else {
        d->resolved = 0; /* ask the sentinels again (redis-sentinel://) */
    }
    d->counters.errors++;
    snprintf(d->down_why, sizeof(d->down_why), "%s", why);
    if (was_up) {
        log_warn("directory: lost Redis at %s: %s; reconnecting", d->where, why);
        d->failures = 1;
    } else if (d->failures++ == 0) {
        log_warn("directory: cannot use Redis at %s: %s; retrying", d->where, why);
    } else {
        log_debug("directory: cannot use Redis at %s: %s", d->where, why);
    }
    dir_arm(d, &d->reconnect, loop_now_ms() + d->backoff_ms);
    d->backoff_ms = d->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : d->backoff_ms * 2;
}

/* The adapter: hiredis's event hooks drive the one watch of the connection's socket. */
static void ev_update(struct directory *d, uint32_t add, uint32_t del)
{
    if (loop_watch_mod(d->loop, &d->watch, (d->watch.events | add) & ~del) < 0)
        log_warn("directory: %s; the watchdog will reconnect", ferry_errmsg());
}

static void ev_add_read(void *privdata)
{
    ev_update(privdata, LOOP_READ, 0);
}

static void ev_del_read(void *privdata)
{
    ev_update(privdata, 0, LOOP_READ);
}

/* On a connected socket, written at the end of this turn (d->flush); a connect under way, or
 * a write the socket did not take whole, waits for EPOLLOUT. */
static void ev_add_write(void *privdata)
{
    struct directory *d = privdata;

    if (!d->flushing && d->ac && (d->ac->c.flags & REDIS_CONNECTED)) {
        dir_arm(d, &d->flush, loop_now_ms());
        return;
    }
    ev_update(d, LOOP_WRITE, 0);
}

void dir_on_flush(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;

    if (!d->ac)
        return;
    d->flushing = 1;
    redisAsyncHandleWrite(d->ac); /* may free the context: connection_lost then ran */
    d->flushing = 0;
}

static void ev_del_write(void *privdata)
{
    ev_update(privdata, 0, LOOP_WRITE);
}

/* hiredis is freeing the context (whoever started it): the connection is gone. */
static void ev_cleanup(void *privdata)
{
    struct directory *d = privdata;

    loop_watch_del(d->loop, &d->watch);
    d->watch.fd = -1;
    connection_lost(d, d->ac->err ? d->ac->errstr : d->why);
}

/* Errors and hang-ups go to the read handler, which reports them (or a failed connect). The
 * context may be gone after a handler: hiredis frees it on errors. */
static void on_io(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct directory *d = w->arg;
    redisAsyncContext *ac = d->ac;

    if (events & (LOOP_READ | LOOP_HANGUP))
        redisAsyncHandleRead(ac);
    if ((events & LOOP_WRITE) && d->ac == ac)
        redisAsyncHandleWrite(ac);
}

static void attach(struct directory *d, redisAsyncContext *ac)
{
    ac->data = d;
    ac->ev.data = d;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    d->ac = ac;
}

/* Starts a connection attempt: to a sentinel, when the master's address is to be asked for,
 * else to Redis. The first commands are sent at once: hiredis holds them until the TCP
 * connection completes, and the watchdog bounds that wait. */
/* The reply to AUTH: a refusal ends the connection (its text names no secret). */
static void on_authed(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const char *why;

    if (reply && (why = dir_reply_error(reply)))
        dir_drop(d, "AUTH%s refused: %s", d->user[0] ? " (user and password)" : "", why);
}

/* AUTH [USER] PASSWORD first, when the URL gave them. */
static int send_auth(struct directory *d)
{
    const char *argv[] = {"AUTH", d->user, d->password};

    if (!d->password[0])
        return 0;
    if (d->user[0])
        return dir_send_command(d, on_authed, NULL, 3, argv);
    argv[1] = d->password;
    return dir_send_command(d, on_authed, NULL, 2, argv);
}

void dir_connect_start(struct directory *d)
{
    int asking = d->nsentinels && !d->resolved;
    const struct sentinel_addr *s = &d->sentinels[d->sentinel_at];
    redisAsyncContext *ac = redisAsyncConnect(asking ? s->ip : d->ip, asking ? s->port : d->port);
    char db[16];
    const char *argv[] = {"SELECT", db};

    d->asking = asking;
    if (!ac || ac->err) {
        snprintf(d->why, sizeof(d->why), "%s", ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        connection_lost(d, d->why);
        return;
    }
    if (loop_watch_add(d->loop, &d->watch, ac->c.fd, 0, on_io, d) < 0) {
        d->watch.fd = -1;
        redisAsyncFree(ac);
        connection_lost(d, ferry_errmsg());
        return;
    }
    attach(d, ac);
    if (asking) {
        if (dir_sentinel_ask(d) < 0)
            dir_drop(d, "cannot ask the sentinel");
        return;
    }
    snprintf(db, sizeof(db), "%d", d->db);
    if (send_auth(d) < 0 || (d->nsentinels && dir_sentinel_check_role(d) < 0) ||
        dir_send_command(d, on_selected, NULL, 2, argv) < 0 || dir_scripts_load(d) < 0)
        dir_drop(d, "cannot send SELECT and the scripts");
}

void dir_on_reconnect(struct loop *l, struct loop_timer *t)
{
    dir_connect_start(t->arg);
}

/* Whether bytes from Redis wait unread. */
static int answer_waiting(const struct directory *d)
{
    struct pollfd p = {.fd = d->ac ? d->ac->c.fd : -1, .events = POLLIN};

    return p.fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Liveness (see directory_int.h). Re-armed lazily: replies only record their time. A watchdog
 * that fires late, or finds an answer unread, says that this process was late (stopped, or
 * starved of CPU: a command queued before the stall may not even have been written yet), not
 * Redis: it gives Redis one more timeout from now, once per silence. */
void dir_on_watchdog(struct loop *l, struct loop_timer *t)
{
    struct directory *d = t->arg;
    uint64_t now = loop_now_ms(), due = d->progress_ms + d->timeout_ms;
    int late = now - t->deadline_ms > WATCHDOG_LATE_MS;

    if (!d->inflight)
        return;
    if (now < due) {
        dir_arm(d, t, due);
    } else if ((late || answer_waiting(d)) && d->watchdog_grace_of != d->progress_ms) {
        d->watchdog_grace_of = d->progress_ms;
        dir_arm(d, t, now + d->timeout_ms);
    } else {
        dir_drop(d, "no answer in %u ms", (unsigned)d->timeout_ms);
    }
}
