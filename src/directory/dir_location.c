/*
 * dir_location.c - a node's location as text: its directory entry (id, incarnation, address,
 * transports) with the entry's signature, so that a reference can carry where its object was
 * sealed and another node can ask that node without asking Redis first. It calls no other
 * file of the unit but dir_sign.c, dir_node.c and dir_util.c.
 *
 * The text is "ferry1;ID;INC;ADDR;NAME=XADDR[;NAME=XADDR...][;#SIG]". Within a field every
 * byte that is a separator (';', '=', '#', '%'), a space, a control byte or not ASCII is
 * written %XX ("tcp;ofi_rxm@..." becomes "tcp%3bofi_rxm@..."); the #SIG is there only (and
 * always) under a cluster secret. A location says no more than the node's entry in Redis
 * does, and is believed as far: signed with our secret, or anything in an open cluster. What
 * the node then sends is checked as a holder's always is (its handshake proves its secret,
 * its reply its content).
 */
#include "directory/directory_int.h"

#define LOCATION_MAGIC "ferry1;"

static int escaped(unsigned char c)
{
    return c <= ' ' || c >= 0x7f || c == ';' || c == '=' || c == '#' || c == '%';
}

/* Appends c at buf + *at: 0, or -1 when it leaves no room for the NUL. */
static int put_char(char *buf, size_t len, size_t *at, char c)
{
    if (*at + 1 >= len)
        return -1;
    buf[(*at)++] = c;
    buf[*at] = '\0';
    return 0;
}

/* Appends s, escaped: 0, or -1 when it does not fit. */
static int put_escaped(char *buf, size_t len, size_t *at, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    int rc = 0;

    for (; *s && rc == 0; s++) {
        unsigned char c = (unsigned char)*s;
        if (!escaped(c))
            rc = put_char(buf, len, at, (char)c);
        else /* || orders the three, and stops at the first that does not fit */
            rc = put_char(buf, len, at, '%') || put_char(buf, len, at, hex[c >> 4]) ||
                 put_char(buf, len, at, hex[c & 15]);
    }
    return rc;
}

int directory_location(const struct directory *d, char *buf, size_t len)
{
    char inc[U64_TEXT], sig[DIR_SIG_HEX];
    const char *head[] = {d->self.id, inc, d->self.addr};
    size_t at = 0;
    int rc;

    if (!len)
        return err_set(FERRY_EINVAL, "no room for a location");
    buf[0] = '\0';
    snprintf(inc, sizeof(inc), "%" PRIu64, d->self.inc);
    rc = put_escaped(buf, len, &at, "ferry1");
    for (size_t i = 0; i < 3 && !rc; i++)
        rc = put_char(buf, len, &at, ';') || put_escaped(buf, len, &at, head[i]);
    for (uint32_t i = 0; i < d->self.nxp && !rc; i++)
        rc = put_char(buf, len, &at, ';') || put_escaped(buf, len, &at, d->self.xp[i].name) ||
             put_char(buf, len, &at, '=') || put_escaped(buf, len, &at, d->self.xp[i].addr);
    if (!rc && d->secret_len) {
        int signed_rc = dir_node_sign(d, &d->self, sig);
        if (signed_rc < 0)
            return signed_rc;
        rc = put_char(buf, len, &at, ';') || put_char(buf, len, &at, '#') ||
             put_escaped(buf, len, &at, sig);
    }
    if (rc)
        return err_set(FERRY_EINVAL, "this node's location takes more than %zu bytes", len);
    return 0;
}

/* Field [p, end), unescaped, into out (cap bytes with the NUL): 1, or 0 when it is empty,
 * too long, holds a byte that should have been escaped, a bad escape or a NUL. */
static int unescape(char *out, size_t cap, const char *p, const char *end)
{
    for (const char *q = p; q < end; q++)
        if (*q != '%' && escaped((unsigned char)*q))
            return 0;
    return p < end && dir_percent_decode(p, end, out, cap) == 0;
}

/* The raw field at *p up to the next ';' (or the end): [*p, *end); *p moves past it. */
static const char *next_field(const char **p, const char **end)
{
    const char *start = *p, *semi = strchr(start, ';');

    *end = semi ? semi : start + strlen(start);
    *p = semi ? semi + 1 : *end;
    return start;
}

static int parse_inc(const char *text, uint64_t *inc)
{
    char *end;

    if (text[0] < '0' || text[0] > '9')
        return 0;
    errno = 0;
    *inc = strtoull(text, &end, 10);
    return !errno && !*end && *inc != 0;
}

/* Raw "NAME=XADDR" [f, end) into node's transports: 0 when it is not one. */
static int parse_xport(struct directory_node *node, const char *f, const char *end)
{
    const char *eq = memchr(f, '=', (size_t)(end - f));
    char name[DIRECTORY_XPORT_NAME_MAX + 1], addr[DIRECTORY_XPORT_ADDR_MAX + 1];

    if (!eq || !unescape(name, sizeof(name), f, eq) || !unescape(addr, sizeof(addr), eq + 1, end))
        return 0;
    if (directory_node_addr(node, name) || node->nxp == DIRECTORY_XPORTS)
        return 0;
    return directory_node_set(node, name, addr) == 0;
}

/* The head: id, incarnation and address. */
static int parse_head(const char **p, struct directory_node *node)
{
    char inc[U64_TEXT];
    const char *f, *end;

    f = next_field(p, &end);
    if (!unescape(node->id, sizeof(node->id), f, end))
        return 0;
    f = next_field(p, &end);
    if (!unescape(inc, sizeof(inc), f, end) || !parse_inc(inc, &node->inc))
        return 0;
    f = next_field(p, &end);
    return unescape(node->addr, sizeof(node->addr), f, end);
}

int directory_location_parse(const struct directory *d, const char *text,
                             struct directory_node *node)
{
    char expect[DIR_SIG_HEX], sig[DIR_SIG_HEX] = "";
    const char *p = text, *f, *end;

    memset(node, 0, sizeof(*node));
    if (strnlen(text, DIRECTORY_LOCATION_MAX) == DIRECTORY_LOCATION_MAX ||
        strncmp(text, LOCATION_MAGIC, strlen(LOCATION_MAGIC)) != 0)
        return err_set(FERRY_EINVAL, "not a location (it starts \"" LOCATION_MAGIC "\")");
    p += strlen(LOCATION_MAGIC);
    if (!parse_head(&p, node))
        return err_set(FERRY_EINVAL, "location: a node id, incarnation and address first");
    while (*p) {
        f = next_field(&p, &end);
        if (*f == '#' && !*p) { /* the last field may be the signature */
            if (!unescape(sig, sizeof(sig), f + 1, end))
                return err_set(FERRY_EINVAL, "location of %s: a malformed signature", node->id);
            break;
        }
        if (!parse_xport(node, f, end))
            return err_set(FERRY_EINVAL, "location of %s: field %.32s is not NAME=ADDRESS",
                           node->id, f);
    }
    if (!node->nxp)
        return err_set(FERRY_EINVAL, "location of %s: no transport", node->id);
    if (d->secret_len && (dir_node_sign(d, node, expect) < 0 || !dir_sig_matches(expect, sig)))
        return err_set(FERRY_EAUTH, "location of %s: not signed with our cluster secret", node->id);
    return 0;
}
