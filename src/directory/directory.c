/*
 * directory.c - the cluster directory: opening it (the URL, the configuration), the interface
 * of directory.h, and the fields of node entries.
 */
#include "directory/directory_int.h"

#include <openssl/crypto.h>

#include <sys/random.h>
#include <time.h>

/* Doubles an array's capacity (*cap elements of elem bytes). NULL, the array unchanged, when
 * out of memory. */
void *dir_grow(void *array, size_t *cap, size_t elem)
{
    size_t n = *cap ? *cap * 2 : 8;
    void *p = realloc(array, n * elem);

    if (p)
        *cap = n;
    return p;
}

/* Arms t; a timer heap that cannot grow (the process is out of memory) is logged. */
void dir_arm(struct directory *d, struct loop_timer *t, uint64_t deadline_ms)
{
    if (loop_timer_start(d->loop, t, deadline_ms) < 0)
        log_error("directory: %s", ferry_errmsg());
}

/* Has the turn timer run the deferred work (hook, publications, answers) as soon as it can. */
void dir_turn_soon(struct directory *d)
{
    if (d->turn.heap_index == SIZE_MAX)
        dir_arm(d, &d->turn, loop_now_ms());
}

void dir_entry_key(char key[NODE_KEY_MAX], const char *node_id)
{
    snprintf(key, NODE_KEY_MAX, NODE_PREFIX "%s", node_id);
}

void dir_held_key(char key[HELD_KEY_MAX], const char *node_id)
{
    snprintf(key, HELD_KEY_MAX, HELD_PREFIX "%s", node_id);
}

void dir_holders_key(char key[OBJ_KEY_MAX], const ferry_id *id)
{
    char hex[2 * FERRY_ID_SIZE + 1];

    ferry_id_format(id, hex);
    snprintf(key, OBJ_KEY_MAX, OBJ_PREFIX "%s", hex);
}

/* Copies a string reply into out (cap bytes with the NUL); 0 when it is not a string, does
 * not fit, or holds a byte outside printable ASCII (what Redis gives back ends up in logs and
 * in messages to users: no control characters). */
int dir_string_copy(char *out, size_t cap, const redisReply *v)
{
    if (v->type != REDIS_REPLY_STRING || v->len >= cap)
        return 0;
    for (size_t i = 0; i < v->len; i++) {
        if (v->str[i] < 0x20 || v->str[i] > 0x7e)
            return 0;
    }
    memcpy(out, v->str, v->len);
    out[v->len] = '\0';
    return 1;
}

/* A string reply of only digits of base (10, or 16 for digests) that fits a u64, into *out
 * (left alone otherwise); 0 when it is not one. */
int dir_reply_u64(const redisReply *v, int base, uint64_t *out)
{
    const char *digits = base == 16 ? "0123456789abcdefABCDEF" : "0123456789";
    char text[U64_TEXT], *end;
    uint64_t x;

    if (!dir_string_copy(text, sizeof(text), v) || !text[0] || strspn(text, digits) != strlen(text))
        return 0;
    errno = 0;
    x = strtoull(text, &end, base);
    if (errno || *end != '\0')
        return 0;
    *out = x;
    return 1;
}

void directory_inc_time(uint64_t inc, char *buf, size_t len)
{
    time_t t = (time_t)((inc >> 12) / 1000);
    struct tm tm;

    if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, len, "%" PRIu64, inc);
}

/* This run's incarnation: the start time in ms, times 4096, plus 12 random bits (two runs
 * of a node started in the same millisecond still differ). */
static int make_incarnation(uint64_t *inc)
{
    struct timespec ts;
    uint16_t noise;

    if (getrandom(&noise, sizeof(noise), 0) != sizeof(noise))
        return err_sys("getrandom");
    clock_gettime(CLOCK_REALTIME, &ts);
    *inc = ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000) << 12 | (noise & 0xfff);
    return 0;
}

const char *directory_node_addr(const struct directory_node *n, const char *transport)
{
    for (uint32_t i = 0; i < n->nxp; i++)
        if (strcmp(n->xp[i].name, transport) == 0)
            return n->xp[i].addr;
    return NULL;
}

int directory_node_set(struct directory_node *n, const char *transport, const char *addr)
{
    uint32_t i = 0;

    if (strlen(transport) > DIRECTORY_XPORT_NAME_MAX || strlen(addr) > DIRECTORY_XPORT_ADDR_MAX)
        return err_set(FERRY_EINVAL, "directory: transport %.16s: name or address too long",
                       transport);
    while (i < n->nxp && strcmp(n->xp[i].name, transport) != 0)
        i++;
    if (i == DIRECTORY_XPORTS)
        return err_set(FERRY_EINVAL, "directory: more than %d transports", DIRECTORY_XPORTS);
    snprintf(n->xp[i].name, sizeof(n->xp[i].name), "%s", transport);
    snprintf(n->xp[i].addr, sizeof(n->xp[i].addr), "%s", addr);
    if (i == n->nxp)
        n->nxp++;
    return 0;
}

void directory_node_names(const struct directory_node *n, char *buf, size_t len)
{
    size_t at = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < n->nxp && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? "," : "", n->xp[i].name);
}

/* The error a reply reports, also among its elements (EXEC's replies); NULL when none. */
const char *dir_reply_error(const redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        return r->str;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        if (r->element[i]->type == REDIS_REPLY_ERROR)
            return r->element[i]->str;
    }
    return NULL;
}

const char *dir_reply_why(const redisReply *r)
{
    const char *why = dir_reply_error(r);

    return why ? why : "unexpected reply";
}

/* A failed command: counted, and logged at most once per WARN_INTERVAL_MS (a Redis refusing
 * every write, e.g. for want of memory, would flood the log). */
void dir_command_failed(struct directory *d, const char *what, const char *why)
{
    uint64_t now = loop_now_ms();

    char text[128];
    size_t i;

    d->counters.errors++;
    if (now - d->last_warn_ms < WARN_INTERVAL_MS)
        return;
    d->last_warn_ms = now;
    /* Redis's text, printable only: it goes to the log as it is. */
    for (i = 0; why[i] && i < sizeof(text) - 1; i++)
        text[i] = why[i] >= 0x20 && why[i] <= 0x7e ? why[i] : '?';
    text[i] = '\0';
    log_warn("directory: %s failed: %s (%" PRIu64 " errors so far)", what, text,
             d->counters.errors);
}

/* A decimal number in [s, end) within [min, max]; -1 otherwise. */
static int parse_number(const char *s, const char *end, long min, long max, long *out)
{
    char *stop;

    if (s == end || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *out = strtol(s, &stop, 10);
    return stop == end && !errno && *out >= min && *out <= max ? 0 : -1;
}

/* Resolves host to an IPv4 address into ip, once: getaddrinfo blocks, which the loop cannot
 * afford on every reconnection. */
static int resolve(const char *host, char ip[INET_ADDRSTRLEN])
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, NULL, &hints, &res);

    if (rc != 0)
        return err_set(FERRY_EINVAL, "directory URL: cannot resolve %s: %s", host,
                       gai_strerror(rc));
    inet_ntop(AF_INET, &((const struct sockaddr_in *)res->ai_addr)->sin_addr, ip, INET_ADDRSTRLEN);
    freeaddrinfo(res);
    return 0;
}

/* HOST:PORT in [s, end), resolved into ip and port. */
static int parse_hostport(const char *url, const char *s, const char *end, char ip[INET_ADDRSTRLEN],
                          int *port)
{
    const char *colon = memchr(s, ':', (size_t)(end - s));
    char name[HOST_MAX];
    long p;

    if (!colon || colon == s || (size_t)(colon - s) >= sizeof(name))
        return err_set(FERRY_EINVAL, "directory URL %s: expected HOST:PORT", url);
    if (parse_number(colon + 1, end, 1, 65535, &p) < 0)
        return err_set(FERRY_EINVAL, "directory URL %s: bad port", url);
    memcpy(name, s, (size_t)(colon - s));
    name[colon - s] = '\0';
    *port = (int)p;
    return resolve(name, ip);
}

/* [/DB] at s (end of string or "/N"). */
static int parse_db(struct directory *d, const char *url, const char *s)
{
    long db = 0;

    if (*s && parse_number(s + 1, s + strlen(s), 0, 1000000, &db) < 0)
        return err_set(FERRY_EINVAL, "directory URL %s: bad database number", url);
    d->db = (int)db;
    return 0;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* [s, end) percent-decoded into out (cap bytes with its NUL); no NUL byte may result. */
static int decode_part(const char *s, const char *end, char *out, size_t cap)
{
    size_t n = 0;

    for (; s < end; s++) {
        int c = (unsigned char)*s;
        if (c == '%') {
            int hi = end - s >= 3 ? hex_digit(s[1]) : -1;
            int lo = hi >= 0 ? hex_digit(s[2]) : -1;
            if (lo < 0 || (c = hi << 4 | lo) == 0)
                return -1;
            s += 2;
        }
        if (n + 1 >= cap)
            return -1;
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return 0;
}

/* [[USER]:PASSWORD@] at *rest (before the first '/'; the last '@' ends it), percent-decoded
 * into d->user and d->password; *rest then points after it. */
static int parse_credentials(struct directory *d, const char **rest)
{
    const char *slash = strchr(*rest, '/'), *end = slash ? slash : *rest + strlen(*rest);
    const char *at = NULL, *colon;

    for (const char *p = *rest; p < end; p++)
        if (*p == '@')
            at = p;
    if (!at)
        return 0;
    colon = memchr(*rest, ':', (size_t)(at - *rest));
    if (!colon)
        return err_set(FERRY_EINVAL, "directory URL: expected [USER]:PASSWORD@ before the host");
    if (decode_part(*rest, colon, d->user, sizeof(d->user)) < 0 ||
        decode_part(colon + 1, at, d->password, sizeof(d->password)) < 0 || !d->password[0])
        return err_set(FERRY_EINVAL,
                       "directory URL: a user of at most %d and a password of 1 to %d bytes "
                       "(percent-encoded, no %%00)",
                       USER_MAX, PASSWORD_MAX);
    *rest = at + 1;
    return 0;
}

/* redis://HOST:PORT[/DB] */
static int parse_redis(struct directory *d, const char *url, const char *rest)
{
    const char *slash = strchr(rest, '/');
    const char *end = slash ? slash : rest + strlen(rest);
    int rc;

    if ((rc = parse_hostport(url, rest, end, d->ip, &d->port)) < 0 ||
        (rc = parse_db(d, url, end)) < 0)
        return rc;
    snprintf(d->where, sizeof(d->where), "%.*s/%d", (int)(end - rest), rest, d->db);
    return 0;
}

/* redis-sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB] */
static int parse_sentinel(struct directory *d, const char *url, const char *rest)
{
    const char *slash = strchr(rest, '/'), *s = rest, *name, *name_end;
    int rc;

    if (!slash)
        return err_set(FERRY_EINVAL, "directory URL %s: expected /MASTERNAME after the sentinels",
                       url);
    for (;;) { /* at least one HOST:PORT, and none empty */
        const char *comma = memchr(s, ',', (size_t)(slash - s));
        const char *end = comma ? comma : slash;
        struct sentinel_addr *a = &d->sentinels[d->nsentinels];
        if (d->nsentinels == SENTINELS_MAX)
            return err_set(FERRY_EINVAL, "directory URL %s: more than %d sentinels", url,
                           SENTINELS_MAX);
        if ((rc = parse_hostport(url, s, end, a->ip, &a->port)) < 0)
            return rc;
        d->nsentinels++;
        if (!comma)
            break;
        s = comma + 1;
    }
    name = slash + 1;
    name_end = strchr(name, '/');
    if (!name_end)
        name_end = name + strlen(name);
    if (name_end == name || (size_t)(name_end - name) > MASTER_NAME_MAX ||
        memchr(name, ' ', (size_t)(name_end - name)))
        return err_set(FERRY_EINVAL, "directory URL %s: a master name of 1 to %d characters", url,
                       MASTER_NAME_MAX);
    memcpy(d->master, name, (size_t)(name_end - name));
    d->master[name_end - name] = '\0';
    if ((rc = parse_db(d, url, name_end)) < 0)
        return rc;
    snprintf(d->where, sizeof(d->where), "master %s/%d (by %d sentinels)", d->master, d->db,
             d->nsentinels);
    return 0;
}

static int parse_url(struct directory *d, const char *url)
{
    static const char redis[] = "redis://", sentinel[] = "redis-sentinel://";

    const char *rest;
    int rc;

    if (url && strncmp(url, redis, strlen(redis)) == 0) {
        rest = url + strlen(redis);
        if ((rc = parse_credentials(d, &rest)) < 0)
            return rc;
        return parse_redis(d, rest, rest);
    }
    if (url && strncmp(url, sentinel, strlen(sentinel)) == 0) {
        rest = url + strlen(sentinel);
        if ((rc = parse_credentials(d, &rest)) < 0)
            return rc;
        return parse_sentinel(d, rest, rest);
    }
    return err_set(FERRY_EINVAL,
                   "directory URL: expected redis://[[USER]:PASSWORD@]HOST:PORT[/DB] or "
                   "redis-sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]");
}

int directory_check_url(const char *url)
{
    struct directory *d = calloc(1, sizeof(*d));
    int rc;

    if (!d)
        return err_set(FERRY_ENOMEM, "directory URL check");
    rc = parse_url(d, url);
    OPENSSL_cleanse(d->password, sizeof(d->password));
    free(d);
    return rc;
}

static int field_valid(const char *s, size_t cap, int may_be_empty)
{
    size_t len = strnlen(s, cap);

    return len < cap && (len > 0 || may_be_empty);
}

/* Takes the configuration, with its defaults. */
static int configure(struct directory *d, const struct directory_config *cfg)
{
    const struct directory_node *self = &cfg->self;
    int rc;

    if (!field_valid(self->id, sizeof(self->id), 0))
        return err_set(FERRY_EINVAL, "directory: the node id must have 1 to %d characters",
                       DIRECTORY_NODE_ID_MAX);
    if (!field_valid(self->addr, sizeof(self->addr), 0))
        return err_set(FERRY_EINVAL, "directory: the node address must have 1 to %d characters",
                       DIRECTORY_ADDR_MAX);
    if (self->nxp > DIRECTORY_XPORTS)
        return err_set(FERRY_EINVAL, "directory: %u transports, at most %d", (unsigned)self->nxp,
                       DIRECTORY_XPORTS);
    for (uint32_t i = 0; i < self->nxp; i++)
        if (!field_valid(self->xp[i].name, sizeof(self->xp[i].name), 0) ||
            !field_valid(self->xp[i].addr, sizeof(self->xp[i].addr), 0))
            return err_set(FERRY_EINVAL, "directory: transport %u: empty or too long", i);
    if (cfg->secret_len > sizeof(d->secret))
        return err_set(FERRY_EINVAL, "directory: a secret of %zu bytes, at most %zu",
                       cfg->secret_len, sizeof(d->secret));
    if (cfg->secret && cfg->secret_len) {
        memcpy(d->secret, cfg->secret, cfg->secret_len);
        d->secret_len = cfg->secret_len;
    }
    d->self = *self;
    if ((rc = make_incarnation(&d->self.inc)) < 0)
        return rc;
    snprintf(d->inc_text, sizeof(d->inc_text), "%" PRIu64, d->self.inc);
    d->heartbeat_ms = cfg->heartbeat_ms ? cfg->heartbeat_ms : DEFAULT_HEARTBEAT_MS;
    d->ttl_ms = cfg->ttl_ms ? cfg->ttl_ms : DEFAULT_TTL_MS;
    d->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
    if (d->ttl_ms <= d->heartbeat_ms)
        return err_set(FERRY_EINVAL, "directory: the TTL (%u ms) must exceed the heartbeat (%u ms)",
                       (unsigned)d->ttl_ms, (unsigned)d->heartbeat_ms);
    return parse_url(d, cfg->url);
}

int directory_open(struct directory **out, struct loop *l, const struct directory_config *cfg,
                   const struct directory_hooks *hooks)
{
    struct directory *d = calloc(1, sizeof(*d));
    int rc;

    *out = NULL;
    if (!d)
        return err_set(FERRY_ENOMEM, "directory");
    if ((rc = dir_scripts_init()) < 0 || (rc = configure(d, cfg)) < 0)
        goto free_directory;
    d->loop = l;
    if (hooks)
        d->hooks = *hooks;
    d->watch.fd = -1;
    d->done_tail = &d->done;
    d->backoff_ms = BACKOFF_MIN_MS;
    loop_timer_init(&d->reconnect, dir_on_reconnect, d);
    loop_timer_init(&d->watchdog, dir_on_watchdog, d);
    loop_timer_init(&d->heartbeat, dir_on_heartbeat, d);
    loop_timer_init(&d->turn, dir_on_turn, d);
    loop_timer_init(&d->events, dir_on_events_timer, d);
    loop_timer_init(&d->leave_timer, dir_on_leave_timer, d);
    dir_connect_start(d);
    *out = d;
    return 0;

free_directory:
    free(d);
    return rc;
}

void directory_close(struct directory *d)
{
    if (!d)
        return;
    d->closing = 1;
    if (d->ac)
        redisAsyncFree(d->ac); /* fails the pending requests: they join the done list */
    loop_timer_stop(d->loop, &d->reconnect);
    loop_timer_stop(d->loop, &d->turn);
    loop_timer_stop(d->loop, &d->leave_timer);
    dir_queue_drop(d); /* its requests join the done list */
    while (d->done)
        dir_request_free(dir_done_pop(d));
    free(d->heard);
    free(d->queue);
    idmap_free(&d->owed);
    dir_cache_clear(&d->holders);
    dir_cache_clear(&d->nodes);
    OPENSSL_cleanse(d->secret, sizeof(d->secret));
    OPENSSL_cleanse(d->password, sizeof(d->password));
    free(d);
}

/* Appends a length, then the text. */
static size_t sig_put(char *buf, size_t at, size_t cap, const char *text)
{
    int n = snprintf(buf + at, cap - at, "%zu:%s", strlen(text), text);
    return n < 0 || (size_t)n >= cap - at ? cap : at + (size_t)n;
}

int dir_node_sign(const struct directory *d, const struct directory_node *n, char hex[DIR_SIG_HEX])
{
    char msg[64 + 2 * (DIRECTORY_NODE_ID_MAX + DIRECTORY_ADDR_MAX) +
             DIRECTORY_XPORTS * (DIRECTORY_XPORT_NAME_MAX + DIRECTORY_XPORT_ADDR_MAX + 16)];
    const struct directory_xport *xp[DIRECTORY_XPORTS];
    char inc[U64_TEXT];
    uint8_t mac[MAC_LEN];
    size_t at = 0, cap = sizeof(msg);
    uint32_t nxp = n->nxp < DIRECTORY_XPORTS ? n->nxp : DIRECTORY_XPORTS;

    for (uint32_t i = 0; i < nxp; i++) { /* by name: Redis gives fields in any order */
        uint32_t j = i;
        for (; j > 0 && strcmp(xp[j - 1]->name, n->xp[i].name) > 0; j--)
            xp[j] = xp[j - 1];
        xp[j] = &n->xp[i];
    }
    snprintf(inc, sizeof(inc), "%" PRIu64, n->inc);
    at = sig_put(msg, at, cap, "ferry node 1");
    at = sig_put(msg, at, cap, n->id);
    at = sig_put(msg, at, cap, inc);
    at = sig_put(msg, at, cap, n->addr);
    for (uint32_t i = 0; i < nxp; i++) {
        at = sig_put(msg, at, cap, xp[i]->name);
        at = sig_put(msg, at, cap, xp[i]->addr);
    }
    if (at >= cap)
        return err_set(FERRY_ESYS, "node entry too long to sign");
    if (mac_sha256(d->secret, d->secret_len, &(struct mac_part){msg, at}, 1, mac) < 0)
        return FERRY_ESYS;
    for (size_t i = 0; i < MAC_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    return 0;
}

int directory_connected(const struct directory *d)
{
    return d->up;
}

const char *directory_where(const struct directory *d)
{
    return d->where;
}

const struct directory_counters *directory_counters(const struct directory *d)
{
    return &d->counters;
}

uint64_t directory_incarnation(const struct directory *d)
{
    return d->self.inc;
}

void directory_publish(struct directory *d, const ferry_id *id, uint64_t size, uint64_t digest)
{
    struct pubop op = {.id = *id, .kind = OP_PUBLISH, .size = size, .digest = digest};

    (void)dir_queue_push(d, &op); /* while down: the republish after the next registration */
}

void directory_withdraw(struct directory *d, const ferry_id *id)
{
    struct pubop op = {.id = *id, .kind = OP_WITHDRAW};
    static char owed_mark;

    if (dir_queue_push(d, &op) == FERRY_EDIRECTORY && !d->leaving && !d->closing &&
        (d->owed.count < OWED_MAX || idmap_get(&d->owed, id)) &&
        idmap_put(&d->owed, id, &owed_mark) < 0)
        dir_command_failed(d, "withdraw", "out of memory to keep it for the next connection");
}

int directory_lookup(struct directory *d, const ferry_id *id, int fresh, directory_answer_fn *cb,
                     void *arg)
{
    struct request *r = dir_request_new(REQ_LOOKUP, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory lookup");
    r->id = *id;
    r->fresh = fresh;
    if (!fresh && dir_answer_from_cache(d, r)) {
        d->counters.cache_hits++;
        dir_done_push(d, r);
        return 0;
    }
    dir_lookup_start(d, r);
    return 0;
}

int directory_nodes(struct directory *d, directory_answer_fn *cb, void *arg)
{
    struct request *r = dir_request_new(REQ_NODES, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory node listing");
    dir_nodes_start(d, r);
    return 0;
}

int directory_claim(struct directory *d, const ferry_id *id, uint64_t size, uint64_t digest,
                    directory_answer_fn *cb, void *arg)
{
    struct request *r = dir_request_new(REQ_CLAIM, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory claim");
    r->id = *id;
    dir_claim_start(d, r, size, digest);
    return 0;
}

int directory_delete(struct directory *d, const ferry_id *id, directory_answer_fn *cb, void *arg)
{
    struct request *r = dir_request_new(REQ_DELETE, cb, arg);

    if (!r)
        return err_set(FERRY_ENOMEM, "directory delete");
    r->id = *id;
    free(idmap_remove(&d->holders, id));
    dir_delete_start(d, r);
    return 0;
}

void directory_leave(struct directory *d, uint32_t deadline_ms, void (*cb)(void *arg), void *arg)
{
    d->leave_cb = cb;
    d->leave_arg = arg;
    d->left = 0;
    d->leave_deadline_ms = loop_now_ms() + deadline_ms;
    dir_leave_start(d);
}

void directory_cancel(struct directory *d, void *arg)
{
    dir_cancel_in(d->pending, arg);
    dir_cancel_in(d->done, arg);
}

void directory_forget_holder(struct directory *d, const ferry_id *id, const char *node_id)
{
    struct cached_holders *h = idmap_get(&d->holders, id);

    if (!h)
        return;
    dir_holders_drop(h, node_id);
    if (!h->n)
        free(idmap_remove(&d->holders, id));
}

/* Holder lists left empty stay in the cache (an empty list is a miss) until replaced or
 * cleared: the map cannot change while it is being iterated. */
void directory_forget_node(struct directory *d, const char *node_id)
{
    ferry_id key;
    const struct cached_node *c;
    struct cached_holders *h;
    size_t pos = 0;

    dir_node_cache_key(node_id, &key);
    c = idmap_get(&d->nodes, &key);
    if (c && strcmp(c->node.id, node_id) == 0)
        free(idmap_remove(&d->nodes, &key));
    while ((h = idmap_next(&d->holders, &pos, NULL)))
        dir_holders_drop(h, node_id);
}
