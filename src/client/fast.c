/* fast.c - gets and releases without the daemon, through the shared index (common/fastidx.h):
 * a get of ids that are all sealed and resident takes slots of this client's block and sends
 * nothing; their release clears the slots. Anything else goes the daemon's way. */
#include <stdlib.h>

#include "client/client.h"
#include "common/err.h"

/* The copy's range lies in the arena: any client can write the index, so it is not trusted. */
static int in_arena(const struct ferry_client *c, const struct fastidx_hit *h)
{
    uint64_t a = h->data_size, b = h->metadata_size;

    return a <= c->arena_size && b <= c->arena_size - a && h->offset <= c->arena_size - a - b;
}

/* Records a reference held through slot s of our block. */
static int hold_fast(struct ferry_client *c, const ferry_id *id, int s)
{
    struct cheld *h;
    int *grown, rc = client_held_add(c, id, 0);

    if (rc < 0)
        return rc;
    h = idmap_get(&c->held, id);
    if (h->nfast == h->capfast) {
        uint32_t cap = h->capfast ? 2 * h->capfast : 2;
        if (!(grown = realloc(h->fast, cap * sizeof(*grown)))) {
            client_held_drop(c, id);
            return err_set(FERRY_ENOMEM, "reference record");
        }
        h->fast = grown;
        h->capfast = cap;
    }
    h->fast[h->nfast++] = s;
    return 0;
}

/* Gives back the last reference of id taken through a slot (h holds one). */
static void drop_fast(struct ferry_client *c, const ferry_id *id, struct cheld *h)
{
    fastidx_release(&c->fast, c->fast_block, h->fast[--h->nfast]);
    client_held_drop(c, id);
}

int client_fast_release(struct ferry_client *c, const ferry_id *id)
{
    struct cheld *h = idmap_get(&c->held, id);

    /* The daemon's references go first: one of an id created again while an older life is
     * held (create, seal, release) is the creator's, which only the daemon can give back. */
    if (!h || !h->nfast || h->refs > h->nfast)
        return 0;
    drop_fast(c, id, h);
    return 1;
}

int client_fast_get(struct ferry_client *c, const ferry_id *ids, size_t n, ferry_buffer *out)
{
    int slots[CLIENT_FAST_MAX_IDS];
    size_t got = 0, held = 0;

    if (!c->fast_on || n == 0 || n > CLIENT_FAST_MAX_IDS)
        return 0;
    for (; got < n; got++) {
        struct fastidx_hit hit;
        if (!fastidx_find(&c->fast, &ids[got], &hit) || !in_arena(c, &hit) ||
            (slots[got] = fastidx_claim(&c->fast, c->fast_block, c->fast_owner, &hit)) < 0)
            break;
        out[got] = (ferry_buffer){.status = 0,
                                  .data = c->base + hit.offset,
                                  .data_size = hit.data_size,
                                  .metadata = c->base + hit.offset + hit.data_size,
                                  .metadata_size = hit.metadata_size};
    }
    while (got == n && held < n && hold_fast(c, &ids[held], slots[held]) == 0)
        held++;
    if (held == n) {
        fastidx_count_gets(&c->fast, c->fast_block, 1); /* one get, as the daemon counts */
        return 1;
    }
    /* Not all at hand (or out of memory): what was taken is given back, the daemon answers. */
    for (size_t i = held; i-- > 0;)
        drop_fast(c, &ids[i], idmap_get(&c->held, &ids[i]));
    for (size_t i = held; i < got; i++)
        fastidx_release(&c->fast, c->fast_block, slots[i]);
    return 0;
}
