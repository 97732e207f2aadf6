/* options.c - ferryd's options, from one table (options.h). */
#include "server/options.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/size.h"
#include "directory/directory.h"
#include "transfer/engine.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "transfer/wire.h"

/* The help texts state these defaults in words: each is checked against its constant here. */
_Static_assert(FERRYD_DEFAULT_BUSY_POLL_US == 50, "--busy-poll's help says 50");
_Static_assert(LOG_LIMIT_PER_SECOND == 50, "--verbose's help says 50");
_Static_assert(STORE_BYTES_PER_OBJECT == 8u << 10 && STORE_OBJECTS_MIN == 65536u &&
                   STORE_OBJECT_COST == 420u,
               "--max-objects' help says 8 KiB, 65536 and 420 B");
_Static_assert(FERRYD_FD_RESERVE == 576 && FERRYD_FD_RESERVE_PEERS == 1536 &&
                   FERRYD_MAX_CLIENTS == 4096 && FERRYD_HELLO_DEADLINE_MS == 10000 &&
                   FERRYD_UNGREETED_MAX == 64,
               "--max-clients' help says 576, 1536, 4096, 10 s and 64");
_Static_assert(FERRYD_DEFAULT_SPILL_AT == 80, "--spill-at's help says 80");
_Static_assert(ENGINE_STALL_MS == 30000 && ENGINE_HANDSHAKE_MS == 10000 &&
                   ENGINE_ANSWER_MS == 3000 && ENGINE_BREAKER_MS == 30000 &&
                   ENGINE_RATE_MS == 5000 && ENGINE_ORPHAN_MS == 300,
               "--timers' help says 30000, 10000, 3000, 30000, 5000 and 300");
_Static_assert(DIRECTORY_HEARTBEAT_MS == 1000 && DIRECTORY_TTL_MS == 10000 &&
                   DIRECTORY_TIMEOUT_MS == 5000,
               "--timers' help says 1000, 10000 and 5000");

/* The names of this build's transports, preferred first: "fabric|tcp". */
static const char *transport_names(void)
{
    static char names[128];
    size_t n, at = 0;
    const struct transport *const *t = registry_transports(&n);

    for (size_t i = 0; i < n && at < sizeof(names); i++)
        at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", i ? "|" : "", t[i]->name);
    return names;
}

/* ---- the values ---- */

/* An unsigned decimal in [lo, hi], or FERRY_EINVAL naming the option. */
static int parse_uint(const char *opt, const char *text, unsigned long long lo,
                      unsigned long long hi, unsigned long long *out)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 10);

    if (!*text || *end || text[0] == '-' || v < lo || v > hi)
        return err_set(FERRY_EINVAL, "--%s '%s': expected %llu to %llu", opt, text, lo, hi);
    *out = v;
    return 0;
}

static int set_socket_mode(struct ferryd_args *a, char *v)
{
    char *end;
    unsigned long m = strtoul(v, &end, 8);

    if (!*v || *end || m > 0777)
        return err_set(FERRY_EINVAL, "socket mode '%s': expected octal permission bits", v);
    a->cfg->socket_mode = (mode_t)m;
    return 0;
}

static int set_busy_poll(struct ferryd_args *a, char *v)
{
    unsigned long long us = 0;
    int rc = parse_uint("busy-poll", v, 0, 1000000, &us);

    a->cfg->busy_poll_us = (uint32_t)us;
    return rc;
}

/* Checked before the arena is reserved: the form only (the listen comes later). */
static int set_metrics(struct ferryd_args *a, char *v)
{
    char host[256], port[16], why[256];
    int rc = transport_split_addr(v, host, sizeof(host), port, sizeof(port));

    if (rc < 0) {
        snprintf(why, sizeof(why), "%s", ferry_errmsg());
        return err_set(rc, "--metrics: %s", why);
    }
    a->cfg->metrics_addr = v;
    return 0;
}

static int set_verbose(struct ferryd_args *a, char *v)
{
    log_set_level(LOG_DEBUG);
    return 0;
}

static int set_log_format(struct ferryd_args *a, char *v)
{
    if (strcmp(v, "json") != 0 && strcmp(v, "text") != 0)
        return err_set(FERRY_EINVAL, "--log-format: '%s' is neither text nor json", v);
    log_set_format(v[0] == 'j' ? LOG_JSON : LOG_TEXT);
    return 0;
}

static int set_max_objects(struct ferryd_args *a, char *v)
{
    unsigned long long n = 0;
    int rc = parse_uint("max-objects", v, 1, 1ull << 32, &n);

    a->cfg->max_objects = n;
    return rc;
}

static int set_max_clients(struct ferryd_args *a, char *v)
{
    unsigned long long n = 0;
    int rc = parse_uint("max-clients", v, 1, 1ull << 20, &n);

    a->cfg->max_clients = n;
    return rc;
}

static int set_spill_at(struct ferryd_args *a, char *v)
{
    char *end;
    unsigned long p = strtoul(v, &end, 10);

    if (end == v || (*end && strcmp(end, "%") != 0) || p < 1 || p > 100)
        return err_set(FERRY_EINVAL, "--spill-at: '%s' is not a percent from 1 to 100", v);
    a->cfg->spill_at = (unsigned)p;
    return 0;
}

/* Keeps a copy of the directory URL and blanks its credentials ([[USER]:PASSWORD@]) in v:
 * the process's arguments are visible to every local user (ps). Warns when they held a
 * password: blanked is not unseen (between exec and this, /proc/PID/cmdline shows it). */
static int set_directory(struct ferryd_args *a, char *v)
{
    static char url[2048];
    char *creds = strstr(v, "://"), *at;

    if (strlen(v) >= sizeof(url))
        return err_set(FERRY_EINVAL, "--directory: a URL of at most %zu bytes", sizeof(url) - 1);
    memcpy(url, v, strlen(v) + 1);
    a->cfg->directory_url = url;
    if (!creds || !(at = strrchr(creds, '@')))
        return 0;
    if (memchr(creds + 3, ':', (size_t)(at - creds - 3)))
        log_warn("--directory: a password in the URL can be read by every local user "
                 "(/proc/PID/cmdline) until ferryd blanks it: give it with "
                 "--directory-password-file or %s instead",
                 PASSWORD_ENV);
    for (char *p = creds + 3; p < at; p++)
        *p = 'x';
    return 0;
}

static int set_password_file(struct ferryd_args *a, char *v)
{
    a->password_file = v;
    return 0;
}

static int set_transport(struct ferryd_args *a, char *v)
{
    if (strcmp(v, "auto") != 0 && !registry_find(v))
        return err_set(FERRY_EINVAL, "transport '%s': expected auto|%s", v, transport_names());
    a->cfg->transport = v;
    return 0;
}

/* SIZE, auto, or @FILE: the first line of a file `ferry calibrate --save` wrote. */
static int set_eager_max(struct ferryd_args *a, char *v)
{
    char line[64];
    FILE *f;

    if (strcmp(v, "auto") == 0) {
        a->cfg->eager_max = ENGINE_EAGER_AUTO;
        return 0;
    }
    if (v[0] != '@')
        return size_parse(v, &a->cfg->eager_max);
    if (!(f = fopen(v + 1, "r")))
        return err_set(FERRY_EINVAL, "--eager-max %s: %s", v, strerror(errno));
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (size_parse(line, &a->cfg->eager_max) < 0)
        return err_set(FERRY_EINVAL, "--eager-max %s: '%s' is not a size", v, line);
    return 0;
}

static int set_fabric_window(struct ferryd_args *a, char *v)
{
    unsigned long long n = 0;
    int rc = parse_uint("fabric-window", v, 1, 256, &n);

    a->cfg->fabric_window = (uint32_t)n;
    return rc;
}

/* An option's field: its offset in server_config. */
#define CFG(field) offsetof(struct server_config, field)

/* --timers' names, each a uint32_t of server_config in milliseconds, and its least value. */
static const struct timer_def {
    const char *name;
    size_t field;
    unsigned long min_ms;
} timer_defs[] = {
    {"stall", CFG(timers.stall_ms), ENGINE_TIMER_MIN_MS},
    {"handshake", CFG(timers.handshake_ms), ENGINE_TIMER_MIN_MS},
    {"answer", CFG(timers.answer_ms), ENGINE_TIMER_MIN_MS},
    {"breaker", CFG(timers.breaker_ms), ENGINE_TIMER_MIN_MS},
    {"lease", CFG(timers.lease_ms), ENGINE_LEASE_MIN_MS},
    {"rate", CFG(timers.rate_ms), ENGINE_TIMER_MIN_MS},
    {"orphan", CFG(timers.orphan_ms), ENGINE_TIMER_MIN_MS},
    {"relay", CFG(timers.relay_ms), ENGINE_TIMER_MIN_MS},
    {"heartbeat", CFG(heartbeat_ms), ENGINE_TIMER_MIN_MS},
    {"ttl", CFG(ttl_ms), ENGINE_TIMER_MIN_MS},
    {"directory", CFG(directory_timeout_ms), ENGINE_TIMER_MIN_MS},
};
#define N_TIMERS (sizeof(timer_defs) / sizeof(timer_defs[0]))

/* The timers' names, for messages: "stall, handshake, ...". */
static const char *timer_names(void)
{
    static char names[192];
    size_t at = 0;

    if (names[0])
        return names;
    for (size_t i = 0; i < N_TIMERS; i++)
        at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", i ? ", " : "",
                               timer_defs[i].name);
    return names;
}

/* One NAME=MS of item (up to len) into parsed[] (indexed as timer_defs). */
static int timer_parse_one(const char *item, size_t len, uint32_t *parsed, int *seen)
{
    const char *eq = memchr(item, '=', len);
    size_t i = 0;
    char *end;
    unsigned long v;

    while (eq && i < N_TIMERS &&
           !(strlen(timer_defs[i].name) == (size_t)(eq - item) &&
             memcmp(timer_defs[i].name, item, (size_t)(eq - item)) == 0))
        i++;
    if (!eq || i == N_TIMERS)
        return err_set(FERRY_EINVAL, "timer '%.*s': expected NAME=MS, NAME one of %s", (int)len,
                       item, timer_names());
    v = strtoul(eq + 1, &end, 10);
    if (end != item + len || !isdigit((unsigned char)eq[1]) || v < timer_defs[i].min_ms ||
        v > ENGINE_TIMER_MAX_MS)
        return err_set(FERRY_EINVAL, "timer '%.*s': expected milliseconds from %lu to %d", (int)len,
                       item, timer_defs[i].min_ms, ENGINE_TIMER_MAX_MS);
    parsed[i] = (uint32_t)v;
    seen[i] = 1;
    return 0;
}

/* NAME=MS[,NAME=MS...]: all or nothing, over what earlier --timers set. */
static int set_timers(struct ferryd_args *a, char *v)
{
    uint32_t parsed[N_TIMERS];
    int seen[N_TIMERS] = {0}, rc;

    if (!*v)
        return err_set(FERRY_EINVAL, "timers: expected NAME=MS[,NAME=MS...]");
    for (const char *p = v;;) {
        const char *comma = strchr(p, ',');
        if ((rc = timer_parse_one(p, comma ? (size_t)(comma - p) : strlen(p), parsed, seen)) < 0)
            return rc;
        if (!comma)
            break;
        p = comma + 1;
    }
    for (size_t i = 0; i < N_TIMERS; i++)
        if (seen[i])
            memcpy((char *)a->cfg + timer_defs[i].field, &parsed[i], sizeof(parsed[i]));
    return 0;
}

static int show_help(struct ferryd_args *a, char *v)
{
    options_usage(stdout);
    exit(0);
}

static int show_version(struct ferryd_args *a, char *v)
{
    printf("ferryd %s (client protocol %u, transfer protocol %u)\n", ferry_version(), PROTO_VERSION,
           WIRE_VERSION);
    exit(0);
}

static int print_options(struct ferryd_args *a, char *v);

/* ---- the table ---- */

enum group { GENERAL, SPILLING, CLUSTER, NGROUPS };

static const char *const group_titles[NGROUPS] = {
    [GENERAL] = NULL,
    [SPILLING] = "spilling (memory as a cache over local disk)",
    [CLUSTER] = "cluster (--node-id, --listen and --directory, all three or none; without them "
                "the node is standalone)",
};

/* What an option without a setter of its own does to its field of server_config. */
enum value_kind { V_SET, V_STR, V_SIZE, V_ON, V_OFF };

struct option_def {
    const char *name;
    const char *arg; /* the value's name; NULL: a flag */
    enum group group;
    enum value_kind kind; /* V_SET: set() does it; the others: to the field at offset field */
    size_t field;
    int (*set)(struct ferryd_args *a, char *v);
    /* One paragraph; "@TRANSPORTS@" stands for this build's transports. */
    const char *help;
};

static const struct option_def table[] = {
    {"socket", "PATH", GENERAL, V_STR, CFG(socket_path), NULL,
     "Unix socket to serve (default $FERRY_SOCKET, else " FERRY_DEFAULT_SOCKET ")"},
    {"memory", "SIZE", GENERAL, V_SIZE, CFG(memory), NULL,
     "arena size, reserved at start: 512M, 4G, ... (default 1G)"},
    {"socket-mode", "OCTAL", GENERAL, V_SET, 0, set_socket_mode,
     "permission bits of the socket (default 0600)"},
    {"hugepages", NULL, GENERAL, V_ON, CFG(hugepages), NULL,
     "back the arena with 2 MiB huge pages (hugetlbfs)"},
    {"busy-poll", "USEC", GENERAL, V_SET, 0, set_busy_poll,
     "after a request, poll this long for the next before sleeping (default 50; 0 sleeps at once: "
     "less CPU, more latency)"},
    {"metrics", "HOST:PORT", GENERAL, V_SET, 0, set_metrics,
     "serve Prometheus' /metrics there (numeric address; port 0 picks one, logged)"},
    {"verbose", NULL, GENERAL, V_SET, 0, set_verbose,
     "log debug records: one per request and per object received (at most 50 a second of each)"},
    {"log-format", "FMT", GENERAL, V_SET, 0, set_log_format,
     "text (default) or json: one object per line, for collectors"},
    {"max-objects", "N", GENERAL, V_SET, 0, set_max_objects,
     "objects the store holds at most, sealed or not (default: one per 8 KiB of arena, at least "
     "65536: about 420 B of daemon memory each); a client may hold a sixteenth of them (at least "
     "1): what it created or got and has not released; the objects of a put_many batch are not "
     "held, but are refused as well while the client holds its share"},
    {"max-kept", "SIZE", GENERAL, V_SIZE, CFG(max_kept), NULL,
     "bytes of objects kept until let go (ferry keep) at most (default: half the arena; none with "
     "--spill-dir), in half of --max-objects at most"},
    {"max-clients", "N", GENERAL, V_SET, 0, set_max_clients,
     "clients connected at once at most (a hello past it is refused, FERRY_EBUSY); default: what "
     "the descriptor limit (raised to the hard limit at start) leaves beside 576 kept for the "
     "daemon (1536 more in a cluster, for peers), at most 4096, at least a quarter of the limit. A "
     "connection must say hello within 10 s, and 64 at most wait for theirs: past that the oldest "
     "is closed"},
    {"help", NULL, GENERAL, V_SET, 0, show_help, "print this help and exit"},
    {"version", NULL, GENERAL, V_SET, 0, show_version,
     "print the version and the protocol versions, and exit"},
    {"print-options", "FORMAT", GENERAL, V_SET, 0, print_options,
     "print every option as FORMAT and exit: man (the OPTIONS section of ferryd(8)), conf (the "
     "list in ferryd.conf) or names; the build writes both files so"},
    {"spill-dir", "PATH", SPILLING, V_STR, CFG(spill_dir), NULL,
     "write sealed objects there instead of evicting them, read them back on access; objects found "
     "there at start are served; it must be ferryd's user's and writable by no one else; with "
     "--secret-file its records are signed with the secret"},
    {"spill-max", "SIZE", SPILLING, V_SIZE, CFG(spill_max), NULL,
     "the most the directory may hold (default: what its file system has free at start, less a "
     "tenth of its size)"},
    {"spill-at", "PERCENT", SPILLING, V_SET, 0, set_spill_at,
     "start writing when this much of the arena cannot be freed at once (default 80)"},
    {"persist-on-exit", NULL, SPILLING, V_ON, CFG(persist_on_exit), NULL,
     "on SIGTERM, write every sealed object not yet on disk"},
    {"node-id", "NAME", CLUSTER, V_STR, CFG(node_id), NULL, "this node's name in the cluster"},
    {"listen", "HOST:PORT", CLUSTER, V_STR, CFG(listen_addr), NULL,
     "where peers connect to pull objects (tcp)"},
    {"directory", "URL", CLUSTER, V_SET, 0, set_directory,
     "the Redis that holds the node registry and object locations: "
     "redis://[[USER]:PASSWORD@]HOST:PORT[/DB], or "
     "redis-sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB] to follow the master "
     "Sentinel names (AUTH to the master; percent-encode '@', ':' and '/'; a password there is "
     "seen in /proc until blanked: prefer --directory-password-file or $" PASSWORD_ENV ")"},
    {"directory-password-file", "PATH", CLUSTER, V_SET, 0, set_password_file,
     "the password of the directory's Redis (AUTH; with a redis://USER@... URL, that user's), read "
     "once at start, its trailing newline cut; keep it mode 0600 (a warning if not)"},
    {"secret-file", "PATH", CLUSTER, V_STR, CFG(secret_file), NULL,
     "peers must prove they know this secret (HMAC-SHA256); it signs the spill directory's records "
     "too"},
    {"verify", NULL, CLUSTER, V_ON, CFG(verify), NULL,
     "check what is fetched (the default; the last of --verify and --no-verify wins)"},
    {"no-verify", NULL, CLUSTER, V_OFF, CFG(verify), NULL,
     "take the bytes of nodes that hold an object whole unchecked (default: each 1 MiB chunk "
     "fetched is checked against the SHA-256 tree recorded at its seal before this node seals or "
     "serves it). What is lost: a copy rewritten after its seal on another node (by a process "
     "there that maps the arena writable), or bytes changed on the way, are sealed here and served "
     "on. For a trusted fast fabric only: checking costs a core per ~1.9 GB/s received"},
    {"strict-ids", NULL, CLUSTER, V_ON, CFG(strict_ids), NULL,
     "a seal waits until the directory confirms that no other node holds other content under the "
     "id, and fails (FERRY_EEXIST) if one does; without it such a copy is kept here, unlisted"},
    {"transport", "NAME", CLUSTER, V_SET, 0, set_transport,
     "auto (default): open every transport of this build that can be (@TRANSPORTS@, preferred "
     "first), and reach each peer by the first both have; NAME: that one (refuse to start without "
     "it) and tcp; tcp: tcp only"},
    {"fabric-provider", "P", CLUSTER, V_STR, CFG(fabric_provider), NULL,
     "libfabric provider: verbs;ofi_rxm, efa, cxi, shm, tcp;ofi_rxm (default: the first suitable "
     "one fi_getinfo offers)"},
    {"eager-max", "SIZE", CLUSTER, V_SET, 0, set_eager_max,
     "fabric: objects up to SIZE go two-sided through bounce buffers, larger ones by one-sided "
     "read (default: the provider's measured crossover; @FILE: the size saved by ferry calibrate "
     "--save FILE)"},
    {"fabric-window", "N", CLUSTER, V_SET, 0, set_fabric_window,
     "fabric: receive buffers per peer and size class (default 8)"},
    {"split-min", "SIZE", CLUSTER, V_SIZE, CFG(split_min), NULL,
     "objects of at least SIZE that several nodes hold are fetched in ranges from up to 4 of them "
     "at once (default " FERRYD_DEFAULT_SPLIT_MIN_TEXT "; 0: whole, from one)"},
    {"relay-min", "SIZE", CLUSTER, V_SIZE, CFG(relay_min), NULL,
     "a node fetching an object of at least SIZE serves the ranges it has to other nodes fetching "
     "it, before it has all of it (default " FERRYD_DEFAULT_RELAY_MIN_TEXT "; 0: never)"},
    {"no-relay-check", NULL, CLUSTER, V_ON, CFG(relay_unchecked), NULL,
     "take ranges from such nodes unchecked (--no-verify implies it; default: each chunk is "
     "checked as it lands)"},
    {"timers", "NAME=MS,...", CLUSTER, V_SET, 0, set_timers,
     "the protocol's timers (the defaults suit every network and ride out a busy host): "
     "stall (30000: a peer that owes bytes and sends none is dropped), handshake (10000), answer "
     "(3000: a holder's answer to our hello), breaker (30000: a failing transport is left out), "
     "lease (5000: a one-sided read's), rate (5000: a holder must send 1 MiB/s over each such "
     "window), orphan (300: a fetch nobody waits for any more goes on, for a client that waits "
     "in slices), relay (1000, the same on every node: a node passing on an object it is receiving "
     "must answer within it, or it is given up on); the directory's: heartbeat (1000: how often "
     "this node's entry is refreshed), ttl (10000, the same on every node, at least two "
     "heartbeats: a node that stops beating is gone after it), directory (5000: Redis unanswered "
     "this long is down)"},
};

#define NOPTIONS (sizeof(table) / sizeof(table[0]))
/* getopt_long's value for table[i]: past every character, so never ':' or '?'. */
#define OPTION_VAL 256

static const char environment[] =
    "FERRY_DIRECTORY_PASSWORD: the directory's password, as --directory-password-file would "
    "give it; taken out of the environment at start.\n"
    "FERRY_FABRIC_QUIRKS: switches the fabric's libfabric workarounds (recv, errno, shm_lock, "
    "watchdog; each on only where the running release and provider need it): -NAME off, "
    "+NAME on, none (ferryd(8)).\n";

/* ---- the printers ---- */

/* The help of o with "@TRANSPORTS@" replaced, into buf. */
static const char *help_of(const struct option_def *o, char *buf, size_t len)
{
    const char *at = strstr(o->help, "@TRANSPORTS@");

    if (!at)
        return o->help;
    snprintf(buf, len, "%.*s%s%s", (int)(at - o->help), o->help, transport_names(),
             at + strlen("@TRANSPORTS@"));
    return buf;
}

/* text, wrapped at width, each line after prefix (the first after first, when given). */
static void wrap(FILE *f, const char *first, const char *prefix, const char *text, size_t width)
{
    size_t col = strlen(first ? first : prefix);

    fputs(first ? first : prefix, f);
    while (*text) {
        size_t word = strcspn(text, " ");
        if (col > strlen(prefix) && col + 1 + word > width) {
            fprintf(f, "\n%s", prefix);
            col = strlen(prefix);
        } else if (col > strlen(prefix)) {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, word, f);
        col += word;
        text += word;
        text += strspn(text, " ");
    }
    fputc('\n', f);
}

void options_usage(FILE *f)
{
    char head[64], buf[1024];

    fprintf(f, "usage: ferryd [OPTION]...\n");
    for (int g = 0; g < NGROUPS; g++) {
        if (group_titles[g])
            fprintf(f, "%s:\n", group_titles[g]);
        for (size_t i = 0; i < NOPTIONS; i++) {
            const struct option_def *o = &table[i];
            if (o->group != (enum group)g)
                continue;
            int n = snprintf(head, sizeof(head), "  --%s%s%s", o->name, o->arg ? " " : "",
                             o->arg ? o->arg : "");
            if (n >= 22) {
                fprintf(f, "%s\n", head);
                wrap(f, NULL, "                      ", help_of(o, buf, sizeof(buf)), 92);
            } else {
                snprintf(head + n, sizeof(head) - (size_t)n, "%*s", 22 - n, "");
                wrap(f, head, "                      ", help_of(o, buf, sizeof(buf)), 92);
            }
        }
    }
    fprintf(f, "environment:\n");
    for (const char *line = environment; *line;) {
        size_t len = strcspn(line, "\n");
        snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
        wrap(f, "  ", "      ", buf, 92);
        line += len + (line[len] == '\n');
    }
}

/* text for roff: hyphens as \-, backslashes doubled, no line starting with a control character. */
static void roff(FILE *f, const char *text)
{
    if (*text == '.' || *text == '\'')
        fputs("\\&", f);
    for (; *text; text++) {
        if (*text == '-')
            fputs("\\-", f);
        else if (*text == '\\')
            fputs("\\e", f);
        else
            fputc(*text, f);
    }
}

static void print_man(FILE *f)
{
    char buf[1024];

    for (int g = 0; g < NGROUPS; g++) {
        if (group_titles[g]) {
            fputs(".SS ", f);
            roff(f, group_titles[g]);
            fputc('\n', f);
        }
        for (size_t i = 0; i < NOPTIONS; i++) {
            const struct option_def *o = &table[i];
            if (o->group != (enum group)g)
                continue;
            fputs(o->arg ? ".TP\n.BI \\-\\-" : ".TP\n.B \\-\\-", f);
            roff(f, o->name);
            if (o->arg) { /* the tag on one line: the name bold, its value italic */
                fputs(" \" ", f);
                roff(f, o->arg);
                fputc('"', f);
            }
            fputc('\n', f);
            roff(f, help_of(o, buf, sizeof(buf)));
            fputs(".\n", f);
        }
    }
}

static void print_conf(FILE *f)
{
    char head[96], buf[1024];

    fputs("# Every option of ferryd (ferryd --help says the same):\n", f);
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &table[i];
        snprintf(head, sizeof(head), "#   --%s%s%s", o->name, o->arg ? " " : "",
                 o->arg ? o->arg : "");
        fprintf(f, "%s\n", head);
        wrap(f, NULL, "#       ", help_of(o, buf, sizeof(buf)), 96);
    }
}

static int print_options(struct ferryd_args *a, char *v)
{
    if (strcmp(v, "man") == 0)
        print_man(stdout);
    else if (strcmp(v, "conf") == 0)
        print_conf(stdout);
    else if (strcmp(v, "names") == 0)
        for (size_t i = 0; i < NOPTIONS; i++)
            printf("--%s\n", table[i].name);
    else
        return err_set(FERRY_EINVAL, "--print-options: '%s' is none of man, conf, names", v);
    exit(0);
}

/* ---- the parse ---- */

/* Applies o to a with value v. */
static int apply(const struct option_def *o, struct ferryd_args *a, char *v)
{
    char *at = (char *)a->cfg + o->field;

    switch (o->kind) {
    case V_STR:
        *(const char **)(void *)at = v;
        return 0;
    case V_SIZE:
        return size_parse(v, (uint64_t *)(void *)at);
    case V_ON:
    case V_OFF:
        *(int *)(void *)at = o->kind == V_ON;
        return 0;
    case V_SET:
    default:
        return o->set(a, v);
    }
}

static void defaults(struct server_config *cfg)
{
    const char *env = getenv("FERRY_SOCKET");

    cfg->socket_path = env && *env ? env : FERRY_DEFAULT_SOCKET;
    cfg->socket_mode = 0600;
    cfg->memory = 1ull << 30;
    cfg->busy_poll_us = FERRYD_DEFAULT_BUSY_POLL_US;
    cfg->eager_max = ENGINE_EAGER_AUTO;
    cfg->spill_at = FERRYD_DEFAULT_SPILL_AT;
    cfg->verify = 1;
    (void)size_parse(FERRYD_DEFAULT_SPLIT_MIN_TEXT, &cfg->split_min);
    (void)size_parse(FERRYD_DEFAULT_RELAY_MIN_TEXT, &cfg->relay_min);
}

int options_parse(int argc, char **argv, struct ferryd_args *a)
{
    struct option opts[NOPTIONS + 1];
    int c, rc = 0;

    for (size_t i = 0; i < NOPTIONS; i++)
        opts[i] = (struct option){table[i].name, table[i].arg ? required_argument : no_argument,
                                  NULL, OPTION_VAL + (int)i};
    opts[NOPTIONS] = (struct option){NULL, 0, NULL, 0};
    defaults(a->cfg);
    opterr = 0; /* getopt's own messages would come before ours */
    while (rc == 0 && (c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == ':')
            return err_set(FERRY_EINVAL, "option %s needs a value", argv[optind - 1]);
        if (c < OPTION_VAL || c >= OPTION_VAL + (int)NOPTIONS)
            return err_set(FERRY_EINVAL, "unknown option '%s'", argv[optind - 1]);
        rc = apply(&table[c - OPTION_VAL], a, optarg);
    }
    if (rc == 0 && optind < argc)
        rc = err_set(FERRY_EINVAL, "unexpected argument '%s'", argv[optind]);
    return rc;
}
