/*
 * engine.h - the transfer engine: makes objects local by pulling them from nodes that hold
 * them, and serves this node's sealed objects to peers.
 *
 * Receiver-pull (thesis ch. 2.2, done properly): the node that wants an object asks a holder
 * (found through the directory, or its cache) for one or many ids in one PULL; the holder pins
 * each sealed object and answers with sizes (and digests); the receiver creates each object,
 * the transport moves the bytes straight into it, and the receiver seals it only when every
 * byte is in (and, with verify, the digest matches). A failed transfer aborts the partial
 * object, unpins the holder's copy, and moves on to the next holder.
 *
 * One transfer per id: every local fetch of an id that is on its way joins it. Connections
 * to peers are made on first use, authenticated with the cluster secret, and reused.
 *
 * Runs on the loop's thread; callbacks into the owner never come from inside the call that
 * caused them.
 */
#ifndef FERRY_ENGINE_H
#define FERRY_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/hist.h"
#include "directory/directory.h"
#include "loop/loop.h"
#include "store/store.h"
#include "transport/transport.h"

struct engine;

#define ENGINE_EAGER_AUTO UINT64_MAX /* the measured default of the one-sided transport */

/* The protocol's timers, in milliseconds; 0 takes the default. Production keeps the defaults;
 * ferryd --timers sets them, so that tests about a timer last seconds instead of minutes
 * (docs/design/testing.md lists which tests keep each at its real scale). */
struct engine_timers {
    uint32_t stall_ms;     /* a peer that owes bytes and sends none for this long is dropped;
                            * a receiver holding pins must read MIN_RATE over this window */
    uint32_t handshake_ms; /* a connector must authenticate within this */
    uint32_t answer_ms;    /* a holder must answer our hello within this */
    uint32_t breaker_ms;   /* a transport that keeps failing to a peer is left out this long */
    uint32_t lease_ms;     /* fabric: a one-sided read's lease, before its per-byte share
                            * (0: the transport's default, 5 s) */
    uint32_t rate_ms;      /* a holder whose reply came must send at least 1 MiB/s over each
                            * window of this, or it is dropped */
    uint32_t orphan_ms;    /* a fetch nobody waits for any more goes on this long, for a client
                            * that waits in slices to take it up again */
    uint32_t relay_ms;     /* a partial holder that owes a relayed range and sends nothing for
                            * this long is given up on; it answers within half of it */
};
#define ENGINE_STALL_MS 30000
#define ENGINE_HANDSHAKE_MS 10000
#define ENGINE_ANSWER_MS 3000
#define ENGINE_BREAKER_MS 30000
#define ENGINE_RATE_MS 5000
#define ENGINE_ORPHAN_MS 300
/* Shorter than answer_ms: a relay chain waits on each node behind a silent one, so a relay
 * partitioned from everyone is found in a second (a false alarm only moves its ranges). */
#define ENGINE_RELAY_MS 1000
/* Bounds of each timer (ferryd --timers, the directory's too): from a tenth of a second (a loop
 * turn and a round trip must fit) to an hour. */
#define ENGINE_TIMER_MIN_MS 100
#define ENGINE_TIMER_MAX_MS 3600000
/* The lease's own floor: a fabric reader refuses a lease under 1 s (it gives up a second
 * before the lease ends, fabric_msg.h's FMSG_LEASE_MIN) and a read must get time past that. */
#define ENGINE_LEASE_MIN_MS 2000

struct engine_config {
    const char *node_id;
    const char *listen_addr; /* HOST:PORT for peers */
    const uint8_t *secret;   /* the cluster secret, or NULL */
    size_t secret_len;
    int verify; /* check every chunk received against the holder's tree before sealing */
    /* Which transports to open: NULL or "auto", every one of the registry (those that do not
     * open are logged and left out); a transport's name, that one (it must open) and the
     * fallback (tcp), which is always open. */
    const char *transport;
    const char *fabric_provider; /* NULL: the first suitable one libfabric offers */
    uint64_t eager_max;          /* fabric: objects up to this go two-sided, larger one-sided */
    uint32_t fabric_window;      /* fabric: credits per connection and size class (0: 8) */
    /* Objects of at least this many recorded bytes are fetched in ranges from up to 4 holders
     * at once (0: always whole, from one). */
    uint64_t split_min;
    /* A node receiving an object of at least this many recorded bytes serves the ranges it has
     * to others (engine_relay.c; 0: never). */
    uint64_t relay_min;
    int relay_unchecked; /* ranges from partial holders are taken as whole holders' are */
    struct engine_timers timers;
};

struct engine_counters {
    uint64_t connections_opened, connections_accepted;
    uint64_t transfers_in, transfers_out, transfer_failures;
    uint64_t bytes_in, bytes_out;
    uint64_t peer_errors;
    uint64_t pins_deferred;       /* objects a receiver asked for past its pin limit: ask again */
    uint64_t peers_too_slow;      /* receivers dropped for reading nothing, or too slowly */
    uint64_t connections_evicted; /* closed to make room: unauthenticated, or of a node id
                                   * past its share (counted in node_connections_evicted too) */
    uint64_t node_connections_evicted;
    uint64_t pinned_bytes;         /* a level: bytes pinned for receivers now, every node id's */
    uint64_t holders_too_slow;     /* holders dropped for sending under the minimum rate */
    uint64_t transfers_abandoned;  /* transfers under way ended: nobody waited for them */
    uint64_t fetch_hints;          /* wants that asked a location's node first */
    uint64_t fetch_hint_misses;    /* of those, the directory asked after all */
    uint64_t fetch_hints_self;     /* wants whose location named this node: looked up */
    uint64_t split_fetches;        /* objects fetched in ranges from several holders */
    uint64_t ranges_in;            /* ranges received (of those) */
    uint64_t ranges_moved;         /* ranges moved to another holder after theirs failed */
    uint64_t split_fallbacks;      /* split fetches that ran out of holders: fetched whole */
    uint64_t ranges_out;           /* ranges of objects sent (ranged pulls) */
    uint64_t chunks_refused;       /* chunks received that did not match their holder's leaf */
    uint64_t relays;               /* fetches made findable as partial holders */
    uint64_t ranges_relayed;       /* ranges sent from objects still being received */
    uint64_t relay_waits_expired;  /* ranges asked of a partial copy, not in within relay_ms/2 */
    uint64_t rewritten_after_seal; /* copies here that a SUSPECT found changed: dropped */
    uint64_t suspects_unfounded;   /* SUSPECTs whose chunk matched here */
    uint64_t suspects_ignored;     /* SUSPECTs past a connection's bound */
    uint64_t relays_silent;        /* partial holders dropped: no answer to a relayed pull */
    uint64_t relay_asked_again;    /* relayed ranges answered "not yet", asked again */
    uint64_t pins_reclaimed;       /* receivers dropped: pins past their share read too slowly
                                    * while other node ids waited for pins */
    uint64_t pins_broken;          /* receivers dropped: their pins held room a local create
                                    * needed (engine_break_pins) */
    struct hist transfer_latency;  /* from the first want of an object to its seal here */
};

/* What ferry stat shows per peer this node pulls from. */
struct engine_peer_info {
    char node[DIRECTORY_NODE_ID_MAX + 1];
    char transport[16]; /* the transport's name (registry.h) */
    char provider[32];
    char why[112];
};

/* status: 0 when the object is sealed here, else why not (enum ferry_error). */
typedef void engine_fetch_fn(void *ctx, uint32_t index, int status);

/* Listens on cfg->listen_addr, and opens the fabric as cfg->transport says (auto: a fabric
 * that does not open is logged once and left out). Fetches fail (FERRY_EDIRECTORY) until
 * engine_set_directory. */
int engine_open(struct engine **out, struct loop *l, struct store *st,
                const struct engine_config *cfg);
void engine_set_directory(struct engine *e, struct directory *dir);
/* This node's open transports and their addresses, for the directory. */
void engine_advertise(const struct engine *e, struct directory_node *self);
/* The provider of the node's one-sided transport (its fabric), or NULL when none is open. */
const char *engine_provider(const struct engine *e);
uint64_t engine_eager_max(const struct engine *e);
/* Changes the eager limit for pulls from now on (ENGINE_EAGER_AUTO: the provider default). */
void engine_set_eager_max(struct engine *e, uint64_t v);
/* Fills up to max records, one per peer this node pulls from, then one per holder whose
 * transfer failed lately and is not connected now (transport "-"); returns how many. */
size_t engine_peers(const struct engine *e, struct engine_peer_info *out, size_t max);
/* Closes every connection (aborting partial objects, unpinning served ones) and frees. */
void engine_close(struct engine *e);

/* Makes id local: fn(ctx, index, status) is called once, later, unless engine_cancel(ctx)
 * comes first. Does not check whether id is local already (the caller does). at (NULL:
 * none) is a node to ask first, a location's (directory_location_parse): a new transfer of id
 * asks it before the directory, which is asked only when it fails. FERRY_ENOMEM; FERRY_ENOENT
 * when a cluster-wide delete ended a fetch of id that nobody waited for within the orphan
 * grace (the next slice of a client that waits in slices learns of it so). */
int engine_fetch(struct engine *e, const ferry_id *id, const struct directory_node *at,
                 engine_fetch_fn *fn, void *ctx, uint32_t index);
/* Forgets every callback registered with ctx. A transfer already under way finishes. */
void engine_cancel(struct engine *e, void *ctx);

/* id was deleted cluster-wide by node: its fetches fail (FERRY_ENOENT, "deleted"), and bytes
 * on their way are dropped. */
void engine_on_deleted(struct engine *e, const ferry_id *id, const char *node);
/* Why a fetch of id has not succeeded yet (the holders tried and left out, a directory that is
 * down), into buf ("" when there is nothing to say); returns the status to give it when its
 * time is up: FERRY_EDIRECTORY while the directory is unreachable, else FERRY_ETIMEDOUT. */
int engine_fetch_why(struct engine *e, const ferry_id *id, char *buf, size_t len);

/* The store sealed o (a local put or a finished transfer): fetches of its id are done. */
void engine_on_sealed(struct engine *e, const struct object *o);
/* o's digest is in, or its restore from the spill directory ended: replies that waited for it
 * can go. */
void engine_on_ready(struct engine *e, const struct object *o);
/* The store freed room: fetches whose space had to wait for spilling ask again. */
void engine_on_room(struct engine *e);
/* A local create of size bytes found no room: when the free bytes and those pinned for peers
 * could hold it, every incoming connection that holds pins is closed, so that the objects pinned
 * (never evicted while pinned) become evictable, at once on tcp, on one-sided transports once
 * their reads in flight are done (drain). The node's own puts come before its peers' transfers,
 * which those peers ask again (of it or another holder): pins of every other object in the
 * arena, within every pin limit, left only holes too small for the node's puts. The bytes that
 * were pinned (0: nothing is closed). */
uint64_t engine_break_pins(struct engine *e, uint64_t size);
/* Whether objects whose pins engine_break_pins broke are still held by their transports (one
 * sided reads in flight, at most the lease): the store's room event follows when the last is
 * let go, so that a create waits for them rather than fail. */
int engine_pins_draining(const struct engine *e);

/* The engine's own counters. */
const struct engine_counters *engine_counters(struct engine *e);
/* Reports every open transport's counters, and the engine's per transport (<name>_failures,
 * <name>_fallbacks for each but the fallback), to fn. */
void engine_report(struct engine *e, xcounter_fn *fn, void *arg);

#endif
