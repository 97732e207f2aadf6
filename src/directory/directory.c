/*
 * directory.c - the facade: the interface of directory.h (opening, closing, the requests and
 * publications), each call handed to the file of its job. No other file of the unit calls it.
 */
#include "directory/directory_int.h"

#include <openssl/crypto.h>

int directory_open(struct directory **out, struct loop *l, const struct directory_config *cfg,
                   const struct directory_hooks *hooks)
{
    struct directory *d = calloc(1, sizeof(*d));
    int rc;

    *out = NULL;
    if (!d)
        return err_set(FERRY_ENOMEM, "directory");
    if ((rc = dir_scripts_init()) < 0 || (rc = dir_configure(d, cfg)) < 0)
        goto free_directory;
    d->loop = l;
    if (hooks)
        d->hooks = *hooks;
    d->watch.fd = -1;
    d->done_tail = &d->done;
    d->backoff_ms = BACKOFF_MIN_MS;
    loop_timer_init(&d->reconnect, dir_on_reconnect, d);
    loop_timer_init(&d->flush, dir_on_flush, d);
    loop_timer_init(&d->watchdog, dir_on_watchdog, d);
    loop_timer_init(&d->heartbeat, dir_on_heartbeat, d);
    loop_timer_init(&d->turn, dir_on_turn, d);
    loop_timer_init(&d->events, dir_on_events_timer, d);
    loop_timer_init(&d->leave_timer, dir_on_leave_timer, d);
    loop_timer_init(&d->owner_timer, dir_on_owner_timer, d);
    d->probe.fd = -1;
    dir_connect_start(d);
    *out = d;
    return 0;

free_directory:
    free(d);
    return rc;
}

void directory_close(struct directory *d)
{
    if (!d)
        return;
    d->closing = 1;
    if (d->ac)
        redisAsyncFree(d->ac); /* fails the pending requests: they join the done list */
    loop_timer_stop(d->loop, &d->reconnect);
    loop_timer_stop(d->loop, &d->flush);
    loop_timer_stop(d->loop, &d->turn);
    loop_timer_stop(d->loop, &d->leave_timer);
    dir_owner_stop(d);
    dir_queue_drop(d); /* its requests join the done list */
    while (d->done)
        dir_request_free(dir_done_pop(d));
    free(d->heard);
    free(d->queue);
    idmap_free(&d->owed);
    dir_cache_clear(&d->holders);
    dir_cache_clear(&d->conflicts);
    idmap_free(&d->gens); /* its values are not pointers */
    dir_cache_clear(&d->fetched);
    dir_cache_clear(&d->nodes);
    dir_cache_clear(&d->emitters);
    OPENSSL_cleanse(d->secret, sizeof(d->secret));
    OPENSSL_cleanse(d->password, sizeof(d->password));
    free(d);
}

int directory_connected(const struct directory *d)
{
    return d->up;
}

const char *directory_where(const struct directory *d)
{
    return d->where;
}

const char *directory_down_why(const struct directory *d)
{
    return d->up ? "" : d->down_why;
}

const struct directory_counters *directory_counters(const struct directory *d)
{
    return &d->counters;
}

uint64_t directory_incarnation(const struct directory *d)
{
    return d->self.inc;
}

void directory_publish(struct directory *d, const ferry_id *id, uint64_t size,
                       const uint8_t digest[DIGEST_LEN])
{
    struct pubop op = {.id = *id, .kind = OP_PUBLISH, .size = size};

    memcpy(op.digest, digest, DIGEST_LEN);
    if (dir_conflict_kept(d, id, digest))
        return;                   /* refused once: it stays unlisted for this run */
    (void)dir_queue_push(d, &op); /* while down: the republish after the next registration */
}

void directory_withdraw(struct directory *d, const ferry_id *id)
{
    struct pubop op = {.id = *id, .kind = OP_WITHDRAW};

    /* The refused copy, if it was one, is gone; the put it was of is forgotten at the reply (a
     * cluster-wide delete, queued next, names it). */
    free(idmap_remove(&d->conflicts, id));
    if (dir_queue_push(d, &op) == FERRY_EDIRECTORY)
        dir_owe(d, id, OWED_WITHDRAW, "withdraw");
}

void directory_fetched(struct directory *d, const ferry_id *id, const uint8_t digest[DIGEST_LEN],
                       const char *gen)
{
    struct fetched_put *f;

    if (!dir_gen_valid(gen))
        return;
    if (d->fetched.count >= HOLDER_CACHE_MAX)
        dir_cache_clear(&d->fetched);
    if (!(f = malloc(sizeof(*f))))
        return;
    memcpy(f->digest, digest, DIGEST_LEN);
    snprintf(f->gen, sizeof(f->gen), "%s", gen);
    free(idmap_remove(&d->fetched, id));
    if (idmap_put(&d->fetched, id, f) < 0)
        free(f);
}

int directory_lookup(struct directory *d, const ferry_id *id, int fresh, directory_answer_fn *cb,
                     void *arg)
{
    struct request *r = dir_request_new(REQ_LOOKUP, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory lookup");
    r->id = *id;
    r->fresh = fresh != 0;
    r->partial = (fresh & DIRECTORY_PARTIAL) != 0;
    if (!fresh && dir_answer_from_cache(d, r)) {
        d->counters.cache_hits++;
        dir_done_push(d, r);
        return 0;
    }
    /* What this node queued goes first, so that the lookup sees it: a put's publication may
     * wait for the rest of a millisecond, and a delete asks for the put it deletes. */
    if (d->queue_head < d->queue_len)
        dir_queue_flush(d);
    dir_lookup_start(d, r);
    return 0;
}

int directory_relay(struct directory *d, const ferry_id *id, uint64_t size,
                    const uint8_t digest[DIGEST_LEN], directory_answer_fn *cb, void *arg)
{
    struct request *r = dir_request_new(REQ_RELAY, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory relay");
    r->id = *id;
    dir_owe_clear(d, id, OWED_UNRELAY); /* it would remove the field this writes */
    dir_relay_start(d, r, size, digest);
    return 0;
}

void directory_unrelay(struct directory *d, const ferry_id *id)
{
    struct pubop op = {.id = *id, .kind = OP_UNRELAY};

    if (dir_queue_push(d, &op) == FERRY_EDIRECTORY)
        dir_owe(d, id, OWED_UNRELAY, "unrelay");
}

int directory_nodes(struct directory *d, directory_answer_fn *cb, void *arg)
{
    struct request *r = dir_request_new(REQ_NODES, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory node listing");
    dir_nodes_start(d, r);
    return 0;
}

int directory_claim(struct directory *d, const ferry_id *id, uint64_t size,
                    const uint8_t digest[DIGEST_LEN], directory_answer_fn *cb, void *arg)
{
    struct request *r = dir_request_new(REQ_CLAIM, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory claim");
    r->id = *id;
    dir_claim_start(d, r, size, digest);
    return 0;
}

int directory_delete(struct directory *d, const ferry_id *id, const uint8_t root[DIGEST_LEN],
                     const char *gen, directory_answer_fn *cb, void *arg)
{
    struct request *r = dir_request_new(REQ_DELETE, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory delete");
    r->id = *id;
    free(idmap_remove(&d->holders, id));
    dir_delete_start(d, r, root, gen ? gen : "");
    return 0;
}

void directory_leave(struct directory *d, uint32_t deadline_ms, void (*cb)(void *arg), void *arg)
{
    d->leave_cb = cb;
    d->leave_arg = arg;
    d->left = 0;
    d->leave_deadline_ms = loop_now_ms() + deadline_ms;
    dir_leave_start(d);
}

void directory_cancel(struct directory *d, void *arg)
{
    dir_cancel_in(d->pending, arg);
    dir_cancel_in(d->done, arg);
}

void directory_forget_holder(struct directory *d, const ferry_id *id, const char *node_id)
{
    struct cached_holders *h = idmap_get(&d->holders, id);

    if (!h)
        return;
    dir_holders_drop(h, node_id);
    if (!h->n)
        free(idmap_remove(&d->holders, id));
}

/* Holder lists left empty stay in the cache (an empty list is a miss) until replaced or
 * cleared: the map cannot change while it is being iterated. */
void directory_forget_node(struct directory *d, const char *node_id)
{
    ferry_id key;
    const struct cached_node *c;
    struct cached_holders *h;
    size_t pos = 0;

    dir_node_cache_key(node_id, &key);
    c = idmap_get(&d->nodes, &key);
    if (c && strcmp(c->node.id, node_id) == 0)
        free(idmap_remove(&d->nodes, &key));
    while ((h = idmap_next(&d->holders, &pos, NULL)))
        dir_holders_drop(h, node_id);
}
