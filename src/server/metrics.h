/*
 * metrics.h - ferryd --metrics HOST:PORT: GET /metrics answers in Prometheus' text exposition
 * format (version 0.0.4), on the daemon's own loop.
 *
 * Everything comes from the one stats table (server_stats_report: the daemon's fields, then
 * its transports' counters, which get a transport label), plus the latency histograms, the
 * peers and the release. A scrape renders about a hundred lines into a buffer and writes it
 * without blocking: it never holds client requests for longer than that.
 *
 * Bounds: METRICS_CONNS_MAX connections at once (a new one past that closes the oldest still
 * sending its request, counted in `refused`: idle connections cannot lock scrapes out), a
 * request of at most METRICS_REQUEST_MAX bytes, METRICS_TIMEOUT_MS for a whole exchange; every
 * connection closes after one answer. The listener pauses when out of descriptors
 * (loop/accept.h).
 */
#ifndef FERRY_METRICS_H
#define FERRY_METRICS_H

#include "common/proto.h"

struct server;
struct metrics;

#define METRICS_CONNS_MAX 8
#define METRICS_REQUEST_MAX 4096
#define METRICS_TIMEOUT_MS 3000

struct metrics_counters {
    uint64_t scrapes; /* GET /metrics answered */
    uint64_t refused; /* requests answered with an error, cut for size or time, or turned away */
};

/* Listens on addr (numeric HOST:PORT) for srv; FERRY_EINVAL or FERRY_ESYS with the reason. */
int metrics_open(struct server *srv, const char *addr, struct metrics **out);
const struct metrics_counters *metrics_counters(const struct metrics *m);
/* Times the listener paused, out of descriptors or memory (loop/accept.h). */
uint64_t metrics_accept_pauses(const struct metrics *m);
/* The address it listens on, with the port the kernel chose for port 0. */
const char *metrics_address(const struct metrics *m);
/* Renders srv's metrics into b (the body of an answer to GET /metrics). */
void metrics_render(struct server *srv, struct pbuf *b);
void metrics_close(struct metrics *m);

#endif
