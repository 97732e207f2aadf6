/*
 * engine_split.c - one object fetched in ranges from several holders at once (Mooncake slices a
 * transfer across NICs the same way): a want of at least cfg.split_min recorded bytes, with two
 * or more live holders, is cut into ranges dealt in turn to up to ENGINE_SPLIT_MAX of them
 * (ENGINE_SPLIT_PER_HOLDER each, so that they land about in order). Each range is a part: a want of
 * its own (not in e->wants) that goes through the peers' queues and pulls like any other, asks its
 * holder for its range (WIRE_PULL_RANGES) and lands in the parent's object at its offset. A part
 * whose holder fails moves to another holder of the split; with none left, the parent is fetched
 * whole, the usual way, once its parts are in. Ranges are whole chunks of the digest
 * (common/digest.h): the first reply that matches the record gives the tree (its leaves checked
 * against the recorded root), and each part checks the chunks of its range against their leaves
 * as they land (engine_verify.c), so that a bad chunk names the holder that sent it: its range
 * moves to another holder, and that holder counts as one of other content. An object that a
 * dead connection may still have written into after its chunks were checked is checked again
 * whole after its last range (recheck), so that what is checked is what is sealed.
 *
 * Ownership: a part belongs to the peer that queued or pulls it, and ends (part_end) when its
 * range is in, or dropped; the parent lives while parts_out parts are out or drains of dead
 * connections that may still write into its object are pending (split_settle decides then).
 */
#include "transfer/engine_int.h"

/* The parent is done with its parts and drains: seal, refuse, fetch whole, or let go. */
static void split_settle(struct want *w)
{
    struct engine *e = w->e;
    struct object *here;

    if (w->split.parts_out || w->drains)
        return;
    if (w->done || w->split.failed) {
        if (w->obj && !w->split.leak)
            store_abort(e->store, w->obj);
        w->obj = NULL;
    }
    if (w->done) {
        eng_want_free(w);
    } else if (w->split.failed) {
        e->counters.split_fallbacks++;
        w->split.failed = 0;
        w->no_split = 1;
        w->relayed = 0; /* whole, from a whole holder, as any other */
        if (w->relay)
            w->relay->dealing = 0;
        if (w->ntried >= MAX_TRIED)
            eng_want_fail_all(w);
        else
            eng_want_lookup(w, 1);
    } else if (w->obj) {
        eng_want_received(w); /* every chunk was checked, unless recheck */
    } else if ((here = store_find(e->store, &w->id)) && object_sealed(here)) {
        eng_want_finish(w, 0);
    } else {
        eng_want_retry(w); /* it was being created here; if that is aborted, fetch again */
    }
}

static void part_end(struct want *part)
{
    struct want *w = part->parent;

    eng_check_reset(part);
    free(part);
    w->split.parts_out--;
    eng_relay_deal(w); /* a relayed object's next range, if any */
    split_settle(w);
}

void eng_part_unqueued(struct want *part)
{
    part->parent->split.failed = !part->parent->done;
    part_end(part);
}

/* 1 when node is one of the n peers in out. */
static int split_has(struct peer *const *out, size_t n, const char *node)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(out[i]->node.id, node) == 0)
            return 1;
    return 0;
}

/* The live holders w has not tried, other than this node, at most ENGINE_SPLIT_MAX, connected
 * to (or being connected to); how many in *n. A node listed twice (two runs or addresses in
 * the directory) is taken once: a second eng_peer_get at other addresses would replace, and
 * free, the peer already in out. */
static void split_peers(struct want *w, const struct directory_answer *a, struct peer **out,
                        size_t *n)
{
    struct engine *e = w->e;

    *n = 0;
    for (size_t i = 0; i < a->n && *n < ENGINE_SPLIT_MAX; i++) {
        const char *id = a->nodes[i].id;
        struct peer *p;
        if (a->nodes[i].seq || eng_want_tried(w, id) || strcmp(id, e->node_id) == 0 ||
            split_has(out, *n, id))
            continue;
        if ((p = eng_peer_get(e, &a->nodes[i])))
            out[(*n)++] = p;
    }
}

int eng_split(struct want *w, const struct directory_answer *a)
{
    struct engine *e = w->e;
    struct peer *peers[ENGINE_SPLIT_MAX];
    struct want *parts[ENGINE_SPLIT_RANGES];
    uint64_t chunk;
    size_t n, k;

    if (eng_relay(w, a))
        return 1;
    if (!e->cfg.split_min || w->no_split || !w->has_content || w->size < e->cfg.split_min ||
        w->size < ENGINE_SPLIT_MAX)
        return 0;
    /* The cache may predate holders that came since: large enough to split, ask Redis (a
     * round trip against the transfer of split_min bytes). */
    if (a->cached && a->n < ENGINE_SPLIT_MAX && !w->split.asked) {
        w->split.asked = 1;
        eng_want_lookup(w, 1);
        return 1;
    }
    if (a->n < 2)
        return 0;
    split_peers(w, a, peers, &n);
    if (n < 2)
        return 0;
    /* ENGINE_SPLIT_PER_HOLDER equal ranges per holder (whole chunks of the digest, so that each
     * range's chunks are checked against their leaves on their own; the last takes the rest),
     * dealt in turn. */
    chunk = w->size / (n * ENGINE_SPLIT_PER_HOLDER) / DIGEST_CHUNK * (uint64_t)DIGEST_CHUNK;
    chunk = chunk > ENGINE_SPLIT_CHUNK_MIN ? chunk : ENGINE_SPLIT_CHUNK_MIN;
    for (k = 0; k < n * ENGINE_SPLIT_PER_HOLDER && k * chunk < w->size; k++) {
        uint64_t off = k * chunk, len = w->size - off < chunk ? w->size - off : chunk;
        if (k == n * ENGINE_SPLIT_PER_HOLDER - 1)
            len = w->size - off;
        if (!(parts[k] = eng_part_new(w, (uint32_t)k, off, len))) {
            while (k)
                free(parts[--k]);
            return 0;
        }
    }
    for (w->split.n = 0; w->split.n < n; w->split.n++) {
        snprintf(w->split.holders[w->split.n], sizeof(w->split.holders[0]), "%s",
                 peers[w->split.n]->node.id);
        w->split.seq[w->split.n] = 0;
    }
    eng_split_begin(w, (uint32_t)k);
    w->split.parts_out += (uint32_t)k;
    e->counters.split_fetches++;
    for (size_t i = 0; i < k; i++)
        eng_peer_enqueue(peers[i % n], parts[i]);
    return 1;
}

/* Creates the parent's object once, from the first reply that matches the record: its room is
 * taken only then. Without it, the parts' bytes are dropped and split_settle decides. */
static void split_create(struct want *w, const struct wire_reply_entry *re)
{
    w->split_made = 1;
    /* its chunks are checked by the parts, range by range */
    if (eng_want_create(w, re->data_size, re->metadata_size) == 0)
        w->check.landed = w->check.handed = w->size;
}

int eng_part_reply(struct pentry *pe, const struct wire_reply_entry *re, uint8_t **dst,
                   uint64_t *len)
{
    struct want *part = pe->w, *w = part->parent;
    struct engine *e = part->e;
    uint64_t total = re->data_size + re->metadata_size;
    struct wire_range r = {part->off, part->size};

    if (total < re->data_size)
        return err_set(FERRY_EPROTO, "reply sizes overflow");
    *len = wire_range_cut(&r, total);
    *dst = NULL;
    /* Other bytes than the recorded ones, or other sizes than the object made: dropped. */
    pe->had = (struct content){.size = total};
    memcpy(pe->had.digest, re->digest, DIGEST_LEN);
    pe->other_fault =
        memcmp(re->digest, w->hash, DIGEST_LEN) || total != w->size ? FAULT_OTHER : FAULT_LOST;
    pe->other = pe->other_fault == FAULT_OTHER || (w->obj && re->data_size != w->obj->data_size);
    part->state = WANT_RECEIVING;
    part->dropped = 1; /* until a place for its bytes is found below */
    eng_check_reset(part);
    /* Its range comes (again): not served onward until it is in. */
    eng_relay_have(w, part->off, part->size, 0);
    if (pe->other || w->done || w->split.failed)
        return 0;
    if (!w->split_made && eng_check_tree(w, re) < 0) { /* leaves that do not give the root */
        pe->other = 1;
        pe->other_fault = FAULT_OTHER;
        memset(pe->had.digest, 0, DIGEST_LEN); /* never the record's: not asked again */
        return 0;
    }
    if (!w->split_made)
        split_create(w, re);
    if (w->obj)
        *dst = e->store->base + w->obj->offset + part->off;
    part->dropped = *dst == NULL;
    return 0;
}

void eng_part_failed(struct want *part, const char *why, enum fault fault,
                     const struct content *had)
{
    struct want *w = part->parent;
    struct engine *e = part->e;
    struct peer *p;

    e->counters.transfer_failures++;
    log_warn("a range of an object from %s failed: %s", part->holder, why);
    eng_note_failure(e, part->holder, why);
    eng_want_note_tried(w, part->holder, why, fault, had);
    eng_check_reset(part); /* its range starts again from another holder */
    part->not_yet_ms = 0;
    if (eng_relay_trim(part)) { /* every chunk of it was in (and checked) after all */
        part_end(part);
        return;
    }
    /* Each holder is noted once, so a range moves at most split.n - 1 times; with the list of
     * those tried full, a holder noted could be forgotten: no more moves then. */
    for (uint32_t i = 0; i < w->split.n && !w->done && !w->split.failed && w->ntried < MAX_TRIED;
         i++) {
        if (eng_want_tried(w, w->split.holders[i]) || !(p = eng_peer_find(e, w->split.holders[i])))
            continue;
        e->counters.ranges_moved++;
        part->relayed = w->split.seq[i] != 0;
        eng_peer_enqueue(p, part);
        return;
    }
    w->split.failed = !w->done; /* no holder of the split left: fetched whole, after */
    part_end(part);
}

void eng_part_in(struct peer *p, struct pentry *pe, struct want *part)
{
    char why[96];
    int rc;

    if (pe->other) {
        if (pe->other_fault == FAULT_OTHER)
            snprintf(why, sizeof(why), "holds other content (digest %02x%02x%02x%02x...)",
                     pe->had.digest[0], pe->had.digest[1], pe->had.digest[2], pe->had.digest[3]);
        else
            snprintf(why, sizeof(why), "splits data and metadata otherwise than the object made");
        eng_part_failed(part, why, pe->other_fault, &pe->had);
        return;
    }
    eng_breaker_ok(p->e, p->node.id, p->conn->type);
    if (part->dropped) { /* its parent is done, or fetched whole: nothing of it to check */
        part_end(part);
        return;
    }
    if ((rc = eng_check_rest(part)) < 0)
        eng_part_failed(part, "no memory to check its range", FAULT_LOST, NULL);
    else if (rc == 0)
        eng_part_checked(part);
    /* else its checks are in flight: eng_part_checked follows */
}

void eng_part_checked(struct want *part)
{
    char why[96];

    if (part->check.bad_chunk != NO_CHUNK) {
        /* Its holder gave the recorded root and other bytes: a liar, never asked again by this
         * fetch (FAULT_REAL; FAULT_OTHER would ask it again should the record change). */
        snprintf(why, sizeof(why), "chunk %" PRIu64 " of its range does not match its digest",
                 part->check.bad_chunk);
        eng_part_failed(part, why, FAULT_REAL, NULL);
        return;
    }
    part->e->counters.ranges_in++;
    eng_relay_have(part->parent, part->off, part->size, 1);
    part_end(part);
}

static void on_part_drained(void *arg)
{
    struct want *w = arg;

    w->drains--;
    split_settle(w);
}

void eng_part_drain(struct xconn *c, struct want *part)
{
    struct want *w = part->parent;
    int rc;

    if (!w->obj)
        return;
    if ((rc = c->type->drain(c, on_part_drained, w)) == 0) {
        w->drains++;
        w->check.recheck = 1; /* a late write may change bytes already checked */
        return;
    }
    if (rc != FERRY_ENOSYS) { /* a one-sided read may still land: keep the object */
        log_error("out of memory: keeping an object a peer may still be writing");
        w->split.leak = 1;
        w->split.failed = 1;
    }
}
