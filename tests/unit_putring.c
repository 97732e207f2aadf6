/* Unit tests of a client's ring of puts (common/putring.c): the geometry a block gets; puts and
 * takes in order through many turns of the data area, with every byte where the entry says; a
 * full ring refuses (entries or bytes) until the daemon gives back; a tail or an entry a client
 * forged is refused; the sleeping flag asks for a kick exactly when the daemon may sleep. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/putring.h"

#define BLOCK (256u << 10)

struct fixture {
    uint8_t *block;
    struct putring client, daemon; /* both sides' geometry, computed apart */
    uint64_t tail, data_tail;      /* the client's */
    uint64_t head, data_head;      /* the daemon's */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    f->block = aligned_alloc(64, BLOCK);
    memset(f->block, 0xa5, BLOCK);
    assert_int_equal(putring_layout(&f->daemon, f->block, BLOCK), 0);
    putring_reset(&f->daemon);
    assert_int_equal(putring_layout(&f->client, f->block, BLOCK), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    free(f->block);
    free(f);
    return 0;
}

static ferry_id id_of(uint64_t n)
{
    ferry_id id = {{0}};

    memcpy(id.bytes, &n, sizeof(n));
    return id;
}

static uint8_t byte_of(uint64_t n, uint64_t i)
{
    return (uint8_t)(n * 31 + i * 7);
}

static int push(struct fixture *f, uint64_t n, uint64_t size, uint64_t meta)
{
    uint8_t *d = malloc(size + 1), *m = malloc(meta + 1);
    ferry_id id = id_of(n);
    int rc;

    for (uint64_t i = 0; i < size; i++)
        d[i] = byte_of(n, i);
    for (uint64_t i = 0; i < meta; i++)
        m[i] = (uint8_t)~byte_of(n, i);
    rc = putring_push(&f->client, &f->tail, &f->data_tail, &id, d, size, m, meta);
    free(d);
    free(m);
    return rc;
}

/* Takes one entry as the daemon does and checks it is object n's. */
static void take(struct fixture *f, uint64_t n, uint64_t size, uint64_t meta)
{
    struct putring_item it;
    ferry_id id = id_of(n);

    assert_true(putring_pending(&f->daemon, f->head) > 0);
    assert_int_equal(putring_take(&f->daemon, f->head, f->data_head, f->data_head, &it), 0);
    assert_memory_equal(&it.id, &id, sizeof(id));
    assert_int_equal(it.data_size, size);
    assert_int_equal(it.metadata_size, meta);
    assert_true(it.offset >= f->daemon.data_off);
    assert_true(it.offset + size + meta <= f->daemon.data_off + f->daemon.data_size);
    for (uint64_t i = 0; i < size; i++)
        assert_int_equal(f->block[it.offset + i], byte_of(n, i));
    for (uint64_t i = 0; i < meta; i++)
        assert_int_equal(f->block[it.offset + size + i], (uint8_t)~byte_of(n, i));
    f->head++;
    f->data_head = it.end;
    putring_release(&f->daemon, f->head, f->data_head);
}

static void test_layout(void **state)
{
    struct putring r;
    (void)state;

    assert_int_equal(putring_layout(&r, NULL, PUTRING_MIN_SIZE - 1), FERRY_EINVAL);
    for (uint64_t size = PUTRING_MIN_SIZE; size <= (8u << 20); size = size * 3 / 2 / 64 * 64) {
        assert_int_equal(putring_layout(&r, NULL, size), 0);
        assert_true(r.nentries >= PUTRING_MIN_ENTRIES && r.nentries <= PUTRING_MAX_ENTRIES);
        assert_int_equal(r.nentries & (r.nentries - 1), 0);
        assert_true(r.data_size >= 2 * FERRY_SMALL_PUT_MAX); /* one always fits an empty ring */
        assert_int_equal(r.data_off + r.data_size, size);
    }
}

/* Sizes of every kind, many turns of the data area, taken in batches as the daemon does. */
static void test_puts_are_taken_in_order_through_many_turns(void **state)
{
    struct fixture *f = *state;
    uint64_t next_take = 0, n = 0;

    while (n < 5000) {
        uint64_t size = (n * 7919) % (n % 5 ? 3000 : FERRY_SMALL_PUT_MAX - 100);
        int rc = push(f, n, size, n % 7);
        if (rc == FERRY_EAGAIN) { /* full: the daemon takes a few */
            for (int k = 0; k < 3 && next_take < n; k++, next_take++) {
                uint64_t s =
                    (next_take * 7919) % (next_take % 5 ? 3000 : FERRY_SMALL_PUT_MAX - 100);
                take(f, next_take, s, next_take % 7);
            }
            continue;
        }
        assert_true(rc == 0 || rc == 1);
        n++;
    }
    for (; next_take < n; next_take++)
        take(f, next_take, (next_take * 7919) % (next_take % 5 ? 3000 : FERRY_SMALL_PUT_MAX - 100),
             next_take % 7);
    assert_int_equal(putring_pending(&f->daemon, f->head), 0);
    assert_true(putring_drained(&f->client, f->tail));
    assert_true(f->data_tail > 10 * f->daemon.data_size); /* it turned many times */
}

static void test_full_ring_refuses_until_given_back(void **state)
{
    struct fixture *f = *state;
    uint32_t k = 0;

    while (push(f, k, 1, 0) != FERRY_EAGAIN) /* entries run out first */
        k++;
    assert_int_equal(k, f->client.nentries);
    take(f, 0, 1, 0);
    assert_true(push(f, k, 1, 0) >= 0);
    assert_int_equal(push(f, 0, FERRY_SMALL_PUT_MAX + 1, 0), FERRY_ETOOBIG);
    assert_int_equal(push(f, 0, FERRY_SMALL_PUT_MAX, 1), FERRY_ETOOBIG);
}

static void test_bytes_run_out_too(void **state)
{
    struct fixture *f = *state;
    uint32_t k = 0;

    while (push(f, k, FERRY_SMALL_PUT_MAX, 0) != FERRY_EAGAIN)
        k++;
    assert_true(k < f->client.nentries);
    assert_int_equal(k, f->client.data_size / FERRY_SMALL_PUT_MAX);
    take(f, 0, FERRY_SMALL_PUT_MAX, 0);
    assert_true(push(f, k, FERRY_SMALL_PUT_MAX, 0) >= 0);
}

static void test_forged_tail_and_entries_are_refused(void **state)
{
    struct fixture *f = *state;
    struct putring_hdr *h = (struct putring_hdr *)f->block;
    struct putring_entry *e = (struct putring_entry *)(f->block + f->daemon.entries_off);
    struct putring_item it;

    atomic_store(&h->tail, f->daemon.nentries + 1);
    assert_int_equal(putring_pending(&f->daemon, 0), FERRY_EPROTO);
    atomic_store(&h->tail, UINT64_MAX); /* behind head */
    assert_int_equal(putring_pending(&f->daemon, 0), FERRY_EPROTO);
    atomic_store(&h->tail, f->daemon.nentries);
    assert_int_equal(putring_pending(&f->daemon, 0), f->daemon.nentries);
    e->pos = f->daemon.data_size - 1; /* would cross the area's end */
    e->data_size = 2;
    e->metadata_size = 0;
    assert_int_equal(putring_take(&f->daemon, 0, 0, 0, &it), FERRY_EPROTO);
    e->pos = 0;
    e->data_size = FERRY_SMALL_PUT_MAX;
    e->metadata_size = 1;
    assert_int_equal(putring_take(&f->daemon, 0, 0, 0, &it), FERRY_EPROTO);
    e->data_size = UINT32_MAX;
    e->metadata_size = UINT32_MAX;
    assert_int_equal(putring_take(&f->daemon, 0, 0, 0, &it), FERRY_EPROTO);
    e->data_size = 100;
    e->metadata_size = 0;
    assert_int_equal(putring_take(&f->daemon, 0, 0, 0, &it), 0);
    assert_int_equal(it.offset, f->daemon.data_off);
    assert_int_equal(it.end, 100);
    /* the next entry naming the same bytes again (a copy for nothing) */
    e[1].pos = 0;
    e[1].data_size = 100;
    e[1].metadata_size = 0;
    assert_int_equal(putring_take(&f->daemon, 1, it.end, 0, &it), FERRY_EPROTO);
    e[1].pos = 100;
    assert_int_equal(putring_take(&f->daemon, 1, 100, 0, &it), 0);
    /* one that would cross the end starts the next turn of the area, and nowhere else */
    e[2].data_size = 64;
    e[2].metadata_size = 0;
    e[2].pos = f->daemon.data_size - 10;
    assert_int_equal(
        putring_take(&f->daemon, 2, f->daemon.data_size - 10, f->daemon.data_size - 10, &it),
        FERRY_EPROTO);
    e[2].pos = f->daemon.data_size;
    assert_int_equal(
        putring_take(&f->daemon, 2, f->daemon.data_size - 10, f->daemon.data_size - 10, &it), 0);
    assert_int_equal(it.offset, f->daemon.data_off);
    /* bytes past one data area from what was given back: the client cannot have written them */
    assert_int_equal(putring_take(&f->daemon, 2, f->daemon.data_size - 10, 0, &it), FERRY_EPROTO);
}

/* The flag's logic, on one thread (the fences are the pattern fastidx uses, which
 * unit_fastidx_tsan checks under threads). */
static void test_a_put_kicks_only_a_sleeping_daemon(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(push(f, 0, 10, 0), 0);
    putring_want_kick(&f->daemon);
    putring_fence();
    assert_int_equal(putring_waiting(&f->daemon, f->head), 1); /* entries wait: do not sleep */
    take(f, 0, 10, 0);
    assert_int_equal(putring_waiting(&f->daemon, f->head), 0);
    assert_int_equal(push(f, 1, 10, 0), 1); /* asleep: kick */
    putring_awake(&f->daemon);
    assert_int_equal(push(f, 2, 10, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test_setup_teardown(test_puts_are_taken_in_order_through_many_turns, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_full_ring_refuses_until_given_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_run_out_too, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_tail_and_entries_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_put_kicks_only_a_sleeping_daemon, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
