/*
 * fabric_ep.c - the fabric transport's endpoint: fi_getinfo with the capabilities and mr_mode bits
 * we honour, fabric, domain, endpoint, completion queue and address vector, the arena and
 * bounce buffers registered once, listen and close, and the transport's table of operations.
 */
#include "transport/fabric/fabric_int.h"

#include "common/fault.h"

static struct fi_info *hints_for(const char *provider)
{
    struct fi_info *h = fi_allocinfo();

    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_REMOTE_READ;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    /* Every mode we can honour; the provider keeps those it needs. */
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                              FI_MR_ENDPOINT | FI_MR_RAW;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->tx_attr->msg_order = FI_ORDER_SAS;
    h->rx_attr->msg_order = FI_ORDER_SAS;
    if (provider && *provider && !(h->fabric_attr->prov_name = strdup(provider))) {
        fi_freeinfo(h);
        return NULL;
    }
    return h;
}

/* The listen address' host: the fabric binds where tcp listens (the interface peers reach),
 * when the provider takes an address; "" when there is none. */
static void listen_host(const char *addr, char *host, size_t len)
{
    char port[16];

    if (!addr || transport_split_addr(addr, host, len, port, sizeof(port)) < 0)
        host[0] = '\0';
}

static int is_sockaddr(uint32_t format)
{
    return format == FI_SOCKADDR || format == FI_SOCKADDR_IN || format == FI_SOCKADDR_IN6;
}

static int open_domain(struct xlistener *f, const char *provider, const char *addr)
{
    struct fi_info *hints = hints_for(provider);
    char host[128];
    struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_FD};
    struct fi_av_attr av = {.type = FI_AV_UNSPEC};
    int rc;

    if (!hints)
        return err_set(FERRY_ENOMEM, "fabric hints");
    rc = fi_getinfo(FAB_API, NULL, NULL, 0, hints, &f->info);
    listen_host(addr, host, sizeof(host));
    if (rc == 0 && f->info->addr_format == FI_ADDR_STR) {
        fab_sweep_regions();
        fab_local_name(host, sizeof(host));
    }
    if (rc == 0 && host[0] &&
        (is_sockaddr(f->info->addr_format) || f->info->addr_format == FI_ADDR_STR)) {
        struct fi_info *bound = NULL;
        if (fi_getinfo(FAB_API, host, NULL, FI_SOURCE, hints, &bound) == 0) {
            fi_freeinfo(f->info);
            f->info = bound;
        }
    }
    fi_freeinfo(hints);
    if (rc)
        return err_set(FERRY_ETRANSFER,
                       "no libfabric provider%s%s with reliable messages and "
                       "one-sided reads: %s",
                       provider ? " named " : "", provider ? provider : "", fi_strerror(-rc));
    snprintf(f->provider, sizeof(f->provider), "%s", f->info->fabric_attr->prov_name);
    if (f->info->tx_attr->iov_limit < 2) /* header and arena piece go in one message */
        return err_set(FERRY_ETRANSFER, "fabric provider %s sends only one buffer per message",
                       f->provider);
    if ((rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL)) ||
        (rc = fi_domain(f->fabric, f->info, &f->domain, NULL)))
        return fab_err(rc, "opening the fabric");
    cq.size = f->info->tx_attr->size + f->info->rx_attr->size;
    if (fi_cq_open(f->domain, &cq, &f->cq, NULL)) {
        cq.wait_obj = FI_WAIT_NONE; /* polled from a timer instead */
        if ((rc = fi_cq_open(f->domain, &cq, &f->cq, NULL)))
            return fab_err(rc, "fi_cq_open");
    }
    if (cq.wait_obj != FI_WAIT_FD || fi_control(&f->cq->fid, FI_GETWAIT, &f->wait_fd))
        f->wait_fd = -1;
    if ((rc = fi_av_open(f->domain, &av, &f->av, NULL)) ||
        (rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)) ||
        (rc = fi_ep_bind(f->ep, &f->av->fid, 0)) ||
        (rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(f->ep)))
        return fab_err(rc, "opening the endpoint");
    return 0;
}

static void say_memlock(uint64_t need)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        log_warn("fabric: RLIMIT_MEMLOCK is %llu KiB and registering the arena pins %llu KiB: "
                 "raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity in a systemd unit)",
                 (unsigned long long)rl.rlim_cur >> 10, (unsigned long long)need >> 10);
}

/* Registers [p, p + len) once; requested_key is used unless the provider picks keys. */
static int reg(struct xlistener *f, void *p, uint64_t len, uint64_t access, uint64_t key,
               struct fid_mr **mr)
{
    int rc = fi_mr_reg(f->domain, p, len, access, 0, key, 0, mr, NULL);

    if (rc) {
        say_memlock(len);
        return err_set(FERRY_ETRANSFER, "fabric: cannot register %llu bytes: %s",
                       (unsigned long long)len, fi_strerror(-rc));
    }
    f->stats.registrations++;
    if (f->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(*mr, &f->ep->fid, 0)) || (rc = fi_mr_enable(*mr)))
            return fab_err(rc, "binding memory to the endpoint");
    }
    return 0;
}

/* A key we choose (providers without FI_MR_PROV_KEY): random, so that it cannot be guessed by
 * whoever has not been sent it; within the provider's key size; never 0 (the buffers' key). */
static uint64_t random_key(const struct xlistener *f)
{
    size_t size = f->info->domain_attr->mr_key_size;
    uint64_t key = 0;

    if (getrandom(&key, sizeof(key), 0) != sizeof(key))
        key = clock_mono_ns();
    if (size && size < sizeof(key))
        key &= (1ull << (8 * size)) - 1;
    return key ? key : 1;
}

/* The arena, registered once: what peers need to read it goes into f->key. */
static int register_arena(struct xlistener *f)
{
    uint64_t base;
    int rc;

    f->virt = !!(f->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR);
    f->raw = !!(f->info->domain_attr->mr_mode & FI_MR_RAW);
    if (f->info->domain_attr->mr_mode & (FI_MR_LOCAL | FI_MR_ALLOCATED))
        say_memlock(f->arena_len + f->bufs_len);
    if ((rc = reg(f, f->arena, f->arena_len, FI_SEND | FI_READ | FI_REMOTE_READ, random_key(f),
                  &f->arena_mr)) < 0)
        return rc;
    f->arena_desc = fi_mr_desc(f->arena_mr);
    if (!f->raw) {
        fmsg_put64(f->key, fi_mr_key(f->arena_mr));
        f->key_len = 8;
        return 0;
    }
    f->key_len = FAB_KEY_MAX;
    if ((rc = fi_mr_raw_attr(f->arena_mr, &base, f->key, &f->key_len, 0)))
        return fab_err(rc, "fi_mr_raw_attr");
    return 0;
}

/* Bounce buffers (both classes) and send buffers: one region, registered once, all receive
 * buffers posted. */
static int open_buffers(struct xlistener *f)
{
    uint32_t nrecv = FAB_SMALL_BUFS + FAB_RESERVE + FAB_LARGE_BUFS;
    uint8_t *p;
    int rc;

    /* No more receives than the provider can have posted: a third large, the rest small. */
    if (f->info->rx_attr->size < nrecv)
        nrecv = (uint32_t)f->info->rx_attr->size;
    f->nlarge = nrecv / 3;
    f->nsmall = nrecv - f->nlarge - FAB_RESERVE;
    if (nrecv <= FAB_RESERVE || f->nlarge < f->window + FAB_EXTRA)
        return err_set(FERRY_ETRANSFER, "fabric: the provider takes only %u posted receives",
                       nrecv);

    f->tx_max =
        f->info->tx_attr->size / 2 < FAB_TX_MAX ? (uint32_t)f->info->tx_attr->size / 2 : FAB_TX_MAX;
    f->read_max = f->info->tx_attr->size / 2 ? (uint32_t)f->info->tx_attr->size / 2 : 1;
    if (f->tx_max == 0)
        f->tx_max = 1;
    f->bufs_len =
        (size_t)(f->nsmall + FAB_RESERVE + f->tx_max) * FAB_SMALL + (size_t)f->nlarge * FAB_LARGE;
    f->bufs = mmap(NULL, f->bufs_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f->bufs == MAP_FAILED) {
        f->bufs = NULL;
        return err_sys("fabric buffers");
    }
    f->rbufs = calloc(nrecv, sizeof(*f->rbufs));
    f->txops = calloc(f->tx_max, sizeof(*f->txops));
    if (!f->rbufs || !f->txops)
        return err_set(FERRY_ENOMEM, "fabric buffer records");
    if ((rc = reg(f, f->bufs, f->bufs_len, FI_SEND | FI_RECV, 0, &f->buf_mr)) < 0)
        return rc;
    f->buf_desc = fi_mr_desc(f->buf_mr);
    p = f->bufs;
    for (uint32_t i = 0; i < f->tx_max; i++, p += FAB_SMALL) {
        f->txops[i] = (struct txop){.op.kind = OP_SEND, .buf = p, .next = f->txfree};
        f->txfree = &f->txops[i];
    }
    for (uint32_t i = 0; i < nrecv; i++) {
        int cls = i < f->nsmall + FAB_RESERVE ? CL_SMALL : CL_LARGE;
        f->rbufs[i] = (struct rbuf){.op.kind = OP_RECV, .cls = cls, .p = p};
        p += class_size(cls);
        fab_rbuf_post(f, &f->rbufs[i]);
    }
    f->free_bufs[CL_SMALL] = f->nsmall;
    f->free_bufs[CL_LARGE] = f->nlarge;
    return 0;
}

static int open_name(struct xlistener *f)
{
    int rc;

    f->name_len = sizeof(f->name);
    if ((rc = fi_getname(&f->ep->fid, f->name, &f->name_len)))
        return fab_err(rc, "fi_getname");
    /* The provider goes with the name: a peer on another provider cannot use it. */
    size_t at = (size_t)snprintf(f->address, sizeof(f->address), "%s@", f->provider);
    for (size_t i = 0; i < f->name_len && at + 2 < sizeof(f->address); i++, at += 2)
        sprintf(f->address + at, "%02x", f->name[i]);
    return 0;
}

static void read_faults(struct xlistener *f)
{
    /* Test hooks: a reader that never says it is done, reads slowed to a crawl, reads that
     * fail at once. */
    f->fault_skip_done = fault_on("fabric-skip-done");
    f->fault_fail_reads = fault_on("fabric-fail-reads");
    f->fault_read_delay_ms = fault_value("fabric-read-delay-ms", 60000);
    if (f->fault_skip_done || f->fault_fail_reads || f->fault_read_delay_ms)
        log_warn("fabric: test faults on: %s", getenv("FERRY_FAULT"));
}

static void fab_listener_close(struct xlistener *f);

static int fab_listen(struct loop *loop, const struct xconfig *cfg, const struct xconn_events *ev,
                      xaccept_fn *fn, void *arg, struct xlistener **out)
{
    struct xlistener *f;
    int rc;

    if (!cfg->arena || !cfg->arena_len || !cfg->max_frame || cfg->window == 0 ||
        cfg->window + FAB_EXTRA > FAB_LARGE_BUFS)
        return err_set(FERRY_EINVAL,
                       "fabric: an arena, a maximum frame length and a window of 1..%u are needed",
                       FAB_LARGE_BUFS - FAB_EXTRA);
    if (!(f = calloc(1, sizeof(*f))))
        return err_set(FERRY_ENOMEM, "fabric endpoint");
    *f = (struct xlistener){.loop = loop,
                            .ev = ev,
                            .fn = fn,
                            .arg = arg,
                            .arena = cfg->arena,
                            .arena_len = cfg->arena_len,
                            .window = cfg->window,
                            .max_frame = cfg->max_frame,
                            .lease_ms = cfg->lease_ms ? cfg->lease_ms : FAB_LEASE_BASE_MS,
                            .wait_fd = -1};
    f->readq_tail = &f->readq;
    for (uint32_t i = 0; i < FAB_SLOTS; i++)
        f->gen[i] = fab_random_gen();
    loop_timer_init(&f->kick, fab_on_kick, f);
    loop_timer_init(&f->poll, fab_on_poll, f);
    loop_timer_init(&f->read_pace, fab_on_read_pace, f);
    loop_timer_init(&f->backoff, fab_on_backoff, f);
    loop_timer_init(&f->peer_timer, fab_on_peer_timer, f);
    read_faults(f);
    f->read_chunk = f->fault_read_delay_ms ? (1u << 20) : FAB_READ_CHUNK;
    if ((rc = open_domain(f, cfg->provider, cfg->addr)) < 0 || (rc = open_name(f)) < 0 ||
        (rc = open_buffers(f)) < 0 || (rc = register_arena(f)) < 0)
        goto close_f;
    quirks_init(fi_version(), f->provider);
    quirks_shm_init(f);
    if (f->info->ep_attr->max_msg_size < f->read_chunk)
        f->read_chunk = f->info->ep_attr->max_msg_size;
    if (f->wait_fd >= 0)
        rc = loop_watch_add(loop, &f->watch, f->wait_fd, LOOP_READ, fab_on_cq, f);
    else
        rc = loop_timer_start(loop, &f->poll, loop_now_ms() + 1);
    if (rc < 0)
        goto close_f;
    loop->before_wait = fab_before_wait;
    loop->before_wait_arg = f;
    *out = f;
    return 0;

close_f:
    fab_listener_close(f);
    return rc;
}

static void close_fid(void *fid)
{
    if (fid)
        fi_close(fid);
}

static void close_regions(struct xlistener *f)
{
    close_fid(f->arena_mr ? &f->arena_mr->fid : NULL);
    close_fid(f->buf_mr ? &f->buf_mr->fid : NULL);
    f->arena_mr = f->buf_mr = NULL;
}

/* Closes the endpoint first: after that no operation can complete or touch memory. Then the
 * records of closed connections run their drain callbacks. */
static void fab_listener_close(struct xlistener *f)
{
    if (!f)
        return;
    if (f->loop->before_wait_arg == f) {
        f->loop->before_wait = NULL;
        f->loop->before_wait_arg = NULL;
    }
    if (f->wait_fd >= 0 && f->watch.fn)
        loop_watch_del(f->loop, &f->watch);
    loop_timer_stop(f->loop, &f->poll);
    loop_timer_stop(f->loop, &f->kick);
    loop_timer_stop(f->loop, &f->read_pace);
    loop_timer_stop(f->loop, &f->backoff);
    loop_timer_stop(f->loop, &f->peer_timer);
    for (uint32_t i = 0; i < FAB_SLOTS; i++) {
        if (f->slots[i])
            fab_conn_shut(f->slots[i]);
    }
    /* Regions bound to the endpoint (FI_MR_ENDPOINT) must go before it. */
    if (f->info && (f->info->domain_attr->mr_mode & FI_MR_ENDPOINT))
        close_regions(f);
    close_fid(f->ep ? &f->ep->fid : NULL);
    f->ep = NULL;
    quirks_shm_stop(f); /* after the last call: shutting posts CLOSE too */
    /* Nothing completes any more: what waited for completions is finished here. */
    for (uint32_t i = 0; f->txops && i < f->tx_max; i++) {
        struct fseg *r = f->txops[i].range;
        if (r && --r->pending == 0)
            fab_range_release(r);
    }
    while (f->reading) {
        struct rdop *op = f->reading;
        struct rread *r = op->r;
        f->reading = op->next;
        r->done += op->len;
        if (r->done == r->issued && !r->queued)
            fab_read_free(r);
        free(op);
    }
    while (f->all) {
        struct fconn *c = f->all;
        loop_timer_stop(f->loop, &c->reaper);
        loop_timer_stop(f->loop, &c->deadline);
        fab_conn_reap(f->loop, &c->reaper);
    }
    close_regions(f);
    close_fid(f->av ? &f->av->fid : NULL);
    close_fid(f->cq ? &f->cq->fid : NULL);
    close_fid(f->domain ? &f->domain->fid : NULL);
    close_fid(f->fabric ? &f->fabric->fid : NULL);
    if (f->info)
        fi_freeinfo(f->info);
    while (f->avs) {
        struct avent *a = f->avs;
        f->avs = a->next;
        free(a);
    }
    if (f->bufs)
        munmap(f->bufs, f->bufs_len);
    free(f->rbufs);
    free(f->txops);
    free(f);
}

static const char *fab_address(const struct xlistener *f)
{
    return f->address;
}

static const char *fab_provider(const struct xlistener *f)
{
    return f->provider;
}

/* Another node's fabric is reachable when it runs the same provider as ours. */
static int fab_reaches(const struct xlistener *f, const char *addr, char *why, size_t len)
{
    const char *at = strchr(addr, '@');
    size_t plen = strlen(f->provider);

    if (at && (size_t)(at - addr) == plen && strncmp(addr, f->provider, plen) == 0) {
        snprintf(why, len, "both on %s", f->provider);
        return 1;
    }
    snprintf(why, len, "the peer's fabric is %.*s, ours %s", at ? (int)(at - addr) : 0, addr,
             f->provider);
    return 0;
}

/* Where one-sided reads start to pay, per provider, from `ferry calibrate` runs on our 2-core
 * VMs (docs/design/transports.md); other providers start from the engine's generic default. */
static int fab_eager_default(const struct xlistener *f, uint64_t *out)
{
    static const struct {
        const char *provider;
        uint64_t eager_max;
    } measured[] = {
        {"shm", 16u << 10},
        {"tcp;ofi_rxm", 16u << 10},
    };

    for (size_t i = 0; i < sizeof(measured) / sizeof(measured[0]); i++) {
        if (strcmp(f->provider, measured[i].provider) == 0) {
            *out = measured[i].eager_max;
            return 0;
        }
    }
    return err_set(FERRY_ENOSYS, "no measured eager limit for %s", f->provider);
}

static void fab_counters(const struct xlistener *f, xcounter_fn *fn, void *arg)
{
    const struct fab_counters *c = &f->stats;

#define FAB_REPORT(name, kind, help) fn(arg, "fabric_" #name, FERRY_STAT_##kind, help, c->name);
    FAB_COUNTERS(FAB_REPORT)
#undef FAB_REPORT
    quirks_report(fn, arg); /* the process's: recv is process-wide */
}

const struct transport transport_fabric = {
    .name = "fabric",
    .flags = XPORT_ONE_SIDED,
    .listen = fab_listen,
    .listener_close = fab_listener_close,
    .address = fab_address,
    .provider = fab_provider,
    .reaches = fab_reaches,
    .counters = fab_counters,
    .eager_default = fab_eager_default,
    .connect = fab_connect,
    .send_frame = fab_send_frame,
    .send_range = fab_send_range,
    .recv_into = fab_recv_into,
    .pause = fab_pause,
    .close = fab_close,
    .drain = fab_drain,
};
