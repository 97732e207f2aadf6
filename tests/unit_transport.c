/*
 * unit_transport - every transport meets transport.h the same way: the same cases run against
 * the transport FERRY_TEST_TRANSPORT names (tcp; rxm: fabric over tcp;ofi_rxm; shm: fabric over
 * shm), two endpoints of it in this process on one loop, each with an arena of its own:
 *   - frames both ways, in order;
 *   - ranges of the arena arrive whole, as messages and, where the transport offers it
 *     (XPORT_ONE_SIDED), by one-sided reads;
 *   - a connection closed in the middle of a transfer is reported to the other side, and its
 *     memory is drained;
 *   - a peer that breaks the framing (a frame over the limit) is dropped as a bad peer;
 *   - a paused connection delivers nothing until it is resumed;
 *   - what it advertises reaches another endpoint of its own kind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proto.h"
#include "loop_driver.h"
#include "transfer/wire.h"
#include "transport/registry.h"

#define ARENA (64u << 20)
#define WAIT_MS 20000
#define T_PING 0x101 /* payload: u32 sequence */
#define T_DATA 0x102 /* payload: u64 offset, u64 length; the bytes follow on the stream */

/* One endpoint and the one connection it has (accepted for A, made for B). */
struct side {
    struct xlistener *l;
    uint8_t *arena;
    struct xconn *conn;
    uint32_t pings, ping_order_ok;
    int recv_done, sent, closed, close_err, drained;
    int close_on_data; /* close (and drain) right after arming the receive of a T_DATA */
    int drain_rc;
    uint64_t recv_at, recv_len; /* where T_DATA puts its bytes */
};

static struct loop loop;
static const struct transport *xp;
static struct xconfig cfg;
static struct side a, b;
static uint32_t accept_max_frame = 1u << 20;

static struct side *side_of(struct xconn *c)
{
    return c->owner;
}

static void on_drained(void *arg)
{
    ((struct side *)arg)->drained++;
}

static void on_frame(struct xconn *c, const struct proto_header *h, const uint8_t *payload)
{
    struct side *s = side_of(c);
    struct preader r = {payload, h->length, 0};

    if (h->type == T_PING) {
        s->ping_order_ok &= prd_u32(&r) == s->pings;
        s->pings++;
    } else if (h->type == T_DATA) {
        s->recv_at = prd_u64(&r);
        s->recv_len = prd_u64(&r);
        assert_int_equal(c->type->recv_into(c, s->arena + s->recv_at, s->recv_len, s), 0);
        if (s->close_on_data) {
            /* In the middle of the transfer, as a watchdog or a shutdown would; the memory
             * given to recv_into may be reused once drain says nothing can write into it (asked
             * in the turn of the close: the record goes after it). */
            c->type->close(c);
            s->closed = 1;
            s->conn = NULL;
            s->drain_rc = c->type->drain(c, on_drained, s);
        }
    }
}

static void on_received(struct xconn *c, void *arg)
{
    ((struct side *)arg)->recv_done++;
}

static void on_sent(struct xconn *c, void *arg)
{
    ((struct side *)arg)->sent++;
}

static void on_closed(struct xconn *c, int err, const char *reason)
{
    struct side *s = side_of(c);
    s->closed++;
    s->close_err = err;
}

static const struct xconn_events events = {
    .frame = on_frame, .received = on_received, .sent = on_sent, .closed = on_closed};

static void on_accept(struct xlistener *l, struct xconn *c, void *arg)
{
    struct side *s = arg;
    s->conn = c;
    c->owner = s;
    c->max_frame = accept_max_frame;
}

/* ---- set-up: the transport under test, two endpoints, B connected to A ---- */

static const char *listen_addr(void)
{
    static char addr[32];
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    /* A port that was free a moment ago (tcp listens on it; fabric binds to the host only). */
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    close(fd);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sin.sin_port));
    return addr;
}

static void open_side(struct side *s)
{
    memset(s, 0, sizeof(*s));
    s->arena = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(s->arena != MAP_FAILED);
    cfg.arena = s->arena;
    cfg.arena_len = ARENA;
    cfg.addr = listen_addr();
    s->ping_order_ok = 1;
    int rc = xp->listen(&loop, &cfg, &events, on_accept, s, &s->l);
    if (rc < 0)
        fail_msg("%s: listen: %s", xp->name, ferry_errmsg());
}

static void close_conn(struct side *s)
{
    if (s->conn && !s->closed)
        s->conn->type->close(s->conn);
    s->conn = NULL;
}

static void close_side(struct side *s)
{
    xp->listener_close(s->l);
    munmap(s->arena, ARENA);
}

static int accepted(void *arg)
{
    return a.conn != NULL;
}

static int setup(void **state)
{
    const char *which = getenv("FERRY_TEST_TRANSPORT");

    if (!which || strcmp(which, "tcp") == 0) {
        xp = registry_find("tcp");
    } else {
        xp = registry_find("fabric");
        cfg.provider = strcmp(which, "rxm") == 0 ? "tcp;ofi_rxm" : which;
    }
    cfg.window = 8;
    cfg.max_frame = WIRE_MAX_FRAME; /* the engine's */
    assert_non_null(xp);
    assert_int_equal(loop_init(&loop), 0);
    open_side(&a);
    open_side(&b);
    return 0;
}

/* Connections first, on both sides, then the endpoints: with both endpoints in one process,
 * shm's peer region goes with its endpoint, and a CLOSE sent to it after would crash (between
 * processes the region outlives the peer). */
static int teardown(void **state)
{
    close_conn(&b);
    close_conn(&a);
    run_for(&loop, 20);
    close_side(&b);
    close_side(&a);
    run_for(&loop, 20); /* transports free closed connections from the loop */
    loop_destroy(&loop);
    return 0;
}

/* Connects B to what A advertises, and waits for A to accept. */
static void connect_b_to_a(void)
{
    char why[112];

    assert_true(xp->reaches(b.l, xp->address(a.l), why, sizeof(why)));
    assert_int_equal(xp->connect(b.l, xp->address(a.l), &events, &b.conn), 0);
    b.conn->owner = &b;
    b.conn->max_frame = 1u << 20;
    b.conn->eager_max = UINT64_MAX;
    assert_true(run_until(&loop, accepted, NULL, WAIT_MS));
}

static void send_frame(struct xconn *c, uint16_t type, const struct pbuf *payload)
{
    struct pbuf f = {0};
    size_t start = proto_frame_begin(&f, type, 1);
    pbuf_put(&f, payload->data, payload->len);
    proto_frame_end(&f, start);
    assert_false(f.oom);
    assert_int_equal(c->type->send_frame(c, f.data, f.len), 0);
    pbuf_free(&f);
}

/* ---- the cases ---- */

static int pings_in(void *arg)
{
    return ((struct side *)arg)->pings == 200;
}

static void test_frames_both_ways_in_order(void **state)
{
    connect_b_to_a();
    for (uint32_t i = 0; i < 200; i++) {
        struct pbuf p = {0};
        pbuf_u32(&p, i);
        pbuf_put(&p, a.arena, i * 37 % 3000); /* frames of many sizes */
        send_frame(b.conn, T_PING, &p);
        send_frame(a.conn, T_PING, &p);
        pbuf_free(&p);
    }
    assert_true(run_until(&loop, pings_in, &a, WAIT_MS));
    assert_true(run_until(&loop, pings_in, &b, WAIT_MS));
    assert_true(a.ping_order_ok && b.ping_order_ok);
}

struct transfer {
    uint64_t sent_before, recv_before;
};

static int transfer_done(void *arg)
{
    const struct transfer *t = arg;
    return a.recv_done > (int)t->recv_before && b.sent > (int)t->sent_before;
}

/* B sends len bytes of its arena at off (a pattern) to A's arena at off2. */
static void move_range(uint64_t off, uint64_t off2, uint64_t len, uint64_t eager_max)
{
    struct transfer t = {.sent_before = (uint64_t)b.sent, .recv_before = (uint64_t)a.recv_done};
    struct pbuf p = {0};

    for (uint64_t i = 0; i < len; i++)
        b.arena[off + i] = (uint8_t)(i * 131 + len);
    memset(a.arena + off2, 0, len);
    b.conn->eager_max = eager_max;
    pbuf_u64(&p, off2);
    pbuf_u64(&p, len);
    send_frame(b.conn, T_DATA, &p);
    pbuf_free(&p);
    assert_int_equal(b.conn->type->send_range(b.conn, b.arena + off, len, &b), 0);
    assert_true(run_until(&loop, transfer_done, &t, WAIT_MS));
    assert_memory_equal(a.arena + off2, b.arena + off, len);
}

static void test_ranges_arrive_whole(void **state)
{
    static const uint64_t sizes[] = {1, 4096, 65537, 1u << 20, 8u << 20};

    connect_b_to_a();
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        move_range(4096 * i, 8u << 20, sizes[i], UINT64_MAX); /* as messages */
        if (xp->flags & XPORT_ONE_SIDED)
            move_range(4096 * i + 64, 24u << 20, sizes[i], 0); /* by one-sided reads */
    }
}

static int b_closed(void *arg)
{
    return b.closed > 0;
}

static int a_closed_and_drained(void *arg)
{
    return a.closed && (a.drained || a.drain_rc != 0);
}

static void test_close_mid_transfer_is_seen_and_drained(void **state)
{
    struct pbuf p = {0};

    connect_b_to_a();
    a.close_on_data = 1;
    b.conn->eager_max = (xp->flags & XPORT_ONE_SIDED) ? 0 : UINT64_MAX;
    pbuf_u64(&p, 0);
    pbuf_u64(&p, 48u << 20);
    send_frame(b.conn, T_DATA, &p);
    pbuf_free(&p);
    assert_int_equal(b.conn->type->send_range(b.conn, b.arena, 48u << 20, &b), 0);
    assert_true(run_until(&loop, a_closed_and_drained, NULL, WAIT_MS));
    if (a.drain_rc != 0)
        assert_int_equal(a.drain_rc, FERRY_ENOSYS); /* nothing is ever written after the close */
    assert_int_equal(a.recv_done, 0);
    assert_true(run_until(&loop, b_closed, NULL, WAIT_MS));
    assert_int_equal(b.close_err, FERRY_ECONN);
}

static int a_closed(void *arg)
{
    return a.closed > 0;
}

static void test_oversized_frame_drops_the_peer(void **state)
{
    struct pbuf p = {0};

    accept_max_frame = 256; /* what the engine allows before a peer authenticates */
    connect_b_to_a();
    accept_max_frame = 1u << 20;
    pbuf_reserve(&p, 1024);
    memset(p.data, 'x', 1024);
    p.len = 1024;
    send_frame(b.conn, T_PING, &p);
    pbuf_free(&p);
    assert_true(run_until(&loop, a_closed, NULL, WAIT_MS));
    assert_int_equal(a.close_err, FERRY_EPROTO);
    assert_int_equal(a.pings, 0);
    assert_true(run_until(&loop, b_closed, NULL, WAIT_MS));
}

static int some_pings(void *arg)
{
    return a.pings > 0;
}

static int fifty_pings(void *arg)
{
    return a.pings == 50;
}

static void test_paused_connection_delivers_nothing(void **state)
{
    connect_b_to_a();
    a.conn->type->pause(a.conn, 1);
    for (uint32_t i = 0; i < 50; i++) {
        struct pbuf p = {0};
        pbuf_u32(&p, i);
        send_frame(b.conn, T_PING, &p);
        pbuf_free(&p);
    }
    assert_false(run_until(&loop, some_pings, NULL, 300));
    a.conn->type->pause(a.conn, 0);
    assert_true(run_until(&loop, fifty_pings, NULL, WAIT_MS));
    assert_true(a.ping_order_ok);
}

/* An endpoint must be told the longest frame a connection takes: without it, listen fails
 * before it takes anything. */
static void test_listen_without_a_frame_limit_is_refused(void **state)
{
    struct xconfig bad = cfg;
    struct xlistener *l = NULL;

    bad.max_frame = 0;
    bad.addr = listen_addr();
    assert_int_equal(xp->listen(&loop, &bad, &events, on_accept, NULL, &l), FERRY_EINVAL);
    assert_null(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_frames_both_ways_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranges_arrive_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_mid_transfer_is_seen_and_drained, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_oversized_frame_drops_the_peer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paused_connection_delivers_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_listen_without_a_frame_limit_is_refused, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
