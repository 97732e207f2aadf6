/*
 * engine_verify.c - the check of received bytes against their holder's digest: streamed as the
 * bytes land (on the loop, or on the verifier thread for large objects), or hashed after the
 * last byte; the verifier's answers.
 */
#include "transfer/engine_int.h"

/* Whether w's bytes are hashed and checked against the holder's digest before the seal: with
 * --verify, and whenever the directory recorded the id's content (the holder's digest was
 * compared with the record, so this checks the bytes against the record). */
int eng_checked(const struct engine *e, const struct want *w)
{
    return e->cfg.verify || w->has_content;
}

/* Up to this size a streamed digest is taken on the loop, piece by piece; above it on the
 * verifier thread, in parallel with the next bytes. Measured (ferry-bench remote, tcp, 2
 * cores, three alternating runs): on the loop, fetch / raw request-response 0.70-0.79 at 1 MiB
 * and 1.00-1.09 at 16 MiB against 0.50-0.77 and 0.79-1.12 on the verifier, where handing
 * pieces over costs more than it saves while both daemons copy; at 256 MiB 1.23-1.33 on the
 * loop against 1.38-1.44 on the verifier. */
#define STREAM_LOOP_MAX (16u << 20)

/* Forgets w's streamed digest, if any: a state the verifier has is freed by it after the
 * pieces before; the loop's own (or any once the verifier has stopped) here. */
void eng_stream_drop(struct want *w)
{
    struct engine *e = w->e;
    struct hasher_job *end = w->stream_end;

    if (!w->stream)
        return;
    if (e->verifier && !w->stream_on_loop) {
        *end = (struct hasher_job){.kind = HASHER_DROP, .state = w->stream};
        hasher_submit(e->verifier, end);
    } else {
        XXH3_freeState(w->stream);
        free(end);
    }
    w->stream = NULL;
    w->stream_end = NULL;
}

/* Starts the digest of w's bytes as they land: for checked objects that would otherwise be
 * hashed after their last byte. Seeded like the store's digest (with the data size). Without
 * memory it is not streamed, and is hashed after. */
void eng_stream_start(struct engine *e, struct want *w, uint64_t len, uint64_t data_size)
{
    eng_stream_drop(w);
    w->piece = NULL;
    w->piece_len = w->streamed = 0;
    w->stream_broken = 0;
    w->stream_on_loop = len <= STREAM_LOOP_MAX;
    if (!eng_checked(e, w) || !w->obj || len <= STORE_INLINE_HASH_MAX)
        return;
    w->stream = XXH3_createState();
    w->stream_end = calloc(1, sizeof(*w->stream_end));
    if (!w->stream || !w->stream_end ||
        XXH3_64bits_reset_withSeed(w->stream, data_size) != XXH_OK) {
        XXH3_freeState(w->stream);
        free(w->stream_end);
        w->stream = NULL;
        w->stream_end = NULL;
    }
}

/* Hashes the landed bytes not hashed yet, or sends them to the verifier. A piece that cannot
 * be sent breaks the stream: the object is hashed after its last byte instead. */
static void stream_flush(struct want *w)
{
    struct hasher_job *job;

    if (!w->piece_len || w->stream_broken)
        return;
    if (w->stream_on_loop) {
        (void)XXH3_64bits_update(w->stream, w->piece, w->piece_len); /* fails only on NULL */
    } else if ((job = calloc(1, sizeof(*job)))) {
        /* If the object is aborted while this waits, its bytes may be reused meanwhile: the
         * state is then dropped, its digest never used. */
        *job = (struct hasher_job){
            .kind = HASHER_UPDATE, .state = w->stream, .bytes = w->piece, .len = w->piece_len};
        hasher_submit(w->e->verifier, job);
    } else {
        w->stream_broken = 1;
        return;
    }
    w->streamed += w->piece_len;
    w->piece = NULL;
    w->piece_len = 0;
}

/* The digest of w's bytes is in: sealed when it is the holder's (which is the recorded one, when
 * there is a record), else refused. */
static void want_checked(struct want *w, uint64_t digest)
{
    if (digest == w->digest) {
        eng_want_seal(w);
        return;
    }
    log_warn("object from %s failed verification (digest %016" PRIx64 ", expected %016" PRIx64 ")",
             w->holder, digest, w->digest);
    store_abort(w->e->store, w->obj);
    w->obj = NULL;
    if (w->nsplit) {
        /* In ranges: which holder sent what is not known, so none is noted ("a and 2 more" was,
         * a holder that cannot be asked). Those that only disagreed with this object may be
         * right; one holder at a time from now on, each failure its own. */
        w->e->counters.transfer_failures++;
        w->no_split = 1;
        w->nsplit = 0;
        eng_want_forget(w, FAULT_LOST, NULL);
        eng_want_lookup(w, 1);
        return;
    }
    eng_want_failed_holder(w, "its bytes do not match its digest", FAULT_REAL, NULL);
}

void eng_want_received(struct want *w)
{
    struct engine *e = w->e;
    struct hasher_job *job;
    uint64_t len;

    if (!eng_checked(e, w) || !w->obj) {
        eng_want_seal(w);
        return;
    }
    len = w->obj->data_size + w->obj->metadata_size;
    if (w->stream) {
        stream_flush(w);
        if (!w->stream_broken && w->streamed == len && w->stream_on_loop) {
            uint64_t digest = XXH3_64bits_digest(w->stream);
            eng_stream_drop(w);
            want_checked(w, digest);
            return;
        }
        if (!w->stream_broken && w->streamed == len) { /* hashed as it landed: finish it */
            job = w->stream_end;
            *job = (struct hasher_job){.kind = HASHER_FINISH, .state = w->stream, .arg = w};
            w->stream = NULL;
            w->stream_end = NULL;
            w->state = WANT_VERIFY;
            w->busy = 1;
            hasher_submit(e->verifier, job);
            return;
        }
    }
    eng_stream_drop(w);
    if (len <= STORE_INLINE_HASH_MAX) { /* as the store would at seal, on the loop */
        want_checked(w,
                     XXH3_64bits_withSeed(e->store->base + w->obj->offset, len, w->obj->data_size));
        return;
    }
    if (!(job = calloc(1, sizeof(*job)))) {
        /* Cannot check it: refuse the object rather than seal it unchecked. */
        store_abort(e->store, w->obj);
        w->obj = NULL;
        eng_want_finish(w, err_set(FERRY_ENOMEM, "verification job"));
        return;
    }
    job->bytes = e->store->base + w->obj->offset;
    job->len = w->obj->data_size + w->obj->metadata_size;
    job->seed = w->obj->data_size;
    job->arg = w;
    w->state = WANT_VERIFY;
    w->busy = 1;
    hasher_submit(e->verifier, job);
}

/* Bytes of w's object in place: into its digest, when streamed, a piece at a time. The
 * transport writes only where recv_into told it to, in order, so p..p+n should lie within
 * w->obj right after the bytes before; that is checked, not assumed. */
void eng_stream_landed(struct want *w, const uint8_t *p, size_t n)
{
    if (!w->stream || w->stream_broken)
        return;
    /* Exactly the object's bytes, from its first, each once: anything else (a transport that
     * tells out of order) breaks the stream, and the object is hashed after its last byte. */
    if (!w->obj || p != w->e->store->base + w->obj->offset + w->streamed + w->piece_len ||
        n > w->obj->data_size + w->obj->metadata_size - w->streamed - w->piece_len) {
        w->stream_broken = 1;
        return;
    }
    if (!w->piece_len)
        w->piece = p;
    w->piece_len += n;
    if (w->piece_len >= STREAM_PIECE)
        stream_flush(w);
}

void eng_on_verified(struct loop *l, struct loop_watch *lw, uint32_t events)
{
    struct engine *e = lw->arg;
    struct hasher_job *job = hasher_take_done(e->verifier), *next;

    for (; job; job = next) {
        struct want *w = job->arg;
        next = job->next;
        if (w) { /* a digest (pieces and drops name no want) */
            w->busy = 0;
            want_checked(w, job->digest);
        }
        free(job);
    }
}
