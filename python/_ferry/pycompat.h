/* The CPython API this module uses that Python 3.9 lacks (3.10 added it), defined for 3.9 as
 * 3.10 defines it. errors.h and objectid.h include it, so every source of the module sees it. */
#ifndef PYFERRY_PYCOMPAT_H
#define PYFERRY_PYCOMPAT_H

#include <Python.h>

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *pyf_newref(PyObject *o)
{
    Py_INCREF(o);
    return o;
}

static inline PyObject *pyf_xnewref(PyObject *o)
{
    Py_XINCREF(o);
    return o;
}

/* Macros that cast, as 3.10's do: callers pass pointers to their own object types. */
#define Py_NewRef(o) pyf_newref((PyObject *)(o))
#define Py_XNewRef(o) pyf_xnewref((PyObject *)(o))

/* Adds value to m as name, taking a reference of its own (PyModule_AddObject steals the
 * caller's, and only on success); -1 with an exception set on failure or a NULL value. */
static inline int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *value)
{
    if (!value) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "PyModule_AddObjectRef: NULL value");
        return -1;
    }
    Py_INCREF(value);
    if (PyModule_AddObject(m, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}
#endif

#endif
