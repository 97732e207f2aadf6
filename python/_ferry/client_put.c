/* client_put.c - Client.put, put_many, create, seal, abort and the put_object primitive. */
#include "client.h"

#include "client/private.h"

#include <stdio.h>
#include <string.h>

#include "args.h"
#include "buffer.h"
#include "errors.h"
#include "objectid.h"
#include "objfmt.h"

/* One piece of a new object's data part: len bytes from src, at offset off. */
struct piece {
    const void *src;
    uint64_t off, len;
};

/* A failure's code and detail, kept across the calls that clean up after it. */
struct kept {
    int rc;
    char detail[400];
};

static int keep(struct kept *k, int rc)
{
    k->rc = rc;
    snprintf(k->detail, sizeof(k->detail), "%s", ferry_errmsg());
    return rc;
}

/* Copies the pieces into dst (size bytes), zeroing the gaps between them, so that the same
 * pieces always make the same bytes (and digest). */
static void fill(uint8_t *dst, uint64_t size, const struct piece *p, size_t n)
{
    uint64_t at = 0;

    for (size_t i = 0; i < n; i++) {
        memset(dst + at, 0, p[i].off - at);
        memcpy(dst + p[i].off, p[i].src, p[i].len);
        at = p[i].off + p[i].len;
    }
    memset(dst + at, 0, size - at);
}

/* How put_pieces leaves its object: evictable (NOWAIT: a small one put without waiting for the
 * daemon, ferry_put_nowait), kept, or held by the caller (*held set to its bytes) and deleted
 * when unused (ferry_delete_unused, before its seal: a caller that dies at any point leaves
 * nothing behind). */
enum put_mode { PUT_PLAIN, PUT_NOWAIT, PUT_KEEP, PUT_HOLD };

/* Stores a new sealed object of size data bytes made of the pieces (in order, not
 * overlapping), and gives its reference back (but PUT_HOLD). Small objects go through
 * libferry's staging area (one exchange; a gathered copy first when there are several pieces);
 * larger ones, and the others (kept or marked before their seal), are created, filled by this
 * thread and sealed, so that the handle is not held during the copy. Runs with the GIL
 * released. */
static int put_pieces(ferry_client *c, const ferry_id *id, uint64_t size, const Py_buffer *meta,
                      const struct piece *p, size_t n, enum put_mode mode, const uint8_t **held,
                      struct kept *fail)
{
    const uint8_t *readable;
    uint8_t *dst;
    int rc;

    if ((mode == PUT_PLAIN || mode == PUT_NOWAIT) &&
        size + (uint64_t)meta->len <= FERRY_SMALL_PUT_MAX) {
        uint8_t *tmp = n == 1 && p[0].len == size ? NULL : PyMem_RawMalloc(size ? size : 1);
        if (tmp)
            fill(tmp, size, p, n);
        else if (n != 1 || p[0].len != size)
            return keep(fail, FERRY_ENOMEM);
        rc = (mode == PUT_NOWAIT ? ferry_put_nowait : ferry_put)(c, id, tmp ? tmp : p[0].src, size,
                                                                 meta->buf, (uint64_t)meta->len);
        PyMem_RawFree(tmp);
        return rc < 0 ? keep(fail, rc) : 0;
    }
    /* dst is libferry's private writable mapping: filled here, never handed out. */
    if ((rc = client_create_for_copy(c, id, size, meta->buf, (uint64_t)meta->len, &dst,
                                     &readable)) < 0)
        return keep(fail, rc);
    fill(dst, size, p, n);
    if ((mode == PUT_KEEP && (rc = ferry_keep(c, id, 1)) < 0) ||
        (mode == PUT_HOLD && (rc = ferry_delete_unused(c, id)) < 0) ||
        (rc = ferry_seal(c, id)) < 0) {
        keep(fail, rc);
        ferry_abort(c, id);
        return rc;
    }
    if (mode == PUT_HOLD) {
        *held = readable; /* the read-only view: what a Buffer may show */
        return 0;
    }
    return ferry_release(c, id) < 0 ? keep(fail, FERRY_ECONN) : 0;
}

/* put_pieces on the main handle with the GIL released; the ObjectID (PUT_HOLD: a sealed Buffer
 * holding the object), or NULL. */
static PyObject *put_call(ClientObject *self, const ferry_id *id, uint64_t size,
                          const Py_buffer *meta, const struct piece *p, size_t n,
                          enum put_mode mode)
{
    struct pyf_conn *k = pyf_client_conn(self);
    struct kept fail = {0};
    const uint8_t *held = NULL;
    int rc;

    if (!k)
        return NULL;
    conn_enter(k);
    Py_BEGIN_ALLOW_THREADS
        rc = put_pieces(k->c, id, size, meta, p, n, mode, &held, &fail);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        pyf_raise_detail(rc, fail.detail);
    if (rc < 0 || mode != PUT_HOLD) {
        conn_leave(k, rc);
        if (rc < 0)
            return NULL;
        if (mode == PUT_NOWAIT)
            self->unflushed++; /* under the GIL: flush() answers for it */
        /* Large objects are better looked up (FERRY_LOCATED_MAX): they carry no location. */
        return pyf_id_new_at(
            id, size + (uint64_t)meta->len < FERRY_LOCATED_MAX ? pyf_client_here(self) : NULL);
    }
    conn_incref(k); /* the Buffer's */
    conn_leave(k, rc);
    return pyf_buffer_new(k, id,
                          &(ferry_buffer){.data = held,
                                          .data_size = size,
                                          .metadata = held + size,
                                          .metadata_size = (uint64_t)meta->len});
}

/* The bytes of a data or metadata argument: C-contiguous; NULL o is empty. -1 with TypeError
 * (not a buffer) or BufferError/ValueError (not contiguous). */
static int get_bytes(PyObject *o, Py_buffer *view, const char *what)
{
    if (!o) {
        memset(view, 0, sizeof(*view));
        return 0;
    }
    if (!PyObject_CheckBuffer(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bytes-like object, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    return PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS);
}

static void drop_bytes(Py_buffer *view)
{
    if (view->obj)
        PyBuffer_Release(view);
}

/* ObjectExists again, with the daemon's reason, what the user typed and what to do: ids are
 * written once. */
static void exists_again(PyObject *typed, const ferry_id *id)
{
    char hex[2 * FERRY_ID_SIZE + 1], name[160];
    PyObject *type, *value, *tb, *why;
    const char *said;

    PyErr_Fetch(&type, &value, &tb);
    why = value ? PyObject_Str(value) : NULL;
    said = why ? PyUnicode_AsUTF8(why) : NULL;
    if (!said) {
        PyErr_Clear();
        said = ferry_strerror(FERRY_EEXIST);
    }
    ferry_id_format(id, hex);
    pyf_typed_id(typed, name, sizeof(name));
    pyf_raise_msg(FERRY_EEXIST,
                  "%s (%sid %s). An id is written once: delete() it first (cluster=True on every "
                  "node), or put under another name; put_object() makes a fresh id each time",
                  said, name, hex);
    Py_XDECREF(why);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

PyObject *pyf_client_put(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    static const char *const names[] = {"id", "data", "metadata", "keep", "wait"};
    PyObject *a[5], *result = NULL;
    Py_buffer d = {0}, m = {0};
    int keep_it = 0, wait = 1;
    ferry_id id;

    if (pyf_parse_args("put", args, nargs, kwnames, names, 5, 2, a) < 0 ||
        pyf_id_from_object(a[0], &id) < 0 || (a[3] && (keep_it = PyObject_IsTrue(a[3])) < 0) ||
        (a[4] && (wait = PyObject_IsTrue(a[4])) < 0) || get_bytes(a[1], &d, "data") < 0 ||
        get_bytes(a[2], &m, "metadata") < 0)
        goto done;
    result = put_call(self, &id, (uint64_t)d.len, &m,
                      &(struct piece){.src = d.buf, .off = 0, .len = (uint64_t)d.len}, 1,
                      keep_it ? PUT_KEEP
                      : wait  ? PUT_PLAIN
                              : PUT_NOWAIT);
    if (!result && PyErr_ExceptionMatches(pyf_error_class(FERRY_EEXIST)))
        exists_again(a[0], &id);
done:
    drop_bytes(&d);
    drop_bytes(&m);
    return result;
}

/* ---- put_many ---- */

struct many {
    Py_ssize_t n;
    ferry_put_item *items;
    Py_buffer *views; /* 2 per item: data, metadata */
    int *statuses;
};

static int many_item(struct many *b, Py_ssize_t i, PyObject *item)
{
    Py_ssize_t len = PyTuple_Check(item) ? PyTuple_GET_SIZE(item) : -1;
    Py_buffer *d = &b->views[2 * i], *m = d + 1;

    if (len != 2 && len != 3) {
        PyErr_Format(PyExc_TypeError,
                     "put_many() item %zd must be a tuple (id, data) or (id, data, metadata)", i);
        return -1;
    }
    if (pyf_id_from_object(PyTuple_GET_ITEM(item, 0), &b->items[i].id) < 0 ||
        get_bytes(PyTuple_GET_ITEM(item, 1), d, "data") < 0 ||
        get_bytes(len == 3 ? PyTuple_GET_ITEM(item, 2) : NULL, m, "metadata") < 0)
        return -1;
    b->items[i].data = d->buf;
    b->items[i].data_size = (uint64_t)d->len;
    b->items[i].metadata = m->buf;
    b->items[i].metadata_size = (uint64_t)m->len;
    return 0;
}

/* The exception for failed items: the first one's class, with .failures listing each. */
static PyObject *many_failed(const struct many *b, int rc, const char *detail)
{
    char hex[2 * FERRY_ID_SIZE + 1], msg[512];
    PyObject *failures = PyList_New(0), *exc = NULL;
    Py_ssize_t first = -1, count = 0;

    for (Py_ssize_t i = 0; failures && i < b->n; i++) {
        int st = b->statuses[i];
        PyObject *id, *e, *t;
        if (st == 0)
            continue;
        if (first < 0)
            first = i;
        count++;
        ferry_id_format(&b->items[i].id, hex);
        snprintf(msg, sizeof(msg), "%s (item %zd, object %s)", ferry_strerror(st), i, hex);
        id = pyf_id_new(&b->items[i].id);
        e = pyf_error_new(st, msg);
        t = id && e ? Py_BuildValue("(nOO)", i, id, e) : NULL;
        if (!t || PyList_Append(failures, t) < 0)
            Py_CLEAR(failures);
        Py_XDECREF(id);
        Py_XDECREF(e);
        Py_XDECREF(t);
    }
    if (!failures)
        return NULL;
    if (first < 0) { /* the call failed as a whole: no item has a status of its own */
        Py_DECREF(failures);
        return pyf_raise_detail(rc, detail);
    }
    ferry_id_format(&b->items[first].id, hex);
    snprintf(msg, sizeof(msg), "put_many: %zd of %zd objects failed; the first, item %zd (%s): %s",
             count, b->n, first, hex, ferry_strerror(b->statuses[first]));
    if ((exc = pyf_error_new(b->statuses[first], msg)) &&
        PyObject_SetAttrString(exc, "failures", failures) == 0)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(exc);
    Py_DECREF(failures);
    return NULL;
}

/* The ids put, each with the node's location. */
static PyObject *many_ids(ClientObject *self, const struct many *b)
{
    PyObject *here = pyf_client_here(self), *list = PyList_New(b->n);

    for (Py_ssize_t i = 0; list && i < b->n; i++) {
        PyObject *id = pyf_id_new_at(&b->items[i].id, here);
        if (!id)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, id);
    }
    return list;
}

/* The daemon was found gone before the batch could be sent: every item failed, listed as a
 * failed send lists them (in place of the pending DaemonUnreachable). */
static PyObject *none_sent(struct many *b)
{
    PyErr_Clear();
    for (Py_ssize_t i = 0; i < b->n; i++)
        b->statuses[i] = FERRY_ECONN;
    return many_failed(b, FERRY_ECONN, "");
}

PyObject *pyf_client_put_many(ClientObject *self, PyObject *arg)
{
    PyObject *seq, *result = NULL;
    struct kept fail = {0};
    struct many b = {0};
    struct pyf_conn *k;
    int rc;

    /* A tuple of its own: a list could change while its items' buffers are taken. */
    if (!(seq = PySequence_Tuple(arg))) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError,
                            "put_many() takes an iterable of (id, data[, metadata]) tuples");
        }
        return NULL;
    }
    b.n = PyTuple_GET_SIZE(seq);
    b.items = PyMem_Calloc((size_t)b.n + 1, sizeof(*b.items));
    b.views = PyMem_Calloc(2 * (size_t)b.n + 1, sizeof(*b.views));
    b.statuses = PyMem_Calloc((size_t)b.n + 1, sizeof(*b.statuses));
    if (!b.items || !b.views || !b.statuses) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < b.n; i++)
        if (many_item(&b, i, PyTuple_GET_ITEM(seq, i)) < 0)
            goto done;
    if (!(k = pyf_client_conn(self))) {
        if (PyErr_ExceptionMatches(pyf_error_class(FERRY_ECONN)))
            result = none_sent(&b);
        goto done;
    }
    conn_enter(k);
    Py_BEGIN_ALLOW_THREADS
        rc = ferry_put_many(k->c, b.items, (size_t)b.n, b.statuses);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        keep(&fail, rc);
    conn_leave(k, rc);
    result = rc < 0 ? many_failed(&b, rc, fail.detail) : many_ids(self, &b);
done:
    for (Py_ssize_t i = 0; b.views && i < 2 * b.n; i++)
        drop_bytes(&b.views[i]);
    PyMem_Free(b.items);
    PyMem_Free(b.views);
    PyMem_Free(b.statuses);
    Py_DECREF(seq);
    return result;
}

/* ---- create, seal, abort ---- */

static int parse_size(PyObject *o, uint64_t *out)
{
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "size must be an int, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = PyLong_AsUnsignedLongLong(o);
    if (*out == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "size must be a non-negative number of bytes");
        return -1;
    }
    return 0;
}

/* Records buf as ours to seal or abort; on failure drops it (which aborts). */
static PyObject *remember(ClientObject *self, PyObject *buf)
{
    PyObject *key = pyf_id_new(&((BufferObject *)buf)->id);

    if (!key || PyDict_SetItem(self->creating, key, buf) < 0)
        Py_CLEAR(buf);
    Py_XDECREF(key);
    return buf;
}

PyObject *pyf_client_create(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = {"id", "size", "metadata"};
    PyObject *a[3], *result = NULL;
    Py_buffer m = {0};
    struct pyf_conn *k;
    uint8_t *data = NULL;
    uint64_t size;
    ferry_id id;
    int rc;

    if (pyf_parse_args("create", args, nargs, kwnames, names, 3, 2, a) < 0 ||
        pyf_id_from_object(a[0], &id) < 0 || parse_size(a[1], &size) < 0 ||
        get_bytes(a[2], &m, "metadata") < 0 || !(k = pyf_client_conn(self)))
        goto done;
    conn_enter(k);
    Py_BEGIN_ALLOW_THREADS
        rc = ferry_create(k->c, &id, size, m.buf, (uint64_t)m.len, &data);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        pyf_call_failed(k, rc);
        goto done;
    }
    conn_incref(k); /* the Buffer's */
    conn_leave(k, rc);
    result = pyf_buffer_new_unsealed(k, &id, data, size, data + size, (uint64_t)m.len);
    if (result)
        result = remember(self, result);
done:
    drop_bytes(&m);
    return result;
}

/* Our unsealed object's Buffer under id (a new reference, or NULL when there is none); -1 with
 * an exception. */
static int creating_get(ClientObject *self, const ferry_id *id, PyObject **key, BufferObject **buf)
{
    PyObject *b;

    *buf = NULL;
    if (!(*key = pyf_id_new(id)))
        return -1;
    b = PyDict_GetItemWithError(self->creating, *key);
    if (!b && PyErr_Occurred()) {
        Py_CLEAR(*key);
        return -1;
    }
    *buf = (BufferObject *)Py_XNewRef(b);
    return 0;
}

/* Forgets our unsealed object under key, if close() has not already: keeps whatever exception
 * is pending (the call's own failure) and raises none of its own. */
static void creating_forget(ClientObject *self, PyObject *key)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    if (PyDict_DelItem(self->creating, key) < 0)
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

enum seal_or_abort { DO_SEAL, DO_ABORT };

/* The daemon went before seal or abort could be asked (its end of the connection found
 * closed): an object of ours goes with it, and a seal's writes end as if it had been asked.
 * Keeps the pending DaemonUnreachable. */
static void gone_with_daemon(ClientObject *self, const ferry_id *id, enum seal_or_abort what)
{
    PyObject *type, *value, *tb, *key = NULL;
    BufferObject *buf = NULL;

    PyErr_Fetch(&type, &value, &tb);
    if (creating_get(self, id, &key, &buf) == 0 && buf) {
        if (what == DO_SEAL)
            pyf_buffer_writes_ended(buf);
        creating_forget(self, key);
    }
    PyErr_Clear();
    Py_XDECREF(buf);
    Py_XDECREF(key);
    PyErr_Restore(type, value, tb);
}

/* seal(id) and abort(id): on the handle that created the object when it was ours. */
static PyObject *finish(ClientObject *self, PyObject *idobj, enum seal_or_abort what)
{
    PyObject *key = NULL, *result = NULL;
    BufferObject *buf = NULL;
    struct pyf_conn *k;
    ferry_id id;
    int rc;

    if (pyf_id_from_object(idobj, &id) < 0)
        return NULL;
    if (!(k = pyf_client_conn(self))) {
        if (PyErr_ExceptionMatches(pyf_error_class(FERRY_ECONN)))
            gone_with_daemon(self, &id, what);
        return NULL;
    }
    if (creating_get(self, &id, &key, &buf) < 0)
        return NULL;
    if (buf && what == DO_ABORT && buf->exports) {
        PyErr_Format(PyExc_BufferError,
                     "cannot abort: %zd view%s of the object's Buffer %s alive (they would "
                     "point into freed memory); drop them first",
                     buf->exports, buf->exports == 1 ? "" : "s", buf->exports == 1 ? "is" : "are");
        goto done;
    }
    if (buf) {
        k = buf->conn;
        /* No new views while the GIL is let go for an abort that frees the bytes. */
        buf->aborting = what == DO_ABORT;
    }
    conn_enter(k);
    Py_BEGIN_ALLOW_THREADS
        rc = what == DO_SEAL ? ferry_seal(k->c, &id) : ferry_abort(k->c, &id);
    Py_END_ALLOW_THREADS
    if (buf)
        buf->aborting = 0;
    if (buf && what == DO_SEAL)
        pyf_buffer_writes_ended(buf);
    if (rc < 0) {
        pyf_call_failed(k, rc);
        if (buf && rc == FERRY_ECONN) /* the lost connection took the object with it */
            creating_forget(self, key);
        goto done;
    }
    conn_leave(k, rc);
    if (buf && what == DO_SEAL)
        pyf_buffer_sealed(buf);
    else if (buf)
        pyf_buffer_aborted(buf);
    if (buf)
        creating_forget(self, key);
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(buf);
    Py_XDECREF(key);
    return result;
}

PyObject *pyf_client_seal(ClientObject *self, PyObject *id)
{
    return finish(self, id, DO_SEAL);
}

PyObject *pyf_client_abort(ClientObject *self, PyObject *id)
{
    return finish(self, id, DO_ABORT);
}

/* ---- put_object's primitive ---- */

/* _put_parts(id, parts, keep=False, hold=False): one object holding the buffers of parts (a
 * tuple) at the offsets of objfmt.h, with their header as its metadata; one copy of each. The
 * ObjectID; with hold, a sealed Buffer over the object instead, which is deleted when unused
 * (Client.delete_unused) and so goes with the last holder's release. */
PyObject *pyf_client_put_parts(ClientObject *self, PyObject *args)
{
    PyObject *idobj, *parts, *result = NULL;
    struct objfmt_part *layout = NULL;
    struct piece *pieces = NULL;
    Py_buffer *views = NULL, meta = {0};
    uint8_t *header = NULL;
    uint64_t size;
    Py_ssize_t n;
    int keep_it = 0, hold = 0;
    ferry_id id;

    if (!PyArg_ParseTuple(args, "OO!|pp:_put_parts", &idobj, &PyTuple_Type, &parts, &keep_it,
                          &hold) ||
        pyf_id_from_object(idobj, &id) < 0)
        return NULL;
    if (keep_it && hold)
        return PyErr_Format(PyExc_ValueError, "_put_parts: keep or hold, not both (a held "
                                              "object is deleted when unused, never kept)");
    n = PyTuple_GET_SIZE(parts);
    views = PyMem_Calloc((size_t)n + 1, sizeof(*views));
    layout = PyMem_Calloc((size_t)n + 1, sizeof(*layout));
    pieces = PyMem_Calloc((size_t)n + 1, sizeof(*pieces));
    header = PyMem_Malloc(objfmt_header_size((size_t)n));
    if (!views || !layout || !pieces || !header) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (get_bytes(PyTuple_GET_ITEM(parts, i), &views[i], "a part") < 0)
            goto done;
        layout[i].length = (uint64_t)views[i].len;
    }
    if (objfmt_layout(layout, (size_t)n, &size) < 0) {
        PyErr_Format(PyExc_ValueError, "_put_parts: %zd parts (1 to %u)", n, OBJFMT_MAX_PARTS);
        goto done;
    }
    objfmt_encode(layout, (size_t)n, header);
    for (Py_ssize_t i = 0; i < n; i++)
        pieces[i] = (struct piece){views[i].buf, layout[i].offset, layout[i].length};
    meta.buf = header;
    meta.len = (Py_ssize_t)objfmt_header_size((size_t)n);
    result = put_call(self, &id, size, &meta, pieces, (size_t)n,
                      hold      ? PUT_HOLD
                      : keep_it ? PUT_KEEP
                                : PUT_PLAIN);
done:
    for (Py_ssize_t i = 0; views && i < n; i++)
        drop_bytes(&views[i]);
    PyMem_Free(views);
    PyMem_Free(layout);
    PyMem_Free(pieces);
    PyMem_Free(header);
    return result;
}
