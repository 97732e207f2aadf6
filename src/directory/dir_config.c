/*
 * dir_config.c - the configuration at open: its checks and defaults, this run's incarnation,
 * and the URL (redis:// or redis-sentinel://, with credentials). It calls no other file of
 * the unit.
 */
#include "directory/directory_int.h"

#include <openssl/crypto.h>

#include <sys/random.h>
#include <time.h>

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

/* [[USER]:PASSWORD@] or USER@ at *rest (before the first '/'; the last '@' ends it),
 * percent-decoded into d->user and d->password (USER@ leaves the password to
 * directory_config.password); *rest then points after it. */
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
    if (dir_percent_decode(*rest, colon ? colon : at, d->user, sizeof(d->user)) < 0 ||
        (colon && (dir_percent_decode(colon + 1, at, d->password, sizeof(d->password)) < 0 ||
                   !d->password[0])))
        return err_set(FERRY_EINVAL,
                       "directory URL: a user of at most %d and a password of 1 to %d bytes "
                       "(percent-encoded, no %%00)",
                       USER_MAX, DIRECTORY_PASSWORD_MAX);
    *rest = at + 1;
    return 0;
}

/* The password from outside the URL (a file, the environment), if any: one place only, and
 * a user in the URL needs one from somewhere. */
static int take_password(struct directory *d, const char *password)
{
    size_t len = password ? strlen(password) : 0;

    if (password && d->password[0])
        return err_set(FERRY_EINVAL, "directory: a password in the URL and another given apart "
                                     "(file or environment): give one");
    if (password && (len == 0 || len > DIRECTORY_PASSWORD_MAX))
        return err_set(FERRY_EINVAL, "directory: a password of 1 to %d bytes, not %zu",
                       DIRECTORY_PASSWORD_MAX, len);
    if (password)
        memcpy(d->password, password, len + 1);
    if (d->user[0] && !d->password[0])
        return err_set(FERRY_EINVAL,
                       "directory URL: user '%s' but no password (in the URL, "
                       "a password file or the environment)",
                       d->user);
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

int directory_check_url(const char *url, const char *password)
{
    struct directory *d = calloc(1, sizeof(*d));
    int rc;

    if (!d)
        return err_set(FERRY_ENOMEM, "directory URL check");
    rc = parse_url(d, url);
    if (rc == 0)
        rc = take_password(d, password);
    OPENSSL_cleanse(d->password, sizeof(d->password));
    free(d);
    return rc;
}

static int field_valid(const char *s, size_t cap, int may_be_empty)
{
    size_t len = strnlen(s, cap);

    return len < cap && (len > 0 || may_be_empty);
}

int dir_configure(struct directory *d, const struct directory_config *cfg)
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
    d->opened_ms = loop_now_ms();
    d->heartbeat_ms = cfg->heartbeat_ms ? cfg->heartbeat_ms : DIRECTORY_HEARTBEAT_MS;
    d->ttl_ms = cfg->ttl_ms ? cfg->ttl_ms : DIRECTORY_TTL_MS;
    d->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : DIRECTORY_TIMEOUT_MS;
    if ((rc = directory_ttl_short(d->heartbeat_ms, d->ttl_ms)) < 0)
        return rc;
    if ((rc = parse_url(d, cfg->url)) < 0)
        return rc;
    return take_password(d, cfg->password);
}

int directory_ttl_short(uint32_t heartbeat_ms, uint32_t ttl_ms)
{
    uint32_t hb = heartbeat_ms ? heartbeat_ms : DIRECTORY_HEARTBEAT_MS;
    uint32_t ttl = ttl_ms ? ttl_ms : DIRECTORY_TTL_MS;

    /* A TTL barely past the heartbeat would expire at the first late beat. */
    if (ttl >= 2ull * hb)
        return 0;
    return err_set(FERRY_EINVAL,
                   "--timers: the directory's ttl (%u ms) must be at least twice its heartbeat "
                   "(%u ms)",
                   (unsigned)ttl, (unsigned)hb);
}
