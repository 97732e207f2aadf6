/*
 * conn.h - a libferry handle shared by a Client and the Buffers made through it.
 *
 * Ownership and locking. Every field is read and written only with the GIL held:
 * - `refs`: the Client's hold, one per Buffer made through the handle and one per call in
 *   progress. At 0 the handle is disconnected and its arena mapping unmapped, so a Buffer, or
 *   any view of one, never outlives the mapping it points into.
 * - `busy`: calls in progress on the handle with the GIL released (give-backs included).
 *   libferry serialises the calls of a handle on its own mutex; a Buffer let go while the
 *   handle is busy must not wait for that mutex with the GIL held (the call holding it may take
 *   a while), so its release is queued in `pending` and sent by the last call to leave. Every
 *   give-back is sent with the GIL released too: a daemon that stops reading must not freeze
 *   the whole interpreter.
 * - `broken`: a call on it failed with FERRY_ECONN, or the connection's timeout ended
 *   (FERRY_ETIMEDOUT, which breaks a libferry handle); every later call would fail too.
 * - `pid`: the process that connected. A forked child never sends on its parent's socket: it
 *   may read through Buffers it inherited (the mapping is shared), but gives nothing back.
 */
#ifndef PYF_CONN_H
#define PYF_CONN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/types.h>

#include "ferry.h"

/* What a queued entry asks the daemon for. */
enum pyf_pending_op { PYF_RELEASE, PYF_ABORT };

struct pyf_pending {
    ferry_id id;
    enum pyf_pending_op op;
};

struct pyf_conn {
    ferry_client *c;
    Py_ssize_t refs;
    int busy;
    int broken;
    uint64_t checked_ns;   /* when pyf_client_conn last asked ferry_connected (monotonic) */
    unsigned long main_no; /* a waiting handle: the Client's mains when it was opened */
    unsigned long generation;
    struct pyf_pending *pending;
    size_t n_pending, cap_pending;
};

/* Counts the forks this process came out of, from a pthread_atfork handler registered once at
 * import: comparing it costs a load where getpid() is a system call on every call. */
int pyf_fork_init(void);
unsigned long pyf_fork_generation(void);

/* Connects to the daemon at path (NULL: libferry's default socket, client_default_socket:
 * Client() resolves it once and passes it, so that its connections agree) with the GIL
 * released, the connection's timeout timeout_ms (ferry_connect_timeout; 0: libferry's default,
 * ferry_connect); *out holds one reference. Returns 0 or libferry's code (the detail in
 * ferry_errmsg()); raises nothing. */
int conn_open(const char *path, int64_t timeout_ms, struct pyf_conn **out);

void conn_incref(struct pyf_conn *k);
/* Drops a reference; the last one disconnects. */
void conn_decref(struct pyf_conn *k);

/* 1 in a process other than the one that connected. */
int conn_forked(const struct pyf_conn *k);

/* Brackets a call made with the GIL released: enter takes a reference and marks the handle
 * busy; leave records a lost connection (rc FERRY_ECONN), sends what was queued meanwhile if
 * the handle is free again, and drops the reference. Read ferry_errmsg() before leave. */
void conn_enter(struct pyf_conn *k);
void conn_leave(struct pyf_conn *k, int rc);

/* Gives back one reference to id (op PYF_RELEASE) or drops the unsealed object id
 * (PYF_ABORT): at once when the handle is free, else when its calls end; never in a forked
 * child. Never raises; may let the GIL go. */
void conn_give_back(struct pyf_conn *k, const ferry_id *id, enum pyf_pending_op op);

#endif
