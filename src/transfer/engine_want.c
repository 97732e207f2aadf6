/*
 * engine_want.c - the wants of the transfer engine (one per id being fetched): the fetch API,
 * lookups of holders and the choice among them, the holders tried and why, retries, room in
 * the store, and the seal of what arrived. The bytes come through peers (engine_peer.c);
 * their check is engine_verify.c's, objects in ranges engine_split.c's.
 */
#include "transfer/engine_int.h"

void eng_want_free(struct want *w)
{
    struct engine *e = w->e;

    eng_check_reset(w);
    free(w->check.leaves);
    if (w->relay)
        free(w->relay->have);
    free(w->relay);
    if (w->hint)
        eng_hint_put(w->hint);
    loop_timer_stop(e->loop, &w->retry);
    loop_timer_stop(e->loop, &w->orphan);
    if (e->dir)
        directory_cancel(e->dir, w);
    while (w->waiters) {
        struct waiter *x = w->waiters;
        w->waiters = x->next;
        free(x);
    }
    free(w);
}

/* ---- between a client's fetch slices ---- */

/* A delete kept for the next fetch slice of its id. */
struct slice_delete {
    uint64_t until; /* loop_now_ms() past which it is forgotten */
    char by[DIRECTORY_NODE_ID_MAX + 1];
};

/* Frees m's values and m. */
static void slices_clear(idmap *m)
{
    void *v;
    size_t pos = 0;

    while ((v = idmap_next(m, &pos, NULL)))
        free(v);
    idmap_free(m);
}

void eng_slices_free(struct engine *e)
{
    slices_clear(&e->slice_ends);
    slices_clear(&e->slice_deletes);
}

/* Keeps value for id in m (replacing one kept), at most SLICE_KEPT ids; value is m's or freed. */
static void slice_keep(idmap *m, const ferry_id *id, void *value)
{
    free(idmap_remove(m, id));
    if (m->count >= SLICE_KEPT)
        slices_clear(m);
    if (idmap_put(m, id, value) < 0)
        free(value);
}

/* A fetch of id ended with nobody waiting: its client may be between two slices. */
static void slice_end(struct engine *e, const ferry_id *id)
{
    uint64_t *at = malloc(sizeof(*at));

    if (!at)
        return;
    *at = loop_now_ms();
    slice_keep(&e->slice_ends, id, at);
}

/* A delete of id heard now, by node: kept for the next slice when a fetch of id is waiting for
 * nobody (w, without waiters) or ended so within the orphan grace. */
static void slice_deleted(struct engine *e, const ferry_id *id, const struct want *w,
                          const char *node)
{
    const uint64_t *ended = w ? NULL : idmap_get(&e->slice_ends, id);
    uint64_t now = loop_now_ms();
    struct slice_delete *d;

    if (w ? w->waiters != NULL : !ended || *ended + e->timers.orphan_ms <= now)
        return;
    if (!(d = malloc(sizeof(*d))))
        return;
    d->until = now + e->timers.orphan_ms;
    snprintf(d->by, sizeof(d->by), "%s", node);
    slice_keep(&e->slice_deletes, id, d);
}

/* The delete kept for id's next slice, taken (once): FERRY_ENOENT saying so, or 0. */
static int slice_delete_take(struct engine *e, const ferry_id *id)
{
    struct slice_delete *d = e->slice_deletes.count ? idmap_remove(&e->slice_deletes, id) : NULL;
    int rc = 0;

    if (d && d->until > loop_now_ms())
        rc = err_set(FERRY_ENOENT, "deleted cluster-wide (by node %s)", d->by);
    free(d);
    return rc;
}

/* ---- wants ---- */

/* Answers every waiter and retires the want; its record lives on while a pull names it. */
void eng_want_finish(struct want *w, int status)
{
    struct waiter *x;

    if (w->done)
        return;
    w->done = 1;
    if (!w->waiters && !w->parent)
        slice_end(w->e, &w->id);
    idmap_remove(&w->e->wants, &w->id);
    w->e->hooks->want_ended(w);
    while ((x = w->waiters)) {
        w->waiters = x->next;
        x->fn(x->ctx, x->index, status);
        free(x);
    }
    if (!w->entry && !w->queued && !w->busy && !w->split.parts_out && !w->drains)
        eng_want_free(w);
}

int eng_want_tried(const struct want *w, const char *node)
{
    for (int i = 0; i < w->ntried; i++) {
        if (strcmp(w->tried[i].node, node) == 0)
            return 1;
    }
    return 0;
}

/* What went wrong so far, for the user: "a: refused: wrong cluster secret; b: gone (...)". */
static void want_reasons(const struct want *w, char *buf, size_t len)
{
    size_t at = 0;

    buf[0] = '\0';
    for (int i = 0; i < w->ntried && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s: %s", at ? "; " : "", w->tried[i].node,
                               w->tried[i].why);
    if (w->gone[0] && at < len)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "; " : "", w->gone);
    if (w->dir_down && at < len)
        at += (size_t)snprintf(buf + at, len - at, "%sthe directory is unreachable%s%s",
                               at ? "; " : "", directory_down_why(w->e->dir)[0] ? ": " : "",
                               directory_down_why(w->e->dir));
    /* Asked, not answered yet (a connection to a dead node may take its time to fail): the
     * holder is named, not taken for absent. */
    if (!at && w->holder[0])
        snprintf(buf, len, "no answer yet from %s, which the directory lists as a holder",
                 w->holder);
}

/* Fails w with FERRY_ETRANSFER and every reason. */
void eng_want_fail_all(struct want *w)
{
    char why[512];

    want_reasons(w, why, sizeof(why));
    eng_want_finish(w, err_set(FERRY_ETRANSFER, "transfer failed from every holder: %s", why));
}

void eng_want_note_tried(struct want *w, const char *node, const char *why, enum fault fault,
                         const struct content *had)
{
    struct tried *t = NULL;

    if (fault != FAULT_OTHER) /* only a reply of other content says what its holder has */
        had = NULL;
    for (int i = 0; i < w->ntried && !t; i++) /* once per holder: the latest reason */
        if (strcmp(w->tried[i].node, node) == 0)
            t = &w->tried[i];
    if (t) {
        /* A real failure stays; other content outlasts a loss. */
        if (t->fault == FAULT_REAL || fault == FAULT_REAL)
            fault = FAULT_REAL;
        else if (t->fault == FAULT_OTHER)
            fault = FAULT_OTHER;
    } else {
        t = &w->tried[w->ntried < MAX_TRIED ? w->ntried++ : MAX_TRIED - 1];
        snprintf(t->node, sizeof(t->node), "%s", node);
    }
    snprintf(t->why, sizeof(t->why), "%s", why);
    t->fault = fault;
    if (had)
        t->had = *had;
}

/* A record that changes to anything but what a holder of other content said it had, as a writer
 * of the directory could make it do at every lookup, asks it nothing. */
void eng_want_forget(struct want *w, enum fault fault, const struct content *rec)
{
    int kept = 0;

    for (int i = 0; i < w->ntried; i++) {
        const struct tried *t = &w->tried[i];
        if (t->fault != fault ||
            (rec && (t->had.size != rec->size || memcmp(t->had.digest, rec->digest, DIGEST_LEN))))
            w->tried[kept++] = *t;
    }
    w->ntried = kept;
}

/* The holder in w->holder failed as fault says: note why, and ask for the next one. */
void eng_want_failed_holder(struct want *w, const char *why, enum fault fault,
                            const struct content *had)
{
    struct engine *e = w->e;
    struct want *root = w->parent ? w->parent : w;

    if (fault == FAULT_UNREACHED)
        fault = ++root->unreached < UNREACHED_MAX ? FAULT_LOST : FAULT_REAL;
    if (w->parent) {
        e->hooks->part_failed(w, why, fault, had);
        return;
    }
    e->counters.transfer_failures++;
    log_warn("transfer of an object from %s failed: %s; trying the next holder", w->holder, why);
    eng_note_failure(e, w->holder, why);
    if (w->done) {
        eng_want_free(w);
        return;
    }
    if (w->hinted) {
        /* The location's node did not give it: a miss, not a holder the lookup must skip (a
         * stale location of a restarted node names its id in another run). */
        w->hinted = 0;
        e->counters.fetch_hint_misses++;
        eng_want_lookup(w, 1);
        return;
    }
    eng_want_note_tried(w, w->holder, why, fault, had);
    if (w->ntried == MAX_TRIED) {
        eng_want_fail_all(w);
        return;
    }
    eng_want_lookup(w, 1);
}

static void on_holders(void *arg, const struct directory_answer *a);
static int deleted_since(const struct engine *e, const ferry_id *id, uint64_t since);

/* Whether a location may stand in for the directory for id: not when a delete of id was heard
 * lately (the located node may not have heard it yet, and would give the deleted copy back),
 * nor when this node is connected to the located node's id in another run (a stale location:
 * its handshake would fail, and count against the live one). */
static const struct directory_node *hint_node(struct engine *e, const ferry_id *id,
                                              const struct directory_node *at)
{
    const struct peer *p = eng_peer_find(e, at->id);

    if (deleted_since(e, id, 0) || (p && p->node.inc != at->inc))
        return NULL;
    return p ? &p->node : at; /* a connected peer as it is: its addresses are never replaced */
}

/* Asks the node of w's location as if a lookup had listed it alone, content unknown: when it
 * fails (gone, restarted, without the object, or not the node it says), or cannot be reached,
 * eng_want_failed_holder has the directory asked. */
static void hint_ask(struct want *w)
{
    struct hint *h = w->hint;
    const struct directory_node *at = hint_node(w->e, &w->id, &h->node);
    struct directory_node node;
    struct directory_answer a = {.n = 1, .nodes = &node};

    w->hint = NULL;
    if (!at) {
        eng_hint_put(h);
        eng_want_lookup(w, 0);
        return;
    }
    node = *at;
    node.seq = 0; /* a whole holder, whatever a peer's node says (a relay source's is not) */
    w->hinted = 1;
    w->e->counters.fetch_hints++;
    on_holders(w, &a); /* may free w */
    eng_hint_put(h);
}

struct hint *eng_hint_get(struct engine *e, const struct directory_node *at)
{
    struct hint *h = e->hint_last;

    if (h && memcmp(&h->node, at, sizeof(*at)) == 0) {
        h->refs++;
        return h;
    }
    if (!(h = malloc(sizeof(*h))))
        return NULL;
    h->refs = 2; /* the want's, and hint_last's */
    h->node = *at;
    if (e->hint_last)
        eng_hint_put(e->hint_last);
    e->hint_last = h;
    return h;
}

void eng_hint_put(struct hint *h)
{
    if (--h->refs == 0)
        free(h);
}

static void on_retry(struct loop *l, struct loop_timer *t)
{
    struct want *w = t->arg;

    if (w->hint)
        hint_ask(w);
    else
        eng_want_lookup(w, 1);
}

/* Nobody holds the object yet: ask again later (with backoff), until the waiters give up.
 * Holders that had lost it may be asked again then. A want whose create waits for room is
 * asked again by engine_on_room, or after ROOM_WAIT_MS: with the backoff, its whole object
 * would be pulled, and dropped, every 200 ms while spilling is under way. */
void eng_want_retry(struct want *w)
{
    uint64_t delay = (uint64_t)RETRY_FIRST_MS << (w->retries < 5 ? w->retries : 5);

    eng_want_forget(w, FAULT_LOST, NULL);
    w->retries++;
    w->state = WANT_RETRY;
    delay = w->room ? ROOM_WAIT_MS : delay > RETRY_MAX_MS ? RETRY_MAX_MS : delay;
    if (loop_timer_start(w->e->loop, &w->retry, loop_now_ms() + delay) < 0)
        eng_want_finish(w, FERRY_ENOMEM);
}

/* Creates w's object with the sizes a holder's reply gave, which equal the recorded ones when
 * there is a record (other sizes are never taken): the only room a fetch takes, and only once
 * a holder has confirmed the size. A size nobody confirmed takes nothing and evicts nothing: a
 * writer of the directory can record any size (250 MiB recorded for a 1 MiB object evicted 20
 * of 20 cached objects when the room was taken before the pull). 0; FERRY_EEXIST (being
 * created here: its seal finishes w); FERRY_EAGAIN (spilling makes room: w waits for room, and
 * engine_on_room has it asked again); or w is finished with why. w->obj is NULL but on 0. */
int eng_want_create(struct want *w, uint64_t data_size, uint64_t metadata_size)
{
    int rc = store_create(w->e->store, &w->id, data_size, metadata_size, w->e, &w->obj);

    w->hinted = 0; /* a holder confirmed the object: whatever follows is no miss */
    w->room = rc == FERRY_EAGAIN;
    if (rc == 0) {
        w->e->hooks->want_made(w);
        return 0;
    }
    w->obj = NULL;
    if (rc != FERRY_EAGAIN && rc != FERRY_EEXIST)
        eng_want_finish(w, rc);
    return rc;
}

/* Wants that wait for room look again now (one whose bytes are still being dropped retries
 * with the backoff when they are). */
void engine_on_room(struct engine *e)
{
    struct want *w;
    size_t pos = 0;

    while ((w = idmap_next(&e->wants, &pos, NULL))) {
        if (!w->room)
            continue;
        w->room = 0;
        if (w->state == WANT_RETRY)
            loop_timer_start(e->loop, &w->retry, loop_now_ms()); /* armed: cannot fail */
    }
}

/* Whether id was deleted cluster-wide after since (ms), as far as the ring remembers. */
static int deleted_since(const struct engine *e, const ferry_id *id, uint64_t since)
{
    for (size_t i = 0; i < RECENT_DELETES; i++) {
        const struct recent_delete *r = &e->deletes[i];
        if (r->at > since && memcmp(&r->id, id, sizeof(*id)) == 0)
            return 1;
    }
    return 0;
}

/* --verbose: a line per object received (rate-limited). */
static void log_transfer(const struct want *w, const struct object *o, uint64_t ns)
{
    static struct log_limit lim;
    char id[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(&w->id, id);
    log_limited(&lim, LOG_DEBUG, "transfer: %s in, %" PRIu64 " bytes, %.3f ms after it was wanted",
                id, o->data_size + o->metadata_size, ns / 1e6);
}

/* Seals a received object: the store's seal hook then finishes the want. */
void eng_want_seal(struct want *w)
{
    struct engine *e = w->e;
    struct object *o = w->obj;

    w->obj = NULL;
    if (w->deleted || deleted_since(e, &w->id, w->born_ms)) { /* deleted while on its way */
        store_abort(e->store, o);
        if (w->done)
            eng_want_free(w);
        else
            eng_want_finish(w,
                            err_set(FERRY_ENOENT, "deleted cluster-wide while it was on its way"));
        return;
    }
    uint64_t ns = clock_mono_ns() - w->born_ns;
    e->counters.transfers_in++;
    hist_add(&e->counters.transfer_latency, ns);
    if (log_enabled(LOG_DEBUG))
        log_transfer(w, o, ns);
    e->counters.bytes_in += o->data_size + o->metadata_size;
    /* The seal reaches engine_on_sealed, which answers the waiters; busy keeps w alive. A
     * copy whose holder's tree matched the record (or whose bytes were checked) keeps that
     * tree; otherwise it is hashed here, rather than trusting a digest nobody compared. */
    w->busy = 1;
    if (e->dir && w->gen[0]) /* its publication names the put it was fetched by */
        directory_fetched(e->dir, &w->id, w->hash, w->gen);
    if (eng_inherits(e, w)) {
        store_seal_digest(e->store, o, w->check.digest, w->check.leaves);
        w->check.leaves = NULL; /* the object's now */
    } else
        store_seal(e->store, o);
    store_unref(e->store, o);
    w->busy = 0;
    if (w->done)
        eng_want_free(w);
    else
        eng_want_finish(w, 0);
}

/* Prefers a holder we are connected to; skips those that failed this want, and partial
 * holders (they serve ranges only). */
static const struct directory_node *choose(struct engine *e, const struct want *w,
                                           const struct directory_node *h, size_t n)
{
    const struct directory_node *pick = NULL;

    for (size_t i = 0; i < n; i++) {
        if (h[i].seq || eng_want_tried(w, h[i].id) || strcmp(h[i].id, e->node_id) == 0)
            continue;
        if (eng_peer_find(e, h[i].id))
            return &h[i];
        if (!pick)
            pick = &h[i];
    }
    return pick;
}

/* Notes the holders a lookup left out (dead, or of an ended run), for the reasons. */
static void note_gone(struct want *w, const struct directory_answer *a)
{
    size_t at = 0;

    w->gone[0] = '\0';
    for (size_t i = 0; i < a->ngone && at < sizeof(w->gone); i++)
        at += (size_t)snprintf(w->gone + at, sizeof(w->gone) - at, "%s%s: %s", at ? "; " : "",
                               a->gone[i].id, a->gone[i].why);
}

/* 1 when a holder failed for another reason than having lost the object or holding other
 * content. */
static int failed_for_real(const struct want *w)
{
    for (int i = 0; i < w->ntried; i++)
        if (w->tried[i].fault == FAULT_REAL)
            return 1;
    return 0;
}

/* 1 when the holder w asked last could not be reached by us and lookups have left it out as
 * dead or of an ended run for GONE_GRACE_MS: a sole holder killed before its connection was
 * made fails as "unreached", which is forgotten at the retry, and would otherwise have the
 * fetch wait for its timeout. A lookup alone (a writer of the directory can make a holder look
 * gone) fails nothing early, nor does a live node's heartbeat late for a few seconds. */
static int asked_holder_gone(struct want *w, const struct directory_answer *a)
{
    const struct want *root = w->parent ? w->parent : w;
    int gone = 0;

    for (size_t i = 0; i < a->ngone && w->holder[0] && root->unreached; i++)
        gone |= strcmp(a->gone[i].id, w->holder) == 0;
    if (!gone) {
        w->gone_since_ms = 0;
        return 0;
    }
    if (!w->gone_since_ms)
        w->gone_since_ms = loop_now_ms();
    return loop_now_ms() - w->gone_since_ms >= GONE_GRACE_MS;
}

static void on_holders(void *arg, const struct directory_answer *a)
{
    struct want *w = arg;
    const struct directory_node *pick;
    struct peer *p;

    /* A directory that is down (a failover, a restart) is waited for like a holder. */
    w->dir_down = a->status == FERRY_EDIRECTORY;
    if (w->dir_down) {
        eng_want_retry(w);
        return;
    }
    if (a->status < 0) {
        eng_want_finish(
            w, err_set(a->status, "cannot look up holders: %s", ferry_strerror(a->status)));
        return;
    }
    note_gone(w, a);
    if (a->has_content) {
        if (w->has_content && (memcmp(a->digest, w->hash, DIGEST_LEN) || a->size != w->size)) {
            struct content rec = {.size = a->size};
            memcpy(rec.digest, a->digest, DIGEST_LEN);
            eng_want_forget(w, FAULT_OTHER, &rec);
        }
        w->has_content = 1;
        w->size = a->size;
        memcpy(w->hash, a->digest, DIGEST_LEN);
        snprintf(w->gen, sizeof(w->gen), "%s", a->gen);
    }
    if (w->has_content && w->size > store_capacity(w->e->store)) { /* nothing is asked */
        eng_want_finish(w, err_set(FERRY_ETOOBIG,
                                   "the recorded %" PRIu64 " bytes exceed the arena's %" PRIu64,
                                   w->size, store_capacity(w->e->store)));
        return;
    }
    if (w->e->hooks->holders_listed(w, a))
        return; /* in ranges from several holders, or finished */
    if (!(pick = choose(w->e, w, a->nodes, a->n))) {
        /* Every live holder was tried, or the ones tried died since (a sole holder killed
         * mid-transfer): a transfer error with the reasons, not a wait for the timeout. */
        if (failed_for_real(w) || asked_holder_gone(w, a))
            eng_want_fail_all(w);
        else
            eng_want_retry(w); /* sealed nowhere live (any more): a holder may still come */
        return;
    }
    if (!(p = eng_peer_get(w->e, pick))) {
        char why[96];
        snprintf(why, sizeof(why), "cannot connect: %s", ferry_errmsg());
        snprintf(w->holder, sizeof(w->holder), "%s", pick->id);
        eng_want_failed_holder(w, why, FAULT_REAL, NULL);
        return;
    }
    eng_peer_enqueue(p, w);
}

/* Asks the directory (or its cache) for holders; a want nobody waits for any more stops. */
void eng_want_lookup(struct want *w, int fresh)
{
    w->state = WANT_LOOKUP;
    if (!w->waiters) {
        eng_want_finish(w, FERRY_ETIMEDOUT);
        return;
    }
    if (w->relay && w->relay->seq) /* the partial holders too */
        fresh = DIRECTORY_FRESH | DIRECTORY_PARTIAL;
    if (directory_lookup(w->e->dir, &w->id, fresh, on_holders, w) < 0)
        eng_want_finish(w, FERRY_ENOMEM);
}

/* Nobody took w up again within the grace: it stops asking the directory, and what is under
 * way ends, whose bytes would be dropped if they came, or, already coming into its object, has
 * its connections closed (a holder trickling a byte every 20 s held 200 MiB of the arena past
 * the fetch's end). */
static void want_orphaned(struct want *w)
{
    struct engine *e = w->e;

    int abandoned;

    if (w->waiters || w->done || w->state == WANT_LOOKUP || w->state == WANT_VERIFY)
        return; /* taken up; or ends when its answer comes, or its bytes are all in */
    abandoned = w->abandoned = w->obj != NULL;
    e->counters.transfers_abandoned += (uint64_t)abandoned;
    eng_want_finish(w, FERRY_ETIMEDOUT); /* may free w */
    if (abandoned)
        eng_peers_drop_abandoned(e);
}

static void on_orphan(struct loop *l, struct loop_timer *t)
{
    want_orphaned(t->arg);
}

/* Starts w: its location's node is asked on the next loop turn (after its first waiter is
 * in: what it calls may finish w at once), else the directory now. */
static int want_start(struct want *w, const struct directory_node *at)
{
    struct engine *e = w->e;

    if (at && strcmp(at->id, e->node_id) != 0) {
        if (!(w->hint = eng_hint_get(e, at)))
            return FERRY_ENOMEM;
        w->state = WANT_RETRY;
        return loop_timer_start(e->loop, &w->retry, loop_now_ms());
    }
    /* A location of this very node: its copy went (the node that put the object wants it
     * back), and only the directory knows who else has one. */
    if (at)
        e->counters.fetch_hints_self++;
    return directory_lookup(e->dir, &w->id, 0, on_holders, w);
}

/* A new want for id, started. */
static struct want *want_new(struct engine *e, const ferry_id *id, const struct directory_node *at)
{
    struct want *w = calloc(1, sizeof(*w));

    if (!w || idmap_put(&e->wants, id, w) < 0) {
        free(w);
        return NULL;
    }
    w->e = e;
    w->id = *id;
    w->born_ms = loop_now_ms();
    w->born_ns = clock_mono_ns();
    loop_timer_init(&w->retry, on_retry, w);
    loop_timer_init(&w->orphan, on_orphan, w);
    if (want_start(w, at) < 0) {
        idmap_remove(&e->wants, id);
        if (w->hint)
            eng_hint_put(w->hint);
        free(w);
        return NULL;
    }
    return w;
}

int engine_fetch(struct engine *e, const ferry_id *id, const struct directory_node *at,
                 engine_fetch_fn *fn, void *ctx, uint32_t index)
{
    struct want *w = idmap_get(&e->wants, id);
    struct waiter *x;
    int rc;

    if (!e->dir)
        return err_set(FERRY_EDIRECTORY, "this node has no directory (--directory)");
    if (!w && (rc = slice_delete_take(e, id)) < 0)
        return rc;
    if (!(x = calloc(1, sizeof(*x))))
        return err_set(FERRY_ENOMEM, "fetch waiter");
    if (!w && !(w = want_new(e, id, at))) {
        free(x);
        return err_set(FERRY_ENOMEM, "fetch record");
    }
    *x = (struct waiter){.fn = fn, .ctx = ctx, .index = index, .next = w->waiters};
    w->waiters = x;
    loop_timer_stop(e->loop, &w->orphan); /* taken up again */
    return 0;
}

void engine_cancel(struct engine *e, void *ctx)
{
    struct want *w;
    size_t pos = 0;

    while ((w = idmap_next(&e->wants, &pos, NULL))) {
        for (struct waiter **pp = &w->waiters; *pp;) {
            struct waiter *x = *pp;
            if (x->ctx == ctx) {
                *pp = x->next;
                free(x);
            } else {
                pp = &x->next;
            }
        }
        /* Nobody waits: it ends after the grace unless a fetch takes it up. Being looked up,
         * it ends when the answer comes; being checked, its bytes are all in. (Without memory
         * for the timer, it ends with its transfer or at its next lookup.) */
        if (!w->waiters && w->state != WANT_LOOKUP && w->state != WANT_VERIFY &&
            !loop_timer_armed(&w->orphan))
            loop_timer_start(e->loop, &w->orphan, loop_now_ms() + e->timers.orphan_ms);
    }
}

void engine_on_deleted(struct engine *e, const ferry_id *id, const char *node)
{
    struct want *w = idmap_get(&e->wants, id);
    struct recent_delete *r = &e->deletes[e->next_delete++ % RECENT_DELETES];

    r->id = *id;
    r->at = loop_now_ms();
    slice_deleted(e, id, w, node);
    if (!w)
        return;
    w->deleted = 1;
    eng_want_finish(w, err_set(FERRY_ENOENT, "deleted cluster-wide (by node %s)", node));
}

int engine_fetch_why(struct engine *e, const ferry_id *id, char *buf, size_t len)
{
    const struct want *w = idmap_get(&e->wants, id);

    buf[0] = '\0';
    if (w)
        want_reasons(w, buf, len);
    return w && w->dir_down ? FERRY_EDIRECTORY : FERRY_ETIMEDOUT;
}

void engine_on_sealed(struct engine *e, const struct object *o)
{
    struct want *w = idmap_get(&e->wants, &o->id);

    if (w)
        eng_want_finish(w, 0);
}
