/*
 * engine_route.c - which transport reaches a peer, and why; the circuit breaker that puts a
 * peer whose fabric keeps failing on tcp for a while.
 */
#include "transfer/engine_int.h"

static struct breaker *breaker_find(struct engine *e, const char *node, int create)
{
    struct breaker *b;

    for (b = e->breakers; b && strcmp(b->node, node) != 0; b = b->next)
        ;
    if (!b && create && (b = calloc(1, sizeof(*b)))) {
        snprintf(b->node, sizeof(b->node), "%s", node);
        b->next = e->breakers;
        e->breakers = b;
    }
    return b;
}

/* A fabric connection to node failed: after BREAKER_FAILS in a row, tcp for a while. */
void eng_breaker_fail(struct engine *e, const char *node, const char *why)
{
    struct breaker *b = breaker_find(e, node, 1);

    e->counters.fabric_failures++;
    if (!b)
        return;
    snprintf(b->last, sizeof(b->last), "%s", why);
    if (++b->fails < BREAKER_FAILS)
        return;
    b->fails = 0;
    b->open_until = loop_now_ms() + BREAKER_MS;
    e->counters.fabric_fallbacks++;
    log_warn("fabric to %s failed %d times in a row (last: %s): using tcp for %d s", node,
             BREAKER_FAILS, why, BREAKER_MS / 1000);
}

void eng_breaker_ok(struct engine *e, const char *node)
{
    struct breaker *b = breaker_find(e, node, 0);

    if (b)
        b->fails = 0;
}

/* The transport for a peer, and why (for ferry stat). */
const struct transport *eng_transport_for(struct engine *e, const struct directory_node *node,
                                          char *why, size_t len)
{
    const char *at = strchr(node->fabric, '@');
    const char *mine = e->fab_l ? fabric->provider(e->fab_l) : NULL;
    struct breaker *b = breaker_find(e, node->id, 0);

    if (!mine) {
        snprintf(why, len, "%s",
                 e->cfg.transport == ENGINE_TCP ? "--transport tcp" : "no fabric on this node");
    } else if (!at) {
        snprintf(why, len, "the peer has no fabric");
    } else if ((size_t)(at - node->fabric) != strlen(mine) ||
               strncmp(node->fabric, mine, strlen(mine)) != 0) {
        snprintf(why, len, "the peer's fabric is %.*s, ours %s", (int)(at - node->fabric),
                 node->fabric, mine);
    } else if (b && b->open_until > loop_now_ms()) {
        snprintf(why, len, "fabric failed %d times (%.60s); tcp for %u s", BREAKER_FAILS, b->last,
                 (unsigned)((b->open_until - loop_now_ms()) / 1000 + 1));
    } else {
        snprintf(why, len, "both on %s", mine);
        return fabric;
    }
    return tcp;
}
