/*
 * unit_framer.c - frames assembled from a stream: byte by byte and in one piece, a frame of no
 * payload, payload written in place, and a header over the size limit refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ferry.h"
#include "transport/framer.h"

/* Two frames back to back: type 7 with a 5-byte payload, type 8 with none. */
static size_t two_frames(uint8_t *out)
{
    struct pbuf b = {0};
    size_t start = proto_frame_begin(&b, 7, 1);
    pbuf_put(&b, "hello", 5);
    proto_frame_end(&b, start);
    start = proto_frame_begin(&b, 8, 2);
    proto_frame_end(&b, start);
    memcpy(out, b.data, b.len);
    size_t n = b.len;
    pbuf_free(&b);
    return n;
}

static void test_byte_by_byte_and_whole(void **state)
{
    uint8_t s[64];
    size_t n = two_frames(s);

    for (size_t step = 1; step <= n; step = step == 1 ? n : n + 1) {
        struct framer fr = {0};
        int frames = 0;
        for (size_t i = 0; i < n;) {
            size_t k = framer_wanted(&fr) < step ? framer_wanted(&fr) : step;
            int rc = framer_put(&fr, s + i, k, 1024);
            assert_true(rc >= 0);
            i += k;
            if (rc == 1 && frames++ == 0) {
                assert_int_equal(fr.h.type, 7);
                assert_int_equal(fr.h.length, 5);
                assert_memory_equal(fr.frame.data, "hello", 5);
            } else if (rc == 1) {
                assert_int_equal(fr.h.type, 8); /* no payload: whole with its header */
                assert_int_equal(fr.h.length, 0);
            }
        }
        assert_int_equal(frames, 2);
        framer_free(&fr);
    }
}

static void test_payload_in_place_and_limit(void **state)
{
    uint8_t s[64];
    struct framer fr = {0};

    two_frames(s);
    assert_int_equal(framer_put(&fr, s, PROTO_HEADER_SIZE, 1024), 0);
    assert_int_equal(framer_wanted(&fr), 5);
    memcpy(fr.frame.data, "hel", 3);
    assert_int_equal(framer_grew(&fr, 3), 0);
    memcpy(fr.frame.data + 3, "lo", 2);
    assert_int_equal(framer_grew(&fr, 2), 1);
    assert_memory_equal(fr.frame.data, "hello", 5);
    assert_int_equal(framer_put(&fr, s, PROTO_HEADER_SIZE, 4), FERRY_EPROTO); /* 5 > 4 */
    framer_free(&fr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_by_byte_and_whole),
        cmocka_unit_test(test_payload_in_place_and_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
