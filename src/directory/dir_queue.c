/*
 * dir_queue.c - the publication queue: what is to be sent, in order, on the one connection
 * (the turn flushes it: dir_conn.c); the copies refused as conflicts, which are not
 * published again; the puts of this node's copies. It calls only dir_request.c and the shared
 * tools.
 */
#include "directory/directory_int.h"

/* Empties the queue: what was not sent is dropped (the republish restores publications; the
 * requests among them fail with FERRY_EDIRECTORY). */
void dir_queue_drop(struct directory *d)
{
    for (size_t i = d->queue_head; i < d->queue_len; i++) {
        struct request *r = d->queue[i].r;
        if (r) {
            dir_request_fail(d, r, FERRY_EDIRECTORY);
            dir_request_settle(d, r);
        }
    }
    d->queue_head = d->queue_len = 0;
    if (d->queue_cap > QUEUE_KEEP) {
        free(d->queue);
        d->queue = NULL;
        d->queue_cap = 0;
    }
}

/* When the queue is to be written once op has joined it. A request (a claim, a delete, a
 * relay: someone waits for its answer) or a full batch goes at once, with what is queued before
 * it. A publication or withdrawal goes at once too unless the queue was written less than
 * PUBLISH_GAP_MS ago: then it waits for the rest of the gap, so that a stream of puts costs
 * Redis one script per gap (up to PUBLISH_BATCH publications each) rather than one per put,
 * while a lone put is listed as soon as before. */
static uint64_t queue_due(const struct directory *d, const struct pubop *op)
{
    uint64_t now = loop_now_ms(), gap_end = d->queue_sent_ms + PUBLISH_GAP_MS;

    if (op->r || d->queue_len - d->queue_head >= PUBLISH_BATCH)
        return now;
    return gap_end > now ? gap_end : now;
}

/* Queues op; FERRY_EDIRECTORY when the directory is not up (publications are then left to the
 * republish hook after the next registration) or the node is leaving (nothing is published
 * once its entry is going), FERRY_ENOMEM. */
int dir_queue_push(struct directory *d, const struct pubop *op)
{
    if (!d->up || d->leaving)
        return FERRY_EDIRECTORY;
    if (d->queue_len == d->queue_cap) {
        struct pubop *p = dir_grow(d->queue, &d->queue_cap, sizeof(*p));
        if (!p) {
            dir_command_failed(d, "queue", "out of memory");
            return FERRY_ENOMEM;
        }
        d->queue = p;
    }
    d->queue[d->queue_len++] = *op;
    dir_turn_by(d, queue_due(d, op));
    return 0;
}

void dir_conflict_remember(struct directory *d, const ferry_id *id,
                           const uint8_t digest[DIGEST_LEN])
{
    uint8_t *had = idmap_get(&d->conflicts, id), *copy;

    if (had) {
        memcpy(had, digest, DIGEST_LEN);
        return;
    }
    if (d->conflicts.count >= CONFLICTS_MAX || !(copy = malloc(DIGEST_LEN)))
        return;
    memcpy(copy, digest, DIGEST_LEN);
    if (idmap_put(&d->conflicts, id, copy) < 0)
        free(copy);
}

int dir_conflict_kept(struct directory *d, const ferry_id *id, const uint8_t digest[DIGEST_LEN])
{
    uint8_t *had = idmap_get(&d->conflicts, id);

    if (!had)
        return 0;
    if (memcmp(had, digest, DIGEST_LEN) != 0) {
        free(idmap_remove(&d->conflicts, id));
        return 0;
    }
    d->counters.conflicts_unlisted++;
    return 1;
}

int dir_gen_valid(const char *text)
{
    size_t len = strlen(text), digits = strspn(text, "0123456789");

    return len <= DIRECTORY_GEN_MAX && digits > 0 && text[digits] == '-' &&
           text[digits + 1] != '\0' && strspn(text + digits + 1, "0123456789") == len - digits - 1;
}

/* A put as the gens map keeps it: a 64-bit hash of its text (never 0, which the map reads as
 * absent), held in the value pointer itself, so that a copy costs no allocation. */
static void *gen_value(const char *gen)
{
    uint64_t h = XXH3_64bits(gen, strlen(gen));

    return (void *)(uintptr_t)(h ? h : 1);
}

void dir_gen_remember(struct directory *d, const ferry_id *id, const char *gen)
{
    if (!dir_gen_valid(gen) || idmap_put(&d->gens, id, gen_value(gen)) < 0)
        dir_gen_forget(d, id); /* no put named, or no memory: of no known put */
}

int dir_gen_other(const struct directory *d, const ferry_id *id, const char *gen)
{
    void *ours = idmap_get(&d->gens, id);

    return ours && ours != gen_value(gen);
}

void dir_gen_forget(struct directory *d, const ferry_id *id)
{
    (void)idmap_remove(&d->gens, id);
}

void dir_gen_propose(struct directory *d, const ferry_id *id, const uint8_t digest[DIGEST_LEN],
                     char gen[DIRECTORY_GEN_MAX + 1])
{
    struct fetched_put *f = idmap_remove(&d->fetched, id);

    if (f && memcmp(f->digest, digest, DIGEST_LEN) == 0)
        snprintf(gen, DIRECTORY_GEN_MAX + 1, "%s", f->gen);
    else
        snprintf(gen, DIRECTORY_GEN_MAX + 1, "%s-%" PRIu64, d->inc_text, ++d->gen_next);
    free(f);
}
