/*
 * fabric_hello.c - the fabric transport's connection handshake: CONNECT / ACCEPT messages
 * and the address vector entries of peers (one per node, kept).
 */
#include "transport/fabric/fabric_int.h"

#include "common/text.h"

/* Our CONNECT or ACCEPT body for c. */
static size_t hello_put(const struct xlistener *f, const struct fconn *c, uint8_t *p)
{
    struct fmsg_hello h = {.id = c->id,
                           .window = c->window,
                           .name = f->name,
                           .name_len = f->name_len,
                           .virt = f->virt,
                           .base = (uint64_t)(uintptr_t)f->arena,
                           .len = f->arena_len};
    return fmsg_hello_put(p, &h);
}

/* The peer's arena: where its objects are and the key to read them. */
static int hello_apply(struct fconn *c, const struct fmsg_hello *h)
{
    struct xlistener *f = c->f;

    if (h->virt != f->virt)
        return err_set(FERRY_EPROTO, "the peer addresses memory differently (another provider?)");
    c->peer_id = h->id;
    c->peer_window = h->window;
    /* The peer can have at most its credits of both classes out at once; a power of two, so
     * that indexing by sequence number stays right when it wraps. */
    for (c->nearly = 1; c->nearly < 2 * (c->window + FAB_EXTRA); c->nearly *= 2)
        ;
    if (!(c->early = calloc(c->nearly, sizeof(*c->early))))
        return err_set(FERRY_ENOMEM, "reorder buffer");
    c->credits[CL_SMALL] = c->credits[CL_LARGE] = h->window;
    c->rbase = h->base;
    c->rlen = h->len;
    c->rvirt = h->virt;
    return 0;
}

/* Whether a connection record (closed ones too, until freed) uses addr. */
static int av_in_use(const struct xlistener *f, fi_addr_t addr)
{
    for (const struct fconn *c = f->all; c; c = c->anext)
        if (c->addr == addr)
            return 1;
    return 0;
}

/* Room for one more peer address: the oldest that no connection uses goes (an unauthenticated
 * CONNECT from a name never seen makes an entry, so entries must not be kept for ever, or a
 * flood of made-up names would lock every new peer out). */
static int av_make_room(struct xlistener *f)
{
    struct avent **pp, **victim = NULL;

    for (pp = &f->avs; *pp; pp = &(*pp)->next) /* newest first: the last unused is the oldest */
        if (!av_in_use(f, (*pp)->addr))
            victim = pp;
    if (!victim)
        return err_set(FERRY_ENOMEM, "fabric: %u peer addresses in use", FAB_AV_MAX);
    struct avent *a = *victim;
    *victim = a->next;
    (void)fi_av_remove(f->av, &a->addr, 1, 0);
    f->navs--;
    f->stats.av_removals++;
    free(a);
    return 0;
}

/* The fi_addr of a peer's endpoint name, inserted once and cached. */
int fab_av_get(struct xlistener *f, const uint8_t *name, size_t len, fi_addr_t *out)
{
    struct avent *a;

    for (a = f->avs; a; a = a->next) {
        if (a->len == len && memcmp(a->name, name, len) == 0) {
            *out = a->addr;
            return 0;
        }
    }
    if (f->navs >= FAB_AV_MAX && av_make_room(f) < 0)
        return FERRY_ENOMEM;
    if (len > FAB_NAME_MAX || !(a = calloc(1, sizeof(*a))))
        return err_set(FERRY_ENOMEM, "address vector entry");
    memcpy(a->name, name, len);
    a->len = len;
    if (fi_av_insert(f->av, name, 1, &a->addr, 0, NULL) != 1) {
        free(a);
        return err_set(FERRY_EINVAL, "fabric: the provider rejects a peer's address");
    }
    f->stats.av_inserts++;
    f->navs++;
    a->next = f->avs;
    f->avs = a;
    *out = a->addr;
    return 0;
}

void fab_printable(struct xlistener *f, const uint8_t *name, size_t len, char *out, size_t n)
{
    char raw[256];
    size_t sz = sizeof(raw);

    /* The provider prints the peer's own bytes for some names (shm's are strings): escaped. */
    if (!fi_av_straddr(f->av, name, raw, &sz))
        snprintf(out, n, "?");
    else
        text_safe(raw, out, n);
}

int fab_send_hello(struct fconn *c)
{
    uint8_t p[FMSG_HELLO_FIXED + FAB_NAME_MAX];
    size_t n = hello_put(c->f, c, p);

    return fab_post_unsolicited(c, c->state == ST_CONNECTING ? K_CONNECT : K_ACCEPT, p, n);
}

static void on_connect_msg(struct xlistener *f, struct rbuf *b)
{
    struct fmsg_hello h;
    char peer[128];
    fi_addr_t addr;
    struct fconn *c;

    if (fmsg_hello_get(b->p + FAB_HDR, b->len - FAB_HDR, &h) < 0 ||
        fab_av_get(f, h.name, h.name_len, &addr) < 0) {
        log_warn("fabric: refusing a connection: %s", ferry_errmsg());
        return;
    }
    if (!(c = fab_conn_new(f, addr, h.name, h.name_len))) {
        fab_printable(f, h.name, h.name_len, peer, sizeof(peer));
        log_warn("fabric: refusing %s: %s", peer, ferry_errmsg());
        return;
    }
    if (hello_apply(c, &h) < 0) {
        log_warn("fabric: refusing %s: %s", c->base.peer, ferry_errmsg());
        fab_conn_shut(c);
        return;
    }
    c->state = ST_OPEN;
    c->hello_due = 1;
    fab_conn_mark(c);
    f->fn(f, &c->base, f->arg);
}

static void on_accept_msg(struct fconn *c, struct rbuf *b)
{
    struct xlistener *f = c->f;
    struct fmsg_hello h;

    if (c->state != ST_CONNECTING) {
        fab_conn_fail_err(c, FERRY_EPROTO, "an accept on an open connection");
        return;
    }
    if (fmsg_hello_get(b->p + FAB_HDR, b->len - FAB_HDR, &h) < 0 || hello_apply(c, &h) < 0) {
        fab_conn_fail_err(c, FERRY_EPROTO, ferry_errmsg());
        return;
    }
    c->state = ST_OPEN;
    f->stats.connects++;
    f->stats.connect_us += (clock_mono_ns() - c->connect_ns) / 1000;
    fab_conn_mark(c);
}

void fab_process(struct xlistener *f, struct rbuf *b)
{
    struct fmsg_hdr h;
    struct fconn *c;
    int kind;

    if (fmsg_hdr_get(b->p, b->len, &h) < 0) {
        log_warn("fabric: dropping a message: %s", ferry_errmsg());
        fab_rbuf_post(f, b);
        return;
    }
    kind = h.kind;
    if (kind == K_CONNECT) {
        on_connect_msg(f, b);
        fab_rbuf_post(f, b);
        return;
    }
    if (!(c = fab_conn_lookup(f, h.conn))) {
        fab_rbuf_post(f, b); /* for a connection closed since: nobody to tell */
        return;
    }
    c->heard_ns = clock_mono_ns();
    c->probes = 0;
    if (kind == K_ACCEPT || kind == K_CLOSE || c->state != ST_OPEN) {
        if (kind == K_ACCEPT)
            on_accept_msg(c, b);
        else if (kind == K_CLOSE)
            fab_conn_fail(c, "the peer closed the connection");
        else
            fab_conn_fail_err(c, FERRY_EPROTO, "a message before the connection was accepted");
        fab_rbuf_post(f, b);
        return;
    }
    fab_on_message(c, b);
}
