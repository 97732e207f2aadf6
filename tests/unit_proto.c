/* Unit tests of the client-protocol codec (common/proto.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/proto.h"

static ferry_id make_id(uint8_t seed)
{
    ferry_id id;
    for (int i = 0; i < FERRY_ID_SIZE; i++)
        id.bytes[i] = (uint8_t)(seed + i);
    return id;
}

/* Decodes the single frame in b. */
static int decode(const struct pbuf *b, struct proto_request *q)
{
    struct proto_header h;
    int rc = proto_decode_header(b->data, PROTO_MAX_REQUEST, &h);
    if (rc < 0)
        return rc;
    assert_int_equal(h.length, b->len - PROTO_HEADER_SIZE);
    return proto_decode_request(&h, b->data + PROTO_HEADER_SIZE, q);
}

/* NAME: an id and a name; the decoder takes any string that fits, the check says which
 * names are kept. */
static void test_name_round_trip_and_check(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    ferry_id id = make_id(7);
    size_t start = proto_frame_begin(&b, PROTO_NAME, 5);

    pbuf_id(&b, &id);
    proto_put_str(&b, "model/weights-3", FERRY_NAME_MAX);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), 0);
    assert_memory_equal(&q.u.name.id, &id, sizeof(id));
    assert_string_equal(q.u.name.text, "model/weights-3");
    assert_int_equal(proto_check_name(q.u.name.text), 0);
    assert_int_equal(proto_check_name(""), FERRY_EINVAL);
    assert_int_equal(proto_check_name("new\nline"), FERRY_EINVAL);
    assert_int_equal(proto_check_name("del\x7f"), FERRY_EINVAL);
    char longest[FERRY_NAME_MAX + 2];
    memset(longest, 'n', sizeof(longest) - 1);
    longest[FERRY_NAME_MAX] = '\0';
    assert_int_equal(proto_check_name(longest), 0);
    longest[FERRY_NAME_MAX] = 'n';
    longest[FERRY_NAME_MAX + 1] = '\0';
    assert_int_equal(proto_check_name(longest), FERRY_EINVAL);
    pbuf_free(&b);
}

static void test_get_round_trip(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    ferry_id ids[3] = {make_id(1), make_id(2), make_id(3)};
    size_t start = proto_frame_begin(&b, PROTO_GET, 42);

    pbuf_u64(&b, (uint64_t)(int64_t)-1);
    pbuf_u32(&b, 3);
    pbuf_put(&b, ids, sizeof(ids));
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), 0);
    assert_int_equal(q.type, PROTO_GET);
    assert_int_equal(q.tag, 42);
    assert_int_equal(q.u.ids.timeout_ms, -1);
    assert_int_equal(q.u.ids.n, 3);
    assert_memory_equal(q.u.ids.ids, ids, sizeof(ids));
    pbuf_free(&b);
}

/* A FETCH_AT of n ids with the table locs (m entries) and index (n entries). */
static void fetch_at(struct pbuf *b, uint32_t n, const char *const *locs, uint16_t m,
                     const uint16_t *index)
{
    ferry_id id = make_id(7);
    size_t start = proto_frame_begin(b, PROTO_FETCH_AT, 9);

    pbuf_u64(b, 100);
    pbuf_u32(b, n);
    for (uint32_t i = 0; i < n; i++)
        pbuf_put(b, &id, sizeof(id));
    pbuf_u16(b, m);
    for (uint16_t k = 0; k < m; k++) {
        size_t len = strlen(locs[k]);
        pbuf_u16(b, (uint16_t)len);
        pbuf_put(b, locs[k], len);
    }
    for (uint32_t i = 0; i < n; i++)
        pbuf_u16(b, index[i]);
    proto_frame_end(b, start);
}

/* FETCH_AT's table of locations comes through as it went, each id naming its entry (0: none);
 * a location too long, holding a NUL, an index past the table, a table over the limit, or a
 * request cut short are broken requests. */
static void test_fetch_at_round_trip_and_malformed(void **state)
{
    static char longest[FERRY_LOCATION_MAX], too_long[FERRY_LOCATION_MAX + 1];
    const char *locs[2] = {"ferry1;a;1;h;tcp=x", longest};
    const uint16_t index[4] = {1, 0, 2, 1}, past[4] = {1, 0, 3, 1};
    struct pbuf b = {0};
    struct proto_request q;
    char out[FERRY_LOCATION_MAX];

    memset(longest, 'l', PROTO_MAX_LOCATION);
    memset(too_long, 'l', PROTO_MAX_LOCATION + 1);
    fetch_at(&b, 4, locs, 2, index);
    assert_int_equal(decode(&b, &q), 0);
    assert_int_equal(q.u.ids.n, 4);
    assert_int_equal(q.u.ids.nlocs, 2);
    struct preader r = {q.u.ids.locs, q.u.ids.locs_len, 0};
    for (int k = 0; k < 2; k++) {
        proto_get_loc(&r, out);
        assert_string_equal(out, locs[k]);
    }
    assert_int_equal(r.left, 0);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(proto_loc_index(&q, i), index[i]);

    b.len = 0;
    fetch_at(&b, 4, locs, 2, past);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    b.len = 0;
    fetch_at(&b, 1, (const char *[]){too_long}, 1, index);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    for (int kind = 0; kind < 2; kind++) { /* a NUL within; a table over the limit */
        b.len = 0;
        size_t start = proto_frame_begin(&b, PROTO_FETCH_AT, 9);
        pbuf_u64(&b, 100);
        pbuf_u32(&b, 1);
        pbuf_put(&b, &(ferry_id){{0}}, sizeof(ferry_id));
        pbuf_u16(&b, kind ? PROTO_MAX_LOCS + 1 : 1);
        pbuf_u16(&b, 3);
        pbuf_put(&b, "a\0b", 3);
        pbuf_u16(&b, 1);
        proto_frame_end(&b, start);
        assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    }
    b.len = 0; /* the last index cut short */
    fetch_at(&b, 4, locs, 2, index);
    struct proto_header h;
    assert_int_equal(proto_decode_header(b.data, PROTO_MAX_REQUEST, &h), 0);
    h.length -= 1;
    assert_int_equal(proto_decode_request(&h, b.data + PROTO_HEADER_SIZE, &q), FERRY_EPROTO);
    pbuf_free(&b);
}

static void test_batch_entries(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    struct proto_batch_entry e;
    ferry_id id = make_id(9);
    size_t start = proto_frame_begin(&b, PROTO_PUT_BATCH, 1);

    pbuf_u32(&b, 2);
    for (uint64_t i = 0; i < 2; i++) {
        pbuf_id(&b, &id);
        pbuf_u64(&b, 100 * i);
        pbuf_u64(&b, 10 + i);
        pbuf_u64(&b, 3);
    }
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), 0);
    assert_int_equal(q.u.batch.n, 2);
    proto_batch_entry(&q, 1, &e);
    assert_memory_equal(e.id.bytes, id.bytes, FERRY_ID_SIZE);
    assert_int_equal(e.offset, 100);
    assert_int_equal(e.data_size, 11);
    assert_int_equal(e.metadata_size, 3);
    pbuf_free(&b);
}

/* A count that promises more ids than the payload holds is truncation, not an overread. */
static void test_count_beyond_payload_rejected(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    ferry_id id = make_id(0);
    size_t start = proto_frame_begin(&b, PROTO_REFRESH, 1);

    pbuf_u32(&b, 2);
    pbuf_id(&b, &id);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "truncated"));
    pbuf_free(&b);
}

static void test_limits_rejected(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    struct proto_header h;
    size_t start = proto_frame_begin(&b, PROTO_GET, 1);

    pbuf_u64(&b, 0);
    pbuf_u32(&b, PROTO_MAX_IDS + 1);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "limit"));

    /* An oversized length is refused from the header alone. */
    uint32_t huge = PROTO_MAX_REQUEST + 1;
    memcpy(b.data, &huge, 4);
    assert_int_equal(proto_decode_header(b.data, PROTO_MAX_REQUEST, &h), FERRY_EPROTO);
    /* So are non-zero flags. */
    memset(b.data, 0, 4);
    b.data[6] = 1;
    assert_int_equal(proto_decode_header(b.data, PROTO_MAX_REQUEST, &h), FERRY_EPROTO);
    pbuf_free(&b);
}

static void test_trailing_bytes_and_unknown_type_rejected(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    size_t start = proto_frame_begin(&b, PROTO_STATS, 1);

    pbuf_u8(&b, 0);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "trailing"));

    b.len = 0;
    start = proto_frame_begin(&b, 999, 1);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "unknown"));
    pbuf_free(&b);
}

static void test_bad_values_rejected(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    ferry_id id = make_id(0);
    size_t start = proto_frame_begin(&b, PROTO_SEAL, 1);

    pbuf_id(&b, &id);
    pbuf_u8(&b, 2); /* release is a boolean */
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_KEEP, 1);
    pbuf_id(&b, &id);
    pbuf_u8(&b, 2); /* keep is a boolean */
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "keep"));

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_KEEP, 1);
    pbuf_id(&b, &id); /* no flag: truncated */
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_KEEP, 1);
    pbuf_id(&b, &id);
    pbuf_u8(&b, 1);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), 0);
    assert_int_equal(q.u.keep.keep, 1);
    assert_memory_equal(q.u.keep.id.bytes, id.bytes, FERRY_ID_SIZE);

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_DELETE_UNUSED, 1);
    pbuf_u32(&b, 7); /* short of an id */
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_DELETE_UNUSED, 1);
    pbuf_id(&b, &id);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), 0);
    assert_memory_equal(q.u.one.id.bytes, id.bytes, FERRY_ID_SIZE);

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_GET, 1);
    pbuf_u64(&b, (uint64_t)(int64_t)-5);
    pbuf_u32(&b, 0);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    pbuf_free(&b);
}

static void test_notification_round_trip(void **state)
{
    ferry_notification in = {FERRY_EVENT_EVICTED, make_id(5), 1ull << 40, 7}, out;
    uint8_t rec[PROTO_NOTIFY_SIZE];

    proto_encode_notification(rec, &in);
    assert_int_equal(proto_decode_notification(rec, sizeof(rec), &out), 0);
    assert_int_equal(out.event, in.event);
    assert_int_equal(out.data_size, in.data_size);
    assert_int_equal(out.metadata_size, in.metadata_size);
    assert_memory_equal(out.id.bytes, in.id.bytes, FERRY_ID_SIZE);
    assert_int_equal(proto_decode_notification(rec, sizeof(rec) - 1, &out), FERRY_EPROTO);
    rec[0] = 9;
    assert_int_equal(proto_decode_notification(rec, sizeof(rec), &out), FERRY_EPROTO);
}

static void test_reader_never_overreads(void **state)
{
    uint8_t buf[3] = {1, 2, 3};
    struct preader r = {buf, sizeof(buf), 0};

    assert_int_equal(prd_u16(&r), 0x0201);
    assert_int_equal(prd_u32(&r), 0); /* only one byte left */
    assert_true(r.bad);
    assert_null(prd_bytes(&r, 1)); /* once bad, stays bad */
}

/* PEERS carries the most peers the client wants, EAGER_MAX the limit (all ones: auto). */
static void test_peers_and_eager_max_round_trip(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    size_t start = proto_frame_begin(&b, PROTO_PEERS, 7);

    pbuf_u32(&b, PROTO_MAX_PEERS);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), 0);
    assert_int_equal(q.type, PROTO_PEERS);
    assert_int_equal(q.tag, 7);
    assert_int_equal(q.u.peers.max, PROTO_MAX_PEERS);

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_EAGER_MAX, 8);
    pbuf_u64(&b, FERRY_EAGER_AUTO);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), 0);
    assert_int_equal(q.type, PROTO_EAGER_MAX);
    assert_true(q.u.eager.bytes == UINT64_MAX);
    pbuf_free(&b);
}

/* Frames of PEERS and EAGER_MAX whose payload is over the limit, short or too long. */
static void test_peers_and_eager_max_malformed_rejected(void **state)
{
    struct pbuf b = {0};
    struct proto_request q;
    size_t start = proto_frame_begin(&b, PROTO_PEERS, 1);

    pbuf_u32(&b, PROTO_MAX_PEERS + 1);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "limit"));

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_PEERS, 1);
    pbuf_u16(&b, 1);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "truncated"));

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_EAGER_MAX, 1);
    pbuf_u32(&b, 1);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "truncated"));

    b.len = 0;
    start = proto_frame_begin(&b, PROTO_EAGER_MAX, 1);
    pbuf_u64(&b, 1 << 20);
    pbuf_u8(&b, 0);
    proto_frame_end(&b, start);
    assert_int_equal(decode(&b, &q), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "trailing"));
    pbuf_free(&b);
}

/* A peer record crosses intact; strings that fill their field exactly still fit. */
static void test_peer_entry_round_trip(void **state)
{
    ferry_peer in = {.node = "node-a", .transport = "fabric", .provider = "tcp;ofi_rxm"}, out;
    struct pbuf b = {0};
    struct preader r;

    memset(in.why, 'w', sizeof(in.why) - 1);
    in.why[sizeof(in.why) - 1] = '\0';
    proto_put_peer(&b, &in);
    proto_put_str(&b, "shm", 31);
    r = (struct preader){b.data, b.len, 0};
    memset(&out, 0x55, sizeof(out));
    assert_int_equal(proto_get_peer(&r, &out), 0);
    assert_string_equal(out.node, in.node);
    assert_string_equal(out.transport, in.transport);
    assert_string_equal(out.provider, in.provider);
    assert_string_equal(out.why, in.why);
    char provider[32];
    proto_get_str(&r, provider, sizeof(provider));
    assert_false(r.bad);
    assert_string_equal(provider, "shm");
    assert_int_equal(r.left, 0);
    pbuf_free(&b);
}

/* A string longer than its field, or a record cut short, is refused; nothing is overread and
 * every field stays a terminated string. */
static void test_peer_entry_malformed_rejected(void **state)
{
    static const char too_long[] = "transport-name!!"; /* no room for its NUL in transport[16] */
    ferry_peer in = {.node = "n", .transport = "tcp", .provider = "tcp", .why = "w"}, out;
    struct pbuf b = {0};
    struct preader r;

    proto_put_str(&b, "n", 63);
    proto_put_str(&b, too_long, sizeof(too_long) - 1);
    proto_put_str(&b, "tcp", 31);
    proto_put_str(&b, "w", 111);
    r = (struct preader){b.data, b.len, 0};
    assert_int_equal(proto_get_peer(&r, &out), FERRY_EPROTO);
    assert_non_null(strstr(ferry_errmsg(), "peer"));
    assert_int_equal(out.transport[0], '\0');

    b.len = 0;
    proto_put_peer(&b, &in);
    for (size_t cut = 0; cut < b.len; cut++) {
        r = (struct preader){b.data, cut, 0};
        assert_int_equal(proto_get_peer(&r, &out), FERRY_EPROTO);
        assert_true(strnlen(out.why, sizeof(out.why)) < sizeof(out.why));
    }
    /* The encoder never writes more than a field holds, even from an unterminated one. */
    memset(in.node, 'x', sizeof(in.node));
    b.len = 0;
    proto_put_peer(&b, &in);
    assert_int_equal(b.data[0], sizeof(in.node) - 1);
    pbuf_free(&b);
}

/* STATS entries: a name, a kind and a value round-trip; an empty or too long name, an unknown
 * kind or a cut record are refused. */
static void test_stat_entries(void **state)
{
    char long_name[FERRY_STAT_NAME_MAX + 2];
    struct pbuf b = {0};
    struct preader r;
    ferry_stat out;

    proto_put_stat(&b, "fabric_rdv_bytes", FERRY_STAT_COUNTER, 123456789012ull);
    r = (struct preader){b.data, b.len, 0};
    assert_int_equal(proto_get_stat(&r, &out), 0);
    assert_string_equal(out.name, "fabric_rdv_bytes");
    assert_int_equal(out.kind, FERRY_STAT_COUNTER);
    assert_true(out.value == 123456789012ull);
    assert_int_equal(r.left, 0);
    for (size_t cut = 0; cut < b.len; cut++) {
        r = (struct preader){b.data, cut, 0};
        assert_int_equal(proto_get_stat(&r, &out), FERRY_EPROTO);
    }
    b.len = 0;
    proto_put_stat(&b, "x", 3, 1); /* no such kind */
    r = (struct preader){b.data, b.len, 0};
    assert_int_equal(proto_get_stat(&r, &out), FERRY_EPROTO);
    b.len = 0;
    proto_put_stat(&b, "", FERRY_STAT_GAUGE, 1);
    r = (struct preader){b.data, b.len, 0};
    assert_int_equal(proto_get_stat(&r, &out), FERRY_EPROTO);
    /* A name longer than FERRY_STAT_NAME_MAX, sent by hand (the encoder cuts it): refused. */
    memset(long_name, 'n', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    b.len = 0;
    proto_put_str(&b, long_name, sizeof(long_name));
    pbuf_u8(&b, FERRY_STAT_GAUGE);
    pbuf_u64(&b, 1);
    r = (struct preader){b.data, b.len, 0};
    assert_int_equal(proto_get_stat(&r, &out), FERRY_EPROTO);
    pbuf_free(&b);
}

/* The table of the daemon's counters names every field of struct ferry_stats, in order. */
static void test_stats_table_covers_the_struct(void **state)
{
    size_t n;
    const ferry_stat_field *f = ferry_stat_fields(&n);

    assert_int_equal(n * sizeof(uint64_t), sizeof(ferry_stats));
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(f[i].offset, i * sizeof(uint64_t));
        assert_true(f[i].kind == FERRY_STAT_COUNTER || f[i].kind == FERRY_STAT_GAUGE);
        assert_true(strlen(f[i].name) > 0 && strlen(f[i].name) <= FERRY_STAT_NAME_MAX);
        assert_true(strlen(f[i].help) > 0);
    }
    assert_string_equal(f[0].name, "capacity_bytes");
    assert_int_equal(f[offsetof(ferry_stats, gets) / sizeof(uint64_t)].kind, FERRY_STAT_COUNTER);
    for (size_t i = 0; i < n; i++) /* each field is found by its own name */
        assert_ptr_equal(ferry_stat_field_find(f[i].name), &f[i]);
    assert_null(ferry_stat_field_find("fabric_eager_msgs")); /* a transport's */
    assert_null(ferry_stat_field_find(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_round_trip),
        cmocka_unit_test(test_fetch_at_round_trip_and_malformed),
        cmocka_unit_test(test_name_round_trip_and_check),
        cmocka_unit_test(test_batch_entries),
        cmocka_unit_test(test_count_beyond_payload_rejected),
        cmocka_unit_test(test_limits_rejected),
        cmocka_unit_test(test_trailing_bytes_and_unknown_type_rejected),
        cmocka_unit_test(test_bad_values_rejected),
        cmocka_unit_test(test_notification_round_trip),
        cmocka_unit_test(test_reader_never_overreads),
        cmocka_unit_test(test_peers_and_eager_max_round_trip),
        cmocka_unit_test(test_peers_and_eager_max_malformed_rejected),
        cmocka_unit_test(test_peer_entry_round_trip),
        cmocka_unit_test(test_peer_entry_malformed_rejected),
        cmocka_unit_test(test_stat_entries),
        cmocka_unit_test(test_stats_table_covers_the_struct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
