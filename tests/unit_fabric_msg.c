/*
 * unit_fabric_msg.c - the fabric message codec: headers, rendezvous descriptors, done and
 * hellos round-trip; short, oversized and inconsistent messages are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ferry.h"
#include "transport/fabric/fabric_msg.h"

static void test_header_round_trip_and_refusals(void **state)
{
    struct fmsg_hdr in = {.kind = K_RDV, .credits = {3, 65535}, .conn = 0x10002, .seq = 9}, out;
    uint8_t p[FMSG_HDR];

    fmsg_hdr_put(p, &in);
    assert_int_equal(fmsg_hdr_get(p, sizeof(p), &out), 0);
    assert_int_equal(out.kind, K_RDV);
    assert_int_equal(out.credits[0], 3);
    assert_int_equal(out.credits[1], 65535);
    assert_int_equal(out.conn, 0x10002);
    assert_int_equal(out.seq, 9);
    assert_int_equal(fmsg_hdr_get(p, FMSG_HDR - 1, &out), FERRY_EPROTO);
    p[0] = 0;
    assert_int_equal(fmsg_hdr_get(p, sizeof(p), &out), FERRY_EPROTO);
    p[0] = K_CLOSE + 1;
    assert_int_equal(fmsg_hdr_get(p, sizeof(p), &out), FERRY_EPROTO);
    fmsg_hdr_put(p, &in);
    p[7] = 1; /* reserved bytes are zero */
    assert_int_equal(fmsg_hdr_get(p, sizeof(p), &out), FERRY_EPROTO);
}

static void test_rdv_and_done(void **state)
{
    const uint8_t key[8] = {9, 8, 7};
    struct fmsg_rdv in = {.offset = 4096,
                          .len = 1 << 20,
                          .cookie = 77,
                          .lease_ms = 5020,
                          .key = key,
                          .key_len = sizeof(key)},
                    out = {0};
    uint8_t p[FMSG_RDV_FIXED + FMSG_KEY_MAX];
    size_t n = fmsg_rdv_put(p, &in);
    uint64_t cookie;

    assert_int_equal(n, FMSG_RDV_FIXED + sizeof(key));
    assert_int_equal(fmsg_rdv_get(p, n, &out), 0);
    assert_int_equal(out.offset, 4096);
    assert_int_equal(out.len, 1 << 20);
    assert_int_equal(out.cookie, 77);
    assert_int_equal(out.lease_ms, 5020);
    assert_int_equal(out.key_len, sizeof(key));
    assert_memory_equal(out.key, key, sizeof(key));
    assert_int_equal(fmsg_rdv_get(p, n - 1, &out), FERRY_EPROTO); /* the key is cut short */
    in.len = 0; /* nothing to read is never lent */
    assert_int_equal(fmsg_rdv_get(p, fmsg_rdv_put(p, &in), &out), FERRY_EPROTO);
    in.len = 2;
    in.lease_ms = FMSG_LEASE_MIN - 1; /* no time to read */
    assert_int_equal(fmsg_rdv_get(p, fmsg_rdv_put(p, &in), &out), FERRY_EPROTO);
    in.lease_ms = 5000;
    in.offset = UINT64_MAX;
    assert_int_equal(fmsg_rdv_get(p, fmsg_rdv_put(p, &in), &out), FERRY_EPROTO);
    in.offset = 0;
    in.key_len = 0; /* a read needs a key */
    assert_int_equal(fmsg_rdv_get(p, fmsg_rdv_put(p, &in), &out), FERRY_EPROTO);
    fmsg_put64(p, 5);
    assert_int_equal(fmsg_done_get(p, FMSG_DONE, &cookie), 0);
    assert_int_equal(cookie, 5);
    assert_int_equal(fmsg_done_get(p, FMSG_DONE + 1, &cookie), FERRY_EPROTO);
}

/* A hello carries no key: the arena's key is sent only in RDVs, after authentication. */
static void test_hello_round_trip_and_refusals(void **state)
{
    const uint8_t name[] = "fi_shm://1234";
    struct fmsg_hello in = {.id = 3,
                            .window = 8,
                            .name = name,
                            .name_len = sizeof(name),
                            .virt = 1,
                            .base = 1 << 20,
                            .len = 1 << 30},
                      out;
    uint8_t p[FMSG_HELLO_FIXED + FMSG_NAME_MAX + 8];
    size_t n = fmsg_hello_put(p, &in);

    assert_int_equal(n, FMSG_HELLO_FIXED + sizeof(name));
    assert_int_equal(fmsg_hello_get(p, n, &out), 0);
    assert_int_equal(out.id, 3);
    assert_int_equal(out.window, 8);
    assert_memory_equal(out.name, name, sizeof(name));
    assert_int_equal(out.base, 1 << 20);
    assert_int_equal(fmsg_hello_get(p, n - 1, &out), FERRY_EPROTO); /* lengths disagree */
    fmsg_put16(p + 16, 8);                                          /* a key: not any more */
    memset(p + n, 1, 8);
    assert_int_equal(fmsg_hello_get(p, n + 8, &out), FERRY_EPROTO);
    fmsg_put16(p + 16, 0);
    p[18] = 2; /* virt is 0 or 1 */
    assert_int_equal(fmsg_hello_get(p, n, &out), FERRY_EPROTO);
    p[18] = 1;
    fmsg_put16(p + 12, 0); /* no window */
    assert_int_equal(fmsg_hello_get(p, n, &out), FERRY_EPROTO);
    fmsg_put16(p + 12, 8);
    fmsg_put32(p, 0); /* magic */
    assert_int_equal(fmsg_hello_get(p, n, &out), FERRY_EPROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_round_trip_and_refusals),
        cmocka_unit_test(test_rdv_and_done),
        cmocka_unit_test(test_hello_round_trip_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
