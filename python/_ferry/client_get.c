/* client_get.c - Client.get and Client.fetch: take what is there through the main handle,
 * then wait for the rest on a waiting handle, in slices so that Ctrl-C is heard. */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "buffer.h"
#include "errors.h"
#include "objectid.h"

/* The state of one get or fetch. The found entries hold references on the daemon, each
 * through the handle in from[i] (a reference to it too), until they become Buffers or are
 * given back. Its arrays share one block, inside the struct for a few ids (most calls), so
 * that a get of one id allocates nothing but its Buffer. */
#define GATHER_SMALL 4

struct gather {
    size_t n;
    ferry_id *ids, one_id;
    ferry_buffer *out;      /* out[i].status 0: found (get) */
    int *status;            /* 0 done, FERRY_ETIMEDOUT still wanted, else failed (fetch) */
    struct pyf_conn **from; /* get: who holds out[i] */
    ferry_id *sub;          /* the ids still wanted, for one call */
    size_t *sub_index;      /* their indexes */
    ferry_buffer *sub_out;  /* that call's entries */
    int *sub_status;
    int fail_rc; /* a fetch's first lasting failure */
    char fail_msg[256];
    int wait_rc;        /* why the last round of a fetch ended without them all, when it says: */
    char wait_msg[256]; /* FERRY_EDIRECTORY (the daemon waits for the directory like a holder) */
    void *heap;         /* the block of the arrays when they did not fit in small */
    /* fetch's at: a location per id (NULL: none) and those of sub, in a block of their own
     * (NULL without at); their UTF-8 lives in at_ref's strings. */
    const char **locs, **sub_locs;
    PyObject *at_ref;
    union {
        max_align_t align;
        char bytes[GATHER_SMALL * (2 * sizeof(ferry_buffer) + sizeof(struct pyf_conn *) +
                                   sizeof(ferry_id) + sizeof(size_t) + 2 * sizeof(int))];
    } small;
};

/* Carves n elements of size bytes from *at (kept aligned for any type). */
static void *carve(char **at, size_t n, size_t size)
{
    void *p = *at;
    size_t bytes = (n * size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);

    *at += bytes;
    return p;
}

static size_t gather_bytes(size_t n)
{
    size_t a = sizeof(max_align_t) - 1;
    return 2 * (n * sizeof(ferry_buffer) + a) + (n * sizeof(struct pyf_conn *) + a) +
           (n * sizeof(ferry_id) + a) + (n * sizeof(size_t) + a) + 2 * (n * sizeof(int) + a);
}

static int gather_alloc(struct gather *g, size_t n)
{
    size_t bytes = gather_bytes(n ? n : 1);
    char *at = g->small.bytes;

    if (bytes > sizeof(g->small)) {
        if (!(g->heap = PyMem_Malloc(bytes))) {
            PyErr_NoMemory();
            return -1;
        }
        at = g->heap;
    }
    memset(at, 0, bytes);
    g->n = n;
    g->out = carve(&at, n, sizeof(*g->out));
    g->sub_out = carve(&at, n, sizeof(*g->sub_out));
    g->from = carve(&at, n, sizeof(*g->from));
    g->sub = carve(&at, n, sizeof(*g->sub));
    g->sub_index = carve(&at, n, sizeof(*g->sub_index));
    g->status = carve(&at, n, sizeof(*g->status));
    g->sub_status = carve(&at, n, sizeof(*g->sub_status));
    for (size_t i = 0; i < n; i++)
        g->status[i] = FERRY_ETIMEDOUT;
    return 0;
}

/* Gives back every reference still held and frees the state. */
static void gather_free(struct gather *g)
{
    for (size_t i = 0; g->from && i < g->n; i++) {
        if (g->from[i]) {
            conn_give_back(g->from[i], &g->ids[i], PYF_RELEASE);
            conn_decref(g->from[i]);
        }
    }
    if (g->ids != &g->one_id)
        PyMem_Free(g->ids);
    PyMem_Free(g->heap);
    PyMem_Free(g->locs);
    Py_XDECREF(g->at_ref);
}

/* The UTF-8 of location o into *out: NULL for None, and for a str that cannot be a location
 * (too long, or not encodable): ignored, as the daemon ignores a malformed one, so the id is
 * looked up. 0, or -1 with TypeError for what is no str. */
static int location_of(PyObject *o, const char **out)
{
    Py_ssize_t len;

    *out = NULL;
    if (o == Py_None)
        return 0;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "at: a location is a str (Client.location()), not %.80s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (!(*out = PyUnicode_AsUTF8AndSize(o, &len)))
        PyErr_Clear();
    else if (len >= FERRY_LOCATION_MAX)
        *out = NULL;
    return 0;
}

/* The locations ids carry (ObjectIDs that put() returned, or unpickled), as an `at` would
 * give them: one ObjectID's, or a list of one per id; NULL (borrowed, or new) when none does:
 * a list or tuple only (an iterator of ids is spent by now). */
static PyObject *carried_at(PyObject *ids, size_t n)
{
    PyObject *list;
    int any = 0;

    if (pyf_id_location(ids))
        return Py_NewRef(pyf_id_location(ids));
    /* Exactly a list or tuple: a subclass may iterate other items than it holds. */
    if ((!PyList_CheckExact(ids) && !PyTuple_CheckExact(ids)) ||
        (size_t)PySequence_Fast_GET_SIZE(ids) != n)
        return NULL;
    for (size_t i = 0; i < n && !any; i++)
        any = pyf_id_location(PySequence_Fast_GET_ITEM(ids, (Py_ssize_t)i)) != NULL;
    if (!any || !(list = PyList_New((Py_ssize_t)n)))
        return NULL;
    for (size_t i = 0; i < n; i++) {
        /* PyList_New may have run a finalizer that shrank ids: its missing items carry none */
        PyObject *loc = (Py_ssize_t)i < PySequence_Fast_GET_SIZE(ids)
                            ? pyf_id_location(PySequence_Fast_GET_ITEM(ids, (Py_ssize_t)i))
                            : NULL;
        PyList_SET_ITEM(list, (Py_ssize_t)i, Py_NewRef(loc ? loc : Py_None));
    }
    return list;
}

/* fetch's at into g->locs: None (the ids' own locations, if they carry any), one str for every
 * id, or a sequence of str or None with one per id. 0, or -1 with an exception. */
static int parse_at(struct gather *g, PyObject *at, PyObject *ids)
{
    PyObject *seq = NULL, *carried = NULL;
    const char *one = NULL;
    int rc;

    if ((!at || at == Py_None) && !(at = carried = carried_at(ids, g->n))) {
        if (PyErr_Occurred())
            return -1;
        return 0;
    }
    if (carried) {
        rc = parse_at(g, carried, NULL);
        Py_DECREF(carried);
        return rc;
    }
    if (PyBytes_Check(at) || PyByteArray_Check(at)) /* a sequence, of ints */
        return location_of(at, &one);
    if (PyUnicode_Check(at)) {
        if (location_of(at, &one) < 0)
            return -1;
        g->at_ref = Py_NewRef(at);
    } else {
        /* A tuple of its own: its items (whose UTF-8 g->locs borrows) live while it does,
         * whatever another thread does to the caller's list while the GIL is let go. */
        if (!(seq = PySequence_Tuple(at)))
            return -1;
        g->at_ref = seq;
        if ((size_t)PyTuple_GET_SIZE(seq) != g->n) {
            PyErr_Format(PyExc_ValueError, "at: %zd locations for %zu ids", PyTuple_GET_SIZE(seq),
                         g->n);
            return -1;
        }
    }
    if (!(g->locs = PyMem_Calloc(2 * (g->n ? g->n : 1), sizeof(*g->locs)))) {
        PyErr_NoMemory();
        return -1;
    }
    g->sub_locs = g->locs + g->n;
    for (size_t i = 0; i < g->n; i++) {
        g->locs[i] = one;
        if (seq && location_of(PyTuple_GET_ITEM(seq, (Py_ssize_t)i), &g->locs[i]) < 0)
            return -1;
    }
    return 0;
}

/* Lists in g->sub the ids still wanted (status FERRY_ETIMEDOUT); returns their count. */
static size_t gather_wanted(struct gather *g)
{
    size_t m = 0;

    for (size_t i = 0; i < g->n; i++) {
        if (g->status[i] == FERRY_ETIMEDOUT) {
            g->sub[m] = g->ids[i];
            g->sub_index[m++] = i;
        }
    }
    return m;
}

/* Records what one get of g->sub[0..m) on k found, and its lasting failures (a spilled object
 * that could not be read back): detail is the get's message. */
static void gather_found(struct gather *g, struct pyf_conn *k, size_t m, const char *detail)
{
    for (size_t j = 0; j < m; j++) {
        size_t i = g->sub_index[j];
        int st = g->sub_out[j].status;
        if (st != 0 && st != FERRY_ENOENT && st != FERRY_ETIMEDOUT) {
            g->status[i] = st;
            if (!g->fail_rc) {
                g->fail_rc = st;
                snprintf(g->fail_msg, sizeof(g->fail_msg), "%s", detail);
            }
        }
        if (st != 0)
            continue;
        g->out[i] = g->sub_out[j];
        g->status[i] = 0;
        g->from[i] = k;
        conn_incref(k);
    }
}

/* Records one fetch's statuses; lasting failures are kept in fail_rc/fail_msg. A directory
 * that was down when a round's wait ended is not one: the daemon goes on asking it, so the
 * next round waits on (with a round of 100 ms, a directory slow for a moment under a 32-node
 * shuffle failed a fetch that had 600 s); it is what the fetch reports if its time runs out. */
static void gather_fetched(struct gather *g, size_t m, const char *detail)
{
    g->wait_rc = 0;
    for (size_t j = 0; j < m; j++) {
        int st = g->sub_status[j];
        if (st == FERRY_EDIRECTORY) {
            st = FERRY_ETIMEDOUT;
            g->wait_rc = FERRY_EDIRECTORY;
        }
        g->status[g->sub_index[j]] = st;
        if (st != 0 && st != FERRY_ETIMEDOUT && !g->fail_rc) {
            g->fail_rc = st;
            snprintf(g->fail_msg, sizeof(g->fail_msg), "%s", detail);
        }
    }
}

/* A libferry failure of the call itself (not of some ids): the connection, the arguments. (The
 * connection's timeout is FERRY_ETIMEDOUT with every entry FERRY_ECONN: see the rounds.) */
static int call_failure(int rc)
{
    return rc < 0 && rc != FERRY_ETIMEDOUT && rc != FERRY_ENOENT && rc != FERRY_ETRANSFER &&
           rc != FERRY_EDIRECTORY && rc != FERRY_ENOSPACE && rc != FERRY_ETOOBIG && rc != FERRY_EIO;
}

/* One get of the wanted ids on k, waiting up to wait_ms. 0, or -1 with an exception. */
static int get_round(struct gather *g, struct pyf_conn *k, int64_t wait_ms)
{
    size_t m = gather_wanted(g);
    int rc;

    conn_enter(k);
    Py_BEGIN_ALLOW_THREADS
        rc = ferry_get(k->c, g->sub, m, wait_ms, g->sub_out);
    Py_END_ALLOW_THREADS
    if (call_failure(rc) || (rc == FERRY_ETIMEDOUT && m && g->sub_out[0].status == FERRY_ECONN))
        return pyf_call_failed(k, rc), -1;
    gather_found(g, k, m, rc < 0 ? ferry_errmsg() : "");
    conn_leave(k, rc);
    return 0;
}

/* A fetching get's first look: only the shared index, so that an object at hand costs no
 * message and one that is not goes straight to its fetch, which finds it on the daemon too
 * (one message less per remote read than a get round first); a handle without the index takes
 * a get round. 0, or -1 with an exception. */
static int fast_round(struct gather *g, struct pyf_conn *k)
{
    size_t m = gather_wanted(g);
    int rc;

    conn_enter(k);
    Py_BEGIN_ALLOW_THREADS
        rc = ferry_get_fast(k->c, g->sub, m, g->sub_out);
    Py_END_ALLOW_THREADS
    if (rc == FERRY_ENOSYS) {
        conn_leave(k, 0);
        return get_round(g, k, 0);
    }
    if (rc < 0 && rc != FERRY_ENOENT)
        return pyf_call_failed(k, rc), -1;
    if (rc == 0)
        gather_found(g, k, m, "");
    conn_leave(k, rc == FERRY_ENOENT ? 0 : rc);
    return 0;
}

/* One fetch of the wanted ids on k, waiting up to wait_ms; with get, the ones now local are
 * then taken by a get on k. 0, or -1 with an exception. */
static int fetch_round(struct gather *g, struct pyf_conn *k, int64_t wait_ms, int get)
{
    char detail[256];
    size_t m = gather_wanted(g), local = 0;
    int rc;

    for (size_t j = 0; g->locs && j < m; j++)
        g->sub_locs[j] = g->locs[g->sub_index[j]];
    conn_enter(k);
    Py_BEGIN_ALLOW_THREADS
        rc = ferry_fetch_at(k->c, g->sub, g->locs ? g->sub_locs : NULL, m, wait_ms, g->sub_status);
    Py_END_ALLOW_THREADS
    if (call_failure(rc) || (rc == FERRY_ETIMEDOUT && m && g->sub_status[0] == FERRY_ECONN))
        return pyf_call_failed(k, rc), -1;
    snprintf(detail, sizeof(detail), "%s", ferry_errmsg());
    conn_leave(k, rc);
    gather_fetched(g, m, detail);
    for (size_t j = 0; j < m; j++)
        local += g->sub_status[j] == 0;
    if (!get || !local)
        return 0;
    /* What is local now is taken at once; one evicted meanwhile is fetched again. */
    for (size_t i = 0; i < g->n; i++)
        if (g->status[i] == 0 && !g->from[i])
            g->status[i] = FERRY_ETIMEDOUT;
    return get_round(g, k, 0);
}

static size_t gather_missing(const struct gather *g)
{
    size_t missing = 0;

    for (size_t i = 0; i < g->n; i++)
        missing += g->status[i] != 0;
    return missing;
}

/* Waits on a handle of its own for what the first round did not find. */
static int gather_wait(ClientObject *self, struct gather *g, const struct pyf_deadline *d,
                       int fetch, int get)
{
    struct pyf_conn *w = pyf_waiter_take(self, d);
    int rc = 0;

    if (!w)
        return -1;
    do {
        int64_t slice = pyf_deadline_slice_ms(d, PYF_SLICE_MS);
        rc = fetch ? fetch_round(g, w, slice, get) : get_round(g, w, slice);
        if (rc == 0)
            rc = PyErr_CheckSignals();
    } while (rc == 0 && gather_wanted(g) && d->timeout_ms != 0 && !pyf_deadline_passed(d));
    pyf_waiter_return(self, w);
    return rc;
}

/* The list of ObjectIDs not found. */
static PyObject *missing_list(const struct gather *g)
{
    PyObject *list = PyList_New(0);

    for (size_t i = 0; list && i < g->n; i++) {
        PyObject *id;
        if (g->status[i] == 0)
            continue;
        if (!(id = pyf_id_new(&g->ids[i])) || PyList_Append(list, id) < 0)
            Py_CLEAR(list);
        Py_XDECREF(id);
    }
    return list;
}

/* Raises what explains the missing ids: a fetch's lasting failure, else ObjectNotFound or
 * Timeout; the exception's .missing lists them. */
static PyObject *raise_missing(const struct gather *g, const struct pyf_deadline *d, int fetch,
                               const char *what, PyObject *typed, const char *hint)
{
    char hex[2 * FERRY_ID_SIZE + 1], msg[768], name[160];
    size_t missing = gather_missing(g), first = 0;
    int rc = g->fail_rc                     ? g->fail_rc
             : g->wait_rc                   ? g->wait_rc
             : d->timeout_ms == 0 && !fetch ? FERRY_ENOENT
                                            : FERRY_ETIMEDOUT;
    PyObject *exc, *list;

    while (g->status[first] == 0)
        first++;
    ferry_id_format(&g->ids[first], hex);
    if (g->fail_rc && *g->fail_msg && strcmp(g->fail_msg, ferry_strerror(rc)) != 0)
        snprintf(msg, sizeof(msg), "%s: %s", ferry_strerror(rc), g->fail_msg);
    else if (g->fail_rc)
        snprintf(msg, sizeof(msg), "%s", ferry_strerror(rc));
    else if (rc == FERRY_ENOENT)
        snprintf(msg, sizeof(msg), "%s: not in the store", ferry_strerror(rc));
    else
        snprintf(msg, sizeof(msg), "%s: not %s within %lld ms%s", ferry_strerror(rc), what,
                 (long long)d->timeout_ms,
                 g->wait_rc ? ", the directory unreachable at the end" : "");
    pyf_typed_id(g->n == 1 ? typed : NULL, name, sizeof(name));
    if (missing == 1)
        snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " (object %sid %s)", name, hex);
    else
        snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " (%zu of %zu objects, first %s)",
                 missing, g->n, hex);
    if (rc == FERRY_ENOENT && hint)
        snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "%s", hint);
    if (!(exc = pyf_error_new(rc, msg)))
        return NULL;
    if ((list = missing_list(g)) && PyObject_SetAttrString(exc, "missing", list) == 0)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(list);
    Py_DECREF(exc);
    return NULL;
}

/* Turns every entry into a Buffer (each takes over its references). */
static PyObject *gather_buffers(struct gather *g, int single)
{
    PyObject *list = single ? NULL : PyList_New((Py_ssize_t)g->n), *one = NULL;

    for (size_t i = 0; i < g->n; i++) {
        struct pyf_conn *k = g->from[i];
        PyObject *b;
        g->from[i] = NULL;
        b = pyf_buffer_new(k, &g->ids[i], &g->out[i]);
        if (single)
            one = b;
        else if (list && b)
            PyList_SET_ITEM(list, (Py_ssize_t)i, b);
        else
            Py_XDECREF(b);
        if (!b)
            Py_CLEAR(list);
    }
    return single ? one : list;
}

/* Parses (ids, timeout_ms, at) into g and d, timeout_ms dflt when absent; -1 with an
 * exception. */
static int parse_ids(PyObject *ids, PyObject *timeout, PyObject *at, int64_t dflt, struct gather *g,
                     struct pyf_deadline *d, int *single)
{
    size_t n;

    g->ids = NULL;
    g->heap = NULL;
    g->from = NULL;
    g->locs = NULL;
    g->at_ref = NULL;
    g->fail_rc = 0;
    g->wait_rc = 0;
    if (pyf_ids_from_object(ids, &g->one_id, &g->ids, &n, single) < 0)
        return -1;
    if (pyf_deadline_from_object(timeout, dflt, d) < 0 || gather_alloc(g, n) < 0)
        return -1;
    return parse_at(g, at, ids);
}

/* What a get that found nothing here and did not wait should say on a node of a cluster (the
 * node's location asked once per connection, on this path only): it looked here only. NULL on
 * a standalone node, where there is nowhere else, and for any other failure. */
static const char *get_hint(ClientObject *self, const struct gather *g,
                            const struct pyf_deadline *d, int fetch)
{
    if (fetch || d->timeout_ms != 0 || g->fail_rc || g->wait_rc || pyf_client_here(self) == Py_None)
        return NULL;
    return "; get() looks in this node's store only: get(..., fetch=True) or fetch() pulls it "
           "from a node that holds it";
}

PyObject *pyf_client_get(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    static const char *const names[] = {"ids", "timeout_ms", "fetch", "at"};
    PyObject *a[4], *result = NULL;
    struct pyf_deadline d;
    struct pyf_conn *k;
    struct gather g;
    int single, fetch;

    if (pyf_parse_args("get", args, nargs, kwnames, names, 4, 1, a) < 0 ||
        (fetch = a[2] ? PyObject_IsTrue(a[2]) : 0) < 0)
        return NULL;
    /* A get waits for nothing unless told to; one that fetches waits as a fetch does. */
    if (parse_ids(a[0], a[1], a[3], fetch ? FERRY_FETCH_TIMEOUT_MS : 0, &g, &d, &single) < 0 ||
        !(k = pyf_client_conn(self)) || (fetch ? fast_round(&g, k) : get_round(&g, k, 0)) < 0)
        goto done;
    if (gather_wanted(&g) && (fetch || d.timeout_ms != 0) &&
        gather_wait(self, &g, &d, fetch, 1) < 0)
        goto done;
    result = gather_missing(&g)
                 ? raise_missing(&g, &d, fetch, "sealed", a[0], get_hint(self, &g, &d, fetch))
                 : gather_buffers(&g, single);
done:
    gather_free(&g);
    return result;
}

PyObject *pyf_client_fetch(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"ids", "timeout_ms", "at"};
    PyObject *a[3], *result = NULL;
    struct pyf_deadline d;
    struct pyf_conn *k;
    struct gather g;
    int single;

    if (pyf_parse_args("fetch", args, nargs, kwnames, names, 3, 1, a) < 0)
        return NULL;
    if (parse_ids(a[0], a[1], a[2], FERRY_FETCH_TIMEOUT_MS, &g, &d, &single) < 0 ||
        !(k = pyf_client_conn(self)))
        goto done;
    /* A fetch that waits takes a handle of its own; one that does not uses the main one. */
    if (d.timeout_ms == 0 ? fetch_round(&g, k, 0, 0) < 0 : gather_wait(self, &g, &d, 1, 0) < 0)
        goto done;
    result =
        gather_missing(&g) ? raise_missing(&g, &d, 1, "local", a[0], NULL) : Py_NewRef(Py_None);
done:
    gather_free(&g);
    return result;
}
