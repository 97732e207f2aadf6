/*
 * dir_request.c - the directory's requests from their call to their callback, and the
 * commands they (and everything else) send to Redis.
 */
#include "directory/directory_int.h"

struct request *dir_request_new(int kind, directory_answer_fn *cb, void *arg)
{
    struct request *r = calloc(1, sizeof(*r));

    if (r) {
        r->kind = kind;
        r->cb = cb;
        r->arg = arg;
    }
    return r;
}

void dir_request_free(struct request *r)
{
    free(r->asked);
    free(r->nodes);
    free(r->gone);
    free(r);
}

void dir_done_push(struct directory *d, struct request *r)
{
    r->next = NULL;
    *d->done_tail = r;
    d->done_tail = &r->next;
    d->done_len++;
    dir_turn_soon(d);
}

struct request *dir_done_pop(struct directory *d)
{
    struct request *r = d->done;

    d->done = r->next;
    if (!d->done)
        d->done_tail = &d->done;
    d->done_len--;
    return r;
}

void dir_pending_add(struct directory *d, struct request *r)
{
    r->next = d->pending;
    if (r->next)
        r->next->pprev = &r->next;
    r->pprev = &d->pending;
    d->pending = r;
}

static int node_compare(const void *a, const void *b)
{
    return strcmp(((const struct directory_node *)a)->id, ((const struct directory_node *)b)->id);
}

/* Sorts a node listing by id and drops duplicates (SCAN may return a key twice). */
static void nodes_sort_unique(struct request *r)
{
    size_t kept = 0;

    if (r->a.n == 0)
        return; /* r->nodes is NULL then: qsort must not see it */
    qsort(r->nodes, r->a.n, sizeof(*r->nodes), node_compare);
    for (size_t i = 0; i < r->a.n; i++) {
        if (!kept || strcmp(r->nodes[kept - 1].id, r->nodes[i].id) != 0)
            r->nodes[kept++] = r->nodes[i];
    }
    r->a.n = kept;
}

/* One of r's replies has been dealt with: r is answered once none is due any more. */
void dir_request_settle(struct directory *d, struct request *r)
{
    if (--r->awaiting)
        return;
    *r->pprev = r->next;
    if (r->next)
        r->next->pprev = r->pprev;
    if (r->a.status == 0 && r->kind == REQ_LOOKUP && !r->partial)
        dir_holders_remember(d, r);
    else if (r->a.status == 0 && r->kind == REQ_NODES)
        nodes_sort_unique(r);
    dir_done_push(d, r);
}

/* Records r's first failure. */
void dir_request_fail(struct directory *d, struct request *r, int status)
{
    if (r->a.status == 0)
        r->a.status = status;
}

void dir_cancel_in(struct request *list, void *arg)
{
    for (struct request *r = list; r; r = r->next) {
        if (r->arg == arg)
            r->cb = NULL;
    }
}

/* Answers the requests done so far, not those their callbacks add (the next run's). */
void dir_deliver(struct directory *d)
{
    for (size_t n = d->done_len; n > 0; n--) {
        struct request *r = dir_done_pop(d);
        r->a.nodes = r->nodes;
        r->a.gone = r->gone;
        r->a.other = r->other[0] ? r->other : NULL;
        r->a.id = &r->id;
        if (r->cb)
            r->cb(r->arg, &r->a);
        dir_request_free(r);
    }
}

/* Sends one command (NUL-terminated arguments) whose reply goes to fn with priv. 0, or
 * FERRY_EDIRECTORY when there is no connection to send it on. */
int dir_send_command(struct directory *d, redisCallbackFn *fn, void *priv, int argc,
                     const char **argv)
{
    size_t stack[ARGV_MAX], *lens = stack;
    int rc;

    if (argc < 1 || argc > DIR_ARGV_BATCH)
        return err_set(FERRY_EINVAL, "directory: a command of %d arguments (at most %d)", argc,
                       DIR_ARGV_BATCH);
    if (argc > ARGV_MAX && !(lens = malloc((size_t)argc * sizeof(*lens))))
        return err_set(FERRY_ENOMEM, "directory: a command of %d arguments", argc);
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    rc = d->ac ? redisAsyncCommandArgv(d->ac, fn, priv, argc, argv, lens) : REDIS_ERR;
    if (lens != stack)
        free(lens);
    if (rc != REDIS_OK)
        return err_set(FERRY_EDIRECTORY, "directory: not connected to Redis at %s", d->where);
    if (d->inflight++ == 0)
        d->progress_ms = loop_now_ms();
    if (d->watchdog.heap_index == SIZE_MAX)
        dir_arm(d, &d->watchdog, d->progress_ms + d->timeout_ms);
    return 0;
}

/* Every reply callback starts here. A NULL reply means that hiredis is freeing the context:
 * the command failed with the connection. */
struct directory *dir_reply_begin(redisAsyncContext *ac, const redisReply *reply)
{
    struct directory *d = ac->data;

    if (reply) {
        d->inflight--;
        d->progress_ms = loop_now_ms();
    }
    return d;
}

/* Gives the connection up: hiredis fails what is due and calls ev_cleanup, at once, or when
 * the running reply callback returns if called from one. */
void dir_drop(struct directory *d, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    /* ap is started (va_start); clang 14 misreads that on x86-64: LLVM issue 40656. */
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
    vsnprintf(d->why, sizeof(d->why), fmt, ap);
    va_end(ap);
    for (char *c = d->why; *c; c++) /* it may quote Redis, and goes to the log */
        if (*c < 0x20 || *c > 0x7e)
            *c = '?';
    redisAsyncFree(d->ac);
}

/* A reply to a write nobody waits for (heartbeat, publication): an error is counted, and a
 * server that no longer knows the scripts (SCRIPT FLUSH) or takes no writes (a replica, after
 * a failover) is given up, so that the next connection loads them or finds the master. */
void dir_check_reply(struct directory *d, const redisReply *reply, const char *what)
{
    const char *why = dir_reply_error(reply);

    if (!why)
        return;
    dir_command_failed(d, what, why);
    if (strncmp(why, "NOSCRIPT", 8) == 0 || strncmp(why, "READONLY", 8) == 0)
        dir_drop(d, "%s: %s", what, why);
}

/* The reply callback of such writes; priv names the command. */
void dir_on_checked(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);

    if (reply)
        dir_check_reply(d, reply, priv);
}
