/*
 * engine.c - the transfer engine: opening and closing it, its counters, what this node
 * advertises. The top of the engine's files: it calls the others, none calls it.
 */
#include "transfer/engine_int.h"

/* 1 when the configuration asks for transport t to be opened. */
static int wanted(const struct engine *e, const struct transport *t)
{
    const char *want = e->cfg.transport;

    return !want || strcmp(want, "auto") == 0 || strcmp(want, t->name) == 0 ||
           (t->flags & XPORT_FALLBACK);
}

/* Opens an endpoint on every transport the configuration asks for. A transport that does not
 * open is logged and left out, unless it was asked for by name or is the fallback: then the
 * engine does not open. */
static int open_transports(struct engine *e)
{
    struct xconfig xc = {.addr = e->cfg.listen_addr,
                         .provider = e->cfg.fabric_provider,
                         .arena = e->store->base,
                         .arena_len = store_capacity(e->store),
                         .max_frame = WIRE_MAX_FRAME,
                         .window = e->cfg.fabric_window ? e->cfg.fabric_window : 8,
                         .lease_ms = e->timers.lease_ms};

    e->reg = registry_transports(&e->nreg);
    /* The required ones first (the fallback, and the one --transport names): when one of them
     * cannot open, the daemon stops before it has set up the others. */
    for (int pass = 1; pass >= 0; pass--) {
        for (size_t i = 0; i < e->nreg; i++) {
            const struct transport *t = e->reg[i];
            int required = (t->flags & XPORT_FALLBACK) ||
                           (e->cfg.transport && strcmp(e->cfg.transport, t->name) == 0);
            int rc;
            if (required != pass || !wanted(e, t))
                continue;
            if ((rc = t->listen(e->loop, &xc, &eng_in_events, eng_on_accept, e, &e->ls[i])) == 0)
                continue;
            e->ls[i] = NULL;
            if (required)
                return rc; /* its reason is in ferry_errmsg() */
            log_warn("no %s (%s): transfers run on the others", t->name, ferry_errmsg());
        }
    }
    return 0;
}

/* Closes the endpoints: the one-sided transports before the others, so that no read can
 * land in what is aborted after. */
static void close_transports(struct engine *e)
{
    for (int pass = 1; pass >= 0; pass--) {
        for (size_t i = 0; i < e->nreg; i++) {
            if (e->ls[i] && !!(e->reg[i]->flags & XPORT_ONE_SIDED) == pass) {
                e->reg[i]->listener_close(e->ls[i]);
                e->ls[i] = NULL;
            }
        }
    }
}

/* cfg's timers with the defaults filled in, and how often the watchdogs look: often enough
 * that each timer is seen to pass within a quarter of its length. */
static void timers_resolve(struct engine *e)
{
    struct engine_timers *t = &e->timers;
    uint32_t shortest;

    *t = e->cfg.timers;
    t->stall_ms = t->stall_ms ? t->stall_ms : ENGINE_STALL_MS;
    t->handshake_ms = t->handshake_ms ? t->handshake_ms : ENGINE_HANDSHAKE_MS;
    t->answer_ms = t->answer_ms ? t->answer_ms : ENGINE_ANSWER_MS;
    t->breaker_ms = t->breaker_ms ? t->breaker_ms : ENGINE_BREAKER_MS;
    t->rate_ms = t->rate_ms ? t->rate_ms : ENGINE_RATE_MS;
    t->orphan_ms = t->orphan_ms ? t->orphan_ms : ENGINE_ORPHAN_MS;
    t->relay_ms = t->relay_ms ? t->relay_ms : ENGINE_RELAY_MS;
    shortest = t->stall_ms < t->answer_ms ? t->stall_ms : t->answer_ms;
    shortest = shortest < t->rate_ms ? shortest : t->rate_ms;
    shortest = shortest < t->relay_ms ? shortest : t->relay_ms;
    e->check_ms = shortest / 4 < STALL_CHECK_MS ? shortest / 4 : STALL_CHECK_MS;
}

/* What the engine's files tell those above them of (engine_int.h, struct eng_hooks). */
static const struct eng_hooks hooks = {
    .copy_changed = eng_relay_wake,
    .want_made = eng_relay_made,
    .want_ended = eng_relay_end,
    .holders_listed = eng_split,
    .part_failed = eng_part_failed,
    .part_checked = eng_part_checked,
    .peer_events = &eng_pull_events,
    .want_lost = eng_pull_want_lost,
    .want_unqueued = eng_pull_want_unqueued,
};

int engine_open(struct engine **out, struct loop *l, struct store *st,
                const struct engine_config *cfg)
{
    struct engine *e = calloc(1, sizeof(*e));
    const char *provider;
    int rc;

    if (!e)
        return err_set(FERRY_ENOMEM, "engine");
    e->loop = l;
    e->store = st;
    e->cfg = *cfg;
    e->hooks = &hooks;
    timers_resolve(e);
    snprintf(e->node_id, sizeof(e->node_id), "%s", cfg->node_id);
    if ((rc = auth_init(&e->auth, cfg->secret, cfg->secret_len)) < 0)
        goto free_e;
    e->cfg.secret = NULL; /* not kept: the auth module has its copy */
    if (cfg->transport && strcmp(cfg->transport, "auto") != 0)
        snprintf(e->only, sizeof(e->only), "%s", cfg->transport);
    if ((rc = hasher_start(&e->verifier, STORE_HASHER_THREADS)) < 0)
        goto free_secret;
    if ((rc = loop_watch_add(l, &e->verifier_watch, hasher_fd(e->verifier), LOOP_READ,
                             eng_on_verified, e)) < 0)
        goto stop_verifier;
    rc = open_transports(e);
    /* Not kept: the configuration's strings belong to the caller. */
    e->cfg.fabric_provider = NULL;
    e->cfg.transport = NULL;
    if (rc < 0)
        goto close_transports;
    engine_set_eager_max(e, cfg->eager_max);
    if ((provider = engine_provider(e)))
        log_info("one-sided transport on %s: eager up to %" PRIu64 " bytes, one-sided reads "
                 "above",
                 provider, e->eager_max);
    *out = e;
    return 0;

close_transports:
    close_transports(e);
    loop_watch_del(l, &e->verifier_watch);
stop_verifier:
    free(hasher_stop(e->verifier));
free_secret:
    auth_free(&e->auth);
free_e:
    free(e);
    return rc;
}

void engine_close(struct engine *e)
{
    struct loop *l = e ? e->loop : NULL;
    struct hasher_job *job;
    struct want *w;
    size_t pos = 0;

    if (!e)
        return;
    while (e->inconns) {
        e->inconns->conn->type->close(e->inconns->conn);
        eng_inconn_free(e->inconns);
    }
    while (e->peers) {
        struct peer *p = e->peers;
        e->peers = p->next;
        p->conn->type->close(p->conn);
        for (struct pull *pl = p->pulls; pl; pl = pl->next) {
            for (uint32_t i = 0; i < pl->n; i++) {
                struct want *pw = pl->entries[i].w;
                if (pw && pw->parent)
                    eng_part_close(pw);
                else if (pw && pw->done)
                    eng_want_free(pw); /* finished, kept only for this pull */
                else if (pw)
                    pw->entry = NULL;
            }
        }
        while (p->pulls) {
            struct pull *pl = p->pulls;
            p->pulls = pl->next;
            eng_pull_free(pl);
        }
        for (uint32_t i = 0; i < p->nqueue; i++) {
            p->queue[i]->queued = NULL;
            if (p->queue[i]->parent)
                eng_part_close(p->queue[i]);
            else if (p->queue[i]->done)
                eng_want_free(p->queue[i]);
        }
        eng_peer_free(p);
    }
    /* The endpoints close first: then no one-sided read can land in what is aborted below. */
    close_transports(e);
    loop_watch_del(l, &e->verifier_watch);
    job = hasher_stop(e->verifier);
    e->verifier = NULL;
    eng_checks_closed(e, job);
    /* Every want left: abort its partial object, free it without answering (the owner is
     * going away too). */
    while ((w = idmap_next(&e->wants, &pos, NULL))) {
        if (w->obj)
            store_abort(e->store, w->obj);
        w->waiters = NULL;
    }
    pos = 0;
    while ((w = idmap_next(&e->wants, &pos, NULL)))
        eng_want_free(w);
    idmap_free(&e->wants);
    eng_slices_free(e);
    if (e->hint_last)
        eng_hint_put(e->hint_last);
    while (e->breakers) {
        struct breaker *b = e->breakers;
        e->breakers = b->next;
        free(b);
    }
    auth_free(&e->auth);
    free(e);
    loop_fire_due(l); /* the transport frees closed connections from a 0 ms timer */
}

const struct engine_counters *engine_counters(struct engine *e)
{
    return &e->counters;
}

void engine_report(struct engine *e, xcounter_fn *fn, void *arg)
{
    char name[FERRY_STAT_NAME_MAX + 1];

    for (size_t i = 0; i < e->nreg; i++) {
        const struct transport *t = e->reg[i];
        if (!e->ls[i])
            continue;
        t->counters(e->ls[i], fn, arg);
        if (t->flags & XPORT_FALLBACK)
            continue;
        snprintf(name, sizeof(name), "%s_failures", t->name);
        fn(arg, name, FERRY_STAT_COUNTER, "connections to peers on this transport that failed",
           e->failures[i]);
        snprintf(name, sizeof(name), "%s_fallbacks", t->name);
        fn(arg, name, FERRY_STAT_COUNTER,
           "times a peer was taken off this transport for a while after repeated failures",
           e->fallbacks[i]);
    }
}

void engine_set_directory(struct engine *e, struct directory *dir)
{
    e->dir = dir;
}

/* Every transport open here fits in the node's directory entry. */
_Static_assert(REGISTRY_MAX <= DIRECTORY_XPORTS, "a node entry lists every registered transport");

void engine_advertise(const struct engine *e, struct directory_node *self)
{
    self->nxp = 0;
    for (size_t i = 0; i < e->nreg; i++)
        if (e->ls[i] && directory_node_set(self, e->reg[i]->name, e->reg[i]->address(e->ls[i])) < 0)
            log_warn("%s: not advertised: %s", e->reg[i]->name, ferry_errmsg());
}

/* The endpoint of the node's one-sided transport, or -1. */
static int one_sided(const struct engine *e)
{
    for (size_t i = 0; i < e->nreg; i++)
        if (e->ls[i] && (e->reg[i]->flags & XPORT_ONE_SIDED))
            return (int)i;
    return -1;
}

const char *engine_provider(const struct engine *e)
{
    int i = one_sided(e);
    return i < 0 ? NULL : e->reg[i]->provider(e->ls[i]);
}

uint64_t engine_eager_max(const struct engine *e)
{
    return e->eager_max;
}

void engine_set_eager_max(struct engine *e, uint64_t v)
{
    int i = one_sided(e);
    uint64_t dflt = EAGER_DEFAULT;

    if (v == ENGINE_EAGER_AUTO && i >= 0)
        (void)e->reg[i]->eager_default(e->ls[i], &dflt);
    e->eager_max = v == ENGINE_EAGER_AUTO ? dflt : v;
}

static int is_peer(const struct engine *e, const char *node)
{
    for (const struct peer *p = e->peers; p; p = p->next) {
        if (strcmp(p->node.id, node) == 0)
            return 1;
    }
    return 0;
}

/* node's last failure, if it is among the recent ones. */
static const struct recent_failure *recent_of(const struct engine *e, const char *node)
{
    for (size_t i = 0; i < RECENT_FAILURES; i++)
        if (e->recent[i].at && strcmp(e->recent[i].node, node) == 0)
            return &e->recent[i];
    return NULL;
}

size_t engine_peers(const struct engine *e, struct engine_peer_info *out, size_t max)
{
    const struct recent_failure *last;
    size_t n = 0;

    for (const struct peer *p = e->peers; p && n < max; p = p->next, n++) {
        out[n] = (struct engine_peer_info){0};
        snprintf(out[n].node, sizeof(out[n].node), "%s", p->node.id);
        snprintf(out[n].transport, sizeof(out[n].transport), "%s", p->conn->type->name);
        snprintf(out[n].provider, sizeof(out[n].provider), "%s",
                 p->conn->type->provider(p->conn->local));
        /* Why this transport, then, if it failed lately while still connected (a bad chunk
         * does not end a connection), that failure, as far as room allows. */
        size_t k = (size_t)snprintf(out[n].why, sizeof(out[n].why), "%s", p->why);
        if ((last = recent_of(e, p->node.id)) && k + 1 < sizeof(out[n].why) &&
            snprintf(out[n].why + k, sizeof(out[n].why) - k, "; failed %" PRIu64 " s ago: %s",
                     (loop_now_ms() - last->at) / 1000, last->why) < 0)
            out[n].why[k] = '\0'; /* an encoding error: the failure left out */
    }
    /* Holders that failed lately and are not connected now: transport "-", why the failure. */
    for (size_t i = 0; i < RECENT_FAILURES && n < max; i++) {
        const struct recent_failure *f = &e->recent[i];
        if (!f->at || is_peer(e, f->node))
            continue;
        out[n] = (struct engine_peer_info){0};
        snprintf(out[n].node, sizeof(out[n].node), "%s", f->node);
        snprintf(out[n].transport, sizeof(out[n].transport), "-");
        snprintf(out[n].why, sizeof(out[n].why), "failed %" PRIu64 " s ago: %.70s",
                 (loop_now_ms() - f->at) / 1000, f->why);
        n++;
    }
    return n;
}
