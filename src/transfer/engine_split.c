/*
 * engine_split.c - one object fetched in ranges from several holders at once (Mooncake slices a
 * transfer across NICs the same way): a want of at least cfg.split_min recorded bytes, with two
 * or more live holders, is cut into ranges dealt in turn to up to ENGINE_SPLIT_MAX of them
 * (ENGINE_SPLIT_PER_HOLDER each, so that they land about in order). Each range is a part: a want of
 * its own (not in e->wants) that goes through the peers' queues and pulls like any other, asks its
 * holder for its range (WIRE_PULL_RANGES) and lands in the parent's object at its offset. A part
 * whose holder fails moves to another holder of the split; with none left, the parent is fetched
 * whole, the usual way, once its parts are in. The whole object is hashed over the prefix whose
 * bytes are all in, as ranges land (each range's bytes once those before them are in), the rest
 * after the last range, and checked against the record. A range that moves to another holder once
 * the digest has taken some of it, or that a dead connection may still write into, breaks the
 * streamed digest: the object is then hashed after its last range, so that what is hashed is what
 * is sealed.
 *
 * Ownership: a part belongs to the peer that queued or pulls it, and ends (part_end) when its
 * range is in, or dropped; the parent lives while parts_out parts are out or drains of dead
 * connections that may still write into its object are pending (split_settle decides then).
 */
#include "transfer/engine_int.h"

/* A part's retry timer is never started: it is initialised only so that freeing is safe. */
static void part_no_retry(struct loop *l, struct loop_timer *t) {}

/* Takes into the parent's digest the landed bytes right after those taken, across ranges, up
 * to budget bytes (bounded work per landed call; unbounded once every range is in). */
static void split_advance(struct want *w, uint64_t budget)
{
    uint32_t i = 0;

    while (budget && w->stream && !w->stream_broken && w->obj) {
        uint64_t at = w->streamed + w->piece_len, avail, take;
        while (i < w->nranges && at >= w->range_off[i] + w->range_len[i])
            i++;
        if (i == w->nranges || at < w->range_off[i])
            return;
        avail = w->range_off[i] + w->range_landed[i] - at;
        if (w->range_off[i] + w->range_landed[i] <= at)
            return; /* waits for this range's next bytes */
        take = avail < budget ? avail : budget;
        eng_stream_landed(w, w->e->store->base + w->obj->offset + at, take);
        budget -= take;
    }
}

/* The parent is done with its parts and drains: seal, refuse, fetch whole, or let go. */
static void split_settle(struct want *w)
{
    struct engine *e = w->e;
    struct object *here;

    if (w->parts_out || w->drains)
        return;
    if (w->done || w->split_failed) {
        if (w->obj && !w->split_leak)
            store_abort(e->store, w->obj);
        w->obj = NULL;
    }
    if (w->done) {
        eng_want_free(w);
    } else if (w->split_failed) {
        e->counters.split_fallbacks++;
        w->split_failed = 0;
        w->no_split = 1;
        if (w->ntried >= MAX_TRIED)
            eng_want_fail_all(w);
        else
            eng_want_lookup(w, 1);
    } else if (w->obj) {
        split_advance(w, UINT64_MAX); /* every range is in */
        eng_want_received(w);
    } else if ((here = store_find(e->store, &w->id)) && here->state == FERRY_STATE_SEALED) {
        eng_want_finish(w, 0);
    } else {
        eng_want_retry(w); /* it was being created here; if that is aborted, fetch again */
    }
}

static void part_end(struct want *part)
{
    struct want *w = part->parent;

    free(part);
    w->parts_out--;
    split_settle(w);
}

void eng_part_unqueued(struct want *part)
{
    part->parent->split_failed = !part->parent->done;
    part_end(part);
}

void eng_part_close(struct want *part)
{
    struct want *w = part->parent;

    free(part);
    if (--w->parts_out == 0 && w->done && !w->drains)
        eng_want_free(w);
}

static struct want *part_new(struct want *w, uint32_t range, uint64_t off, uint64_t len)
{
    struct want *part = calloc(1, sizeof(*part));

    if (!part)
        return NULL;
    part->e = w->e;
    part->id = w->id;
    part->parent = w;
    part->range = range;
    part->off = off;
    part->size = len;
    part->has_content = 1; /* its size counts in its pull's bytes */
    part->born_ms = w->born_ms;
    part->born_ns = w->born_ns;
    loop_timer_init(&part->retry, part_no_retry, part);
    return part;
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
        if (eng_want_tried(w, id) || strcmp(id, e->node_id) == 0 || split_has(out, *n, id))
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

    if (!e->cfg.split_min || w->no_split || !w->has_content || w->size < e->cfg.split_min ||
        w->size < ENGINE_SPLIT_MAX)
        return 0;
    /* The cache may predate holders that came since: large enough to split, ask Redis (a
     * round trip against the transfer of split_min bytes). */
    if (a->cached && a->n < ENGINE_SPLIT_MAX && !w->split_asked) {
        w->split_asked = 1;
        eng_want_lookup(w, 1);
        return 1;
    }
    if (a->n < 2)
        return 0;
    split_peers(w, a, peers, &n);
    if (n < 2)
        return 0;
    /* ENGINE_SPLIT_PER_HOLDER equal ranges per holder (whole pages, at least
     * ENGINE_SPLIT_CHUNK_MIN; the last takes the rest), dealt in turn: the ranges come in about
     * in order, so the digest taken over the prefix keeps up with them. */
    chunk = (w->size / (n * ENGINE_SPLIT_PER_HOLDER) + 4095) & ~(uint64_t)4095;
    chunk = chunk > ENGINE_SPLIT_CHUNK_MIN ? chunk : ENGINE_SPLIT_CHUNK_MIN;
    for (k = 0; k < ENGINE_SPLIT_RANGES && k * chunk < w->size; k++) {
        uint64_t off = k * chunk, len = w->size - off < chunk ? w->size - off : chunk;
        if (k == ENGINE_SPLIT_RANGES - 1)
            len = w->size - off;
        if (!(parts[k] = part_new(w, (uint32_t)k, off, len))) {
            while (k)
                free(parts[--k]);
            return 0;
        }
    }
    w->state = WANT_RECEIVING;
    w->digest = w->hash; /* every part's holder gives the recorded digest, or is not taken */
    w->split_made = 0;
    w->nranges = (uint32_t)k;
    for (size_t i = 0; i < k; i++) {
        w->range_off[i] = parts[i]->off;
        w->range_len[i] = parts[i]->size;
        w->range_landed[i] = 0;
        w->parts_out++;
    }
    for (w->nsplit = 0; w->nsplit < n; w->nsplit++)
        snprintf(w->split[w->nsplit], sizeof(w->split[0]), "%s", peers[w->nsplit]->node.id);
    /* For the log and a failed check: every holder of the split. */
    snprintf(w->holder, sizeof(w->holder), "%.40s and %u more", peers[0]->node.id,
             (unsigned)(n - 1));
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
    if (eng_want_create(w, re->data_size, re->metadata_size) == 0)
        eng_stream_start(w->e, w, w->size, re->data_size);
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
    pe->had = (struct content){total, re->digest};
    pe->other_fault = re->digest != w->hash || total != w->size ? FAULT_OTHER : FAULT_LOST;
    pe->other = pe->other_fault == FAULT_OTHER || (w->obj && re->data_size != w->obj->data_size);
    part->state = WANT_RECEIVING;
    if (pe->other || w->done || w->split_failed)
        return 0;
    if (!w->split_made)
        split_create(w, re);
    if (w->obj)
        *dst = e->store->base + w->obj->offset + part->off;
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
    /* Its range starts again from another holder: bytes of it already taken into the digest
     * may be overwritten. */
    if (w->streamed + w->piece_len > w->range_off[part->range])
        w->stream_broken = 1;
    w->range_landed[part->range] = 0;
    /* Each holder is noted once, so a range moves at most nsplit - 1 times; with the list of
     * those tried full, a holder noted could be forgotten: no more moves then. */
    for (uint32_t i = 0; i < w->nsplit && !w->done && !w->split_failed && w->ntried < MAX_TRIED;
         i++) {
        if (eng_want_tried(w, w->split[i]) || !(p = eng_peer_find(e, w->split[i])))
            continue;
        e->counters.ranges_moved++;
        eng_peer_enqueue(p, part);
        return;
    }
    w->split_failed = !w->done; /* no holder of the split left: fetched whole, after */
    part_end(part);
}

void eng_part_in(struct peer *p, struct pentry *pe, struct want *part)
{
    char why[96];

    if (pe->other) {
        if (pe->other_fault == FAULT_OTHER)
            snprintf(why, sizeof(why), "holds other content (digest %016" PRIx64 ")",
                     pe->had.digest);
        else
            snprintf(why, sizeof(why), "splits data and metadata otherwise than the object made");
        eng_part_failed(part, why, pe->other_fault, &pe->had);
        return;
    }
    eng_breaker_ok(p->e, p->node.id, p->conn->type);
    p->e->counters.ranges_in++;
    part->parent->range_landed[part->range] = part->size; /* all in, told or not */
    part_end(part);
}

void eng_part_landed(struct want *part, const uint8_t *p, size_t n)
{
    struct want *w = part->parent;
    uint64_t *landed = &w->range_landed[part->range];

    if (!w->stream || w->stream_broken)
        return;
    /* In order within the range, from its start: anything else breaks the streamed digest. */
    if (!w->obj || p != w->e->store->base + w->obj->offset + part->off + *landed ||
        n > part->size - *landed) {
        w->stream_broken = 1;
        return;
    }
    *landed += n;
    split_advance(w, 2 * (uint64_t)n + STREAM_PIECE);
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
        w->stream_broken = 1; /* a late write may change bytes already hashed */
        return;
    }
    if (rc != FERRY_ENOSYS) { /* a one-sided read may still land: keep the object */
        log_error("out of memory: keeping an object a peer may still be writing");
        w->split_leak = 1;
        w->split_failed = 1;
    }
}
