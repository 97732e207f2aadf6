/*
 * registry.h - the transports this build has, in the order the engine prefers them. A peer is
 * reached by the first transport that both nodes have open and whose endpoint here reaches the
 * peer's address; the last one (tcp, XPORT_FALLBACK) reaches every node.
 *
 * Adding a transport: its own file (a const struct transport with designated initialisers, its
 * connections embedding struct xconn first, FERRY_ENOSYS for what it cannot do), a line in
 * registry.c, and, for the options it needs, a field of struct xconfig. The engine never names it.
 */
#ifndef FERRY_REGISTRY_H
#define FERRY_REGISTRY_H

#include <stddef.h>

#include "transport/transport.h"

/* Most transports a build has (the engine keeps an endpoint slot per registered one). */
#define REGISTRY_MAX 4

extern const struct transport transport_tcp;
extern const struct transport transport_fabric;

/* The registered transports, preferred first; n receives how many. */
const struct transport *const *registry_transports(size_t *n);

/* The transport called name, or NULL. */
const struct transport *registry_find(const char *name);

/* Its index in registry_transports(), or -1. */
int registry_index(const struct transport *t);

#endif
