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

#include "directory/directory.h"
#include "server/loop.h"
#include "store/store.h"

struct engine;

struct engine_config {
    const char *node_id;
    const char *listen_addr; /* HOST:PORT for peers */
    const uint8_t *secret;   /* the cluster secret, or NULL */
    size_t secret_len;
    int verify; /* ask holders for digests and check them before sealing */
};

struct engine_counters {
    uint64_t connections_opened, connections_accepted;
    uint64_t transfers_in, transfers_out, transfer_failures;
    uint64_t bytes_in, bytes_out;
    uint64_t peer_errors;
};

/* status: 0 when the object is sealed here, else why not (enum ferry_error). */
typedef void engine_fetch_fn(void *ctx, uint32_t index, int status);

/* Listens on cfg->listen_addr. dir may be NULL (then every fetch fails: FERRY_EDIRECTORY). */
int engine_open(struct engine **out, struct loop *l, struct store *st, struct directory *dir,
                const struct engine_config *cfg);
/* Closes every connection (aborting partial objects, unpinning served ones) and frees. */
void engine_close(struct engine *e);

/* Makes id local: fn(ctx, index, status) is called once, later, unless engine_cancel(ctx)
 * comes first. Does not check whether id is local already (the caller does). FERRY_ENOMEM. */
int engine_fetch(struct engine *e, const ferry_id *id, engine_fetch_fn *fn, void *ctx,
                 uint32_t index);
/* Forgets every callback registered with ctx. A transfer already under way finishes. */
void engine_cancel(struct engine *e, void *ctx);

/* The store sealed o (a local put or a finished transfer): fetches of its id are done. */
void engine_on_sealed(struct engine *e, const struct object *o);
/* o's digest is in: replies that waited for it can go. */
void engine_on_hashed(struct engine *e, const struct object *o);

const struct engine_counters *engine_counters(const struct engine *e);

#endif
