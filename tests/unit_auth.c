/* unit_auth - the cluster secret's challenge-response and frame tags (transfer/auth.c), both
 * sides in one process: proofs that must pass, and every way one must fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transfer/auth.h"

/* A handshake between node-c (run 11) dialling 10.0.0.2:7000 and node-a (run 22). */
static void handshake(struct auth_hs *hs)
{
    memset(hs, 0, sizeof(*hs));
    strcpy(hs->node_c, "node-c");
    hs->inc_c = 11;
    strcpy(hs->addr, "10.0.0.2:7000");
    strcpy(hs->node_a, "node-a");
    hs->inc_a = 22;
    assert_int_equal(auth_nonce(hs->nonce_c), 0);
    assert_int_equal(auth_nonce(hs->nonce_a), 0);
}

/* Ways the acceptor's view of the handshake differs from the connector's: a relay shows the
 * acceptor other node ids, another dialled address, or other nonces. */
enum tamper {
    NONE,
    ACCEPTOR_MAC,
    CONNECTOR_MAC,
    NONCE_A,
    NODE_C,
    INC_C,
    ADDR,
    NODE_A,
    INC_A,
};

/* Runs the whole exchange: 0 when both sides accept. */
static int exchange(const struct auth *conn, const struct auth *acc, enum tamper tamper)
{
    struct auth_hs hs, seen;
    uint8_t mac[WIRE_MAC], mine[WIRE_MAC];
    const char *why = NULL;

    handshake(&hs);
    seen = hs; /* the acceptor's copy */
    if (tamper == NODE_C)
        strcpy(seen.node_c, "relay");
    if (tamper == INC_C)
        seen.inc_c++;
    if (tamper == ADDR)
        strcpy(seen.addr, "10.0.0.9:7000");
    if (tamper == NODE_A)
        strcpy(seen.node_a, "node-x");
    if (tamper == INC_A)
        seen.inc_a++;
    assert_int_equal(auth_acceptor_proof(acc, &seen, mac), 0);
    if (tamper == ACCEPTOR_MAC)
        mac[0] ^= 1;
    if (auth_answer(conn, &hs, auth_keyed(acc), mac, mine, &why) < 0) {
        assert_non_null(why);
        return -1;
    }
    if (tamper == CONNECTOR_MAC)
        mine[WIRE_MAC - 1] ^= 0x80;
    if (tamper == NONCE_A)
        seen.nonce_a[0] ^= 1;
    if (auth_check(acc, &seen, mine, &why) < 0) {
        assert_non_null(why);
        return -1;
    }
    return 0;
}

static void test_same_secret_passes_and_tampering_fails(void **state)
{
    struct auth a, b;

    assert_int_equal(auth_init(&a, (const uint8_t *)"s3cret", 6), 0);
    assert_int_equal(auth_init(&b, (const uint8_t *)"s3cret", 6), 0);
    assert_int_equal(exchange(&a, &b, NONE), 0);
    for (int t = ACCEPTOR_MAC; t <= INC_A; t++)
        assert_int_equal(exchange(&a, &b, t), -1);
    auth_free(&a);
    auth_free(&b);
}

static void test_other_or_missing_secret_fails(void **state)
{
    struct auth a, b, none1, none2;

    assert_int_equal(auth_init(&a, (const uint8_t *)"one", 3), 0);
    assert_int_equal(auth_init(&b, (const uint8_t *)"two", 3), 0);
    assert_int_equal(auth_init(&none1, NULL, 0), 0);
    assert_int_equal(auth_init(&none2, (const uint8_t *)"ignored", 0), 0);
    assert_false(auth_keyed(&none1));
    assert_false(auth_keyed(&none2));
    assert_int_equal(exchange(&a, &b, NONE), -1);
    assert_int_equal(exchange(&a, &none1, NONE), -1);
    assert_int_equal(exchange(&none1, &a, NONE), -1);
    assert_int_equal(exchange(&none1, &none2, NONE), 0); /* an open cluster */
    auth_free(&a);
    auth_free(&b);
    auth_free(&none1);
    auth_free(&none2);
}

/* A PULL-like frame of len payload bytes, sealed by s. */
static void sealed(struct auth_session *s, struct pbuf *b, uint8_t fill, size_t len)
{
    size_t start;

    b->len = 0;
    start = proto_frame_begin(b, WIRE_PULL, 7);
    for (size_t i = 0; i < len; i++)
        pbuf_u8(b, fill);
    auth_seal(s, b, start);
    assert_false(b->oom);
}

/* Opens a copy of the frame in b with s: 0 when its tag holds. */
static int opened(struct auth_session *s, const struct pbuf *b, uint32_t *len)
{
    struct proto_header h;
    int rc;

    assert_int_equal(proto_decode_header(b->data, WIRE_MAX_FRAME, &h), 0);
    rc = auth_open(s, &h, b->data + PROTO_HEADER_SIZE);
    *len = h.length;
    return rc;
}

/* Frames pass in order, each once, unaltered, in their own direction only. */
static void test_frame_tags(void **state)
{
    struct auth a;
    struct auth_hs hs;
    struct auth_session c, h, c2, h2;
    struct pbuf b = {0}, first = {0};
    uint32_t len;

    assert_int_equal(auth_init(&a, (const uint8_t *)"s3cret", 6), 0);
    handshake(&hs);
    assert_int_equal(auth_session_start(&a, &hs, 1, &c), 0);
    assert_int_equal(auth_session_start(&a, &hs, 0, &h), 0);
    c2 = c;
    h2 = h;
    sealed(&c, &b, 0xab, 40);
    pbuf_put(&first, b.data, b.len);
    assert_int_equal(opened(&h, &b, &len), 0);
    assert_int_equal(len, 40);                                /* the tag is taken off */
    assert_int_equal(opened(&h, &first, &len), FERRY_EPROTO); /* replayed */
    sealed(&c, &b, 0xab, 40);
    b.data[PROTO_HEADER_SIZE + 3] ^= 1; /* altered */
    assert_int_equal(opened(&h, &b, &len), FERRY_EPROTO);
    sealed(&c2, &b, 0xab, 40);
    b.data[8] ^= 1; /* the header's tag field */
    assert_int_equal(opened(&h2, &b, &len), FERRY_EPROTO);
    sealed(&h2, &b, 0xab, 40);
    assert_int_equal(opened(&h2, &b, &len), FERRY_EPROTO); /* reflected back to its sender */
    b.len = PROTO_HEADER_SIZE;
    memset(b.data, 0, 4); /* a frame of 0 bytes has no room for a tag */
    assert_int_equal(opened(&h2, &b, &len), FERRY_EPROTO);
    auth_session_end(&c);
    assert_false(c.on);
    pbuf_free(&b);
    pbuf_free(&first);
    auth_free(&a);
}

/* Without a secret frames go as they are. */
static void test_unkeyed_frames_untagged(void **state)
{
    struct auth none;
    struct auth_hs hs;
    struct auth_session c, h;
    struct pbuf b = {0};
    uint32_t len;

    assert_int_equal(auth_init(&none, NULL, 0), 0);
    handshake(&hs);
    assert_int_equal(auth_session_start(&none, &hs, 1, &c), 0);
    assert_int_equal(auth_session_start(&none, &hs, 0, &h), 0);
    sealed(&c, &b, 1, 5);
    assert_int_equal(b.len, PROTO_HEADER_SIZE + 5);
    assert_int_equal(opened(&h, &b, &len), 0);
    assert_int_equal(len, 5);
    pbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_secret_passes_and_tampering_fails),
        cmocka_unit_test(test_other_or_missing_secret_fails),
        cmocka_unit_test(test_frame_tags),
        cmocka_unit_test(test_unkeyed_frames_untagged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
