#include "server/server.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/mac.h"
#include "common/text.h"
#include "common/proto.h"
#include "common/size.h"
#include "common/usock.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/session.h"
#include "transfer/engine.h"
#include "transport/transport.h"

#define ACCEPTS_PER_TURN 64
#define LISTEN_BACKLOG 512
#define STAGING_MIN (64u << 10)
#define STAGING_MAX (1u << 20)
/* A subscriber that falls this far behind is cut off (and counted) rather than let the
 * daemon's memory grow without bound. */
#define SUBSCRIBER_QUEUE_MAX (16u << 20)
/* Subscriptions open at once, per client and in all; the notifications queued for all of them
 * (past it, the one furthest behind is cut off): a client cannot make the daemon hold more
 * than this for readers that do not read. */
#define SUBSCRIBERS_PER_CLIENT 16
#define SUBSCRIBERS_MAX 256
#define SUBSCRIBER_QUEUES_MAX (64u << 20)

struct subscriber {
    int fd;
    uint64_t client; /* the client that asked for it */
    struct loop_watch watch;
    struct pbuf queue; /* notifications the socket had no room for, in order */
    struct subscriber *next, **pprev;
};

/* ---- subscribers ---- */

static void subscriber_drop(struct server *s, struct subscriber *sub, const char *why)
{
    if (why) {
        log_warn("subscriber cut off: %s", why);
        s->counters.notifications_dropped++;
    }
    loop_watch_del(&s->loop, &sub->watch);
    close(sub->fd);
    sub->fd = -1;
    s->subscriber_count--;
    s->subscriber_queued -= sub->queue.len;
    *sub->pprev = sub->next;
    if (sub->next)
        sub->next->pprev = sub->pprev;
    sub->next = s->dead_subscribers;
    s->dead_subscribers = sub;
}

/* Sends queued records until the socket is full; -1 when the peer is gone. */
static int subscriber_drain(struct subscriber *sub)
{
    size_t done = 0;
    int rc = 0;

    while (done < sub->queue.len) {
        ssize_t n =
            send(sub->fd, sub->queue.data + done, PROTO_NOTIFY_SIZE, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            rc = (errno == EAGAIN || errno == EINTR) ? 0 : -1;
            break;
        }
        done += PROTO_NOTIFY_SIZE;
    }
    pbuf_consume(&sub->queue, done);
    return rc;
}

static void subscriber_update(struct server *s, struct subscriber *sub)
{
    size_t before = sub->queue.len;
    int rc = subscriber_drain(sub);

    s->subscriber_queued -= before - sub->queue.len;
    if (rc < 0) {
        subscriber_drop(s, sub, NULL);
        return;
    }
    loop_watch_mod(&s->loop, &sub->watch, LOOP_READ | (sub->queue.len ? LOOP_WRITE : 0));
}

static void subscriber_event(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct server *s = server_of(l);
    struct subscriber *sub = w->arg;
    char byte;

    if (sub->fd < 0)
        return;
    /* The client never writes; readable means it closed its end (or misbehaves). */
    if (events & (LOOP_READ | LOOP_HANGUP)) {
        if (recv(sub->fd, &byte, 1, MSG_DONTWAIT) >= 0 || errno != EAGAIN) {
            subscriber_drop(s, sub, NULL);
            return;
        }
    }
    subscriber_update(s, sub);
}

int server_subscribe(struct server *s, uint64_t client, int *client_fd)
{
    struct subscriber *sub;
    int pair[2], rc, mine = 0;

    for (sub = s->subscribers; sub; sub = sub->next)
        mine += sub->client == client;
    if (mine >= SUBSCRIBERS_PER_CLIENT || s->subscriber_count >= SUBSCRIBERS_MAX) {
        s->counters.subscriptions_refused++;
        return err_set(FERRY_EBUSY, "%d subscriptions are open (%s), at most %d",
                       mine >= SUBSCRIBERS_PER_CLIENT ? mine : (int)s->subscriber_count,
                       mine >= SUBSCRIBERS_PER_CLIENT ? "this client's" : "all clients'",
                       mine >= SUBSCRIBERS_PER_CLIENT ? SUBSCRIBERS_PER_CLIENT : SUBSCRIBERS_MAX);
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
        return err_sys("socketpair(subscription)");
    if (!(sub = calloc(1, sizeof(*sub)))) {
        rc = err_set(FERRY_ENOMEM, "subscriber");
        goto close_pair;
    }
    sub->fd = pair[0];
    sub->client = client;
    if ((rc = loop_watch_add(&s->loop, &sub->watch, sub->fd, LOOP_READ, subscriber_event, sub)) < 0)
        goto free_sub;
    sub->next = s->subscribers;
    if (sub->next)
        sub->next->pprev = &sub->next;
    sub->pprev = &s->subscribers;
    s->subscribers = sub;
    s->subscriber_count++;
    *client_fd = pair[1];
    return 0;

free_sub:
    free(sub);
close_pair:
    close(pair[0]);
    close(pair[1]);
    return rc;
}

/* The subscriber with the most notifications queued (there is one while any are queued). */
static struct subscriber *furthest_behind(struct server *s)
{
    struct subscriber *sub, *worst = s->subscribers;

    for (sub = s->subscribers; sub; sub = sub->next)
        if (sub->queue.len > worst->queue.len)
            worst = sub;
    return worst;
}

void server_notify(struct server *s, int event, const struct object *o)
{
    ferry_notification n = {
        .event = event, .id = o->id, .data_size = o->data_size, .metadata_size = o->metadata_size};
    uint8_t rec[PROTO_NOTIFY_SIZE];
    struct subscriber *sub, *next;

    proto_encode_notification(rec, &n);
    for (sub = s->subscribers; sub; sub = next) {
        next = sub->next;
        if (sub->queue.len + PROTO_NOTIFY_SIZE > SUBSCRIBER_QUEUE_MAX) {
            subscriber_drop(s, sub, "more than 16 MiB of notifications unread");
            continue;
        }
        size_t behind = sub->queue.len;
        pbuf_put(&sub->queue, rec, sizeof(rec));
        if (sub->queue.oom) {
            subscriber_drop(s, sub, "out of memory queueing notifications");
            continue;
        }
        s->subscriber_queued += PROTO_NOTIFY_SIZE;
        if (!behind) /* else it waits for the socket to say it has room */
            subscriber_update(s, sub);
    }
    while (s->subscriber_queued > SUBSCRIBER_QUEUES_MAX)
        subscriber_drop(s, furthest_behind(s), "the furthest behind when all queues passed 64 MiB");
}

/* ---- store events ---- */

/* Publishes a sealed object with its content (size and digest): once it is hashed. */
static void publish(struct server *s, const struct object *o)
{
    if (s->dir && o->hashed && object_sealed(o) && !o->deleted && o != s->claimed)
        directory_publish(s->dir, &o->id, o->data_size + o->metadata_size, o->root);
}

static void on_sealed(void *ctx, const struct object *o)
{
    struct server *s = ctx;
    server_notify(s, FERRY_EVENT_SEALED, o);
    session_wake_waiters(s, (struct object *)o);
    publish(s, o);
    if (s->engine)
        engine_on_sealed(s->engine, o);
}

static void on_removed(void *ctx, const struct object *o, int event)
{
    struct server *s = ctx;
    server_notify(s, event, o);
    if (s->dir)
        directory_withdraw(s->dir, &o->id);
}

static void on_hashed(void *ctx, struct object *o)
{
    struct server *s = ctx;
    publish(s, o);
    session_hash_ready(s, o);
    if (s->engine)
        engine_on_ready(s->engine, o);
}

static void on_restored(void *ctx, struct object *o, int status)
{
    struct server *s = ctx;
    session_restored(s, o, status);
    if (s->engine)
        engine_on_ready(s->engine, o);
}

static void on_room(void *ctx)
{
    struct server *s = ctx;
    session_room_ready(s);
    if (s->engine)
        engine_on_room(s->engine);
}

/* After (re)connecting to the directory: every sealed object here is published again (those
 * being hashed are, when their digest is in). */
static void republish(void *ctx)
{
    struct server *s = ctx;
    const struct object *o;
    size_t pos = 0;

    while ((o = idmap_next(&s->store.table, &pos, NULL)))
        publish(s, o);
}

static void tell_manager(const char *state);

/* A live node uses our node id (the directory said which, and logged it): this daemon stops
 * rather than take it over. */
static void id_taken(void *ctx, const char *why)
{
    struct server *s = ctx;

    s->id_taken = 1;
    tell_manager("STOPPING=1");
    loop_stop(&s->loop);
}

void server_drop_deleted(struct server *s, const ferry_id *id, const uint8_t *root,
                         const char *node)
{
    struct object *o = store_find(&s->store, id);

    /* A copy sealed this turn is hashed after it: its digest is taken now, to compare. */
    if (root && o && object_sealed(o) && !o->hashed && store_hash_finish(&s->store, o))
        o = store_find(&s->store, id);
    if (root && o && object_sealed(o) && (!o->hashed || memcmp(o->root, root, DIGEST_LEN) != 0)) {
        s->counters.deletes_spared++;
        return;
    }
    if (o && object_sealed(o))
        store_delete(&s->store, o);
    if (s->engine)
        engine_on_deleted(s->engine, id, node);
}

static void on_deleted(void *ctx, const ferry_id *id, const uint8_t root[DIGEST_LEN],
                       const char *node)
{
    server_drop_deleted(ctx, id, root, node);
}

static void on_hasher(struct loop *l, struct loop_watch *w, uint32_t events)
{
    store_collect_hashes(&server_of(l)->store);
}

static void on_spill(struct loop *l, struct loop_watch *w, uint32_t events)
{
    store_collect_spill(&server_of(l)->store);
}

/* ---- sessions ---- */

void server_schedule(struct server *s, struct session *ss)
{
    if (ss->scheduled || ss->closed)
        return;
    ss->scheduled = 1;
    ss->ready_next = s->ready;
    s->ready = ss;
}

/* After each turn: input left waiting (a get that ended), then what was closed. */
/* The first page of the arena a client punched (arena_catch_faults), said once: the handler
 * cannot log. */
static void log_arena_faults(struct server *s)
{
    uint64_t n;

    if (s->arena_fault_logged || (n = arena_faults()) == 0)
        return;
    s->arena_fault_logged = 1;
    log_warn("arena: %" PRIu64 " page%s of the arena were missing when touched (a client punched "
             "a hole in the arena's memfd and the memory was taken): replaced by private memory "
             "in this daemon; the objects there are damaged (counted in arena_faults)",
             n, n == 1 ? "" : "s");
}

static void after_turn(struct loop *l, void *arg)
{
    struct server *s = arg;
    struct subscriber *sub;
    /* Rings first: a session whose ring is bad is closed, and freed below. */
    int rings_more = session_rings_turn(s, session_close);
    struct session *ss, *ready = s->ready;

    s->ready = NULL;
    while ((ss = ready)) {
        ready = ss->ready_next;
        ss->scheduled = 0;
        if (!ss->closed)
            session_resume(ss);
    }
    /* A closed session still in the ready list is freed next turn, once it is off it. */
    for (struct session **pp = &s->closed; (ss = *pp);) {
        if (ss->scheduled) {
            pp = &ss->next;
            continue;
        }
        *pp = ss->next;
        session_free(ss);
    }
    while ((sub = s->dead_subscribers)) {
        s->dead_subscribers = sub->next;
        pbuf_free(&sub->queue);
        free(sub);
    }
    store_after_turn(&s->store);
    log_arena_faults(s);
    l->busy =
        rings_more || s->ready != NULL || s->closed != NULL || store_hashes_pending(&s->store);
}

static void on_accept(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct server *s = server_of(l);

    for (int i = 0; i < ACCEPTS_PER_TURN; i++) {
        int fd = acceptor_next(&s->listener, NULL, NULL);
        if (fd < 0)
            return;
        if (session_open(s, fd) < 0) {
            log_warn("refusing a client: %s", ferry_errmsg());
            close(fd);
        }
    }
}

static void on_left(void *arg)
{
    struct server *s = arg;

    loop_stop(&s->loop);
}

/* Tells a service manager (systemd, Type=notify) how we are; one that cannot be told is logged,
 * and the daemon goes on. */
static void tell_manager(const char *state)
{
    if (notify_send(state) < 0)
        log_warn("%s", ferry_errmsg());
}

/* SIGTERM or SIGINT: a cluster node leaves the directory first (LEAVE_MS at most), so that no
 * node is offered it from now on; a second signal stops at once. */
static void on_signal(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct server *s = server_of(l);
    struct signalfd_siginfo si;

    if (read(w->fd, &si, sizeof(si)) == sizeof(si))
        log_info("signal %u: shutting down", si.ssi_signo);
    tell_manager("STOPPING=1");
    if (s->dir && !s->leaving) {
        s->leaving = 1;
        directory_leave(s->dir, LEAVE_MS, on_left, s);
        return;
    }
    loop_stop(l);
}

/* ---- life cycle ---- */

static int open_signals(struct server *s)
{
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return err_sys("sigprocmask");
    signal(SIGPIPE, SIG_IGN);
    s->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (s->signal_fd < 0)
        return err_sys("signalfd");
    return loop_watch_add(&s->loop, &s->signal_watch, s->signal_fd, LOOP_READ, on_signal, s);
}

static int open_socket(struct server *s)
{
    struct stat st;
    int rc;

    rc = usock_listen(s->cfg.socket_path, s->cfg.socket_mode, LISTEN_BACKLOG, &s->listen_fd);
    if (rc < 0)
        return rc;
    if (stat(s->cfg.socket_path, &st) == 0) {
        s->socket_dev = st.st_dev;
        s->socket_ino = st.st_ino;
    }
    return acceptor_open(&s->loop, &s->listener, s->listen_fd, "client socket", on_accept, s);
}

int server_read_secret(const char *path, const char *what, uint8_t *buf, size_t size, size_t min,
                       size_t *len)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    size_t n;

    if (!f)
        return err_set(FERRY_EINVAL, "%s %s: %s", what, path, strerror(errno));
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
        log_warn("%s %s can be read by its group or by others (mode %04o): chmod 600 it", what,
                 path, (unsigned)(st.st_mode & 07777));
    n = fread(buf, 1, size, f);
    fclose(f);
    if (n == size) /* before the newline is cut: a longer file is not taken for a shorter one */
        return err_set(FERRY_EINVAL, "%s %s: more than %zu bytes", what, path, size - 1);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    if (n < min)
        return err_set(FERRY_EINVAL, "%s %s: at least %zu bytes needed", what, path, min);
    *len = n;
    return 0;
}

/* Node ids travel in the directory's text, which other nodes keep to printable ASCII, and end
 * up in logs and metric labels: refused at start otherwise (rather than shown escaped). */
static int node_id_printable(const char *id)
{
    for (const char *p = id; *p; p++)
        if (*p <= ' ' || *p > '~' || *p == ':' || *p == ',')
            return 0;
    return 1;
}

int server_check_config(const struct server_config *c)
{
    char host[256], port[16], shown[4 * DIRECTORY_NODE_ID_MAX + 1];

    if (!c->spill_dir && (c->spill_max || c->persist_on_exit))
        return err_set(FERRY_EINVAL, "--spill-max and --persist-on-exit need --spill-dir");

    if (!c->directory_url && !c->listen_addr && !c->node_id)
        return 0;
    if (!c->directory_url || !c->listen_addr || !c->node_id)
        return err_set(FERRY_EINVAL, "a cluster node needs --node-id, --listen and --directory");
    if (!c->node_id[0] || strlen(c->node_id) > DIRECTORY_NODE_ID_MAX ||
        !node_id_printable(c->node_id))
        return err_set(FERRY_EINVAL,
                       "node id '%s': 1 to %d printable ASCII characters, no spaces, ':' or ','",
                       text_safe(c->node_id, shown, sizeof(shown)), DIRECTORY_NODE_ID_MAX);
    if (transport_split_addr(c->listen_addr, host, sizeof(host), port, sizeof(port)) < 0)
        return err_set(FERRY_EINVAL, "--listen %s: expected HOST:PORT", c->listen_addr);
    if (strncmp(c->listen_addr, "0.0.0.0:", 8) == 0 || strncmp(c->listen_addr, "[::]:", 5) == 0)
        return err_set(FERRY_EINVAL,
                       "--listen %s: peers connect to this address, so it must be "
                       "one they can reach, not a wildcard",
                       c->listen_addr);
    if (directory_ttl_short(c->heartbeat_ms, c->ttl_ms))
        return FERRY_EINVAL; /* saying why, naming the option */
    return directory_check_url(c->directory_url, c->directory_password);
}

static int open_cluster(struct server *s)
{
    const struct server_config *c = &s->cfg;
    struct directory_config dc = {.url = c->directory_url,
                                  .password = c->directory_password,
                                  .heartbeat_ms = c->heartbeat_ms,
                                  .ttl_ms = c->ttl_ms,
                                  .timeout_ms = c->directory_timeout_ms};
    struct directory_hooks hooks = {
        .republish = republish, .deleted = on_deleted, .id_taken = id_taken, .ctx = s};
    struct engine_config ec = {.node_id = c->node_id,
                               .listen_addr = c->listen_addr,
                               .verify = c->verify,
                               .transport = c->transport,
                               .fabric_provider = c->fabric_provider,
                               .eager_max = c->eager_max,
                               .fabric_window = c->fabric_window,
                               .split_min = c->split_min,
                               .relay_min = c->relay_min,
                               .relay_unchecked = c->relay_unchecked,
                               .timers = c->timers};
    uint8_t secret[1024];
    char names[64];
    int rc;

    if ((rc = server_check_config(c)) < 0)
        return rc;
    if (!c->directory_url)
        return 0;
    if (c->secret_file) {
        if ((rc = server_read_secret(c->secret_file, "secret file", secret, sizeof(secret), 16,
                                     &ec.secret_len)) < 0)
            return rc;
        ec.secret = secret;
        dc.secret = secret;
        dc.secret_len = ec.secret_len;
    }
    if ((rc = engine_open(&s->engine, &s->loop, &s->store, &ec)) < 0)
        goto forget_secret;
    snprintf(dc.self.id, sizeof(dc.self.id), "%s", c->node_id);
    snprintf(dc.self.addr, sizeof(dc.self.addr), "%s", c->listen_addr);
    engine_advertise(s->engine, &dc.self);
    rc = directory_open(&s->dir, &s->loop, &dc, &hooks);
forget_secret:
    memset(secret, 0, sizeof(secret));
    if (rc < 0)
        return rc;
    engine_set_directory(s->engine, s->dir);
    directory_node_names(&dc.self, names, sizeof(names));
    log_info("node %s: transfers on %s (%s%s%s), directory %s%s%s", c->node_id, c->listen_addr,
             names, engine_provider(s->engine) ? " on " : "",
             engine_provider(s->engine) ? engine_provider(s->engine) : "", directory_where(s->dir),
             ec.secret ? ", secret required" : "",
             c->verify ? "" : ", fetched bytes unchecked (--no-verify)");
    return 0;
}

/* The key that signs the spill directory's records: HMAC(secret, "ferry spill v1"), so that a
 * spill MAC is never a valid directory or wire MAC, nor the reverse. */
static int spill_key(const char *secret_file, uint8_t key[MAC_LEN])
{
    static const char label[] = "ferry spill v1";
    const struct mac_part part = {label, sizeof(label) - 1};
    uint8_t secret[1024];
    size_t len = 0;
    int rc = server_read_secret(secret_file, "secret file", secret, sizeof(secret), 16, &len);

    if (rc == 0)
        rc = mac_sha256(secret, len, &part, 1, key);
    explicit_bzero(secret, sizeof(secret));
    return rc;
}

/* The spill directory's bound, said at start; one from the file system (no --spill-max) that
 * leaves the directory less room than the arena is warned about: creates will find it full. */
static void log_spill_bound(struct server *s, const struct spill_counters *sc)
{
    const struct spill *sp = s->store.spill;
    const struct spill_bound *b = spill_bound(sp);
    uint64_t max = spill_max_bytes(sp), room = max > sc->disk_bytes ? max - sc->disk_bytes : 0;
    char f[4][SIZE_FORMAT_LEN];

    if (!b->from_fs) {
        log_info("spill: at most %s (--spill-max)", size_format(max, f[0], sizeof(f[0])));
        return;
    }
    log_info("spill: at most %s: %s free of %s at start on its file system, a tenth of its "
             "file system left free (--spill-max sets another bound)",
             size_format(max, f[0], sizeof(f[0])), size_format(b->fs_free, f[1], sizeof(f[1])),
             size_format(b->fs_bytes, f[2], sizeof(f[2])));
    if (room < store_capacity(&s->store))
        log_warn("spill: room for %s more in %s, less than the arena's %s: free room on its "
                 "file system or give --spill-max",
                 size_format(room, f[0], sizeof(f[0])), spill_dir(sp),
                 size_format(store_capacity(&s->store), f[3], sizeof(f[3])));
}

/* Opens the spill directory (after the signals are blocked: its workers inherit the mask) and
 * takes in what a previous run left there; with a secret, its records are signed. */
static int open_spill(struct server *s)
{
    const struct server_config *c = &s->cfg;
    const struct spill_counters *sc;
    char found[SIZE_FORMAT_LEN];
    uint8_t key[MAC_LEN];
    int rc;

    if (!c->spill_dir)
        return 0;
    if (c->secret_file && (rc = spill_key(c->secret_file, key)) < 0)
        return rc;
    rc = store_spill_open(&s->store, c->spill_dir, c->spill_max, c->spill_at,
                          c->secret_file ? key : NULL);
    explicit_bzero(key, sizeof(key));
    if (rc < 0 || (rc = loop_watch_add(&s->loop, &s->spill_watch, store_spill_fd(&s->store),
                                       LOOP_READ, on_spill, s)) < 0)
        return rc;
    sc = spill_counters(s->store.spill);
    log_info("spill: %s (%s), %" PRIu64 " objects found (%s), writes from %u%% of the arena",
             c->spill_dir, sc->direct ? "O_DIRECT" : "page cache", sc->recovered_objects,
             size_format(sc->disk_bytes, found, sizeof(found)), c->spill_at);
    log_spill_bound(s, sc);
    if (sc->recovery_dropped)
        log_warn("spill: %" PRIu64 " damaged groups dropped at start (see above)",
                 sc->recovery_dropped);
    if (sc->segments_refused || sc->segments_unauthentic)
        log_warn("spill: %" PRIu64 " segments refused at start and left alone (see above)",
                 sc->segments_refused + sc->segments_unauthentic);
    return 0;
}

static uint64_t staging_size_for(uint64_t capacity)
{
    uint64_t size = capacity / 64;
    size = size < STAGING_MIN ? STAGING_MIN : size > STAGING_MAX ? STAGING_MAX : size;
    return size / 64 * 64;
}

static int open_metrics(struct server *s)
{
    int rc;

    if (!s->cfg.metrics_addr)
        return 0;
    if ((rc = metrics_open(s, s->cfg.metrics_addr, &s->metrics)) < 0)
        return rc;
    log_info("metrics: http://%s/metrics", metrics_address(s->metrics));
    return 0;
}

/* What the descriptor limit leaves for local clients beside the reserve (server.h, "Local
 * clients"): the limit less the reserve, or a share of it when the limit is below what the
 * reserve needs. */
static uint64_t clients_room(uint64_t limit, uint64_t reserve)
{
    uint64_t room = limit > reserve ? limit - reserve : 0;

    return room > limit / FERRYD_FD_CLIENTS_SHARE ? room : limit / FERRYD_FD_CLIENTS_SHARE;
}

/* Raises the soft RLIMIT_NOFILE to the hard limit: the limit now in s->fd_limit, the soft one
 * it had before in *was. A refusal is logged and the soft limit kept. */
static int raise_nofile(struct server *s, uint64_t *was)
{
    struct rlimit lim;

    if (getrlimit(RLIMIT_NOFILE, &lim) < 0)
        return err_sys("getrlimit(RLIMIT_NOFILE)");
    *was = lim.rlim_cur;
    if (lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &lim) < 0) {
            log_warn("descriptors: cannot raise the soft limit %" PRIu64 " to the hard limit "
                     "%llu: %s",
                     *was, (unsigned long long)lim.rlim_max, strerror(errno));
            lim.rlim_cur = (rlim_t)*was;
        }
    }
    s->fd_limit = lim.rlim_cur;
    return 0;
}

/* Raises the descriptor limit (raise_nofile, logging what it got) and sets how many clients may
 * be greeted at once: cfg.max_clients, FERRY_EINVAL when the limit cannot hold it beside the
 * reserve; by default what the limit leaves, at most FERRYD_MAX_CLIENTS. Opens nothing. */
static int plan_descriptors(struct server *s)
{
    const struct server_config *c = &s->cfg;
    uint64_t reserve = FERRYD_FD_RESERVE + (c->directory_url ? FERRYD_FD_RESERVE_PEERS : 0);
    const char *kept = c->directory_url ? "the daemon, peers, the directory and /metrics"
                                        : "the daemon, subscriptions and /metrics";
    uint64_t room, was = 0;
    char raised[80] = "";
    int rc;

    if ((rc = raise_nofile(s, &was)) < 0)
        return rc;
    room = clients_room(s->fd_limit, reserve);
    if (c->max_clients > room)
        return err_set(FERRY_EINVAL,
                       "--max-clients %" PRIu64 ": the descriptor limit is %" PRIu64 " and %" PRIu64
                       " are kept for %s, so at most %" PRIu64
                       " (raise the hard limit: LimitNOFILE=, ulimit -Hn)",
                       c->max_clients, s->fd_limit, reserve, kept, room);
    s->max_clients = c->max_clients;
    if (!s->max_clients)
        s->max_clients = room < FERRYD_MAX_CLIENTS ? room : FERRYD_MAX_CLIENTS;
    if (s->fd_limit < reserve + s->max_clients)
        log_warn("descriptors: the limit %" PRIu64 " is below the %" PRIu64 " kept for %s and "
                 "%" PRIu64 " clients: peers may find it short; raise the hard limit "
                 "(LimitNOFILE=, ulimit -Hn)",
                 s->fd_limit, reserve, kept, s->max_clients);
    if (was < s->fd_limit)
        snprintf(raised, sizeof(raised), " (the soft limit raised from %" PRIu64 ")", was);
    log_info("descriptors: limit %" PRIu64 "%s; clients at most %" PRIu64 "%s, %d more before "
             "their hello (%d s each)",
             s->fd_limit, raised, s->max_clients, c->max_clients ? " (--max-clients)" : "",
             FERRYD_UNGREETED_MAX, FERRYD_HELLO_DEADLINE_MS / 1000);
    return 0;
}

/* The shared index's region is rounded up to this (huge pages back the arena in them). */
#define FAST_ROUND (2ull << 20)

int server_init(struct server *s, const struct server_config *cfg)
{
    struct store_events ev = {.sealed = on_sealed,
                              .removed = on_removed,
                              .hashed = on_hashed,
                              .restored = on_restored,
                              .room = on_room,
                              .ctx = s};
    char why[400];
    int rc;

    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    s->started_real_ns = clock_real_ns();
    s->listen_fd = s->signal_fd = -1;
    s->arena.fd = -1;
    if ((rc = plan_descriptors(s)) < 0 || (rc = loop_init(&s->loop)) < 0)
        return rc;
    s->loop.after_turn = after_turn;
    s->loop.busy_poll_ns = (uint64_t)cfg->busy_poll_us * 1000;
    s->loop.after_turn_arg = s;
    s->loop.before_sleep = session_rings_sleep;
    s->loop.before_sleep_arg = s;
    /* The shared index follows the store's memory in the arena, both rounded to huge pages
     * (its 8-byte slots must be aligned, whatever --memory is). */
    s->fast_offset = (cfg->memory + FAST_ROUND - 1) / FAST_ROUND * FAST_ROUND;
    s->fast_size = (fastidx_region_size(cfg->memory) + FAST_ROUND - 1) / FAST_ROUND * FAST_ROUND;
    if ((rc = arena_open(&s->arena, s->fast_offset + s->fast_size, cfg->hugepages)) < 0) {
        snprintf(why, sizeof(why), "%s", ferry_errmsg());
        rc = err_set(rc, "--memory %" PRIu64 " bytes and %" PRIu64 " of the shared index: %s",
                     cfg->memory, s->fast_size, why);
        goto destroy;
    }
    if ((rc = arena_catch_faults(&s->arena)) < 0)
        goto destroy;
    if ((rc = store_init(&s->store, s->arena.base, cfg->memory, s->cfg.max_objects, &ev)) < 0)
        goto destroy;
    if ((rc = fastidx_init(&s->fast, s->arena.base + s->fast_offset, s->fast_size,
                           s->fast_offset)) < 0)
        goto destroy;
    s->store.fast_snap = malloc(sizeof(uint64_t) * FASTIDX_BLOCKS * FASTIDX_SLOTS);
    if (!s->store.fast_snap) {
        rc = err_set(FERRY_ENOMEM, "the shared index's slot snapshot");
        goto destroy;
    }
    s->store.fast = &s->fast;
    if (s->cfg.max_kept)
        s->store.max_kept_bytes = s->cfg.max_kept;
    s->staging_size = staging_size_for(s->fast_offset);
    /* Signals are blocked before the hasher thread starts, so that it inherits the mask and
     * SIGTERM reaches the signalfd rather than killing the process in the worker. */
    /* The prefaulter starts last: registering the arena with a fabric provider waited behind
     * it for the address space's lock (17 s on a busy 2-core machine, when the prefaulter ran
     * at idle priority; see arena.c). */
    if ((rc = open_signals(s)) < 0 ||
        (rc = hasher_start(&s->store.hasher, STORE_HASHER_THREADS)) < 0 ||
        (rc = loop_watch_add(&s->loop, &s->hasher_watch, hasher_fd(s->store.hasher), LOOP_READ,
                             on_hasher, s)) < 0 ||
        (rc = open_spill(s)) < 0 || (rc = open_cluster(s)) < 0 || (rc = open_metrics(s)) < 0 ||
        (rc = open_socket(s)) < 0 || (rc = arena_prefault_start(&s->arena)) < 0)
        goto destroy;
    /* Without a directory nobody is told a digest unasked: computed when a client asks for it
     * or its object is spilled, not at every seal. */
    s->store.hash_on_demand = s->dir == NULL;
    log_info("serving %s: arena %" PRIu64 " MiB%s, socket mode %04o", cfg->socket_path,
             s->fast_offset >> 20, cfg->hugepages ? " (huge pages)" : "",
             (unsigned)cfg->socket_mode);
    tell_manager("READY=1");
    return 0;

destroy:
    server_destroy(s);
    return rc;
}

int server_run(struct server *s)
{
    return loop_run(&s->loop);
}

/* Removes the socket file only if it is still the one we bound (a newer daemon may own the
 * path by now). */
static void remove_socket(struct server *s)
{
    struct stat st;

    if (s->listen_fd < 0)
        return;
    acceptor_close(&s->listener);
    close(s->listen_fd);
    s->listen_fd = -1;
    if (stat(s->cfg.socket_path, &st) == 0 && st.st_dev == s->socket_dev &&
        st.st_ino == s->socket_ino)
        unlink(s->cfg.socket_path);
}

/* store_persist's progress at exit, told to a service manager: more time to stop while it
 * goes on (notify_extend), and how far it is (STATUS=). */
static void persist_progress(void *arg, const struct store_progress *p)
{
    char status[128], f[2][SIZE_FORMAT_LEN];

    snprintf(status, sizeof(status), "persisting at exit: %s of %s %s",
             size_format(p->done, f[0], sizeof(f[0])), size_format(p->total, f[1], sizeof(f[1])),
             p->stage);
    if (notify_extend(arg, clock_mono_ns(), p->finished, status) < 0)
        log_warn("%s", ferry_errmsg());
}

void server_destroy(struct server *s)
{
    struct notify_extender extender = {0};

    while (s->sessions)
        session_close(s->sessions, NULL);
    engine_close(s->engine);
    s->engine = NULL;
    if (s->dir)
        directory_close(s->dir);
    s->dir = NULL;
    while (s->subscribers)
        subscriber_drop(s, s->subscribers, NULL);
    metrics_close(s->metrics);
    s->metrics = NULL;
    after_turn(&s->loop, s);
    remove_socket(s);
    if (s->signal_fd >= 0)
        close(s->signal_fd);
    s->signal_fd = -1;
    idmap_free(&s->waiters);
    if (s->store.alloc && s->cfg.persist_on_exit)
        store_persist(&s->store, persist_progress, &extender);
    if (s->fast_size && s->fast.states)
        fastidx_close(&s->fast); /* clients' claims fail from now on */
    if (s->store.alloc)
        store_destroy(&s->store);
    fastidx_free(&s->fast);
    arena_close(&s->arena);
    loop_destroy(&s->loop);
}
