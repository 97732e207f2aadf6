/* Unit tests of the transfer protocol codec (transfer/wire.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transfer/wire.h"

static int decode(const struct pbuf *b, struct wire_msg *m)
{
    struct proto_header h;
    int rc = proto_decode_header(b->data, WIRE_MAX_FRAME, &h);
    return rc < 0 ? rc : wire_decode(&h, b->data + PROTO_HEADER_SIZE, m);
}

static void test_handshake_round_trip(void **state)
{
    uint8_t nonce[WIRE_NONCE], mac[WIRE_MAC];
    struct pbuf b = {0};
    struct wire_msg m;

    memset(nonce, 7, sizeof(nonce));
    memset(mac, 9, sizeof(mac));
    wire_hello(&b, "node-a", nonce);
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(m.type, WIRE_HELLO);
    assert_int_equal(m.magic, WIRE_MAGIC);
    assert_string_equal(m.node, "node-a");
    assert_memory_equal(m.nonce, nonce, WIRE_NONCE);
    b.len = 0;
    wire_challenge(&b, "node-b", nonce, 1, mac);
    assert_int_equal(decode(&b, &m), 0);
    assert_string_equal(m.node, "node-b");
    assert_int_equal(m.keyed, 1);
    assert_memory_equal(m.mac, mac, WIRE_MAC);
    pbuf_free(&b);
}

/* A refusal carries printable text, cut to WIRE_REASON_MAX; control bytes are refused. */
static void test_refuse_round_trip(void **state)
{
    char long_reason[300];
    struct pbuf b = {0};
    struct wire_msg m;

    wire_refuse(&b, "wrong cluster secret");
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(m.type, WIRE_REFUSE);
    assert_string_equal(m.reason, "wrong cluster secret");
    memset(long_reason, 'x', sizeof(long_reason) - 1);
    long_reason[sizeof(long_reason) - 1] = '\0';
    b.len = 0;
    wire_refuse(&b, long_reason);
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(strlen(m.reason), WIRE_REASON_MAX);
    b.len = 0;
    wire_refuse(&b, "bad");
    b.data[PROTO_HEADER_SIZE + 2] = '\n'; /* after the length byte: 'b', then 'a' */
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    pbuf_free(&b);
}

static void test_pull_and_reply_round_trip(void **state)
{
    ferry_id ids[2];
    struct wire_reply_entry in = {FERRY_ENOENT, 1, 2, 3}, out;
    struct pbuf b = {0};
    struct wire_msg m;
    size_t start;

    memset(ids, 0x5a, sizeof(ids));
    wire_pull(&b, 42, WIRE_PULL_VERIFY, 65536, ids, 2);
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(m.tag, 42);
    assert_int_equal(m.flags, WIRE_PULL_VERIFY);
    assert_int_equal(m.eager_max, 65536);
    assert_int_equal(m.n, 2);
    assert_memory_equal(m.ids, ids, sizeof(ids));
    b.len = 0;
    start = wire_reply_begin(&b, 42, 1);
    wire_reply_add(&b, &in);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), 0);
    wire_reply_entry(&m, 0, &out);
    assert_int_equal(out.status, FERRY_ENOENT);
    assert_int_equal(out.data_size, 1);
    assert_int_equal(out.metadata_size, 2);
    assert_int_equal(out.digest, 3);
    pbuf_free(&b);
}

/* Counts beyond the payload, unknown flags, bad node ids and unknown types are refused. */
static void test_malformed_rejected(void **state)
{
    ferry_id id;
    struct pbuf b = {0};
    struct wire_msg m;
    uint8_t nonce[WIRE_NONCE] = {0};

    memset(&id, 1, sizeof(id));
    wire_pull(&b, 1, 0, 0, &id, 1);
    memcpy(b.data + PROTO_HEADER_SIZE + 1 + 8, &(uint32_t){2}, 4); /* claims 2 ids, holds 1 */
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    b.len = 0;
    wire_pull(&b, 1, 0x80, 0, &id, 1);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    b.len = 0;
    wire_hello(&b, "bad\x01id", nonce);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    b.len = 0;
    size_t start = proto_frame_begin(&b, 99, 0);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    b.len = 0;
    start = proto_frame_begin(&b, WIRE_PULL, 0);
    pbuf_u8(&b, 0);
    pbuf_u64(&b, 0);
    pbuf_u32(&b, WIRE_MAX_IDS + 1);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    pbuf_free(&b);
}

/* The proof depends on the secret, the role and both nonces. */
static void test_mac_binds_secret_role_and_nonces(void **state)
{
    const uint8_t s1[] = "0123456789abcdef", s2[] = "0123456789abcdeX";
    uint8_t nc[WIRE_NONCE] = {1}, na[WIRE_NONCE] = {2}, a[WIRE_MAC], b[WIRE_MAC];

    assert_int_equal(wire_mac(s1, 16, "connector", nc, na, a), 0);
    assert_int_equal(wire_mac(s1, 16, "connector", nc, na, b), 0);
    assert_memory_equal(a, b, WIRE_MAC);
    assert_int_equal(wire_mac(s2, 16, "connector", nc, na, b), 0);
    assert_memory_not_equal(a, b, WIRE_MAC);
    assert_int_equal(wire_mac(s1, 16, "acceptor", nc, na, b), 0);
    assert_memory_not_equal(a, b, WIRE_MAC);
    assert_int_equal(wire_mac(s1, 16, "connector", na, nc, b), 0);
    assert_memory_not_equal(a, b, WIRE_MAC);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_round_trip),
        cmocka_unit_test(test_refuse_round_trip),
        cmocka_unit_test(test_pull_and_reply_round_trip),
        cmocka_unit_test(test_malformed_rejected),
        cmocka_unit_test(test_mac_binds_secret_role_and_nonces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
