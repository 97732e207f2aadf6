/*
 * it_eviction.c - eviction in a small arena (4 MiB, four 900 KiB objects fill it): LRU order
 * as changed by get/release and refresh, referenced and unsealed objects are never evicted,
 * ENOSPACE when nothing can be evicted, ETOOBIG above the capacity without evicting.
 *
 * Only create/seal/release are used to fill the arena: a staging area (small puts) would
 * take arena space too.
 */
#include "harness.h"

#include <ctype.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#define K900 (900u * 1024u)
#define ARENA (4u * 1024u * 1024u)

static int setup(void **state)
{
    return h_setup(state, "4M", NULL);
}

static ferry_id put900(ferry_client *c, const char *name)
{
    ferry_id id = h_id(name);
    H_OK(h_put_direct(c, &id, K900, 0));
    return id;
}

/* Reads the next notification (bounded) and checks its event and id. */
static void expect_event(int fd, int event, const char *name)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, H_EVENT_MS), 1);
    ferry_notification n;
    H_OK(ferry_notification_read(fd, &n));
    ferry_id id = h_id(name);
    if (n.event != event || memcmp(n.id.bytes, id.bytes, FERRY_ID_SIZE) != 0) {
        char got[2 * FERRY_ID_SIZE + 1];
        ferry_id_format(&n.id, got);
        fail_msg("expected event %d for %s, got event %d for id %s", event, name, n.event, got);
    }
}

static void expect_present(ferry_client *c, const char *const *names, const int *present, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ferry_id id = h_id(names[i]);
        if (h_contains(c, &id) != present[i])
            fail_msg("%s should %sbe in the store", names[i], present[i] ? "" : "not ");
    }
}

/* Creating into a full arena evicts the least recently used object; a get+release and a
 * refresh make an object young again. */
H_TEST(eviction_takes_the_least_recently_used_first)
{
    ferry_client *a = h_connect(d);
    int fd;
    H_OK(ferry_subscribe(a, &fd));
    ferry_id ia = put900(a, "A");
    put900(a, "B");
    ferry_id ic = put900(a, "C");
    put900(a, "D");
    ferry_buffer buf;
    H_OK(ferry_get(a, &ia, 1, 0, &buf)); /* A becomes the youngest: B C D A */
    H_OK(ferry_release(a, &ia));
    put900(a, "E"); /* evicts B: C D A E */
    static const char *const names[] = {"A", "B", "C", "D", "E", "F"};
    expect_present(a, names, (const int[]){1, 0, 1, 1, 1}, 5);
    H_OK(ferry_refresh(a, &ic, 1)); /* D A E C */
    put900(a, "F");                 /* evicts D */
    expect_present(a, names, (const int[]){1, 0, 1, 0, 1, 1}, 6);

    for (const char *s = "ABCD"; *s; s++)
        expect_event(fd, FERRY_EVENT_SEALED, (char[]){*s, 0});
    expect_event(fd, FERRY_EVENT_EVICTED, "B");
    expect_event(fd, FERRY_EVENT_SEALED, "E");
    expect_event(fd, FERRY_EVENT_EVICTED, "D");
    expect_event(fd, FERRY_EVENT_SEALED, "F");
    ferry_stats s = h_stats(a);
    assert_int_equal(s.evicted_objects, 2);
    assert_int_equal(s.evicted_bytes, 2 * K900);
    for (int i = 0; i < 6; i++) {
        ferry_id id = h_id(names[i]);
        if (i != 1 && i != 3)
            h_assert_object(a, &id, K900, 0);
    }
    close(fd);
    ferry_disconnect(a);
}

/* A create that needs more than one object's room evicts as many as it takes, oldest
 * first. */
H_TEST(eviction_takes_as_many_objects_as_needed_in_order)
{
    ferry_client *a = h_connect(d);
    int fd;
    H_OK(ferry_subscribe(a, &fd));
    static const char *const names[] = {"P", "Q", "R", "S"};
    for (int i = 0; i < 4; i++)
        put900(a, names[i]);
    ferry_id big = h_id("big");
    H_OK(h_put_direct(a, &big, 3500 * 1024, 0));
    expect_present(a, names, (const int[]){0, 0, 0, 0}, 4);
    for (int i = 0; i < 4; i++)
        expect_event(fd, FERRY_EVENT_SEALED, names[i]);
    for (int i = 0; i < 4; i++)
        expect_event(fd, FERRY_EVENT_EVICTED, names[i]);
    expect_event(fd, FERRY_EVENT_SEALED, "big");
    h_assert_object(a, &big, 3500 * 1024, 0);
    close(fd);
    ferry_disconnect(a);
}

/* Referenced objects (even the oldest) and unsealed ones stay, with their bytes intact,
 * while the evictable ones around them go. */
H_TEST(eviction_spares_referenced_and_unsealed_objects)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id held = put900(a, "held"), open = h_id("open");
    ferry_buffer buf;
    H_OK(ferry_get(b, &held, 1, 0, &buf));
    uint8_t *data;
    H_OK(ferry_create(a, &open, K900, NULL, 0, &data));
    h_fill(data, K900, h_seed(&open));
    put900(a, "C");
    put900(a, "D");
    put900(a, "E"); /* evicts C */
    put900(a, "F"); /* evicts D */
    put900(a, "G"); /* evicts E */
    static const char *const names[] = {"held", "C", "D", "E", "F", "G"};
    expect_present(a, names, (const int[]){1, 0, 0, 0, 1, 1}, 6);
    ferry_object_info info;
    assert_true(h_list_find(a, &open, &info));
    assert_int_equal(info.state, FERRY_STATE_CREATED);
    h_assert_buffer(&buf, &held, K900, 0);
    assert_int_equal(h_check(data, K900, h_seed(&open)), -1);
    H_OK(ferry_seal(a, &open));
    H_OK(ferry_release(a, &open));
    h_assert_object(b, &open, K900, 0);
    H_OK(ferry_release(b, &held));
    assert_int_equal(h_stats(a).evicted_objects, 3);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

static int has_digit(const char *s)
{
    for (; *s; s++)
        if (isdigit((unsigned char)*s))
            return 1;
    return 0;
}

/* With every object referenced or unsealed a create is ENOSPACE, with figures, and harms
 * nothing; once one is released it can be evicted and the create succeeds. */
H_TEST(create_is_enospace_when_nothing_is_evictable)
{
    ferry_client *a = h_connect(d), *b = h_connect(d);
    ferry_id ids[4] = {put900(a, "h1"), put900(a, "h2"), h_id("u1"), h_id("u2")};
    ferry_buffer held[2];
    H_OK(ferry_get(b, ids, 2, 0, held));
    uint8_t *data;
    H_OK(ferry_create(a, &ids[2], K900, NULL, 0, &data));
    H_OK(ferry_create(a, &ids[3], K900, NULL, 0, &data));
    ferry_id x = h_id("x");
    H_RC(ferry_create(a, &x, K900, NULL, 0, &data), FERRY_ENOSPACE);
    const char *msg = ferry_errmsg();
    if (strlen(msg) == 0 || !has_digit(msg))
        fail_msg("ENOSPACE detail should give figures, got \"%s\"", msg);
    uint64_t freed = 1;
    H_OK(ferry_evict(a, 1, &freed));
    assert_int_equal(freed, 0);
    ferry_stats s = h_stats(a);
    assert_int_equal(s.refused_creates, 1);
    assert_int_equal(s.objects, 4);
    assert_int_equal(s.evicted_objects, 0);
    h_assert_buffer(&held[0], &ids[0], K900, 0);
    h_assert_buffer(&held[1], &ids[1], K900, 0);

    H_OK(ferry_release(b, &ids[1]));
    h_sync(b);
    H_OK(h_put_direct(a, &x, K900, 0));
    assert_int_equal(h_contains(a, &ids[1]), 0);
    assert_int_equal(h_contains(a, &ids[0]), 1);
    H_OK(ferry_release(b, &ids[0]));
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Larger than the arena is ETOOBIG, and nothing is evicted trying. */
H_TEST(create_above_capacity_is_etoobig_and_evicts_nothing)
{
    ferry_client *a = h_connect(d);
    assert_int_equal(h_stats(a).capacity_bytes, ARENA);
    ferry_id small = put900(a, "small"), big = h_id("big");
    uint8_t meta[16] = {0}, *data;
    H_RC(ferry_create(a, &big, ARENA + 1, NULL, 0, &data), FERRY_ETOOBIG);
    assert_true(strlen(ferry_errmsg()) > 0);
    H_RC(ferry_create(a, &big, ARENA - 8, meta, sizeof(meta), &data), FERRY_ETOOBIG);
    ferry_stats s = h_stats(a);
    assert_int_equal(s.evicted_objects, 0);
    assert_int_equal(s.objects, 1);
    h_assert_object(a, &small, K900, 0);
    ferry_disconnect(a);
}

static int setup_64m(void **state)
{
    return h_setup(state, "64M", NULL);
}

/* An object is evictable as soon as it is sealed and released, however large (whatever
 * the daemon still does with it, such as digesting it): a create right after that needs
 * its room gets it. */
H_TEST(large_object_is_evictable_right_after_its_release)
{
    ferry_client *a = h_connect(d);
    for (int i = 0; i < 5; i++) {
        ferry_id old = h_idf("old-%d", i), new = h_idf("new-%d", i);
        H_OK(h_put_direct(a, &old, 40u << 20, 0));
        H_OK(h_put_direct(a, &new, 40u << 20, 0)); /* needs old's room */
        assert_int_equal(h_contains(a, &old), 0);
        uint64_t freed = 0;
        H_OK(ferry_evict(a, 1, &freed)); /* and new can go at once too */
        assert_int_equal(freed, 40u << 20);
    }
    ferry_disconnect(a);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(eviction_takes_the_least_recently_used_first),
        T(eviction_takes_as_many_objects_as_needed_in_order),
        T(eviction_spares_referenced_and_unsealed_objects),
        T(create_is_enospace_when_nothing_is_evictable),
        T(create_above_capacity_is_etoobig_and_evicts_nothing),
        cmocka_unit_test_setup_teardown(large_object_is_evictable_right_after_its_release,
                                        setup_64m, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
