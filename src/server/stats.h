/*
 * stats.h - the daemon's counters by name: struct ferry_stats filled from the store, the
 * server, the engine and the directory (ferry.h's FERRY_STATS_FIELDS names each), and the
 * whole report with the transports' counters after, for STATS (and anything else that lists
 * them). The one place that maps the daemon's state to the table's names.
 */
#ifndef FERRY_SERVER_STATS_H
#define FERRY_SERVER_STATS_H

#include "server/server.h"
#include "transport/transport.h"

/* The table's counters now. */
void server_stats(struct server *srv, ferry_stats *out);

/* Calls fn for every counter: the table's, in its order, then each open transport's. */
void server_stats_report(struct server *srv, xcounter_fn *fn, void *arg);

#endif
