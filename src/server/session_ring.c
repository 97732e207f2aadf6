/*
 * session_ring.c - a session's ring of puts (common/putring.h, ferry_put_nowait): set up at the
 * client's RING, taken before each of its requests (so its calls keep their order), every loop
 * turn (so other clients see its puts within a turn), at FLUSH (which answers the failures since
 * the last one) and when the client leaves (a put that returned is stored, even if its process
 * exits at once). The loop sleeps only after asking each ring to be kicked (session_rings_sleep).
 *
 * A ring is memory of its own (a sealed memfd, mapped by the client and here), not a block of the
 * arena: a client keeps writing into its ring until it notices that its connection is gone, and
 * such writes must land nowhere another client's objects may be. The seals keep the client from
 * shrinking it under the daemon's reads (SIGBUS).
 *
 * Bounds: one ring of at most the staging size per client (its pages are allocated as they are
 * written: put_ring_bytes counts what the rings may take); RING_PER_TURN entries of one ring per
 * turn; a request waits for its own ring whole, at most PUTRING_MAX_ENTRIES entries of
 * FERRY_SMALL_PUT_MAX bytes.
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

/* Entries of one ring taken per loop turn; the rest wait for the next turn (or a request). */
#define RING_PER_TURN 256u
/* After a turn that took entries, the loop sleeps at most this long without asking for kicks:
 * puts that stream cost no message; each waits a millisecond at most to be seen by others. */
#define RING_LINGER_MS 1

struct session_ring {
    struct session *ss;
    uint8_t *map; /* the ring's memory, size bytes */
    uint64_t size;
    struct putring r;
    uint64_t head, data_head; /* the daemon's own: the ring's copies are only written */
    int stuck;                /* the last entry waits for room: not looked at before next turn */
    /* Failures since the last FLUSH that reported: how many, the first's status and reason. */
    uint64_t failed;
    int32_t first;
    char why[PROTO_MAX_DETAIL + 1];
    struct session_ring *next, **pprev; /* in server.rings */
};

/* The entry at head, stored or failed (recorded); SESSION_RETRY when it waits for room. */
static int ring_put(struct session_ring *g, const struct putring_item *it)
{
    struct session *ss = g->ss;
    char hex[2 * FERRY_ID_SIZE + 1];
    struct object *o;
    int rc =
        session_put_copy(ss, &it->id, g->map + it->offset, it->data_size, it->metadata_size, &o);

    if (rc == FERRY_EAGAIN)
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

int session_ring_take(struct session *ss, uint32_t max)
{
    struct session_ring *g = ss->ring;
    struct putring_item it;
    int64_t n;
    uint64_t start;
    int rc = 0;

    if (!g)
        return 0;
    if ((n = putring_pending(&g->r, g->head)) < 0)
        return (int)n;
    start = g->head;
    g->stuck = 0;
    for (; n > 0 && g->head - start < max; n--) {
        if ((rc = putring_take(&g->r, g->head, &it)) < 0)
            break;
        if ((rc = ring_put(g, &it)) == SESSION_RETRY) {
            g->stuck = 1;
            break;
        }
        g->head++;
        g->data_head = it.end;
    }
    if (g->head != start) {
        putring_release(&g->r, g->head, g->data_head);
        ss->srv->rings_took = 1;
    }
    return rc;
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

int session_handle_ring(struct session *ss, const struct proto_request *q)
{
    struct server *srv = ss->srv;
    struct session_ring *g;
    size_t start;
    int fd, rc;

    if (srv->cfg.strict_ids && srv->dir)
        return session_reply_status(
            ss, q,
            err_set(FERRY_ENOSYS, "--strict-ids: each put waits for the directory's confirmation"));
    if (ss->ring)
        return session_reply_status(ss, q, err_set(FERRY_EBUSY, "this client has its ring"));
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
    ss->ring = g;
    srv->ring_bytes += g->size;
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
    return 0;
}

void session_ring_close(struct session *ss, int orderly)
{
    struct session_ring *g = ss->ring;
    int64_t left;

    if (!g)
        return;
    /* A put that returned is stored, even when its process exits at once; a client dropped for a
     * bad message, or whose puts wait for room, loses the rest (counted as failed). */
    if (orderly)
        session_ring_take(ss, PUTRING_MAX_ENTRIES);
    if ((left = putring_pending(&g->r, g->head)) > 0) {
        ss->srv->counters.puts_nowait_failed += (uint64_t)left;
        log_warn("client %" PRIu64 " (pid %d): %" PRId64 " puts of its ring dropped at its close",
                 ss->client_id, (int)ss->pid, left);
    }
    if (g->failed && orderly)
        log_info("client %" PRIu64 " (pid %d) left with %" PRIu64
                 " failed puts it never flushed; the first: %s",
                 ss->client_id, (int)ss->pid, g->failed, g->why);
    *g->pprev = g->next;
    if (g->next)
        g->next->pprev = g->pprev;
    ss->srv->ring_bytes -= g->size;
    munmap(g->map, g->size);
    free(g);
    ss->ring = NULL;
}

/* Takes up to max entries of every ring but skip's (the session being served, which must not
 * be closed under its handler), dropping a client whose ring is bad; nonzero when one has
 * more. */
static int rings_take(struct server *srv, uint32_t max, const struct session *skip,
                      session_drop_fn *drop)
{
    int more = 0;

    for (struct session_ring *g = srv->rings, *next; g; g = next) {
        struct session *ss = g->ss;
        next = g->next; /* a bad ring closes its session, which unlinks it */
        if (ss == skip)
            continue;
        putring_awake(&g->r);
        if (session_ring_take(ss, max) < 0) {
            char reason[PROTO_MAX_DETAIL + 1];
            snprintf(reason, sizeof(reason), "%s", ferry_errmsg());
            drop(ss, reason);
            continue;
        }
        more |= !g->stuck && putring_pending(&g->r, g->head) > 0;
    }
    return more;
}

int session_rings_turn(struct server *srv, session_drop_fn *drop)
{
    return rings_take(srv, RING_PER_TURN, NULL, drop);
}

void session_rings_before_lookup(struct session *ss, const ferry_id *ids, uint32_t n,
                                 session_drop_fn *drop)
{
    struct server *srv = ss->srv;

    if (!srv->rings || (srv->rings->ss == ss && !srv->rings->next))
        return; /* no ring but the session's own, which dispatch took */
    for (uint32_t i = 0; i < n; i++) {
        ferry_id id;
        memcpy(&id, &ids[i], sizeof(id));
        if (!store_find(&srv->store, &id)) {
            rings_take(srv, PUTRING_MAX_ENTRIES, ss, drop);
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
        if (!g->stuck && putring_sleep(&g->r, g->head))
            return 0;
    return timeout_ms;
}
