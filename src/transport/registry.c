/* registry.c - the transports of this build, preferred first (registry.h). */
#include "transport/registry.h"

#include <string.h>

static const struct transport *const transports[] = {
    &transport_fabric, &transport_tcp, /* the fallback: last */
};
#define N_TRANSPORTS (sizeof(transports) / sizeof(transports[0]))
_Static_assert(N_TRANSPORTS <= REGISTRY_MAX, "REGISTRY_MAX has room for every transport");

const struct transport *const *registry_transports(size_t *n)
{
    *n = N_TRANSPORTS;
    return transports;
}

const struct transport *registry_find(const char *name)
{
    for (size_t i = 0; i < N_TRANSPORTS; i++)
        if (strcmp(transports[i]->name, name) == 0)
            return transports[i];
    return NULL;
}

int registry_index(const struct transport *t)
{
    for (size_t i = 0; i < N_TRANSPORTS; i++)
        if (transports[i] == t)
            return (int)i;
    return -1;
}
