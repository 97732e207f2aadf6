/* fault.c - the test hooks of FERRY_FAULT (fault.h). */
#include "common/fault.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* Where "name" starts a hook of FERRY_FAULT (after its start or a comma), or NULL. */
static const char *find(const char *name)
{
    const char *s = getenv("FERRY_FAULT"), *at = s;
    size_t len = strlen(name);

    while (at && (at = strstr(at, name))) {
        if ((at == s || at[-1] == ',') && (at[len] == '\0' || at[len] == ',' || at[len] == '='))
            return at;
        at += len;
    }
    return NULL;
}

int fault_on(const char *name)
{
    return find(name) != NULL;
}

unsigned fault_value(const char *name, unsigned max)
{
    const char *at = find(name);
    unsigned long v;

    if (!at || at[strlen(name)] != '=')
        return 0;
    v = strtoul(at + strlen(name) + 1, NULL, 10);
    if (v < 1 || v > max) {
        log_warn("test fault %s ignored: a value from 1 to %u", name, max);
        return 0;
    }
    return (unsigned)v;
}
