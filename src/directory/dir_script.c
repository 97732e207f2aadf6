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

#include "common/clock.h"

#include <openssl/evp.h>
#include <pthread.h>

/* What every script starts with. bad lists the keys of the wrong type it met (a string where
 * a hash belongs...), each "key (a TYPE)": fix replaces such a key of ours (DEL: the script
 * then writes it anew; ": replaced" is added), is only tells whether a key (another node's)
 * has the type. bare: an object's record has no holder field left (size, digest and, when
 * signed, sig). */
#define LUA_PRELUDE                                                                                \
    "local bad = {}\n"                                                                             \
    "local function is(k, t)\n"                                                                    \
    "  local have = redis.call('TYPE', k).ok\n"                                                    \
    "  if have == t or have == 'none' then return have == t end\n"                                 \
    "  bad[#bad + 1] = k .. ' (a ' .. have .. ')'\n"                                               \
    "  return false\n"                                                                             \
    "end\n"                                                                                        \
    "local function fix(k, t)\n"                                                                   \
    "  if is(k, t) or redis.call('EXISTS', k) == 0 then return end\n"                              \
    "  redis.call('DEL', k)\n"                                                                     \
    "  bad[#bad] = bad[#bad] .. ': replaced'\n"                                                    \
    "end\n"                                                                                        \
    "local function bare(k)\n"                                                                     \
    "  for _, f in ipairs(redis.call('HKEYS', k)) do\n"                                            \
    "    if string.match(f, '^[hp]:') then return false end\n"                                     \
    "  end\n"                                                                                      \
    "  return true\n"                                                                              \
    "end\n"

/* One object's publication, publish(obj, node, inc, size, digest, hex, sig ("" without a
 * secret), gen (this publication's, for a record it makes), then, for a replacement, the size,
 * digest and sig of the record to replace): its answer, for the caller to add the id to the
 * node's index (held) when it was published. A record whose fields do not have the shape
 * publications give them (size: up to 20 digits, digest and sig: up to 64 hex digits; size and
 * digest present) is replaced first. Records the content at the first publication, with its
 * signature and gen (the put); refuses other content while a live holder (another node, running
 * the incarnation its field names) has the recorded one: {1, hex, that node, its size and
 * digest, ours, its sig}, for the node to check that signature. When none is live any more, the
 * entry starts again with ours (another put). A replacement happens only if the record is still
 * the one named (else {3, hex}), and keeps its put; it, and our signature written over another
 * for the same content, answer {2, hex, gen}; a plain publication {0, hex, gen}: gen is the put
 * the record is (a record without a well-formed one takes ours). */
#define LUA_PUBLISH                                                                                \
    "local function shaped(v, pat, max) return v and #v <= max and string.match(v, pat) end\n"     \
    "local fields = {size = 1, digest = 2, sig = 3, gen = 4}\n"                                    \
    "local function publish(obj, node, inc, size, digest, hex, sig, gen, rsize, rdigest, rsig)\n"  \
    "  local all = redis.pcall('HGETALL', obj)\n"                                                  \
    "  if all.err then fix(obj, 'hash'); all = {} end\n"                                           \
    "  local cur = {false, false, false, false}\n"                                                 \
    "  for i = 1, #all, 2 do\n"                                                                    \
    "    local j = fields[all[i]]\n"                                                               \
    "    if j then cur[j] = all[i + 1] end\n"                                                      \
    "  end\n"                                                                                      \
    "  if #all > 0 and not (shaped(cur[1], '^%d+$', 20) and shaped(cur[2], '^%x+$', 64) and\n"     \
    "     (not cur[3] or shaped(cur[3], '^%x+$', 64))) then\n"                                     \
    "    bad[#bad + 1] = obj .. ' (a hash of fields of the wrong shape): replaced'\n"              \
    "    redis.call('DEL', obj)\n"                                                                 \
    "    all, cur = {}, {false, false, false, false}\n"                                            \
    "  end\n"                                                                                      \
    "  local code = 0\n"                                                                           \
    "  if rsize then\n"                                                                            \
    "    if cur[1] ~= rsize or cur[2] ~= rdigest or (cur[3] or '') ~= rsig then\n"                 \
    "      return {3, hex}\n"                                                                      \
    "    end\n"                                                                                    \
    "    redis.call('DEL', obj)\n"                                                                 \
    "    code = 2\n"                                                                               \
    "  elseif cur[1] and (cur[1] ~= size or cur[2] ~= digest) then\n"                              \
    "    for i = 1, #all, 2 do\n"                                                                  \
    "      local n = string.match(all[i], '^h:(.+)$')\n"                                           \
    "      local entry = n and 'ferry:node:' .. n\n"                                               \
    "      if n and n ~= node and is(entry, 'hash') and\n"                                         \
    "         redis.call('HGET', entry, 'inc') == all[i + 1] then\n"                               \
    "        return {1, hex, n, cur[1], cur[2], size, digest, cur[3] or ''}\n"                     \
    "      end\n"                                                                                  \
    "    end\n"                                                                                    \
    "    redis.call('DEL', obj)\n"                                                                 \
    "    cur[4] = false\n"                                                                         \
    "  elseif cur[1] and sig ~= '' and cur[3] ~= sig then\n"                                       \
    "    code = 2\n"                                                                               \
    "  end\n"                                                                                      \
    "  local g = cur[4]\n"                                                                         \
    "  if not shaped(g, '^%d+%-%d+$', 47) then g = gen end\n"                                      \
    "  local f = {'size', size, 'digest', digest, 'h:' .. node, inc, 'gen', g}\n"                  \
    "  if sig ~= '' then f[#f + 1] = 'sig'; f[#f + 1] = sig end\n"                                 \
    "  redis.call('HSET', obj, unpack(f))\n"                                                       \
    "  return {code, hex, g}\n"                                                                    \
    "end\n"

/* KEYS: obj, held. ARGV: node, inc, size, digest, hex, sig, gen, and for a replacement the
 * record's size, digest and sig (LUA_PUBLISH): {bad, publish's answer...}. */
static const char publish_lua[] = LUA_PRELUDE LUA_PUBLISH
    "fix(KEYS[2], 'set')\n"
    "local r = publish(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7],\n"
    "                  ARGV[8], ARGV[9], ARGV[10])\n"
    "if r[1] == 0 or r[1] == 2 then redis.call('SADD', KEYS[2], ARGV[5]) end\n"
    "table.insert(r, 1, bad)\n"
    "return r\n";

/* One object's withdrawal, withdraw(obj, held, node, inc, hex): removes the node's field if
 * this incarnation wrote it, the record with its last holder, and the id from the node's
 * index: {4, hex}. */
#define LUA_WITHDRAW                                                                               \
    "local function withdraw(obj, held, node, inc, hex)\n"                                         \
    "  fix(obj, 'hash')\n"                                                                         \
    "  local f = 'h:' .. node\n"                                                                   \
    "  if redis.call('HGET', obj, f) == inc then\n"                                                \
    "    redis.call('HDEL', obj, f)\n"                                                             \
    "    if bare(obj) then redis.call('DEL', obj) end\n"                                           \
    "  end\n"                                                                                      \
    "  redis.call('SREM', held, hex)\n"                                                            \
    "  return {4, hex}\n"                                                                          \
    "end\n"

/* KEYS: held, then the records of n objects. ARGV: node, inc, then for each object five words:
 * a publication's size, digest, hex, sig and gen (LUA_PUBLISH), or a withdrawal's "", "", hex,
 * "", "" (LUA_WITHDRAW): {bad, the answer of each}, in order. The ids published go into held in
 * one command, sent before any withdrawal (which may remove one of them) and at the end. One
 * script for a batch: Redis pays a script's start, and the index's check, once for all. */
static const char batch_lua[] = LUA_PRELUDE LUA_PUBLISH LUA_WITHDRAW
    "fix(KEYS[1], 'set')\n"
    "local out, held = {bad}, {}\n"
    "local function add_held()\n"
    "  if #held > 0 then redis.call('SADD', KEYS[1], unpack(held)); held = {} end\n"
    "end\n"
    "for i = 2, #KEYS do\n"
    "  local a = 3 + (i - 2) * 5\n"
    "  local r\n"
    "  if ARGV[a] == '' then\n"
    "    add_held()\n"
    "    r = withdraw(KEYS[i], KEYS[1], ARGV[1], ARGV[2], ARGV[a + 2])\n"
    "  else\n"
    "    r = publish(KEYS[i], ARGV[1], ARGV[2], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],\n"
    "                ARGV[a + 4])\n"
    "    if r[1] == 0 or r[1] == 2 then held[#held + 1] = ARGV[a + 2] end\n"
    "  end\n"
    "  out[#out + 1] = r\n"
    "end\n"
    "add_held()\n"
    "return out\n";

/* KEYS: held. ARGV: node, keep, count. Takes up to count ids off the node's index and removes
 * the node's fields (holder and partial holder) from each unless incarnation keep wrote them:
 * {ids taken, fields removed}. */
static const char cleanup_lua[] =
    LUA_PRELUDE "fix(KEYS[1], 'set')\n"
                "local ids = redis.call('SPOP', KEYS[1], ARGV[3])\n"
                "local f, pf, removed = 'h:' .. ARGV[1], 'p:' .. ARGV[1], 0\n"
                "for _, hex in ipairs(ids) do\n"
                "  local obj = 'ferry:obj:' .. hex\n"
                "  local v = is(obj, 'hash') and redis.call('HGET', obj, f)\n"
                "  local p = is(obj, 'hash') and redis.call('HGET', obj, pf)\n"
                "  if v and v ~= ARGV[2] then\n"
                "    redis.call('HDEL', obj, f)\n"
                "    removed = removed + 1\n"
                "  end\n"
                "  if p and string.match(p, '^(%d+):') ~= ARGV[2] then\n"
                "    redis.call('HDEL', obj, pf)\n"
                "    removed = removed + 1\n"
                "  end\n"
                "  if (v or p) and bare(obj) then redis.call('DEL', obj) end\n"
                "end\n"
                "return {bad, #ids, removed}\n";

/* KEYS: obj, events. ARGV: hex, node, inc, keep, t, sig ("" without a secret), root, gen ("":
 * none named). Removes the entry and the id from its holders' indexes, and tells every node (an
 * event): {the number of holders it had}. */
static const char delete_lua[] = LUA_PRELUDE
    "fix(KEYS[1], 'hash')\n"
    "fix(KEYS[2], 'stream')\n"
    "local f = redis.call('HGETALL', KEYS[1])\n"
    "local n = 0\n"
    "for i = 1, #f, 2 do\n"
    "  local h = string.match(f[i], '^h:(.+)$')\n"
    "  if h then\n"
    "    if is('ferry:held:' .. h, 'set') then redis.call('SREM', 'ferry:held:' .. h, ARGV[1]) "
    "end\n"
    "    n = n + 1\n"
    "  end\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "local ev = {'type', 'del', 'id', ARGV[1], 'node', ARGV[2], 'inc', ARGV[3], 't', ARGV[5],\n"
    "            'root', ARGV[7]}\n"
    "if ARGV[8] ~= '' then ev[#ev + 1] = 'gen'; ev[#ev + 1] = ARGV[8] end\n"
    "if ARGV[6] ~= '' then ev[#ev + 1] = 'sig'; ev[#ev + 1] = ARGV[6] end\n"
    "redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(ev))\n"
    "return {bad, n}\n";

/* KEYS: obj, held. ARGV: node, inc, hex, size, digest (64 hex). When the record is that
 * content, adds the node as a partial holder, p:<node> = "<inc>:<seq>", seq counting the
 * object's receivers (pseq, from 1; one that is not a count below 2^40, written by someone
 * else, starts again): {seq}; else {0}. */
static const char relay_lua[] = LUA_PRELUDE
    "fix(KEYS[1], 'hash')\n"
    "fix(KEYS[2], 'set')\n"
    "local cur = redis.call('HMGET', KEYS[1], 'size', 'digest', 'pseq')\n"
    "if cur[1] ~= ARGV[4] or cur[2] ~= ARGV[5] then return {bad, 0} end\n"
    "local seq = tonumber(cur[3] and string.match(cur[3], '^%d+$') or '0')\n"
    "if not seq or seq >= 1099511627776 then seq = 0 end\n"
    "local text = string.format('%d', seq + 1)\n"
    "redis.call('HSET', KEYS[1], 'pseq', text, 'p:' .. ARGV[1], ARGV[2] .. ':' .. text)\n"
    "redis.call('SADD', KEYS[2], ARGV[3])\n"
    "return {bad, seq + 1}\n";

/* KEYS: obj. ARGV: node, inc. Removes the node's partial field if this incarnation wrote it,
 * and the record with its last holder: {0}. */
static const char unrelay_lua[] =
    LUA_PRELUDE "fix(KEYS[1], 'hash')\n"
                "local f = 'p:' .. ARGV[1]\n"
                "local v = redis.call('HGET', KEYS[1], f)\n"
                "if v and string.match(v, '^(%d+):') == ARGV[2] then\n"
                "  redis.call('HDEL', KEYS[1], f)\n"
                "  if bare(KEYS[1]) then redis.call('DEL', KEYS[1]) end\n"
                "end\n"
                "return {bad, 0}\n";

/* KEYS: obj. ARGV: this node's id, entries. An object's record and, in the same round trip, the
 * node entries of its first whole holders (up to entries, not this node's): {bad, the record as
 * HGETALL answers it, {node id, its entry as HGETALL answers it (empty: none)...}}. A first
 * read then costs one round trip to Redis, not two. Another node's key that is not a hash is
 * left out, for the caller to ask for and report. */
static const char lookup_lua[] =
    LUA_PRELUDE "fix(KEYS[1], 'hash')\n"
                "local rec = redis.call('HGETALL', KEYS[1])\n"
                "local entries, max = {}, 2 * tonumber(ARGV[2])\n"
                "for i = 1, #rec, 2 do\n"
                "  local n = #entries < max and string.match(rec[i], '^h:(.+)$')\n"
                "  local key = n and n ~= ARGV[1] and 'ferry:node:' .. n\n"
                "  local t = key and redis.call('TYPE', key).ok\n"
                "  if t == 'hash' or t == 'none' then\n"
                "    entries[#entries + 1] = n\n"
                "    entries[#entries + 1] = redis.call('HGETALL', key)\n"
                "  end\n"
                "end\n"
                "return {bad, rec, entries}\n";

/* KEYS: a key of ours. ARGV: its type. Replaces it unless it has that type (or is absent). */
static const char fix_lua[] = LUA_PRELUDE "fix(KEYS[1], ARGV[1])\n"
                                          "return {bad, 0}\n";

static const char *const scripts[N_SCRIPTS] = {
    [SCRIPT_PUBLISH] = publish_lua, [SCRIPT_BATCH] = batch_lua,   [SCRIPT_CLEANUP] = cleanup_lua,
    [SCRIPT_DELETE] = delete_lua,   [SCRIPT_FIX] = fix_lua,       [SCRIPT_RELAY] = relay_lua,
    [SCRIPT_UNRELAY] = unrelay_lua, [SCRIPT_LOOKUP] = lookup_lua,
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

/* EVALSHA of script s with nkeys keys then arguments (args[0..nargs), at most
 * DIR_ARGV_BATCH - 3). */
static int evalsha(struct directory *d, int s, redisCallbackFn *fn, void *priv, int nkeys,
                   const char **args, int nargs)
{
    const char *stack[ARGV_MAX], **argv = stack;
    char keys[12];
    int rc;

    if (nargs < 0 || 3 + nargs > DIR_ARGV_BATCH)
        return err_set(FERRY_EINVAL, "directory: %d script arguments (at most %d)", nargs,
                       DIR_ARGV_BATCH - 3);
    if (3 + nargs > ARGV_MAX && !(argv = malloc((size_t)(3 + nargs) * sizeof(*argv))))
        return err_set(FERRY_ENOMEM, "directory: a script of %d arguments", nargs);
    snprintf(keys, sizeof(keys), "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = shas[s];
    argv[2] = keys;
    memcpy(argv + 3, args, (size_t)nargs * sizeof(*args));
    rc = dir_send_command(d, fn, priv, 3 + nargs, argv);
    if (argv != stack)
        free(argv);
    return rc;
}

int dir_script_reply(struct directory *d, const redisReply *rep, redisReply ***res, size_t *n)
{
    const redisReply *bad;
    char what[OBJ_KEY_MAX + NODE_KEY_MAX + 64];

    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2 ||
        rep->element[0]->type != REDIS_REPLY_ARRAY)
        return 0;
    bad = rep->element[0];
    for (size_t i = 0; i < bad->elements; i++)
        if (dir_string_copy(what, sizeof(what), bad->element[i]))
            dir_bad_key(d, what);
    *res = rep->element + 1;
    *n = rep->elements - 1;
    return 1;
}

/* The reply to a script sent only for its repairs. */
static void on_fixed(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    redisReply **res;
    size_t n;

    if (reply && !dir_script_reply(d, reply, &res, &n))
        dir_check_reply(d, reply, priv);
}

void dir_fix_key(struct directory *d, const char *key, const char *type)
{
    const char *args[] = {key, type};

    if (evalsha(d, SCRIPT_FIX, on_fixed, "fix", 1, args, 2) < 0)
        dir_command_failed(d, "fix", ferry_errmsg());
}

/* An object's record as stored: the texts its signature covers, and the signature. */
struct record_text {
    char size[U64_TEXT], digest[DIGEST_TEXT], sig[DIR_SIG_HEX];
};

/* What the publish script answered (after the bad keys): code 0 published, 1 refused, 2
 * published over a record not signed with our secret, 3 that record had changed before it
 * could be replaced; or a batch's withdrawal, 4; op: the publication (id, and for a refusal our
 * size and digest, which it names); other and rec: the refusal's other node and the record as
 * stored. */
struct published {
    int code;
    struct pubop op;
    node_name other;
    char hex[HEX_ID_MAX];
    struct record_text rec;
    char gen[DIRECTORY_GEN_MAX + 1]; /* codes 0 and 2: the put the record is ("": unknown) */
};

/* publish's answer (r[0..n), after the bad keys) into p, and a refusal's content into a: 0, or
 * -1 when it is none of its answers. */
static int parse_published(redisReply *const *r, size_t n, struct published *p,
                           struct directory_answer *a)
{
    memset(p, 0, sizeof(*p));
    if (n < 2 || r[0]->type != REDIS_REPLY_INTEGER || r[0]->integer < 0 || r[0]->integer > 4 ||
        !dir_string_copy(p->hex, HEX_ID_MAX, r[1]) || ferry_id_parse(p->hex, &p->op.id) != 0)
        return -1;
    p->code = (int)r[0]->integer;
    if (p->code != 1) {
        if (n < 3 || !dir_string_copy(p->gen, sizeof(p->gen), r[2]) || !dir_gen_valid(p->gen))
            p->gen[0] = '\0';
        return 0;
    }
    /* {1, hex, node, size, digest, our size, our digest, sig} */
    if (n != 8 || !dir_string_copy(p->other, sizeof(p->other), r[2]) ||
        !dir_string_copy(p->rec.size, sizeof(p->rec.size), r[3]) ||
        !dir_string_copy(p->rec.digest, sizeof(p->rec.digest), r[4]) ||
        !dir_reply_u64(r[3], 10, &a->size) || !dir_reply_digest(r[4], a->digest) ||
        !dir_reply_u64(r[5], 10, &p->op.size) || !dir_reply_digest(r[6], p->op.digest) ||
        !dir_string_copy(p->rec.sig, sizeof(p->rec.sig), r[7]))
        return -1;
    a->has_content = 1;
    return 0;
}

/* A refused publication: counted, and logged with both nodes. */
static void conflict_report(struct directory *d, const struct directory_answer *a,
                            const struct published *p)
{
    char ours[DIGEST_HEX + 1], theirs[DIGEST_HEX + 1];

    d->counters.id_conflicts++;
    digest_hex(p->op.digest, ours);
    digest_hex(a->digest, theirs);
    log_warn("id %s: sealed here (%s) with other content (%" PRIu64 " bytes, digest %s) than node "
             "%s holds (%" PRIu64 " bytes, digest %s): this copy is not listed (nor published "
             "again while it is here), other nodes fetch %s's",
             p->hex, d->self.id, p->op.size, ours, p->other, a->size, theirs, p->other);
}

/* A publication that replaced a record not signed with our secret: counted and logged. */
static void repaired_report(struct directory *d, const char *hex)
{
    dir_distrust(d, DISTRUST_REPAIR, &d->counters.records_repaired,
                 "the record of id %s was not signed with our cluster secret: replaced by this "
                 "node's",
                 hex);
}

/* The arguments the scripts take after their keys. */
struct publish_args {
    char key[OBJ_KEY_MAX], held[HELD_KEY_MAX], hex[HEX_ID_MAX], size[U64_TEXT];
    char digest[DIGEST_HEX + 1], sig[DIR_SIG_HEX], gen[DIRECTORY_GEN_MAX + 1];
};

static void object_args(const struct directory *d, const ferry_id *id, struct publish_args *p)
{
    dir_holders_key(p->key, id);
    dir_held_key(p->held, d->self.id);
    ferry_id_format(id, p->hex);
}

/* The arguments of op's publication: 0, or FERRY_ESYS when it cannot be signed. */
static int publish_fill(struct directory *d, const struct pubop *op, struct publish_args *p)
{
    object_args(d, &op->id, p);
    dir_gen_propose(d, &op->id, op->digest, p->gen);
    snprintf(p->size, sizeof(p->size), "%" PRIu64, op->size);
    digest_hex(op->digest, p->digest);
    p->sig[0] = '\0';
    if (d->secret_len && dir_record_sign(d, p->hex, p->size, p->digest, p->sig) < 0)
        return FERRY_ESYS;
    return 0;
}

/* Sends op's publication (or claim) with fn and priv; with replace, only in place of that
 * record. FERRY_ESYS, FERRY_EDIRECTORY. */
static int send_publish(struct directory *d, const struct pubop *op, redisCallbackFn *fn,
                        void *priv, const struct record_text *replace)
{
    struct publish_args p;
    const char *args[12] = {p.key,    p.held, d->self.id, d->inc_text, p.size,
                            p.digest, p.hex,  p.sig,      p.gen};
    int nargs = 9;

    if (publish_fill(d, op, &p) < 0)
        return FERRY_ESYS;
    if (replace) {
        args[nargs++] = replace->size;
        args[nargs++] = replace->digest;
        args[nargs++] = replace->sig;
    }
    return evalsha(d, SCRIPT_PUBLISH, fn, priv, 2, args, nargs);
}

/* A refusal: with a secret, a record without our signature is not believed and is replaced
 * (1: the replacement was sent, with fn and priv); 0 when the record is signed (a real
 * conflict), or without a secret. */
static int replace_unsigned(struct directory *d, const struct published *p, redisCallbackFn *fn,
                            void *priv)
{
    char expect[DIR_SIG_HEX];

    if (!d->secret_len || (dir_record_sign(d, p->hex, p->rec.size, p->rec.digest, expect) == 0 &&
                           dir_sig_matches(expect, p->rec.sig)))
        return 0;
    return send_publish(d, &p->op, fn, priv, &p->rec) == 0;
}

static void on_published(redisAsyncContext *ac, void *reply, void *priv);

/* What a queued publication's (or withdrawal's) answer (p, a) does here. */
static void published(struct directory *d, const struct published *p,
                      const struct directory_answer *a)
{
    if (p->code == 4)
        dir_gen_forget(d, &p->op.id); /* of no put any more (a publication sent before named one) */
    else if (p->code == 0 || p->code == 2)
        dir_gen_remember(d, &p->op.id, p->gen); /* the put this node's copy is of */
    if (p->code == 2) {
        repaired_report(d, p->hex);
    } else if (p->code == 1 && !replace_unsigned(d, p, on_published, NULL)) {
        conflict_report(d, a, p);
        dir_conflict_remember(d, &p->op.id, p->op.digest);
    } else if (p->code == 3) {
        log_debug("directory: the record of id %s changed before it could be replaced; the "
                  "next publication looks again",
                  p->hex);
    }
}

/* One answer of publish (r[0..n)) taken here, or reported as not one. */
static void published_answer(struct directory *d, redisReply *const *r, size_t n,
                             const redisReply *whole)
{
    struct directory_answer a = {0};
    struct published p;

    if (parse_published(r, n, &p, &a) < 0)
        dir_check_reply(d, whole, "publish");
    else
        published(d, &p, &a);
}

/* The reply to a replacement of a record, or a batch's script: one answer, or (a batch) an
 * array of them. */
static void on_published(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    redisReply **r;
    size_t n;

    if (!reply)
        return;
    if (!dir_script_reply(d, reply, &r, &n)) {
        dir_check_reply(d, reply, "publish");
    } else if (n && r[0]->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < n; i++)
            published_answer(d, r[i]->element, r[i]->type == REDIS_REPLY_ARRAY ? r[i]->elements : 0,
                             r[i]);
    } else {
        published_answer(d, r, n, reply);
    }
}

/* The reply to a withdrawal. */
static void checked_reply(redisAsyncContext *ac, void *reply, const char *what)
{
    struct directory *d = dir_reply_begin(ac, reply);
    redisReply **r;
    size_t n;

    if (reply && !dir_script_reply(d, reply, &r, &n))
        dir_check_reply(d, reply, what);
}

static void on_unrelayed(redisAsyncContext *ac, void *reply, void *priv)
{
    checked_reply(ac, reply, "unrelay");
}

static int send_delete(struct directory *d, const struct pubop *op);
static void on_claimed(redisAsyncContext *ac, void *reply, void *priv);
static int send_relay(struct directory *d, const struct pubop *op);
static int send_pubop(struct directory *d, const struct pubop *op);

static int batched(const struct pubop *op)
{
    return op->kind == OP_PUBLISH || op->kind == OP_WITHDRAW;
}

/* Sends the publications and withdrawals ops[0..n) (n <= PUBLISH_BATCH) as one script.
 * FERRY_ENOMEM, FERRY_ESYS, FERRY_EDIRECTORY. */
static int send_batch(struct directory *d, const struct pubop *ops, size_t n)
{
    struct publish_args *p = malloc(n * sizeof(*p));
    const char **args = malloc((3 + 6 * n) * sizeof(*args));
    int rc = FERRY_ENOMEM, nargs = 0;

    if (!p || !args)
        goto free_all;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].kind == OP_WITHDRAW)
            object_args(d, &ops[i].id, &p[i]);
        else if ((rc = publish_fill(d, &ops[i], &p[i])) < 0)
            goto free_all;
    }
    args[nargs++] = p[0].held;
    for (size_t i = 0; i < n; i++)
        args[nargs++] = p[i].key;
    args[nargs++] = d->self.id;
    args[nargs++] = d->inc_text;
    for (size_t i = 0; i < n; i++) {
        int pub = ops[i].kind == OP_PUBLISH;
        args[nargs++] = pub ? p[i].size : "";
        args[nargs++] = pub ? p[i].digest : "";
        args[nargs++] = p[i].hex;
        args[nargs++] = pub ? p[i].sig : "";
        args[nargs++] = pub ? p[i].gen : "";
    }
    rc = evalsha(d, SCRIPT_BATCH, on_published, NULL, (int)(1 + n), args, nargs);
free_all:
    free(args);
    free(p);
    return rc;
}

int dir_send_pubops(struct directory *d, const struct pubop *ops, size_t n)
{
    size_t k = 0;
    int rc;

    while (k < n && k < PUBLISH_BATCH && batched(&ops[k]))
        k++;
    if (k == 0)
        return (rc = send_pubop(d, ops)) < 0 ? rc : 1;
    if ((rc = send_batch(d, ops, k)) < 0)
        return rc;
    for (size_t i = 0; i < k; i++) {
        if (ops[i].kind == OP_PUBLISH)
            d->counters.published++;
        else
            d->counters.withdrawn++;
    }
    d->counters.publish_batches++;
    return (int)k;
}

/* Sends one queued request: a claim, a cluster-wide delete, a relay or its end. */
static int send_pubop(struct directory *d, const struct pubop *op)
{
    if (op->kind == OP_CLAIM)
        return send_publish(d, op, on_claimed, op->r, NULL);
    if (op->kind == OP_DELETE)
        return send_delete(d, op);
    return send_relay(d, op);
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

/* The reply to a claim: published (over a record not signed with our secret, which is
 * replaced first), or refused for a live holder's other content. */
static void on_claimed(redisAsyncContext *ac, void *reply, void *priv)
{
    struct directory *d = dir_reply_begin(ac, reply);
    struct request *r = priv;
    struct published p = {.code = 0}; /* read below even when the reply is not the script's */
    redisReply **res;
    size_t n;

    if (!reply) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else if (!dir_script_reply(d, reply, &res, &n) || parse_published(res, n, &p, &r->a) < 0 ||
               p.code >= 3) { /* 4, a withdrawal's, answers no claim */
        dir_command_failed(d, "claim",
                           p.code == 3 ? "the record changed meanwhile" : dir_reply_why(reply));
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else if (p.code == 1 && replace_unsigned(d, &p, on_claimed, r)) {
        return; /* the replacement's reply settles r */
    } else if (p.code == 1) {
        snprintf(r->other, sizeof(r->other), "%s", p.other);
        conflict_report(d, &r->a, &p);
        dir_request_fail(d, r, FERRY_EEXIST);
    } else {
        dir_gen_remember(d, &p.op.id, p.gen);
        if (p.code == 2)
            repaired_report(d, p.hex);
        d->counters.published++;
    }
    dir_request_settle(d, r);
}

void dir_claim_start(struct directory *d, struct request *r, uint64_t size,
                     const uint8_t digest[DIGEST_LEN])
{
    struct pubop op = {.id = r->id, .kind = OP_CLAIM, .size = size, .r = r};

    memcpy(op.digest, digest, DIGEST_LEN);

    request_queue(d, r, &op);
}

/* The reply to a delete: how many holders the id had. */
/* A script's reply of one count (negative: 0) for request r: a.count. */
static void count_reply(redisAsyncContext *ac, void *reply, struct request *r, const char *what)
{
    struct directory *d = dir_reply_begin(ac, reply);
    redisReply **res;
    size_t n;

    if (!reply) {
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else if (!dir_script_reply(d, reply, &res, &n) || n < 1 ||
               res[0]->type != REDIS_REPLY_INTEGER) {
        dir_command_failed(d, what, dir_reply_why(reply));
        dir_request_fail(d, r, FERRY_EDIRECTORY);
    } else {
        r->a.count = res[0]->integer > 0 ? (uint64_t)res[0]->integer : 0;
    }
    dir_request_settle(d, r);
}

static void on_deleted(redisAsyncContext *ac, void *reply, void *priv)
{
    count_reply(ac, reply, priv, "delete");
}

/* The reply to a relay: its seq (0: the record is not that content). */
static void on_relayed(redisAsyncContext *ac, void *reply, void *priv)
{
    count_reply(ac, reply, priv, "relay");
}

/* The event of a delete by this run: its time is the wall clock's, or just after this run's
 * last event (each is later than the one before: readers take an event only once); root names
 * the content deleted and gen the put ("": none named; readers drop only a copy of that content,
 * and of that put). */
static int delete_event(struct directory *d, const ferry_id *id, const uint8_t root[DIGEST_LEN],
                        const char *gen, struct dir_event *e)
{
    uint64_t now = clock_real_ns() / 1000000;

    d->event_t = now > d->event_t ? now : d->event_t + 1;
    snprintf(e->type, sizeof(e->type), "del");
    ferry_id_format(id, e->id);
    snprintf(e->node, sizeof(e->node), "%s", d->self.id);
    snprintf(e->inc, sizeof(e->inc), "%s", d->inc_text);
    snprintf(e->t, sizeof(e->t), "%" PRIu64, d->event_t);
    digest_hex(root, e->root);
    snprintf(e->gen, sizeof(e->gen), "%s", gen);
    e->sig[0] = '\0';
    return d->secret_len ? dir_event_sign(d, e, e->sig) : 0;
}

static int send_delete(struct directory *d, const struct pubop *op)
{
    char key[OBJ_KEY_MAX];
    struct dir_event e = {.type = ""};
    const char *args[] = {key,         EVENTS_KEY, e.id,  e.node, e.inc,
                          EVENTS_KEEP, e.t,        e.sig, e.root, e.gen};

    if (delete_event(d, &op->id, op->digest, op->gen, &e) < 0)
        return FERRY_ESYS;
    dir_holders_key(key, &op->id);
    return evalsha(d, SCRIPT_DELETE, on_deleted, op->r, 2, args, 10);
}

void dir_delete_start(struct directory *d, struct request *r, const uint8_t root[DIGEST_LEN],
                      const char *gen)
{
    struct pubop op = {.id = r->id, .kind = OP_DELETE, .r = r};

    memcpy(op.digest, root, DIGEST_LEN);
    snprintf(op.gen, sizeof(op.gen), "%s", dir_gen_valid(gen) ? gen : "");

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

int dir_cleanup_reply(struct directory *d, const redisReply *rep, uint64_t *taken,
                      uint64_t *removed)
{
    redisReply **r;
    size_t n;

    if (!dir_script_reply(d, rep, &r, &n) || n != 2 || r[0]->type != REDIS_REPLY_INTEGER ||
        r[1]->type != REDIS_REPLY_INTEGER || r[0]->integer < 0 || r[1]->integer < 0)
        return 0;
    *taken = (uint64_t)r[0]->integer;
    *removed = (uint64_t)r[1]->integer;
    return 1;
}

static int send_relay(struct directory *d, const struct pubop *op)
{
    struct publish_args p;
    const char *args[] = {p.key, p.held, d->self.id, d->inc_text, p.hex, p.size, p.digest};

    object_args(d, &op->id, &p);
    if (op->kind == OP_UNRELAY)
        return evalsha(d, SCRIPT_UNRELAY, on_unrelayed, NULL, 1,
                       (const char *[]){p.key, d->self.id, d->inc_text}, 3);
    snprintf(p.size, sizeof(p.size), "%" PRIu64, op->size);
    digest_hex(op->digest, p.digest);
    return evalsha(d, SCRIPT_RELAY, on_relayed, op->r, 2, args, 7);
}

int dir_lookup_send(struct directory *d, const ferry_id *id, unsigned entries, redisCallbackFn *fn,
                    void *priv)
{
    char key[OBJ_KEY_MAX], count[12];
    const char *args[] = {key, d->self.id, count};

    dir_holders_key(key, id);
    snprintf(count, sizeof(count), "%u", entries);
    return evalsha(d, SCRIPT_LOOKUP, fn, priv, 1, args, 3);
}

void dir_relay_start(struct directory *d, struct request *r, uint64_t size,
                     const uint8_t digest[DIGEST_LEN])
{
    struct pubop op = {.id = r->id, .kind = OP_RELAY, .size = size, .r = r};

    memcpy(op.digest, digest, DIGEST_LEN);
    request_queue(d, r, &op);
}
