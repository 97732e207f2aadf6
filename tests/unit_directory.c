/*
 * Unit tests of directory/directory.c against a real redis-server (tests/redis_fixture.c),
 * on a real loop: registration and heartbeat, node listing, publication and lookup with the
 * cache, dead nodes, cancellation, and Redis frozen, killed and restarted. Every wait is
 * bounded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "directory/directory.h"
#include "loop_driver.h"
#include "redis_fixture.h"

#define HEARTBEAT_MS 100
#define TTL_MS 500
#define TIMEOUT_MS 300
#define WAIT_MS 5000
#define MAX_ANSWER 8

static struct redis_fixture redis;

static int is_connected(void *d)
{
    return directory_connected(d);
}

static int is_disconnected(void *d)
{
    return !directory_connected(d);
}

/* ---- answers ---- */

struct answer {
    int calls;
    int status;
    size_t n, ngone;
    struct directory_node nodes[MAX_ANSWER];
    struct directory_gone gone[MAX_ANSWER];
    int has_content;
    uint64_t size, digest, count;
    char other[DIRECTORY_NODE_ID_MAX + 1];
    char gen[DIRECTORY_GEN_MAX + 1];
};

/* A digest whose first 8 bytes are v (little-endian), the rest zero: DG(v) in a call. */
static const uint8_t *digest_of(uint8_t d[DIGEST_LEN], uint64_t v)
{
    memset(d, 0, DIGEST_LEN);
    for (int i = 0; i < 8; i++)
        d[i] = (uint8_t)(v >> (8 * i));
    return d;
}
#define DG(v) digest_of((uint8_t[DIGEST_LEN]){0}, (v))

/* The first 8 bytes of a digest, little-endian (what DG put there). */
static uint64_t digest_u64(const uint8_t d[DIGEST_LEN])
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | d[i];
    return v;
}

static void on_answer(void *arg, const struct directory_answer *d)
{
    struct answer *a = arg;

    a->calls++;
    a->status = d->status;
    a->n = d->n;
    if (d->n) /* nodes may be NULL then */
        memcpy(a->nodes, d->nodes, (d->n < MAX_ANSWER ? d->n : MAX_ANSWER) * sizeof(*d->nodes));
    a->ngone = d->ngone;
    if (d->ngone)
        memcpy(a->gone, d->gone,
               (d->ngone < MAX_ANSWER ? d->ngone : MAX_ANSWER) * sizeof(*d->gone));
    a->has_content = d->has_content;
    a->size = d->size;
    a->digest = digest_u64(d->digest);
    snprintf(a->other, sizeof(a->other), "%s", d->other ? d->other : "");
    snprintf(a->gen, sizeof(a->gen), "%s", d->gen);
    a->count = d->count;
}

static int answered(void *arg)
{
    return ((struct answer *)arg)->calls > 0;
}

/* A lookup, waited for; checks that the callback came later than the call, and once. */
static struct answer lookup(struct loop *l, struct directory *d, const ferry_id *id, int fresh)
{
    struct answer a = {0};

    assert_int_equal(directory_lookup(d, id, fresh, on_answer, &a), 0);
    assert_int_equal(a.calls, 0);
    assert_true(run_until(l, answered, &a, WAIT_MS));
    run_for(l, 20);
    assert_int_equal(a.calls, 1);
    return a;
}

static struct answer nodes(struct loop *l, struct directory *d)
{
    struct answer a = {0};

    assert_int_equal(directory_nodes(d, on_answer, &a), 0);
    assert_int_equal(a.calls, 0);
    assert_true(run_until(l, answered, &a, WAIT_MS));
    assert_int_equal(a.calls, 1);
    return a;
}

/* ---- Redis, seen synchronously ---- */

/* An integer command's answer in database db; -1 when it failed. */
static long long query_int(int db, const char *fmt, ...)
{
    redisContext *c = redis_fixture_connect(&redis, db);
    redisReply *r = NULL;
    long long v = -1;
    va_list ap;

    if (c) {
        va_start(ap, fmt);
        r = redisvCommand(c, fmt, ap);
        va_end(ap);
    }
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
    return v;
}

/* A string command's answer in database 0 into out ("" when it failed or was not a string). */
static void query_str(char *out, size_t cap, const char *fmt, ...)
{
    redisContext *c = redis_fixture_connect(&redis, 0);
    redisReply *r = NULL;
    va_list ap;

    out[0] = '\0';
    if (c) {
        va_start(ap, fmt);
        r = redisvCommand(c, fmt, ap);
        va_end(ap);
    }
    if (r && r->type == REDIS_REPLY_STRING)
        snprintf(out, cap, "%s", r->str);
    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
}

static void flush_redis(void)
{
    redisContext *c = redis_fixture_connect(&redis, 0);
    assert_non_null(c);
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    redisFree(c);
}

static void obj_key(const ferry_id *id, char key[64])
{
    char hex[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(id, hex);
    snprintf(key, 64, "ferry:obj:%s", hex);
}

/* Waits until HEXISTS ferry:obj:<id> h:<node> (database 0) is want. */
struct membership {
    const ferry_id *id;
    const char *node;
    long long want;
};

static int membership_is(void *arg)
{
    const struct membership *m = arg;
    char key[64];

    obj_key(m->id, key);
    return query_int(0, "HEXISTS %s h:%s", key, m->node) == m->want;
}

static int node_key_gone(void *node_id)
{
    return query_int(0, "EXISTS ferry:node:%s", (const char *)node_id) == 0;
}

/* ---- the environment of a test ---- */

struct republisher {
    struct directory *d;
    ferry_id id; /* published at each call */
    int calls;
    int deletes; /* deletes heard */
    ferry_id deleted;
    uint8_t root[DIGEST_LEN]; /* the content the last delete heard named */
    char by[DIRECTORY_NODE_ID_MAX + 1];
};

static void republish(void *ctx)
{
    struct republisher *r = ctx;

    r->calls++;
    if (r->d)
        directory_publish(r->d, &r->id, 10, DG(0xabc));
}

static void deleted(void *ctx, const ferry_id *id, const uint8_t root[DIGEST_LEN], const char *node)
{
    struct republisher *r = ctx;

    r->deletes++;
    r->deleted = *id;
    memcpy(r->root, root, DIGEST_LEN);
    snprintf(r->by, sizeof(r->by), "%s", node);
}

static struct directory *open_node(struct loop *l, const char *id, const char *url,
                                   struct republisher *rep)
{
    struct directory_config cfg = {
        .url = url, .heartbeat_ms = HEARTBEAT_MS, .ttl_ms = TTL_MS, .timeout_ms = TIMEOUT_MS};
    struct directory_hooks hooks = {.republish = republish, .deleted = deleted, .ctx = rep};
    struct directory *d = NULL;

    snprintf(cfg.self.id, sizeof(cfg.self.id), "%s", id);
    snprintf(cfg.self.addr, sizeof(cfg.self.addr), "10.0.0.%d:7000", id[0]);
    assert_int_equal(directory_node_set(&cfg.self, "tcp", cfg.self.addr), 0);
    assert_int_equal(directory_node_set(&cfg.self, "other", "x@0123"), 0);
    assert_int_equal(directory_open(&d, l, &cfg, rep ? &hooks : NULL), 0);
    assert_non_null(d);
    if (rep)
        rep->d = d;
    assert_true(run_until(l, is_connected, d, WAIT_MS));
    return d;
}

static void url(char *out, size_t cap, const char *host, int db)
{
    snprintf(out, cap, "redis://%s:%d/%d", host, redis.port, db);
}

static int setup_group(void **state)
{
    (void)state;
    return redis_fixture_start(&redis);
}

static int teardown_group(void **state)
{
    (void)state;
    redis_fixture_kill(&redis);
    return 0;
}

static int setup(void **state)
{
    static struct loop l;

    flush_redis();
    assert_int_equal(loop_init(&l), 0);
    *state = &l;
    return 0;
}

static int teardown(void **state)
{
    loop_destroy(*state);
    return 0;
}

static ferry_id make_id(const char *name)
{
    ferry_id id;

    assert_int_equal(ferry_id_parse(name, &id), 0);
    return id;
}

/* ---- tests ---- */

static void test_bad_configuration(void **state)
{
    static const char *const bad[] = {
        NULL,
        "redis:/127.0.0.1:6379",
        "http://127.0.0.1:6379",
        "redis://127.0.0.1",
        "redis://:6379",
        "redis://127.0.0.1:0",
        "redis://127.0.0.1:65536",
        "redis://127.0.0.1:6379x",
        "redis://127.0.0.1:6379/",
        "redis://127.0.0.1:6379/one",
        "redis://no-such-host.invalid:6379",
        "redis-sentinel:///m",
        "redis-sentinel://127.0.0.1:26379",
        "redis-sentinel://127.0.0.1:26379/",
        "redis-sentinel://127.0.0.1:26379,/m",
        "redis-sentinel://,127.0.0.1:26379/m",
        "redis-sentinel://127.0.0.1:x/m",
        "redis-sentinel://127.0.0.1:26379/m/x",
        "redis-sentinel://127.0.0.1:26379/m m",
        "redis-sentinel://1.1.1.1:1,1.1.1.1:2,1.1.1.1:3,1.1.1.1:4,1.1.1.1:5,1.1.1.1:6,1.1.1.1:7,"
        "1.1.1.1:8,1.1.1.1:9/m",
        "redis://user@127.0.0.1:6379",
        "redis://:@127.0.0.1:6379",
        "redis://u:@127.0.0.1:6379",
        "redis://:%zz@127.0.0.1:6379",
        "redis://:a%0@127.0.0.1:6379",
        "redis://:a%00b@127.0.0.1:6379",
        "redis-sentinel://user@127.0.0.1:26379/m",
    };
    struct directory_config cfg = {.self = {.id = "a", .addr = "h:1"}};
    struct directory *d = (void *)&cfg; /* must be reset */
    char good[64];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg.url = bad[i];
        assert_int_equal(directory_open(&d, *state, &cfg, NULL), FERRY_EINVAL);
        assert_null(d);
        assert_true(strlen(ferry_errmsg()) > 0);
    }
    url(good, sizeof(good), "127.0.0.1", 0);
    cfg.url = good;
    cfg.self.id[0] = '\0';
    assert_int_equal(directory_open(&d, *state, &cfg, NULL), FERRY_EINVAL);
    cfg.self.id[0] = 'a';
    cfg.heartbeat_ms = 1000;
    cfg.ttl_ms = 1999; /* a TTL must outlast two heartbeats */
    assert_int_equal(directory_open(&d, *state, &cfg, NULL), FERRY_EINVAL);
    cfg.heartbeat_ms = cfg.ttl_ms = 0;
    cfg.url = "redis-sentinel://127.0.0.1:1,127.0.0.1:2/master-1/3"; /* well formed */
    assert_int_equal(directory_open(&d, *state, &cfg, NULL), 0);
    directory_close(d);
    cfg.url = "redis-sentinel://u%3A:p%40w@127.0.0.1:1/m"; /* so is this */
    assert_int_equal(directory_open(&d, *state, &cfg, NULL), 0);
    assert_null(strstr(directory_where(d), "p@w"));
    directory_close(d);
}

/* Whether d registers within WAIT_MS (else it keeps retrying: the password is refused), with
 * password given apart from the URL (NULL: none). */
static int registers_with(struct loop *l, const char *url_text, const char *password)
{
    struct directory_config cfg = {
        .url = url_text, .password = password, .self = {.id = "a", .addr = "h:1"}};
    struct directory *d;
    int up;

    assert_int_equal(directory_open(&d, l, &cfg, NULL), 0);
    up = run_until(l, is_connected, d, 1500);
    directory_close(d);
    return up;
}

static int registers(struct loop *l, const char *url_text)
{
    return registers_with(l, url_text, NULL);
}

/* A Redis with a password for its default user and an ACL user: the URL's credentials (the
 * password percent-encoded) are sent with AUTH first; wrong ones never register. */
static void test_auth_from_the_url(void **state)
{
    redisContext *c = redis_fixture_connect(&redis, 0);
    char u[160];

    assert_non_null(c);
    freeReplyObject(redisCommand(c, "CONFIG SET requirepass %s", "p@ss:/w"));
    freeReplyObject(redisCommand(c, "ACL SETUSER ferry on >s3cret ~* &* +@all"));
    snprintf(u, sizeof(u), "redis://127.0.0.1:%d", redis.port);
    assert_false(registers(*state, u));
    snprintf(u, sizeof(u), "redis://:p%%40ss%%3A%%2Fw@127.0.0.1:%d", redis.port);
    assert_true(registers(*state, u));
    snprintf(u, sizeof(u), "redis://:wrong@127.0.0.1:%d", redis.port);
    assert_false(registers(*state, u));
    snprintf(u, sizeof(u), "redis://ferry:s3cret@127.0.0.1:%d/0", redis.port);
    assert_true(registers(*state, u));
    snprintf(u, sizeof(u), "redis://ferry:p%%40ss%%3A%%2Fw@127.0.0.1:%d/0", redis.port);
    assert_false(registers(*state, u)); /* the default user's password is not ferry's */
    /* Given apart (ferryd's password file or environment): the URL names the user alone. */
    snprintf(u, sizeof(u), "redis://ferry@127.0.0.1:%d", redis.port);
    assert_true(registers_with(*state, u, "s3cret"));
    assert_int_equal(directory_check_url(u, NULL), FERRY_EINVAL); /* a user needs one */
    snprintf(u, sizeof(u), "redis://127.0.0.1:%d", redis.port);
    assert_true(registers_with(*state, u, "p@ss:/w")); /* not percent-encoded: not a URL */
    assert_false(registers_with(*state, u, "wrong"));
    snprintf(u, sizeof(u), "redis://:p%%40ss%%3A%%2Fw@127.0.0.1:%d", redis.port);
    assert_int_equal(directory_check_url(u, "p@ss:/w"), FERRY_EINVAL); /* two: which? */
    freeReplyObject(redisCommand(c, "ACL DELUSER ferry"));
    freeReplyObject(redisCommand(c, "CONFIG SET requirepass %s", ""));
    redisFree(c);
}

/* A database Redis does not have (it has 16): the connection is given up from within a reply
 * and retried, and requests meanwhile fail. */
static void test_select_refused(void **state)
{
    struct loop *l = *state;
    struct directory_config cfg = {.self = {.id = "a", .addr = "h:1"}};
    ferry_id x = make_id("x");
    struct directory *d;
    struct answer ans = {0};
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 99);
    cfg.url = u;
    assert_int_equal(directory_open(&d, l, &cfg, NULL), 0);
    assert_int_equal(directory_lookup(d, &x, 0, on_answer, &ans), 0);
    assert_true(run_until(l, answered, &ans, WAIT_MS));
    assert_int_equal(ans.status, FERRY_EDIRECTORY);
    run_for(l, 400);
    assert_int_equal(directory_connected(d), 0);
    assert_true(directory_counters(d)->errors >= 2);
    assert_int_equal(query_int(0, "EXISTS ferry:node:a"), 0);
    directory_close(d);
}

/* A host name is resolved, the URL's database is used, and the heartbeat outlives the TTL. */
static void test_registration_and_heartbeat(void **state)
{
    struct loop *l = *state;
    struct republisher rep = {0};
    struct directory *a;
    redisContext *c;
    redisReply *r;
    char u[64];

    url(u, sizeof(u), "localhost", 3);
    a = open_node(l, "a", u, &rep);
    run_for(l, 20);
    assert_int_equal(rep.calls, 1);
    c = redis_fixture_connect(&redis, 3);
    assert_non_null(c);
    r = redisCommand(c, "HGET ferry:node:a addr");
    assert_non_null(r);
    assert_string_equal(r->str, "10.0.0.97:7000");
    freeReplyObject(r);
    r = redisCommand(c, "HGET ferry:node:a t:tcp"); /* a field per transport: t:<name> */
    assert_string_equal(r->str, "10.0.0.97:7000");
    freeReplyObject(r);
    r = redisCommand(c, "HGET ferry:node:a t:other");
    assert_string_equal(r->str, "x@0123");
    freeReplyObject(r);
    r = redisCommand(c, "HGET ferry:node:a ver"); /* the release, for operators */
    assert_string_equal(r->str, ferry_version());
    freeReplyObject(r);
    redisFree(c);
    assert_int_equal(query_int(0, "EXISTS ferry:node:a"), 0);

    run_for(l, 3 * TTL_MS);
    assert_int_equal(query_int(3, "EXISTS ferry:node:a"), 1);
    long long pttl = query_int(3, "PTTL ferry:node:a");
    assert_true(pttl > 0 && pttl <= TTL_MS);
    assert_int_equal(directory_counters(a)->reconnects, 0);
    assert_int_equal(directory_counters(a)->errors, 0);
    assert_int_equal(rep.calls, 1);
    directory_close(a);
}

static void test_nodes(void **state)
{
    struct loop *l = *state;
    struct directory *a, *b;
    struct answer ans;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    b = open_node(l, "b", u, NULL);
    ans = nodes(l, b);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 2);
    assert_string_equal(ans.nodes[0].id, "a");
    assert_string_equal(ans.nodes[0].addr, "10.0.0.97:7000");
    assert_int_equal(ans.nodes[0].nxp, 2); /* every transport, with its own address */
    assert_string_equal(directory_node_addr(&ans.nodes[0], "tcp"), "10.0.0.97:7000");
    assert_string_equal(directory_node_addr(&ans.nodes[0], "other"), "x@0123");
    assert_null(directory_node_addr(&ans.nodes[0], "fabric"));
    assert_string_equal(ans.nodes[1].id, "b");
    assert_string_equal(ans.nodes[1].addr, "10.0.0.98:7000");
    directory_close(a);
    directory_close(b);
}

/* A node with as many transports as an entry holds registers them all (regression: the
 * registration's arguments once overflowed a fixed array of 8). */
static void test_entry_full(void **state)
{
    struct loop *l = *state;
    char u[64], name[16], addr[DIRECTORY_XPORT_ADDR_MAX + 1];
    struct directory_config cfg = {
        .url = u, .heartbeat_ms = HEARTBEAT_MS, .ttl_ms = TTL_MS, .timeout_ms = TIMEOUT_MS};
    struct directory *a = NULL, *b;
    struct answer ans;

    url(u, sizeof(u), "127.0.0.1", 0);
    snprintf(cfg.self.id, sizeof(cfg.self.id), "full");
    snprintf(cfg.self.addr, sizeof(cfg.self.addr), "10.0.0.1:7000");
    memset(addr, 'z', sizeof(addr) - 1); /* the longest address too */
    addr[sizeof(addr) - 1] = '\0';
    for (int i = 0; i < DIRECTORY_XPORTS; i++) {
        snprintf(name, sizeof(name), "x%d", i);
        assert_int_equal(directory_node_set(&cfg.self, name, addr), 0);
    }
    assert_int_equal(directory_node_set(&cfg.self, "one-more", "a"), FERRY_EINVAL);
    assert_int_equal(directory_open(&a, l, &cfg, NULL), 0);
    assert_true(run_until(l, is_connected, a, WAIT_MS));
    b = open_node(l, "b", u, NULL);
    ans = nodes(l, b);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 2);
    assert_string_equal(ans.nodes[1].id, "full");
    assert_int_equal(ans.nodes[1].nxp, DIRECTORY_XPORTS);
    assert_string_equal(directory_node_addr(&ans.nodes[1], "x3"), addr);
    directory_close(a);
    directory_close(b);
}

/* An entry written by someone else is read within its bounds: transports beyond what an entry
 * holds, too long or empty names and addresses, NULs and non-strings are left out. */
static void test_entry_hostile(void **state)
{
    struct loop *l = *state;
    struct directory *b;
    struct answer ans;
    redisContext *c;
    char u[64], big[2048];

    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    c = redis_fixture_connect(&redis, 0);
    assert_non_null(c);
    freeReplyObject(
        redisCommand(c, "HSET ferry:node:h addr 10.9.9.9:1 t:long %s t: e t:e1 %s", big, ""));
    freeReplyObject(redisCommand(c, "HSET ferry:node:h t:n%b a t:%s b", "\0x", (size_t)2, big));
    for (int i = 0; i < 3 * DIRECTORY_XPORTS; i++)
        freeReplyObject(redisCommand(c, "HSET ferry:node:h t:k%d v%d", i, i));
    freeReplyObject(redisCommand(c, "HSET ferry:node:noaddr t:tcp 10.0.0.1:1"));
    freeReplyObject(redisCommand(c, "SET ferry:node:string x"));
    redisFree(c);

    url(u, sizeof(u), "127.0.0.1", 0);
    b = open_node(l, "b", u, NULL);
    ans = nodes(l, b);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 2); /* b and h: no address or not a hash, no node */
    assert_string_equal(ans.nodes[1].id, "h");
    assert_string_equal(ans.nodes[1].addr, "10.9.9.9:1");
    assert_int_equal(ans.nodes[1].nxp, DIRECTORY_XPORTS);
    for (uint32_t i = 0; i < ans.nodes[1].nxp; i++) {
        assert_int_equal(ans.nodes[1].xp[i].name[0], 'k');
        assert_true(strlen(ans.nodes[1].xp[i].addr) >= 2);
    }
    directory_close(b);
}

static void test_publish_lookup_withdraw(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x"), y = make_id("y");
    struct membership added = {&x, "a", 1}, removed = {&x, "a", 0};
    struct directory *a, *b;
    const struct directory_counters *bc;
    struct answer ans;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    b = open_node(l, "b", u, NULL);
    bc = directory_counters(b);
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &added, WAIT_MS));
    assert_int_equal(directory_counters(a)->published, 1);

    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 1);
    assert_string_equal(ans.nodes[0].id, "a");
    assert_string_equal(ans.nodes[0].addr, "10.0.0.97:7000");
    assert_string_equal(directory_node_addr(&ans.nodes[0], "tcp"), "10.0.0.97:7000");
    assert_int_equal(bc->lookups, 1);
    assert_int_equal(bc->cache_hits, 0);

    /* Again: from the cache, still through the loop. */
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.n, 1);
    assert_string_equal(ans.nodes[0].id, "a");
    assert_int_equal(bc->lookups, 1);
    assert_int_equal(bc->cache_hits, 1);

    /* fresh bypasses the cache. */
    ans = lookup(l, b, &x, 1);
    assert_int_equal(ans.n, 1);
    assert_int_equal(bc->lookups, 2);

    /* A forgotten holder sends the next lookup to Redis. */
    directory_forget_holder(b, &x, "a");
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.n, 1);
    assert_int_equal(bc->lookups, 3);
    assert_int_equal(bc->cache_hits, 1);

    /* The node itself is never among the holders; an unknown id has none. */
    ans = lookup(l, a, &x, 0);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 0);
    ans = lookup(l, b, &y, 0);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 0);

    directory_withdraw(a, &x);
    assert_true(run_until(l, membership_is, &removed, WAIT_MS));
    assert_int_equal(directory_counters(a)->withdrawn, 1);
    ans = lookup(l, b, &x, 1);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 0);
    /* ...and the empty answer replaced the cached holders. */
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.n, 0);
    assert_int_equal(bc->cache_hits, 1);

    /* A node proved unreachable is forgotten with its holdings. */
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &added, WAIT_MS));
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.n, 1);
    directory_forget_node(b, "a");
    uint64_t before = bc->lookups;
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.n, 1);
    assert_int_equal(bc->lookups, before + 1);
    assert_int_equal(bc->errors, 0);
    directory_close(a);
    directory_close(b);
}

/* Nodes a and b on the test's Redis, a publishing x (waited for until Redis lists it). */
static void two_nodes_a_holding(struct loop *l, const ferry_id *x, struct directory **a,
                                struct directory **b)
{
    struct membership added = {x, "a", 1};
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    *a = open_node(l, "a", u, NULL);
    *b = open_node(l, "b", u, NULL);
    directory_publish(*a, x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &added, WAIT_MS));
}

/* A lookup is one script that brings its holders' node entries with the record: a node that
 * never read a holder's entry answers from one Redis round trip, and has it cached after. What
 * a writer of Redis plants there is judged as a separate read of each entry would be: a
 * holder without an entry is gone, one whose entry is not a hash is left alone and reported,
 * and a record of the wrong type is replaced and answers no holder. */
static void test_lookup_brings_the_holders_entries(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x"), w = make_id("w");
    struct directory *a, *b;
    const struct directory_counters *bc;
    struct answer ans;
    char key[64], out[16];

    two_nodes_a_holding(l, &x, &a, &b);
    bc = directory_counters(b);
    obj_key(&x, key);
    assert_int_equal(query_int(0, "HSET %s h:ghost 1 h:str 1", key), 2);
    query_str(out, sizeof(out), "SET ferry:node:str junk");

    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 1);
    assert_string_equal(ans.nodes[0].id, "a");
    assert_string_equal(ans.nodes[0].addr, "10.0.0.97:7000");
    assert_int_equal(ans.ngone, 2);
    for (size_t i = 0; i < ans.ngone; i++)
        assert_non_null(strstr(ans.gone[i].why, strcmp(ans.gone[i].id, "str") == 0
                                                    ? "not a hash"
                                                    : "gone (no heartbeat"));
    assert_int_equal(bc->lookups, 1);
    assert_true(bc->bad_keys >= 1);
    assert_int_equal(query_int(0, "EXISTS ferry:node:str"), 1); /* another node's: left */

    obj_key(&w, key);
    query_str(out, sizeof(out), "SET %s junk", key);
    uint64_t bad = bc->bad_keys;
    ans = lookup(l, b, &w, 1);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 0);
    assert_int_equal(ans.has_content, 0);
    assert_true(bc->bad_keys > bad);
    assert_int_equal(query_int(0, "EXISTS %s", key), 0); /* ours: replaced */
    assert_int_equal(bc->errors, 0);
    directory_close(a);
    directory_close(b);
}

/* A dead node leaves the listings and the answers (not the holder sets) once its entry
 * expires, even when its address was cached. */
static void test_dead_node(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct membership added = {&x, "a", 1};
    struct directory *a, *b;
    struct answer ans;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    b = open_node(l, "b", u, NULL);
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &added, WAIT_MS));
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.n, 1);

    directory_close(a);
    assert_true(run_until(l, node_key_gone, "a", WAIT_MS));
    ans = nodes(l, b);
    assert_int_equal(ans.n, 1);
    assert_string_equal(ans.nodes[0].id, "b");
    ans = lookup(l, b, &x, 1);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 0);
    assert_true(membership_is(&added));
    directory_close(b);
}

/* A cached holder whose cached entry expired (TTL_MS after it was read, and a heartbeat
 * period after the node's entry in Redis can have) is asked about again. */
static void test_cached_address_expires(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct membership added = {&x, "a", 1};
    struct directory *a, *b;
    struct answer ans;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    b = open_node(l, "b", u, NULL);
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &added, WAIT_MS));
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.n, 1);
    directory_close(a);
    assert_true(run_until(l, node_key_gone, "a", WAIT_MS));
    run_for(l, HEARTBEAT_MS + 50);
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 0);
    assert_int_equal(directory_counters(b)->cache_hits, 0);
    assert_int_equal(directory_counters(b)->lookups, 2);
    directory_close(b);
}

static void test_cancel_and_close(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct membership added = {&x, "a", 1};
    struct answer cancelled = {0}, cached = {0}, kept = {0}, at_close = {0};
    struct directory *a, *b;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    b = open_node(l, "b", u, NULL);
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &added, WAIT_MS));

    assert_int_equal(directory_lookup(b, &x, 1, on_answer, &cancelled), 0);
    assert_int_equal(directory_lookup(b, &x, 1, on_answer, &kept), 0);
    directory_cancel(b, &cancelled);
    assert_true(run_until(l, answered, &kept, WAIT_MS));
    assert_int_equal(kept.n, 1);

    /* A cache hit waiting for the turn is cancelled alike. */
    assert_int_equal(directory_lookup(b, &x, 0, on_answer, &cached), 0);
    directory_cancel(b, &cached);
    run_for(l, 50);
    assert_int_equal(directory_counters(b)->cache_hits, 1);
    assert_int_equal(cancelled.calls, 0);
    assert_int_equal(cached.calls, 0);

    /* Closing frees pending requests without calling them. */
    assert_int_equal(directory_lookup(b, &x, 1, on_answer, &at_close), 0);
    assert_int_equal(directory_nodes(b, on_answer, &at_close), 0);
    assert_int_equal(directory_lookup(b, &x, 0, on_answer, &at_close), 0);
    directory_close(b);
    directory_close(a);
    run_for(l, 50);
    assert_int_equal(at_close.calls, 0);
}

/* A Redis that accepts but does not answer: the watchdog gives up after TIMEOUT_MS. */
static void test_redis_frozen(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct directory *a;
    struct answer ans = {0};
    uint64_t start;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    redis_fixture_freeze(&redis, 1);
    start = loop_now_ms();
    assert_int_equal(directory_lookup(a, &x, 1, on_answer, &ans), 0);
    assert_true(run_until(l, answered, &ans, TIMEOUT_MS + 1000));
    assert_int_equal(ans.status, FERRY_EDIRECTORY);
    assert_true(loop_now_ms() - start <= TIMEOUT_MS + 200);
    assert_int_equal(directory_connected(a), 0);

    /* Asked while down: failed at once, but still through the loop. */
    memset(&ans, 0, sizeof(ans));
    assert_int_equal(directory_lookup(a, &x, 1, on_answer, &ans), 0);
    assert_int_equal(ans.calls, 0);
    assert_true(run_until(l, answered, &ans, WAIT_MS));
    assert_int_equal(ans.status, FERRY_EDIRECTORY);

    redis_fixture_freeze(&redis, 0);
    assert_true(run_until(l, is_connected, a, WAIT_MS));
    assert_int_equal(directory_counters(a)->reconnects, 1);
    assert_true(directory_counters(a)->errors > 0);
    directory_close(a);
}

/* Redis killed and restarted empty: the directory reconnects, re-registers and republishes. */
static void test_redis_restart(void **state)
{
    struct loop *l = *state;
    struct republisher rep = {.id = make_id("r")};
    ferry_id x = make_id("x");
    struct membership back = {&rep.id, "a", 1}, dropped = {&x, "a", 0};
    struct directory *a;
    struct answer ans;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, &rep);
    assert_true(run_until(l, membership_is, &back, WAIT_MS));
    assert_int_equal(rep.calls, 1);

    redis_fixture_kill(&redis);
    assert_true(run_until(l, is_disconnected, a, TIMEOUT_MS + 200));
    ans = lookup(l, a, &x, 1);
    assert_int_equal(ans.status, FERRY_EDIRECTORY);
    directory_publish(a, &x, 10, DG(0xabc)); /* dropped: the republish hook restores the truth */
    run_for(l, 300);

    assert_int_equal(redis_fixture_start(&redis), 0);
    assert_true(run_until(l, is_connected, a, WAIT_MS));
    assert_int_equal(directory_counters(a)->reconnects, 1);
    assert_int_equal(query_int(0, "EXISTS ferry:node:a"), 1);
    assert_true(run_until(l, membership_is, &back, WAIT_MS));
    assert_int_equal(rep.calls, 2);
    assert_true(membership_is(&dropped));
    directory_close(a);
}

/* ---- incarnations, content, deletes, leaving ---- */

/* A request of another kind than lookups and listings, waited for. */
static struct answer claim(struct loop *l, struct directory *d, const ferry_id *id, uint64_t digest)
{
    struct answer a = {0};

    assert_int_equal(directory_claim(d, id, 10, DG(digest), on_answer, &a), 0);
    assert_int_equal(a.calls, 0);
    assert_true(run_until(l, answered, &a, WAIT_MS));
    return a;
}

static int conflicts_are(void *arg)
{
    struct directory **d = arg;
    return directory_counters(d[0])->id_conflicts == (uint64_t)(uintptr_t)d[1];
}

/* A holder whose node runs another incarnation than the one that published is left out, with
 * why; a node that starts again removes what its earlier run published, before it registers. */
static void test_incarnations(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct membership added = {&x, "a", 1}, removed = {&x, "a", 0};
    struct directory *a, *b;
    struct answer ans;
    char u[64];
    uint64_t first;

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    b = open_node(l, "b", u, NULL);
    first = directory_incarnation(a);
    assert_true(first >> 12 > 1700000000000ull); /* the start time in ms, 2023 or later */
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &added, WAIT_MS));
    ans = lookup(l, b, &x, 1);
    assert_int_equal(ans.n, 1);
    assert_int_equal(ans.nodes[0].inc, first);
    assert_true(ans.has_content);
    assert_int_equal(ans.size, 10);
    assert_int_equal(ans.digest, 0xabc);

    /* Another run of a (its entry says so; a stopped, so no heartbeat rewrites it): a's
     * holding is gone, and said why. */
    directory_close(a);
    assert_int_equal(query_int(0, "HSET ferry:node:a inc %llu", (unsigned long long)first + 1), 0);
    ans = lookup(l, b, &x, 1);
    assert_int_equal(ans.n, 0);
    assert_int_equal(ans.ngone, 1);
    assert_string_equal(ans.gone[0].id, "a");
    assert_non_null(strstr(ans.gone[0].why, "run of"));
    /* ...and not from the cache either: the cached entry is of the old run. */
    ans = lookup(l, b, &x, 0);
    assert_int_equal(ans.n, 0);

    /* a starts again: its earlier run's holding is removed before it registers. */
    a = open_node(l, "a", u, NULL);
    assert_true(directory_incarnation(a) != first);
    assert_true(membership_is(&removed));
    assert_int_equal(directory_counters(a)->cleaned, 1);
    ans = lookup(l, b, &x, 1);
    assert_int_equal(ans.n, 0);
    assert_int_equal(ans.ngone, 0);
    assert_false(ans.has_content); /* its last holder went with it */
    directory_close(a);
    directory_close(b);
}

/* One content per id: another content is refused while a live node holds the first, counted
 * and not listed; a claim says who holds what; once no live node holds it, it may change. */
static void test_one_content_per_id(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x"), y = make_id("y");
    struct membership a_has = {&x, "a", 1}, b_has = {&x, "b", 1};
    struct directory *a, *b, *c;
    struct directory *wait_b[2];
    struct answer ans;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    b = open_node(l, "b", u, NULL);
    c = open_node(l, "c", u, NULL);
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &a_has, WAIT_MS));
    directory_publish(b, &x, 10, DG(0xdef));
    wait_b[0] = b;
    wait_b[1] = (struct directory *)(uintptr_t)1;
    assert_true(run_until(l, conflicts_are, wait_b, WAIT_MS));
    b_has.want = 0;
    assert_true(membership_is(&b_has));
    ans = lookup(l, c, &x, 1);
    assert_int_equal(ans.n, 1);
    assert_string_equal(ans.nodes[0].id, "a");
    assert_int_equal(ans.digest, 0xabc);

    /* A claim of other content: refused, with the holder and its content. */
    ans = claim(l, b, &x, 0xdef);
    assert_int_equal(ans.status, FERRY_EEXIST);
    assert_string_equal(ans.other, "a");
    assert_int_equal(ans.digest, 0xabc);
    assert_int_equal(directory_counters(b)->id_conflicts, 2);
    /* Of the same content: b is a holder now. */
    ans = claim(l, b, &x, 0xabc);
    assert_int_equal(ans.status, 0);
    b_has.want = 1;
    assert_true(membership_is(&b_has));

    /* y's only holder dies: its content no longer binds anyone. */
    directory_publish(a, &y, 10, DG(0x111));
    struct membership a_has_y = {&y, "a", 1};
    assert_true(run_until(l, membership_is, &a_has_y, WAIT_MS));
    directory_close(a);
    assert_int_equal(query_int(0, "DEL ferry:node:a"), 1);
    ans = claim(l, b, &y, 0x222);
    assert_int_equal(ans.status, 0);
    ans = lookup(l, c, &y, 1);
    assert_int_equal(ans.n, 1);
    assert_string_equal(ans.nodes[0].id, "b");
    assert_int_equal(ans.digest, 0x222);
    directory_close(b);
    directory_close(c);
}

static int heard_delete(void *arg)
{
    return ((struct republisher *)arg)->deletes > 0;
}

/* A cluster-wide delete removes the entry and the holders' index entries, and every other
 * node hears of it, not the one that deleted. */
static void test_delete(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct republisher ra = {.id = make_id("ra")}, rb = {.id = make_id("rb")}, rc = {0};
    struct membership a_has = {&x, "a", 1}, b_has = {&x, "b", 1};
    struct directory *a, *b, *c;
    struct answer ans = {0};
    char u[64], hex[2 * FERRY_ID_SIZE + 1];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, &ra);
    b = open_node(l, "b", u, &rb);
    c = open_node(l, "c", u, &rc);
    directory_publish(a, &x, 10, DG(0xabc));
    directory_publish(b, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &a_has, WAIT_MS));
    assert_true(run_until(l, membership_is, &b_has, WAIT_MS));
    run_for(l, 3 * 100); /* every node has read where the events stream starts */

    assert_int_equal(directory_delete(c, &x, DG(0xabc), NULL, on_answer, &ans), 0);
    assert_true(run_until(l, answered, &ans, WAIT_MS));
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.count, 2);
    assert_true(run_until(l, heard_delete, &ra, WAIT_MS));
    assert_true(run_until(l, heard_delete, &rb, WAIT_MS));
    assert_memory_equal(&ra.deleted, &x, sizeof(x));
    assert_memory_equal(ra.root, DG(0xabc), DIGEST_LEN); /* the event names the content */
    assert_string_equal(ra.by, "c");
    run_for(l, 300);
    assert_int_equal(rc.deletes, 0);
    assert_int_equal(ra.deletes, 1);
    ferry_id_format(&x, hex);
    assert_int_equal(query_int(0, "SISMEMBER ferry:held:a %s", hex), 0);
    ans = lookup(l, c, &x, 1);
    assert_int_equal(ans.n, 0);
    assert_false(ans.has_content);
    assert_int_equal(directory_counters(a)->deletes_heard, 1);
    directory_close(a);
    directory_close(b);
    directory_close(c);
}

/* A copy fetched by a lookup of a put and sealed just after that put was deleted (its
 * publication makes the record again) is of the deleted put, so the delete still reaches its
 * node's hook when read: without directory_fetched it started a put of its own, and the
 * delete, of the earlier put, spared it. */
static void test_a_copy_fetched_before_a_delete_is_of_the_deleted_put(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct republisher ra = {0}, rb = {0};
    struct membership a_has = {&x, "a", 1}, b_has = {&x, "b", 1};
    struct directory *a, *b;
    struct answer ans, del = {0};
    char u[64], key[64], gen[64], again[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, &ra);
    b = open_node(l, "b", u, &rb);
    obj_key(&x, key);
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &a_has, WAIT_MS));
    query_str(gen, sizeof(gen), "HGET %s gen", key);
    assert_true(gen[0] != '\0');
    ans = lookup(l, b, &x, 1); /* b fetches by it */
    assert_string_equal(ans.gen, gen);
    run_for(l, 3 * 100); /* every node has read where the events stream starts */

    assert_int_equal(directory_delete(a, &x, DG(0xabc), gen, on_answer, &del), 0);
    assert_true(run_until(l, answered, &del, WAIT_MS));
    directory_fetched(b, &x, DG(0xabc), ans.gen); /* its fetch seals now */
    directory_publish(b, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &b_has, WAIT_MS));
    query_str(again, sizeof(again), "HGET %s gen", key);
    assert_string_equal(again, gen);
    assert_true(run_until(l, heard_delete, &rb, WAIT_MS));
    assert_int_equal(directory_counters(b)->deletes_of_earlier_puts, 0);
    directory_close(a);
    directory_close(b);
}

/* A delete and a claim do not overtake the publications queued before them: publish old
 * content, delete, claim new content, all in one turn, ends with the new content recorded and
 * the node its holder (a claim sent at once used to be undone by the queued publication). */
static void test_claim_and_delete_keep_their_place(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct directory *a;
    struct answer del = {0}, ans;
    char u[64], key[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    directory_publish(a, &x, 10, DG(0xa1));
    assert_int_equal(directory_delete(a, &x, DG(0xa1), NULL, on_answer, &del), 0);
    ans = claim(l, a, &x, 0xb2);
    assert_int_equal(ans.status, 0);
    assert_true(run_until(l, answered, &del, WAIT_MS));
    assert_int_equal(del.status, 0);
    obj_key(&x, key);
    assert_int_equal(query_int(0, "HEXISTS %s h:a", key), 1);
    ans = lookup(l, a, &x, 1);
    assert_true(ans.has_content);
    assert_int_equal(ans.digest, 0xb2);
    directory_close(a);
}

/* A withdrawal made while Redis does not answer is kept and sent once it is back. */
static void test_withdrawal_while_down_is_kept(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x");
    struct membership listed = {&x, "a", 1}, gone = {&x, "a", 0};
    struct directory *a;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &listed, WAIT_MS));
    redis_fixture_freeze(&redis, 1);
    assert_true(run_until(l, is_disconnected, a, HEARTBEAT_MS + TIMEOUT_MS + 500));
    directory_withdraw(a, &x);
    redis_fixture_freeze(&redis, 0);
    assert_true(run_until(l, is_connected, a, WAIT_MS));
    assert_true(run_until(l, membership_is, &gone, WAIT_MS));
    directory_close(a);
}

static void on_left(void *arg)
{
    (*(int *)arg)++;
}

static int is_set(void *arg)
{
    return *(int *)arg != 0;
}

/* Leaving: the entry goes at once, the holdings follow; without Redis it ends at once. */
static void test_leave(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("x"), y = make_id("y");
    struct membership a_has = {&x, "a", 1}, gone_x = {&x, "a", 0}, gone_y = {&y, "a", 0};
    struct directory *a, *b;
    struct answer ans;
    int left = 0;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    b = open_node(l, "b", u, NULL);
    directory_publish(a, &x, 10, DG(0xabc));
    directory_publish(a, &y, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &a_has, WAIT_MS));
    directory_leave(a, 2000, on_left, &left);
    assert_int_equal(left, 0);
    assert_true(run_until(l, is_set, &left, WAIT_MS));
    assert_int_equal(left, 1);
    assert_int_equal(directory_connected(a), 0);
    assert_true(node_key_gone("a"));
    assert_true(membership_is(&gone_x));
    assert_true(membership_is(&gone_y));
    assert_int_equal(query_int(0, "EXISTS ferry:held:a"), 0);
    ans = nodes(l, b);
    assert_int_equal(ans.n, 1);
    run_for(l, 2 * HEARTBEAT_MS); /* no heartbeat brings it back */
    assert_true(node_key_gone("a"));
    directory_close(a);

    /* Without Redis: over at once, through the loop. */
    redis_fixture_kill(&redis);
    assert_true(run_until(l, is_disconnected, b, TIMEOUT_MS + 500));
    left = 0;
    directory_leave(b, 2000, on_left, &left);
    assert_int_equal(left, 0);
    assert_true(run_until(l, is_set, &left, 200));
    directory_close(b);
    assert_int_equal(redis_fixture_start(&redis), 0);
}

static int republished_twice(void *arg)
{
    return ((struct republisher *)arg)->calls >= 2;
}

/* A heartbeat that finds the node's entry gone (it expired) publishes everything again. */
static void test_expired_entry_republishes(void **state)
{
    struct loop *l = *state;
    struct republisher rep = {.id = make_id("r")};
    struct directory *a;
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, &rep);
    run_for(l, 50);
    assert_int_equal(rep.calls, 1);
    assert_int_equal(query_int(0, "DEL ferry:node:a"), 1);
    assert_true(run_until(l, republished_twice, &rep, 3 * HEARTBEAT_MS));
    assert_int_equal(query_int(0, "EXISTS ferry:node:a"), 1);
    directory_close(a);
}

#define BULK 10000

static void republish_bulk(void *ctx)
{
    struct republisher *r = ctx;
    ferry_id id = {{0}};

    r->calls++;
    for (uint32_t i = 0; i < BULK; i++) {
        memcpy(id.bytes, &i, sizeof(i));
        directory_publish(r->d, &id, 10, DG(0xabc));
    }
}

static int dbsize_is(void *want)
{
    return query_int(0, "DBSIZE") == *(long long *)want;
}

/* A republish larger than a turn's batch is sent over several turns, entirely. */
static void test_large_republish(void **state)
{
    struct loop *l = *state;
    struct republisher rep = {0};
    struct directory_config cfg = {.self = {.id = "a", .addr = "h:1"}};
    struct directory_hooks hooks = {.republish = republish_bulk, .ctx = &rep};
    long long keys = BULK + 2; /* and the node's entry and index */
    char u[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    cfg.url = u;
    assert_int_equal(directory_open(&rep.d, l, &cfg, &hooks), 0);
    assert_true(run_until(l, dbsize_is, &keys, WAIT_MS));
    assert_int_equal(directory_counters(rep.d)->published, BULK);
    assert_int_equal(directory_counters(rep.d)->errors, 0);
    assert_int_equal(rep.calls, 1);
    directory_close(rep.d);
}

/* Puts ARGV[1] partial holder fields of nodes nobody runs ahead of the fields of record
 * KEYS[1] (small hashes keep their order). */
static const char crowd_partial_lua[] =
    "local r = redis.call('HGETALL', KEYS[1])\n"
    "redis.call('DEL', KEYS[1])\n"
    "for j = 1, tonumber(ARGV[1]) do\n"
    "  redis.call('HSET', KEYS[1], 'p:nobody-' .. j, '1:' .. j)\n"
    "end\n"
    "for i = 1, #r, 2 do redis.call('HSET', KEYS[1], r[i], r[i + 1]) end\n"
    "return #r\n";

/* A record given 64 partial holder fields of nodes nobody runs ahead of its one whole holder,
 * looked up (with the partial holders) by a node that has no node entry cached: the whole
 * holder comes first, and the partial ones are bounded, so a is in the answer. Before: the 64
 * partial fields took every place of the lookup, and the answer had no holder. */
static void test_planted_partial_holders_do_not_crowd_out_whole_ones(void **state)
{
    struct loop *l = *state;
    ferry_id x = make_id("crowded");
    struct membership added = {&x, "a", 1};
    struct directory *a, *c;
    struct answer ans;
    char u[64], key[64];

    url(u, sizeof(u), "127.0.0.1", 0);
    a = open_node(l, "a", u, NULL);
    directory_publish(a, &x, 10, DG(0xabc));
    assert_true(run_until(l, membership_is, &added, WAIT_MS));
    obj_key(&x, key);
    assert_int_equal(query_int(0, "EVAL %s 1 %s 64", crowd_partial_lua, key) > 0, 1);
    c = open_node(l, "c", u, NULL); /* its node cache is empty */
    ans = lookup(l, c, &x, DIRECTORY_FRESH | DIRECTORY_PARTIAL);
    assert_int_equal(ans.status, 0);
    assert_int_equal(ans.n, 1);
    assert_string_equal(ans.nodes[0].id, "a");
    assert_int_equal(ans.nodes[0].seq, 0);
    directory_close(a);
    directory_close(c);
}

/* ---- locations ---- */

/* Node id's directory under secret (NULL: none), not waited for: a location needs no Redis. */
static struct directory *open_signed(struct loop *l, const char *id, const char *secret)
{
    char u[64];
    struct directory_config cfg = {.url = u,
                                   .heartbeat_ms = HEARTBEAT_MS,
                                   .ttl_ms = TTL_MS,
                                   .timeout_ms = TIMEOUT_MS,
                                   .secret = (const uint8_t *)secret,
                                   .secret_len = secret ? strlen(secret) : 0};
    struct directory *d = NULL;

    url(u, sizeof(u), "127.0.0.1", 0);
    snprintf(cfg.self.id, sizeof(cfg.self.id), "%s", id);
    snprintf(cfg.self.addr, sizeof(cfg.self.addr), "10.0.0.%d:7000", id[0]);
    assert_int_equal(directory_node_set(&cfg.self, "tcp", cfg.self.addr), 0);
    assert_int_equal(directory_node_set(&cfg.self, "fabric", "tcp;ofi_rxm@0a 0b=%#"), 0);
    assert_int_equal(directory_open(&d, l, &cfg, NULL), 0);
    return d;
}

/* text with its first `from` replaced by `to`, into out. */
static const char *replaced(char *out, size_t cap, const char *text, const char *from,
                            const char *to)
{
    const char *at = strstr(text, from);

    assert_non_null(at);
    snprintf(out, cap, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return out;
}

/* A location says what the node's entry says, signed as the entry is, its fields escaped (a
 * fabric address holds ';' and more): a node of the same secret reads it back; another secret, any
 * changed field and an unsigned one are refused (FERRY_EAUTH); an open cluster takes any
 * well-formed one; malformed ones are FERRY_EINVAL. */
static void test_locations(void **state)
{
    struct loop *l = *state;
    struct directory *a = open_signed(l, "a", "s1"), *b = open_signed(l, "b", "s1");
    struct directory *x = open_signed(l, "x", "s2"), *o = open_signed(l, "o", NULL);
    char loc[DIRECTORY_LOCATION_MAX], other[DIRECTORY_LOCATION_MAX], inc[32], inc2[32];
    char big[DIRECTORY_LOCATION_MAX + 8];
    struct directory_node n;
    const char *malformed[] = {"",
                               "ferry1;",
                               "ferry2;a;1;h;tcp=x",
                               "ferry1;a;0;h;tcp=x",
                               "ferry1;a;x1;h;tcp=x",
                               "ferry1;a;1;h",
                               "ferry1;a;1;h;tcp",
                               "ferry1;a;1;h;=x",
                               "ferry1;a;1;h;tcp=",
                               "ferry1;a;1;h;;tcp=x",
                               "ferry1;a b;1;h;tcp=x",
                               "ferry1;a;1;h;tcp=x;tcp=y",
                               "ferry1;a;1;h;a=1;b=2;c=3;d=4;e=5",
                               "ferry1;a;99999999999999999999999;h;tcp=x",
                               "ferry1;a;1;h;tcp=x\n",
                               "ferry1;a;1;h;tcp=%0",
                               "ferry1;a;1;h;tcp=%00",
                               "ferry1;a;1;h;tcp=%zz",
                               "ferry1;a;1;h;tcp=x=y"};

    assert_int_equal(directory_location(a, loc, sizeof(loc)), 0);
    assert_int_equal(strncmp(loc, "ferry1;a;", 9), 0);
    assert_int_equal(directory_location_parse(b, loc, &n), 0);
    assert_string_equal(n.id, "a");
    assert_true(n.inc == directory_incarnation(a));
    assert_string_equal(n.addr, "10.0.0.97:7000");
    assert_int_equal(n.nxp, 2);
    assert_string_equal(directory_node_addr(&n, "fabric"), "tcp;ofi_rxm@0a 0b=%#");
    assert_non_null(strstr(loc, "=tcp%3bofi_rxm@0a%200b%3d%25%23"));
    assert_int_equal(n.seq, 0);
    assert_int_equal(directory_location_parse(x, loc, &n), FERRY_EAUTH);
    assert_int_equal(directory_location_parse(o, loc, &n), 0);
    /* Each field is signed: the incarnation, an address, the node. */
    snprintf(inc, sizeof(inc), ";%" PRIu64 ";", directory_incarnation(a));
    snprintf(inc2, sizeof(inc2), ";%" PRIu64 ";", directory_incarnation(a) + 1);
    assert_int_equal(
        directory_location_parse(b, replaced(other, sizeof(other), loc, inc, inc2), &n),
        FERRY_EAUTH);
    assert_int_equal(
        directory_location_parse(
            b, replaced(other, sizeof(other), loc, "tcp=10.0.0.97", "tcp=10.0.0.98"), &n),
        FERRY_EAUTH);
    assert_int_equal(
        directory_location_parse(b, replaced(other, sizeof(other), loc, ";a;", ";b;"), &n),
        FERRY_EAUTH);
    /* Unsigned under a secret; no room for it. */
    assert_int_equal(directory_location(o, other, sizeof(other)), 0);
    assert_null(strchr(other, '#'));
    assert_int_equal(directory_location_parse(b, other, &n), FERRY_EAUTH);
    assert_int_equal(directory_location(a, other, 40), FERRY_EINVAL);
    for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++)
        assert_int_equal(directory_location_parse(o, malformed[i], &n), FERRY_EINVAL);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(big, "ferry1;", 7);
    assert_int_equal(directory_location_parse(o, big, &n), FERRY_EINVAL);
    directory_close(a);
    directory_close(b);
    directory_close(x);
    directory_close(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_configuration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_from_the_url, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registration_and_heartbeat, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_hostile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_lookup_withdraw, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incarnations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_content_per_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_and_delete_keep_their_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_copy_fetched_before_a_delete_is_of_the_deleted_put,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_withdrawal_while_down_is_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_entry_republishes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lookup_brings_the_holders_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cached_address_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_and_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_republish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redis_frozen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redis_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_planted_partial_holders_do_not_crowd_out_whole_ones,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
