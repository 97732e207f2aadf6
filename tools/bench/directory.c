/*
 * directory.c - the directory suite: what one Redis carries, and what --strict-ids costs.
 *
 * Capacity: N simulated nodes, each a thread with an event loop of its own running the
 * daemon's real directory code (src/directory/), register, publish M objects each (pipelined,
 * as a node does), then look up M objects of another node each (fresh lookups, W outstanding
 * per node, every answer checked), then leave. Publishes/s and lookups/s are set against
 * redis-benchmark's HSET and HGETALL on the same server in the same run, with as many
 * connections and the same pipelining: a publication is one script (a few hash and set
 * commands), a lookup two reads (the object's entry, then its holder's).
 *
 * Puts: ferry put on a cluster node, beside a node without a directory (what the directory costs
 * a put) and a node started with --strict-ids (each seal waits for a claim round trip to Redis),
 * both cluster nodes on the same Redis; then the redis-server CPU time per put of the first
 * size on the cluster node, each put deleted after it (as a full cache evicts one object per
 * put): its publication and its withdrawal.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"
#include "common/log.h"
#include "directory/directory.h"
#include "loop/loop.h"

#define DB 15                /* the suite's keys live in a database of their own */
#define CONNECT_MS 10000     /* a simulated node must register within this */
#define PHASE_MS 600000      /* and finish each phase within this */
#define POLL_MS 2            /* how often a node checks that its publications are all sent */
#define LONG_TTL_MS 3600000u /* nodes wait at barriers without heartbeats: no expiry meanwhile */
#define MAX_NODES 256
#define MAX_NODES_PUT 3 /* the put systems: a cluster node, a strict one, a node alone */
#define MAX_OPS 5       /* their puts, and bursts without a message on the first and the last */
#define CPU_PUTS 20000  /* puts whose cost to Redis is measured */

struct dir_options {
    uint64_t nodes, objects, window;
    int redis_port, replica;
};

enum phase { PUBLISH, LOOKUP, PHASES };

struct dir_run;

/* One simulated node; its fields belong to its thread until it is joined. */
struct sim {
    struct dir_run *run;
    int index;
    pthread_t thread;
    struct loop loop;
    struct directory *d;
    struct loop_timer deadline, poll;
    char id[32];
    ferry_id *ids;           /* the objects it publishes */
    const struct sim *other; /* whose objects it looks up */
    int done;
    uint64_t next, answered, found;
    double t0[PHASES], t1[PHASES];
    char error[200];
};

struct dir_run {
    const struct dir_options *o;
    char url[64];
    uint64_t nonce;
    pthread_barrier_t barrier;
    struct sim *sims;
};

static void sim_fail(struct sim *s, const char *what)
{
    if (!s->error[0])
        snprintf(s->error, sizeof(s->error), "node %s: %s", s->id, what);
    loop_stop(&s->loop);
}

static void on_deadline(struct loop *l, struct loop_timer *t)
{
    sim_fail(t->arg, "a phase did not finish in time");
}

/* Runs the node's loop until the phase says done (or fails), for at most ms. */
static int sim_run(struct sim *s, uint64_t ms)
{
    s->done = 0;
    s->loop.stop = 0;
    loop_timer_start(&s->loop, &s->deadline, loop_now_ms() + ms);
    while (!s->done && !s->error[0] && loop_run(&s->loop) == 0 && !s->done && !s->error[0])
        s->loop.stop = 0;
    loop_timer_stop(&s->loop, &s->deadline);
    return s->done && !s->error[0];
}

static void sim_done(struct sim *s)
{
    s->done = 1;
    loop_stop(&s->loop);
}

static void on_connect_poll(struct loop *l, struct loop_timer *t)
{
    struct sim *s = t->arg;

    if (directory_connected(s->d))
        sim_done(s);
    else
        loop_timer_start(l, t, loop_now_ms() + POLL_MS);
}

static int sim_connect(struct sim *s)
{
    struct directory_config cfg = {
        .url = s->run->url, .heartbeat_ms = LONG_TTL_MS / 2, .ttl_ms = LONG_TTL_MS};

    snprintf(cfg.self.id, sizeof(cfg.self.id), "%s", s->id);
    snprintf(cfg.self.addr, sizeof(cfg.self.addr), "127.0.0.1:%d", 10000 + s->index);
    if (directory_node_set(&cfg.self, "tcp", cfg.self.addr) < 0 ||
        directory_open(&s->d, &s->loop, &cfg, NULL) < 0) {
        sim_fail(s, ferry_errmsg());
        return 0;
    }
    loop_timer_start(&s->loop, &s->poll, loop_now_ms());
    if (!sim_run(s, CONNECT_MS))
        sim_fail(s, "not registered within 10 s");
    loop_timer_stop(&s->loop, &s->poll);
    return !s->error[0];
}

/* Every publication has been answered: they were sent before this listing, on one connection. */
static void on_marker(void *arg, const struct directory_answer *a)
{
    struct sim *s = arg;

    if (a->status < 0)
        sim_fail(s, "the directory failed during the publications");
    else
        sim_done(s);
}

static void on_publish_poll(struct loop *l, struct loop_timer *t)
{
    struct sim *s = t->arg;

    if (directory_counters(s->d)->published < s->run->o->objects) {
        loop_timer_start(l, t, loop_now_ms() + POLL_MS);
        return;
    }
    if (directory_nodes(s->d, on_marker, s) < 0)
        sim_fail(s, ferry_errmsg());
}

static int sim_publish(struct sim *s)
{
    uint64_t m = s->run->o->objects;

    s->t0[PUBLISH] = bench_now();
    for (uint64_t k = 0; k < m; k++) {
        uint8_t digest[DIGEST_LEN] = {0};
        memcpy(digest, &k, sizeof(k)); /* a distinct content per id */
        directory_publish(s->d, &s->ids[k], 4096 + k, digest);
    }
    loop_timer_start(&s->loop, &s->poll, loop_now_ms());
    if (!sim_run(s, PHASE_MS))
        sim_fail(s, "publications unfinished");
    loop_timer_stop(&s->loop, &s->poll);
    s->t1[PUBLISH] = bench_now();
    if (directory_counters(s->d)->published != m)
        sim_fail(s, "publications lost (a reconnection?)");
    return !s->error[0];
}

static void lookup_next(struct sim *s);

static void on_lookup(void *arg, const struct directory_answer *a)
{
    struct sim *s = arg;

    s->answered++;
    /* The one holder, and the content it published (sizes 4096 + k). */
    s->found += a->status == 0 && a->n == 1 && strcmp(a->nodes[0].id, s->other->id) == 0 &&
                a->has_content && a->size >= 4096 && a->size < 4096 + s->run->o->objects;
    if (s->answered == s->run->o->objects)
        sim_done(s);
    else
        lookup_next(s);
}

static void lookup_next(struct sim *s)
{
    if (s->next < s->run->o->objects &&
        directory_lookup(s->d, &s->other->ids[s->next++], 1, on_lookup, s) < 0)
        sim_fail(s, ferry_errmsg());
}

static int sim_lookups(struct sim *s)
{
    s->t0[LOOKUP] = bench_now();
    for (uint64_t w = 0; w < s->run->o->window; w++)
        lookup_next(s);
    if (!sim_run(s, PHASE_MS))
        sim_fail(s, "lookups unfinished");
    s->t1[LOOKUP] = bench_now();
    return !s->error[0];
}

static void on_left(void *arg)
{
    sim_done(arg);
}

static void *sim_main(void *arg)
{
    struct sim *s = arg;
    int ok = loop_init(&s->loop) == 0;

    if (!ok)
        snprintf(s->error, sizeof(s->error), "node %s: %s", s->id, ferry_errmsg());
    loop_timer_init(&s->deadline, on_deadline, s);
    loop_timer_init(&s->poll, on_connect_poll, s);
    ok = ok && sim_connect(s);
    pthread_barrier_wait(&s->run->barrier);
    loop_timer_init(&s->poll, on_publish_poll, s);
    ok = ok && sim_publish(s);
    pthread_barrier_wait(&s->run->barrier);
    ok = ok && sim_lookups(s);
    pthread_barrier_wait(&s->run->barrier);
    if (s->d) {
        directory_leave(s->d, PHASE_MS, on_left, s); /* removes what it published */
        sim_run(s, PHASE_MS);
        directory_close(s->d);
    }
    if (ok || s->d)
        loop_destroy(&s->loop);
    return NULL;
}

/* The rate of a phase over all nodes: every object over the time from the first start to the
 * last end. */
static double phase_rate(const struct dir_run *r, enum phase p)
{
    double first = r->sims[0].t0[p], last = r->sims[0].t1[p];

    for (uint64_t i = 1; i < r->o->nodes; i++) {
        first = r->sims[i].t0[p] < first ? r->sims[i].t0[p] : first;
        last = r->sims[i].t1[p] > last ? r->sims[i].t1[p] : last;
    }
    return (double)(r->o->nodes * r->o->objects) / (last - first);
}

/* The server's used_memory (INFO memory). */
static uint64_t redis_used_memory(void *redis)
{
    redisReply *rep = redisCommand(redis, "INFO memory");
    const char *at =
        rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "used_memory:") : NULL;
    uint64_t v = at ? strtoull(at + strlen("used_memory:"), NULL, 10) : 0;

    freeReplyObject(rep);
    if (!v)
        bench_fail("INFO memory gave no used_memory");
    return v;
}

/* The server's CPU time so far, user and system, in microseconds (INFO cpu). */
static double redis_used_cpu_us(void *redis)
{
    redisReply *rep = redisCommand(redis, "INFO cpu");
    const char *text = rep && rep->type == REDIS_REPLY_STRING ? rep->str : "";
    const char *sys = strstr(text, "used_cpu_sys:"), *user = strstr(text, "used_cpu_user:");
    double v = -1;

    if (sys && user)
        v = (strtod(sys + strlen("used_cpu_sys:"), NULL) +
             strtod(user + strlen("used_cpu_user:"), NULL)) *
            1e6;
    freeReplyObject(rep);
    if (v < 0)
        bench_fail("INFO cpu gave no used_cpu_sys and used_cpu_user");
    return v;
}

/* Runs the simulated nodes (this thread meets them at their barriers): their rates into
 * rate[], the directory's bytes per published object into *per_object, and the server's CPU
 * time per publication into *cpu_us. */
static void run_nodes(struct dir_run *r, void *redis, double rate[PHASES], double *per_object,
                      double *cpu_us)
{
    uint64_t n = r->o->nodes, before;
    double cpu;

    r->sims = calloc(n, sizeof(*r->sims));
    if (!r->sims || pthread_barrier_init(&r->barrier, NULL, (unsigned)n + 1) != 0)
        bench_fail("out of memory for %" PRIu64 " simulated nodes", n);
    for (uint64_t i = 0; i < n; i++) {
        struct sim *s = &r->sims[i];
        s->run = r;
        s->index = (int)i;
        s->other = &r->sims[(i + 1) % n];
        snprintf(s->id, sizeof(s->id), "bench-%" PRIx64 "-%" PRIu64, r->nonce, i);
        if (!(s->ids = calloc(r->o->objects, sizeof(*s->ids))))
            bench_fail("out of memory for the ids");
        for (uint64_t k = 0; k < r->o->objects; k++)
            s->ids[k] = ferry_peer_id(r->nonce, i * r->o->objects + k, 'd');
    }
    for (uint64_t i = 0; i < n; i++)
        if (pthread_create(&r->sims[i].thread, NULL, sim_main, &r->sims[i]) != 0)
            bench_fail("cannot start a thread per simulated node");
    pthread_barrier_wait(&r->barrier); /* registered */
    before = redis_used_memory(redis);
    cpu = redis_used_cpu_us(redis);
    pthread_barrier_wait(&r->barrier); /* published */
    *cpu_us = (redis_used_cpu_us(redis) - cpu) / (double)(n * r->o->objects);
    *per_object = ((double)redis_used_memory(redis) - (double)before) / (double)(n * r->o->objects);
    pthread_barrier_wait(&r->barrier); /* looked up */
    for (uint64_t i = 0; i < n; i++)
        pthread_join(r->sims[i].thread, NULL);
    for (uint64_t i = 0; i < n; i++) {
        if (r->sims[i].error[0])
            bench_fail("%s", r->sims[i].error);
        if (r->sims[i].found != r->o->objects)
            bench_fail("node %s found %" PRIu64 " of the %" PRIu64 " objects it looked up",
                       r->sims[i].id, r->sims[i].found, r->o->objects);
    }
    rate[PUBLISH] = phase_rate(r, PUBLISH);
    rate[LOOKUP] = phase_rate(r, LOOKUP);
    for (uint64_t i = 0; i < n; i++)
        free(r->sims[i].ids);
    free(r->sims);
    pthread_barrier_destroy(&r->barrier);
}

/* redis-benchmark of one command (__rand_int__ in it) with n connections, the pipelining and
 * the number of requests of the simulated nodes; its requests per second, and the server's CPU
 * time per request into *cpu_us. */
static double redis_benchmark(const struct dir_run *r, void *redis, int port, const char *command,
                              double *cpu_us)
{
    char cmd[512], line[512];
    double rps = 0, cpu = redis_used_cpu_us(redis);
    FILE *p;

    if (!bench_which("redis-benchmark"))
        bench_fail("redis-benchmark is not on $PATH (Debian: apt-get install redis-tools)");
    snprintf(cmd, sizeof(cmd),
             "redis-benchmark -h 127.0.0.1 -p %d --dbnum %d -c %" PRIu64 " -P %" PRIu64
             " -n %" PRIu64 " -r %" PRIu64 " --csv %s 2>&1",
             port, DB, r->o->nodes, r->o->window, r->o->nodes * r->o->objects,
             r->o->nodes * r->o->objects, command);
    if (!(p = popen(cmd, "r")))
        bench_fail("cannot run redis-benchmark");
    while (fgets(line, sizeof(line), p)) {
        char *comma = strstr(line, "\",\"");
        if (comma && strncmp(line, "\"test\"", 6) != 0)
            rps = strtod(comma + 3, NULL);
    }
    if (pclose(p) != 0 || rps <= 0)
        bench_fail("redis-benchmark %s gave no figure", command);
    *cpu_us = (redis_used_cpu_us(redis) - cpu) / (double)(r->o->nodes * r->o->objects);
    return rps;
}

/* Removes the reference run's keys (SCAN, bounded by the keys it can have made). */
static void drop_reference_keys(void *redis, uint64_t nonce, uint64_t max_keys)
{
    redisContext *c = redis;
    char pattern[64], cursor[32] = "0";
    uint64_t rounds = 0;
    redisReply *rep;

    snprintf(pattern, sizeof(pattern), "ferry:bench:%" PRIx64 ":*", nonce);
    freeReplyObject(redisCommand(c, "SELECT %d", DB));
    do {
        rep = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2)
            bench_fail("SCAN of the reference keys failed");
        snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
        for (size_t i = 0; i < rep->element[1]->elements; i++)
            freeReplyObject(redisCommand(c, "UNLINK %s", rep->element[1]->element[i]->str));
        freeReplyObject(rep);
    } while (strcmp(cursor, "0") != 0 && ++rounds < max_keys / 100 + 100);
    freeReplyObject(redisCommand(c, "SELECT 0"));
}

/* ---- what --strict-ids costs a put ---- */

struct put_ctx {
    ferry_client *c;
    const uint8_t *payload;
    uint64_t nonce;
    char kind;
};

static ferry_id put_id(const struct put_ctx *x, uint64_t iter)
{
    return ferry_peer_id(x->nonce, iter, x->kind);
}

static void put_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct put_ctx *x = ctx;
    ferry_id id = put_id(x, iter);
    bench_check_ferry(ferry_put(x->c, &id, x->payload, size, NULL, 0), "put of %" PRIu64, size);
}

static void put_after(void *ctx, uint64_t size, uint64_t iter)
{
    struct put_ctx *x = ctx;
    ferry_id id = put_id(x, iter);
    bench_check_ferry(ferry_delete(x->c, &id), "delete of %" PRIu64, size);
}

/* A burst of puts without a message and its flush (ferry_peer_burst). */
static void burst_run(void *ctx, uint64_t size, uint64_t iter)
{
    struct put_ctx *x = ctx;
    ferry_peer_burst(x->c, x->payload, x->nonce, (char)(x->kind - 'a' + 'A'), size, iter);
}

static void burst_after(void *ctx, uint64_t size, uint64_t iter)
{
    struct put_ctx *x = ctx;
    ferry_peer_burst_delete(x->c, x->nonce, (char)(x->kind - 'a' + 'A'), size, iter);
}

static struct put_ctx put_ctx[MAX_NODES_PUT];
static struct bench_op put_ops[MAX_NODES_PUT], burst_ops[MAX_NODES_PUT];

enum put_kind { PUT_CLUSTER, PUT_STRICT, PUT_ALONE };

/* A node of kind k (url: its directory, but for PUT_ALONE), and its put op. */
static const struct bench_op *put_node(enum put_kind k, const char *url, int port,
                                       const uint8_t *payload, uint64_t nonce)
{
    static const char *const names[] = {"ferryd-plain", "ferryd-strict", "ferryd-alone"};
    static const char *const systems[] = {"ferry", "ferry-strict", "ferry-alone"};
    static char ids[MAX_NODES_PUT][64], listen[MAX_NODES_PUT][32];
    const char *cluster[] = {"--memory",
                             "1G",
                             "--node-id",
                             ids[k],
                             "--listen",
                             listen[k],
                             "--directory",
                             url,
                             "--transport",
                             "tcp",
                             k == PUT_STRICT ? "--strict-ids" : NULL,
                             NULL};
    const char *alone[] = {"--memory", "1G", NULL};

    snprintf(ids[k], sizeof(ids[k]), "bench-%s-%" PRIx64, names[k] + 7, nonce);
    snprintf(listen[k], sizeof(listen[k]), "127.0.0.1:%d", port);
    put_ctx[k] = (struct put_ctx){
        .c = ferry_peer_start(NULL, names[k], k == PUT_ALONE ? alone : cluster, NULL),
        .payload = payload,
        .nonce = nonce,
        .kind = "psa"[k]};
    put_ops[k] = (struct bench_op){
        .system = systems[k], .op = "put", .run = put_run, .after = put_after, .ctx = &put_ctx[k]};
    burst_ops[k] = (struct bench_op){.system = systems[k],
                                     .op = "nowait+flush",
                                     .run = burst_run,
                                     .after = burst_after,
                                     .objects = ferry_peer_burst_objects,
                                     .ctx = &put_ctx[k]};
    return &put_ops[k];
}

/* Waits until the record of id is in database db of the server (once there, every command the
 * node sent before it has run: one connection, in order). */
static void record_wait(void *redis, int db, const ferry_id *id)
{
    char hex[2 * FERRY_ID_SIZE + 1];
    double deadline = bench_now() + PHASE_MS / 1000.0;
    long long found = 0;

    ferry_id_format(id, hex);
    freeReplyObject(redisCommand(redis, "SELECT %d", db));
    while (!found && bench_now() < deadline) {
        redisReply *rep = redisCommand(redis, "EXISTS ferry:obj:%s", hex);
        found = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : 0;
        freeReplyObject(rep);
        if (!found)
            usleep(1000); /* a poll costs the server CPU too: a few, not thousands */
    }
    freeReplyObject(redisCommand(redis, "SELECT 0"));
    if (!found)
        bench_fail("the record of %s did not reach the directory in %d ms", hex, PHASE_MS);
}

/* The server's CPU time per put of size on the cluster node x (its directory: database db):
 * CPU_PUTS puts, each deleted at once, then a last put kept, whose record comes after all
 * their publications and withdrawals. */
static double redis_cpu_per_put(void *redis, int db, struct put_ctx *x, uint64_t size)
{
    double cpu = redis_used_cpu_us(redis);
    struct put_ctx last = *x;
    ferry_id id;

    x->kind = 'c';
    for (uint64_t i = 0; i < CPU_PUTS; i++) {
        put_run(x, size, i);
        put_after(x, size, i);
    }
    last.kind = 'l';
    put_run(&last, size, 0);
    id = put_id(&last, 0);
    record_wait(redis, db, &id);
    return (redis_used_cpu_us(redis) - cpu) / CPU_PUTS;
}

/* ---- options and output ---- */

static void handle_option(void *ctx, int ch, const char *arg)
{
    struct dir_options *o = ctx;

    switch (ch) {
    case 'n':
        o->nodes = bench_parse_count("--nodes", arg, 1, MAX_NODES);
        break;
    case 'o':
        o->objects = bench_parse_count("--objects", arg, 1, 10000000);
        break;
    case 'w':
        o->window = bench_parse_count("--window", arg, 1, 1024);
        break;
    case 'r':
        o->redis_port = (int)bench_parse_count("--redis-port", arg, 1, 65535);
        break;
    case 'R':
        o->replica = 1;
        break;
    }
}

static int parse_options(int argc, char **argv, struct bench_options *common, struct dir_options *o)
{
    static const struct option longopts[] = {
        {"nodes", required_argument, NULL, 'n'},  {"objects", required_argument, NULL, 'o'},
        {"window", required_argument, NULL, 'w'}, {"redis-port", required_argument, NULL, 'r'},
        {"replica", no_argument, NULL, 'R'},      {NULL, 0, NULL, 0},
    };
    const struct bench_suite_options suite = {
        .name = "directory",
        .default_sizes = "4K,64K,1M",
        .longopts = longopts,
        .handle = handle_option,
        .ctx = o,
        .synopsis = "usage: ferry-bench directory [--nodes N] [--objects M] [--window W]\n"
                    "                             [--redis-port N | --replica] [--sizes LIST]\n"
                    "                             [--seconds S] [--json]\n",
        .help = "  --nodes N        simulated nodes, one thread each (default 8)\n"
                "  --objects M      objects each publishes and looks up (default 20000)\n"
                "  --window W       lookups outstanding per node, and redis-benchmark's -P\n"
                "                   (default 32)\n"
                "  --redis-port N   use the redis-server on 127.0.0.1:N (its database 15)\n"
                "  --replica        give the redis-server started here a replica (what a\n"
                "                   Sentinel-managed pair costs the master)\n"
                "  --sizes LIST     object sizes of the strict-ids puts (default 4K,64K,1M)\n",
    };
    *o = (struct dir_options){.nodes = 8, .objects = 20000, .window = 32};
    return bench_parse_options(argc, argv, &suite, common);
}

/* What the directory, then a strict seal, add to a put at each size, and the directory to
 * bursts of puts without a message: the p50s and the rates side by side, into buf. */
static void put_notes(const struct bench_result *r, size_t n, const struct bench_options *c,
                      double cpu_put, char *buf, size_t len)
{
    static const struct {
        const char *title, *op, *with, *base;
    } pass[] = {
        {"put, on a cluster node against a node alone:\n", "put", "ferry", "ferry-alone"},
        {"put p50, --strict-ids against without:\n", "put", "ferry-strict", "ferry"},
        {"nowait+flush (a burst of 64), on a cluster node against a node alone:\n", "nowait+flush",
         "ferry", "ferry-alone"},
    };
    size_t at = 0;

    for (size_t k = 0; k < sizeof(pass) / sizeof(pass[0]) && at < len; k++) {
        at += (size_t)snprintf(buf + at, len - at, "%s", pass[k].title);
        for (size_t i = 0; i < c->nsizes && at < len; i++) {
            const struct bench_result *s = bench_find(r, n, pass[k].with, pass[k].op, c->sizes[i]);
            const struct bench_result *p = bench_find(r, n, pass[k].base, pass[k].op, c->sizes[i]);
            char label[16];
            bench_size_label(c->sizes[i], label, sizeof(label));
            if (s && p)
                at += (size_t)snprintf(buf + at, len - at,
                                       "  %-6s p50 %9.1f us against %9.1f us: +%.1f us (x%.2f);"
                                       " ops/s x%.2f\n",
                                       label, s->p50_us, p->p50_us, s->p50_us - p->p50_us,
                                       s->p50_us / p->p50_us, s->ops_per_sec / p->ops_per_sec);
        }
    }
    if (at < len)
        snprintf(buf + at, len - at,
                 "redis-server CPU per put of %" PRIu64 " bytes on the cluster node, its "
                 "publication and its withdrawal (%d puts, each deleted): %.2f us\n",
                 c->sizes[0], CPU_PUTS, cpu_put);
}

int bench_directory(int argc, char **argv)
{
    struct bench_options common;
    struct dir_options o;
    struct dir_run run = {.o = &o, .nonce = bench_nonce()};
    double rate[PHASES], hset, hgetall, per_object, cpu_publish, cpu_hset, cpu_hgetall, cpu_put;
    char preamble[1280], command[128], url[64];
    int status = parse_options(argc, argv, &common, &o), ports[MAX_NODES_PUT];

    if (status >= 0)
        return status;
    log_set_level(LOG_WARN); /* the simulated nodes' registrations are not news */
    if (common.repeat > 1)
        bench_fail("the directory suite has no ratios to repeat: --repeat is for local and remote");
    if (o.replica && o.redis_port)
        bench_fail("--replica starts its own pair: not with --redis-port");
    void *redis = redis_peer_start(o.redis_port);
    int port = redis_peer_port(redis);
    if (o.replica)
        redis_peer_start_replica(redis);
    snprintf(run.url, sizeof(run.url), "redis://127.0.0.1:%d/%d", port, DB);

    run_nodes(&run, redis, rate, &per_object, &cpu_publish);
    snprintf(command, sizeof(command), "HSET ferry:bench:%" PRIx64 ":__rand_int__ h:node 1",
             run.nonce);
    hset = redis_benchmark(&run, redis, port, command, &cpu_hset);
    snprintf(command, sizeof(command), "HGETALL ferry:bench:%" PRIx64 ":__rand_int__", run.nonce);
    hgetall = redis_benchmark(&run, redis, port, command, &cpu_hgetall);
    drop_reference_keys(redis, run.nonce, o.nodes * o.objects);

    /* Strict ids: two nodes of one cluster (a database of its own), strict and not. */
    uint64_t max_size = common.sizes[common.nsizes - 1];
    const uint8_t *payload = bench_alloc_faulted(max_size);
    const struct bench_op *ops[MAX_OPS];
    struct bench_set set;
    char notes[2048];
    const struct bench_limits lim = {
        .seconds = common.seconds, .min_iters = 20, .max_iters = 100000};
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d/%d", port, DB - 1);
    bench_free_ports(ports, MAX_NODES_PUT);
    for (int k = PUT_CLUSTER; k <= PUT_ALONE; k++)
        ops[k] = put_node((enum put_kind)k, url, ports[k], payload, run.nonce);
    ops[MAX_NODES_PUT] = &burst_ops[PUT_CLUSTER];
    ops[MAX_NODES_PUT + 1] = &burst_ops[PUT_ALONE];
    bench_measure_rounds(ops, MAX_OPS, &common, &lim, 0, &set);
    cpu_put = redis_cpu_per_put(redis, DB - 1, &put_ctx[PUT_CLUSTER], common.sizes[0]);
    put_notes(set.summary, set.n, &common, cpu_put, notes, sizeof(notes));

    snprintf(preamble, sizeof(preamble),
             "directory: redis-server 127.0.0.1:%d%s; %" PRIu64 " simulated nodes x %" PRIu64
             " objects, %" PRIu64 " lookups outstanding per node\n"
             "  publishes/s (real directory code)   %12.0f   redis-benchmark HSET    %12.0f"
             "   ratio %.2f\n"
             "  lookups/s   (real directory code)   %12.0f   redis-benchmark HGETALL %12.0f"
             "   ratio %.2f\n"
             "  (a publication is one script of a few commands; a lookup one script reading"
             " the object's entry and its first holders')\n"
             "  redis-server CPU per publication %.2f us, per HSET %.2f us (x%.2f);"
             " per HGETALL %.2f us\n"
             "  directory memory: %.0f bytes per published object (used_memory of redis-server)\n\n"
             "ferry put on a cluster node (ferry), one with --strict-ids (ferry-strict) and a "
             "node without a directory (ferry-alone):\n",
             port, o.replica ? " with a replica" : "", o.nodes, o.objects, o.window, rate[PUBLISH],
             hset, rate[PUBLISH] / hset, rate[LOOKUP], hgetall, rate[LOOKUP] / hgetall, cpu_publish,
             cpu_hset, cpu_publish / cpu_hset, cpu_hgetall, per_object);
    bench_report(&(struct bench_report){
        .suite = "directory",
        .opts = &common,
        .preamble = preamble,
        .notes = notes,
        .results = set.summary,
        .nresults = set.n,
    });
    free((void *)payload);
    return 0;
}
