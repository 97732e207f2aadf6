/*
 * objectid.h - ferry.ObjectID: an object's 20-byte id, and the rule that turns what a caller
 * passes as an id into one.
 *
 * The rule (the ferry command line's, extended to bytes): an ObjectID is itself; bytes of
 * exactly 20 are the raw id; a str or bytes of exactly 40 hex digits is the raw id in hex;
 * any other non-empty str (as UTF-8) or bytes is a name, hashed to 20 bytes with SHA-1.
 */
#ifndef PYF_OBJECTID_H
#define PYF_OBJECTID_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "pycompat.h"

#include "ferry.h"

/* location: where the object was put (a str, Client.location() of its node), or NULL: a
 * fetch given this id asks that node first. It travels with the id (pickled with it) and takes
 * no part in equality or hashing. */
typedef struct {
    PyObject_HEAD ferry_id id;
    PyObject *location;
} ObjectIDObject;

extern PyTypeObject ObjectID_Type;

/* Adds the type to module m; -1 with an exception set. */
int pyf_objectid_init(PyObject *m);

/* Applies the rule to o; -1 with TypeError (not an id-like type) or ValueError (empty name). */
int pyf_id_from_object(PyObject *o, ferry_id *out);

/* A new ObjectID holding id, and location (a str, or NULL or None: none). */
PyObject *pyf_id_new(const ferry_id *id);
PyObject *pyf_id_new_at(const ferry_id *id, PyObject *location);

/* The location o carries when it is an ObjectID with one (borrowed), else NULL. */
PyObject *pyf_id_location(PyObject *o);

/* The ids of o: a single id (ObjectID, str, bytes) gives one, stored in *one, and sets
 * *single; any other iterable gives its items, at most FERRY_MAX_IDS, in a block PyMem_Malloc'ed
 * for them. *out points at the ids (free it with PyMem_Free unless it is one). -1 with an
 * exception set and *out NULL. */
int pyf_ids_from_object(PyObject *o, ferry_id *one, ferry_id **out, size_t *n, int *single);

#endif
