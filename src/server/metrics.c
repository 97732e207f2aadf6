/* metrics.c - /metrics in Prometheus' text format, served on the daemon's loop (metrics.h).
 *
 * Ownership: the listener and its connections are this module's. A connection is closed by its
 * own events or timer only, and freed by a 0 ms timer, because events later in the same turn
 * may still name its watch. */
#include "server/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/err.h"
#include "common/hist.h"
#include "common/log.h"
#include "common/text.h"
#include "loop/accept.h"
#include "server/server.h"
#include "server/stats.h"
#include "transfer/engine.h"
#include "transport/transport.h"

struct mconn {
    struct metrics *m;
    int fd;
    int closed;
    struct loop_watch watch;
    struct loop_timer timer; /* the exchange's deadline; then the deferred free */
    char in[METRICS_REQUEST_MAX];
    size_t inlen;
    struct pbuf out;
    size_t sent;
    struct mconn *next, **prev;
};

struct metrics {
    struct server *srv;
    int fd;
    struct acceptor acceptor;
    char addr[80];
    unsigned nconns;
    struct mconn *conns;
    struct metrics_counters counters;
};

/* ---- rendering ---- */

static void out(struct pbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void out(struct pbuf *b, const char *fmt, ...)
{
    va_list ap;
    char small[256];

    va_start(ap, fmt);
    /* ap is started (va_start); clang 14 misreads that on x86-64: LLVM issue 40656. */
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(small)) {
        pbuf_put(b, small, (size_t)n);
        return;
    }
    pbuf_reserve(b, (size_t)n + 1);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* A label value or help text as the format wants it: \ " and newline escaped. */
static const char *escape(const char *s, char *buf, size_t len)
{
    size_t o = 0;

    for (; *s && o + 3 < len; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n')
            buf[o++] = '\\';
        buf[o++] = *s == '\n' ? 'n' : *s;
    }
    buf[o] = '\0';
    return buf;
}

/* A label value from outside (a node id): made safe to show (common/text.h), then escaped. */
static const char *label(const char *s, char *buf, size_t len)
{
    char safe[256];

    return escape(text_safe(s, safe, sizeof(safe)), buf, len);
}

/* One sample; samples of one family are written together under one HELP and TYPE. */
struct sample {
    char name[96];
    char labels[112];
    int kind;
    const char *help;
    uint64_t value;
    double scale; /* 0: the value as it is; else value * scale, in base units */
};

struct samples {
    struct sample v[512];
    size_t n;
};

/* The daemon's own fields keep their names; a transport's ("fabric_eager_msgs") become
 * ferry_transport_eager_msgs{transport="fabric"}. Microseconds (_us) become seconds; counters
 * end in _total. */
static void on_counter(void *arg, const char *name, int kind, const char *help, uint64_t value)
{
    struct samples *s = arg;
    const char *us = strchr(name, '_');
    char esc[64];

    if (s->n == sizeof(s->v) / sizeof(s->v[0]))
        return;
    struct sample *x = &s->v[s->n++];
    *x = (struct sample){.kind = kind, .help = help, .value = value};
    if (ferry_stat_field_find(name) || !us) {
        snprintf(x->name, sizeof(x->name), "ferry_%s", name);
    } else {
        snprintf(x->name, sizeof(x->name), "ferry_transport_%s", us + 1);
        snprintf(esc, sizeof(esc), "%.*s", (int)(us - name), name);
        snprintf(x->labels, sizeof(x->labels), "transport=\"%s\"", esc);
    }
    size_t l = strlen(x->name);
    if (l > 3 && strcmp(x->name + l - 3, "_us") == 0) { /* base units: seconds */
        x->scale = 1e-6;
        l += (size_t)snprintf(x->name + l - 3, sizeof(x->name) - (l - 3), "_seconds") - 3;
    }
    if (kind == FERRY_STAT_COUNTER && (l < 6 || strcmp(x->name + l - 6, "_total") != 0))
        snprintf(x->name + l, sizeof(x->name) - l, "_total");
}

static void render_samples(struct pbuf *b, const struct samples *s)
{
    char esc[256];
    unsigned char done[sizeof(s->v) / sizeof(s->v[0])] = {0};

    for (size_t i = 0; i < s->n; i++) {
        if (done[i])
            continue;
        out(b, "# HELP %s %s\n# TYPE %s %s\n", s->v[i].name, escape(s->v[i].help, esc, sizeof(esc)),
            s->v[i].name, s->v[i].kind == FERRY_STAT_COUNTER ? "counter" : "gauge");
        for (size_t j = i; j < s->n; j++) {
            if (done[j] || strcmp(s->v[j].name, s->v[i].name) != 0)
                continue;
            done[j] = 1;
            const struct sample *x = &s->v[j];
            out(b, "%s%s%s%s ", x->name, x->labels[0] ? "{" : "", x->labels,
                x->labels[0] ? "}" : "");
            if (x->scale)
                out(b, "%.9g\n", (double)x->value * x->scale);
            else
                out(b, "%llu\n", (unsigned long long)x->value);
        }
    }
}

static void render_hist(struct pbuf *b, const char *family, const char *op, const struct hist *h)
{
    uint64_t cum = 0;

    for (unsigned i = 0; i < HIST_BOUNDS; i++) {
        cum += h->bucket[i];
        out(b, "%s_bucket{op=\"%s\",le=\"%g\"} %llu\n", family, op, hist_bound_ns(i) / 1e9,
            (unsigned long long)cum);
    }
    out(b, "%s_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", family, op, (unsigned long long)h->count);
    out(b, "%s_sum{op=\"%s\"} %.9f\n", family, op, h->sum_ns / 1e9);
    out(b, "%s_count{op=\"%s\"} %llu\n", family, op, (unsigned long long)h->count);
}

static void render_latency(struct server *srv, struct pbuf *b)
{
    static const char family[] = "ferry_operation_duration_seconds";
    const struct server_counters *c = &srv->counters;

    out(b,
        "# HELP %s Latency: get and fetch from request to reply, put from create to seal, "
        "transfer from the first want of an object to its seal here.\n# TYPE %s histogram\n",
        family, family);
    render_hist(b, family, "get", &c->get_latency);
    render_hist(b, family, "put", &c->put_latency);
    render_hist(b, family, "fetch", &c->fetch_latency);
    if (srv->engine)
        render_hist(b, family, "transfer", &engine_counters(srv->engine)->transfer_latency);
}

static void render_info(struct server *srv, struct pbuf *b)
{
    char e1[80], e2[80], e3[80];
    const char *provider = srv->engine ? engine_provider(srv->engine) : NULL;

    out(b,
        "# HELP ferry_build_info The daemon's release and node id.\n"
        "# TYPE ferry_build_info gauge\nferry_build_info{version=\"%s\",node=\"%s\"} 1\n",
        escape(ferry_version(), e1, sizeof(e1)),
        label(srv->cfg.node_id ? srv->cfg.node_id : "", e2, sizeof(e2)));
    if (provider && provider[0])
        out(b,
            "# HELP ferry_provider_info The libfabric provider of the node's fabric.\n"
            "# TYPE ferry_provider_info gauge\nferry_provider_info{provider=\"%s\"} 1\n",
            escape(provider, e1, sizeof(e1)));
    if (!srv->engine)
        return;
    struct engine_peer_info *v = calloc(FERRY_PEERS_MAX, sizeof(*v));
    size_t n = v ? engine_peers(srv->engine, v, FERRY_PEERS_MAX) : 0;
    out(b, "# HELP ferry_peer_info A peer this node pulls from, its transport and provider "
           "(transport \"-\": its last transfer failed and it is not connected).\n"
           "# TYPE ferry_peer_info gauge\n");
    for (size_t i = 0; i < n; i++)
        out(b, "ferry_peer_info{peer=\"%s\",transport=\"%s\",provider=\"%s\"} 1\n",
            label(v[i].node, e1, sizeof(e1)), escape(v[i].transport, e2, sizeof(e2)),
            escape(v[i].provider, e3, sizeof(e3)));
    free(v);
}

void metrics_render(struct server *srv, struct pbuf *b)
{
    struct samples *s = calloc(1, sizeof(*s));

    if (!s) {
        b->oom = 1;
        return;
    }
    server_stats_report(srv, on_counter, s);
    render_samples(b, s);
    free(s);
    render_latency(srv, b);
    render_info(srv, b);
}

/* ---- connections ---- */

static void conn_free(struct loop *l, struct loop_timer *t)
{
    struct mconn *c = t->arg;

    pbuf_free(&c->out);
    free(c);
}

static void conn_close(struct mconn *c)
{
    struct loop *l = &c->m->srv->loop;

    if (c->closed)
        return;
    c->closed = 1;
    loop_watch_del(l, &c->watch);
    close(c->fd);
    if (c->next)
        c->next->prev = c->prev;
    *c->prev = c->next;
    c->m->nconns--;
    loop_timer_stop(l, &c->timer);
    loop_timer_init(&c->timer, conn_free, c);
    if (loop_timer_start(l, &c->timer, loop_now_ms()) < 0)
        conn_free(l, &c->timer); /* no heap room: nothing of this turn can name it but us */
}

/* Writes what is left of the answer; closes when all is out or the peer is gone. */
static void conn_flush(struct mconn *c)
{
    while (c->sent < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            (void)loop_watch_mod(&c->m->srv->loop, &c->watch, LOOP_WRITE);
            return;
        }
        if (w <= 0)
            break;
        c->sent += (size_t)w;
    }
    conn_close(c);
}

static void answer(struct mconn *c, int code, const char *reason, const char *extra,
                   const struct pbuf *body, int head)
{
    size_t len = body ? body->len : strlen(reason) + 1;

    out(&c->out,
        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
        code, reason, body ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain", len,
        extra ? extra : "");
    if (!head && body)
        pbuf_put(&c->out, body->data, body->len);
    else if (!head)
        out(&c->out, "%s\n", reason);
    if (code != 200)
        c->m->counters.refused++;
    if (c->out.oom) {
        conn_close(c);
        return;
    }
    conn_flush(c);
}

/* The request line is all that matters: GET or HEAD of /metrics (a query is ignored). */
static void serve(struct mconn *c)
{
    char method[8], target[64], minor[2];
    struct pbuf body = {0};

    if (sscanf(c->in, "%7[A-Z] %63[^ \r\n] HTTP/1.%1[01]", method, target, minor) != 3 ||
        target[0] != '/') {
        answer(c, 400, "Bad Request", NULL, NULL, 0);
        return;
    }
    int head = strcmp(method, "HEAD") == 0;
    if (!head && strcmp(method, "GET") != 0) {
        answer(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n", NULL, 0);
        return;
    }
    size_t path = strcspn(target, "?");
    if (path != strlen("/metrics") || strncmp(target, "/metrics", path) != 0) {
        answer(c, 404, "Not Found", NULL, NULL, head);
        return;
    }
    metrics_render(c->m->srv, &body);
    if (body.oom) {
        answer(c, 503, "Service Unavailable", NULL, NULL, head);
    } else {
        c->m->counters.scrapes++;
        answer(c, 200, "OK", NULL, &body, head);
    }
    pbuf_free(&body);
}

static void on_conn(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct mconn *c = w->arg;

    if (c->closed)
        return;
    if (c->out.len) { /* answering */
        conn_flush(c);
        return;
    }
    ssize_t r = recv(c->fd, c->in + c->inlen, sizeof(c->in) - 1 - c->inlen, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        conn_close(c);
        return;
    }
    c->inlen += (size_t)r;
    c->in[c->inlen] = '\0';
    if (strstr(c->in, "\r\n\r\n") || strstr(c->in, "\n\n"))
        serve(c);
    else if (c->inlen == sizeof(c->in) - 1)
        answer(c, 431, "Request Header Fields Too Large", NULL, NULL, 0);
}

static void on_deadline(struct loop *l, struct loop_timer *t)
{
    struct mconn *c = t->arg;

    c->m->counters.refused++;
    conn_close(c);
}

/* The oldest connection still sending its request, or NULL: the one to drop for a new one when
 * all places are taken, so that connections held open without a request (slowloris) cannot
 * keep honest scrapes out for longer than it takes METRICS_CONNS_MAX new ones to come. */
static struct mconn *oldest_reading(struct metrics *m)
{
    struct mconn *oldest = NULL;

    for (struct mconn *c = m->conns; c; c = c->next) /* newest first */
        if (!c->out.len)
            oldest = c;
    return oldest;
}

static int conn_add(struct loop *l, struct metrics *m, int fd)
{
    struct mconn *c, *old;

    if (m->nconns >= METRICS_CONNS_MAX && (old = oldest_reading(m))) {
        m->counters.refused++;
        conn_close(old);
    }
    if (m->nconns >= METRICS_CONNS_MAX || !(c = calloc(1, sizeof(*c))))
        return -1;
    c->m = m;
    c->fd = fd;
    loop_timer_init(&c->timer, on_deadline, c);
    if (loop_watch_add(l, &c->watch, fd, LOOP_READ, on_conn, c) < 0)
        goto free_c;
    if (loop_timer_start(l, &c->timer, loop_now_ms() + METRICS_TIMEOUT_MS) < 0)
        goto del_watch;
    c->next = m->conns;
    c->prev = &m->conns;
    if (m->conns)
        m->conns->prev = &c->next;
    m->conns = c;
    m->nconns++;
    return 0;

del_watch:
    loop_watch_del(l, &c->watch);
free_c:
    free(c);
    return -1;
}

static void on_accept(struct loop *l, struct loop_watch *w, uint32_t events)
{
    struct metrics *m = w->arg;

    for (int k = 0; k < 16; k++) { /* bounded per turn */
        int fd = acceptor_next(&m->acceptor, NULL, NULL);
        if (fd < 0)
            return;
        if (conn_add(l, m, fd) < 0) {
            m->counters.refused++;
            close(fd);
        }
    }
}

/* ---- the listener ---- */

static void name_address(struct metrics *m, const char *addr)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    char host[64], port[16];
    int p = -1;

    /* A getsockname that returns 0 filled sa; clang 14's analyzer takes it for unwritten. */
    /* NOLINTBEGIN(clang-analyzer-core.*) */
    if (getsockname(m->fd, (struct sockaddr *)&sa, &len) == 0)
        p = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                     : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    /* NOLINTEND(clang-analyzer-core.*) */
    if (p >= 0 && transport_split_addr(addr, host, sizeof(host), port, sizeof(port)) == 0)
        snprintf(m->addr, sizeof(m->addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, p);
    else
        snprintf(m->addr, sizeof(m->addr), "%s", addr);
}

int metrics_open(struct server *srv, const char *addr, struct metrics **out)
{
    struct metrics *m = calloc(1, sizeof(*m));
    char why[256];
    int rc;

    if (!m)
        return err_set(FERRY_ENOMEM, "metrics listener");
    m->srv = srv;
    if ((rc = transport_listen_tcp(addr, 16, &m->fd)) < 0) {
        snprintf(why, sizeof(why), "%s", ferry_errmsg());
        err_set(rc, "--metrics: %s", why);
        goto free_m;
    }
    if ((rc = acceptor_open(&srv->loop, &m->acceptor, m->fd, "metrics", on_accept, m)) < 0)
        goto close_fd;
    name_address(m, addr);
    *out = m;
    return 0;

close_fd:
    close(m->fd);
free_m:
    free(m);
    return rc;
}

const struct metrics_counters *metrics_counters(const struct metrics *m)
{
    return &m->counters;
}

uint64_t metrics_accept_pauses(const struct metrics *m)
{
    return m->acceptor.pauses;
}

const char *metrics_address(const struct metrics *m)
{
    return m->addr;
}

void metrics_close(struct metrics *m)
{
    if (!m)
        return;
    while (m->conns) {
        struct mconn *c = m->conns;
        conn_close(c);
        loop_timer_stop(&m->srv->loop, &c->timer);
        conn_free(&m->srv->loop, &c->timer);
    }
    acceptor_close(&m->acceptor);
    close(m->fd);
    free(m);
}
