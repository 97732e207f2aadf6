/* errors.c - ferry.Error and its subclasses, one per libferry error code. */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ferry.h"

struct error_kind {
    int code;
    const char *name; /* without "ferry." */
    const char *doc;
    PyObject **builtin; /* a builtin exception it also is, or NULL */
    int parent;         /* the code of a ferry class it derives from, or 0 for Error */
};

static const struct error_kind kinds[] = {
    {FERRY_EINVAL, "InvalidArgument", "The daemon refused an argument.", &PyExc_ValueError, 0},
    {FERRY_ENOENT, "ObjectNotFound", "No such object.", &PyExc_KeyError, 0},
    {FERRY_EEXIST, "ObjectExists", "An object with this id exists already.", NULL, 0},
    {FERRY_ENOSPACE, "StoreFull",
     "No room in the arena even after eviction; the message has the figures.", NULL, 0},
    {FERRY_ETOOBIG, "ObjectTooLarge", "The object is larger than the whole arena.", NULL,
     FERRY_ENOSPACE},
    {FERRY_EPERM, "PermissionDenied", "Only the object's creator may do this.",
     &PyExc_PermissionError, 0},
    {FERRY_ETIMEDOUT, "Timeout", "The timeout ended first.", &PyExc_TimeoutError, 0},
    {FERRY_ENOTSEALED, "ObjectNotSealed", "The object is still being created.", NULL, 0},
    {FERRY_ECONN, "DaemonUnreachable", "No daemon answers, or the connection to it was lost.",
     &PyExc_ConnectionError, 0},
    {FERRY_EPROTO, "ProtocolError", "A malformed or unexpected message.", NULL, 0},
    {FERRY_ENOMEM, "OutOfMemory", "Out of memory in this process.", &PyExc_MemoryError, 0},
    {FERRY_ESYS, "SystemCallFailed", "A system call failed; the message says which.",
     &PyExc_OSError, 0},
    {FERRY_ENOSYS, "NotSupported", "The operation is not supported.", &PyExc_NotImplementedError,
     0},
    {FERRY_EBUSY, "Busy", "A resource is in use.", NULL, 0},
    {FERRY_EDIRECTORY, "DirectoryUnavailable", "The cluster directory (Redis) is unavailable.",
     NULL, 0},
    {FERRY_ETRANSFER, "TransferFailed", "Every holder failed to deliver the object.", NULL, 0},
    {FERRY_EAUTH, "AuthenticationFailed", "A peer failed the cluster secret's challenge.", NULL, 0},
    {FERRY_EAGAIN, "WouldBlock", "Nothing is there now; try again later.", &PyExc_BlockingIOError,
     0},
    {FERRY_ESTANDALONE, "StandaloneNode", "A cluster call on a node started without --directory.",
     NULL, 0},
    {FERRY_EIO, "SpillDamaged", "The object's bytes on disk (spilled) are unreadable or damaged.",
     &PyExc_OSError, 0},
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

static PyObject *error_base;                    /* ferry.Error */
static PyObject *classes[-FERRY_ERROR_MIN + 1]; /* by -code; [0] unused */

PyObject *pyf_error_base(void)
{
    return error_base;
}

PyObject *pyf_error_class(int rc)
{
    if (rc < FERRY_ERROR_MIN || rc >= 0 || !classes[-rc])
        return error_base;
    return classes[-rc];
}

/* ferry.Error: an Exception whose str() is its message even where a builtin base (KeyError)
 * would quote it, with the class attribute `code` (None here). */
static int make_base(PyObject *m)
{
    PyObject *dict = PyDict_New(), *str = NULL;
    int rc = -1;

    if (!dict)
        return -1;
    if (!(str = PyObject_GetAttrString(PyExc_BaseException, "__str__")) ||
        PyDict_SetItemString(dict, "__str__", str) < 0 ||
        PyDict_SetItemString(dict, "code", Py_None) < 0)
        goto drop_dict;
    error_base = PyErr_NewExceptionWithDoc(
        "ferry.Error", "Base class of every failure reported by ferry; `code` is libferry's.",
        PyExc_Exception, dict);
    if (error_base && PyModule_AddObjectRef(m, "Error", error_base) == 0)
        rc = 0;
drop_dict:
    Py_XDECREF(str);
    Py_DECREF(dict);
    return rc;
}

static int make_kind(PyObject *m, const struct error_kind *k)
{
    char qualname[64];
    PyObject *parent = k->parent ? classes[-k->parent] : error_base;
    PyObject *bases, *dict, *cls = NULL, *code;

    snprintf(qualname, sizeof(qualname), "ferry.%s", k->name);
    bases = k->builtin ? PyTuple_Pack(2, parent, *k->builtin) : PyTuple_Pack(1, parent);
    dict = PyDict_New();
    code = PyLong_FromLong(k->code);
    if (bases && dict && code && PyDict_SetItemString(dict, "code", code) == 0)
        cls = PyErr_NewExceptionWithDoc(qualname, k->doc, bases, dict);
    Py_XDECREF(bases);
    Py_XDECREF(dict);
    Py_XDECREF(code);
    if (!cls || PyModule_AddObjectRef(m, k->name, cls) < 0) {
        Py_XDECREF(cls);
        return -1;
    }
    classes[-k->code] = cls;
    return 0;
}

int pyf_errors_init(PyObject *m)
{
    if (make_base(m) < 0)
        return -1;
    /* The table lists every parent before its children. */
    for (size_t i = 0; i < N_KINDS; i++)
        if (make_kind(m, &kinds[i]) < 0)
            return -1;
    return 0;
}

PyObject *pyf_raise_msg(int rc, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    PyErr_SetString(pyf_error_class(rc), msg);
    return NULL;
}

PyObject *pyf_raise(int rc)
{
    return pyf_raise_detail(rc, ferry_errmsg());
}

PyObject *pyf_raise_detail(int rc, const char *detail)
{
    if (*detail)
        return pyf_raise_msg(rc, "%s: %s", ferry_strerror(rc), detail);
    return pyf_raise_msg(rc, "%s", ferry_strerror(rc));
}

void pyf_typed_id(PyObject *o, char *buf, size_t size)
{
    PyObject *repr = o && PyUnicode_Check(o) ? PyObject_Repr(o) : NULL;
    const char *text = repr ? PyUnicode_AsUTF8(repr) : NULL;
    size_t len = text ? strlen(text) : 0;

    buf[0] = '\0';
    if (!text) {
        PyErr_Clear();
        Py_XDECREF(repr);
        return;
    }
    /* repr() escapes quotes, newlines and controls; a long one is cut at a character's start,
     * so that the message stays UTF-8. */
    if (len + 3 > size) {
        len = size - 6;
        while (len && ((unsigned char)text[len] & 0xc0) == 0x80)
            len--;
        snprintf(buf, size, "%.*s..., ", (int)len, text);
    } else {
        snprintf(buf, size, "%s, ", text);
    }
    Py_DECREF(repr);
}

PyObject *pyf_error_new(int rc, const char *msg)
{
    return PyObject_CallFunction(pyf_error_class(rc), "s", msg);
}
