/*
 * client.h - ferry.Client, shared by its files: client.c (life, handles, the small calls),
 * client_get.c (get and fetch), client_put.c (put, put_many, create, seal, abort).
 *
 * Handles. A Client may be shared by threads. Its calls go through `main`, one libferry handle
 * whose calls are short (no call on it waits for anything but the daemon's answer), so threads
 * share it without holding each other up for long. A call that waits (get with a timeout, a
 * fetch) first takes what is there through `main`, then waits for the rest on a handle of its
 * own taken from a small pool (`idle`), so that a blocked get never blocks another thread's put
 * (or the seal the get is waiting for). At most PYF_MAX_WAITERS such handles exist; a waiter
 * beyond waits for one to come back. Buffers keep the handle they came through (conn.h).
 *
 * Locking: every field is protected by the GIL, and `returns` also by `wait_lock` so that a
 * thread can wait on `wait_cond` for a handle to come back with the GIL released.
 */
#ifndef PYF_CLIENT_H
#define PYF_CLIENT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <sys/types.h>

#include "conn.h"
#include "timeout.h"

#define PYF_MAX_WAITERS 64
/* The longest a libferry wait lasts before the caller checks for signals (Ctrl-C). */
#define PYF_SLICE_MS 100

typedef struct {
    PyObject_HEAD struct pyf_conn *main; /* NULL once closed */
    char *path;                          /* as given (PyMem); NULL: libferry's default */
    PyObject *socket;                    /* str: the path in effect */
    PyObject *creating;                  /* ObjectID -> Buffer: our objects not sealed yet */
    PyObject *here; /* the node's location for the ids put() returns: NULL until asked, None
                     * when the node has no directory */
    struct pyf_conn *idle[PYF_MAX_WAITERS];
    size_t n_idle, n_out; /* waiting handles in the pool, and taken */
    unsigned long mains;  /* main handles opened so far: a waiting handle of an older one, given
                           * back, is let go (the daemon it spoke to was another run) */
    uint64_t returns;     /* handles given back so far */
    pthread_mutex_t wait_lock;
    pthread_cond_t wait_cond;
    int64_t timeout_ms;       /* each handle's connection timeout; 0: libferry's default */
    pid_t pid;                /* the process that connected, for messages */
    unsigned long generation; /* its fork generation (conn.h) */
    /* Puts without waiting (put(wait=False)) since the last flush() on the main handle, and
     * those a reconnection left unanswered: flush() raises for them. */
    uint64_t unflushed, lost;
    PyObject *weakreflist;
} ClientObject;

extern PyTypeObject Client_Type;

int pyf_client_init(PyObject *m);

/* The main handle for a call: NULL with an exception when the Client is closed, used in a
 * forked child, or its connection was lost and a new one cannot be made. Borrowed: bracket the
 * call with conn_enter/conn_leave. */
struct pyf_conn *pyf_client_conn(ClientObject *self);

/* The node's location (borrowed; None without a directory), asked once: what the ids that
 * puts return carry. Never fails: None when it cannot be had. */
PyObject *pyf_client_here(ClientObject *self);

/* A handle for waiting, owned by the caller until pyf_waiter_return; NULL with an exception. */
struct pyf_conn *pyf_waiter_take(ClientObject *self, const struct pyf_deadline *d);
void pyf_waiter_return(ClientObject *self, struct pyf_conn *k);

/* Raises libferry's rc (its detail read now) and ends the call on k; NULL. */
PyObject *pyf_call_failed(struct pyf_conn *k, int rc);

PyObject *pyf_client_get(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames);
PyObject *pyf_client_fetch(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
PyObject *pyf_client_put(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames);
PyObject *pyf_client_put_many(ClientObject *self, PyObject *items);
PyObject *pyf_client_put_parts(ClientObject *self, PyObject *args);
PyObject *pyf_client_create(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *pyf_client_seal(ClientObject *self, PyObject *id);
PyObject *pyf_client_abort(ClientObject *self, PyObject *id);

#endif
