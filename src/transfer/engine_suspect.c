/*
 * engine_suspect.c - a copy that no longer matches the root recorded at its seal.
 *
 * A receiver that finds a chunk of a whole holder's bytes unlike the leaf that holder's REPLY
 * gave refuses it (engine_verify.c) and tells the holder (SUSPECT: the id and the chunk). The
 * holder checks that chunk of its own copy against its own leaf: a copy that differs was
 * rewritten after its seal (a local process mapped the arena writable through its descriptor;
 * libferry's own mappings cannot write sealed bytes), so it is deleted here and withdrawn from
 * the directory, logged with the node that noticed and counted (rewritten_after_seal): no node
 * is served it again. A copy that matches stays (suspects_unfounded): the bytes changed on
 * the way, or the receiver is wrong.
 *
 * Bounds: a check costs one chunk's SHA-256 (1 MiB, about 0.5 ms) on the loop, and a
 * connection gets SUSPECT_MAX of them; later ones are ignored (suspects_ignored). Only a
 * resident, sealed, hashed object is checked; anything else is not a copy this node serves.
 */
#include "transfer/engine_int.h"

/* Checks a connection may ask of this holder in its life. */
#define SUSPECT_MAX 16u

/* 1 when chunk i of o (sealed, resident, hashed) is what its digest says. */
static int chunk_matches(struct engine *e, const struct object *o, uint64_t i)
{
    uint64_t size = o->data_size + o->metadata_size;
    const uint8_t *bytes = e->store->base + o->offset;
    uint8_t leaf[DIGEST_LEN], root[DIGEST_LEN];

    if (digest_leaf(i, bytes + i * (uint64_t)DIGEST_CHUNK, digest_chunk_len(size, i), leaf) < 0)
        return 1; /* OpenSSL failed: nothing is known against the copy */
    if (o->leaves)
        return mac_equal(leaf, o->leaves + i * DIGEST_LEN, DIGEST_LEN);
    return digest_root(o->data_size, o->metadata_size, leaf, 1, root) < 0 ||
           mac_equal(root, o->root, DIGEST_LEN);
}

void eng_suspect_check(struct inconn *ic, const struct wire_msg *m)
{
    struct engine *e = ic->e;
    struct object *o = store_find(e->store, &m->ids[0]);
    char hex[2 * FERRY_ID_SIZE + 1];

    if (ic->suspects >= SUSPECT_MAX) {
        e->counters.suspects_ignored++;
        return;
    }
    ic->suspects++;
    if (!o || !object_resident(o) || !o->hashed ||
        m->chunk >= digest_leaves(o->data_size + o->metadata_size))
        return;
    ferry_id_format(&o->id, hex);
    if (chunk_matches(e, o, m->chunk)) {
        e->counters.suspects_unfounded++;
        log_info("object %s: %s found chunk %" PRIu64 " unlike its digest, and it matches here",
                 hex, ic->hs.node_c, m->chunk);
        return;
    }
    e->counters.rewritten_after_seal++;
    log_warn("object %s: chunk %" PRIu64 " was rewritten after its seal (%s noticed): the copy "
             "is dropped",
             hex, m->chunk, ic->hs.node_c);
    store_delete(e->store, o);
}
