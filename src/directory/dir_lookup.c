/*
 * dir_lookup.c - the directory's lookups (the holders and content of an id) and node
 * listings: the Redis commands they send and the replies they read.
 */
#include "directory/directory_int.h"

/* Holders considered per lookup, whole and partial together: a fetch needs a few, and an entry
 * written by someone else must not make one lookup ask for the entries of thousands of nodes.
 * Whole holders come first, partial ones take the places left. */
#define LOOKUP_HOLDERS_MAX 64

/* Holders whose node entries a lookup brings with the record (the lookup script): a first read
 * from a node never met costs one round trip to Redis, not two, and the reply stays small. The
 * others come from the cache, or are asked for after. */
#define LOOKUP_ENTRIES 4

static void answer_add(struct request *r, const struct directory_node *node, uint64_t seq)
{
    if (r->a.n == r->cap) {
        struct directory_node *p = dir_grow(r->nodes, &r->cap, sizeof(*p));
        if (!p) {
            r->a.status = FERRY_ENOMEM;
            return;
        }
        r->nodes = p;
    }
    r->nodes[r->a.n] = *node;
    r->nodes[r->a.n++].seq = seq;
}

/* Notes a holder left out of the answer, and why. */
static void gone_add(struct request *r, const struct holder *h, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void gone_add(struct request *r, const struct holder *h, const char *fmt, ...)
{
    va_list ap;

    if (r->a.ngone == r->gone_cap) {
        struct directory_gone *p = dir_grow(r->gone, &r->gone_cap, sizeof(*p));
        if (!p) {
            r->a.status = FERRY_ENOMEM;
            return;
        }
        r->gone = p;
    }
    snprintf(r->gone[r->a.ngone].id, sizeof(r->gone[0].id), "%s", h->id);
    va_start(ap, fmt);
    /* ap is started (va_start); clang 14 misreads that on x86-64: LLVM issue 40656. */
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
    vsnprintf(r->gone[r->a.ngone].why, sizeof(r->gone[0].why), fmt, ap);
    va_end(ap);
    r->a.ngone++;
}

/* Whether sig (hex) is node's signature under our secret; any entry passes without one. */
static int entry_signed(const struct directory *d, const struct directory_node *node,
                        const char *sig)
{
    char expect[DIR_SIG_HEX];

    if (!d->secret_len)
        return 1;
    return dir_node_sign(d, node, expect) == 0 && dir_sig_matches(expect, sig);
}

/* The node's entry (copied out of a reply to HGETALL) when it has an address and, with a
 * secret, our signature; DIR_ENTRY_MISSING when it is missing (the node is dead or left) or
 * unusable. Fields that are not strings, too long, hold a NUL or name no transport, and
 * transports beyond what a node entry holds, are left out (and so fail the signature). */
enum dir_entry dir_parse_entry(const struct directory *d, const redisReply *r,
                               struct directory_node *node)
{
    char field[sizeof(XPORT_FIELD) + DIRECTORY_XPORT_NAME_MAX], addr[DIRECTORY_XPORT_ADDR_MAX + 1];
    char sig[DIR_SIG_HEX] = "";
    size_t pre = strlen(XPORT_FIELD);

    if (r->type != REDIS_REPLY_ARRAY)
        return DIR_ENTRY_MISSING;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *value = r->element[i + 1];
        if (!dir_string_copy(field, sizeof(field), r->element[i]))
            continue;
        if (strcmp(field, "addr") == 0)
            (void)dir_string_copy(node->addr, sizeof(node->addr), value);
        else if (strcmp(field, "inc") == 0)
            (void)dir_reply_u64(value, 10, &node->inc);
        else if (strcmp(field, "sig") == 0)
            (void)dir_string_copy(sig, sizeof(sig), value);
        else if (strncmp(field, XPORT_FIELD, pre) == 0 && field[pre] &&
                 dir_string_copy(addr, sizeof(addr), value) && addr[0])
            (void)directory_node_set(node, field + pre, addr);
    }
    if (!node->addr[0])
        return DIR_ENTRY_MISSING;
    return entry_signed(d, node, sig) ? DIR_ENTRY_OK : DIR_ENTRY_UNSIGNED;
}

/* An entry that fails our signature: written by someone without the secret (or a node with
 * another one). */
void dir_entry_refused(struct directory *d, const char *id)
{
    dir_distrust(d, DISTRUST_ENTRY, &d->counters.unsigned_entries,
                 "the entry of node %s is not signed with our cluster secret: ignored "
                 "(planted by a writer of the directory, or a node with another secret)",
                 id);
}

/* Holder (or node) h's entry, rep (an answer to HGETALL ferry:node:<id>), into r's answer:
 * live when it runs the incarnation the holder entry names (any, for a listing). */
static void take_entry(struct directory *d, struct request *r, const struct holder *h,
                       const redisReply *rep)
{
    struct directory_node node = {0};
    enum dir_entry kind;
    char when[32], key[NODE_KEY_MAX], what[NODE_KEY_MAX + 32];

    memcpy(node.id, h->id, sizeof(node.id));
    if (dir_wrongtype(rep)) { /* another node's key: left to it, the node taken as gone */
        dir_entry_key(key, h->id);
        snprintf(what, sizeof(what), "%s (not a hash): left alone", key);
        dir_bad_key(d, what);
        if (r->kind == REQ_LOOKUP)
            gone_add(r, h, "its directory entry is not a hash");
    } else if (rep->type == REDIS_REPLY_ERROR) {
        dir_command_failed(d, "HGETALL", rep->str);
    } else if ((kind = dir_parse_entry(d, rep, &node)) != DIR_ENTRY_OK) {
        if (kind == DIR_ENTRY_UNSIGNED)
            dir_entry_refused(d, h->id);
        if (r->kind == REQ_LOOKUP)
            gone_add(r, h,
                     kind == DIR_ENTRY_UNSIGNED
                         ? "its directory entry is not signed with our secret"
                         : "gone (no heartbeat: dead, or left)");
    } else {
        dir_node_remember(d, &node);
        if (r->kind == REQ_NODES || node.inc == h->inc) {
            answer_add(r, &node, h->seq);
        } else {
            directory_inc_time(h->inc, when, sizeof(when));
            gone_add(r, h, "gone (its run of %s ended)", when);
        }
    }
}

/* A reply to HGETALL ferry:node:<id>, for the oldest holder (or node) r asked about. */
static void on_node_entry(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    struct request *r = priv;
    const struct holder *h = &r->asked[r->asked_head++];

    if (!reply)
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    else
        take_entry(d, r, h, reply);
    dir_request_settle(d, r);
}

/* Asks for the entry of holder (or node) h on r's behalf. */
static void ask_node(struct directory *d, struct request *r, const struct holder *h)
{
    char key[NODE_KEY_MAX];
    const char *argv[] = {"HGETALL", key};

    if (r->asked_len == r->asked_cap) {
        struct holder *p = dir_grow(r->asked, &r->asked_cap, sizeof(*p));
        if (!p) {
            dir_request_fail(d, r, FERRY_ENOMEM);
            return;
        }
        r->asked = p;
    }
    dir_entry_key(key, h->id);
    if (dir_send_command(d, on_node_entry, r, 2, argv) < 0) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
        return;
    }
    r->asked[r->asked_len++] = *h;
    r->awaiting++;
}

/* A partial holder's value, "<inc>:<seq>" (seq at least 1): 1 when it has that shape. */
static int parse_partial(const redisReply *value, struct holder *h)
{
    char text[2 * U64_TEXT + 2], *colon, *end;

    if (!dir_string_copy(text, sizeof(text), value) || !(colon = strchr(text, ':')))
        return 0;
    *colon = '\0';
    errno = 0;
    h->inc = strtoull(text, &end, 10);
    if (errno || end == text || *end)
        return 0;
    h->seq = strtoull(colon + 1, &end, 10);
    return !errno && end != colon + 1 && !*end && h->seq > 0;
}

/* A holder field of an object's entry, whole or (for a lookup of partial holders) partial as
 * whole says: 1 with it in *h, else 0 (another kind, this node's own, or malformed). */
static int parse_holder(const struct directory *d, const struct request *r, const redisReply *field,
                        const redisReply *value, int whole, struct holder *h)
{
    char name[sizeof(HOLDER_FIELD) + DIRECTORY_NODE_ID_MAX];
    size_t pre = strlen(HOLDER_FIELD);

    if (!dir_string_copy(name, sizeof(name), field) || strlen(name) <= pre ||
        strncmp(name, whole ? HOLDER_FIELD : PARTIAL_FIELD, pre) != 0 ||
        strcmp(name + pre, d->self.id) == 0)
        return 0;
    if (whole ? !dir_reply_u64(value, 10, &h->inc) : !r->partial || !parse_partial(value, h))
        return 0;
    snprintf(h->id, sizeof(h->id), "%s", name + pre);
    return 1;
}

/* The node entry the lookup script brought for node id, or NULL (entries: {id, entry...}). */
static const redisReply *brought_entry(const redisReply *entries, const char *id)
{
    char name[DIRECTORY_NODE_ID_MAX + 1];

    for (size_t i = 0; i + 1 < entries->elements; i += 2)
        if (dir_string_copy(name, sizeof(name), entries->element[i]) && strcmp(name, id) == 0)
            return entries->element[i + 1];
    return NULL;
}

/* A holder: taken from the entry the lookup brought, else answered from the cache when the
 * node's entry is trusted there for the same incarnation (and the lookup is not fresh), else
 * asked for. */
static void consider_holder(struct directory *d, struct request *r, const struct holder *h,
                            const redisReply *entries)
{
    const redisReply *brought = brought_entry(entries, h->id);
    const struct directory_node *known = r->fresh ? NULL : dir_node_cached(d, h->id);

    if (brought)
        take_entry(d, r, h, brought);
    else if (known && known->inc == h->inc)
        answer_add(r, known, h->seq);
    else
        ask_node(d, r, h);
}

/* An object's record as stored: the texts its signature covers, and the signature. */
struct record {
    char size[U64_TEXT], digest[DIGEST_TEXT], sig[DIR_SIG_HEX];
};

/* Whether the holders of a record are taken: with a secret, only when it has a content and our
 * signature over it. */
static int record_believed(const struct directory *d, const struct request *r,
                           const redisReply *rep, const struct record *rec)
{
    char hex[HEX_ID_MAX], expect[DIR_SIG_HEX];

    if (!d->secret_len || rep->elements == 0) /* open cluster, or no record */
        return 1;
    if (!r->a.has_content)
        return 0;
    ferry_id_format(&r->id, hex);
    return dir_record_sign(d, hex, rec->size, rec->digest, expect) == 0 &&
           dir_sig_matches(expect, rec->sig);
}

/* A record not signed with our secret: no content, and its holders are all left out, each with
 * why (so that a fetch says it), none asked for. */
static void record_refused(struct directory *d, struct request *r, const redisReply *rep)
{
    char hex[HEX_ID_MAX], name[sizeof(HOLDER_FIELD) + DIRECTORY_NODE_ID_MAX];
    size_t pre = strlen(HOLDER_FIELD);
    struct holder h = {.inc = 0};

    ferry_id_format(&r->id, hex);
    dir_distrust(d, DISTRUST_RECORD, &d->counters.unsigned_records,
                 "the record of id %s (its size and digest) is not signed with our cluster "
                 "secret: not believed, nothing is fetched by it",
                 hex);
    r->a.has_content = 0;
    for (size_t i = 0; i + 1 < rep->elements && r->a.ngone < LOOKUP_HOLDERS_MAX; i += 2) {
        if (dir_string_copy(name, sizeof(name), rep->element[i]) &&
            strncmp(name, HOLDER_FIELD, pre) == 0 && name[pre]) {
            snprintf(h.id, sizeof(h.id), "%s", name + pre);
            gone_add(r, &h, "listed by a record of the id not signed with our secret");
        }
    }
}

/* The holders of a record's fields, answered from the cache or asked for, at most
 * LOOKUP_HOLDERS_MAX: whole holders first, then (with r->partial) partial ones in the places
 * left; of each, the nodes this node has seen first (their entries live and signed with our
 * secret when there is one, now or earlier: dir_node_seen), so that fields a writer of the
 * directory planted for nodes nobody runs, whole or partial, cannot crowd the real holders out
 * (a node that never saw the real holder's entry, just started, can still be crowded by 64
 * planted whole holders). Partial fields left out are counted (partial_holders_skipped). */
static void consider_holders(struct directory *d, struct request *r, const redisReply *rep,
                             const redisReply *entries)
{
    size_t taken = 0;

    for (int pass = 0; pass < 4; pass++) {
        int whole = pass < 2, seen = pass % 2 == 0;
        for (size_t i = 0; i + 1 < rep->elements && r->a.status == 0; i += 2) {
            struct holder h = {.seq = 0};
            if (!parse_holder(d, r, rep->element[i], rep->element[i + 1], whole, &h) ||
                dir_node_seen(d, h.id) != seen)
                continue;
            if (taken == LOOKUP_HOLDERS_MAX) {
                d->counters.partial_holders_skipped += !whole;
                continue;
            }
            taken++;
            consider_holder(d, r, &h, entries);
        }
    }
}

/* The content and the holders of an object's record (rec: as HGETALL answers it), with the
 * node entries the lookup brought. */
static void take_record(struct directory *d, struct request *r, const redisReply *rep,
                        const redisReply *entries)
{
    struct record rec = {.sig = ""};
    int sized = 0, digested = 0;

    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        if (f->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(f->str, "size") == 0)
            sized =
                dir_reply_u64(v, 10, &r->a.size) && dir_string_copy(rec.size, sizeof(rec.size), v);
        else if (strcmp(f->str, "digest") == 0)
            digested = dir_reply_digest(v, r->a.digest) &&
                       dir_string_copy(rec.digest, sizeof(rec.digest), v);
        else if (strcmp(f->str, "sig") == 0)
            (void)dir_string_copy(rec.sig, sizeof(rec.sig), v);
        else if (strcmp(f->str, "gen") == 0 &&
                 (!dir_string_copy(r->a.gen, sizeof(r->a.gen), v) || !dir_gen_valid(r->a.gen)))
            r->a.gen[0] = '\0';
    }
    r->a.has_content = sized && digested;
    if (record_believed(d, r, rep, &rec))
        consider_holders(d, r, rep, entries);
    else
        record_refused(d, r, rep);
}

/* The reply to the lookup script: {the record, the entries of its first holders}. A key of the
 * wrong type in the record's place was replaced by the script (and reported as bad). */
static void on_object(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    struct request *r = priv;
    redisReply **res;
    size_t n;

    if (!reply) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else if (!dir_script_reply(d, reply, &res, &n) || n != 2 ||
               res[0]->type != REDIS_REPLY_ARRAY || res[1]->type != REDIS_REPLY_ARRAY) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
        if (dir_reply_error(reply)) /* NOSCRIPT (a SCRIPT FLUSH): the next connection loads it */
            dir_check_reply(d, reply, "the lookup script");
        else
            dir_command_failed(d, "the lookup script", dir_reply_why(reply));
    } else {
        take_record(d, r, res[0], res[1]);
    }
    dir_request_settle(d, r);
}

void dir_lookup_start(struct directory *d, struct request *r)
{
    dir_pending_add(d, r);
    r->awaiting = 1;
    if (dir_lookup_send(d, &r->id, LOOKUP_ENTRIES, on_object, r) < 0) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else {
        r->awaiting++;
        d->counters.lookups++;
    }
    dir_request_settle(d, r);
}

static void on_scan(redisAsyncContext *ac, void *reply, void *priv);

static void send_scan(struct directory *d, struct request *r, const char *cursor)
{
    const char *argv[] = {"SCAN", cursor, "MATCH", NODE_PREFIX "*", "COUNT", SCAN_COUNT};

    if (dir_send_command(d, on_scan, r, 6, argv) < 0) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
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
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else if (!scan_reply_valid(rep)) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
        dir_command_failed(d, "SCAN", dir_reply_why(rep));
    } else {
        const redisReply *keys = rep->element[1];
        char key[NODE_KEY_MAX];
        size_t pre = strlen(NODE_PREFIX);
        for (size_t i = 0;
             i < keys->elements && r->a.status == 0 && r->asked_len < LISTING_NODES_MAX; i++) {
            struct holder h = {.inc = 0};
            if (dir_string_copy(key, sizeof(key), keys->element[i]) &&
                strncmp(key, NODE_PREFIX, pre) == 0 && key[pre]) {
                snprintf(h.id, sizeof(h.id), "%s", key + pre);
                ask_node(d, r, &h);
            }
        }
        if (r->a.status == 0 && strcmp(rep->element[0]->str, "0") != 0) {
            if (++r->rounds < LISTING_ROUNDS_MAX && r->asked_len < LISTING_NODES_MAX)
                send_scan(d, r, rep->element[0]->str);
            else
                dir_command_failed(d, "SCAN", "listing cut short: too many nodes or rounds");
        }
    }
    dir_request_settle(d, r);
}

void dir_nodes_start(struct directory *d, struct request *r)
{
    dir_pending_add(d, r);
    r->awaiting = 1;
    send_scan(d, r, "0");
    dir_request_settle(d, r);
}
