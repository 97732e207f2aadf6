/*
 * dir_node.c - the fields of node entries (transports and their addresses, the incarnation's
 * time) and their signatures. It calls no other file of the unit.
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

/* Appends a length, then the text. */
static size_t sig_put(char *buf, size_t at, size_t cap, const char *text)
{
    int n = snprintf(buf + at, cap - at, "%zu:%s", strlen(text), text);
    return n < 0 || (size_t)n >= cap - at ? cap : at + (size_t)n;
}

int dir_node_sign(const struct directory *d, const struct directory_node *n, char hex[DIR_SIG_HEX])
{
    char msg[64 + 2 * (DIRECTORY_NODE_ID_MAX + DIRECTORY_ADDR_MAX) +
             DIRECTORY_XPORTS * (DIRECTORY_XPORT_NAME_MAX + DIRECTORY_XPORT_ADDR_MAX + 16)];
    const struct directory_xport *xp[DIRECTORY_XPORTS];
    char inc[U64_TEXT];
    uint8_t mac[MAC_LEN];
    size_t at = 0, cap = sizeof(msg);
    uint32_t nxp = n->nxp < DIRECTORY_XPORTS ? n->nxp : DIRECTORY_XPORTS;

    for (uint32_t i = 0; i < nxp; i++) { /* by name: Redis gives fields in any order */
        uint32_t j = i;
        for (; j > 0 && strcmp(xp[j - 1]->name, n->xp[i].name) > 0; j--)
            xp[j] = xp[j - 1];
        xp[j] = &n->xp[i];
    }
    snprintf(inc, sizeof(inc), "%" PRIu64, n->inc);
    at = sig_put(msg, at, cap, "ferry node 1");
    at = sig_put(msg, at, cap, n->id);
    at = sig_put(msg, at, cap, inc);
    at = sig_put(msg, at, cap, n->addr);
    for (uint32_t i = 0; i < nxp; i++) {
        at = sig_put(msg, at, cap, xp[i]->name);
        at = sig_put(msg, at, cap, xp[i]->addr);
    }
    if (at >= cap)
        return err_set(FERRY_ESYS, "node entry too long to sign");
    if (mac_sha256(d->secret, d->secret_len, &(struct mac_part){msg, at}, 1, mac) < 0)
        return FERRY_ESYS;
    for (size_t i = 0; i < MAC_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    return 0;
}
