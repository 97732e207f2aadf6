/*
 * it_cluster_locate.c - fetches given the location of the node that put the object
 * (ferry_location, ferry_fetch_at), with real ferryd nodes and a real Redis: the located node
 * is asked without the directory, even while Redis is frozen; locations that lie (a node
 * without the object, a dead node, garbage) cost a lookup and never the object.
 */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { A, B, C };
#define BIT(i) (1u << (i))

/* Fetches id on c at loc within timeout_ms, which must succeed. */
static void fetch_at(ferry_client *c, const ferry_id *id, const char *loc, int64_t timeout_ms)
{
    int status = 1;
    const char *locs[] = {loc};
    H_OK(ferry_fetch_at(c, id, locs, 1, timeout_ms, &status));
    H_OK(status);
}

/* Starts n nodes, connects *a and *b to A and B, and gives A's location into loc. */
static void start_located(struct h_cluster *cl, int n, ferry_client **a, ferry_client **b,
                          char loc[FERRY_LOCATION_MAX])
{
    h_cluster_start(cl, n, "64M", NULL);
    *a = h_node_connect(cl, A);
    *b = h_node_connect(cl, B);
    H_OK(ferry_location(*a, loc));
}

/* B fetches what A put by A's location: no lookup at all, one hint and no miss; the copy is
 * intact. A location is one per run: asked twice, the same. */
H_CLUSTER_TEST(a_located_fetch_asks_no_directory)
{
    char loc[FERRY_LOCATION_MAX], again[FERRY_LOCATION_MAX];
    ferry_client *a, *b;
    start_located(cl, 2, &a, &b, loc);
    H_OK(ferry_location(a, again));
    assert_string_equal(loc, again);
    assert_non_null(strstr(loc, cl->node[A].id));
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof(name), "located-%d", i);
        ferry_id id = h_id(name);
        uint64_t size = i == 2 ? 3u << 20 : 4096u * (i + 1);
        H_OK(h_put_direct(a, &id, size, 7));
        uint64_t lookups = h_stat(b, "directory_lookups");
        fetch_at(b, &id, loc, 10000);
        assert_int_equal(h_stat(b, "directory_lookups"), lookups);
        h_assert_object(b, &id, size, 7);
    }
    assert_int_equal(h_stat(b, "fetch_hints"), 3);
    assert_int_equal(h_stat(b, "fetch_hint_misses"), 0);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A put is fetched by its location at once, its record not written yet: Redis is frozen
 * (SIGSTOP) from before the put until after the fetch. */
H_CLUSTER_TEST(a_put_is_fetched_by_its_location_while_redis_is_frozen)
{
    char loc[FERRY_LOCATION_MAX];
    ferry_client *a, *b;
    start_located(cl, 2, &a, &b, loc);
    ferry_id id = h_id("frozen-directory");
    assert_int_equal(kill(cl->redis.pid, SIGSTOP), 0);
    H_OK(h_put_direct(a, &id, 100000, 3));
    int status = 1;
    const char *locs[] = {loc};
    int rc = ferry_fetch_at(b, &id, locs, 1, 10000, &status);
    assert_int_equal(kill(cl->redis.pid, SIGCONT), 0);
    H_OK(rc);
    H_OK(status);
    h_assert_object(b, &id, 100000, 3);
    assert_int_equal(h_stat(b, "fetch_hint_misses"), 0);
    /* The record follows once Redis answers again. */
    h_assert_where(b, cl, &id, BIT(A) | BIT(B), H_CLUSTER_MS);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* Locations that lie cost a lookup, never the object: C's, which does not hold it (a miss);
 * garbage (refused, looked up at once); a killed node's (a miss once it is found dead). Each
 * fetch brings A's intact copy. */
H_CLUSTER_TEST(locations_that_lie_fall_back_to_the_directory)
{
    char loc_c[FERRY_LOCATION_MAX];
    h_cluster_start(cl, 3, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_client *c = h_node_connect(cl, C);
    H_OK(ferry_location(c, loc_c));
    ferry_id ids[3] = {h_id("lie-other-node"), h_id("lie-garbage"), h_id("lie-dead-node")};
    for (int i = 0; i < 3; i++) {
        H_OK(h_put_direct(a, &ids[i], 50000 + (uint64_t)i, 1));
        h_assert_where(b, cl, &ids[i], BIT(A), H_CLUSTER_MS);
    }
    fetch_at(b, &ids[0], loc_c, 10000);
    h_assert_object(b, &ids[0], 50000, 1);
    assert_int_equal(h_stat(b, "fetch_hint_misses"), 1);
    fetch_at(b, &ids[1], "ferry1;node-z;1;nowhere", 10000);
    h_assert_object(b, &ids[1], 50001, 1);
    assert_int_equal(h_stat(b, "fetch_hints_refused"), 1);
    ferry_disconnect(c);
    h_node_kill(cl, C);
    fetch_at(b, &ids[2], loc_c, 20000);
    h_assert_object(b, &ids[2], 50002, 1);
    assert_int_equal(h_stat(b, "fetch_hints"), 2);
    assert_int_equal(h_stat(b, "fetch_hint_misses"), 2);
    /* An empty location is none: looked up as ferry_fetch does. */
    ferry_id plain = h_id("no-location");
    H_OK(h_put_direct(a, &plain, 10, 0));
    h_assert_where(b, cl, &plain, BIT(A), H_CLUSTER_MS);
    fetch_at(b, &plain, "", 10000);
    assert_int_equal(h_stat(b, "fetch_hints"), 2);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A location of A's previous run, after A restarted (a new port, a new incarnation), while B
 * still knew the old run: it costs a lookup, and the restarted A is not taken for a holder
 * that failed. */
H_CLUSTER_TEST(a_location_of_an_earlier_run_falls_back)
{
    char old[FERRY_LOCATION_MAX];
    ferry_client *a, *b;
    start_located(cl, 2, &a, &b, old);
    ferry_id warm = h_id("earlier-run-warm");
    H_OK(h_put_direct(a, &warm, 1000, 0));
    fetch_at(b, &warm, old, 10000); /* B is connected to A's first run */
    ferry_disconnect(a);
    h_node_kill(cl, A);
    h_node_start(cl, A, "64M", NULL);
    a = h_node_connect(cl, A);
    ferry_id id = h_id("earlier-run");
    H_OK(h_put_direct(a, &id, 70000, 2));
    h_assert_where(b, cl, &id, BIT(A), H_CLUSTER_MS);
    fetch_at(b, &id, old, 20000);
    h_assert_object(b, &id, 70000, 2);
    /* Only the warm-up's hint gave its object: the stale one was skipped, or missed. */
    assert_int_equal(h_stat(b, "fetch_hints") - h_stat(b, "fetch_hint_misses"), 1);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

#define T(f) cmocka_unit_test_setup_teardown(f, h_cluster_setup, h_cluster_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(a_located_fetch_asks_no_directory),
        T(a_put_is_fetched_by_its_location_while_redis_is_frozen),
        T(locations_that_lie_fall_back_to_the_directory),
        T(a_location_of_an_earlier_run_falls_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
