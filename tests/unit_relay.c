/*
 * unit_relay.c - the choice of holders for a relayed object's ranges (engine_relay.c): the
 * receiver that began just before, then the ones before it, then the whole holders.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transfer/engine_int.h"

#define MAXN 8

static struct directory_node node(const char *id, uint64_t seq)
{
    struct directory_node n = {.seq = seq};
    snprintf(n.id, sizeof(n.id), "%s", id);
    return n;
}

/* Whether node is one of the words of ctx (the holders tried). */
static int tried_of(const void *ctx, const char *node)
{
    char words[128], *save = NULL;

    snprintf(words, sizeof(words), "%s", (const char *)ctx);
    for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save))
        if (strcmp(w, node) == 0)
            return 1;
    return 0;
}

/* The ids eng_relay_order gives for a receiver "me" of place seq (tried: the holders tried,
 * space-separated, or NULL), joined by spaces. */
static const char *order(const struct directory_node *nodes, size_t n, uint64_t seq,
                         const char *tried)
{
    static char out[256];
    const struct directory_node *o[MAXN];
    size_t at = 0, k;

    k = eng_relay_order(nodes, n, "me", seq, tried ? tried_of : NULL, tried, o);
    out[0] = '\0';
    for (size_t i = 0; i < k; i++)
        at += (size_t)snprintf(out + at, sizeof(out) - at, "%s%s", i ? " " : "", o[i]->id);
    return out;
}

static void test_a_chain_takes_the_receiver_just_before_first(void **state)
{
    const struct directory_node n[] = {node("origin", 0), node("r1", 1), node("r3", 3),
                                       node("r2", 2),     node("r5", 5), node("me", 4)};
    (void)state;
    assert_string_equal(order(n, 6, 4, NULL), "r3 r2 r1 origin");
}

static void test_the_first_receiver_is_fetched_as_usual(void **state)
{
    const struct directory_node n[] = {node("origin", 0), node("other", 0), node("r2", 2)};
    (void)state;
    assert_string_equal(order(n, 3, 1, NULL), ""); /* r2 began after it */
    assert_string_equal(order(n, 1, 7, NULL), ""); /* nobody is receiving */
}

static void test_a_receiver_listed_whole_too_has_finished(void **state)
{
    const struct directory_node n[] = {node("origin", 0), node("r1", 1), node("r1", 0),
                                       node("r2", 2)};
    (void)state;
    assert_string_equal(order(n, 4, 3, NULL), "r2 origin r1");
    assert_string_equal(order(n, 4, 2, NULL), "");
}

static void test_holders_tried_and_nodes_listed_twice_are_left_out(void **state)
{
    const struct directory_node n[] = {node("origin", 0), node("r1", 1), node("r2", 2),
                                       node("origin", 0), node("r3", 3)};
    (void)state;
    assert_string_equal(order(n, 5, 4, "r3 r2"), "r1 origin");
    assert_string_equal(order(n, 5, 4, "r3 r2 r1"), ""); /* only whole holders left */
    assert_string_equal(order(n, 5, 4, NULL), "r3 r2 r1 origin");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_chain_takes_the_receiver_just_before_first),
        cmocka_unit_test(test_the_first_receiver_is_fetched_as_usual),
        cmocka_unit_test(test_a_receiver_listed_whole_too_has_finished),
        cmocka_unit_test(test_holders_tried_and_nodes_listed_twice_are_left_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
