/*
 * args.h - argument parsing for the module's METH_FASTCALL | METH_KEYWORDS methods: the hot
 * calls (get, put) cannot afford PyArg_ParseTupleAndKeywords' tuple and dict.
 */
#ifndef PYF_ARGS_H
#define PYF_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Sets out[0..n) (borrowed references, NULL when not given) from the positional arguments and
 * then the keywords of a vectorcall to fname, whose parameters are names[0..n); the first
 * `required` must be given. -1 with TypeError for too many, unknown, repeated or missing
 * arguments. */
int pyf_parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                   const char *const *names, int n, int required, PyObject **out);

#endif
