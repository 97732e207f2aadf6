/* stats.c - the daemon's counters by name (stats.h). */
#include "server/stats.h"

#include <stdio.h>
#include <string.h>

#include "server/metrics.h"
#include "transfer/engine.h"

/* ferry_version() as one number: MAJOR * 1000000 + MINOR * 1000 + PATCH. */
static uint64_t release_number(void)
{
    unsigned major = 0, minor = 0, patch = 0;

    (void)sscanf(ferry_version(), "%u.%u.%u", &major, &minor, &patch);
    return (uint64_t)major * 1000000 + (uint64_t)minor * 1000 + patch;
}

static void server_stats_spill(struct server *srv, ferry_stats *out)
{
    const struct store *st = &srv->store;
    const struct spill_counters *c = st->spill ? spill_counters(st->spill) : NULL;

    out->restore_wait_us = st->counters.restore_wait_ns / 1000;
    out->restore_failures = st->counters.restore_failures;
    out->creates_waited = st->counters.creates_waited;
    out->spill_write_failures = st->counters.spill_failures;
    out->spilled_objects = st->spilled_objects;
    out->spilled_bytes = st->spilled_bytes;
    out->spill_dirty_bytes = st->dirty_bytes + st->writing_bytes;
    if (!c)
        return;
    out->spill_enabled = 1;
    out->spill_max_bytes = spill_max_bytes(st->spill);
    out->spill_disk_bytes = c->disk_bytes;
    out->spill_writes = c->written_objects;
    out->spill_written_bytes = c->written_bytes;
    out->restores = st->counters.restores;
    out->restored_bytes = c->read_bytes;
    out->spill_recovered_objects = c->recovered_objects;
    out->spill_recovery_dropped = c->recovery_dropped;
    out->spill_segments_refused = c->segments_refused;
    out->spill_segments_unauthenticated = c->segments_unauthentic;
    out->spill_files_ignored = c->files_ignored;
    out->spill_recovery_too_large = st->counters.recovered_too_large;
}

void server_stats(struct server *srv, ferry_stats *out)
{
    const struct store *st = &srv->store;
    const struct engine_counters *ec = srv->engine ? engine_counters(srv->engine) : NULL;
    const struct directory_counters *dc = srv->dir ? directory_counters(srv->dir) : NULL;

    memset(out, 0, sizeof(*out));
    out->capacity_bytes = store_capacity(st);
    out->used_bytes = store_used(st);
    out->staging_bytes = srv->staging_bytes;
    out->objects = st->table.count;
    out->sealed_objects = st->sealed_objects;
    out->clients = srv->clients;
    out->loop_turns = srv->loop.turns;
    out->loop_busy_turns = srv->loop.busy_turns;
    out->evicted_objects = st->counters.evicted_objects;
    out->evicted_bytes = st->counters.evicted_bytes;
    out->created_objects = st->counters.created;
    out->sealed_total = st->counters.sealed;
    out->aborted_objects = st->counters.aborted;
    out->deleted_objects = st->counters.deleted;
    out->fast_gets = srv->fast_size ? fastidx_gets(&srv->fast) : 0;
    out->gets = srv->counters.gets + out->fast_gets; /* every get, the daemon's and the clients' */
    out->get_timeouts = srv->counters.get_timeouts;
    out->puts_nowait = srv->counters.puts_nowait;
    out->puts_nowait_failed = srv->counters.puts_nowait_failed;
    out->put_kicks = srv->counters.put_kicks;
    out->put_ring_bytes = srv->ring_bytes;
    out->refused_creates = st->counters.refused;
    out->max_objects = st->max_objects;
    out->refused_objects = st->counters.refused_objects;
    out->hashed_bytes = st->counters.hashed_bytes;
    out->hash_jobs_dropped = st->counters.hash_jobs_dropped;
    out->accept_pauses = srv->listener.pauses;
    out->protocol_errors = srv->counters.protocol_errors;
    out->connections_total = srv->counters.connections_total;
    out->subscribers = srv->subscriber_count;
    out->notifications_dropped = srv->counters.notifications_dropped;
    out->subscriptions_refused = srv->counters.subscriptions_refused;
    out->fetches = srv->counters.fetches;
    out->fetch_hints_refused = srv->counters.fetch_hints_refused;
    out->deletes_spared = srv->counters.deletes_spared;
    out->clients_refused = srv->counters.clients_refused;
    out->clients_evicted = srv->counters.clients_evicted;
    out->hello_timeouts = srv->counters.hello_timeouts;
    out->max_clients = srv->max_clients;
    out->fd_limit = srv->fd_limit;
    out->evictable_bytes = st->evictable_bytes;
    out->kept_objects = st->kept_objects;
    out->kept_bytes = st->kept_bytes;
    out->evicted_unread = st->counters.evicted_unread;
    out->fast_refs = srv->fast_size ? fastidx_slots_used(&srv->fast) : 0;
    out->fast_adopted = st->counters.fast_adopted;
    out->deleted_unused = st->counters.deleted_unused;
    out->start_time_seconds = srv->started_real_ns / 1000000000u;
    out->release = release_number();
    out->cluster_node = srv->dir != NULL;
    out->arena_faults = arena_faults();
    server_stats_spill(srv, out);
    if (srv->metrics) {
        out->metrics_scrapes = metrics_counters(srv->metrics)->scrapes;
        out->metrics_refused = metrics_counters(srv->metrics)->refused;
        out->accept_pauses += metrics_accept_pauses(srv->metrics);
    }
    if (ec) {
        out->connections_opened = ec->connections_opened;
        out->connections_accepted = ec->connections_accepted;
        out->transfers_in = ec->transfers_in;
        out->transfers_out = ec->transfers_out;
        out->transfer_failures = ec->transfer_failures;
        out->split_fetches = ec->split_fetches;
        out->ranges_in = ec->ranges_in;
        out->ranges_moved = ec->ranges_moved;
        out->split_fallbacks = ec->split_fallbacks;
        out->chunks_refused = ec->chunks_refused;
        out->rewritten_after_seal = ec->rewritten_after_seal;
        out->suspects_unfounded = ec->suspects_unfounded;
        out->suspects_ignored = ec->suspects_ignored;
        out->relays = ec->relays;
        out->ranges_relayed = ec->ranges_relayed;
        out->relay_waits_expired = ec->relay_waits_expired;
        out->relays_silent = ec->relays_silent;
        out->pins_reclaimed = ec->pins_reclaimed;
        out->pins_broken = ec->pins_broken;
        out->ranges_out = ec->ranges_out;
        out->bytes_in = ec->bytes_in;
        out->bytes_out = ec->bytes_out;
        out->peer_errors = ec->peer_errors;
        out->pins_deferred = ec->pins_deferred;
        out->peers_too_slow = ec->peers_too_slow;
        out->connections_evicted = ec->connections_evicted;
        out->node_connections_evicted = ec->node_connections_evicted;
        out->pinned_bytes = ec->pinned_bytes;
        out->holders_too_slow = ec->holders_too_slow;
        out->transfers_abandoned = ec->transfers_abandoned;
        out->fetch_hints = ec->fetch_hints;
        out->fetch_hint_misses = ec->fetch_hint_misses;
        out->fetch_hints_self = ec->fetch_hints_self;
        out->relay_asked_again = ec->relay_asked_again;
        out->eager_max = engine_eager_max(srv->engine);
    }
    if (dc) {
        out->directory_up = (uint64_t)directory_connected(srv->dir);
        out->directory_lookups = dc->lookups;
        out->directory_cache_hits = dc->cache_hits;
        out->directory_reconnects = dc->reconnects;
        out->id_conflicts = dc->id_conflicts;
        out->deletes_heard = dc->deletes_heard;
        out->directory_published = dc->published;
        out->directory_publish_batches = dc->publish_batches;
        out->directory_cleaned = dc->cleaned;
        out->unsigned_entries = dc->unsigned_entries;
        out->unsigned_records = dc->unsigned_records;
        out->records_repaired = dc->records_repaired;
        out->unsigned_events = dc->unsigned_events;
        out->stale_events = dc->stale_events;
        out->directory_bad_keys = dc->bad_keys;
        out->conflicts_unlisted = dc->conflicts_unlisted;
        out->deletes_of_earlier_puts = dc->deletes_of_earlier_puts;
        out->replayed_entries = dc->replayed_entries;
        out->directory_lapses = dc->lapses;
        out->partial_holders_skipped = dc->partial_holders_skipped;
    }
}

void server_stats_report(struct server *srv, xcounter_fn *fn, void *arg)
{
    ferry_stats st;
    size_t n;
    const ferry_stat_field *f = ferry_stat_fields(&n);

    server_stats(srv, &st);
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&st + f[i].offset, sizeof(v));
        fn(arg, f[i].name, f[i].kind, f[i].help, v);
    }
    if (srv->engine)
        engine_report(srv->engine, fn, arg);
}
