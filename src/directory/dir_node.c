/*
 * dir_node.c - the fields of node entries (transports and their addresses, the incarnation's
 * time). It calls no other file of the unit.
 */
#include "directory/directory_int.h"

#include <time.h>

void directory_inc_time(uint64_t inc, char *buf, size_t len)
{
    time_t t = (time_t)((inc >> 12) / 1000);
    struct tm tm;

    if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, len, "%" PRIu64, inc);
}

const char *directory_node_addr(const struct directory_node *n, const char *transport)
{
    for (uint32_t i = 0; i < n->nxp; i++)
        if (strcmp(n->xp[i].name, transport) == 0)
            return n->xp[i].addr;
    return NULL;
}

int directory_node_set(struct directory_node *n, const char *transport, const char *addr)
{
    uint32_t i = 0;

    if (strlen(transport) > DIRECTORY_XPORT_NAME_MAX || strlen(addr) > DIRECTORY_XPORT_ADDR_MAX)
        return err_set(FERRY_EINVAL, "directory: transport %.16s: name or address too long",
                       transport);
    while (i < n->nxp && strcmp(n->xp[i].name, transport) != 0)
        i++;
    if (i == DIRECTORY_XPORTS)
        return err_set(FERRY_EINVAL, "directory: more than %d transports", DIRECTORY_XPORTS);
    snprintf(n->xp[i].name, sizeof(n->xp[i].name), "%s", transport);
    snprintf(n->xp[i].addr, sizeof(n->xp[i].addr), "%s", addr);
    if (i == n->nxp)
        n->nxp++;
    return 0;
}

void directory_node_names(const struct directory_node *n, char *buf, size_t len)
{
    size_t at = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < n->nxp && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? "," : "", n->xp[i].name);
}
