/*
 * dir_redis.c - the Redis vocabulary the files share: the keys of entries, reading replies,
 * failed commands, what is not believed and keys of the wrong type (counted, logged
 * sparingly). It calls no other file of the unit.
 */
#include "directory/directory_int.h"

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

int dir_reply_digest(const redisReply *v, uint8_t out[DIGEST_LEN])
{
    return v->type == REDIS_REPLY_STRING && digest_parse(v->str, v->len, out) == 0;
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
    for (i = 0; i < sizeof(text) - 1 && why[i]; i++)
        text[i] = why[i] >= 0x20 && why[i] <= 0x7e ? why[i] : '?';
    text[i] = '\0';
    log_warn("directory: %s failed: %s (%" PRIu64 " errors so far)", what, text,
             d->counters.errors);
}

void dir_distrust(struct directory *d, enum distrust k, uint64_t *count, const char *fmt, ...)
{
    uint64_t now = loop_now_ms();
    va_list ap;
    char text[512];

    ++*count;
    if (d->warned_ms[k] && now - d->warned_ms[k] < DISTRUST_INTERVAL_MS)
        return;
    d->warned_ms[k] = now;
    va_start(ap, fmt);
    /* ap is started (va_start); clang 14 misreads that on x86-64: LLVM issue 40656. */
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    log_warn("directory: %s (%" PRIu64 " so far, logged once a minute at most)", text, *count);
}

void dir_bad_key(struct directory *d, const char *what)
{
    dir_distrust(d, DISTRUST_KEY, &d->counters.bad_keys, "a key of the wrong type: %.200s", what);
}

int dir_wrongtype(const redisReply *r)
{
    const char *why = dir_reply_error(r);

    return why && strncmp(why, "WRONGTYPE", 9) == 0;
}
