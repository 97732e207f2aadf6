/*
 * stat.c - ferry stat: the daemon's counters for people (grouped, with units, what does not
 * apply to this node left out), every counter as name-value lines (--all), or one JSON object
 * (--json, complete and stable: scripts read it).
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/size.h"

/* What stat shows: the counters, the fabric's provider ("" without one) and the peers. */
struct stat_view {
    ferry_stat *stats; /* every counter, the daemon's table first, then its transports' */
    size_t n_stats;
    char provider[32];
    ferry_peer *peers;
    size_t n_peers;
    char directory_why[400]; /* a cluster node's directory is down: why ("": up, or unknown) */
};

/* The peers as a JSON array, one per line. */
static void print_peers_json(const ferry_peer *peers, size_t n)
{
    fputs("[", stdout);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",\n    {\"node\": " : "\n    {\"node\": ", stdout);
        cli_json_string(peers[i].node);
        fputs(", \"transport\": ", stdout);
        cli_json_string(peers[i].transport);
        fputs(", \"provider\": ", stdout);
        cli_json_string(peers[i].provider);
        fputs(", \"why\": ", stdout);
        cli_json_string(peers[i].why);
        fputs("}", stdout);
    }
    fputs(n ? "\n  ]" : "]", stdout);
}

/* One object: the counters, then "fabric_provider" and "peers". */
static void print_stats_json(const struct stat_view *v)
{
    fputs("{", stdout);
    for (size_t i = 0; i < v->n_stats; i++)
        printf("%s\n  \"%s\": %" PRIu64, i ? "," : "", v->stats[i].name, v->stats[i].value);
    fputs(",\n  \"fabric_provider\": ", stdout);
    cli_json_string(v->provider);
    fputs(",\n  \"peers\": ", stdout);
    print_peers_json(v->peers, v->n_peers);
    fputs("\n}\n", stdout);
}

/* The peers section: a "peers" line per peer (node, transport, provider, why, in aligned
 * columns), or one "peers -" when there is none; every line of stat starts with a key of
 * stat --json. */
static void print_peers_table(const ferry_peer *peers, size_t n)
{
    int node_width = 1, provider_width = 1;
    for (size_t i = 0; i < n; i++) {
        int node_len = (int)strnlen(peers[i].node, sizeof(peers[i].node));
        int provider_len = (int)strnlen(peers[i].provider, sizeof(peers[i].provider));
        node_width = node_len > node_width ? node_len : node_width;
        provider_width = provider_len > provider_width ? provider_len : provider_width;
    }
    if (n == 0)
        printf("%-26s -\n", "peers");
    for (size_t i = 0; i < n; i++)
        printf("%-26s %-*s %-6s %-*s %s\n", "peers", node_width, peers[i].node, peers[i].transport,
               provider_width, peers[i].provider, peers[i].why);
}

/* --all: name value lines (the provider "-" when there is none), then the peers section. */
static void print_stats_table(const struct stat_view *v)
{
    for (size_t i = 0; i < v->n_stats; i++)
        printf("%-26s %" PRIu64 "\n", v->stats[i].name, v->stats[i].value);
    printf("%-26s %s\n", "fabric_provider", v->provider[0] ? v->provider : "-");
    print_peers_table(v->peers, v->n_peers);
}

/* ---- for people ---- */

static uint64_t val(const struct stat_view *v, const char *name)
{
    return ferry_stat_value(v->stats, v->n_stats, name);
}

static const char *sz(uint64_t bytes, char buf[SIZE_FORMAT_LEN])
{
    return size_format(bytes, buf, SIZE_FORMAT_LEN);
}

/* Whether name is a transport's counter (not in the daemon's own table): only a node in a
 * cluster has them. */
static int transport_counter(const char *name)
{
    return ferry_stat_field_find(name) == NULL;
}

static void print_uptime(const struct stat_view *v)
{
    uint64_t start = val(v, "start_time_seconds"), now = (uint64_t)time(NULL);
    uint64_t up = now > start ? now - start : 0, r = val(v, "release");
    char since[32];
    time_t t = (time_t)start;
    struct tm tm;

    strftime(since, sizeof(since), "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&t, &tm));
    printf("ferryd %" PRIu64 ".%" PRIu64 ".%" PRIu64 ", up ", r / 1000000, r / 1000 % 1000,
           r % 1000);
    if (up >= 86400)
        printf("%" PRIu64 "d %" PRIu64 "h", up / 86400, up / 3600 % 24);
    else if (up >= 3600)
        printf("%" PRIu64 "h %" PRIu64 "m", up / 3600, up / 60 % 60);
    else
        printf("%" PRIu64 "m %" PRIu64 "s", up / 60, up % 60);
    printf(" (since %s)\n", since);
}

static void print_store(const struct stat_view *v)
{
    char a[SIZE_FORMAT_LEN], b[SIZE_FORMAT_LEN], c[SIZE_FORMAT_LEN], d[SIZE_FORMAT_LEN];
    uint64_t cap = val(v, "capacity_bytes"), used = val(v, "used_bytes");
    uint64_t evictable = val(v, "evictable_bytes"), dirty = val(v, "spill_dirty_bytes");
    /* Without a spill directory kept objects are in neither list; with one they are. */
    uint64_t kept = val(v, "spill_enabled") ? 0 : val(v, "kept_bytes");
    uint64_t free_soon = evictable + dirty + kept;

    printf("store\n  %-13s %s: %s used (%.1f %%), %s free, %s evictable\n", "arena", sz(cap, a),
           sz(used, b), cap ? 100.0 * (double)used / (double)cap : 0.0,
           sz(cap > used ? cap - used : 0, c), sz(evictable, d));
    printf("  %-13s %s in use by readers, peers and writers (%s of it staging)\n", "held",
           sz(used > free_soon ? used - free_soon : 0, a), sz(val(v, "staging_bytes"), b));
    printf("  %-13s %" PRIu64 " objects, %s, %s (ferry unkeep lets go)\n", "kept",
           val(v, "kept_objects"), sz(val(v, "kept_bytes"), a),
           val(v, "spill_enabled") ? "spilled like any, never dropped" : "never evicted for room");
    printf("  %-13s %" PRIu64 ", %" PRIu64 " sealed; %" PRIu64 " created, %" PRIu64
           " deleted, %" PRIu64 " aborted\n",
           "objects", val(v, "objects"), val(v, "sealed_objects"), val(v, "created_objects"),
           val(v, "deleted_objects"), val(v, "aborted_objects"));
    printf("  %-13s %" PRIu64 " objects, %s, %" PRIu64 " of them never read; %" PRIu64
           " creates refused for room\n",
           "evicted", val(v, "evicted_objects"), sz(val(v, "evicted_bytes"), a),
           val(v, "evicted_unread"), val(v, "refused_creates"));
}

/* Only for a node with a spill directory. */
static void print_spill(const struct stat_view *v)
{
    char a[SIZE_FORMAT_LEN], b[SIZE_FORMAT_LEN];
    uint64_t restores = val(v, "restores"), max = val(v, "spill_max_bytes");

    printf("spill\n  %-13s %s used of %s; %" PRIu64 " objects on disk only (%s)\n", "directory",
           sz(val(v, "spill_disk_bytes"), a), max ? sz(max, b) : "the disk",
           val(v, "spilled_objects"), sz(val(v, "spilled_bytes"), b));
    printf("  %-13s %s in memory to be written before it can be freed\n", "dirty",
           sz(val(v, "spill_dirty_bytes"), a));
    printf("  %-13s %" PRIu64 " objects (%s), %" PRIu64 " failed\n", "written",
           val(v, "spill_writes"), sz(val(v, "spill_written_bytes"), a),
           val(v, "spill_write_failures"));
    printf("  %-13s %" PRIu64 " objects (%s), %" PRIu64 " failed, %.2f ms waited on average\n",
           "restored", restores, sz(val(v, "restored_bytes"), a), val(v, "restore_failures"),
           restores ? (double)val(v, "restore_wait_us") / 1000.0 / (double)restores : 0.0);
    printf("  %-13s %" PRIu64 " waits of creates and restores for writes; at start %" PRIu64
           " objects found, %" PRIu64 " damaged records dropped\n",
           "room", val(v, "creates_waited"), val(v, "spill_recovered_objects"),
           val(v, "spill_recovery_dropped"));
    printf("  %-13s at start %" PRIu64 " segments not ours, %" PRIu64 " not signed with the "
           "secret, %" PRIu64 " other files, %" PRIu64 " objects larger than the arena\n",
           "left alone", val(v, "spill_segments_refused"), val(v, "spill_segments_unauthenticated"),
           val(v, "spill_files_ignored"), val(v, "spill_recovery_too_large"));
}

static void print_clients(const struct stat_view *v)
{
    printf("clients\n  %-13s %" PRIu64 " (%" PRIu64 " connections so far, %" PRIu64
           " closed for a bad message)\n",
           "connected", val(v, "clients"), val(v, "connections_total"), val(v, "protocol_errors"));
    printf("  %-13s %" PRIu64 " clients at most (descriptor limit %" PRIu64 "): %" PRIu64
           " refused at their hello; %" PRIu64 " closed before it for newer ones, %" PRIu64
           " for none in time\n",
           "bounds", val(v, "max_clients"), val(v, "fd_limit"), val(v, "clients_refused"),
           val(v, "clients_evicted"), val(v, "hello_timeouts"));
    printf("  %-13s %" PRIu64 " (%" PRIu64 " ended with something missing)\n", "gets",
           val(v, "gets"), val(v, "get_timeouts"));
    printf("  %-13s %" PRIu64 " open (%" PRIu64 " refused, %" PRIu64 " cut off for lagging)\n",
           "subscriptions", val(v, "subscribers"), val(v, "subscriptions_refused"),
           val(v, "notifications_dropped"));
}

static void print_cluster(const struct stat_view *v)
{
    char a[SIZE_FORMAT_LEN], b[SIZE_FORMAT_LEN];

    printf("cluster\n  %-13s %s: %" PRIu64 " lookups (%" PRIu64 " from the cache), %" PRIu64
           " reconnects, %" PRIu64 " id conflicts, %" PRIu64 " unsigned entries ignored\n",
           "directory", val(v, "directory_up") ? "up" : "DOWN", val(v, "directory_lookups"),
           val(v, "directory_cache_hits"), val(v, "directory_reconnects"), val(v, "id_conflicts"),
           val(v, "unsigned_entries"));
    if (v->directory_why[0])
        printf("  %-13s %s\n", "down", v->directory_why);
    printf("  %-13s unsigned ignored: %" PRIu64 " entries, %" PRIu64 " records (%" PRIu64
           " replaced), %" PRIu64 " events; %" PRIu64 " stale events, %" PRIu64
           " keys of the wrong type\n",
           "trust", val(v, "unsigned_entries"), val(v, "unsigned_records"),
           val(v, "records_repaired"), val(v, "unsigned_events"), val(v, "stale_events"),
           val(v, "directory_bad_keys"));
    printf("  %-13s %" PRIu64 " conflicting publications kept back, %" PRIu64
           " deletes of earlier puts spared, %" PRIu64 " replayed entries of this id, %" PRIu64
           " partial holders past a lookup's bound, %" PRIu64 " lapses of this node's entry\n",
           "", val(v, "conflicts_unlisted"), val(v, "deletes_of_earlier_puts"),
           val(v, "replayed_entries"), val(v, "partial_holders_skipped"),
           val(v, "directory_lapses"));
    printf("  %-13s %" PRIu64 " asked; %" PRIu64 " objects in (%s), %" PRIu64 " out (%s), %" PRIu64
           " failed from a holder\n",
           "fetches", val(v, "fetches"), val(v, "transfers_in"), sz(val(v, "bytes_in"), a),
           val(v, "transfers_out"), sz(val(v, "bytes_out"), b), val(v, "transfer_failures"));
    printf("  %-13s %" PRIu64 " objects from several holders in %" PRIu64 " ranges (%" PRIu64
           " moved to another holder, %" PRIu64 " fetched whole after all); %" PRIu64
           " ranges sent\n",
           "split", val(v, "split_fetches"), val(v, "ranges_in"), val(v, "ranges_moved"),
           val(v, "split_fallbacks"), val(v, "ranges_out"));
    printf("  %-13s %" PRIu64 " fetches served ranges while receiving; %" PRIu64
           " ranges sent from copies being received, %" PRIu64
           " not in within the deadline; %" PRIu64 " silent relays given up; %" PRIu64
           " ranges asked again\n",
           "relay", val(v, "relays"), val(v, "ranges_relayed"), val(v, "relay_waits_expired"),
           val(v, "relays_silent"), val(v, "relay_asked_again"));
    printf("  %-13s %" PRIu64 " opened, %" PRIu64 " accepted, %" PRIu64
           " evicted; peers dropped: %" PRIu64 " bad, %" PRIu64 " too slow, %" PRIu64
           " too slow past their share of pins, %" PRIu64 " for the room of local creates; %" PRIu64
           " pins deferred\n",
           "connections", val(v, "connections_opened"), val(v, "connections_accepted"),
           val(v, "connections_evicted"), val(v, "peer_errors"), val(v, "peers_too_slow"),
           val(v, "pins_reclaimed"), val(v, "pins_broken"), val(v, "pins_deferred"));
}

/* Each transport's counters under its name ("fabric_eager_msgs": fabric, eager_msgs), byte
 * counts with units. */
static void print_transports(const struct stat_view *v)
{
    char prev[FERRY_STAT_NAME_MAX + 1] = "", a[SIZE_FORMAT_LEN];
    int any = v->provider[0] != '\0';

    for (size_t i = 0; i < v->n_stats && !any; i++)
        any = transport_counter(v->stats[i].name);
    if (!any) /* tcp alone counts nothing of its own */
        return;
    printf("transports\n");
    if (v->provider[0])
        printf("  %-13s %s, eager up to %s\n", "provider", v->provider, sz(val(v, "eager_max"), a));
    for (size_t i = 0; i < v->n_stats; i++) {
        const char *name = v->stats[i].name, *us = strchr(name, '_');
        if (!us || !transport_counter(name))
            continue;
        int plen = (int)(us - name);
        if (strncmp(prev, name, (size_t)plen) != 0 || prev[plen] != '\0') {
            snprintf(prev, sizeof(prev), "%.*s", plen, name);
            printf("  %s\n", prev);
        }
        size_t l = strlen(us + 1);
        if (l > 6 && strcmp(us + 1 + l - 6, "_bytes") == 0)
            printf("    %-24s %s\n", us + 1, sz(v->stats[i].value, a));
        else if (l > 3 && strcmp(us + 1 + l - 3, "_us") == 0)
            printf("    %-24s %.1f ms\n", us + 1, (double)v->stats[i].value / 1000);
        else
            printf("    %-24s %" PRIu64 "\n", us + 1, v->stats[i].value);
    }
}

static void print_peers_people(const ferry_peer *peers, size_t n)
{
    printf("peers\n");
    if (n == 0)
        printf("  -\n");
    for (size_t i = 0; i < n; i++)
        printf("  %-16s %-6s %-12s %s\n", peers[i].node, peers[i].transport, peers[i].provider,
               peers[i].why);
}

static void print_stats_people(const struct stat_view *v)
{
    print_uptime(v);
    print_store(v);
    if (val(v, "arena_faults"))
        printf("  %-13s %" PRIu64 " pages punched out of the arena by a client, replaced\n",
               "faults", val(v, "arena_faults"));
    if (val(v, "spill_enabled"))
        print_spill(v);
    print_clients(v);
    if (val(v, "metrics_scrapes") || val(v, "metrics_refused"))
        printf("metrics\n  %-13s %" PRIu64 " answered, %" PRIu64 " refused\n", "scrapes",
               val(v, "metrics_scrapes"), val(v, "metrics_refused"));
    if (!val(v, "cluster_node")) /* standalone: no directory, transports or peers to speak of */
        return;
    print_cluster(v);
    print_transports(v);
    print_peers_people(v->peers, v->n_peers);
}

/* Asks the daemon for everything stat shows; v->peers is to free even on failure. */
static int stat_fetch(const struct cli *cli, struct stat_view *v)
{
    int err = ferry_stats_list(cli->client, &v->stats, &v->n_stats);
    if (err == FERRY_OK)
        err = ferry_peers(cli->client, &v->peers, &v->n_peers);
    if (err == FERRY_OK)
        err = ferry_fabric_info(cli->client, v->provider);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    /* The counters say that the directory is down, not why: a listing of the nodes fails with
     * the reason (AUTH refused, connection refused, the node id in use...). */
    if (val(v, "cluster_node") && !val(v, "directory_up")) {
        ferry_node_info *nodes = NULL;
        size_t n = 0;
        if (ferry_nodes(cli->client, &nodes, &n) < 0)
            snprintf(v->directory_why, sizeof(v->directory_why), "%s", ferry_errmsg());
        ferry_free(nodes);
    }
    return STATUS_OK;
}

/* stat [--json | --all]: prints the daemon's counters, its fabric provider and its peers. */
int cmd_stat(struct cli *cli, int argc, char **argv)
{
    int json = 0, all = 0;
    const struct opt opts[] = {{"--json", NULL, &json}, {"--all", NULL, &all}, {NULL, NULL, NULL}};
    struct params p = {.min = 0};
    int status = cli_start(cli, argc, argv, opts, &p, NULL);
    if (status != STATUS_OK)
        return status;
    struct stat_view v = {.stats = NULL, .peers = NULL};
    status = stat_fetch(cli, &v);
    if (status == STATUS_OK && json)
        print_stats_json(&v);
    else if (status == STATUS_OK && all)
        print_stats_table(&v);
    else if (status == STATUS_OK)
        print_stats_people(&v);
    ferry_free(v.stats);
    ferry_free(v.peers);
    return status;
}
