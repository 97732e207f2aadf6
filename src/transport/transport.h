/*
 * transport.h - how the transfer engine moves frames and object bytes between nodes,
 * independent of the wire (Redis' ConnectionType, NCCL's net plugin).
 *
 * A transport is a const table of operations. Each of its connections embeds struct xconn
 * first. The engine speaks frames (common/proto.h headers, transfer/wire.h payloads) and asks
 * the transport to move object bytes out of and into the arena without copying them in user
 * space. A transport that cannot do an operation returns FERRY_ENOSYS from it (never NULL).
 *
 * Everything runs on the daemon's loop thread. Callbacks may close the connection; after
 * on_close the engine must not touch it (the transport frees it after the loop turn).
 *
 * An xlistener is this node's endpoint on a transport: it accepts connections and is what
 * outgoing connections are made from (the fabric transport has one endpoint for all peers).
 *
 * The engine never names a transport: it opens every one the registry lists (registry.h),
 * publishes each endpoint's address in the directory under the transport's name, reaches a
 * peer by the first transport whose endpoint says it reaches the peer's address, and reports
 * each endpoint's counters under the names it gives them.
 */
#ifndef FERRY_TRANSPORT_H
#define FERRY_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"
#include "loop/loop.h"

struct xconn;
struct xlistener;

/* What the engine hears from a connection. */
struct xconn_events {
    /* A whole frame arrived; payload holds h->length bytes, valid during the call. */
    void (*frame)(struct xconn *c, const struct proto_header *h, const uint8_t *payload);
    /* The bytes asked for with recv_into have all arrived. */
    void (*received)(struct xconn *c, void *arg);
    /* Optional (NULL: not told): n more bytes of the range of a recv_into (its arg) are in
     * place at p, in order, as they arrive; the call for the last of them comes before
     * received. A transport whose bytes land all at once (one-sided reads) may never call it.
     * It must not close the connection. */
    void (*landed)(struct xconn *c, void *arg, const uint8_t *p, size_t n);
    /* The bytes given to send_range have all left (their memory may be unpinned). */
    void (*sent)(struct xconn *c, void *arg);
    /* The connection is gone: err is FERRY_EPROTO when the peer broke the framing, else
     * FERRY_ECONN; reason is for the log. Pending receives and sends are dropped without
     * their callbacks. */
    void (*closed)(struct xconn *c, int err, const char *reason);
};

struct xconn {
    const struct transport *type;
    struct xlistener *local; /* the endpoint it belongs to */
    const struct xconn_events *ev;
    void *owner;        /* the engine's record of this connection */
    char peer[128];     /* printable peer address, for logs */
    uint64_t bytes_in;  /* read so far (the engine's stall watchdogs compare them) */
    uint64_t bytes_out; /* written so far */
    /* The peer owes nothing visible before this time (loop_now_ms; 0: none): bytes it reads
     * one-sided under a lease move no counter until it says it is done, and the lease, not
     * the engine's stall watchdogs, bounds that read. */
    uint64_t quiet_until_ms;
    uint32_t max_frame; /* frames longer than this break the framing; the engine lowers it
                         * for peers that have not authenticated yet */
    uint64_t eager_max; /* send_range: larger ranges go one-sided where the transport can */
};

typedef void xaccept_fn(struct xlistener *l, struct xconn *c, void *arg);

/* What an endpoint is opened with; each transport reads its part. */
struct xconfig {
    const char *addr;     /* tcp: HOST:PORT to listen on; fabric: binds to HOST if it can */
    const char *provider; /* fabric: libfabric provider name, e.g. "tcp;ofi_rxm" (NULL: any) */
    uint8_t *arena;       /* fabric: the memory registered once, where objects live */
    uint64_t arena_len;
    uint32_t max_frame; /* the longest frame a new connection takes (xconn.max_frame) */
    uint32_t window;    /* fabric: receive buffers (credits) per connection and size class */
    uint32_t lease_ms;  /* fabric: a one-sided read's lease before its per-byte share (0: 5 s) */
};

/* What a transport does beyond moving frames and arena bytes in order. */
enum transport_flags {
    /* Moves objects above the engine's eager limit by one-sided reads (the limit applies). */
    XPORT_ONE_SIDED = 1u << 0,
    /* Reaches every peer that advertises it: the last resort, tried after the others. */
    XPORT_FALLBACK = 1u << 1,
};

/* One counter of an endpoint: name (prefixed with the transport's), enum ferry_stat_kind, what
 * it counts, and its value. */
typedef void xcounter_fn(void *arg, const char *name, int kind, const char *help, uint64_t value);

struct transport {
    const char *name; /* in the directory, on --transport, in ferry stat's peers */
    unsigned flags;   /* enum transport_flags */
    /* Opens this node's endpoint; every accepted connection is handed to fn. */
    int (*listen)(struct loop *loop, const struct xconfig *cfg, const struct xconn_events *ev,
                  xaccept_fn *fn, void *arg, struct xlistener **out);
    void (*listener_close)(struct xlistener *l);
    /* The address peers connect to (published in the directory under the transport's name),
     * and the provider behind it (the transport's name when it has none). */
    const char *(*address)(const struct xlistener *l);
    const char *(*provider)(const struct xlistener *l);
    /* 1 when this endpoint can reach a peer that published addr; else 0, and why (for
     * ferry stat's peers). */
    int (*reaches)(const struct xlistener *l, const char *addr, char *why, size_t len);
    /* Calls fn for each counter of the endpoint. */
    void (*counters)(const struct xlistener *l, xcounter_fn *fn, void *arg);
    /* XPORT_ONE_SIDED: the size up to which objects had better go as messages on this
     * endpoint (measured per provider); FERRY_ENOSYS for the others. */
    int (*eager_default)(const struct xlistener *l, uint64_t *out);
    /* Starts connecting to a peer's address; frames may be sent at once (they wait for the
     * connection). A failure to connect arrives as ev->closed. */
    int (*connect)(struct xlistener *l, const char *addr, const struct xconn_events *ev,
                   struct xconn **out);
    /* Queues a whole frame (copied). */
    int (*send_frame)(struct xconn *c, const uint8_t *frame, size_t len);
    /* Queues len bytes of the arena, sent from where they are, after what is queued. */
    int (*send_range)(struct xconn *c, const uint8_t *p, uint64_t len, void *arg);
    /* The next len bytes of the stream, after the frame being handled, go to dst (NULL:
     * they are read and dropped). Calls queue up in order. */
    int (*recv_into)(struct xconn *c, uint8_t *dst, uint64_t len, void *arg);
    /* Stops (paused = 1) or resumes reading from the peer: backpressure. */
    void (*pause)(struct xconn *c, int paused);
    /* Closes at once, without ev->closed; pending callbacks are dropped. */
    void (*close)(struct xconn *c);
    /* After close (or ev->closed): calls fn(arg) from the loop once no operation of c can
     * still write into memory given to recv_into (a one-sided read in flight). FERRY_ENOSYS where
     * nothing is ever written after the fact (tcp): that memory is free at once. */
    int (*drain)(struct xconn *c, void (*fn)(void *arg), void *arg);
};

/* Splits "HOST:PORT" (HOST may be [v6]) into host and port strings. FERRY_EINVAL if not. */
int transport_split_addr(const char *addr, char *host, size_t host_len, char *port,
                         size_t port_len);

/* A non-blocking TCP socket listening on "HOST:PORT" (numeric; port 0 picks one) into *fd;
 * FERRY_EINVAL for an address that is not one, FERRY_ESYS when it cannot listen there. */
int transport_listen_tcp(const char *addr, int backlog, int *fd);

#endif
