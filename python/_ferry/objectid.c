/* objectid.c - ferry.ObjectID and the id rule. */
#include "objectid.h"

#include <string.h>
#include <sys/random.h>

/* A name's id (SHA-1), or the raw id when it is 40 hex digits. */
static int id_from_text(const char *text, Py_ssize_t len, ferry_id *out)
{
    if (len == 0) {
        PyErr_SetString(PyExc_ValueError, "an object name must not be empty");
        return -1;
    }
    if (ferry_id_parse_n(text, (size_t)len, out) < 0) {
        PyErr_Format(PyExc_SystemError, "SHA-1 failed: %s", ferry_errmsg());
        return -1;
    }
    return 0;
}

int pyf_id_from_object(PyObject *o, ferry_id *out)
{
    if (PyObject_TypeCheck(o, &ObjectID_Type)) {
        *out = ((ObjectIDObject *)o)->id;
        return 0;
    }
    if (PyBytes_Check(o)) {
        if (PyBytes_GET_SIZE(o) == FERRY_ID_SIZE) {
            memcpy(out->bytes, PyBytes_AS_STRING(o), FERRY_ID_SIZE);
            return 0;
        }
        return id_from_text(PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o), out);
    }
    if (PyUnicode_Check(o)) {
        Py_ssize_t len;
        const char *utf8 = PyUnicode_AsUTF8AndSize(o, &len);
        return utf8 ? id_from_text(utf8, len, out) : -1;
    }
    PyErr_Format(PyExc_TypeError, "an object id must be ferry.ObjectID, str or bytes, not %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
}

PyObject *pyf_id_new_at(const ferry_id *id, PyObject *location)
{
    ObjectIDObject *self = PyObject_New(ObjectIDObject, &ObjectID_Type);

    if (self) {
        self->id = *id;
        self->location = location && location != Py_None ? Py_NewRef(location) : NULL;
    }
    return (PyObject *)self;
}

PyObject *pyf_id_new(const ferry_id *id)
{
    return pyf_id_new_at(id, NULL);
}

PyObject *pyf_id_location(PyObject *o)
{
    return PyObject_TypeCheck(o, &ObjectID_Type) ? ((ObjectIDObject *)o)->location : NULL;
}

static int is_single_id(PyObject *o)
{
    return PyObject_TypeCheck(o, &ObjectID_Type) || PyBytes_Check(o) || PyUnicode_Check(o);
}

int pyf_ids_from_object(PyObject *o, ferry_id *one, ferry_id **out, size_t *n, int *single)
{
    PyObject *seq;
    Py_ssize_t len;

    *out = NULL;
    *single = is_single_id(o);
    if (*single) {
        if (pyf_id_from_object(o, one) < 0)
            return -1;
        *out = one;
        *n = 1;
        return 0;
    }
    if (!(seq = PySequence_Fast(o,
                                "ids must be an id (ObjectID, str, bytes) or an iterable of them")))
        return -1;
    len = PySequence_Fast_GET_SIZE(seq);
    if ((size_t)len > FERRY_MAX_IDS) {
        PyErr_Format(PyExc_ValueError, "%zd ids in one call; at most %u", len, FERRY_MAX_IDS);
        goto drop_seq;
    }
    if (!(*out = PyMem_Malloc(len ? (size_t)len * sizeof(ferry_id) : 1))) {
        PyErr_NoMemory();
        goto drop_seq;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (pyf_id_from_object(PySequence_Fast_GET_ITEM(seq, i), &(*out)[i]) < 0) {
            PyMem_Free(*out);
            *out = NULL;
            goto drop_seq;
        }
    }
    *n = (size_t)len;
    Py_DECREF(seq);
    return 0;
drop_seq:
    Py_DECREF(seq);
    return -1;
}

/* ---- the type ---- */

static PyObject *objectid_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"id", "location", NULL};
    PyObject *value, *location = Py_None;
    ObjectIDObject *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:ObjectID", kwlist, &value, &location))
        return NULL;
    if (location != Py_None && !PyUnicode_Check(location))
        return PyErr_Format(PyExc_TypeError, "a location is a str (Client.location()), not %.80s",
                            Py_TYPE(location)->tp_name);
    if (location == Py_None) /* an ObjectID keeps its own, unless another is given */
        location = pyf_id_location(value);
    if (!(self = (ObjectIDObject *)type->tp_alloc(type, 0)))
        return NULL;
    self->location = location && location != Py_None ? Py_NewRef(location) : NULL;
    if (pyf_id_from_object(value, &self->id) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void objectid_dealloc(ObjectIDObject *self)
{
    Py_CLEAR(self->location);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *objectid_get_location(ObjectIDObject *self, void *unused)
{
    return Py_NewRef(self->location ? self->location : Py_None);
}

static PyObject *objectid_random(PyObject *cls, PyObject *unused)
{
    ferry_id id;

    if (getrandom(id.bytes, sizeof(id.bytes), 0) != (ssize_t)sizeof(id.bytes))
        return PyErr_SetFromErrno(PyExc_OSError);
    return pyf_id_new(&id);
}

static PyObject *objectid_from_name(PyObject *cls, PyObject *name)
{
    ferry_id id;
    const char *text;
    Py_ssize_t len;

    if (PyUnicode_Check(name)) {
        if (!(text = PyUnicode_AsUTF8AndSize(name, &len)))
            return NULL;
    } else if (PyBytes_Check(name)) {
        text = PyBytes_AS_STRING(name);
        len = PyBytes_GET_SIZE(name);
    } else {
        return PyErr_Format(PyExc_TypeError, "a name must be str or bytes, not %.100s",
                            Py_TYPE(name)->tp_name);
    }
    if (len == 0) {
        PyErr_SetString(PyExc_ValueError, "an object name must not be empty");
        return NULL;
    }
    if (ferry_id_from_name(text, (size_t)len, &id) < 0)
        return PyErr_Format(PyExc_SystemError, "SHA-1 failed: %s", ferry_errmsg());
    return pyf_id_new(&id);
}

static PyObject *objectid_hex(ObjectIDObject *self, PyObject *unused)
{
    char text[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(&self->id, text);
    return PyUnicode_FromStringAndSize(text, 2 * FERRY_ID_SIZE);
}

static PyObject *objectid_str(ObjectIDObject *self)
{
    return objectid_hex(self, NULL);
}

static PyObject *objectid_binary(ObjectIDObject *self, PyObject *unused)
{
    return PyBytes_FromStringAndSize((const char *)self->id.bytes, FERRY_ID_SIZE);
}

static PyObject *objectid_repr(ObjectIDObject *self)
{
    char text[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(&self->id, text);
    return PyUnicode_FromFormat("ObjectID('%s')", text);
}

static Py_hash_t objectid_hash(ObjectIDObject *self)
{
    Py_hash_t h;

    /* Ids are digests or random for the most part; their first bytes spread well. */
    memcpy(&h, self->id.bytes, sizeof(h));
    return h == -1 ? -2 : h;
}

static PyObject *objectid_richcompare(PyObject *a, PyObject *b, int op)
{
    int c;

    if (!PyObject_TypeCheck(a, &ObjectID_Type) || !PyObject_TypeCheck(b, &ObjectID_Type))
        Py_RETURN_NOTIMPLEMENTED;
    c = memcmp(((ObjectIDObject *)a)->id.bytes, ((ObjectIDObject *)b)->id.bytes, FERRY_ID_SIZE);
    Py_RETURN_RICHCOMPARE(c, 0, op);
}

static PyObject *objectid_reduce(ObjectIDObject *self, PyObject *unused)
{
    if (self->location) /* the reference travels with where it is */
        return Py_BuildValue("(O(y#O))", Py_TYPE(self), (const char *)self->id.bytes,
                             (Py_ssize_t)FERRY_ID_SIZE, self->location);
    return Py_BuildValue("(O(y#))", Py_TYPE(self), (const char *)self->id.bytes,
                         (Py_ssize_t)FERRY_ID_SIZE);
}

static PyGetSetDef objectid_getset[] = {
    {"location", (getter)objectid_get_location, NULL,
     "Where the object was put (the location() of its node, a str), or None. What put() returns "
     "carries it, and so does the id pickled: get(id, fetch=True) and fetch(id) on another node "
     "then ask that node first instead of the directory. Not part of equality or hashing.",
     NULL},
    {NULL},
};

static PyMethodDef objectid_methods[] = {
    {"random", objectid_random, METH_NOARGS | METH_CLASS,
     "random() -> ObjectID\n\n160 random bits from the kernel (getrandom)."},
    {"from_name", objectid_from_name, METH_O | METH_CLASS,
     "from_name(name) -> ObjectID\n\nThe SHA-1 digest of a str (UTF-8) or bytes name, even one "
     "that looks like 40 hex digits."},
    {"hex", (PyCFunction)objectid_hex, METH_NOARGS, "The 40 hex digits of the id."},
    {"binary", (PyCFunction)objectid_binary, METH_NOARGS, "The 20 bytes of the id."},
    {"__bytes__", (PyCFunction)objectid_binary, METH_NOARGS, "The 20 bytes of the id."},
    {"__reduce__", (PyCFunction)objectid_reduce, METH_NOARGS, NULL},
    {NULL},
};

PyTypeObject ObjectID_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.ObjectID",
    .tp_basicsize = sizeof(ObjectIDObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ObjectID(id, location=None)\n\nAn object's 20-byte id. id is an ObjectID, 20 raw "
              "bytes, 40 hex digits (str or bytes), or any other str or bytes name, hashed with "
              "SHA-1 (the rule of the ferry command line). location: where the object was put "
              "(see .location); an ObjectID given as id keeps its own.",
    .tp_dealloc = (destructor)objectid_dealloc,
    .tp_getset = objectid_getset,
    .tp_new = objectid_new,
    .tp_repr = (reprfunc)objectid_repr,
    .tp_str = (reprfunc)objectid_str,
    .tp_hash = (hashfunc)objectid_hash,
    .tp_richcompare = objectid_richcompare,
    .tp_methods = objectid_methods,
};

int pyf_objectid_init(PyObject *m)
{
    if (PyType_Ready(&ObjectID_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "ObjectID", (PyObject *)&ObjectID_Type);
}
