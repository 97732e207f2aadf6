/* module.c - the ferry._ferry extension module: its types, exceptions and constants. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "buffer.h"
#include "client.h"
#include "errors.h"
#include "ferry.h"
#include "objectid.h"
#include "objfmt.h"
#include "subscription.h"

/* _decode_parts(metadata, size) -> list of (offset, length): the parts of a put_object object
 * whose metadata and data size are given; ValueError unless the metadata is of that format. */
static PyObject *decode_parts(PyObject *module, PyObject *args)
{
    unsigned long long size;
    const char *why = NULL;
    PyObject *list;
    Py_buffer meta;
    size_t n;

    if (!PyArg_ParseTuple(args, "y*K:_decode_parts", &meta, &size))
        return NULL;
    if (objfmt_check(meta.buf, (size_t)meta.len, size, &n, &why) < 0) {
        PyBuffer_Release(&meta);
        return PyErr_Format(PyExc_ValueError, "not an object stored by put_object: %s", why);
    }
    list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        struct objfmt_part p = objfmt_part_at(meta.buf, i);
        PyObject *t =
            Py_BuildValue("(KK)", (unsigned long long)p.offset, (unsigned long long)p.length);
        if (!t)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    PyBuffer_Release(&meta);
    return list;
}

static PyMethodDef module_methods[] = {
    {"_decode_parts", decode_parts, METH_VARARGS, NULL},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ferry._ferry",
    .m_doc = "The C part of the ferry module: libferry's client, exceptions and types.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__ferry(void)
{
    PyObject *m = PyModule_Create(&module_def);

    if (!m)
        return NULL;
    if (pyf_fork_init() < 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        Py_DECREF(m);
        return NULL;
    }
    if (pyf_errors_init(m) < 0 || pyf_objectid_init(m) < 0 || pyf_buffer_init(m) < 0 ||
        pyf_subscription_init(m) < 0 || pyf_client_init(m) < 0 ||
        PyModule_AddIntConstant(m, "MAX_IDS", FERRY_MAX_IDS) < 0 ||
        PyModule_AddIntConstant(m, "OBJECT_FORMAT_VERSION", OBJFMT_VERSION) < 0 ||
        PyModule_AddStringConstant(m, "DEFAULT_SOCKET", FERRY_DEFAULT_SOCKET) < 0 ||
        PyModule_AddStringConstant(m, "SERVICE_SOCKET", FERRY_SERVICE_SOCKET) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
