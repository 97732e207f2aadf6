/*
 * engine_route.c - which transport reaches a peer, and why (for ferry stat's peers); the
 * circuit breaker that puts a peer whose connections on a transport keep failing on the next
 * one for a while. Transports are tried in the registry's order; the last one, the fallback,
 * reaches every node.
 */
#include "transfer/engine_int.h"

static struct breaker *breaker_find(struct engine *e, const char *node, int xp, int create)
{
    struct breaker *b;

    for (b = e->breakers; b && (b->xp != xp || strcmp(b->node, node) != 0); b = b->next)
        ;
    if (!b && create && (b = calloc(1, sizeof(*b)))) {
        snprintf(b->node, sizeof(b->node), "%s", node);
        b->xp = xp;
        b->next = e->breakers;
        e->breakers = b;
    }
    return b;
}

void eng_breaker_fail(struct engine *e, const char *node, const struct transport *t,
                      const char *why)
{
    int xp = registry_index(t);
    struct breaker *b;

    if (xp < 0 || (t->flags & XPORT_FALLBACK))
        return; /* nothing to fall back to */
    e->failures[xp]++;
    if (!(b = breaker_find(e, node, xp, 1)))
        return;
    snprintf(b->last, sizeof(b->last), "%s", why);
    if (++b->fails < BREAKER_FAILS)
        return;
    b->fails = 0;
    b->open_until = loop_now_ms() + e->timers.breaker_ms;
    e->fallbacks[xp]++;
    log_warn("%s to %s failed %d times in a row (last: %s): not used for %u ms", t->name, node,
             BREAKER_FAILS, why, e->timers.breaker_ms);
}

void eng_breaker_ok(struct engine *e, const char *node, const struct transport *t)
{
    struct breaker *b = breaker_find(e, node, registry_index(t), 0);

    if (b)
        b->fails = 0;
}

void eng_note_failure(struct engine *e, const char *node, const char *why)
{
    struct recent_failure *f = &e->recent[0];

    for (size_t i = 0; i < RECENT_FAILURES; i++) {
        if (strcmp(e->recent[i].node, node) == 0) {
            f = &e->recent[i];
            break;
        }
        if (e->recent[i].at < f->at)
            f = &e->recent[i];
    }
    snprintf(f->node, sizeof(f->node), "%s", node);
    snprintf(f->why, sizeof(f->why), "%s", why);
    f->at = loop_now_ms();
    if (!f->at)
        f->at = 1;
}

/* Why transport i is not used for node, into why; 0 when it can be. */
static int passed_over(struct engine *e, size_t i, const struct directory_node *node, char *why,
                       size_t len)
{
    const struct transport *t = e->reg[i];
    const char *addr = directory_node_addr(node, t->name);
    struct breaker *b;

    if (!e->ls[i]) {
        if (e->only[0])
            snprintf(why, len, "--transport %s", e->only);
        else
            snprintf(why, len, "no %s on this node", t->name);
        return 1;
    }
    if (!addr) {
        snprintf(why, len, "the peer has no %s", t->name);
        return 1;
    }
    if (!t->reaches(e->ls[i], addr, why, len))
        return 1;
    b = breaker_find(e, node->id, (int)i, 0);
    if (b && b->open_until > loop_now_ms()) {
        snprintf(why, len, "%s failed %d times (%.60s); not used for %u s", t->name, BREAKER_FAILS,
                 b->last, (unsigned)((b->open_until - loop_now_ms()) / 1000 + 1));
        return 1;
    }
    return 0;
}

size_t eng_transport_for(struct engine *e, const struct directory_node *node, char *why, size_t len)
{
    char first[112] = "";

    for (size_t i = 0; i < e->nreg; i++) {
        if (!passed_over(e, i, node, why, len)) {
            /* The reason to report is why the preferred transports were passed over. */
            if (first[0])
                snprintf(why, len, "%s", first);
            return i;
        }
        if (!first[0])
            snprintf(first, sizeof(first), "%s", why);
    }
    snprintf(why, len, "%s", first[0] ? first : "no transport reaches it");
    return e->nreg;
}
