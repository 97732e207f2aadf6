/* buffer.c - ferry.Buffer (rules in buffer.h). */
#include "buffer.h"

#include "dlpack.h"
#include "errors.h"
#include "objectid.h"

static PyObject *released_error(void)
{
    PyErr_SetString(PyExc_ValueError, "operation forbidden on released Buffer object");
    return NULL;
}

static BufferObject *buffer_alloc(struct pyf_conn *k, const ferry_id *id)
{
    BufferObject *self = PyObject_New(BufferObject, &Buffer_Type);

    if (!self)
        return NULL;
    self->conn = k;
    self->id = *id;
    self->exports = 0;
    self->unsealed = 0;
    self->aborting = 0;
    self->weakreflist = NULL;
    return self;
}

PyObject *pyf_buffer_new(struct pyf_conn *k, const ferry_id *id, const ferry_buffer *b)
{
    BufferObject *self = buffer_alloc(k, id);

    if (!self) {
        conn_give_back(k, id, PYF_RELEASE);
        conn_decref(k);
        return NULL;
    }
    /* Sealed bytes are never written through a get: the cast drops const for the struct only. */
    self->data = (uint8_t *)b->data;
    self->size = b->data_size;
    self->meta = b->metadata;
    self->meta_size = b->metadata_size;
    return (PyObject *)self;
}

PyObject *pyf_buffer_new_unsealed(struct pyf_conn *k, const ferry_id *id, uint8_t *data,
                                  uint64_t size, const uint8_t *meta, uint64_t meta_size)
{
    BufferObject *self = buffer_alloc(k, id);

    if (!self) {
        conn_give_back(k, id, PYF_ABORT);
        conn_decref(k);
        return NULL;
    }
    self->data = data;
    self->size = size;
    self->meta = meta;
    self->meta_size = meta_size;
    self->unsealed = 1;
    return (PyObject *)self;
}

void pyf_buffer_sealed(BufferObject *b)
{
    b->unsealed = 0;
}

void pyf_buffer_aborted(BufferObject *b)
{
    if (b->conn)
        conn_decref(b->conn);
    b->conn = NULL;
    b->unsealed = 0;
}

/* Gives back the object's reference (or drops our unsealed object) and the handle's. */
static void buffer_drop(BufferObject *self)
{
    struct pyf_conn *k = self->conn;

    self->conn = NULL;
    conn_give_back(k, &self->id, self->unsealed ? PYF_ABORT : PYF_RELEASE);
    conn_decref(k);
}

static void buffer_dealloc(BufferObject *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->conn)
        buffer_drop(self);
    PyObject_Free(self);
}

/* ---- the buffer protocol ---- */

/* 0 when the bytes may be read now; -1 with an exception otherwise. */
static int check_readable(BufferObject *self)
{
    if (!self->conn) {
        released_error();
        return -1;
    }
    if (self->aborting) {
        PyErr_SetString(PyExc_BufferError, "the object of this Buffer is being aborted");
        return -1;
    }
    if (conn_forked(self->conn)) {
        PyErr_SetString(pyf_error_base(),
                        "this Buffer belongs to the parent process, which may give its object "
                        "back at any time after fork(): get the object again through a Client "
                        "of this process");
        return -1;
    }
    return 0;
}

static int buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags)
{
    if (check_readable(self) < 0)
        return -1;
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->data, (Py_ssize_t)self->size,
                          !self->unsealed, flags) < 0)
        return -1;
    self->exports++;
    return 0;
}

static void buffer_releasebuffer(BufferObject *self, Py_buffer *view)
{
    self->exports--;
}

static PyBufferProcs buffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)buffer_getbuffer,
    .bf_releasebuffer = (releasebufferproc)buffer_releasebuffer,
};

/* ---- DLPack (dlpack.h: the 0.x ABI, and 1.0's versioned tensor) ---- */

/* A DLPack export: the managed tensor (of either ABI), its shape and strides in one allocation.
 * In place, the tensor holds a reference to the Buffer and counts as one of its exports until
 * its deleter runs; a copy (copy=True) holds its own bytes and nothing of the Buffer. */
struct dl_export {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } m;                /* first: the deleters get a pointer to it */
    BufferObject *held; /* NULL for a copy */
    void *copy;         /* the copy's bytes, or NULL */
    int64_t shape[1];
    int64_t strides[1];
};

static void dl_free(struct dl_export *e)
{
    PyGILState_STATE gil;

    if (!e->held) { /* a copy: nothing of Python's to touch */
        PyMem_RawFree(e->copy);
        PyMem_RawFree(e);
        return;
    }
    if (!Py_IsInitialized())
        return; /* after the interpreter's end: nothing is left to give back to */
    gil = PyGILState_Ensure();
    e->held->exports--;
    Py_DECREF(e->held);
    PyMem_RawFree(e);
    PyGILState_Release(gil);
}

static void dl_deleter(DLManagedTensor *managed)
{
    dl_free((struct dl_export *)managed);
}

static void dl_deleter_versioned(DLManagedTensorVersioned *managed)
{
    dl_free((struct dl_export *)managed);
}

/* A capsule's destructor: the tensor is still the capsule's unless a consumer renamed it. */
static void dl_capsule_destroy(PyObject *capsule, const char *used, const char *name)
{
    PyObject *type, *value, *tb;
    struct dl_export *e;

    if (PyCapsule_IsValid(capsule, used))
        return;
    PyErr_Fetch(&type, &value, &tb);
    e = PyCapsule_GetPointer(capsule, name);
    if (e)
        dl_free(e);
    else
        PyErr_WriteUnraisable(capsule);
    PyErr_Restore(type, value, tb);
}

static void dl_capsule_destructor(PyObject *capsule)
{
    dl_capsule_destroy(capsule, DLPACK_CAPSULE_USED_NAME, DLPACK_CAPSULE_NAME);
}

static void dl_capsule_destructor_versioned(PyObject *capsule)
{
    dl_capsule_destroy(capsule, DLPACK_VERSIONED_USED_NAME, DLPACK_VERSIONED_NAME);
}

/* What a consumer asked of __dlpack__. */
struct dl_request {
    int versioned;       /* max_version >= (1, 0): it reads flags */
    int copy;            /* copy=True: a private copy */
    int legacy_in_place; /* the 0.x tensor of a sealed object, in place (ferry.dlpack_unmarked) */
};

/* The capsule of an export e filled but for its tensor's data and flags. */
static PyObject *dl_capsule(struct dl_export *e, const struct dl_request *rq, void *data,
                            uint64_t flags)
{
    DLTensor t = {
        .data = data,
        .device = {.device_type = kDLCPU, .device_id = 0},
        .ndim = 1,
        .dtype = {.code = kDLUInt, .bits = 8, .lanes = 1},
        .shape = e->shape,
        .strides = e->strides,
        .byte_offset = 0,
    };

    if (rq->versioned) {
        e->m.versioned = (DLManagedTensorVersioned){
            .version = {1, 0}, .deleter = dl_deleter_versioned, .flags = flags, .dl_tensor = t};
        return PyCapsule_New(e, DLPACK_VERSIONED_NAME, dl_capsule_destructor_versioned);
    }
    e->m.legacy = (DLManagedTensor){.dl_tensor = t, .deleter = dl_deleter};
    return PyCapsule_New(e, DLPACK_CAPSULE_NAME, dl_capsule_destructor);
}

/* Refuses what would let a consumer write a sealed object: DLPack 0.x has no way to say
 * read-only, and the bytes are mapped read-only, so a consumer that believes them writable
 * (PyTorch 1.13) would kill the process at its first in-place write. */
static int dl_check_sealed(BufferObject *self, const struct dl_request *rq)
{
    if (self->unsealed || rq->versioned || rq->copy || rq->legacy_in_place)
        return 0;
    PyErr_SetString(PyExc_BufferError,
                    "a sealed object is read-only, and this consumer asked for DLPack 0.x, "
                    "which cannot mark a tensor read-only (torch 1.13 would write it in place "
                    "and crash with SIGSEGV): pass copy=True for a private writable copy, read "
                    "it in place with numpy.frombuffer(buf), or take the unmarked read-only "
                    "tensor knowingly with from_dlpack(ferry.dlpack_unmarked(buf))");
    return -1;
}

static PyObject *dl_export(BufferObject *self, const struct dl_request *rq)
{
    struct dl_export *e;
    PyObject *capsule;
    uint64_t flags = 0;
    void *data = self->data;

    if (check_readable(self) < 0 || dl_check_sealed(self, rq) < 0)
        return NULL;
    if (!(e = PyMem_RawCalloc(1, sizeof(*e))))
        return PyErr_NoMemory();
    e->shape[0] = (int64_t)self->size;
    e->strides[0] = 1;
    if (rq->copy) {
        if (!(e->copy = PyMem_RawMalloc(self->size ? self->size : 1))) {
            PyMem_RawFree(e);
            return PyErr_NoMemory();
        }
        memcpy(e->copy, self->data, self->size);
        data = e->copy;
        flags = DLPACK_FLAG_BITMASK_IS_COPIED;
    } else if (!self->unsealed) {
        flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    }
    if (!(capsule = dl_capsule(e, rq, data, flags))) {
        PyMem_RawFree(e->copy);
        PyMem_RawFree(e);
        return NULL;
    }
    if (!rq->copy) {
        e->held = (BufferObject *)Py_NewRef(self);
        self->exports++;
    }
    return capsule;
}

/* max_version: None, or a tuple (major, minor); 1 when it is at least (1, 0). */
static int dl_versioned(PyObject *max_version)
{
    long major;

    if (max_version == Py_None)
        return 0;
    if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) != 2) {
        PyErr_SetString(PyExc_TypeError, "max_version must be None or a tuple (major, minor)");
        return -1;
    }
    major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0));
    if (major == -1 && PyErr_Occurred())
        return -1;
    return major >= 1;
}

/* dl_device: None or the Buffer's own (kDLCPU, 0); anything else is a copy we cannot make. */
static int dl_device_check(PyObject *dl_device)
{
    int type, id;

    if (dl_device == Py_None)
        return 0;
    if (!PyArg_ParseTuple(dl_device, "ii;dl_device must be a tuple (device_type, device_id)", &type,
                          &id))
        return -1;
    if (type == kDLCPU && id == 0)
        return 0;
    PyErr_Format(PyExc_BufferError,
                 "a ferry.Buffer is host memory (kDLCPU, 0): no copy to "
                 "device (%d, %d)",
                 type, id);
    return -1;
}

static PyObject *buffer_dlpack(BufferObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    struct dl_request rq = {0};

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOO:__dlpack__", kwlist, &stream, &max_version,
                                     &dl_device, &copy))
        return NULL;
    if (stream != Py_None) { /* NumPy's error and words for its own CPU arrays */
        PyErr_SetString(PyExc_RuntimeError,
                        "a ferry.Buffer is host memory: __dlpack__ only supports stream=None");
        return NULL;
    }
    if ((rq.versioned = dl_versioned(max_version)) < 0 || dl_device_check(dl_device) < 0 ||
        (copy != Py_None && (rq.copy = PyObject_IsTrue(copy)) < 0))
        return NULL;
    return dl_export(self, &rq);
}

/* The 0.x tensor of a sealed object in place, for ferry.dlpack_unmarked: read-only in fact
 * (the MMU), though nothing in DLPack 0.x can say so. */
static PyObject *buffer_dlpack_unmarked(BufferObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"stream", NULL};
    PyObject *stream = Py_None;
    struct dl_request rq = {.legacy_in_place = 1};

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:_dlpack_unmarked", kwlist, &stream))
        return NULL;
    if (stream != Py_None) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a ferry.Buffer is host memory: __dlpack__ only supports stream=None");
        return NULL;
    }
    return dl_export(self, &rq);
}

static PyObject *buffer_dlpack_device(BufferObject *self, PyObject *unused)
{
    return Py_BuildValue("(ii)", kDLCPU, 0);
}

/* ---- methods ---- */

static PyObject *buffer_release(BufferObject *self, PyObject *unused)
{
    char hex[2 * FERRY_ID_SIZE + 1];

    if (!self->conn)
        Py_RETURN_NONE;
    if (self->exports) {
        PyErr_Format(PyExc_BufferError,
                     "Buffer has %zd exported view%s: drop them (and the arrays made from them) "
                     "before releasing it",
                     self->exports, self->exports == 1 ? "" : "s");
        return NULL;
    }
    if (self->unsealed) {
        ferry_id_format(&self->id, hex);
        return pyf_raise_msg(FERRY_ENOTSEALED, "object %s is not sealed: seal or abort it", hex);
    }
    buffer_drop(self);
    Py_RETURN_NONE;
}

static PyObject *buffer_enter(BufferObject *self, PyObject *unused)
{
    if (!self->conn)
        return released_error();
    return Py_NewRef(self);
}

static PyObject *buffer_exit(BufferObject *self, PyObject *args)
{
    return buffer_release(self, NULL);
}

static PyMethodDef buffer_methods[] = {
    {"release", (PyCFunction)buffer_release, METH_NOARGS,
     "release()\n\nGives the object's reference back now. BufferError while views made from "
     "this Buffer are alive; afterwards nothing can be read through it."},
    {"__dlpack__", (PyCFunction)(void (*)(void))buffer_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None) -> PyCapsule\n\n"
     "The DLPack export that numpy.from_dlpack and torch.from_dlpack read: a 1-D uint8 tensor in "
     "host memory. In place (no copy) it holds the Buffer and counts as a view: release() "
     "refuses while it lives. A consumer that passes max_version >= (1, 0) gets DLPack 1.0's "
     "versioned tensor, flagged read-only for a sealed object. One that speaks DLPack 0.x "
     "(NumPy 1.x, PyTorch 1.13) cannot be told read-only, so a sealed object's export to it is "
     "refused (BufferError) unless copy=True (a private writable copy) or it is asked for "
     "through ferry.dlpack_unmarked(buf); an object being created exports writable. stream must "
     "be None (RuntimeError otherwise, as NumPy's arrays say)."},
    {"_dlpack_unmarked", (PyCFunction)(void (*)(void))buffer_dlpack_unmarked,
     METH_VARARGS | METH_KEYWORDS,
     "_dlpack_unmarked(stream=None) -> PyCapsule\n\nferry.dlpack_unmarked's export: the 0.x "
     "tensor in place, read-only in fact but not marked so."},
    {"__dlpack_device__", (PyCFunction)buffer_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (1, 0)\n\nWhere __dlpack__'s tensor lies: kDLCPU (1), device 0."},
    {"__enter__", (PyCFunction)buffer_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)buffer_exit, METH_VARARGS, NULL},
    {NULL},
};

/* ---- attributes ---- */

static PyObject *buffer_get_id(BufferObject *self, void *unused)
{
    return pyf_id_new(&self->id);
}

static PyObject *buffer_get_size(BufferObject *self, void *unused)
{
    if (!self->conn)
        return released_error();
    return PyLong_FromUnsignedLongLong(self->size);
}

static PyObject *buffer_get_metadata(BufferObject *self, void *unused)
{
    if (check_readable(self) < 0)
        return NULL;
    return PyBytes_FromStringAndSize((const char *)self->meta, (Py_ssize_t)self->meta_size);
}

static PyObject *buffer_get_released(BufferObject *self, void *unused)
{
    return PyBool_FromLong(self->conn == NULL);
}

static PyObject *buffer_get_readonly(BufferObject *self, void *unused)
{
    if (!self->conn)
        return released_error();
    return PyBool_FromLong(!self->unsealed);
}

static PyGetSetDef buffer_getset[] = {
    {"id", (getter)buffer_get_id, NULL, "The object's ObjectID.", NULL},
    {"size", (getter)buffer_get_size, NULL, "Bytes of data (the metadata not included).", NULL},
    {"metadata", (getter)buffer_get_metadata, NULL, "A copy of the object's metadata (bytes).",
     NULL},
    {"released", (getter)buffer_get_released, NULL, "True once release() gave the object back.",
     NULL},
    {"readonly", (getter)buffer_get_readonly, NULL,
     "False only for an object being created (create() until seal()).", NULL},
    {NULL},
};

static Py_ssize_t buffer_length(BufferObject *self)
{
    if (!self->conn) {
        released_error();
        return -1;
    }
    return (Py_ssize_t)self->size;
}

static PySequenceMethods buffer_as_sequence = {
    .sq_length = (lenfunc)buffer_length,
};

static PyObject *buffer_repr(BufferObject *self)
{
    char hex[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(&self->id, hex);
    if (!self->conn)
        return PyUnicode_FromFormat("<ferry.Buffer %s released>", hex);
    return PyUnicode_FromFormat("<ferry.Buffer %s, %llu bytes%s>", hex,
                                (unsigned long long)self->size, self->unsealed ? ", unsealed" : "");
}

PyTypeObject Buffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_repr = (reprfunc)buffer_repr,
    .tp_as_sequence = &buffer_as_sequence,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An object's bytes in the store, in place (made by Client.get and Client.create).\n\n"
              "memoryview(buf), numpy.frombuffer(buf, ...), numpy.from_dlpack(buf), "
              "torch.from_dlpack(buf) and bytes(buf) (a copy) read it; the object stays "
              "referenced while the Buffer or any view made from it is alive.",
    .tp_weaklistoffset = offsetof(BufferObject, weakreflist),
    .tp_methods = buffer_methods,
    .tp_getset = buffer_getset,
};

int pyf_buffer_init(PyObject *m)
{
    if (PyType_Ready(&Buffer_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Buffer", (PyObject *)&Buffer_Type);
}
