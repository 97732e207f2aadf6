/* conn.c - libferry handles shared by a Client and its Buffers (rules in conn.h). */
#include "conn.h"

#include <pthread.h>

static unsigned long fork_generation;

static void count_fork(void)
{
    fork_generation++;
}

int pyf_fork_init(void)
{
    return pthread_atfork(NULL, NULL, count_fork) == 0 ? 0 : -1;
}

unsigned long pyf_fork_generation(void)
{
    return fork_generation;
}

int conn_open(const char *path, int64_t timeout_ms, struct pyf_conn **out)
{
    struct pyf_conn *k = PyMem_Calloc(1, sizeof(*k));
    int rc;

    if (!k)
        return FERRY_ENOMEM;
    Py_BEGIN_ALLOW_THREADS
        rc = timeout_ms ? ferry_connect_timeout(path, timeout_ms, &k->c)
                        : ferry_connect(path, &k->c);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyMem_Free(k);
        return rc;
    }
    k->refs = 1;
    k->generation = fork_generation;
    *out = k;
    return 0;
}

int conn_forked(const struct pyf_conn *k)
{
    return k->generation != fork_generation;
}

void conn_incref(struct pyf_conn *k)
{
    k->refs++;
}

void conn_decref(struct pyf_conn *k)
{
    if (--k->refs > 0)
        return;
    /* In a forked child this closes the child's copies only; the parent's session goes on. */
    ferry_disconnect(k->c);
    PyMem_Free(k->pending);
    PyMem_Free(k);
}

/* Sends one give-back with the GIL released: a release only writes to the socket, but a daemon
 * that stops reading would block that write, and an abort waits for the reply. */
static void send_one(struct pyf_conn *k, const ferry_id *id, enum pyf_pending_op op)
{
    int rc;

    Py_BEGIN_ALLOW_THREADS
        rc = op == PYF_RELEASE ? ferry_release(k->c, id) : ferry_abort(k->c, id);
    Py_END_ALLOW_THREADS
    if (rc == FERRY_ECONN)
        k->broken = 1;
}

/* Sends what is queued. The caller has marked the handle busy, so that give-backs of other
 * threads meanwhile queue up here rather than race for the handle. */
static void drain(struct pyf_conn *k)
{
    while (k->n_pending && !k->broken) {
        struct pyf_pending p = k->pending[--k->n_pending];
        send_one(k, &p.id, p.op);
    }
    if (k->broken)
        k->n_pending = 0; /* the daemon gave everything back when the connection went */
}

static void give_back_now(struct pyf_conn *k, const ferry_id *id, enum pyf_pending_op op)
{
    k->busy++;
    send_one(k, id, op);
    drain(k);
    k->busy--;
}

void conn_enter(struct pyf_conn *k)
{
    k->refs++;
    k->busy++;
}

void conn_leave(struct pyf_conn *k, int rc)
{
    if (rc == FERRY_ECONN)
        k->broken = 1;
    if (k->busy == 1 && k->n_pending)
        drain(k);
    k->busy--;
    conn_decref(k);
}

/* Queues a give-back; 0, or -1 when memory ran out. */
static int queue(struct pyf_conn *k, const ferry_id *id, enum pyf_pending_op op)
{
    if (k->n_pending == k->cap_pending) {
        size_t cap = k->cap_pending ? 2 * k->cap_pending : 16;
        struct pyf_pending *p = PyMem_Realloc(k->pending, cap * sizeof(*p));
        if (!p)
            return -1;
        k->pending = p;
        k->cap_pending = cap;
    }
    k->pending[k->n_pending++] = (struct pyf_pending){*id, op};
    return 0;
}

void conn_give_back(struct pyf_conn *k, const ferry_id *id, enum pyf_pending_op op)
{
    if (conn_forked(k) || k->broken)
        return;
    if (!k->busy)
        give_back_now(k, id, op);
    else
        (void)queue(k, id, op); /* out of memory: kept until the disconnect gives it back */
}
