/*
 * dir_script.c - the Lua scripts that keep an object's entry, its holders and the nodes'
 * indexes consistent in one step each (Redis runs a script atomically), and what sends them:
 * publications and withdrawals, claims, cluster-wide deletes, cleanups.
 *
 * Each connection loads the scripts first (SCRIPT LOAD, before any other command but SELECT)
 * and then calls them by SHA-1 (EVALSHA), computed here once per process. The scripts read
 * node entries by their key names (ferry:node:<id>) besides the keys they are given, which a
 * single Redis (and a Sentinel-managed one) allows; Redis Cluster would not.
 */
#include "directory/directory_int.h"

#include <openssl/evp.h>
#include <pthread.h>

/* KEYS: obj, held. ARGV: node, inc, size, digest, hex. Records the content at the first
 * publication; refuses other content while a live holder (another node, running the
 * incarnation its field names) has the recorded one: {1, that node, its size and digest, hex,
 * ours}. When none is live any more, the entry starts again with ours. */
static const char publish_lua[] =
    "local cur = redis.call('HMGET', KEYS[1], 'size', 'digest')\n"
    "if cur[1] and (cur[1] ~= ARGV[3] or cur[2] ~= ARGV[4]) then\n"
    "  local f = redis.call('HGETALL', KEYS[1])\n"
    "  for i = 1, #f, 2 do\n"
    "    local n = string.match(f[i], '^h:(.+)$')\n"
    "    if n and n ~= ARGV[1] and\n"
    "       redis.call('HGET', 'ferry:node:' .. n, 'inc') == f[i + 1] then\n"
    "      return {1, n, cur[1], cur[2], ARGV[5], ARGV[3], ARGV[4]}\n"
    "    end\n"
    "  end\n"
    "  redis.call('DEL', KEYS[1])\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'size', ARGV[3], 'digest', ARGV[4], 'h:' .. ARGV[1], ARGV[2])\n"
    "redis.call('SADD', KEYS[2], ARGV[5])\n"
    "return {0}\n";

/* KEYS: obj, held. ARGV: node, inc, hex. Removes the node's field if this incarnation wrote it,
 * and the entry with its last holder (size and digest are the other two fields). */
static const char withdraw_lua[] =
    "local f = 'h:' .. ARGV[1]\n"
    "if redis.call('HGET', KEYS[1], f) == ARGV[2] then\n"
    "  redis.call('HDEL', KEYS[1], f)\n"
    "  if redis.call('HLEN', KEYS[1]) <= 2 then redis.call('DEL', KEYS[1]) end\n"
    "end\n"
    "redis.call('SREM', KEYS[2], ARGV[3])\n"
    "return 0\n";

/* KEYS: held. ARGV: node, keep, count. Takes up to count ids off the node's index and removes
 * the node's field from each unless incarnation keep wrote it: {ids taken, fields removed}. */
static const char cleanup_lua[] =
    "local ids = redis.call('SPOP', KEYS[1], ARGV[3])\n"
    "local f, removed = 'h:' .. ARGV[1], 0\n"
    "for _, hex in ipairs(ids) do\n"
    "  local obj = 'ferry:obj:' .. hex\n"
    "  local v = redis.call('HGET', obj, f)\n"
    "  if v and v ~= ARGV[2] then\n"
    "    redis.call('HDEL', obj, f)\n"
    "    removed = removed + 1\n"
    "    if redis.call('HLEN', obj) <= 2 then redis.call('DEL', obj) end\n"
    "  end\n"
    "end\n"
    "return {#ids, removed}\n";

/* KEYS: obj, events. ARGV: hex, node, inc, keep. Removes the entry and the id from its
 * holders' indexes, and tells every node (an event); the number of holders it had. */
static const char delete_lua[] =
    "local f = redis.call('HGETALL', KEYS[1])\n"
    "local n = 0\n"
    "for i = 1, #f, 2 do\n"
    "  local h = string.match(f[i], '^h:(.+)$')\n"
    "  if h then\n"
    "    redis.call('SREM', 'ferry:held:' .. h, ARGV[1])\n"
    "    n = n + 1\n"
    "  end\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'type', 'del', 'id', ARGV[1],\n"
    "           'node', ARGV[2], 'inc', ARGV[3])\n"
    "return n\n";

static const char *const scripts[N_SCRIPTS] = {
    [SCRIPT_PUBLISH] = publish_lua,
    [SCRIPT_WITHDRAW] = withdraw_lua,
    [SCRIPT_CLEANUP] = cleanup_lua,
    [SCRIPT_DELETE] = delete_lua,
};
static char shas[N_SCRIPTS][41];
static int shas_ok;
static pthread_once_t shas_once = PTHREAD_ONCE_INIT;

static void compute_shas(void)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len;

    for (int i = 0; i < N_SCRIPTS; i++) {
        if (!EVP_Digest(scripts[i], strlen(scripts[i]), md, &len, EVP_sha1(), NULL) || len != 20)
            return;
        for (unsigned j = 0; j < len; j++)
            snprintf(shas[i] + 2 * j, 3, "%02x", md[j]);
    }
    shas_ok = 1;
}

int dir_scripts_init(void)
{
    pthread_once(&shas_once, compute_shas);
    return shas_ok ? 0 : err_set(FERRY_ESYS, "directory: SHA-1 of the scripts: OpenSSL failed");
}

/* SCRIPT LOAD answers the script's SHA-1: anything else is a server we cannot use. */
static void on_loaded(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    const char *want = priv;

    if (!rep)
        return;
    if (rep->type != REDIS_REPLY_STRING || strcmp(rep->str, want) != 0)
        dir_drop(d, "SCRIPT LOAD: %s", dir_reply_why(rep));
}

int dir_scripts_load(struct directory *d)
{
    for (int i = 0; i < N_SCRIPTS; i++) {
        const char *argv[] = {"SCRIPT", "LOAD", scripts[i]};
        if (dir_send_command(d, on_loaded, shas[i], 3, argv) < 0)
            return FERRY_EDIRECTORY;
    }
    return 0;
}

/* EVALSHA of script s with nkeys keys then arguments (args[0..nargs)). */
static int evalsha(struct directory *d, int s, redisCallbackFn *fn, void *priv, int nkeys,
                   const char **args, int nargs)
{
    const char *argv[ARGV_MAX] = {"EVALSHA", shas[s]};
    char keys[4];

    snprintf(keys, sizeof(keys), "%d", nkeys);
    argv[2] = keys;
    if (3 + nargs > ARGV_MAX)
        return err_set(FERRY_EINVAL, "directory: too many script arguments");
    memcpy(argv + 3, args, (size_t)nargs * sizeof(*args));
    return dir_send_command(d, fn, priv, 3 + nargs, argv);
}

/* A conflict reply of the publish script ({1, node, size, digest, hex, our size, digest}):
 * its parts into a; 0 when it is not one. */
static int parse_conflict(const redisReply *r, struct directory_answer *a, node_name other,
                          char hex[HEX_ID_MAX], uint64_t *size, uint8_t digest[DIGEST_LEN])
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 7 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[0]->integer != 1 ||
        !dir_string_copy(other, sizeof(node_name), r->element[1]) ||
        !dir_reply_u64(r->element[2], 10, &a->size) ||
        !dir_reply_digest(r->element[3], a->digest) ||
        !dir_string_copy(hex, HEX_ID_MAX, r->element[4]) ||
        !dir_reply_u64(r->element[5], 10, size) || !dir_reply_digest(r->element[6], digest))
        return 0;
    a->has_content = 1;
    return 1;
}

static int published(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 0;
}

/* A refused publication: counted, and logged with both nodes. */
static void conflict_report(struct directory *d, const struct directory_answer *a,
                            const char *other, const char *hex, uint64_t size,
                            const uint8_t digest[DIGEST_LEN])
{
    char ours[DIGEST_HEX + 1], theirs[DIGEST_HEX + 1];

    d->counters.id_conflicts++;
    digest_hex(digest, ours);
    digest_hex(a->digest, theirs);
    log_warn("id %s: sealed here (%s) with other content (%" PRIu64 " bytes, digest %s) than node "
             "%s holds (%" PRIu64 " bytes, digest %s): this copy is not listed, other nodes "
             "fetch %s's",
             hex, d->self.id, size, ours, other, a->size, theirs, other);
}

/* The reply to a queued publication's script. */
static void on_published(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct directory_answer a = {0};
    node_name other;
    char hex[HEX_ID_MAX];
    uint64_t size;
    uint8_t digest[DIGEST_LEN];

    if (!rep || published(rep))
        return;
    if (parse_conflict(rep, &a, other, hex, &size, digest))
        conflict_report(d, &a, other, hex, size, digest);
    else
        dir_check_reply(d, rep, "publish");
}

/* The arguments the publish script takes after its keys. */
struct publish_args {
    char key[OBJ_KEY_MAX], held[HELD_KEY_MAX], hex[HEX_ID_MAX], size[U64_TEXT];
    char digest[DIGEST_HEX + 1];
};

static void publish_args(const struct directory *d, const ferry_id *id, uint64_t size,
                         const uint8_t digest[DIGEST_LEN], struct publish_args *p)
{
    dir_holders_key(p->key, id);
    dir_held_key(p->held, d->self.id);
    ferry_id_format(id, p->hex);
    snprintf(p->size, sizeof(p->size), "%" PRIu64, size);
    digest_hex(digest, p->digest);
}

static int send_claim(struct directory *d, const struct pubop *op);
static int send_delete(struct directory *d, const struct pubop *op);

int dir_send_pubop(struct directory *d, const struct pubop *op)
{
    struct publish_args p;
    int rc;

    if (op->kind == OP_CLAIM)
        return send_claim(d, op);
    if (op->kind == OP_DELETE)
        return send_delete(d, op);
    publish_args(d, &op->id, op->size, op->digest, &p);
    if (op->kind == OP_PUBLISH) {
        const char *args[] = {p.key, p.held, d->self.id, d->inc_text, p.size, p.digest, p.hex};
        rc = evalsha(d, SCRIPT_PUBLISH, on_published, NULL, 2, args, 7);
    } else {
        const char *args[] = {p.key, p.held, d->self.id, d->inc_text, p.hex};
        rc = evalsha(d, SCRIPT_WITHDRAW, dir_on_checked, "withdraw", 2, args, 5);
    }
    if (rc < 0)
        return rc;
    if (op->kind == OP_PUBLISH)
        d->counters.published++;
    else
        d->counters.withdrawn++;
    return 0;
}

/* Queues a request's operation (a claim, a delete) behind the publications already queued. */
static void request_queue(struct directory *d, struct request *r, const struct pubop *op)
{
    dir_pending_add(d, r);
    r->awaiting = 2; /* the queue's, and the one dropped just below */
    if (dir_queue_push(d, op) < 0) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
        r->awaiting--;
    }
    dir_request_settle(d, r);
}

/* The reply to a claim: published, or refused for a live holder's other content. */
static void on_claimed(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct request *r = priv;
    char hex[HEX_ID_MAX];
    uint64_t size;
    uint8_t digest[DIGEST_LEN];

    if (!rep) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else if (parse_conflict(rep, &r->a, r->other, hex, &size, digest)) {
        conflict_report(d, &r->a, r->other, hex, size, digest);
        dir_request_fail(d, r, FERRY_EEXIST);
    } else if (!published(rep)) {
        dir_command_failed(d, "claim", dir_reply_why(rep));
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else {
        d->counters.published++;
    }
    dir_request_settle(d, r);
}

static int send_claim(struct directory *d, const struct pubop *op)
{
    struct publish_args p;
    const char *args[] = {p.key, p.held, d->self.id, d->inc_text, p.size, p.digest, p.hex};

    publish_args(d, &op->id, op->size, op->digest, &p);
    return evalsha(d, SCRIPT_PUBLISH, on_claimed, op->r, 2, args, 7);
}

void dir_claim_start(struct directory *d, struct request *r, uint64_t size,
                     const uint8_t digest[DIGEST_LEN])
{
    struct pubop op = {.id = r->id, .kind = OP_CLAIM, .size = size, .r = r};

    memcpy(op.digest, digest, DIGEST_LEN);

    request_queue(d, r, &op);
}

/* The reply to a delete: how many holders the id had. */
static void on_deleted(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    const redisReply *rep = reply;
    struct request *r = priv;

    if (!rep) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else if (rep->type != REDIS_REPLY_INTEGER) {
        dir_command_failed(d, "delete", dir_reply_why(rep));
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else {
        r->a.count = rep->integer > 0 ? (uint64_t)rep->integer : 0;
    }
    dir_request_settle(d, r);
}

static int send_delete(struct directory *d, const struct pubop *op)
{
    char key[OBJ_KEY_MAX], hex[HEX_ID_MAX];
    const char *args[] = {key, EVENTS_KEY, hex, d->self.id, d->inc_text, EVENTS_KEEP};

    dir_holders_key(key, &op->id);
    ferry_id_format(&op->id, hex);
    return evalsha(d, SCRIPT_DELETE, on_deleted, op->r, 2, args, 6);
}

void dir_delete_start(struct directory *d, struct request *r)
{
    struct pubop op = {.id = r->id, .kind = OP_DELETE, .r = r};

    request_queue(d, r, &op);
}

/* One batch of the cleanup of this node's index: fields of incarnations other than keep ("":
 * every one) go. fn gets {ids taken, fields removed}. */
int dir_cleanup_send(struct directory *d, const char *keep, redisCallbackFn *fn)
{
    char held[HELD_KEY_MAX];
    const char *args[] = {held, d->self.id, keep, CLEANUP_BATCH};

    dir_held_key(held, d->self.id);
    return evalsha(d, SCRIPT_CLEANUP, fn, d, 1, args, 4);
}
