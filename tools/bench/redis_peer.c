/* redis_peer.c - redis as a measured system: a redis-server on loopback TCP, and the
 * operations set and get through hiredis's synchronous commands. */
#include <string.h>

#include <hiredis/hiredis.h>

#include "bench.h"

#define START_TIMEOUT_MS 10000
#define START_POLL_MS 20

/* The state behind the redis operations. Keys carry the run's nonce, like ferry's ids. */
struct redis_ctx {
    redisContext *rc;
    const uint8_t *payload;
    uint64_t nonce;
    char key[64];
};

static struct redis_ctx redis_ctx;

/* Fails unless reply is of the expected type; frees it otherwise. */
static void check_reply(redisContext *rc, redisReply *reply, int type, const char *what,
                        uint64_t size)
{
    if (reply == NULL)
        bench_fail("redis %s of %llu bytes: %s", what, (unsigned long long)size, rc->errstr);
    if (reply->type == REDIS_REPLY_ERROR)
        bench_fail("redis %s of %llu bytes: %s", what, (unsigned long long)size, reply->str);
    if (reply->type != type)
        bench_fail("redis %s of %llu bytes: unexpected reply type %d", what,
                   (unsigned long long)size, reply->type);
    if (type == REDIS_REPLY_STRING && (uint64_t)reply->len != size)
        bench_fail("redis %s of %llu bytes returned %llu bytes", what, (unsigned long long)size,
                   (unsigned long long)reply->len);
    freeReplyObject(reply);
}

static void set_key(struct redis_ctx *x, uint64_t size)
{
    check_reply(x->rc, redisCommand(x->rc, "SET %s %b", x->key, x->payload, (size_t)size),
                REDIS_REPLY_STATUS, "SET", size);
}

static void del_key(struct redis_ctx *x, uint64_t size)
{
    check_reply(x->rc, redisCommand(x->rc, "DEL %s", x->key), REDIS_REPLY_INTEGER, "DEL", size);
}

/* set: one fresh key per iteration, deleted again outside the timed section. */
static void set_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct redis_ctx *x = ctx;
    snprintf(x->key, sizeof(x->key), "ferry-bench:%llx:%llu", (unsigned long long)x->nonce,
             (unsigned long long)iter);
    set_key(x, size);
}

static void set_after(void *ctx, uint64_t size, uint64_t iter)
{
    (void)iter;
    del_key(ctx, size);
}

/* get reads one value per size, stored before and deleted after. */
static void get_setup(void *ctx, uint64_t size)
{
    struct redis_ctx *x = ctx;
    snprintf(x->key, sizeof(x->key), "ferry-bench:%llx:read", (unsigned long long)x->nonce);
    set_key(x, size);
}

static void get_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct redis_ctx *x = ctx;
    (void)iter;
    check_reply(x->rc, redisCommand(x->rc, "GET %s", x->key), REDIS_REPLY_STRING, "GET", size);
}

static void get_teardown(void *ctx, uint64_t size)
{
    del_key(ctx, size);
}

size_t redis_peer_ops(void *redis, const char *system, const uint8_t *payload,
                      const struct bench_op **ops)
{
    static struct bench_op list[] = {
        {.system = "redis", .op = "set", .run = set_run, .after = set_after, .ctx = &redis_ctx},
        {.system = "redis",
         .op = "get",
         .setup = get_setup,
         .run = get_run,
         .teardown = get_teardown,
         .ctx = &redis_ctx},
    };
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++)
        list[i].system = system;
    redis_ctx = (struct redis_ctx){.rc = redis, .payload = payload, .nonce = bench_nonce()};
    *ops = list;
    return sizeof(list) / sizeof(list[0]);
}

/* A redis-server on port; a replica of the one on master_port unless that is 0. */
static struct bench_proc *start_server(int port, int master_port)
{
    char port_arg[16], master_arg[16];
    if (bench_which("redis-server") == NULL)
        bench_fail("redis-server is not on $PATH (Debian: apt-get install redis-server); "
                   "or pass --redis-port of a running one");
    snprintf(port_arg, sizeof(port_arg), "%d", port);
    snprintf(master_arg, sizeof(master_arg), "%d", master_port);
    /* No persistence: the bench's keys are scratch; loopback only. */
    char *dir = (char *)bench_tmpdir();
    char *argv[] = {"redis-server",
                    "--port",
                    port_arg,
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "yes",
                    "--dir",
                    dir,
                    NULL,
                    NULL,
                    NULL,
                    NULL};
    if (master_port) {
        char **end = &argv[sizeof(argv) / sizeof(argv[0]) - 4];
        end[0] = "--replicaof";
        end[1] = "127.0.0.1";
        end[2] = master_arg;
    }
    return bench_proc_start(master_port ? "redis-replica" : "redis-server", argv);
}

/* A connection that answers PING, or NULL (the server is not up yet). */
static redisContext *try_connect(int port)
{
    redisContext *rc = redisConnect("127.0.0.1", port);
    if (rc != NULL && rc->err == 0) {
        redisReply *r = redisCommand(rc, "PING");
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL)
            freeReplyObject(r);
        if (ok)
            return rc;
    }
    redisFree(rc);
    return NULL;
}

static redisContext *connect_started(struct bench_proc *server, int port)
{
    for (unsigned waited = 0;; waited += START_POLL_MS) {
        redisContext *rc = try_connect(port);
        if (rc != NULL)
            return rc;
        if (bench_proc_ended(server))
            bench_fail("redis-server ended before accepting connections on port %d", port);
        if (waited >= START_TIMEOUT_MS) {
            bench_proc_show_log(server);
            bench_fail("redis-server did not answer on 127.0.0.1:%d within %d ms", port,
                       START_TIMEOUT_MS);
        }
        bench_check_interrupt();
        bench_sleep_ms(START_POLL_MS);
    }
}

static void free_at_exit(void *arg)
{
    redisFree(arg);
}

void *redis_peer_start(int port)
{
    redisContext *rc;
    if (port != 0) {
        rc = try_connect(port);
        if (rc == NULL)
            bench_fail("no redis-server answers PING on 127.0.0.1:%d", port);
    } else {
        bench_free_ports(&port, 1);
        rc = connect_started(start_server(port, 0), port);
    }
    bench_on_exit(free_at_exit, rc);
    return rc;
}

void redis_peer_start_replica(void *master)
{
    int port, master_port = redis_peer_port(master);

    bench_free_ports(&port, 1);
    redisFree(connect_started(start_server(port, master_port), port));
    for (unsigned waited = 0;; waited += START_POLL_MS) {
        redisReply *r = redisCommand(master, "INFO replication");
        int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "connected_slaves:1") &&
                 strstr(r->str, "state=online");
        freeReplyObject(r);
        if (up)
            return;
        if (waited >= START_TIMEOUT_MS)
            bench_fail("the replica of 127.0.0.1:%d is not online within %d ms", master_port,
                       START_TIMEOUT_MS);
        bench_check_interrupt();
        bench_sleep_ms(START_POLL_MS);
    }
}

int redis_peer_port(void *redis)
{
    return ((redisContext *)redis)->tcp.port;
}
