/*
 * subscription.h - ferry.Subscription: the notifications of a daemon (a seal, delete or
 * eviction each), read from a socket of its own. fileno() is that socket, non-blocking, for
 * selectors and asyncio's add_reader; read() waits with the GIL released.
 */
#ifndef PYF_SUBSCRIPTION_H
#define PYF_SUBSCRIPTION_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int pyf_subscription_init(PyObject *m);

/* A Subscription owning fd (closed on failure too); NULL with an exception set. */
PyObject *pyf_subscription_new(int fd);

#endif
