/*
 * it_put_nowait.c - puts without a message (ferry_put_nowait, common/putring.h) against a real
 * ferryd: the handle's own calls see its puts in order; others' requests sent after a put find
 * it, and a sleeping daemon is kicked to take it; failures come back at the flush; a
 * ring that wraps keeps every byte; a client that exits at once leaves its puts stored; a
 * client that writes a bad ring is dropped while the daemon serves the others.
 */
#include "harness.h"

#include "client/client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int setup(void **state)
{
    return h_setup(state, "64M", NULL);
}

/* A put_nowait of h_put_direct's pattern. */
static int put_nowait(ferry_client *c, const ferry_id *id, uint64_t data_size, uint64_t meta_size)
{
    uint8_t *data = h_pattern(data_size, h_seed(id)), *meta = h_pattern(meta_size, ~h_seed(id));
    int rc = ferry_put_nowait(c, id, data, data_size, meta, meta_size);

    free(data);
    free(meta);
    return rc;
}

/* Lets the daemon fall asleep (it lingers 1 ms after taking entries), then takes back its request
 * to be kicked, as if it had not asked yet: the next puts of c send nothing at all, and only a
 * request (or the client's close) makes the daemon take them. */
static void daemon_asleep_unkicked(ferry_client *c)
{
    struct ferry_client *in = (struct ferry_client *)c;
    struct putring_hdr *hdr = (struct putring_hdr *)in->ring.base;

    assert_int_equal(in->ring_state, 1);
    h_sleep_ms(50);
    atomic_store(&hdr->sleeping, 0);
}

/* The handle's own get finds the put at once: a call that reaches the daemon waits for the
 * handle's earlier puts. */
H_TEST(its_own_get_sees_the_put_at_once)
{
    ferry_client *c = h_connect(d);
    ferry_id id = h_id("nowait-own");
    uint64_t before = h_stat(c, "puts_nowait");

    H_OK(put_nowait(c, &id, 4096, 16));
    h_assert_object(c, &id, 4096, 16);
    assert_int_equal(h_stat(c, "puts_nowait"), before + 1);
    ferry_disconnect(c);
}

/* A delete after the put, on the same handle, deletes it: the ring is taken before the delete. */
H_TEST(a_delete_after_the_put_finds_it)
{
    ferry_client *c = h_connect(d);
    ferry_id id = h_id("nowait-then-delete");

    H_OK(put_nowait(c, &id, 100, 0));
    H_OK(ferry_delete(c, &id));
    assert_int_equal(h_contains(c, &id), 0);
    H_OK(ferry_flush(c));
    ferry_disconnect(c);
}

/* Another client sees the puts once the putter's flush returned. */
H_TEST(another_client_sees_the_puts_after_the_flush)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);

    for (int i = 0; i < 200; i++) {
        ferry_id id = h_idf("nowait-flushed-%d", i);
        H_OK(put_nowait(a, &id, (uint64_t)(i * 97 % 5000), (uint64_t)(i % 3)));
    }
    H_OK(ferry_flush(a));
    for (int i = 0; i < 200; i++) {
        ferry_id id = h_idf("nowait-flushed-%d", i);
        h_assert_object(b, &id, (uint64_t)(i * 97 % 5000), (uint64_t)(i % 3));
    }
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Another client's get, sent after the put returned, finds it without any flush: the daemon
 * takes the other rings before it answers a request for an id it does not have. The daemon
 * sleeps and the put sends no kick, so nothing else could have taken it. */
H_TEST(another_clients_get_finds_the_put_without_a_flush)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id warm = h_id("nowait-seen-warm");

    H_OK(put_nowait(a, &warm, 10, 0)); /* sets the ring up */
    H_OK(ferry_flush(a));
    for (int i = 0; i < 5; i++) {
        ferry_id id = h_idf("nowait-seen-%d", i);
        uint64_t kicks = h_stat(b, "put_kicks"), stored = h_stat(b, "puts_nowait");
        ferry_buffer buf;
        daemon_asleep_unkicked(a);
        H_OK(put_nowait(a, &id, 2000, 0));
        assert_int_equal(h_stat(b, "puts_nowait"), stored); /* a request without ids: not taken */
        H_OK(ferry_get(b, &id, 1, 0, &buf));
        h_assert_buffer(&buf, &id, 2000, 0);
        H_OK(ferry_release(b, &id));
        assert_int_equal(h_stat(b, "put_kicks"), kicks);
    }
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A put into an idle daemon kicks it: the put is stored with no other request naming it (the
 * other client only asks for counters). */
H_TEST(an_idle_daemon_is_kicked)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("nowait-kick");
    uint64_t kicks, stored = h_stat(b, "puts_nowait");

    H_OK(put_nowait(a, &id, 64, 0)); /* sets the ring up */
    assert_int_equal(H_WAIT_STAT(b, puts_nowait, stored + 1), stored + 1);
    kicks = h_stat(b, "put_kicks");
    h_sleep_ms(50); /* the daemon's loop lingers 1 ms after taking, then sleeps */
    id = h_id("nowait-kick-2");
    H_OK(put_nowait(a, &id, 64, 0));
    assert_int_equal(H_WAIT_STAT(b, puts_nowait, stored + 2), stored + 2);
    assert_true(h_stat(b, "put_kicks") > kicks);
    assert_int_equal(h_contains(b, &id), 1);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Failures in the daemon come back at the next flush, naming the first's id and the count, and
 * only once. */
H_TEST(failures_come_back_at_the_flush)
{
    ferry_client *c = h_connect(d);
    ferry_id id = h_id("nowait-twice"), other = h_id("nowait-fine");
    char hex[2 * FERRY_ID_SIZE + 1];
    uint64_t failed = h_stat(c, "puts_nowait_failed");

    H_OK(h_put_direct(c, &id, 32, 0));
    H_OK(put_nowait(c, &id, 32, 0)); /* exists: known only to the daemon */
    H_OK(put_nowait(c, &id, 32, 0));
    H_OK(put_nowait(c, &other, 32, 0));
    H_RC(ferry_flush(c), FERRY_EEXIST);
    ferry_id_format(&id, hex);
    assert_non_null(strstr(ferry_errmsg(), hex));
    assert_non_null(strstr(ferry_errmsg(), "2 puts"));
    assert_int_equal(h_stat(c, "puts_nowait_failed"), failed + 2);
    h_assert_object(c, &other, 32, 0);
    H_OK(ferry_flush(c));
    ferry_disconnect(c);
}

/* Thousands of puts of every size up to FERRY_SMALL_PUT_MAX wrap the ring many times (a full
 * ring waits for the daemon); every byte arrives. */
H_TEST(a_ring_that_wraps_keeps_every_byte)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    enum { N = 3000 };
    uint64_t sizes[N];

    uint64_t stored = h_stat(b, "puts_nowait");

    for (int i = 0; i < N; i++) {
        ferry_id id = h_idf("nowait-wrap-%d", i);
        /* one in eight up to the largest; 17 MiB in all, within the arena of 64 MiB */
        sizes[i] = (uint64_t)(i * 7919u) % (i % 8 == 0 ? FERRY_SMALL_PUT_MAX - 8 : 4096);
        H_OK(put_nowait(a, &id, sizes[i], 8));
    }
    H_OK(ferry_flush(a));
    assert_int_equal(h_stat(b, "puts_nowait"), stored + N); /* all by the ring, none by a put */
    for (int i = 0; i < N; i++) {
        ferry_id id = h_idf("nowait-wrap-%d", i);
        h_assert_object(b, &id, sizes[i], 8);
        H_OK(ferry_delete(b, &id));
    }
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* An object past FERRY_SMALL_PUT_MAX goes as ferry_put: stored when the call returns. */
H_TEST(a_large_object_is_put_at_once)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id id = h_id("nowait-large");
    uint64_t ringed = h_stat(b, "puts_nowait");

    H_OK(put_nowait(a, &id, 1u << 20, 0));
    assert_int_equal(h_contains(b, &id), 1);
    assert_int_equal(h_stat(b, "puts_nowait"), ringed);  /* not by the ring */
    H_RC(put_nowait(a, &id, 1u << 20, 0), FERRY_EEXIST); /* known at once too */
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A process that puts and exits at once (no flush, no disconnect) leaves its puts stored: its
 * puts send nothing (the daemon sleeps, unkicked), so its close is what takes them. */
H_TEST(puts_of_a_process_that_exits_at_once_are_stored)
{
    ferry_client *b = h_connect(d);
    uint64_t stored = h_stat(b, "puts_nowait");
    pid_t pid = fork();
    int status;

    assert_true(pid >= 0);
    if (pid == 0) {
        ferry_client *c = NULL;
        ferry_id warm = h_id("nowait-exit-warm");
        if (ferry_connect(d->sock, &c) != FERRY_OK || put_nowait(c, &warm, 10, 0) != FERRY_OK ||
            ferry_flush(c) != FERRY_OK)
            _exit(2);
        daemon_asleep_unkicked(c);
        for (int i = 0; i < 100; i++) {
            ferry_id id = h_idf("nowait-exit-%d", i);
            if (put_nowait(c, &id, 1000, 0) != FERRY_OK)
                _exit(3);
        }
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* counters only: a request naming an id would take rings itself */
    assert_int_equal(H_WAIT_STAT(b, puts_nowait, stored + 101), stored + 101);
    for (int i = 0; i < 100; i++) {
        ferry_id id = h_idf("nowait-exit-%d", i);
        h_assert_object(b, &id, 1000, 0);
    }
    ferry_disconnect(b);
}

/* A client that writes a tail past its ring, or an entry outside it, is dropped with a logged
 * reason; the daemon serves the others. The dropped client, which does not know yet, goes on
 * writing its ring: those writes land in memory of its own, never in another client's objects
 * (a ring in the arena would have been given to b's puts). */
static void bad_ring(struct ferryd *d, int which)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    struct ferry_client *in = (struct ferry_client *)a;
    struct putring_hdr *hdr;
    struct putring_entry *e;
    ferry_id id = h_idf("nowait-bad-%d", which);
    uint64_t errors = h_stat(b, "protocol_errors");

    H_OK(put_nowait(a, &id, 10, 0));
    H_OK(ferry_flush(a));
    hdr = (struct putring_hdr *)in->ring.base;
    e = (struct putring_entry *)(in->ring.base + in->ring.entries_off +
                                 (in->ring_tail % in->ring.nentries) * PUTRING_ENTRY_SIZE);
    if (which == 0) {
        atomic_store(&hdr->tail, in->ring_tail + in->ring.nentries + 1);
    } else {
        e->pos = in->ring.data_size - 10;
        e->data_size = 100;
        e->metadata_size = 0;
        atomic_store(&hdr->tail, in->ring_tail + 1);
    }
    assert_int_equal(H_WAIT_STAT(b, protocol_errors, errors + 1), errors + 1);
    for (int i = 0; i < 100; i++) {
        ferry_id mine = h_idf("nowait-bystander-%d-%d", which, i);
        H_OK(h_put_direct(b, &mine, 8192, 0));
    }
    uint8_t *junk = malloc(8192);
    memset(junk, 0xff, 8192);
    for (int i = 0; i < 300; i++) { /* until the full ring's flush finds the connection gone */
        ferry_id other = h_idf("nowait-zombie-%d", i);
        if (ferry_put_nowait(a, &other, junk, 8192, NULL, 0) == FERRY_ECONN)
            break;
    }
    free(junk);
    H_RC(ferry_flush(a), FERRY_ECONN);
    h_assert_object(b, &id, 10, 0);
    for (int i = 0; i < 100; i++) {
        ferry_id mine = h_idf("nowait-bystander-%d-%d", which, i);
        h_assert_object(b, &mine, 8192, 0);
    }
    ferry_disconnect(a);
    ferry_disconnect(b);
}

H_TEST(a_tail_past_the_ring_drops_only_its_client)
{
    bad_ring(d, 0);
}

H_TEST(an_entry_outside_the_ring_drops_only_its_client)
{
    bad_ring(d, 1);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(its_own_get_sees_the_put_at_once),
        T(a_delete_after_the_put_finds_it),
        T(another_client_sees_the_puts_after_the_flush),
        T(another_clients_get_finds_the_put_without_a_flush),
        T(an_idle_daemon_is_kicked),
        T(failures_come_back_at_the_flush),
        T(a_ring_that_wraps_keeps_every_byte),
        T(a_large_object_is_put_at_once),
        T(puts_of_a_process_that_exits_at_once_are_stored),
        T(a_tail_past_the_ring_drops_only_its_client),
        T(an_entry_outside_the_ring_drops_only_its_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
