/*
 * dir_cache.c - the directory's caches: the holders of ids and the entries of nodes, so
 * that a repeated fetch costs no Redis round trip.
 */
#include "directory/directory_int.h"

/* Frees a cache's values and the map. */
void dir_cache_clear(idmap *m)
{
    size_t pos = 0;
    void *v;

    while ((v = idmap_next(m, &pos, NULL)))
        free(v);
    idmap_free(m);
}

/* The node cache is an idmap keyed by a 128-bit hash of the node id; entries keep the id,
 * so that a collision reads as a miss. */
void dir_node_cache_key(const char *node_id, ferry_id *key)
{
    XXH128_hash_t h = XXH3_128bits(node_id, strlen(node_id));

    memset(key, 0, sizeof(*key));
    memcpy(key->bytes, &h.low64, sizeof(h.low64));
    memcpy(key->bytes + sizeof(h.low64), &h.high64, sizeof(h.high64));
}

/* The node's cached entry while it is trusted, else NULL. */
const struct directory_node *dir_node_cached(const struct directory *d, const char *node_id)
{
    ferry_id key;
    const struct cached_node *c;

    dir_node_cache_key(node_id, &key);
    c = idmap_get(&d->nodes, &key);
    if (!c || strcmp(c->node.id, node_id) != 0 || c->expires_ms <= loop_now_ms())
        return NULL;
    return &c->node;
}

int dir_node_seen(const struct directory *d, const char *node_id)
{
    ferry_id key;
    const struct cached_node *c;

    dir_node_cache_key(node_id, &key);
    c = idmap_get(&d->nodes, &key);
    return c && strcmp(c->node.id, node_id) == 0;
}

/* Caches a node's entry for ttl_ms, as long as Redis keeps a dead node's entry: a dead node
 * leaves the answers at most about 2 * ttl_ms after its last heartbeat. */
void dir_node_remember(struct directory *d, const struct directory_node *node)
{
    ferry_id key;
    struct cached_node *c;

    dir_node_cache_key(node->id, &key);
    c = idmap_get(&d->nodes, &key);
    if (!c) {
        if (d->nodes.count >= NODE_CACHE_MAX)
            dir_cache_clear(&d->nodes);
        c = malloc(sizeof(*c));
        if (!c || idmap_put(&d->nodes, &key, c) < 0) {
            free(c);
            return;
        }
    }
    c->node = *node;
    c->expires_ms = loop_now_ms() + d->ttl_ms;
}

/* Caches the live holders a lookup found and the id's content, replacing what was cached for
 * the id; none found, or holders left out, leaves nothing cached (the next lookup asks Redis
 * again). */
void dir_holders_remember(struct directory *d, const struct request *r)
{
    struct cached_holders *h;

    free(idmap_remove(&d->holders, &r->id));
    if (!r->a.n || r->a.ngone || !r->a.has_content)
        return;
    if (d->holders.count >= HOLDER_CACHE_MAX)
        dir_cache_clear(&d->holders);
    h = malloc(sizeof(*h) + r->a.n * sizeof(h->h[0]));
    if (!h)
        return;
    h->size = r->a.size;
    memcpy(h->digest, r->a.digest, DIGEST_LEN);
    memcpy(h->gen, r->a.gen, sizeof(h->gen));
    h->n = r->a.n;
    for (size_t i = 0; i < r->a.n; i++) {
        memcpy(h->h[i].id, r->nodes[i].id, sizeof(h->h[i].id));
        h->h[i].inc = r->nodes[i].inc;
    }
    if (idmap_put(&d->holders, &r->id, h) < 0)
        free(h);
}

/* Removes node_id from a cached holder list. */
void dir_holders_drop(struct cached_holders *h, const char *node_id)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->h[i].id, node_id) == 0) {
            h->h[i] = h->h[--h->n];
            return;
        }
    }
}

/* Fills r's answer from the cache: 1 when every cached holder of the id has a trusted entry
 * of the same incarnation, else 0 (a miss: Redis is asked). */
int dir_answer_from_cache(const struct directory *d, struct request *r)
{
    const struct cached_holders *h = idmap_get(&d->holders, &r->id);

    if (!h || !h->n)
        return 0;
    r->nodes = calloc(h->n, sizeof(*r->nodes));
    if (!r->nodes)
        return 0;
    r->cap = h->n;
    for (size_t i = 0; i < h->n; i++) {
        const struct directory_node *node = dir_node_cached(d, h->h[i].id);
        if (!node || node->inc != h->h[i].inc)
            return 0;
        r->nodes[i] = *node;
    }
    r->a.n = h->n;
    r->a.cached = 1;
    r->a.has_content = 1;
    r->a.size = h->size;
    memcpy(r->a.digest, h->digest, DIGEST_LEN);
    memcpy(r->a.gen, h->gen, sizeof(r->a.gen));
    return 1;
}
