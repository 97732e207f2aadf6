/*
 * errors.h - the module's exceptions: ferry.Error and one subclass per libferry error code.
 *
 * Every failure of a libferry call becomes the subclass of its code, carrying the code
 * (`.code`, a negative FERRY_E* value) and the message "<what ferry_strerror says>: <what
 * ferry_errmsg says>", so that the figures of the C library (requested, capacity, used,
 * evictable for StoreFull) reach Python unchanged. Arguments are checked before any call, and
 * wrong ones raise TypeError or ValueError, never these.
 */
#ifndef PYF_ERRORS_H
#define PYF_ERRORS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "pycompat.h"

/* Creates the exception classes and adds them to module m; -1 with an exception set. */
int pyf_errors_init(PyObject *m);

/* Raises the exception of libferry code rc with the calling thread's ferry_errmsg(); the
 * message must be read by the thread that made the call, before any other libferry call.
 * Returns NULL, for `return pyf_raise(rc);`. */
PyObject *pyf_raise(int rc);

/* The same with a detail kept from earlier (ferry_errmsg() copied before cleaning up). */
PyObject *pyf_raise_detail(int rc, const char *detail);

/* Raises the exception of code rc with a message of the caller's. Returns NULL. */
PyObject *pyf_raise_msg(int rc, const char *fmt, ...);

/* What the user typed for an id, for messages: "repr(NAME), " for a str (name or hex), else ""
 * (an ObjectID or bytes: the id's hex says it all). Into buf (size > 8), cut to fit at a
 * character's start. */
void pyf_typed_id(PyObject *o, char *buf, size_t size);

/* The class of code rc (borrowed), ferry.Error for an unknown one. */
PyObject *pyf_error_class(int rc);

/* An exception instance of code rc with message msg (new reference), not raised: for lists of
 * failures (put_many). */
PyObject *pyf_error_new(int rc, const char *msg);

/* ferry.Error itself (borrowed): failures of no libferry code, such as use after fork(). */
PyObject *pyf_error_base(void);

#endif
