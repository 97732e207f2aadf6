/*
 * engine_verify.c - the check of received bytes against their holder's tree (common/digest.h):
 * the leaves against the root at the reply, then (with --verify) each chunk against its leaf as
 * soon as its bytes are in, on the verifier's threads (the chunks of one object spread over
 * them), so that a bad chunk names the holder that sent it; the verifier's answers.
 */
#include "transfer/engine_int.h"

/* The want that has the tree and the object: a part's parent, or w. */
static struct want *tree_of(struct want *w)
{
    return w->parent ? w->parent : w;
}

/* Where w's range starts in its object, and how long it is. */
static uint64_t range_off(const struct want *w)
{
    return w->parent ? w->off : 0;
}

static uint64_t range_len(const struct want *w)
{
    return w->parent ? w->size : w->obj ? w->obj->data_size + w->obj->metadata_size : 0;
}

int eng_check_tree(struct want *w, const struct wire_reply_entry *re)
{
    uint64_t n = digest_leaves(re->data_size + re->metadata_size);
    uint8_t root[DIGEST_LEN];

    free(w->check.leaves);
    w->check.leaves = NULL;
    w->check.nleaves = n;
    memcpy(w->check.digest, re->digest, DIGEST_LEN);
    if (n == 1)
        return 0; /* the chunk is checked against the root itself */
    if (re->nleaves != n || !re->leaves ||
        digest_root(re->data_size, re->metadata_size, re->leaves, n, root) < 0 ||
        !mac_equal(root, re->digest, DIGEST_LEN))
        return -1;
    if (!(w->check.leaves = malloc(n * DIGEST_LEN)))
        return -1; /* taken as a failure of the holder: the next one may fit */
    memcpy(w->check.leaves, re->leaves, n * DIGEST_LEN);
    return 0;
}

/* Chunk i of t's object (computed leaf) against t's tree; a bad one is named at once. */
static void chunk_checked(struct want *w, uint64_t i, const uint8_t leaf[DIGEST_LEN])
{
    struct want *t = tree_of(w);
    uint8_t root[DIGEST_LEN];
    int ok;

    if (t->check.nleaves > 1)
        ok = i < t->check.nleaves && mac_equal(leaf, t->check.leaves + i * DIGEST_LEN, DIGEST_LEN);
    else
        ok = t->obj && digest_root(t->obj->data_size, t->obj->metadata_size, leaf, 1, root) == 0 &&
             mac_equal(root, t->check.digest, DIGEST_LEN);
    if (ok)
        eng_relay_have(t, i * DIGEST_CHUNK, DIGEST_CHUNK, 1);
    if (ok || w->check.bad_chunk != NO_CHUNK)
        return;
    w->check.bad_chunk = i;
    w->e->counters.chunks_refused++;
    log_warn("object from %s: chunk %" PRIu64 " (bytes %" PRIu64 "-%" PRIu64
             ") does not match its leaf",
             w->holder, i, i * DIGEST_CHUNK, i * DIGEST_CHUNK + DIGEST_CHUNK - 1);
    /* A whole holder's copy may have been rewritten after its seal: it checks it. A partial
     * holder's copy is not sealed (its relaying failed), and a split's parent checked again
     * after a dead connection's late writes cannot tell which holder wrote what. */
    if (!w->relayed && !w->split.n && !w->check.recheck)
        eng_peer_suspect(w->e, w->holder, &t->id, i);
}

/* Gives chunk i of w's object to the verifier: 0, or -1 without memory. */
static int check_chunk(struct want *w, uint64_t i)
{
    struct want *t = tree_of(w);
    struct hasher_job *job;

    if (!w->check.vc && !(w->check.vc = calloc(1, sizeof(*w->check.vc))))
        return -1;
    if (!(job = calloc(1, sizeof(*job) + DIGEST_LEN)))
        return -1;
    w->check.vc->w = w;
    *job = (struct hasher_job){.bytes = w->e->store->base + t->obj->offset,
                               .size = t->obj->data_size + t->obj->metadata_size,
                               .first = i,
                               .n = 1,
                               .leaves = (uint8_t *)(job + 1),
                               .arg = w->check.vc};
    w->check.vc->out++;
    hasher_submit(w->e->verifier, job);
    return 0;
}

/* Hands the whole chunks of w's range that are in (all of them, once last) to checks. */
static int check_hand(struct want *w, int last)
{
    uint64_t len = range_len(w), base = range_off(w) / DIGEST_CHUNK;

    while (w->check.handed < len && (last || w->check.handed + DIGEST_CHUNK <= w->check.landed)) {
        if (check_chunk(w, base + w->check.handed / DIGEST_CHUNK) < 0)
            return -1;
        w->check.handed +=
            len - w->check.handed < DIGEST_CHUNK ? len - w->check.handed : DIGEST_CHUNK;
    }
    return 0;
}

/* The leaf of an object of one chunk, taken as its bytes land (eng_want_received ends it). */
static void stream_landed(struct want *w, const uint8_t *p, size_t n)
{
    struct want_check *k = &w->check;
    uint64_t len = w->obj->data_size + w->obj->metadata_size;

    if (k->streamed == STREAM_OFF)
        return;
    if (p != w->e->store->base + w->obj->offset + k->streamed || n > len - k->streamed ||
        (!k->stream && digest_stream_start(&k->stream, 0) < 0) ||
        digest_stream_add(k->stream, p, n) < 0) {
        digest_stream_free(k->stream);
        k->stream = NULL;
        k->streamed = STREAM_OFF; /* hashed whole after the last byte */
        return;
    }
    k->streamed += n;
}

void eng_check_landed(struct want *w, const uint8_t *p, size_t n)
{
    struct want *t = tree_of(w);

    if (t == w && w->obj && w->check.nleaves == 1 && eng_checked(w))
        stream_landed(w, p, n);
    if (!eng_checked(w) || !t->obj || t->check.nleaves < 2 || w->check.broken) {
        eng_relay_landed(w, p, n);
        return;
    }
    /* Exactly the range's bytes, from its first, each once: anything else (a transport that
     * tells out of order) leaves the chunks not handed yet for after the last byte. */
    if (p != w->e->store->base + t->obj->offset + range_off(w) + w->check.landed ||
        n > range_len(w) - w->check.landed) {
        w->check.broken = 1;
        return;
    }
    w->check.landed += n;
    if (check_hand(w, 0) < 0)
        w->check.broken = 1; /* no memory now: after the last byte */
}

int eng_check_rest(struct want *w)
{
    struct want *t = tree_of(w);

    if (!t->obj || !eng_checked(w) || t->check.nleaves < 2)
        return 0; /* nothing landed here, or one chunk: checked whole (eng_want_received) */
    if (check_hand(w, 1) < 0)
        return -1;
    if (!w->check.vc || !w->check.vc->out)
        return 0;
    w->check.waiting = 1;
    return 1;
}

/* The checks of a whole want (or a split's parent) are done: sealed when every chunk matched,
 * else refused. */
static void want_checked(struct want *w)
{
    char why[96];

    w->busy = 0;
    if (w->check.bad_chunk == NO_CHUNK) {
        eng_want_seal(w);
        return;
    }
    store_abort(w->e->store, w->obj);
    w->obj = NULL;
    if (w->split.n) {
        /* In ranges, checked again after a dead connection's late writes: which holder wrote
         * what is not known, so none is noted. Those that only disagreed with this object may
         * be right; one holder at a time from now on, each failure its own. */
        w->e->counters.transfer_failures++;
        w->no_split = 1;
        w->split.n = 0;
        eng_want_forget(w, FAULT_LOST, NULL);
        eng_want_lookup(w, 1);
        return;
    }
    snprintf(why, sizeof(why), "chunk %" PRIu64 " of its bytes does not match its digest",
             w->check.bad_chunk);
    /* It gave the recorded root and other bytes: never asked again by this fetch. */
    eng_want_failed_holder(w, why, FAULT_REAL, NULL);
}

static void check_done(struct want *w)
{
    w->check.waiting = 0;
    if (w->parent)
        w->e->hooks->part_checked(w);
    else
        want_checked(w);
}

void eng_want_received(struct want *w)
{
    struct engine *e = w->e;
    uint8_t leaf[DIGEST_LEN];
    int rc;

    if (!eng_checked(w) || !w->obj) {
        eng_want_seal(w);
        return;
    }
    if (w->check.nleaves == 1) { /* one chunk (at most 1 MiB): on the loop, as it landed */
        uint64_t len = w->obj->data_size + w->obj->metadata_size;
        struct digest_stream *s = w->check.stream;
        w->check.stream = NULL;
        if (s && w->check.streamed != len) { /* not every byte told: hashed whole */
            digest_stream_free(s);
            s = NULL;
        }
        w->check.bad_chunk = NO_CHUNK;
        if ((s ? digest_stream_end(s, leaf)
               : digest_leaf(0, e->store->base + w->obj->offset, len, leaf)) < 0)
            w->check.bad_chunk = 0;
        else
            chunk_checked(w, 0, leaf);
        want_checked(w);
        return;
    }
    if (w->check.recheck) { /* a split's parent that a dead connection may have written into */
        eng_check_reset(w);
        w->check.landed = range_len(w);
    }
    if ((rc = eng_check_rest(w)) < 0) {
        /* Cannot check it: refuse the object rather than seal it unchecked. */
        store_abort(e->store, w->obj);
        w->obj = NULL;
        eng_want_finish(w, err_set(FERRY_ENOMEM, "verification job"));
        return;
    }
    if (rc == 0) {
        want_checked(w);
        return;
    }
    w->state = WANT_VERIFY;
    w->busy = 1;
}

/* A job is back: its chunk counts for its want, if the want still waits for it. */
static void job_back(struct hasher_job *job)
{
    struct vcheck *vc = job->arg;
    struct want *w = vc->w;

    vc->out--;
    if (!w) {
        if (!vc->out)
            free(vc);
        return;
    }
    if (job->status < 0)
        w->check.bad_chunk = w->check.bad_chunk == NO_CHUNK ? job->first : w->check.bad_chunk;
    else
        chunk_checked(w, job->first, job->leaves);
    if (!vc->out && w->check.waiting)
        check_done(w);
}

void eng_on_verified(struct loop *l, struct loop_watch *lw, uint32_t events)
{
    struct engine *e = lw->arg;
    struct hasher_job *job = hasher_take_done(e->verifier), *next;

    for (; job; job = next) {
        next = job->next;
        job_back(job);
        free(job);
    }
}

void eng_checks_closed(struct engine *e, struct hasher_job *jobs)
{
    struct hasher_job *next;

    for (; jobs; jobs = next) {
        struct vcheck *vc = jobs->arg;
        struct want *w = vc->w;
        next = jobs->next;
        free(jobs);
        if (--vc->out)
            continue;
        free(vc);
        if (!w)
            continue;
        w->check.vc = NULL;
        if (!w->check.waiting)
            continue;
        w->check.waiting = 0;
        if (w->parent) {
            eng_part_close(w);
        } else if ((w->busy = 0, w->done)) {
            store_abort(e->store, w->obj);
            eng_want_free(w);
        }
    }
}
