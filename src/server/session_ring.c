/*
 * session_ring.c - a session's ring of puts (common/putring.h, ferry_put_nowait): set up at the
 * client's RING; taken before each of its requests (so its calls keep their order), before a
 * request of another client that names an id the store lacks (so a put that returned is found by
 * whoever asks after it), every loop turn (so subscribers, the index and the directory hear of
 * it), at FLUSH (which answers the failures since the last one) and when the client leaves (a
 * put that returned is stored, even if its process exits at once). The loop sleeps only after
 * asking each ring to be kicked (session_rings_sleep).
 *
 * A ring is memory of its own (a sealed memfd, mapped by the client and here), not a block of the
 * arena: a client keeps writing into its ring until it notices that its connection is gone, and
 * such writes must land nowhere another client's objects may be. The seals keep the client from
 * shrinking it under the daemon's reads (SIGBUS).
 *
 * Bounds: RINGS_MAX rings (a client past them puts as ferry_put does), each of the staging size
 * (at least PUTRING_MIN_SIZE; its pages are allocated as they are written: put_ring_bytes). A
 * ring gives the daemon at most one ring's worth of work per loop turn, its entries and its data
 * area (putring_take refuses an entry past what the client may have written): past that, its
 * client's requests wait for the next turn (SESSION_YIELD), the turn's walk leaves it, and
 * another client's request does not wait for it. Each turn walks every ring once.
 *
 * Lifetime: a ring's close (with its session's) unmaps it and marks it dead; the struct stays
 * linked until the end of the turn's walk (rings_reap), since closing a session can happen
 * inside a walk (a bad ring, or a get woken by a seal that fails its client).
 */
#include "server/session_int.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "transfer/engine.h"

/* Clients with a ring at once: each turn looks at every ring, and each may cost a ring's worth
 * of copying per turn. */
#define RINGS_MAX 256u
/* After a turn that took entries, the loop sleeps at most this long without asking for kicks:
 * puts that stream cost no message; each waits a millisecond at most to be taken. */
#define RING_LINGER_MS 1

struct session_ring {
    struct session *ss; /* NULL once closed: reaped after the walk */
    uint8_t *map;       /* the ring's memory, size bytes */
    uint64_t size;
    struct putring r;
    /* The daemon's own counts (the ring's copies are only written): entries taken, where the
     * last ended, and where it ended at the last release (the client may write up to one data
     * area past it). */
    uint64_t head, data_head, released;
    uint64_t turn_entries, turn_bytes; /* taken this turn: a ring's worth at most */
    int stuck; /* the next entry waits for room: not looked at before the next turn */
    /* Failures since the last FLUSH that reported: how many, the first's status and reason. */
    uint64_t failed;
    int32_t first;
    char why[PROTO_MAX_DETAIL + 1];
    struct session_ring *next, **pprev; /* in server.rings */
};

/* Whether the store waits for room that is coming (spilling, or pins being given back): the
 * entry waits, as a create does (handle_create). */
static int room_coming(const struct session *ss, int rc)
{
    return rc == FERRY_EAGAIN ||
           (rc == FERRY_ENOSPACE && ss->srv->engine && engine_pins_draining(ss->srv->engine));
}

/* The entry taken: stored or failed (recorded); SESSION_RETRY when it waits for room. */
static int ring_put(struct session_ring *g, const struct putring_item *it)
{
    struct session *ss = g->ss;
    char hex[2 * FERRY_ID_SIZE + 1];
    struct object *o;
    int rc =
        session_put_copy(ss, &it->id, g->map + it->offset, it->data_size, it->metadata_size, &o);

    if (room_coming(ss, rc))
        return SESSION_RETRY;
    if (rc == 0) {
        session_put_seal(ss, o);
        ss->srv->counters.puts_nowait++;
        return 0;
    }
    ss->srv->counters.puts_nowait_failed++;
    if (g->failed++ == 0) {
        g->first = rc;
        ferry_id_format(&it->id, hex);
        snprintf(g->why, sizeof(g->why), "put of %s: %s", hex, ferry_errmsg());
    }
    return 0;
}

/* Whether the ring has had its share of this turn. */
static int spent(const struct session_ring *g)
{
    return g->turn_entries >= g->r.nentries || g->turn_bytes >= g->r.data_size;
}

/* Takes entries until the ring is empty or has had its share of the turn: 0, SESSION_YIELD
 * (entries are left for the next turn), SESSION_RETRY (one waits for room), or FERRY_EPROTO. */
static int ring_take(struct session_ring *g)
{
    struct putring_item it;
    uint64_t start = g->head;
    int64_t n = putring_pending(&g->r, g->head);
    int rc = 0;

    if (n < 0)
        return (int)n;
    g->stuck = 0;
    for (; n > 0; n--) {
        if (spent(g)) {
            rc = SESSION_YIELD;
            break;
        }
        if ((rc = putring_take(&g->r, g->head, g->data_head, g->released, &it)) < 0)
            break;
        if ((rc = ring_put(g, &it)) == SESSION_RETRY) {
            g->stuck = 1;
            break;
        }
        g->turn_entries++;
        g->turn_bytes += it.end - g->data_head;
        g->head++;
        g->data_head = it.end;
    }
    if (g->head != start) {
        putring_release(&g->r, g->head, g->data_head);
        g->released = g->data_head;
        g->ss->srv->rings_took = 1;
    }
    return rc;
}

int session_ring_take(struct session *ss)
{
    return ss->ring ? ring_take(ss->ring) : 0;
}

/* A ring's memory: size bytes of a memfd sealed at that size, mapped at *map; its descriptor,
 * for the client, in *fd. */
static int ring_open(uint64_t size, uint8_t **map, int *fd)
{
    int rc;
    void *p;

    if ((*fd = memfd_create("ferry-put-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0)
        return err_sys("memfd_create of a ring of puts");
    if (ftruncate(*fd, (off_t)size) < 0 ||
        fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        rc = err_sys("sizing and sealing a ring of puts");
        goto close_fd;
    }
    if ((p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0)) == MAP_FAILED) {
        rc = err_sys("mmap of a ring of puts");
        goto close_fd;
    }
    *map = p;
    return 0;
close_fd:
    close(*fd);
    *fd = -1;
    return rc;
}

/* The size of a ring: the staging size, at least PUTRING_MIN_SIZE, in whole pages. */
static uint64_t ring_size(const struct server *srv)
{
    uint64_t size = srv->staging_size > PUTRING_MIN_SIZE ? srv->staging_size : PUTRING_MIN_SIZE;

    return (size + 4095) / 4096 * 4096;
}

/* Why RING is refused, or 0. */
static int ring_refused(const struct session *ss)
{
    const struct server *srv = ss->srv;

    if (srv->cfg.strict_ids && srv->dir)
        return err_set(FERRY_ENOSYS, "--strict-ids: each put waits for the directory's claim");
    if (ss->ring)
        return err_set(FERRY_EBUSY, "this client has its ring");
    if (srv->nrings >= RINGS_MAX)
        return err_set(FERRY_EBUSY, "%u clients have rings of puts, the most at once", RINGS_MAX);
    return 0;
}

int session_handle_ring(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    struct session_ring *g;
    size_t start;
    int fd, rc;

    if ((rc = ring_refused(ss)) < 0)
        return session_reply_status(ss, q, rc);
    if (!(g = calloc(1, sizeof(*g))))
        return session_reply_status(ss, q, err_set(FERRY_ENOMEM, "a ring of puts"));
    g->size = ring_size(srv);
    if ((rc = ring_open(g->size, &g->map, &fd)) < 0) {
        free(g);
        return session_reply_status(ss, q, rc);
    }
    putring_layout(&g->r, g->map, g->size); /* cannot fail: the size is PUTRING_MIN_SIZE at least */
    putring_reset(&g->r);
    g->ss = ss;
    g->next = srv->rings;
    g->pprev = &srv->rings;
    if (srv->rings)
        srv->rings->pprev = &g->next;
    srv->rings = g;
    srv->nrings++;
    srv->ring_bytes += g->size;
    ss->ring = g;
    start = session_reply_begin(ss, q, 0);
    pbuf_u64(&ss->out, g->size);
    proto_frame_end(&ss->out, start);
    return session_send_fd(ss, q, fd);
}

int session_handle_flush(struct session *ss, const struct proto_request *q)
{
    struct session_ring *g = ss->ring;
    int rc = 0;

    /* dispatch took the ring whole before this request */
    if (g && q->u.flush.report && g->failed) {
        rc = err_set(g->first, "%" PRIu64 " put%s since the last flush failed; the first: %s",
                     g->failed, g->failed == 1 ? "" : "s", g->why);
        g->failed = 0;
    }
    return session_reply_status(ss, q, rc);
}

int session_handle_kick(struct session *ss, const struct proto_request *q)
{
    (void)q;
    ss->srv->counters.put_kicks++; /* its ring was taken before it (dispatch) */
    if (ss->ring)
        putring_awake(&ss->ring->r); /* awake now: the client's next puts need not kick */
    return 0;
}

void session_ring_close(struct session *ss)
{
    struct session_ring *g = ss->ring;
    int64_t left;

    if (!g)
        return;
    /* A put that returned is stored, even when its process exits at once, whatever closed the
     * connection: one ring's worth more at most. A bad ring, or entries waiting for room, lose
     * the rest (counted as failed). */
    g->turn_entries = g->turn_bytes = 0;
    ring_take(g);
    if ((left = putring_pending(&g->r, g->head)) > 0) {
        ss->srv->counters.puts_nowait_failed += (uint64_t)left;
        log_warn("client %" PRIu64 " (pid %d): %" PRId64 " puts of its ring dropped at its close",
                 ss->client_id, (int)ss->pid, left);
    }
    if (g->failed)
        log_info("client %" PRIu64 " (pid %d) left with %" PRIu64
                 " failed puts it never flushed; the first: %s",
                 ss->client_id, (int)ss->pid, g->failed, g->why);
    ss->srv->nrings--;
    ss->srv->ring_bytes -= g->size;
    munmap(g->map, g->size);
    g->map = NULL;
    g->ss = NULL; /* reaped after the walk under way, if any */
    ss->ring = NULL;
}

/* Frees the rings closed since the last reap. */
static void rings_reap(struct server *srv)
{
    for (struct session_ring **pp = &srv->rings, *g; (g = *pp);) {
        if (g->ss) {
            pp = &g->next;
            continue;
        }
        *pp = g->next;
        if (g->next)
            g->next->pprev = pp;
        free(g);
    }
}

/* Takes every live ring but skip's (the session being served, which must not be closed under
 * its handler), each up to its share of the turn, dropping a client whose ring is bad; nonzero
 * when one has entries left that could be taken now. */
static int rings_take(struct server *srv, const struct session *skip, session_drop_fn *drop)
{
    int more = 0;

    for (struct session_ring *g = srv->rings; g; g = g->next) {
        int rc;
        if (!g->ss || g->ss == skip)
            continue;
        putring_awake(&g->r);
        if ((rc = ring_take(g)) < 0) {
            char reason[PROTO_MAX_DETAIL + 1];
            snprintf(reason, sizeof(reason), "%s", ferry_errmsg());
            drop(g->ss, reason);
            continue;
        }
        more |= rc == SESSION_YIELD;
    }
    return more;
}

int session_rings_turn(struct server *srv, session_drop_fn *drop)
{
    int more = rings_take(srv, NULL, drop);

    rings_reap(srv);
    for (struct session_ring *g = srv->rings; g; g = g->next)
        g->turn_entries = g->turn_bytes = 0;
    return more;
}

void session_rings_before_lookup(struct session *ss, const ferry_id *ids, uint32_t n,
                                 session_drop_fn *drop)
{
    struct server *srv = ss->srv;

    if (!srv->rings || (srv->rings->ss == ss && !srv->rings->next))
        return; /* no ring but the session's own, which dispatch took */
    if (!ids) { /* a request about every object (LIST) */
        rings_take(srv, ss, drop);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        ferry_id id;
        memcpy(&id, &ids[i], sizeof(id));
        if (!store_find(&srv->store, &id)) {
            rings_take(srv, ss, drop);
            return;
        }
    }
}

int session_rings_sleep(struct loop *l, void *arg, int timeout_ms)
{
    struct server *srv = arg;

    (void)l;
    if (srv->rings_took) {
        srv->rings_took = 0;
        return timeout_ms < 0 || timeout_ms > RING_LINGER_MS ? RING_LINGER_MS : timeout_ms;
    }
    for (struct session_ring *g = srv->rings; g; g = g->next)
        if (g->ss && !g->stuck)
            putring_want_kick(&g->r);
    putring_fence(); /* one for all: between the flags' stores and the tails' loads */
    for (struct session_ring *g = srv->rings; g; g = g->next)
        if (g->ss && !g->stuck && putring_waiting(&g->r, g->head))
            return 0;
    return timeout_ms;
}
