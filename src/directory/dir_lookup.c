/*
 * dir_lookup.c - the directory's lookups and node listings: requests from their call to
 * their callback, the Redis commands they send and the replies they read.
 */
#include "directory/directory_int.h"

struct request *dir_request_new(directory_holders_fn *cb, void *arg)
{
    struct request *r = calloc(1, sizeof(*r));

    if (r) {
        r->cb = cb;
        r->arg = arg;
    }
    return r;
}

void dir_request_free(struct request *r)
{
    free(r->asked);
    free(r->nodes);
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

static void pending_add(struct directory *d, struct request *r)
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

    qsort(r->nodes, r->n, sizeof(*r->nodes), node_compare);
    for (size_t i = 0; i < r->n; i++) {
        if (!kept || strcmp(r->nodes[kept - 1].id, r->nodes[i].id) != 0)
            r->nodes[kept++] = r->nodes[i];
    }
    r->n = kept;
}

/* One of r's replies has been dealt with: r is answered once none is due any more. */
static void request_settle(struct directory *d, struct request *r)
{
    if (--r->awaiting)
        return;
    *r->pprev = r->next;
    if (r->next)
        r->next->pprev = r->pprev;
    if (r->status == 0 && r->lookup)
        dir_holders_remember(d, r);
    else if (r->status == 0)
        nodes_sort_unique(r);
    dir_done_push(d, r);
}

static void answer_add(struct request *r, const struct directory_node *node)
{
    if (r->n == r->cap) {
        struct directory_node *p = dir_grow(r->nodes, &r->cap, sizeof(*p));
        if (!p) {
            r->status = FERRY_ENOMEM;
            return;
        }
        r->nodes = p;
    }
    r->nodes[r->n++] = *node;
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
        if (r->cb)
            r->cb(r->arg, r->status, r->nodes, r->n);
        dir_request_free(r);
    }
}

/* Sends one command (NUL-terminated arguments) whose reply goes to fn with priv. 0, or
 * FERRY_EDIRECTORY when there is no connection to send it on. */
int dir_send_command(struct directory *d, redisCallbackFn *fn, void *priv, int argc,
                     const char **argv)
{
    size_t lens[ARGV_MAX];

    if (argc < 1 || argc > ARGV_MAX)
        return err_set(FERRY_EINVAL, "directory: a command of %d arguments (at most %d)", argc,
                       ARGV_MAX);
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    if (!d->ac || redisAsyncCommandArgv(d->ac, fn, priv, argc, argv, lens) != REDIS_OK)
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
    vsnprintf(d->why, sizeof(d->why), fmt, ap);
    va_end(ap);
    redisAsyncFree(d->ac);
}

/* The reply to a write nobody waits for (publication, heartbeat); priv names the command. */
void dir_on_checked(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const char *why = reply ? dir_reply_error(reply) : NULL;

    if (why)
        dir_command_failed(d, priv, why);
}

/* The node's entry (copied out of a reply to HGETALL) when it has an address; 0 when it is
 * missing (the node is dead) or unusable. Fields that are not strings, too long, hold a NUL
 * or name no transport, and transports beyond what a node entry holds, are left out. */
static int parse_entry(const redisReply *r, struct directory_node *node)
{
    char field[sizeof(XPORT_FIELD) + DIRECTORY_XPORT_NAME_MAX], addr[DIRECTORY_XPORT_ADDR_MAX + 1];
    size_t pre = strlen(XPORT_FIELD);

    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        if (!dir_string_copy(field, sizeof(field), r->element[i]))
            continue;
        if (strcmp(field, "addr") == 0)
            (void)dir_string_copy(node->addr, sizeof(node->addr), r->element[i + 1]);
        else if (strncmp(field, XPORT_FIELD, pre) == 0 && field[pre] &&
                 dir_string_copy(addr, sizeof(addr), r->element[i + 1]) && addr[0])
            (void)directory_node_set(node, field + pre, addr);
    }
    return node->addr[0] != '\0';
}

/* A reply to HGETALL ferry:node:<id>, for the oldest node r asked about. */
static void on_node_entry(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct request *r = priv;
    struct directory_node node = {0};

    memcpy(node.id, r->asked[r->asked_head++], sizeof(node.id));
    if (!rep) {
        r->status = FERRY_EDIRECTORY;
    } else if (rep->type == REDIS_REPLY_ERROR) {
        dir_command_failed(d, "HGETALL", rep->str);
    } else if (parse_entry(rep, &node)) {
        dir_node_remember(d, &node);
        if (r->status == 0)
            answer_add(r, &node);
    }
    request_settle(d, r);
}

/* Asks for a node's entry on r's behalf. */
static void ask_node(struct directory *d, struct request *r, const char *node_id)
{
    char key[NODE_KEY_MAX];
    const char *argv[] = {"HGETALL", key};

    if (r->asked_len == r->asked_cap) {
        node_name *p = dir_grow(r->asked, &r->asked_cap, sizeof(*p));
        if (!p) {
            r->status = FERRY_ENOMEM;
            return;
        }
        r->asked = p;
    }
    dir_entry_key(key, node_id);
    if (dir_send_command(d, on_node_entry, r, 2, argv) < 0) {
        r->status = FERRY_EDIRECTORY;
        return;
    }
    snprintf(r->asked[r->asked_len++], sizeof(node_name), "%s", node_id);
    r->awaiting++;
}

/* A member of a holder set: answered from the cache when its entry is trusted there (and the
 * lookup is not fresh), else asked for. */
static void consider_holder(struct directory *d, struct request *r, const redisReply *member)
{
    node_name id;
    const struct directory_node *known;

    if (!dir_string_copy(id, sizeof(id), member) || !id[0] || strcmp(id, d->self.id) == 0)
        return;
    known = r->fresh ? NULL : dir_node_cached(d, id);
    if (known)
        answer_add(r, known);
    else
        ask_node(d, r, id);
}

/* The reply to SMEMBERS ferry:obj:<hex>. */
static void on_members(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct request *r = priv;

    if (!rep) {
        r->status = FERRY_EDIRECTORY;
    } else if (rep->type != REDIS_REPLY_ARRAY) {
        r->status = FERRY_EDIRECTORY;
        dir_command_failed(d, "SMEMBERS", dir_reply_error(rep) ? rep->str : "unexpected reply");
    } else {
        for (size_t i = 0; i < rep->elements && r->status == 0; i++)
            consider_holder(d, r, rep->element[i]);
    }
    request_settle(d, r);
}

static void send_members(struct directory *d, struct request *r)
{
    char key[OBJ_KEY_MAX];
    const char *argv[] = {"SMEMBERS", key};

    dir_holders_key(key, &r->id);
    if (dir_send_command(d, on_members, r, 2, argv) < 0) {
        r->status = FERRY_EDIRECTORY;
        return;
    }
    r->awaiting++;
    d->counters.lookups++;
}

static void on_scan(redisAsyncContext *ac, void *reply, void *priv);

static void send_scan(struct directory *d, struct request *r, const char *cursor)
{
    const char *argv[] = {"SCAN", cursor, "MATCH", NODE_PREFIX "*", "COUNT", SCAN_COUNT};

    if (dir_send_command(d, on_scan, r, 6, argv) < 0) {
        r->status = FERRY_EDIRECTORY;
        return;
    }
    r->awaiting++;
}

static int scan_reply_valid(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_ARRAY;
}

/* A reply to SCAN <cursor> MATCH ferry:node:*: asks for each node's entry, and continues. */
static void on_scan(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct request *r = priv;

    if (!rep) {
        r->status = FERRY_EDIRECTORY;
    } else if (!scan_reply_valid(rep)) {
        r->status = FERRY_EDIRECTORY;
        dir_command_failed(d, "SCAN", dir_reply_error(rep) ? rep->str : "unexpected reply");
    } else {
        const redisReply *keys = rep->element[1];
        char key[NODE_KEY_MAX];
        for (size_t i = 0; i < keys->elements && r->status == 0; i++) {
            if (dir_string_copy(key, sizeof(key), keys->element[i]) &&
                strncmp(key, NODE_PREFIX, strlen(NODE_PREFIX)) == 0 && key[strlen(NODE_PREFIX)])
                ask_node(d, r, key + strlen(NODE_PREFIX));
        }
        if (r->status == 0 && strcmp(rep->element[0]->str, "0") != 0)
            send_scan(d, r, rep->element[0]->str);
    }
    request_settle(d, r);
}

/* Sends r's first command; r is answered from the replies, or at once (through the turn
 * timer) with FERRY_EDIRECTORY when there is no connection. */
void dir_request_start(struct directory *d, struct request *r)
{
    pending_add(d, r);
    r->awaiting = 1;
    if (r->lookup)
        send_members(d, r);
    else
        send_scan(d, r, "0");
    request_settle(d, r);
}
