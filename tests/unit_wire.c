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
    wire_hello(&b, "node-a", 77, "fi_sockaddr_in://127.0.0.1:7001", nonce);
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(m.type, WIRE_HELLO);
    assert_int_equal(m.magic, WIRE_MAGIC);
    assert_string_equal(m.node, "node-a");
    assert_int_equal(m.inc, 77);
    assert_string_equal(m.addr, "fi_sockaddr_in://127.0.0.1:7001");
    assert_memory_equal(m.nonce, nonce, WIRE_NONCE);
    b.len = 0;
    wire_challenge(&b, "node-b", 88, nonce, 1, mac);
    assert_int_equal(decode(&b, &m), 0);
    assert_string_equal(m.node, "node-b");
    assert_int_equal(m.inc, 88);
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
    struct wire_reply_entry in = {.status = FERRY_ENOENT, .data_size = 1, .metadata_size = 2}, out;
    struct wire_range r;
    struct pbuf b = {0};
    struct wire_msg m;
    size_t start;

    memset(ids, 0x5a, sizeof(ids));
    wire_pull(&b, 42, WIRE_PULL_VERIFY, 65536, ids, NULL, 2);
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(m.tag, 42);
    assert_int_equal(m.flags, WIRE_PULL_VERIFY);
    assert_int_equal(m.eager_max, 65536);
    assert_int_equal(m.n, 2);
    assert_memory_equal(m.ids, ids, sizeof(ids));
    assert_null(m.ranges);
    wire_pull_range(&m, 1, &r); /* without ranges: the whole object */
    assert_int_equal(r.off, 0);
    assert_int_equal(r.len, UINT64_MAX);
    b.len = 0;
    memset(in.digest, 3, DIGEST_LEN);
    start = wire_reply_begin(&b, 42, 1);
    wire_reply_add(&b, &in);
    wire_reply_leaves(&b, &in);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), 0);
    size_t at = 0;
    wire_reply_entry(&m, 0, &at, &out);
    assert_int_equal(out.status, FERRY_ENOENT);
    assert_int_equal(out.data_size, 1);
    assert_int_equal(out.metadata_size, 2);
    assert_memory_equal(out.digest, in.digest, DIGEST_LEN);
    assert_int_equal(out.nleaves, 0);
    pbuf_free(&b);
}

/* A reply's leaves follow its entries, each entry's count bound to its size: the count of a
 * 3-chunk object is 3, and anything else (or leaves past the frame) is refused. */
static void test_reply_leaves_are_bounded_by_the_sizes(void **state)
{
    uint8_t leaves[3 * DIGEST_LEN];
    struct wire_reply_entry one = {.data_size = 10},
                            three = {.data_size = 2 * DIGEST_CHUNK + 1,
                                     .nleaves = 3,
                                     .leaves = leaves},
                            out;
    struct pbuf b = {0};
    struct wire_msg m;
    size_t start, at = 0;

    for (size_t i = 0; i < sizeof(leaves); i++)
        leaves[i] = (uint8_t)i;
    start = wire_reply_begin(&b, 7, 2);
    wire_reply_add(&b, &one);
    wire_reply_add(&b, &three);
    wire_reply_leaves(&b, &one);
    wire_reply_leaves(&b, &three);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), 0);
    wire_reply_entry(&m, 0, &at, &out);
    assert_int_equal(out.nleaves, 0);
    wire_reply_entry(&m, 1, &at, &out);
    assert_int_equal(out.nleaves, 3);
    assert_memory_equal(out.leaves, leaves, sizeof(leaves));

    b.len = 0; /* a count that is not the object's chunks */
    three.nleaves = 2;
    start = wire_reply_begin(&b, 7, 1);
    wire_reply_add(&b, &three);
    wire_reply_leaves(&b, &three);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);

    b.len = 0; /* the right count, leaves missing */
    three.nleaves = 3;
    start = wire_reply_begin(&b, 7, 1);
    wire_reply_add(&b, &three);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);

    b.len = 0; /* leaves for an object of one chunk */
    one.nleaves = 1;
    one.leaves = leaves;
    start = wire_reply_begin(&b, 7, 1);
    wire_reply_add(&b, &one);
    wire_reply_leaves(&b, &one);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    pbuf_free(&b);
}

/* A ranged PULL carries each id's range; a range is cut to the object it names. */
static void test_ranged_pull_round_trip(void **state)
{
    ferry_id ids[2];
    const struct wire_range in[2] = {{4096, 1 << 20}, {0, UINT64_MAX}};
    struct wire_range out;
    struct pbuf b = {0};
    struct wire_msg m;

    memset(ids, 0x33, sizeof(ids));
    wire_pull(&b, 7, WIRE_PULL_VERIFY | WIRE_PULL_RANGES, 0, ids, in, 2);
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(m.flags, WIRE_PULL_VERIFY | WIRE_PULL_RANGES);
    assert_int_equal(m.n, 2);
    assert_memory_equal(m.ids, ids, sizeof(ids));
    for (uint32_t i = 0; i < 2; i++) {
        wire_pull_range(&m, i, &out);
        assert_int_equal(out.off, in[i].off);
        assert_int_equal(out.len, in[i].len);
    }
    /* The flag with one range fewer than ids: truncated. */
    b.len = 0;
    wire_pull(&b, 7, WIRE_PULL_RANGES, 0, ids, in, 1);
    memcpy(b.data + PROTO_HEADER_SIZE + 1 + 8, &(uint32_t){2}, 4);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    pbuf_free(&b);
    /* Cut to the object: within, past its end, from beyond it, the whole, empty. */
    assert_int_equal(wire_range_cut(&in[0], 8 << 20), 1 << 20);
    assert_int_equal(wire_range_cut(&in[0], 8192), 4096);
    assert_int_equal(wire_range_cut(&in[0], 4096), 0);
    assert_int_equal(wire_range_cut(&in[1], 12345), 12345);
    assert_int_equal(wire_range_cut(&(struct wire_range){UINT64_MAX, UINT64_MAX}, UINT64_MAX), 0);
}

/* Counts beyond the payload, unknown flags, bad node ids and unknown types are refused. */
static void test_malformed_rejected(void **state)
{
    ferry_id id;
    struct pbuf b = {0};
    struct wire_msg m;
    uint8_t nonce[WIRE_NONCE] = {0};

    memset(&id, 1, sizeof(id));
    wire_pull(&b, 1, 0, 0, &id, NULL, 1);
    memcpy(b.data + PROTO_HEADER_SIZE + 1 + 8, &(uint32_t){2}, 4); /* claims 2 ids, holds 1 */
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    b.len = 0;
    wire_pull(&b, 1, 0x80, 0, &id, NULL, 1);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    b.len = 0;
    wire_hello(&b, "bad\x01id", 1, "a:1", nonce);
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

/* A HELLO of another protocol version decodes whatever follows, so that the acceptor can say
 * which version it expected. */
static void test_other_version_hello_decodes(void **state)
{
    struct pbuf b = {0};
    struct wire_msg m;
    size_t start = proto_frame_begin(&b, WIRE_HELLO, 0);

    pbuf_u32(&b, WIRE_MAGIC);
    pbuf_u32(&b, 3);
    pbuf_put(&b, "\x06node-a", 7);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(m.version, 3);
    pbuf_free(&b);
}

/* The dialled address is printable text of at most WIRE_ADDR_MAX bytes. */
static void test_hello_address_checked(void **state)
{
    char addr[WIRE_ADDR_MAX + 2];
    uint8_t nonce[WIRE_NONCE] = {0};
    struct pbuf b = {0};
    struct wire_msg m;

    memset(addr, 'a', sizeof(addr) - 1);
    addr[sizeof(addr) - 1] = '\0';
    wire_hello(&b, "n", 1, addr, nonce); /* cut at WIRE_ADDR_MAX */
    assert_int_equal(decode(&b, &m), 0);
    assert_int_equal(strlen(m.addr), WIRE_ADDR_MAX);
    b.len = 0;
    wire_hello(&b, "n", 1, "a b", nonce);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    b.len = 0;
    wire_hello(&b, "n", 1, "ab", nonce);
    memcpy(b.data + PROTO_HEADER_SIZE + 8 + 2 + 8, &(uint16_t){WIRE_ADDR_MAX + 1}, 2);
    assert_int_equal(decode(&b, &m), FERRY_EPROTO);
    pbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_round_trip),
        cmocka_unit_test(test_refuse_round_trip),
        cmocka_unit_test(test_pull_and_reply_round_trip),
        cmocka_unit_test(test_reply_leaves_are_bounded_by_the_sizes),
        cmocka_unit_test(test_ranged_pull_round_trip),
        cmocka_unit_test(test_malformed_rejected),
        cmocka_unit_test(test_other_version_hello_decodes),
        cmocka_unit_test(test_hello_address_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
