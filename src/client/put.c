/*
 * put.c - ferry_put and ferry_put_many. Small objects are copied into this client's staging
 * area in the arena and put in batches, one message exchange per batch (the daemon copies
 * each into its object and seals it); larger ones take create + copy + seal-and-release,
 * two exchanges and no copy but the caller's. ferry_put_nowait copies a small object into this
 * client's ring (common/putring.h) and sends nothing, but a kick when the daemon sleeps;
 * ferry_flush answers for those puts.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/client.h"
#include "common/err.h"

/* Asks for the staging area once; a daemon without room now is asked again next time. */
static int staging_ready(struct ferry_client *c)
{
    uint64_t offset, size;
    int rc;

    if (c->staging_size)
        return 0;
    client_req_begin(c, PROTO_STAGE);
    if ((rc = client_call(c, PROTO_STAGE)) < 0)
        return rc;
    offset = prd_u64(&c->rd);
    size = prd_u64(&c->rd);
    if ((rc = client_reply_end(c)) < 0 || (rc = client_check_range(c, offset, size, 0)) < 0)
        return rc;
    c->staging_offset = offset;
    c->staging_size = size;
    return 0;
}

static uint64_t item_bytes(const ferry_put_item *it)
{
    return it->data_size + it->metadata_size;
}

static int item_small(struct ferry_client *c, const ferry_put_item *it)
{
    uint64_t n = item_bytes(it);
    return n >= it->data_size && n <= FERRY_SMALL_PUT_MAX && staging_ready(c) == 0 &&
           n <= c->staging_size;
}

static int item_check(const ferry_put_item *it)
{
    if ((it->data_size && !it->data) || (it->metadata_size && !it->metadata))
        return err_set(FERRY_EINVAL, "put: NULL data or metadata with a non-zero size");
    return 0;
}

static int put_large(struct ferry_client *c, const ferry_put_item *it)
{
    uint8_t *dst;
    int rc = client_create(c, &it->id, it->data_size, it->metadata, it->metadata_size, 1, &dst);

    if (rc < 0)
        return rc;
    if (it->data_size)
        memcpy(dst, it->data, it->data_size);
    if ((rc = client_seal(c, &it->id, 1)) < 0 && rc != FERRY_EEXIST && !c->broken) {
        /* Not sealed (--strict-ids without its directory): a put that failed leaves nothing. */
        char why[PROTO_MAX_DETAIL + 1];
        snprintf(why, sizeof(why), "%s", ferry_errmsg());
        client_abort(c, &it->id);
        err_set(rc, "%s", why);
    }
    return rc;
}

/* A batch being packed into the staging area. */
struct batch {
    const ferry_put_item *items;
    int *statuses;
    size_t *idx; /* indexes of the items packed so far, in order */
    size_t count, max;
    uint64_t used;
    char why[PROTO_MAX_DETAIL + 1]; /* the first failure's reason the daemon gave */
};

/* Sends the packed batch and records each object's status. */
static int batch_flush(struct ferry_client *c, struct batch *b)
{
    size_t count = b->count;
    uint64_t off = 0;
    char why[PROTO_MAX_DETAIL + 1];
    int rc, first;

    if (!count)
        return 0;
    client_req_begin(c, PROTO_PUT_BATCH);
    pbuf_u32(&c->out, (uint32_t)b->count);
    for (size_t k = 0; k < b->count; k++) {
        const ferry_put_item *it = &b->items[b->idx[k]];
        pbuf_id(&c->out, &it->id);
        pbuf_u64(&c->out, off);
        pbuf_u64(&c->out, it->data_size);
        pbuf_u64(&c->out, it->metadata_size);
        off += item_bytes(it);
    }
    b->count = 0;
    b->used = 0;
    if ((rc = client_call(c, PROTO_PUT_BATCH)) < 0 ||
        (rc = client_read_statuses(c, "put batch", count, b->idx, b->statuses, &first, why)) < 0)
        return rc;
    if (first && !b->why[0]) /* the first failure's reason, for the caller's ferry_errmsg */
        snprintf(b->why, sizeof(b->why), "%s", why);
    return 0;
}

/* Copies a small item into the staging area, flushing first when it would not fit. */
static int batch_add(struct ferry_client *c, struct batch *b, size_t i)
{
    const ferry_put_item *it = &b->items[i];
    uint8_t *dst;
    int rc;

    if (b->count == b->max || b->used + item_bytes(it) > c->staging_size) {
        if ((rc = batch_flush(c, b)) < 0)
            return rc;
    }
    dst = c->copy_base + c->staging_offset + b->used;
    if (it->data_size)
        memcpy(dst, it->data, it->data_size);
    if (it->metadata_size)
        memcpy(dst + it->data_size, it->metadata, it->metadata_size);
    b->used += item_bytes(it);
    b->idx[b->count++] = i;
    return 0;
}

/* statuses[i] is ITEM_PENDING until the item's own outcome is known. */
#define ITEM_PENDING 1

static int put_many_locked(struct ferry_client *c, struct batch *b, size_t n)
{
    int rc = 0;

    for (size_t i = 0; i < n && rc >= 0; i++) {
        const ferry_put_item *it = &b->items[i];
        int st = item_check(it);
        if (st < 0) {
            b->statuses[i] = st;
            continue;
        }
        if (item_small(c, it)) {
            rc = batch_add(c, b, i);
            continue;
        }
        /* Keep the callers' order: what was packed goes before this one. */
        if ((rc = batch_flush(c, b)) == 0 && (b->statuses[i] = put_large(c, it)) < 0 && !b->why[0])
            snprintf(b->why, sizeof(b->why), "%s", ferry_errmsg());
    }
    if (rc >= 0)
        rc = batch_flush(c, b);
    /* A failure of the exchange itself (a lost connection, a bad reply) is every unfinished
     * item's outcome: none of them can be known to be stored. */
    for (size_t i = 0; i < n; i++)
        if (b->statuses[i] == ITEM_PENDING)
            b->statuses[i] = rc < 0 ? rc : FERRY_EPROTO;
    return rc;
}

int ferry_put_many(ferry_client *c, const ferry_put_item *items, size_t n, int *statuses)
{
    size_t one[1];
    struct batch b = {.items = items, .statuses = statuses, .idx = one, .max = 1};
    int rc;

    if (n && (!items || !statuses))
        return err_set(FERRY_EINVAL, "put_many: NULL items or statuses");
    if (n > 1) {
        b.max = n < PROTO_MAX_BATCH ? n : PROTO_MAX_BATCH;
        if (!(b.idx = malloc(b.max * sizeof(*b.idx))))
            return err_set(FERRY_ENOMEM, "put batch of %zu", n);
    }
    for (size_t i = 0; i < n; i++)
        statuses[i] = ITEM_PENDING;
    if ((rc = client_enter(c)) == 0)
        rc = client_leave(c, put_many_locked(c, &b, n));
    for (size_t i = 0; i < n && rc < 0; i++)
        if (statuses[i] == ITEM_PENDING) /* client_enter failed: nothing was tried */
            statuses[i] = rc;
    if (b.idx != one)
        free(b.idx);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = statuses[i];
    if (rc < 0 && b.why[0]) /* the first failure's reason: the last call's may be another's */
        err_set(rc, "%s", b.why);
    return rc;
}

int ferry_put(ferry_client *c, const ferry_id *id, const void *data, uint64_t data_size,
              const void *metadata, uint64_t metadata_size)
{
    ferry_put_item it = {
        .data = data, .data_size = data_size, .metadata = metadata, .metadata_size = metadata_size};
    int status;

    if (!id)
        return err_set(FERRY_EINVAL, "put: NULL id");
    it.id = *id;
    return ferry_put_many(c, &it, 1, &status);
}

/* ---- puts without a message (common/putring.h) ---- */

/* Puts without a ring before a handle refused one (for now: too many rings, no memory) asks
 * again. */
#define RING_ASK_AGAIN 1024u

/* Asks for the ring: 1 when there is one, 0 when the daemon gives none (--strict-ids: for good;
 * otherwise asked again after RING_ASK_AGAIN puts), or the failure of the exchange. A ring this
 * process cannot map stays the daemon's until the handle disconnects. */
static int ring_ready(struct ferry_client *c)
{
    uint64_t size = 0;
    int rc, fd = -1;
    void *map;

    if (c->ring_state < 0 && c->ring_ask_in && --c->ring_ask_in == 0)
        c->ring_state = 0;
    if (c->ring_state)
        return c->ring_state > 0;
    client_req_begin(c, PROTO_RING);
    if ((rc = client_req_send(c)) == 0 && (rc = client_reply_read(c, PROTO_RING, &fd)) == 0) {
        size = prd_u64(&c->rd);
        rc = client_reply_end(c);
    }
    if (rc == 0 && (fd < 0 || size > SIZE_MAX || putring_layout(&c->ring, NULL, size) < 0))
        rc = client_broken(c, err_set(FERRY_EPROTO, "ring: %s of %" PRIu64 " bytes",
                                      fd < 0 ? "no descriptor" : "a ring", size));
    if (rc == 0 &&
        (map = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) != MAP_FAILED) {
        putring_layout(&c->ring, map, size);
        c->ring_size = size;
        c->ring_state = 1;
    }
    if (fd >= 0)
        close(fd);
    if (c->ring_state == 0 && !c->broken) { /* refused, or unmappable here: puts wait */
        c->ring_state = -1;
        c->ring_ask_in = rc == FERRY_ENOSYS || rc == 0 ? 0 : RING_ASK_AGAIN;
    }
    return c->broken ? rc : c->ring_state > 0;
}

/* Waits until the daemon has taken every put of the ring; with report, answers the first
 * failure since the last report. */
static int ring_flush(struct ferry_client *c, int report)
{
    int rc;

    client_req_begin(c, PROTO_FLUSH);
    pbuf_u8(&c->out, (uint8_t)report);
    if ((rc = client_call(c, PROTO_FLUSH)) < 0)
        return rc;
    return client_reply_end(c);
}

static int ring_push(struct ferry_client *c, const ferry_put_item *it)
{
    return putring_push(&c->ring, &c->ring_tail, &c->ring_data_tail, &it->id, it->data,
                        it->data_size, it->metadata, it->metadata_size);
}

static int put_nowait_locked(struct ferry_client *c, const ferry_put_item *it)
{
    int rc = ring_ready(c), status;
    struct batch b = {.items = it, .statuses = &status, .idx = (size_t[1]){0}, .max = 1};

    if (rc == 1) {
        rc = ring_push(c, it);
        if (rc == FERRY_EAGAIN && (rc = ring_flush(c, 0)) == 0) /* full: wait for the daemon */
            rc = ring_push(c, it);
        if (rc == 1) { /* the daemon sleeps: a kick, which it does not answer */
            client_req_begin(c, PROTO_KICK);
            rc = client_req_send(c);
        }
        if (rc != FERRY_ETOOBIG && rc != FERRY_EAGAIN)
            return rc;
    } else if (rc < 0) {
        return rc;
    }
    /* No ring, or too large for one: as ferry_put, its outcome known now. */
    status = ITEM_PENDING;
    if ((rc = put_many_locked(c, &b, 1)) < 0)
        return rc;
    if (status < 0 && b.why[0])
        err_set(status, "%s", b.why);
    return status;
}

int ferry_put_nowait(ferry_client *c, const ferry_id *id, const void *data, uint64_t data_size,
                     const void *metadata, uint64_t metadata_size)
{
    ferry_put_item it = {
        .data = data, .data_size = data_size, .metadata = metadata, .metadata_size = metadata_size};
    int rc;

    if (!id)
        return err_set(FERRY_EINVAL, "put_nowait: NULL id");
    it.id = *id;
    if ((rc = item_check(&it)) < 0 || (rc = client_enter(c)) < 0)
        return rc;
    if ((rc = client_alive(c, FERRY_ALIVE_CHECK_MS)) < 0) /* a ring nobody reads any more */
        return client_leave(c, rc);
    return client_leave(c, put_nowait_locked(c, &it));
}

int ferry_flush(ferry_client *c)
{
    int rc;

    if ((rc = client_enter(c)) < 0)
        return rc;
    return client_leave(c, c->ring_state > 0 ? ring_flush(c, 1) : 0);
}
