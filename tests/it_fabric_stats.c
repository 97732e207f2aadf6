/*
 * it_fabric_stats.c - what ferry stat shows of the transports: two nodes on the libfabric
 * provider FERRY_TEST_TRANSPORT names (rxm: tcp;ofi_rxm, or shm), one pulling from the other, count
 * one handshake, two registrations, messages for a small object and one-sided reads for a large
 * one, and list the holder as a fabric peer; a larger eager limit set at run time sends the next
 * large object as messages; a pair on
 * --transport tcp lists its peer on tcp and says why; a standalone node has no peers and no
 * eager limit to set.
 *
 * Where each counter lives: one-sided reads are issued by the node that pulls (B); eager
 * messages are counted where object bytes are sent, so the eager checks add both nodes' counts
 * (the holder's, today) and hold wherever the fabric counts them.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { A, B };
#define KIB 1024u
#define MIB (1024u * 1024u)
#define FETCH_MS 20000

static const char *const tcp_only[] = {"--transport", "tcp", NULL};

/* The provider the harness started the nodes on. */
static const char *provider_under_test(void)
{
    const char *t = getenv("FERRY_TEST_TRANSPORT");
    return t && strcmp(t, "rxm") == 0 ? "tcp;ofi_rxm" : "shm";
}

/* Puts id on a (size bytes, patterned), fetches it on b and checks the copy. */
static void put_and_fetch(ferry_client *a, ferry_client *b, const ferry_id *id, uint64_t size)
{
    int status = 1;

    H_OK(h_put_direct(a, id, size, 0));
    H_OK(ferry_fetch(b, id, 1, FETCH_MS, &status));
    assert_int_equal(status, FERRY_OK);
    h_assert_object(b, id, size, 0);
}

/* The one peer c lists (fails the test unless there is exactly one). */
static ferry_peer one_peer(ferry_client *c)
{
    ferry_peer *peers = NULL, one;
    size_t n = 99;

    H_OK(ferry_peers(c, &peers, &n));
    assert_int_equal(n, 1);
    one = peers[0];
    ferry_free(peers);
    return one;
}

/* Object bytes sent as messages by either node, and the messages. */
static uint64_t eager_bytes(ferry_client *a, ferry_client *b)
{
    return h_stat(a, "fabric_eager_bytes") + h_stat(b, "fabric_eager_bytes");
}

static uint64_t eager_msgs(ferry_client *a, ferry_client *b)
{
    return h_stat(a, "fabric_eager_msgs") + h_stat(b, "fabric_eager_msgs");
}

/* B pulls a 1 KiB object as a message and a 1 MiB one by one-sided reads, over one fabric
 * connection, and lists A as its fabric peer on shm. */
H_CLUSTER_TEST(fabric_counts_handshake_registrations_messages_and_reads)
{
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id small = h_id("fabric-small"), large = h_id("fabric-large");
    ferry_stats sb = h_stats(b);
    assert_true(sb.eager_max > 0 && sb.eager_max < MIB); /* 1 MiB goes by reads */
    assert_int_equal(h_stat(b, "fabric_rdv_reads"), 0);

    uint64_t msgs = eager_msgs(a, b);
    put_and_fetch(a, b, &small, KIB);
    assert_true(eager_msgs(a, b) > msgs);
    assert_int_equal(h_stat(b, "fabric_rdv_reads"), 0);

    put_and_fetch(a, b, &large, MIB);
    sb = h_stats(b);
    assert_int_equal(h_stat(b, "fabric_connects"), 1);
    assert_true(h_stat(b, "fabric_connect_us") > 0);
    assert_int_equal(h_stat(b, "fabric_registrations"), 2); /* the arena, the bounce buffers */
    assert_true(h_stat(b, "fabric_rdv_reads") > 0);
    assert_true(h_stat(b, "fabric_rdv_bytes") >= MIB);
    assert_int_equal(h_stat(b, "fabric_failures"), 0);
    assert_int_equal(h_stat(b, "fabric_fallbacks"), 0);
    assert_int_equal(sb.transfers_in, 2);

    ferry_peer p = one_peer(b);
    assert_string_equal(p.node, cl->node[A].id);
    assert_string_equal(p.transport, "fabric");
    assert_string_equal(p.provider, provider_under_test());
    char provider[32];
    memset(provider, 0x55, sizeof(provider));
    H_OK(ferry_fabric_info(b, provider));
    assert_string_equal(provider, provider_under_test());
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* ferry_set_eager_max(4 MiB) on the puller: the next 1 MiB object moves as messages, with no
 * new one-sided read; auto restores the provider's default. */
H_CLUSTER_TEST(eager_limit_set_at_run_time_applies_to_the_next_pull)
{
    h_cluster_start(cl, 2, "64M", NULL);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id first = h_id("eager-first"), second = h_id("eager-second");
    uint64_t auto_max = h_stats(b).eager_max;

    put_and_fetch(a, b, &first, MIB);
    uint64_t reads = h_stat(b, "fabric_rdv_reads"), bytes = eager_bytes(a, b);
    assert_true(reads > 0);

    H_OK(ferry_set_eager_max(b, 4 * MIB));
    assert_int_equal(h_stats(b).eager_max, 4 * MIB);
    put_and_fetch(a, b, &second, MIB);
    assert_true(eager_bytes(a, b) >= bytes + MIB);
    assert_int_equal(h_stat(b, "fabric_rdv_reads"), reads);

    H_OK(ferry_set_eager_max(b, FERRY_EAGER_AUTO));
    assert_int_equal(h_stats(b).eager_max, auto_max);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* --transport tcp: the peer is on tcp because of the option; no fabric, no fabric counters. */
H_CLUSTER_TEST(tcp_peer_says_why)
{
    h_cluster_start(cl, 2, "64M", tcp_only);
    ferry_client *a = h_node_connect(cl, A), *b = h_node_connect(cl, B);
    ferry_id id = h_id("over-tcp");

    put_and_fetch(a, b, &id, MIB);
    ferry_peer p = one_peer(b);
    assert_string_equal(p.node, cl->node[A].id);
    assert_string_equal(p.transport, "tcp");
    assert_string_equal(p.provider, "tcp");
    assert_string_equal(p.why, "--transport tcp");
    char provider[32] = "junk";
    H_OK(ferry_fabric_info(b, provider));
    assert_string_equal(provider, "");
    /* No fabric is open: it has no counters to list at all. */
    ferry_stat *all = NULL;
    size_t n = 0;
    H_OK(ferry_stats_list(b, &all, &n));
    for (size_t i = 0; i < n; i++)
        assert_false(strncmp(all[i].name, "fabric_", 7) == 0);
    ferry_free(all);
    ferry_disconnect(a);
    ferry_disconnect(b);
}

/* A standalone node: no peers, no provider, eager_max 0 and nothing to set; the API checks
 * its arguments. */
H_TEST(standalone_has_no_peers_and_refuses_an_eager_limit)
{
    ferry_client *c = h_connect(d);
    ferry_peer *peers = NULL;
    size_t n = 99;
    char provider[32] = "junk";

    H_OK(ferry_peers(c, &peers, &n));
    assert_int_equal(n, 0);
    assert_non_null(peers); /* an empty array, still to free */
    ferry_free(peers);
    H_RC(ferry_peers(c, NULL, &n), FERRY_EINVAL);
    H_RC(ferry_peers(c, &peers, NULL), FERRY_EINVAL);
    H_OK(ferry_fabric_info(c, provider));
    assert_string_equal(provider, "");
    H_RC(ferry_fabric_info(c, NULL), FERRY_EINVAL);
    H_RC(ferry_set_eager_max(c, MIB), FERRY_ESTANDALONE);
    H_RC(ferry_set_eager_max(c, FERRY_EAGER_AUTO), FERRY_ESTANDALONE);
    assert_int_equal(h_stats(c).eager_max, 0); /* and the handle still works */
    ferry_disconnect(c);
}

static int standalone_setup(void **state)
{
    return h_setup(state, "64M", NULL);
}

#define T(f) cmocka_unit_test_setup_teardown(f, h_cluster_setup, h_cluster_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(fabric_counts_handshake_registrations_messages_and_reads),
        T(eager_limit_set_at_run_time_applies_to_the_next_pull),
        T(tcp_peer_says_why),
        cmocka_unit_test_setup_teardown(standalone_has_no_peers_and_refuses_an_eager_limit,
                                        standalone_setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
