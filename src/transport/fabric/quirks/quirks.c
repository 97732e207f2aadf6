/*
 * quirks.c - which libfabric workarounds are on (the gates and the switch), what they did (the
 * counters), and the errno one. quirks.h says, per workaround, the bug, the upstream fix and
 * the gate.
 */
#include <errno.h>
#include <rdma/fabric.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "transport/fabric/quirks/quirks.h"

/* The first releases without the bug (quirks.h gives the commits). */
#define ERRNO_FIXED FI_VERSION(2, 2)
#define SHM_LOCK_FIXED FI_VERSION(2, 5)

/* Defined by quirk_recv.c, which only ferryd links: 0 here otherwise (a weak reference). */
extern const int quirks_recv_interposer __attribute__((weak));

static const char *const names[QUIRK_N] = {
#define QUIRK_NAME(id, name, help) [id] = #name,
    QUIRKS(QUIRK_NAME)
#undef QUIRK_NAME
};

static _Atomic uint32_t enabled;
static _Atomic uint64_t acted[QUIRK_N];

const char *quirks_name(enum quirk q)
{
    return q < QUIRK_N ? names[q] : "?";
}

int quirks_recv_linked(void)
{
    return &quirks_recv_interposer != NULL;
}

uint32_t quirks_needed(uint32_t version, const char *provider)
{
    uint32_t m = 0;

    if (!provider)
        return 0;
    if (strstr(provider, "tcp")) {
        m |= QUIRK_BIT(QUIRK_RECV); /* no fixed release yet */
        if (version < ERRNO_FIXED)
            m |= QUIRK_BIT(QUIRK_ERRNO);
    }
    if (strcmp(provider, "shm") == 0 && version < SHM_LOCK_FIXED)
        m |= QUIRK_BIT(QUIRK_SHM_LOCK) | QUIRK_BIT(QUIRK_WATCHDOG);
    return m;
}

/* The workaround named by [s, s + n); QUIRK_N for none. */
static enum quirk by_name(const char *s, size_t n)
{
    for (int q = 0; q < QUIRK_N; q++)
        if (strlen(names[q]) == n && strncmp(names[q], s, n) == 0)
            return (enum quirk)q;
    return QUIRK_N;
}

int quirks_switch(uint32_t mask, const char *spec, uint32_t *out)
{
    uint32_t m = mask;

    for (const char *s = spec; s && *s;) {
        size_t n = strcspn(s, ",");
        int on = *s != '-';
        const char *name = *s == '-' || *s == '+' ? s + 1 : s;
        size_t len = n - (size_t)(name - s);
        enum quirk q = by_name(name, len);
        if (len == 4 && strncmp(name, "none", 4) == 0 && on)
            m = 0;
        else if (q == QUIRK_N)
            return err_set(FERRY_EINVAL, "FERRY_FABRIC_QUIRKS: unknown workaround '%.*s'", (int)len,
                           name);
        else
            m = on ? m | QUIRK_BIT(q) : m & ~QUIRK_BIT(q);
        s += n + (s[n] == ',');
    }
    if (!(m & QUIRK_BIT(QUIRK_SHM_LOCK))) /* the watchdog watches the lock the guard found */
        m &= ~QUIRK_BIT(QUIRK_WATCHDOG);
    *out = m;
    return 0;
}

static void say(uint32_t m, uint32_t version, const char *provider)
{
    char list[128] = "";
    size_t at = 0;

    for (int q = 0; q < QUIRK_N; q++)
        if (m & QUIRK_BIT(q))
            at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", at ? "," : "", names[q]);
    log_info("fabric: libfabric %u.%u, provider %s: workarounds on: %s", FI_MAJOR(version),
             FI_MINOR(version), provider, at ? list : "none");
}

uint32_t quirks_init(uint32_t version, const char *provider)
{
    uint32_t m = quirks_needed(version, provider), switched;

    if (quirks_switch(m, getenv("FERRY_FABRIC_QUIRKS"), &switched) < 0)
        log_warn("fabric: %s: ignored", ferry_errmsg());
    else
        m = switched;
    if ((m & QUIRK_BIT(QUIRK_RECV)) && !quirks_recv_linked())
        m &= ~QUIRK_BIT(QUIRK_RECV); /* only ferryd defines recv */
    atomic_store(&enabled, m);
    say(m, version, provider);
    return m;
}

int quirks_enabled(enum quirk q)
{
    return q < QUIRK_N && (atomic_load_explicit(&enabled, memory_order_relaxed) & QUIRK_BIT(q));
}

void quirks_off(enum quirk q)
{
    if (q < QUIRK_N)
        atomic_fetch_and_explicit(&enabled, ~QUIRK_BIT(q), memory_order_relaxed);
}

void quirks_acted(enum quirk q, uint64_t n)
{
    if (q < QUIRK_N)
        atomic_fetch_add_explicit(&acted[q], n, memory_order_relaxed);
}

uint64_t quirks_count(enum quirk q)
{
    return q < QUIRK_N ? atomic_load(&acted[q]) : 0;
}

void quirks_report(xcounter_fn *fn, void *arg)
{
#define QUIRK_REPORT(id, name, help)                                                               \
    fn(arg, "fabric_quirk_" #name, FERRY_STAT_COUNTER, help, quirks_count(id));                    \
    fn(arg, "fabric_quirk_" #name "_on", FERRY_STAT_GAUGE,                                         \
       "1 while the " #name " workaround is on (docs/design/transports.md)",                       \
       (uint64_t)quirks_enabled(id));
    QUIRKS(QUIRK_REPORT)
#undef QUIRK_REPORT
}

void quirks_before_call(void)
{
    if (!quirks_enabled(QUIRK_ERRNO))
        return;
    if (errno == EAGAIN || errno == EWOULDBLOCK) /* the value that kept a socket for ever */
        quirks_acted(QUIRK_ERRNO, 1);
    errno = 0;
}
