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

/* ---- DLPack (0.x ABI, dlpack.h) ---- */

/* A DLPack export: the managed tensor, its shape and strides in one allocation. The tensor
 * holds a reference to the Buffer and counts as one of its exports until its deleter runs. */
struct dl_export {
    DLManagedTensor managed;
    int64_t shape[1];
    int64_t strides[1];
};

static void dl_deleter(DLManagedTensor *managed)
{
    BufferObject *self = managed->manager_ctx;
    PyGILState_STATE gil;

    if (!Py_IsInitialized())
        return; /* after the interpreter's end: nothing is left to give back to */
    gil = PyGILState_Ensure();
    self->exports--;
    Py_DECREF(self);
    PyMem_RawFree(managed);
    PyGILState_Release(gil);
}

/* The capsule's destructor: the tensor is still the capsule's unless a consumer renamed it. */
static void dl_capsule_destructor(PyObject *capsule)
{
    PyObject *type, *value, *tb;
    DLManagedTensor *managed;

    if (PyCapsule_IsValid(capsule, DLPACK_CAPSULE_USED_NAME))
        return;
    PyErr_Fetch(&type, &value, &tb);
    managed = PyCapsule_GetPointer(capsule, DLPACK_CAPSULE_NAME);
    if (managed)
        managed->deleter(managed);
    else
        PyErr_WriteUnraisable(capsule);
    PyErr_Restore(type, value, tb);
}

static PyObject *buffer_dlpack(BufferObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"stream", NULL};
    PyObject *stream = Py_None, *capsule;
    struct dl_export *e;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:__dlpack__", kwlist, &stream))
        return NULL;
    if (stream != Py_None) { /* NumPy's error and words for its own CPU arrays */
        PyErr_SetString(PyExc_RuntimeError,
                        "a ferry.Buffer is host memory: __dlpack__ only supports stream=None");
        return NULL;
    }
    if (check_readable(self) < 0)
        return NULL;
    e = PyMem_RawMalloc(sizeof(*e));
    if (!e)
        return PyErr_NoMemory();
    e->shape[0] = (int64_t)self->size;
    e->strides[0] = 1;
    e->managed.dl_tensor = (DLTensor){
        .data = self->data,
        .device = {.device_type = kDLCPU, .device_id = 0},
        .ndim = 1,
        .dtype = {.code = kDLUInt, .bits = 8, .lanes = 1},
        .shape = e->shape,
        .strides = e->strides,
        .byte_offset = 0,
    };
    e->managed.manager_ctx = self;
    e->managed.deleter = dl_deleter;
    capsule = PyCapsule_New(&e->managed, DLPACK_CAPSULE_NAME, dl_capsule_destructor);
    if (!capsule) {
        PyMem_RawFree(e);
        return NULL;
    }
    Py_INCREF(self);
    self->exports++;
    return capsule;
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
     "__dlpack__(stream=None) -> PyCapsule\n\nThe DLPack export (the 0.x ABI, a \"dltensor\" "
     "capsule) that numpy.from_dlpack and torch.from_dlpack read: the bytes in place, a 1-D uint8 "
     "tensor in host memory, no copy. The tensor holds the Buffer and counts as a view: release() "
     "refuses while it lives. stream must be None (RuntimeError otherwise, as NumPy's arrays "
     "say). NumPy's arrays from it are read-only; torch's tensors are writable, and writing "
     "through them writes the arena: sealed objects are immutable by contract, as in C."},
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
