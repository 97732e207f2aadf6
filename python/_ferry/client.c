/* client.c - ferry.Client: its life, its handles, and the calls that do not wait. */
#include "client.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "common/clock.h"
#include "client/default_socket.h" /* libferry's */
#include "buffer.h"
#include "errors.h"
#include "objectid.h"
#include "subscription.h"

/* ---- handles ---- */

PyObject *pyf_call_failed(struct pyf_conn *k, int rc)
{
    /* A call (not some of its ids) that timed out is the connection's timeout: the handle is
     * given up, and the next call connects again. */
    if (rc == FERRY_ETIMEDOUT)
        k->broken = 1;
    pyf_raise(rc);
    conn_leave(k, rc);
    return NULL;
}

static int check_process(ClientObject *self)
{
    if (self->generation == pyf_fork_generation())
        return 0;
    PyErr_Format(pyf_error_base(),
                 "this Client was connected by process %ld and cannot be used in process %ld "
                 "after fork(): connect a new Client in the child",
                 (long)self->pid, (long)getpid());
    return -1;
}

/* Lets the pool of waiting handles go (those taken go when given back: pyf_waiter_give sees
 * them broken, or of another main). */
static void drop_idle(ClientObject *self)
{
    while (self->n_idle)
        conn_decref(self->idle[--self->n_idle]);
}

struct pyf_conn *pyf_client_conn(ClientObject *self)
{
    for (;;) {
        struct pyf_conn *old = self->main, *k;
        int rc;

        if (!old) {
            PyErr_SetString(PyExc_ValueError, "operation on a closed Client");
            return NULL;
        }
        if (check_process(self) < 0)
            return NULL;
        /* A daemon restarted since the last call costs no failed call: its end is closed.
         * Looked at once per FERRY_ALIVE_CHECK_MS at most (no restart is that fast), and
         * without the GIL: the look waits for another thread's call on the handle. */
        if (!old->broken) {
            uint64_t now = clock_mono_ns();
            int up;
            if (now - old->checked_ns < FERRY_ALIVE_CHECK_MS * 1000000ull)
                return old;
            old->checked_ns = now;
            conn_incref(old); /* a close by another thread meanwhile frees nothing under us */
            Py_BEGIN_ALLOW_THREADS
                up = ferry_connected(old->c);
            Py_END_ALLOW_THREADS
            conn_decref(old);
            if (self->main != old)
                continue; /* closed, or reconnected by another thread, meanwhile */
            if (up)
                return old;
            old->broken = 1;
        }
        /* The daemon went away (or restarted): a new connection, if one answers. */
        if ((rc = conn_open(self->path, self->timeout_ms, &k)) < 0)
            return (struct pyf_conn *)pyf_raise(rc);
        if (self->main != old) { /* closed, or reconnected by another thread, meanwhile */
            conn_decref(k);
            continue;
        }
        conn_decref(old);
        self->main = k;
        self->mains++;
        drop_idle(self);               /* the waiting handles were the old daemon's too */
        Py_CLEAR(self->here);          /* a restarted daemon is another run: another location */
        self->lost += self->unflushed; /* their failures, if any, went with the connection */
        self->unflushed = 0;
        return k;
    }
}

/* Waits, with the GIL released, until a handle comes back or the deadline passes: 0, or -1
 * with Timeout (or a signal handler's exception). */
static int wait_for_return(ClientObject *self, const struct pyf_deadline *d)
{
    uint64_t seen;
    int timed_out = 0;

    pthread_mutex_lock(&self->wait_lock);
    seen = self->returns;
    pthread_mutex_unlock(&self->wait_lock);
    Py_BEGIN_ALLOW_THREADS
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t ms = pyf_deadline_slice_ms(d, PYF_SLICE_MS);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&self->wait_lock);
        while (self->returns == seen && !timed_out)
            timed_out =
                pthread_cond_timedwait(&self->wait_cond, &self->wait_lock, &until) == ETIMEDOUT;
        pthread_mutex_unlock(&self->wait_lock);
    Py_END_ALLOW_THREADS
    if (PyErr_CheckSignals() < 0)
        return -1;
    if (pyf_deadline_passed(d)) {
        pyf_raise_msg(FERRY_ETIMEDOUT,
                      "timed out: all %d waiting connections of this Client are "
                      "in use",
                      PYF_MAX_WAITERS);
        return -1;
    }
    return 0;
}

struct pyf_conn *pyf_waiter_take(ClientObject *self, const struct pyf_deadline *d)
{
    for (;;) {
        struct pyf_conn *k;
        int rc;

        if (!pyf_client_conn(self))
            return NULL;
        while (self->n_idle) {
            k = self->idle[--self->n_idle];
            if (!k->broken) {
                self->n_out++;
                return k;
            }
            conn_decref(k);
        }
        if (self->n_out < PYF_MAX_WAITERS) {
            self->n_out++;
            if ((rc = conn_open(self->path, self->timeout_ms, &k)) == 0) {
                k->main_no = self->mains;
                return k;
            }
            self->n_out--;
            return (struct pyf_conn *)pyf_raise(rc);
        }
        if (wait_for_return(self, d) < 0)
            return NULL;
    }
}

void pyf_waiter_return(ClientObject *self, struct pyf_conn *k)
{
    self->n_out--;
    if (self->main && !k->broken && k->main_no == self->mains && self->n_idle < PYF_MAX_WAITERS)
        self->idle[self->n_idle++] = k;
    else
        conn_decref(k);
    pthread_mutex_lock(&self->wait_lock);
    self->returns++;
    pthread_cond_broadcast(&self->wait_cond);
    pthread_mutex_unlock(&self->wait_lock);
}

/* ---- life ---- */

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    ClientObject *self = (ClientObject *)type->tp_alloc(type, 0);

    if (!self)
        return NULL;
    if (!(self->creating = PyDict_New())) {
        Py_DECREF(self);
        return NULL;
    }
    pthread_mutex_init(&self->wait_lock, NULL);
    pthread_cond_init(&self->wait_cond, NULL);
    self->pid = getpid();
    self->generation = pyf_fork_generation();
    return (PyObject *)self;
}

/* Drops the handles. Buffers keep theirs; our unsealed objects are aborted. */
static void client_close_handles(ClientObject *self)
{
    if (self->main)
        conn_decref(self->main);
    self->main = NULL;
    while (self->n_idle)
        conn_decref(self->idle[--self->n_idle]);
    if (self->creating)
        PyDict_Clear(self->creating);
}

/* Client's timeout_ms: absent, libferry's default (0 here); None or -1, no bound; else 1 or
 * more milliseconds (a bound of 0 would fail every call). 0, or -1 with an exception. */
static int parse_conn_timeout(PyObject *o, int64_t *ms)
{
    if (pyf_timeout_from_object(o, 0, ms) < 0)
        return -1;
    if (o && *ms == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "timeout_ms must be -1 or None (no bound) or positive, not 0");
        return -1;
    }
    return 0;
}

static int client_init(ClientObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"socket", "timeout_ms", NULL};
    PyObject *path = NULL, *bytes = NULL, *timeout = NULL;
    const char *p;
    size_t len;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$O:Client", kwlist, &path, &timeout) ||
        parse_conn_timeout(timeout, &self->timeout_ms) < 0)
        return -1;
    if (self->socket) {
        PyErr_SetString(PyExc_RuntimeError, "a Client is initialized once: make a new one");
        return -1;
    }
    /* No socket named: libferry's default, chosen once here, so that the connections made
     * later (a waiting get's own, one after the daemon went away) go where this one went. */
    if (path && path != Py_None) {
        if (!PyUnicode_FSConverter(path, &bytes))
            return -1;
        p = PyBytes_AS_STRING(bytes);
        len = (size_t)PyBytes_GET_SIZE(bytes);
    } else {
        p = client_default_socket();
        len = strlen(p);
    }
    self->path = PyMem_Malloc(len + 1);
    if (self->path)
        memcpy(self->path, p, len + 1);
    Py_XDECREF(bytes);
    if (!self->path) {
        PyErr_NoMemory();
        return -1;
    }
    self->socket = PyUnicode_DecodeFSDefault(self->path);
    if (!self->socket)
        return -1;
    if ((rc = conn_open(self->path, self->timeout_ms, &self->main)) < 0) {
        pyf_raise(rc);
        return -1;
    }
    return 0;
}

static void client_dealloc(ClientObject *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    client_close_handles(self);
    Py_CLEAR(self->creating);
    Py_CLEAR(self->here);
    Py_CLEAR(self->socket);
    PyMem_Free(self->path);
    pthread_mutex_destroy(&self->wait_lock);
    pthread_cond_destroy(&self->wait_cond);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_close(ClientObject *self, PyObject *unused)
{
    client_close_handles(self);
    Py_RETURN_NONE;
}

static PyObject *client_enter(ClientObject *self, PyObject *unused)
{
    if (!pyf_client_conn(self))
        return NULL;
    return Py_NewRef(self);
}

static PyObject *client_exit(ClientObject *self, PyObject *args)
{
    return client_close(self, NULL);
}

static PyObject *client_get_closed(ClientObject *self, void *unused)
{
    return PyBool_FromLong(self->main == NULL);
}

static PyObject *client_get_socket(ClientObject *self, void *unused)
{
    return Py_NewRef(self->socket ? self->socket : Py_None);
}

static PyObject *client_repr(ClientObject *self)
{
    return PyUnicode_FromFormat("<ferry.Client socket=%R%s>", self->socket ? self->socket : Py_None,
                                self->main ? "" : " closed");
}

/* ---- the calls that answer at once ---- */

/* One of the calls below: what it takes and what it gives back. */
enum small_call {
    CALL_CONTAINS,
    CALL_DELETE,
    CALL_DELETE_CLUSTER,
    CALL_HASH,
    CALL_DIGEST,
    CALL_EVICT,
    CALL_LIST,
    CALL_STATS,
    CALL_NODES,
    CALL_WHERE,
    CALL_SUBSCRIBE,
    CALL_SET_NAME,
    CALL_KEEP,
    CALL_UNKEEP,
    CALL_DELETE_UNUSED,
    CALL_LOCATION,
    CALL_FLUSH
};

struct call {
    enum small_call op;
    ferry_id id;
    uint64_t u64;                     /* evict: bytes in, freed out; hash: the digest */
    uint8_t digest[FERRY_DIGEST_LEN]; /* digest */
    int flag;                         /* contains: present; subscribe: the descriptor */
    void *array;                      /* list, stats, nodes, where: the result (ferry_free) */
    size_t n;
    const char *name; /* set_name: UTF-8, kept alive by the caller */
    char *text;       /* location: FERRY_LOCATION_MAX bytes, the caller's */
};

static int run_call(ferry_client *c, struct call *x)
{
    switch (x->op) {
    case CALL_CONTAINS:
        return ferry_contains(c, &x->id, &x->flag);
    case CALL_DELETE:
        return ferry_delete(c, &x->id);
    case CALL_DELETE_CLUSTER:
        return ferry_delete_cluster(c, &x->id);
    case CALL_DELETE_UNUSED:
        return ferry_delete_unused(c, &x->id);
    case CALL_HASH:
        return ferry_hash(c, &x->id, &x->u64);
    case CALL_DIGEST:
        return ferry_digest(c, &x->id, x->digest);
    case CALL_EVICT:
        return ferry_evict(c, x->u64, &x->u64);
    case CALL_LIST:
        return ferry_list(c, (ferry_object_info **)&x->array, &x->n);
    case CALL_STATS:
        return ferry_stats_list(c, (ferry_stat **)&x->array, &x->n);
    case CALL_NODES:
        return ferry_nodes(c, (ferry_node_info **)&x->array, &x->n);
    case CALL_WHERE:
        return ferry_where(c, &x->id, (ferry_node_info **)&x->array, &x->n);
    case CALL_SUBSCRIBE:
        return ferry_subscribe(c, &x->flag);
    case CALL_SET_NAME:
        return ferry_set_name(c, &x->id, x->name);
    case CALL_KEEP:
    case CALL_UNKEEP:
        return ferry_keep(c, &x->id, x->op == CALL_KEEP);
    case CALL_LOCATION:
        return ferry_location(c, x->text);
    case CALL_FLUSH:
        return ferry_flush(c);
    }
    return FERRY_EINVAL; /* not reached: every call is above */
}

/* Runs x on the main handle with the GIL released: 0, or -1 with libferry's exception raised. */
static int call_main(ClientObject *self, struct call *x)
{
    struct pyf_conn *k = pyf_client_conn(self);
    int rc;

    if (!k)
        return -1;
    conn_enter(k);
    Py_BEGIN_ALLOW_THREADS
        rc = run_call(k->c, x);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        pyf_call_failed(k, rc);
        return -1;
    }
    conn_leave(k, rc);
    return 0;
}

/* contains, delete, delete_unused, hash, digest, keep and unkeep: one id, a bool, an int, bytes
 * or nothing back. */
static PyObject *id_call(ClientObject *self, PyObject *arg, enum small_call op)
{
    struct call x = {.op = op};

    if (pyf_id_from_object(arg, &x.id) < 0 || call_main(self, &x) < 0)
        return NULL;
    if (op == CALL_CONTAINS)
        return PyBool_FromLong(x.flag);
    if (op == CALL_HASH)
        return PyLong_FromUnsignedLongLong(x.u64);
    if (op == CALL_DIGEST)
        return PyBytes_FromStringAndSize((const char *)x.digest, FERRY_DIGEST_LEN);
    Py_RETURN_NONE;
}

static PyObject *client_contains(ClientObject *self, PyObject *id)
{
    return id_call(self, id, CALL_CONTAINS);
}

static PyObject *client_keep(ClientObject *self, PyObject *id)
{
    return id_call(self, id, CALL_KEEP);
}

static PyObject *client_unkeep(ClientObject *self, PyObject *id)
{
    return id_call(self, id, CALL_UNKEEP);
}

static PyObject *client_delete_unused(ClientObject *self, PyObject *id)
{
    return id_call(self, id, CALL_DELETE_UNUSED);
}

static int client_sq_contains(ClientObject *self, PyObject *id)
{
    PyObject *r = id_call(self, id, CALL_CONTAINS);
    int yes = r == Py_True;

    if (!r)
        return -1;
    Py_DECREF(r);
    return yes;
}

static PyObject *client_delete(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {"id", "cluster"};
    PyObject *a[2];
    int cluster = 0;

    if (pyf_parse_args("delete", args, nargs, kwnames, names, 2, 1, a) < 0)
        return NULL;
    if (a[1] && (cluster = PyObject_IsTrue(a[1])) < 0)
        return NULL;
    return id_call(self, a[0], cluster ? CALL_DELETE_CLUSTER : CALL_DELETE);
}

static PyObject *client_hash(ClientObject *self, PyObject *id)
{
    return id_call(self, id, CALL_HASH);
}

static PyObject *client_digest(ClientObject *self, PyObject *id)
{
    return id_call(self, id, CALL_DIGEST);
}

static PyObject *client_set_name(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = {"id", "name"};
    PyObject *a[2];
    struct call x = {.op = CALL_SET_NAME};

    if (pyf_parse_args("set_name", args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    if (!PyUnicode_Check(a[1]))
        return PyErr_Format(PyExc_TypeError, "set_name() takes a str name, not %.100s",
                            Py_TYPE(a[1])->tp_name);
    if (pyf_id_from_object(a[0], &x.id) < 0 || !(x.name = PyUnicode_AsUTF8(a[1])) ||
        call_main(self, &x) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- the rest ---- */

static PyObject *client_evict(ClientObject *self, PyObject *arg)
{
    struct call x = {.op = CALL_EVICT};

    if (!PyLong_Check(arg))
        return PyErr_Format(PyExc_TypeError, "evict() takes an int of bytes, not %.100s",
                            Py_TYPE(arg)->tp_name);
    x.u64 = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "evict() takes a non-negative number of bytes");
        return NULL;
    }
    if (call_main(self, &x) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(x.u64);
}

/* Sets d[key] = v and drops v; -1 if v is NULL or the set fails. */
static int set_item(PyObject *d, const char *key, PyObject *v)
{
    int rc = v ? PyDict_SetItemString(d, key, v) : -1;
    Py_XDECREF(v);
    return rc;
}

static PyObject *object_info_dict(const ferry_object_info *o)
{
    PyObject *d = PyDict_New();

    if (!d || set_item(d, "id", pyf_id_new(&o->id)) < 0 ||
        set_item(d, "size", PyLong_FromUnsignedLongLong(o->data_size)) < 0 ||
        set_item(d, "metadata_size", PyLong_FromUnsignedLongLong(o->metadata_size)) < 0 ||
        set_item(d, "state",
                 PyUnicode_FromString(o->state == FERRY_STATE_SEALED    ? "sealed"
                                      : o->state == FERRY_STATE_SPILLED ? "spilled"
                                                                        : "created")) < 0 ||
        set_item(d, "refcount", PyLong_FromUnsignedLong(o->refcount)) < 0 ||
        set_item(d, "age_ms", PyLong_FromUnsignedLongLong(o->age_ms)) < 0 ||
        set_item(d, "name", PyUnicode_DecodeUTF8(o->name, (Py_ssize_t)strlen(o->name), "replace")) <
            0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *client_list(ClientObject *self, PyObject *unused)
{
    struct call x = {.op = CALL_LIST};
    const ferry_object_info *objs;
    PyObject *list;

    if (call_main(self, &x) < 0)
        return NULL;
    objs = x.array;
    if ((list = PyList_New((Py_ssize_t)x.n))) {
        for (size_t i = 0; i < x.n; i++) {
            PyObject *d = object_info_dict(&objs[i]);
            if (!d) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, d);
        }
    }
    ferry_free(x.array);
    return list;
}

static PyObject *client_stats(ClientObject *self, PyObject *unused)
{
    struct call x = {.op = CALL_STATS};
    const ferry_stat *all;
    PyObject *d;

    if (call_main(self, &x) < 0)
        return NULL;
    all = x.array;
    if ((d = PyDict_New())) {
        for (size_t i = 0; i < x.n; i++) {
            if (set_item(d, all[i].name, PyLong_FromUnsignedLongLong(all[i].value)) < 0) {
                Py_CLEAR(d);
                break;
            }
        }
    }
    ferry_free(x.array);
    return d;
}

/* The transports string "tcp,fabric=..." as a list of its comma-separated entries. */
static PyObject *transports_list(const char *s)
{
    PyObject *text = PyUnicode_FromString(s), *sep, *list;

    if (!text)
        return NULL;
    if (!*s) {
        Py_DECREF(text);
        return PyList_New(0);
    }
    if (!(sep = PyUnicode_FromString(","))) {
        Py_DECREF(text);
        return NULL;
    }
    list = PyUnicode_Split(text, sep, -1);
    Py_DECREF(text);
    Py_DECREF(sep);
    return list;
}

static PyObject *node_list(const ferry_node_info *nodes, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);

    for (size_t i = 0; list && i < n; i++) {
        PyObject *d = PyDict_New();
        if (!d || set_item(d, "id", PyUnicode_FromString(nodes[i].id)) < 0 ||
            set_item(d, "address", PyUnicode_FromString(nodes[i].address)) < 0 ||
            set_item(d, "transports", transports_list(nodes[i].transports)) < 0 ||
            set_item(d, "self", PyBool_FromLong(nodes[i].self)) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
    return list;
}

/* nodes() and where(id). */
static PyObject *nodes_call(ClientObject *self, PyObject *arg)
{
    struct call x = {.op = arg ? CALL_WHERE : CALL_NODES};
    PyObject *list;

    if ((arg && pyf_id_from_object(arg, &x.id) < 0) || call_main(self, &x) < 0)
        return NULL;
    list = node_list(x.array, x.n);
    ferry_free(x.array);
    return list;
}

static PyObject *client_nodes(ClientObject *self, PyObject *unused)
{
    return nodes_call(self, NULL);
}

static PyObject *client_where(ClientObject *self, PyObject *id)
{
    return nodes_call(self, id);
}

static PyObject *client_location(ClientObject *self, PyObject *unused)
{
    char text[FERRY_LOCATION_MAX];
    struct call x = {.op = CALL_LOCATION, .text = text};

    if (call_main(self, &x) < 0)
        return NULL;
    return PyUnicode_FromString(text);
}

PyObject *pyf_client_here(ClientObject *self)
{
    PyObject *here;

    if (self->here)
        return self->here;
    if ((here = client_location(self, NULL))) {
        if (self->here) /* another thread asked meanwhile (the call let the GIL go) */
            Py_DECREF(here);
        else
            self->here = here;
        return self->here;
    }
    /* No directory (or a location that cannot be written): none, ever; anything else (a
     * connection lost) none this time. A put that succeeded never fails for it. */
    if (PyErr_ExceptionMatches(pyf_error_class(FERRY_EDIRECTORY)) ||
        PyErr_ExceptionMatches(pyf_error_class(FERRY_EINVAL)))
        Py_XSETREF(self->here, Py_NewRef(Py_None));
    PyErr_Clear();
    return Py_None;
}

/* _here(): the location the ids puts return carry (None: none), asked of the daemon once per
 * connection; for ferry.dask's references. */
static PyObject *client_here(ClientObject *self, PyObject *unused)
{
    return Py_NewRef(pyf_client_here(self));
}

static PyObject *client_flush(ClientObject *self, PyObject *unused)
{
    struct call x = {.op = CALL_FLUSH};
    uint64_t lost;
    char why[160];

    if (call_main(self, &x) < 0)
        return NULL;
    self->unflushed = 0;
    if ((lost = self->lost) != 0) {
        self->lost = 0;
        snprintf(why, sizeof(why),
                 "the connection to ferryd was lost after %llu put(wait=False) calls: whether "
                 "they were stored is unknown",
                 (unsigned long long)lost);
        return pyf_raise_detail(FERRY_ECONN, why);
    }
    Py_RETURN_NONE;
}

static PyObject *client_subscribe(ClientObject *self, PyObject *unused)
{
    struct call x = {.op = CALL_SUBSCRIBE};

    if (call_main(self, &x) < 0)
        return NULL;
    return pyf_subscription_new(x.flag);
}

/* ---- the type ---- */

#define KW_METHOD(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef client_methods[] = {
    {"put", KW_METHOD(pyf_client_put),
     "put(id, data, metadata=b'', keep=False, wait=True) -> ObjectID\n\nStores the bytes of "
     "data (any C-contiguous buffer: bytes, bytearray, memoryview, NumPy arrays) as a new sealed "
     "object, copied once into shared memory with the GIL released. keep=True keeps it from the "
     "start (see keep()). wait=False, for an object of up to 64 KiB: returns once the bytes are "
     "in this client's ring in shared memory, without a message to the daemon, which stores it "
     "within its next turn (and before answering any later request for the id, of any "
     "process); a failure there (ObjectExists, StoreFull) is raised by the next flush()."},
    {"flush", (PyCFunction)client_flush, METH_NOARGS,
     "flush()\n\nWaits until the daemon has stored every put(..., wait=False) of this client, "
     "then raises the first failure among them since the last flush (its message names the id "
     "and how many failed), or returns None. When the connection was lost (and made again) "
     "after such puts, raises DaemonUnreachable: whether they were stored is unknown."},
    {"put_many", (PyCFunction)pyf_client_put_many, METH_O,
     "put_many(items) -> list of ObjectID\n\nput of many (id, data) or (id, data, metadata) "
     "items; small ones go in batches of one message exchange each. When some fail, raises the "
     "first failure's exception, whose .failures lists (index, ObjectID, exception) of each."},
    {"create", KW_METHOD(pyf_client_create),
     "create(id, size, metadata=b'') -> Buffer\n\nA new object of size bytes, writable in "
     "place until seal(id) makes it visible (or abort(id) drops it)."},
    {"seal", (PyCFunction)pyf_client_seal, METH_O,
     "seal(id)\n\nMakes an object made by create() immutable and visible to all."},
    {"abort", (PyCFunction)pyf_client_abort, METH_O,
     "abort(id)\n\nDrops an object made by create() and not sealed; BufferError while views of "
     "its Buffer are alive."},
    {"get", KW_METHOD(pyf_client_get),
     "get(ids, timeout_ms=0, fetch=False, at=None) -> Buffer or list of Buffer\n\nZero-copy "
     "read-only Buffers of sealed objects: one for an id, a list for an iterable of ids. Waits "
     "up to timeout_ms (-1 or None: no end) for objects not sealed yet, with the GIL released; "
     "with fetch, pulls what is not local from the cluster first, and timeout_ms defaults to a "
     "fetch's (60000); at is as fetch's. ObjectNotFound (timeout_ms 0) or Timeout when some are "
     "missing; the exception's .missing lists them."},
    {"fetch", KW_METHOD(pyf_client_fetch),
     "fetch(ids, timeout_ms=60000, at=None)\n\nMakes objects local, pulling them from nodes "
     "that hold them and waiting up to timeout_ms (for ids no node has sealed yet, and for the "
     "transfers) in all. at: the location() of the node that put them (one str for all, or one "
     "str or None per id): that node is asked first, the directory only if it fails. Raises the "
     "first failure (Timeout, TransferFailed, DirectoryUnavailable, StoreFull...); .missing "
     "lists the ids that are not local."},
    {"keep", (PyCFunction)client_keep, METH_O,
     "keep(id)\n\nKeeps an object until unkeep(id) or delete(id): it is never evicted to make "
     "room, so an object put for a reader that comes later is there when it comes. Kept is the "
     "node's, not the client's: it outlives this Client. Without a spill directory a store full "
     "of kept objects raises StoreFull on puts; with one, kept objects may move to disk. Objects "
     "not kept and not held may be evicted once nobody holds them (the daemon logs and counts "
     "those evicted before any reader took them: stats()['evicted_unread'])."},
    {"unkeep", (PyCFunction)client_unkeep, METH_O,
     "unkeep(id)\n\nLets a kept object go: evictable again once nobody holds it."},
    {"contains", (PyCFunction)client_contains, METH_O,
     "contains(id) -> bool\n\nTrue when a sealed object with this id is in the store."},
    {"delete", KW_METHOD(client_delete),
     "delete(id, cluster=False)\n\nDeletes a sealed object; one still referenced goes with its "
     "last reference (invisible at once). cluster=True deletes it on every node and in the "
     "directory, and fails fetches waiting for it; StandaloneNode without a directory."},
    {"delete_unused", (PyCFunction)client_delete_unused, METH_O,
     "delete_unused(id)\n\nDeletes an object of this node when no client holds it any more: at "
     "once when none does; otherwise it stays visible (get finds it and holds it further) and "
     "goes with the last release of any client, or its death. For results that several "
     "processes share and none knows to be the last user (ferry.dask). A kept object is let go "
     "and cannot be kept again (InvalidArgument)."},
    {"hash", (PyCFunction)client_hash, METH_O,
     "hash(id) -> int\n\nThe first 8 bytes of digest(id), as a little-endian int."},
    {"digest", (PyCFunction)client_digest, METH_O,
     "digest(id) -> bytes\n\nThe object's 32-byte digest, computed once at seal: the root of a "
     "SHA-256 tree over its data then metadata in 1 MiB chunks (ferry.h, ferry_digest); "
     "digest(id).hex() is what the directory records."},
    {"evict", (PyCFunction)client_evict, METH_O,
     "evict(nbytes) -> int\n\nEvicts sealed, unreferenced objects, oldest first, until nbytes "
     "are freed; returns the bytes freed."},
    {"list", (PyCFunction)client_list, METH_NOARGS,
     "list() -> list of dict\n\nEvery object: id, size, metadata_size, state ('sealed' or "
     "'created'), refcount, age_ms, name ('' when it has none)."},
    {"set_name", KW_METHOD(client_set_name),
     "set_name(id, name)\n\nKeeps name (1 to 255 bytes of UTF-8, no control characters) with the "
     "object on this node, for people: list() and ferry ls show it. The object is sealed or this "
     "client's unsealed one; ObjectNotFound otherwise."},
    {"stats", (PyCFunction)client_stats, METH_NOARGS,
     "stats() -> dict\n\nEvery counter of the daemon, its transports' included, under the names "
     "`ferry stat` prints."},
    {"nodes", (PyCFunction)client_nodes, METH_NOARGS,
     "nodes() -> list of dict\n\nThe live nodes of the cluster: id, address, transports, self."},
    {"where", (PyCFunction)client_where, METH_O,
     "where(id) -> list of dict\n\nThe live nodes holding a sealed copy of id (as nodes())."},
    {"location", (PyCFunction)client_location, METH_NOARGS,
     "location() -> str\n\nThis node's location: what a reference to an object put here "
     "carries, so that get(..., fetch=True, at=...) or fetch(..., at=...) on another node asks "
     "this node at once instead of the directory. The same for every object of the daemon's run "
     "(ask once); signed with the cluster secret when there is one."},
    {"subscribe", (PyCFunction)client_subscribe, METH_NOARGS,
     "subscribe() -> Subscription\n\nA notification for every seal, delete and eviction from "
     "now on."},
    {"close", (PyCFunction)client_close, METH_NOARGS,
     "close()\n\nDisconnects. Buffers still alive keep their objects and mapping until they "
     "go; an object created and not sealed is aborted when its Buffer goes (at once when "
     "nothing else holds it)."},
    {"_put_parts", (PyCFunction)pyf_client_put_parts, METH_VARARGS, NULL},
    {"_here", (PyCFunction)client_here, METH_NOARGS, NULL},
    {"__enter__", (PyCFunction)client_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)client_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef client_getset[] = {
    {"closed", (getter)client_get_closed, NULL, "True after close().", NULL},
    {"socket", (getter)client_get_socket, NULL, "The daemon's socket path.", NULL},
    {NULL},
};

static PySequenceMethods client_as_sequence = {
    .sq_contains = (objobjproc)client_sq_contains,
};

PyTypeObject Client_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry._ferry.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = (destructor)client_dealloc,
    .tp_repr = (reprfunc)client_repr,
    .tp_as_sequence = &client_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Client(socket=None, *, timeout_ms=30000)\n\nA connection to the ferryd of this "
              "node at socket (default: $FERRY_SOCKET, else " FERRY_SERVICE_SOCKET " if it exists, "
              "the system service's, else " FERRY_DEFAULT_SOCKET "). timeout_ms bounds "
              "every wait for the daemon (default: $FERRY_TIMEOUT_MS, else 30000; None or -1: no "
              "bound); a get or fetch waits its own timeout_ms plus it. On expiry TimeoutError "
              "(ferry.Timeout) is raised and the next call connects again. Safe to share between "
              "threads; calls that wait release the GIL. A context manager that closes it.",
    .tp_weaklistoffset = offsetof(ClientObject, weakreflist),
    .tp_methods = client_methods,
    .tp_getset = client_getset,
    .tp_init = (initproc)client_init,
    .tp_new = client_new,
};

int pyf_client_init(PyObject *m)
{
    if (PyType_Ready(&Client_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Client", (PyObject *)&Client_Type);
}
