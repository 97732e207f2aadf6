/* ops.c - libferry's object operations (put and put_many are in put.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client.h"
#include "client/private.h"
#include "common/err.h"

/* Sends a request whose whole payload is one id and reads its reply (c->rd after the
 * status). */
static int id_call(struct ferry_client *c, uint16_t type, const ferry_id *id)
{
    client_req_begin(c, type);
    pbuf_id(&c->out, id);
    return client_call(c, type);
}

/* The same, for a reply that is a bare status. */
static int id_request(struct ferry_client *c, uint16_t type, const ferry_id *id)
{
    int rc = id_call(c, type, id);
    return rc < 0 ? rc : client_reply_end(c);
}

/* Aborts the object just created, keeping the caller's error detail. */
static int create_undo(struct ferry_client *c, const ferry_id *id, int rc)
{
    char why[PROTO_MAX_DETAIL + 1];

    snprintf(why, sizeof(why), "%s", ferry_errmsg());
    if (id_request(c, PROTO_ABORT, id) < 0 && !c->broken)
        client_broken(c, FERRY_EPROTO); /* left behind: nothing later may reuse the id's room */
    return err_set(rc, "%s", why);
}

int client_create(struct ferry_client *c, const ferry_id *id, uint64_t data_size,
                  const void *metadata, uint64_t metadata_size, int private, uint8_t **data)
{
    struct cheld *h;
    uint8_t *at;
    uint64_t offset;
    int rc;

    client_req_begin(c, PROTO_CREATE);
    pbuf_id(&c->out, id);
    pbuf_u64(&c->out, data_size);
    pbuf_u64(&c->out, metadata_size);
    if (!private) /* written through the writable view: pages of its own (wview.h) */
        pbuf_u8(&c->out, PROTO_CREATE_OWN_PAGES);
    if ((rc = client_call(c, PROTO_CREATE)) < 0)
        return rc;
    offset = prd_u64(&c->rd);
    if ((rc = client_reply_end(c)) < 0 ||
        (rc = client_check_range(c, offset, data_size, metadata_size)) < 0)
        return rc;
    if ((rc = client_held_add(c, id, 1)) < 0)
        goto abort_object;
    if (!private && (rc = wview_open(&c->wv, offset, data_size + metadata_size)) < 0)
        goto drop_held;
    h = idmap_get(&c->held, id);
    h->woff = offset;
    h->wopen = !private && data_size + metadata_size > 0;
    at = (private ? c->copy_base : c->wv.base) + offset;
    if (metadata_size)
        memcpy(at + data_size, metadata, metadata_size);
    *data = at;
    return 0;

drop_held:
    client_held_drop(c, id);
abort_object:
    return create_undo(c, id, rc);
}

int ferry_create(ferry_client *c, const ferry_id *id, uint64_t data_size, const void *metadata,
                 uint64_t metadata_size, uint8_t **data)
{
    int rc;

    if (!id || !data || (metadata_size && !metadata))
        return err_set(FERRY_EINVAL, "create: NULL id, data or metadata");
    if ((rc = client_enter(c)) < 0)
        return rc;
    return client_leave(c, client_create(c, id, data_size, metadata, metadata_size, 0, data));
}

int client_create_for_copy(ferry_client *c, const ferry_id *id, uint64_t data_size,
                           const void *metadata, uint64_t metadata_size, uint8_t **copy_to,
                           const uint8_t **readable)
{
    int rc;

    if (!id || !copy_to || !readable || (metadata_size && !metadata))
        return err_set(FERRY_EINVAL, "create: NULL id, data or metadata");
    if ((rc = client_enter(c)) < 0)
        return rc;
    if ((rc = client_create(c, id, data_size, metadata, metadata_size, 1, copy_to)) == 0)
        *readable = c->base + (*copy_to - c->copy_base);
    return client_leave(c, rc);
}

/* Our unsealed object id takes no more writes: its pages turn read-only in the writable view. */
static void writes_end(struct ferry_client *c, const ferry_id *id)
{
    struct cheld *h = idmap_get(&c->held, id);

    if (h && h->unsealed && h->wopen) {
        h->wopen = 0;
        wview_close(&c->wv, h->woff);
    }
}

/* Our unsealed object id is sealed (or gone) now. */
static void unsealed_done(struct ferry_client *c, const ferry_id *id)
{
    struct cheld *h = idmap_get(&c->held, id);

    writes_end(c, id);
    if (h)
        h->unsealed = 0;
}

/* The daemon dropped our unsealed object id, and our creator's reference with it. */
static void unsealed_gone(struct ferry_client *c, const ferry_id *id)
{
    struct cheld *h = idmap_get(&c->held, id);

    if (h && h->unsealed) {
        unsealed_done(c, id);
        client_held_drop(c, id);
    }
}

int client_seal(struct ferry_client *c, const ferry_id *id, int release)
{
    int rc;

    /* Writes end before the seal is asked: a seal that fails on the way (a timeout, a lost
     * connection) may have sealed the object all the same. After a failed seal the object
     * can be sealed again or aborted, not written. */
    writes_end(c, id);
    client_req_begin(c, PROTO_SEAL);
    pbuf_id(&c->out, id);
    pbuf_u8(&c->out, (uint8_t)release);
    if ((rc = client_call(c, PROTO_SEAL)) == FERRY_EEXIST)
        unsealed_gone(c, id); /* --strict-ids: another node holds other content: aborted */
    if (rc < 0 || (rc = client_reply_end(c)) < 0)
        return rc;
    unsealed_done(c, id);
    if (release)
        client_held_drop(c, id);
    return 0;
}

int ferry_seal(ferry_client *c, const ferry_id *id)
{
    int rc;

    if (!id)
        return err_set(FERRY_EINVAL, "seal: NULL id");
    if ((rc = client_enter(c)) < 0)
        return rc;
    return client_leave(c, client_seal(c, id, 0));
}

int client_abort(struct ferry_client *c, const ferry_id *id)
{
    int rc = id_request(c, PROTO_ABORT, id);

    if (rc == 0)
        unsealed_gone(c, id);
    return rc;
}

int ferry_abort(ferry_client *c, const ferry_id *id)
{
    int rc;

    if (!id)
        return err_set(FERRY_EINVAL, "abort: NULL id");
    if ((rc = client_enter(c)) < 0)
        return rc;
    rc = client_abort(c, id);
    return client_leave(c, rc);
}

/* Reads one entry of a GET reply into b (no reference recorded yet); one not found gets
 * missing as its status. */
static int get_entry(struct ferry_client *c, ferry_buffer *b, int missing)
{
    int32_t status = (int32_t)prd_u32(&c->rd);
    uint64_t offset = prd_u64(&c->rd);
    int rc;

    memset(b, 0, sizeof(*b));
    b->data_size = prd_u64(&c->rd);
    b->metadata_size = prd_u64(&c->rd);
    if (c->rd.bad || status > 0 || status < FERRY_ERROR_MIN)
        return client_broken(c, err_set(FERRY_EPROTO, "get: malformed entry"));
    /* Absent is told as the caller's call has it; a spilled object that could not be read
     * back (FERRY_EIO, FERRY_ENOSPACE) keeps its own status. */
    b->status = status == FERRY_ENOENT ? missing : status;
    if (status != 0)
        return 0;
    if ((rc = client_check_range(c, offset, b->data_size, b->metadata_size)) < 0)
        return rc;
    b->data = c->base + offset;
    b->metadata = b->data + b->data_size;
    return 0;
}

/* Sends RELEASE for a reference the daemon holds for us. */
static int send_release(struct ferry_client *c, const ferry_id *id)
{
    client_req_begin(c, PROTO_RELEASE);
    pbuf_id(&c->out, id);
    return client_req_send(c);
}

/* Records a reference per found entry. If one cannot be recorded (out of memory), every found
 * entry's reference goes back to the daemon, so that a failed get holds nothing. */
static int get_hold(struct ferry_client *c, const ferry_id *ids, size_t n, ferry_buffer *out)
{
    size_t added = 0;
    int rc = 0;

    for (; added < n && rc == 0; added++)
        if (out[added].status == 0)
            rc = client_held_add(c, &ids[added], 0);
    if (rc == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (out[i].status != 0)
            continue;
        if (i + 1 < added)
            client_held_drop(c, &ids[i]);
        if (send_release(c, &ids[i]) < 0)
            break;
    }
    return rc;
}

int ferry_get(ferry_client *c, const ferry_id *ids, size_t n, int64_t timeout_ms, ferry_buffer *out)
{
    int absent = timeout_ms == 0 ? FERRY_ENOENT : FERRY_ETIMEDOUT, failed = 0;
    size_t missing = 0;
    int rc;

    if ((n && (!ids || !out)) || n > PROTO_MAX_IDS || timeout_ms < -1)
        return err_set(FERRY_EINVAL, "get: %zu ids (at most %u), timeout %lld ms", n, PROTO_MAX_IDS,
                       (long long)timeout_ms);
    if ((rc = client_enter(c)) < 0)
        return rc;
    /* The index of a dead daemon lists what nobody can be given any more (client_alive). */
    if ((rc = client_alive(c, FERRY_ALIVE_CHECK_MS)) < 0)
        return client_leave(c, rc);
    if (client_fast_get(c, ids, n, out))
        return client_leave(c, 0);
    client_req_begin(c, PROTO_GET);
    pbuf_u64(&c->out, (uint64_t)timeout_ms);
    pbuf_u32(&c->out, (uint32_t)n);
    pbuf_put(&c->out, ids, n * sizeof(ferry_id));
    if ((rc = client_call_wait(c, PROTO_GET, timeout_ms)) < 0) {
        for (size_t i = 0; c->broken && i < n; i++)
            out[i] = (ferry_buffer){.status = FERRY_ECONN};
        return client_leave(c, rc);
    }
    if (prd_u32(&c->rd) != n)
        return client_leave(c, client_broken(c, err_set(FERRY_EPROTO, "get: reply count")));
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = get_entry(c, &out[i], absent);
        missing += out[i].status != 0;
        if (!failed && out[i].status != 0 && out[i].status != absent)
            failed = out[i].status;
    }
    if (rc == 0)
        rc = client_reply_end(c);
    if (rc == 0)
        rc = get_hold(c, ids, n, out);
    if (rc == 0 && failed)
        rc = err_set(failed, "%zu of %zu objects not read: %s (ferryd's log names them)", missing,
                     n, ferry_strerror(failed));
    else if (rc == 0 && missing)
        rc = err_set(absent, "%zu of %zu objects %s", missing, n,
                     absent == FERRY_ENOENT ? "not in the store" : "not sealed in time");
    return client_leave(c, rc);
}

int ferry_get_fast(ferry_client *c, const ferry_id *ids, size_t n, ferry_buffer *out)
{
    int rc;

    if ((n && (!ids || !out)) || n > PROTO_MAX_IDS)
        return err_set(FERRY_EINVAL, "get_fast: %zu ids (at most %u)", n, PROTO_MAX_IDS);
    if ((rc = client_enter(c)) < 0)
        return rc;
    if (!c->fast_on)
        rc = err_set(FERRY_ENOSYS, "get_fast: this handle reads no shared index (FERRY_FASTPATH=0, "
                                   "or no block of slots was free at its connection)");
    else if ((rc = client_alive(c, FERRY_ALIVE_CHECK_MS)) < 0)
        ; /* the index of a dead daemon: nothing it lists can be had from it any more */
    else if (n && !client_fast_get(c, ids, n, out))
        rc = err_set(FERRY_ENOENT, "%zu objects not all in this node's shared index", n);
    for (size_t i = 0; rc < 0 && i < n; i++)
        out[i] = (ferry_buffer){.status = rc};
    return client_leave(c, rc);
}

int ferry_release(ferry_client *c, const ferry_id *id)
{
    struct cheld *h;
    int rc;

    if (!id)
        return err_set(FERRY_EINVAL, "release: NULL id");
    if ((rc = client_enter(c)) < 0)
        return rc;
    h = idmap_get(&c->held, id);
    if (!h)
        return client_leave(c, err_set(FERRY_EINVAL, "release: this client holds no reference"));
    if (h->unsealed && h->refs == 1)
        return client_leave(c, err_set(FERRY_ENOTSEALED, "release: seal or abort it first"));
    if (client_fast_release(c, id))
        return client_leave(c, 0);
    client_req_begin(c, PROTO_RELEASE);
    pbuf_id(&c->out, id);
    if ((rc = client_req_send(c)) == 0)
        client_held_drop(c, id);
    return client_leave(c, rc);
}

int ferry_contains(ferry_client *c, const ferry_id *id, int *present)
{
    int rc;

    if (!id || !present)
        return err_set(FERRY_EINVAL, "contains: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    if ((rc = id_call(c, PROTO_CONTAINS, id)) == 0) {
        *present = prd_u8(&c->rd); /* enum ferry_presence */
        rc = client_reply_end(c);
        if (rc == 0 && *present > FERRY_ON_DISK)
            rc = client_broken(c, err_set(FERRY_EPROTO, "contains: presence %d", *present));
    }
    return client_leave(c, rc);
}

static int delete_request(ferry_client *c, uint16_t type, const ferry_id *id)
{
    int rc;

    if (!id)
        return err_set(FERRY_EINVAL, "delete: NULL id");
    if ((rc = client_enter(c)) < 0)
        return rc;
    return client_leave(c, id_request(c, type, id));
}

int ferry_delete(ferry_client *c, const ferry_id *id)
{
    return delete_request(c, PROTO_DELETE, id);
}

int ferry_delete_unused(ferry_client *c, const ferry_id *id)
{
    return delete_request(c, PROTO_DELETE_UNUSED, id);
}

int ferry_delete_cluster(ferry_client *c, const ferry_id *id)
{
    return delete_request(c, PROTO_DELETE_CLUSTER, id);
}

int ferry_digest(ferry_client *c, const ferry_id *id, uint8_t out[FERRY_DIGEST_LEN])
{
    const uint8_t *p;
    int rc;

    if (!id || !out)
        return err_set(FERRY_EINVAL, "digest: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    if ((rc = id_call(c, PROTO_HASH, id)) == 0) {
        if ((p = prd_bytes(&c->rd, FERRY_DIGEST_LEN)))
            memcpy(out, p, FERRY_DIGEST_LEN);
        rc = client_reply_end(c);
    }
    return client_leave(c, rc);
}

int ferry_hash(ferry_client *c, const ferry_id *id, uint64_t *digest)
{
    uint8_t root[FERRY_DIGEST_LEN] = {0};
    int rc;

    if (!digest)
        return err_set(FERRY_EINVAL, "hash: NULL argument");
    if ((rc = ferry_digest(c, id, root)) < 0)
        return rc;
    *digest = 0;
    for (int i = 7; i >= 0; i--)
        *digest = *digest << 8 | root[i];
    return 0;
}

int ferry_refresh(ferry_client *c, const ferry_id *ids, size_t n)
{
    int rc;

    if ((n && !ids) || n > PROTO_MAX_IDS)
        return err_set(FERRY_EINVAL, "refresh: %zu ids (at most %u)", n, PROTO_MAX_IDS);
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_REFRESH);
    pbuf_u32(&c->out, (uint32_t)n);
    pbuf_put(&c->out, ids, n * sizeof(ferry_id));
    if ((rc = client_call(c, PROTO_REFRESH)) == 0)
        rc = client_reply_end(c);
    return client_leave(c, rc);
}

int ferry_evict(ferry_client *c, uint64_t bytes, uint64_t *freed)
{
    uint64_t v;
    int rc;

    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_EVICT);
    pbuf_u64(&c->out, bytes);
    if ((rc = client_call(c, PROTO_EVICT)) == 0) {
        v = prd_u64(&c->rd);
        if ((rc = client_reply_end(c)) == 0 && freed)
            *freed = v;
    }
    return client_leave(c, rc);
}

static int list_entries(struct ferry_client *c, ferry_object_info **out, size_t *n)
{
    uint32_t count = prd_u32(&c->rd);
    ferry_object_info *v;

    if (c->rd.left < (size_t)count * (PROTO_LIST_ENTRY_SIZE + 1))
        return client_broken(c, err_set(FERRY_EPROTO, "list: reply of the wrong size"));
    if (!(v = calloc(count ? count : 1, sizeof(*v))))
        return err_set(FERRY_ENOMEM, "list of %u objects", count);
    for (uint32_t i = 0; i < count; i++) {
        prd_id(&c->rd, &v[i].id);
        v[i].data_size = prd_u64(&c->rd);
        v[i].metadata_size = prd_u64(&c->rd);
        v[i].state = prd_u8(&c->rd);
        v[i].refcount = prd_u32(&c->rd);
        v[i].age_ms = prd_u64(&c->rd);
        proto_get_str(&c->rd, v[i].name, sizeof(v[i].name));
    }
    if (c->rd.bad || c->rd.left) {
        free(v);
        return client_broken(c, err_set(FERRY_EPROTO, "list: reply of the wrong size"));
    }
    *out = v;
    *n = count;
    return 0;
}

void ferry_free(void *p)
{
    free(p);
}

int ferry_list(ferry_client *c, ferry_object_info **out, size_t *n)
{
    int rc;

    if (!out || !n)
        return err_set(FERRY_EINVAL, "list: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_LIST);
    if ((rc = client_call(c, PROTO_LIST)) == 0)
        rc = list_entries(c, out, n);
    return client_leave(c, rc);
}

int ferry_set_name(ferry_client *c, const ferry_id *id, const char *name)
{
    int rc;

    if (!id || !name)
        return err_set(FERRY_EINVAL, "set_name: NULL argument");
    if ((rc = proto_check_name(name)) < 0)
        return rc;
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_NAME);
    pbuf_id(&c->out, id);
    proto_put_str(&c->out, name, FERRY_NAME_MAX);
    if ((rc = client_call(c, PROTO_NAME)) == 0)
        rc = client_reply_end(c);
    return client_leave(c, rc);
}

int ferry_keep(ferry_client *c, const ferry_id *id, int keep)
{
    int rc;

    if (!id)
        return err_set(FERRY_EINVAL, "keep: NULL id");
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_KEEP);
    pbuf_id(&c->out, id);
    pbuf_u8(&c->out, keep != 0);
    if ((rc = client_call(c, PROTO_KEEP)) == 0)
        rc = client_reply_end(c);
    return client_leave(c, rc);
}

int ferry_subscribe(ferry_client *c, int *fd)
{
    int rc, got = -1;

    if (!fd)
        return err_set(FERRY_EINVAL, "subscribe: NULL argument");
    if ((rc = client_enter(c)) < 0)
        return rc;
    client_req_begin(c, PROTO_SUBSCRIBE);
    if ((rc = client_req_send(c)) == 0 && (rc = client_reply_read(c, PROTO_SUBSCRIBE, &got)) == 0)
        rc = client_reply_end(c);
    if (rc == 0 && got < 0)
        rc = err_set(FERRY_EPROTO, "subscribe: no descriptor in the reply");
    if (rc == 0)
        *fd = got;
    else if (got >= 0)
        close(got);
    return client_leave(c, rc);
}

int ferry_notification_read(int fd, ferry_notification *out)
{
    uint8_t rec[PROTO_NOTIFY_SIZE + 1];
    ssize_t n;

    if (fd < 0 || !out)
        return err_set(FERRY_EINVAL, "notification: bad argument");
    while ((n = recv(fd, rec, sizeof(rec), 0)) < 0 && errno == EINTR)
        ;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return err_set(FERRY_EAGAIN, "no notification pending");
    if (n < 0)
        return err_sys("recv(subscription)");
    if (n == 0)
        return err_set(FERRY_ECONN, "ferryd closed the subscription");
    return proto_decode_notification(rec, (size_t)n, out);
}
