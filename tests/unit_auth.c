/* unit_auth - the cluster secret's challenge-response (transfer/auth.c), both sides in one
 * process: proofs that must pass, and every way one must fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transfer/auth.h"

/* Runs the whole exchange between a connector and an acceptor: 0 when both accept. */
static int exchange(const struct auth *conn, const struct auth *acc, int tamper)
{
    uint8_t nc[WIRE_NONCE], na[WIRE_NONCE], mac[WIRE_MAC], mine[WIRE_MAC];
    const char *why = NULL;

    assert_int_equal(auth_nonce(nc), 0);
    assert_int_equal(auth_nonce(na), 0);
    assert_int_equal(auth_acceptor_proof(acc, nc, na, mac), 0);
    if (tamper == 1)
        mac[0] ^= 1;
    if (auth_answer(conn, nc, na, auth_keyed(acc), mac, mine, &why) < 0) {
        assert_non_null(why);
        return -1;
    }
    if (tamper == 2)
        mine[WIRE_MAC - 1] ^= 0x80;
    if (tamper == 3)
        na[0] ^= 1; /* the acceptor checks against other nonces than the proof was made for */
    if (auth_check(acc, nc, na, mine, &why) < 0) {
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
    assert_int_equal(exchange(&a, &b, 0), 0);
    assert_int_equal(exchange(&a, &b, 1), -1);
    assert_int_equal(exchange(&a, &b, 2), -1);
    assert_int_equal(exchange(&a, &b, 3), -1);
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
    assert_int_equal(exchange(&a, &b, 0), -1);
    assert_int_equal(exchange(&a, &none1, 0), -1);
    assert_int_equal(exchange(&none1, &a, 0), -1);
    assert_int_equal(exchange(&none1, &none2, 0), 0); /* an open cluster */
    auth_free(&a);
    auth_free(&b);
    auth_free(&none1);
    auth_free(&none2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_secret_passes_and_tampering_fails),
        cmocka_unit_test(test_other_or_missing_secret_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
