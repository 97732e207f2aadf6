/*
 * buffer.h - ferry.Buffer: an object's bytes in the arena, exported in place through the
 * buffer protocol and DLPack (__dlpack__, the 0.x ABI of dlpack.h).
 *
 * A Buffer holds one reference to its object, taken on the daemon by the get (or create) that
 * made it, and one reference to the handle it came through, whose mapping its bytes lie in.
 * Views (memoryview, NumPy arrays, slices of them, DLPack tensors) hold the Buffer, so the
 * object stays referenced while any of them lives; the reference goes back when the Buffer itself
 * goes, or at release(), which refuses (BufferError) while views are exported, as
 * memoryview.release() does. A released Buffer exports nothing more (ValueError), so freed arena
 * memory is never read through it.
 *
 * A Buffer made by create() is writable until its object is sealed; then it is an ordinary,
 * read-only Buffer. Its bytes lie in libferry's writable view (src/client/wview.h), whose pages
 * turn read-only at the seal: a view exported before the seal reads on, and a write through it
 * faults (SIGSEGV) rather than change a sealed object. Every other Buffer's bytes are mapped
 * read-only; DLPack exports say so where the consumer's DLPack version can (buffer.c).
 *
 * In a child forked after the Buffer was made, it exports nothing (ferry.Error): the reference
 * is the parent's, which may give it back at any time. Views made before the fork are the
 * child's own risk, as with any shared mapping; the child gets objects again through a Client
 * of its own.
 */
#ifndef PYF_BUFFER_H
#define PYF_BUFFER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "conn.h"

typedef struct {
    PyObject_HEAD struct pyf_conn *conn; /* NULL once released */
    ferry_id id;
    uint8_t *data;
    uint64_t size;
    const uint8_t *meta;
    uint64_t meta_size;
    Py_ssize_t exports; /* views alive, DLPack tensors included */
    int unsealed;       /* made by create() and neither sealed nor aborted yet */
    int aborting;       /* abort() of its object is under way: no new views */
    PyObject *weakreflist;
} BufferObject;

extern PyTypeObject Buffer_Type;

int pyf_buffer_init(PyObject *m);

/* A Buffer over b (status 0) of object id, taking over one reference to k and the object's
 * reference held on k. On failure (NULL, exception set) both are given back. */
PyObject *pyf_buffer_new(struct pyf_conn *k, const ferry_id *id, const ferry_buffer *b);

/* A writable Buffer over an unsealed object of ours: the same, with unsealed set. */
PyObject *pyf_buffer_new_unsealed(struct pyf_conn *k, const ferry_id *id, uint8_t *data,
                                  uint64_t size, const uint8_t *meta, uint64_t meta_size);

/* Its object was sealed: read-only from now on, released like any other. */
void pyf_buffer_sealed(BufferObject *b);

/* Its object was aborted: released, with nothing left to give back. */
void pyf_buffer_aborted(BufferObject *b);

#endif
