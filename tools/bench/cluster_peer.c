/* cluster_peer.c - a pair of ferryd cluster nodes on this machine, on one transport, with a
 * Redis database of their own as their directory: the fetching systems of the remote suite. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define NODES_TIMEOUT_MS 15000
#define NODES_POLL_MS 50
#define MAX_ARGS 24

/* Appends the NULL-terminated words of add to args[*n..]. */
static void append_args(const char **args, size_t *n, const char *const *add)
{
    for (; add != NULL && *add != NULL; add++) {
        if (*n == MAX_ARGS - 1)
            bench_fail("too many ferryd arguments");
        args[(*n)++] = *add;
    }
    args[*n] = NULL;
}

static ferry_client *start_node(const struct fetch_pair *p, const char *proc_name,
                                const char *node_id, int port, const char *memory, const char *url,
                                const char *const *extra, struct bench_proc **proc)
{
    char listen[32];
    const char *args[MAX_ARGS];
    size_t n = 0;
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    const char *const common[] = {"--memory", memory,        "--node-id", node_id, "--listen",
                                  listen,     "--directory", url,         NULL};
    const char *const tcp[] = {"--transport", "tcp", NULL};
    const char *const fabric[] = {"--transport", "fabric", "--fabric-provider", p->provider, NULL};
    append_args(args, &n, common);
    append_args(args, &n, p->provider != NULL ? fabric : tcp);
    append_args(args, &n, extra);
    return ferry_peer_start(NULL, proc_name, args, proc);
}

/* 1 when b's directory lists both nodes; *seen receives how many it lists. */
static int both_listed(const struct fetch_pair *p, size_t *seen)
{
    ferry_node_info *nodes;
    size_t n;
    int a = 0, b = 0;
    int err = ferry_nodes(p->b, &nodes, &n);
    *seen = 0;
    if (err == FERRY_EDIRECTORY)
        return 0; /* not connected to Redis yet */
    bench_check_ferry(err, "ferry_nodes on %s", p->b_id);
    for (size_t i = 0; i < n; i++) {
        a |= strcmp(nodes[i].id, p->a_id) == 0;
        b |= strcmp(nodes[i].id, p->b_id) == 0;
    }
    ferry_free(nodes);
    *seen = n;
    return a && b;
}

static void wait_for_nodes(const struct fetch_pair *p)
{
    size_t seen;
    for (unsigned waited = 0; !both_listed(p, &seen); waited += NODES_POLL_MS) {
        if (bench_proc_ended(p->pa) || bench_proc_ended(p->pb))
            bench_fail("a ferryd node of %s ended before the cluster formed", p->system);
        if (waited >= NODES_TIMEOUT_MS) {
            bench_proc_show_log(p->pa);
            bench_proc_show_log(p->pb);
            bench_fail("%s's directory did not list %s and %s within %d ms (it lists %zu "
                       "node(s))",
                       p->b_id, p->a_id, p->b_id, NODES_TIMEOUT_MS, seen);
        }
        bench_check_interrupt();
        bench_sleep_ms(NODES_POLL_MS);
    }
}

void cluster_peer_start(struct fetch_pair *p, const char *tag, const char *id_prefix,
                        const char *memory, int redis_port, int db, const char *const *extra)
{
    char url[64];
    int ports[2];
    bench_free_ports(ports, 2);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d/%d", redis_port, db);
    snprintf(p->a_id, sizeof(p->a_id), "%s-a", id_prefix);
    snprintf(p->b_id, sizeof(p->b_id), "%s-b", id_prefix);
    snprintf(p->a_proc, sizeof(p->a_proc), "%s-a", tag);
    snprintf(p->b_proc, sizeof(p->b_proc), "%s-b", tag);
    p->a = start_node(p, p->a_proc, p->a_id, ports[0], memory, url, extra, &p->pa);
    p->b = start_node(p, p->b_proc, p->b_id, ports[1], memory, url, extra, &p->pb);
    wait_for_nodes(p);
}

/* How many nodes b's directory lists (0 before it reaches Redis). */
static size_t listed(const struct fetch_pair *p)
{
    ferry_node_info *nodes;
    size_t n;
    int err = ferry_nodes(p->b, &nodes, &n);
    if (err == FERRY_EDIRECTORY)
        return 0;
    bench_check_ferry(err, "ferry_nodes on %s", p->b_id);
    ferry_free(nodes);
    return n;
}

void cluster_peer_add_holders(struct fetch_pair *p, size_t n, const char *tag,
                              const char *id_prefix, const char *memory, int redis_port, int db,
                              const char *const *extra)
{
    char url[64];
    int ports[FETCH_PEER_MAX_HOLDERS - 1];
    if (n > FETCH_PEER_MAX_HOLDERS - 1)
        bench_fail("at most %d holders besides %s", FETCH_PEER_MAX_HOLDERS - 1, p->a_id);
    bench_free_ports(ports, n);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d/%d", redis_port, db);
    for (size_t i = 0; i < n; i++) {
        snprintf(p->h_id[i], sizeof(p->h_id[i]), "%s-h%zu", id_prefix, i + 1);
        snprintf(p->h_proc[i], sizeof(p->h_proc[i]), "%s-h%zu", tag, i + 1);
        p->h[i] = start_node(p, p->h_proc[i], p->h_id[i], ports[i], memory, url, extra, &p->ph[i]);
    }
    p->nh = n;
    for (unsigned waited = 0; listed(p) < 2 + n; waited += NODES_POLL_MS) {
        if (waited >= NODES_TIMEOUT_MS)
            bench_fail("%s's directory did not list %zu more holders within %d ms", p->b_id, n,
                       NODES_TIMEOUT_MS);
        bench_check_interrupt();
        bench_sleep_ms(NODES_POLL_MS);
    }
}

void cluster_peer_check_transport(const struct fetch_pair *p)
{
    ferry_peer *peers;
    size_t n;
    const char *transport = p->provider != NULL ? "fabric" : "tcp";
    const char *provider = p->provider != NULL ? p->provider : "tcp";
    bench_check_ferry(ferry_peers(p->b, &peers, &n), "ferry_peers on %s", p->b_id);
    bench_free_at_exit(peers);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(peers[i].node, p->a_id) != 0)
            continue;
        if (strcmp(peers[i].transport, transport) != 0 || strcmp(peers[i].provider, provider) != 0)
            bench_fail("%s reaches %s over %s (%s: %s), not %s (%s): its figures would not be %s's",
                       p->b_id, p->a_id, peers[i].transport, peers[i].provider, peers[i].why,
                       transport, provider, p->system);
        return;
    }
    bench_fail("%s lists no connection to %s after fetching from it", p->b_id, p->a_id);
}
