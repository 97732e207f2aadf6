/* engine_timers.c - the protocol timers' configuration text (ferryd --timers). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "transfer/engine.h"

static uint32_t *timer_field(struct engine_timers *t, const char *name, size_t len)
{
    static const struct {
        const char *name;
        size_t offset;
    } fields[] = {
        {"stall", offsetof(struct engine_timers, stall_ms)},
        {"handshake", offsetof(struct engine_timers, handshake_ms)},
        {"answer", offsetof(struct engine_timers, answer_ms)},
        {"breaker", offsetof(struct engine_timers, breaker_ms)},
        {"lease", offsetof(struct engine_timers, lease_ms)},
        {"rate", offsetof(struct engine_timers, rate_ms)},
        {"orphan", offsetof(struct engine_timers, orphan_ms)},
        {"relay", offsetof(struct engine_timers, relay_ms)},
    };

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (strlen(fields[i].name) == len && memcmp(fields[i].name, name, len) == 0)
            return (uint32_t *)((char *)t + fields[i].offset);
    return NULL;
}

/* One NAME=MS of text (up to its end or a comma). */
static int timer_parse_one(const char *item, size_t len, struct engine_timers *t)
{
    const char *eq = memchr(item, '=', len);
    uint32_t *field = eq ? timer_field(t, item, (size_t)(eq - item)) : NULL;
    unsigned long min = field == &t->lease_ms ? ENGINE_LEASE_MIN_MS : ENGINE_TIMER_MIN_MS;
    char *end;
    unsigned long v;

    if (!field)
        return err_set(FERRY_EINVAL,
                       "timer '%.*s': expected NAME=MS, NAME one of stall, handshake, answer, "
                       "breaker, lease, rate, orphan, relay",
                       (int)len, item);
    v = strtoul(eq + 1, &end, 10);
    if (end != item + len || !isdigit((unsigned char)eq[1]) || v < min || v > ENGINE_TIMER_MAX_MS)
        return err_set(FERRY_EINVAL, "timer '%.*s': expected milliseconds from %lu to %d", (int)len,
                       item, min, ENGINE_TIMER_MAX_MS);
    *field = (uint32_t)v;
    return 0;
}

int engine_timers_parse(const char *text, struct engine_timers *t)
{
    struct engine_timers parsed = *t;
    int rc;

    if (!*text)
        return err_set(FERRY_EINVAL, "timers: expected NAME=MS[,NAME=MS...]");
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if ((rc = timer_parse_one(p, len, &parsed)) < 0)
            return rc;
        if (!comma)
            break;
        p = comma + 1;
    }
    *t = parsed;
    return 0;
}
