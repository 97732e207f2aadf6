#include "common/idmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/err.h"

/* Ids are often SHA-1 digests but need not be (raw ids chosen by users), so they are hashed. */
static uint64_t id_hash(const ferry_id *id)
{
    return XXH3_64bits(id->bytes, FERRY_ID_SIZE);
}

static struct idmap_slot *find_slot(const idmap *m, const ferry_id *id, uint64_t h)
{
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct idmap_slot *s = &m->slots[i];
        if (!s->value || (s->hash == h && memcmp(s->key.bytes, id->bytes, FERRY_ID_SIZE) == 0))
            return s;
    }
}

static int grow(idmap *m)
{
    size_t cap = m->mask ? (m->mask + 1) * 2 : 16;
    idmap bigger = {calloc(cap, sizeof(struct idmap_slot)), cap - 1, m->count};

    if (!bigger.slots)
        return err_set(FERRY_ENOMEM, "id map of %zu slots", cap);
    for (size_t i = 0; m->mask && i <= m->mask; i++) {
        if (m->slots[i].value)
            *find_slot(&bigger, &m->slots[i].key, m->slots[i].hash) = m->slots[i];
    }
    free(m->slots);
    *m = bigger;
    return 0;
}

void idmap_free(idmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

void *idmap_get(const idmap *m, const ferry_id *id)
{
    if (!m->count)
        return NULL;
    return find_slot(m, id, id_hash(id))->value;
}

int idmap_put(idmap *m, const ferry_id *id, void *value)
{
    uint64_t h = id_hash(id);
    struct idmap_slot *s = m->count ? find_slot(m, id, h) : NULL;

    /* Replacing never allocates, so it cannot fail. */
    if (s && s->value) {
        s->value = value;
        return 0;
    }
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 && grow(m) < 0)
        return FERRY_ENOMEM;
    s = find_slot(m, id, h);
    s->key = *id;
    s->hash = h;
    s->value = value;
    m->count++;
    return 0;
}

void *idmap_remove(idmap *m, const ferry_id *id)
{
    struct idmap_slot *s;
    size_t hole, i;
    void *value;

    if (!m->count)
        return NULL;
    s = find_slot(m, id, id_hash(id));
    if (!(value = s->value))
        return NULL;
    /* Backward shift: move later members of the probe run into the hole when their home slot
     * is not between the hole and their position. */
    hole = (size_t)(s - m->slots);
    for (i = (hole + 1) & m->mask; m->slots[i].value; i = (i + 1) & m->mask) {
        size_t home = m->slots[i].hash & m->mask;
        if (((i - home) & m->mask) >= ((i - hole) & m->mask)) {
            m->slots[hole] = m->slots[i];
            hole = i;
        }
    }
    m->slots[hole].value = NULL;
    m->count--;
    return value;
}

void *idmap_next(const idmap *m, size_t *pos, const ferry_id **key)
{
    for (; m->mask && *pos <= m->mask; (*pos)++) {
        struct idmap_slot *s = &m->slots[*pos];
        if (s->value) {
            (*pos)++;
            if (key)
                *key = &s->key;
            return s->value;
        }
    }
    return NULL;
}
