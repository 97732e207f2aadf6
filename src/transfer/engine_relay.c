/*
 * engine_relay.c - one object to many nodes at the links' rate: a node receiving an object of at
 * least relay_min recorded bytes is findable as a partial holder (directory_relay: p:<node> in
 * the record, with its place, seq, among the object's receivers), and serves the ranges it has
 * to the others while it receives the rest (engine_hold.c answers them from the copy being
 * received, a range not in yet waiting while the copy makes progress). A receiver takes its
 * ranges, RELAY_WINDOW at a time, from the
 * receiver that began just before it (the highest seq below its own), so nodes that ask for an
 * object together form a chain that nobody planned: each link carries the object once, and
 * the last node finishes about one range per node after a lone receiver would. Its ranges move,
 * when that node fails, to the receivers before it, then to the whole holders. One that began
 * first is fetched as without relays (whole from one holder, or split over several), and its
 * copy serves what has landed all the same: a lone receiver works as before.
 *
 * What a partial copy serves: chunks that are in, and checked against the recorded tree when
 * they came from a partial holder (a relayed part checks its range as it lands, like
 * --verify); chunks from a whole holder are served as a holder serves its sealed copy (checked
 * with --verify). A range that comes again (its holder failed) is not served until it is in.
 *
 * Ownership: relay and its have belong to the want (freed with it); a copy served onward is pinned
 * (store_ref), and an abort of it leaves its memory to the last pin (store_abort).
 */
#include "transfer/engine_int.h"

/* Whether chunk i of w's copy is in. */
static int have_chunk(const struct want *w, uint64_t i)
{
    return (w->relay->have[i / 8] >> (i % 8)) & 1;
}

void eng_relay_have(struct want *t, uint64_t off, uint64_t len, int set)
{
    struct want_relay *r = t->relay;
    uint64_t end = (off + len + DIGEST_CHUNK - 1) / DIGEST_CHUNK;

    if (!r || !r->have)
        return;
    end = end < digest_leaves(t->size) ? end : digest_leaves(t->size);
    for (uint64_t i = off / DIGEST_CHUNK; i < end; i++) {
        if (set)
            r->have[i / 8] |= (uint8_t)(1u << (i % 8));
        else
            r->have[i / 8] &= (uint8_t) ~(1u << (i % 8));
    }
    if (set) {
        r->ms = loop_now_ms();
        t->e->hooks->copy_changed(t->e, &t->id);
    }
}

void eng_relay_made(struct want *w)
{
    struct want_relay *r = w->relay;

    if (!r)
        return;
    free(r->have);
    r->have = NULL;
    r->ms = loop_now_ms();
    if (r->seq) /* for the recorded size, which the object's sizes equal */
        r->have = calloc(digest_leaves(w->size) / 8 + 1, 1); /* without: nothing is served */
}

void eng_relay_landed(struct want *w, const uint8_t *p, size_t n)
{
    struct want *t = w->parent ? w->parent : w;
    uint64_t off = w->parent ? w->off : 0, size, done, in;

    if (!t->relay || !t->relay->have || !t->obj || eng_checked(w))
        return;
    size = w->parent ? w->size : t->obj->data_size + t->obj->metadata_size;
    /* In order from the range's first byte, as tcp and the fabric tell it; a part's bytes told
     * otherwise are set once its range is all in (eng_part_checked), a whole object's at its
     * seal. */
    if (p != w->e->store->base + t->obj->offset + off + w->check.rlanded ||
        n > size - w->check.rlanded)
        return;
    done = w->check.rlanded / DIGEST_CHUNK * DIGEST_CHUNK; /* whole chunks in before */
    w->check.rlanded += n;
    in = w->check.rlanded == size ? size : w->check.rlanded / DIGEST_CHUNK * DIGEST_CHUNK;
    if (in > done)
        eng_relay_have(t, off + done, in - done, 1);
}

void eng_relay_end(struct want *w)
{
    struct want_relay *r = w->relay;

    if (!r)
        return;
    if (r->maybe) {
        if (w->e->dir) /* the script may have run though its answer never came */
            directory_unrelay(w->e->dir, &w->id);
        w->e->hooks->copy_changed(w->e, &w->id); /* what waits for its copy: sealed, or not here */
    }
    r->seq = 0;
    r->maybe = r->dealing = 0;
}

struct want *eng_relay_source(struct engine *e, const ferry_id *id)
{
    struct want *w = idmap_get(&e->wants, id);

    /* Asking too: the directory lists it once the script ran, and a receiver after it may ask
     * before the answer is back here. */
    return w && w->relay && (w->relay->seq || w->relay->asking) && !w->done ? w : NULL;
}

int eng_relay_covers(const struct want *w, uint64_t off, uint64_t len)
{
    uint64_t size;

    if (!w->obj || !w->relay || !w->relay->have)
        return 0; /* not made yet: its first reply is on its way */
    size = w->obj->data_size + w->obj->metadata_size;
    if (off >= size || len == 0)
        return 1; /* nothing to send (wire_range_cut) */
    len = size - off < len ? size - off : len;
    for (uint64_t i = off / DIGEST_CHUNK; i <= (off + len - 1) / DIGEST_CHUNK; i++)
        if (!have_chunk(w, i))
            return 0;
    return 1;
}

static void on_relayed(void *arg, const struct directory_answer *a)
{
    struct want *w = arg;

    w->relay->asking = 0;
    if (a->status == 0 && a->count) {
        w->relay->seq = a->count;
        w->relay->ms = loop_now_ms();
        w->e->counters.relays++;
    } else {
        w->relay_off = 1; /* the record changed, or the directory is away: fetched as usual */
        w->e->hooks->copy_changed(w->e, &w->id); /* what waits for its copy is not here */
    }
    eng_want_lookup(w, 1);
}

/* Orders sources: partial holders by seq, latest first, before whole holders. */
static int source_cmp(const void *pa, const void *pb)
{
    const struct directory_node *a = *(const struct directory_node *const *)pa;
    const struct directory_node *b = *(const struct directory_node *const *)pb;

    if (!a->seq != !b->seq)
        return a->seq ? -1 : 1;
    return a->seq < b->seq ? 1 : a->seq > b->seq ? -1 : strcmp(a->id, b->id);
}

/* Whether nodes lists node as a whole holder. */
static int listed_whole(const struct directory_node *nodes, size_t n, const char *node)
{
    for (size_t i = 0; i < n; i++)
        if (!nodes[i].seq && strcmp(nodes[i].id, node) == 0)
            return 1;
    return 0;
}

size_t eng_relay_order(const struct directory_node *nodes, size_t n, const char *self, uint64_t seq,
                       int (*skip)(const void *ctx, const char *node), const void *ctx,
                       const struct directory_node **out)
{
    size_t k = 0, m = 0;

    for (size_t i = 0; i < n; i++) {
        const struct directory_node *h = &nodes[i];
        if (strcmp(h->id, self) != 0 && !(skip && skip(ctx, h->id)) &&
            !(h->seq && (h->seq >= seq || listed_whole(nodes, n, h->id))))
            out[k++] = h;
    }
    qsort(out, k, sizeof(*out), source_cmp);
    for (size_t j = 0; j < k; j++) { /* a node listed twice (two runs) is asked once */
        int seen = 0;
        for (size_t q = 0; q < m && !seen; q++)
            seen = strcmp(out[q]->id, out[j]->id) == 0;
        if (!seen)
            out[m++] = out[j];
    }
    return m && out[0]->seq ? m : 0;
}

static int tried(const void *ctx, const char *node)
{
    return eng_want_tried(ctx, node);
}

/* The holders of w's ranges, in the order eng_relay_order gives, connected to (or being
 * connected to), at most ENGINE_SPLIT_MAX. */
static size_t relay_sources(struct want *w, const struct directory_answer *a, struct peer **out)
{
    const struct directory_node **c = malloc((a->n ? a->n : 1) * sizeof(*c));
    size_t nc, n = 0;

    if (!c)
        return 0;
    nc = eng_relay_order(a->nodes, a->n, w->e->node_id, w->relay->seq, tried, w, c);
    for (size_t i = 0; i < nc && n < ENGINE_SPLIT_MAX; i++) {
        struct peer *p = eng_peer_get(w->e, c[i]);
        if (!p)
            continue; /* cannot be connected to now: the next */
        w->split.seq[n] = c[i]->seq;
        snprintf(w->split.holders[n], sizeof(w->split.holders[0]), "%s", c[i]->id);
        out[n++] = p;
    }
    free(c);
    return n;
}

/* The first holder of w's split that w has not tried and is connected to (or being connected
 * to): its index, or -1. */
static int next_holder(const struct want *w, struct peer **p)
{
    for (uint32_t i = 0; i < w->split.n; i++)
        if (!eng_want_tried(w, w->split.holders[i]) &&
            (*p = eng_peer_find(w->e, w->split.holders[i])))
            return (int)i;
    return -1;
}

void eng_relay_deal(struct want *w)
{
    struct want_relay *r = w->relay;
    struct peer *p;
    int i;

    while (r && r->dealing && !w->done && !w->split.failed && r->next < w->split.nranges &&
           w->split.parts_out < RELAY_WINDOW) {
        uint64_t off = (uint64_t)r->next * RELAY_RANGE;
        uint64_t len = w->size - off < RELAY_RANGE ? w->size - off : RELAY_RANGE;
        struct want *part;
        if ((i = next_holder(w, &p)) < 0 || eng_peer_reserve(p) < 0 ||
            !(part = eng_part_new(w, r->next, off, len))) {
            w->split.failed = 1; /* no holder left, or no memory: what is out comes in, then
                                  * the rest whole (split_settle) */
            return;
        }
        r->next++;
        w->split.parts_out++;
        part->relayed = w->split.seq[i] != 0;
        eng_peer_enqueue(p, part);
    }
}

int eng_relay_trim(struct want *part)
{
    struct want *w = part->parent;
    uint64_t skip = 0;

    /* drains: a dead connection may still write into what is in */
    if (!w->relay || !w->relay->have || w->drains)
        return 0;
    while (skip < part->size && have_chunk(w, (part->off + skip) / DIGEST_CHUNK))
        skip += DIGEST_CHUNK;
    skip = skip < part->size ? skip : part->size;
    part->off += skip;
    part->size -= skip;
    return part->size == 0;
}

int eng_relay(struct want *w, const struct directory_answer *a)
{
    struct engine *e = w->e;
    struct peer *peers[ENGINE_SPLIT_MAX];
    size_t n;

    if (!e->dir || w->relay_off || !e->cfg.relay_min || w->no_split || !w->has_content ||
        w->size < e->cfg.relay_min)
        return 0;
    if (!w->relay && !(w->relay = calloc(1, sizeof(*w->relay))))
        return 0; /* fetched as usual */
    if (!w->relay->seq) {
        if (w->relay->asking)
            return 1;
        if (directory_relay(e->dir, &w->id, w->size, w->hash, on_relayed, w) < 0)
            return 0;
        w->relay->asking = w->relay->maybe = 1;
        w->relay->ms = loop_now_ms();
        w->state = WANT_LOOKUP;
        return 1;
    }
    /* Without a receiver before it, from the whole holders as usual (whole, or split): its
     * copy still serves what has landed. */
    if ((n = relay_sources(w, a, peers)) == 0 || !w->split.seq[0])
        return 0;
    w->split.n = (uint32_t)n;
    eng_split_begin(w, (uint32_t)((w->size + RELAY_RANGE - 1) / RELAY_RANGE));
    /* Its whole-object checks (a late write's recheck, an object of one chunk) are made as for
     * --verify: its ranges come from copies nobody else checked. */
    w->relayed = 1;
    w->relay->next = 0;
    w->relay->dealing = 1;
    eng_relay_deal(w);
    if (w->split.parts_out)
        return 1;
    /* Not even one range out (no memory): fetched as usual. */
    w->relay->dealing = w->split.failed = w->relayed = 0;
    w->split.n = 0;
    return 0;
}
