/*
 * engine.c - the transfer engine: opening and closing it, its counters, what this node
 * advertises, and the release of objects a closed connection was moving.
 */
#include "transfer/engine_int.h"

/* Lets go of an object a closed connection was moving, once the transport says nothing of
 * that connection can still touch it (drain): a partial object we received is aborted (a
 * one-sided read may still be landing in it), an object we lent is unpinned (a peer may still
 * be reading it until its lease ends). */
struct release {
    struct engine *e;
    struct object *o;
    int abort;
};

static void on_drained(void *arg)
{
    struct release *r = arg;

    if (r->abort)
        store_abort(r->e->store, r->o);
    else
        store_unref(r->e->store, r->o);
    free(r);
}

void eng_release_after(struct engine *e, struct xconn *c, struct object *o, int abort)
{
    struct release *r = malloc(sizeof(*r));

    if (r) {
        *r = (struct release){.e = e, .o = o, .abort = abort};
        if (c->type->drain(c, on_drained, r) == 0)
            return;
        free(r);
    }
    if (c->type == fabric) {
        /* Keeping it is safe, letting it go is not. */
        log_error("out of memory: keeping an object a peer may still be reading or writing");
        return;
    }
    if (abort)
        store_abort(e->store, o);
    else
        store_unref(e->store, o);
}

/* Opens the fabric as the configuration says; with auto, a fabric that does not open is
 * logged once and left out. */
static int open_fabric(struct engine *e)
{
    struct xconfig xc = {.addr = e->cfg.listen_addr,
                         .provider = e->cfg.fabric_provider,
                         .arena = e->store->base,
                         .arena_len = store_capacity(e->store),
                         .window = e->cfg.fabric_window ? e->cfg.fabric_window : 8};
    int rc;

    if (e->cfg.transport == ENGINE_TCP)
        return 0;
    rc = fabric->listen(e->loop, &xc, &eng_in_events, eng_on_accept, e, &e->fab_l);
    if (rc < 0 && e->cfg.transport == ENGINE_FABRIC)
        return rc;
    if (rc < 0) {
        log_warn("no fabric (%s): transfers run on tcp", ferry_errmsg());
        return 0;
    }
    return 0;
}

int engine_open(struct engine **out, struct loop *l, struct store *st,
                const struct engine_config *cfg)
{
    struct engine *e = calloc(1, sizeof(*e));
    struct xconfig tc = {.addr = cfg->listen_addr};
    int rc;

    if (!e)
        return err_set(FERRY_ENOMEM, "engine");
    e->loop = l;
    e->store = st;
    e->cfg = *cfg;
    snprintf(e->node_id, sizeof(e->node_id), "%s", cfg->node_id);
    if ((rc = auth_init(&e->auth, cfg->secret, cfg->secret_len)) < 0)
        goto free_e;
    e->cfg.secret = NULL;          /* not kept: the auth module has its copy */
    e->cfg.fabric_provider = NULL; /* not kept: the endpoint knows its provider */
    if ((rc = hasher_start(&e->verifier)) < 0)
        goto free_secret;
    if ((rc = loop_watch_add(l, &e->verifier_watch, hasher_fd(e->verifier), LOOP_READ,
                             eng_on_verified, e)) < 0)
        goto stop_verifier;
    if ((rc = tcp->listen(l, &tc, &eng_in_events, eng_on_accept, e, &e->tcp_l)) < 0)
        goto unwatch_verifier;
    e->cfg.fabric_provider = cfg->fabric_provider;
    rc = open_fabric(e);
    e->cfg.fabric_provider = NULL;
    if (rc < 0)
        goto close_tcp;
    engine_set_eager_max(e, cfg->eager_max);
    if (e->fab_l)
        log_info("fabric: provider %s, eager up to %" PRIu64 " bytes, one-sided reads above",
                 fabric->provider(e->fab_l), e->eager_max);
    *out = e;
    return 0;

close_tcp:
    tcp->listener_close(e->tcp_l);
unwatch_verifier:
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
    struct hasher_job *job, *next;
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
                if (pw && pw->done)
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
            if (p->queue[i]->done)
                eng_want_free(p->queue[i]);
        }
        eng_peer_free(p);
    }
    /* The fabric's endpoint closes first: then no read can land in what is aborted below. */
    if (e->fab_l)
        fabric->listener_close(e->fab_l);
    tcp->listener_close(e->tcp_l);
    loop_watch_del(l, &e->verifier_watch);
    for (job = hasher_stop(e->verifier); job; job = next) {
        struct want *v = job->arg;
        next = job->next;
        v->busy = 0;
        if (v->done) {
            store_abort(e->store, v->obj);
            eng_want_free(v);
        }
        free(job);
    }
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
    if (e->fab_l)
        fabric->stats(e->fab_l, &e->counters.fabric);
    return &e->counters;
}

void engine_set_directory(struct engine *e, struct directory *dir)
{
    e->dir = dir;
}

void engine_advertise(const struct engine *e, struct directory_node *self)
{
    snprintf(self->transports, sizeof(self->transports), "%s", e->fab_l ? "tcp,fabric" : "tcp");
    if (e->fab_l)
        snprintf(self->fabric, sizeof(self->fabric), "%s@%s", fabric->provider(e->fab_l),
                 fabric->address(e->fab_l));
    else
        self->fabric[0] = '\0';
}

const char *engine_fabric_provider(const struct engine *e)
{
    return e->fab_l ? fabric->provider(e->fab_l) : NULL;
}

/* Where one-sided reads start to pay, per provider, from `ferry calibrate` runs on our
 * 2-core VMs (docs/architecture.md): other providers start from EAGER_DEFAULT. */
static uint64_t eager_default(const char *provider)
{
    static const struct {
        const char *provider;
        uint64_t eager_max;
    } measured[] = {
        {"shm", 16u << 10},
        {"tcp;ofi_rxm", 16u << 10},
    };

    for (size_t i = 0; provider && i < sizeof(measured) / sizeof(measured[0]); i++) {
        if (strcmp(provider, measured[i].provider) == 0)
            return measured[i].eager_max;
    }
    return EAGER_DEFAULT;
}

uint64_t engine_eager_max(const struct engine *e)
{
    return e->eager_max;
}

void engine_set_eager_max(struct engine *e, uint64_t v)
{
    e->eager_max = v == ENGINE_EAGER_AUTO ? eager_default(engine_fabric_provider(e)) : v;
}

size_t engine_peers(const struct engine *e, struct engine_peer_info *out, size_t max)
{
    size_t n = 0;

    for (const struct peer *p = e->peers; p && n < max; p = p->next, n++) {
        out[n] = (struct engine_peer_info){0};
        snprintf(out[n].node, sizeof(out[n].node), "%s", p->node.id);
        snprintf(out[n].transport, sizeof(out[n].transport), "%s", p->conn->type->name);
        snprintf(out[n].provider, sizeof(out[n].provider), "%s",
                 p->conn->type->provider(p->conn->local));
        snprintf(out[n].why, sizeof(out[n].why), "%s", p->why);
    }
    return n;
}
