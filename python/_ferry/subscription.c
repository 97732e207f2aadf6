/* subscription.c - ferry.Subscription and ferry.Notification. */
#include "subscription.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "ferry.h"
#include "objectid.h"
#include "timeout.h"

typedef struct {
    PyObject_HEAD int fd; /* -1 once closed */
} SubscriptionObject;

static PyTypeObject Subscription_Type;
static PyTypeObject Notification_Type;

static PyStructSequence_Field notification_fields[] = {
    {"event", "'sealed', 'deleted' or 'evicted'"},
    {"id", "the object's ObjectID"},
    {"size", "bytes of data"},
    {"metadata_size", "bytes of metadata"},
    {NULL},
};

static PyStructSequence_Desc notification_desc = {
    "ferry.Notification", "What happened to an object: (event, id, size, metadata_size).",
    notification_fields, 4};

static const char *event_name(int event)
{
    switch (event) {
    case FERRY_EVENT_SEALED:
        return "sealed";
    case FERRY_EVENT_DELETED:
        return "deleted";
    case FERRY_EVENT_EVICTED:
        return "evicted";
    }
    return "unknown";
}

static PyObject *notification_new(const ferry_notification *n)
{
    PyObject *t = PyStructSequence_New(&Notification_Type);

    if (!t)
        return NULL;
    PyStructSequence_SET_ITEM(t, 0, PyUnicode_FromString(event_name(n->event)));
    PyStructSequence_SET_ITEM(t, 1, pyf_id_new(&n->id));
    PyStructSequence_SET_ITEM(t, 2, PyLong_FromUnsignedLongLong(n->data_size));
    PyStructSequence_SET_ITEM(t, 3, PyLong_FromUnsignedLongLong(n->metadata_size));
    for (Py_ssize_t i = 0; i < 4; i++) {
        if (!PyStructSequence_GET_ITEM(t, i)) {
            Py_DECREF(t);
            return NULL;
        }
    }
    return t;
}

PyObject *pyf_subscription_new(int fd)
{
    SubscriptionObject *self;
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        close(fd);
        return NULL;
    }
    if (!(self = PyObject_New(SubscriptionObject, &Subscription_Type))) {
        close(fd);
        return NULL;
    }
    self->fd = fd;
    return (PyObject *)self;
}

static void subscription_dealloc(SubscriptionObject *self)
{
    if (self->fd >= 0)
        close(self->fd);
    PyObject_Free(self);
}

static PyObject *closed_error(void)
{
    PyErr_SetString(PyExc_ValueError, "operation on a closed Subscription");
    return NULL;
}

/* Waits until the socket is readable or the deadline passes: 1, 0, or -1 with an exception
 * (closed meanwhile, a signal's handler raised, or poll failed). The descriptor is read again
 * before every poll: another thread may close the subscription whenever the GIL is let go. */
static int wait_readable(SubscriptionObject *self, const struct pyf_deadline *d)
{
    for (;;) {
        struct pollfd p = {.fd = self->fd, .events = POLLIN};
        int rc, ms = pyf_deadline_poll_ms(d);

        if (p.fd < 0) {
            closed_error();
            return -1;
        }
        Py_BEGIN_ALLOW_THREADS
            rc = poll(&p, 1, ms);
        Py_END_ALLOW_THREADS
        if (rc > 0)
            return 1;
        if (rc == 0 && pyf_deadline_passed(d))
            return 0;
        if (rc < 0 && errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

/* The next notification, or None once the deadline passed. */
static PyObject *read_until(SubscriptionObject *self, const struct pyf_deadline *d)
{
    for (;;) {
        ferry_notification n;
        int rc, ready;

        if (self->fd < 0)
            return closed_error();
        rc = ferry_notification_read(self->fd, &n);
        if (rc == 0)
            return notification_new(&n);
        if (rc != FERRY_EAGAIN)
            return pyf_raise(rc);
        if ((ready = wait_readable(self, d)) <= 0)
            return ready < 0 ? NULL : Py_NewRef(Py_None);
    }
}

static PyObject *subscription_read(SubscriptionObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout_ms", NULL};
    PyObject *timeout = NULL;
    struct pyf_deadline d;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:read", kwlist, &timeout) ||
        pyf_deadline_from_object(timeout, -1, &d) < 0)
        return NULL;
    return read_until(self, &d);
}

static PyObject *subscription_next(SubscriptionObject *self)
{
    struct pyf_deadline forever;

    pyf_deadline_start(&forever, -1);
    return read_until(self, &forever);
}

static PyObject *subscription_fileno(SubscriptionObject *self, PyObject *unused)
{
    if (self->fd < 0)
        return closed_error();
    return PyLong_FromLong(self->fd);
}

/* Ends the subscription; a thread waiting in read() wakes (the shutdown) and finds it closed. */
static PyObject *subscription_close(SubscriptionObject *self, PyObject *unused)
{
    if (self->fd >= 0) {
        shutdown(self->fd, SHUT_RDWR);
        close(self->fd);
    }
    self->fd = -1;
    Py_RETURN_NONE;
}

static PyObject *subscription_enter(SubscriptionObject *self, PyObject *unused)
{
    if (self->fd < 0)
        return closed_error();
    return Py_NewRef(self);
}

static PyObject *subscription_exit(SubscriptionObject *self, PyObject *args)
{
    return subscription_close(self, NULL);
}

static PyObject *subscription_get_closed(SubscriptionObject *self, void *unused)
{
    return PyBool_FromLong(self->fd < 0);
}

static PyMethodDef subscription_methods[] = {
    {"read", (PyCFunction)(void (*)(void))subscription_read, METH_VARARGS | METH_KEYWORDS,
     "read(timeout_ms=-1) -> Notification or None\n\nThe next notification, waiting up to "
     "timeout_ms (-1 or None: without end, 0: only what is pending) with the GIL released; "
     "None when none came in time. DaemonUnreachable once the daemon closed the subscription "
     "(it stopped, or this subscriber fell 16 MiB behind)."},
    {"fileno", (PyCFunction)subscription_fileno, METH_NOARGS,
     "The subscription's socket (non-blocking), for selectors and asyncio's add_reader."},
    {"close", (PyCFunction)subscription_close, METH_NOARGS, "Ends the subscription."},
    {"__enter__", (PyCFunction)subscription_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)subscription_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef subscription_getset[] = {
    {"closed", (getter)subscription_get_closed, NULL, "True after close().", NULL},
    {NULL},
};

static PyTypeObject Subscription_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Subscription",
    .tp_basicsize = sizeof(SubscriptionObject),
    .tp_dealloc = (destructor)subscription_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Notifications of a daemon, one per seal, delete and eviction, in order (made by "
              "Client.subscribe). Iterating waits for each.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)subscription_next,
    .tp_methods = subscription_methods,
    .tp_getset = subscription_getset,
};

int pyf_subscription_init(PyObject *m)
{
    if (PyType_Ready(&Subscription_Type) < 0 ||
        PyStructSequence_InitType2(&Notification_Type, &notification_desc) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Subscription", (PyObject *)&Subscription_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Notification", (PyObject *)&Notification_Type);
}
