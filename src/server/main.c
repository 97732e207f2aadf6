/* ferryd - the ferry daemon of one node. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "common/size.h"
#include "server/server.h"
#include "transfer/engine.h"
#include "transfer/transport.h"
#include "transfer/registry.h"
#include "transfer/wire.h"

/* The environment variable that may hold the directory's password (ferryd.conf can set it for
 * the systemd unit). */
#define PASSWORD_ENV "FERRY_DIRECTORY_PASSWORD"

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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ferryd [--socket PATH] [--memory SIZE] [--socket-mode OCTAL] [--hugepages]\n"
            "              [--busy-poll USEC] [--metrics HOST:PORT] [--verbose]\n"
            "              [--log-format text|json] [--max-objects N] [--max-kept SIZE]\n"
            "              [--max-clients N]\n"
            "              [--spill-dir PATH [--spill-max SIZE] [--spill-at PERCENT]\n"
            "               [--persist-on-exit]]\n"
            "              [--node-id NAME --listen HOST:PORT --directory URL\n"
            "               [--secret-file PATH] [--no-verify] [--strict-ids] [--transport auto|%s]\n"
            "               [--fabric-provider NAME] [--eager-max SIZE] [--fabric-window N]\n"
            "               [--split-min SIZE] [--relay-min SIZE] [--no-relay-check]\n"
            "               [--timers NAME=MS,...]]\n"
            "  --socket PATH       Unix socket to serve (default $FERRY_SOCKET, else %s)\n"
            "  --memory SIZE       arena size, reserved at start: 512M, 4G, ... (default 1G)\n"
            "  --socket-mode OCTAL permission bits of the socket (default 0600)\n"
            "  --hugepages         back the arena with 2 MiB huge pages (hugetlbfs)\n"
            "  --busy-poll USEC    after a request, poll this long for the next before sleeping\n"
            "                      (default %d; 0 sleeps at once: less CPU, more latency)\n"
            "  --metrics HOST:PORT serve Prometheus' /metrics there (numeric address; port 0\n"
            "                      picks one, logged)\n"
            "  --verbose           log debug records: one per request and per object received\n"
            "                      (at most %d a second of each)\n"
            "  --log-format FMT    text (default) or json: one object per line, for collectors\n"
            "  --max-objects N     objects the store holds at most, sealed or not (default: one\n"
            "                      per %u KiB of arena, at least %u: about %u B of daemon memory\n"
            "                      each); a client may hold a sixteenth of them (at least 1):\n"
            "                      what it created or got and has not released; the objects\n"
            "                      of a put_many batch are not held, but are refused as well\n"
            "                      while the client holds its share\n"
            "  --max-kept SIZE     bytes of objects kept until let go (ferry keep) at most\n"
            "                      (default: half the arena; none with --spill-dir), in half\n"
            "                      of --max-objects at most\n"
            "  --max-clients N     clients connected at once at most (a hello past it is\n"
            "                      refused, FERRY_EBUSY); default: what the descriptor limit\n"
            "                      (raised to the hard limit at start) leaves beside %d kept\n"
            "                      for the daemon (%d more in a cluster, for peers), at most\n"
            "                      %d, at least a quarter of the limit. A connection must say\n"
            "                      hello within %d s, and %d at most wait for theirs: past\n"
            "                      that the oldest is closed\n"
            "  --version           print the version and the protocol versions, and exit\n"
            "spilling (memory as a cache over local disk):\n"
            "  --spill-dir PATH    write sealed objects there instead of evicting them, read them\n"
            "                      back on access; objects found there at start are served;\n"
            "                      it must be ferryd's user's and writable by no one else;\n"
            "                      with --secret-file its records are signed with the secret\n"
            "  --spill-max SIZE    the most the directory may hold (default: what its file\n"
            "                      system has free at start, less a tenth of its size)\n"
            "  --spill-at PERCENT  start writing when this much of the arena cannot be freed at\n"
            "                      once (default %d)\n"
            "  --persist-on-exit   on SIGTERM, write every sealed object not yet on disk\n"
            "cluster (all three or none; without them the node is standalone):\n"
            "  --node-id NAME      this node's name in the cluster\n"
            "  --listen HOST:PORT  where peers connect to pull objects (tcp)\n"
            "  --directory URL     the Redis that holds the node registry and object locations:\n"
            "                      redis://[[USER]:PASSWORD@]HOST:PORT[/DB], or redis-sentinel://\n"
            "                      [[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB] to\n"
            "                      follow the master Sentinel names (AUTH to the master;\n"
            "                      percent-encode '@', ':' and '/'; a password there is seen in\n"
            "                      /proc until blanked: prefer --directory-password-file or\n"
            "                      $FERRY_DIRECTORY_PASSWORD)\n"
            "  --directory-password-file PATH\n"
            "                      the password of the directory's Redis (AUTH; with a\n"
            "                      redis://USER@... URL, that user's), read once at start, its\n"
            "                      trailing newline cut; keep it mode 0600 (a warning if not)\n"
            "  --secret-file PATH  peers must prove they know this secret (HMAC-SHA256); it signs\n"
            "                      the spill directory's records too\n"
            "  --no-verify         take the bytes of nodes that hold an object whole unchecked\n"
            "                      (default: each 1 MiB chunk fetched is checked against the\n"
            "                      SHA-256 tree recorded at its seal before this node seals or\n"
            "                      serves it; --verify says so). What is lost: a copy rewritten\n"
            "                      after its seal on another node (by a process there that maps\n"
            "                      the arena writable), or bytes changed on the way, are sealed\n"
            "                      here and served on. For a trusted fast fabric only: checking\n"
            "                      costs a core per ~1.9 GB/s received\n"
            "  --strict-ids        a seal waits until the directory confirms that no other node\n"
            "                      holds other content under the id, and fails (FERRY_EEXIST)\n"
            "                      if one does; without it such a copy is kept here, unlisted\n"
            "  --transport NAME    auto (default): open every transport of this build that can\n"
            "                      be (%s, preferred first), and reach each peer by the\n"
            "                      first both have; NAME: that one (refuse to start without\n"
            "                      it) and tcp; tcp: tcp only\n"
            "  --fabric-provider P libfabric provider: verbs;ofi_rxm, efa, cxi, shm, tcp;ofi_rxm\n"
            "                      (default: the first suitable one fi_getinfo offers)\n"
            "  --eager-max SIZE    fabric: objects up to SIZE go two-sided through bounce\n"
            "                      buffers, larger ones by one-sided read (default: the\n"
            "                      provider's measured crossover; @FILE: the size saved by\n"
            "                      ferry calibrate --save FILE)\n"
            "  --fabric-window N   fabric: receive buffers per peer and size class (default 8)\n"
            "  --split-min SIZE    objects of at least SIZE that several nodes hold are fetched\n"
            "                      in ranges from up to 4 of them at once (default %s; 0: whole,\n"
            "                      from one)\n"
            "  --relay-min SIZE    a node fetching an object of at least SIZE serves the ranges\n"
            "                      it has to other nodes fetching it, before it has all of it\n"
            "                      (default %s; 0: never)\n"
            "  --no-relay-check    take ranges from such nodes unchecked (--no-verify implies\n"
            "                      it; default: each chunk is checked as it lands)\n"
            "  --timers NAME=MS,.. the protocol's timers, for tests that must see them pass (the\n"
            "                      defaults suit every network): stall (%d: a peer that owes\n"
            "                      bytes and sends none is dropped), handshake (%d), answer\n"
            "                      (%d: a holder's answer to our hello), breaker (%d: a failing\n"
            "                      transport is left out), lease (5000: a one-sided read's),\n"
            "                      rate (%d: a holder must send 1 MiB/s over each such window)\n"
            "Environment:\n"
            "  FERRY_DIRECTORY_PASSWORD  the directory's password, as the file above would give\n"
            "                      it; taken out of the environment at start\n"
            "  FERRY_FABRIC_QUIRKS  switches the fabric's libfabric workarounds (recv, errno,\n"
            "                      shm_lock, watchdog; each on only where the running release\n"
            "                      and provider need it): -NAME off, +NAME on, none (ferryd(8))\n",
            transport_names(), FERRY_DEFAULT_SOCKET, FERRYD_DEFAULT_BUSY_POLL_US,
            LOG_LIMIT_PER_SECOND, STORE_BYTES_PER_OBJECT >> 10, STORE_OBJECTS_MIN,
            STORE_OBJECT_COST, FERRYD_FD_RESERVE, FERRYD_FD_RESERVE_PEERS, FERRYD_MAX_CLIENTS,
            FERRYD_HELLO_DEADLINE_MS / 1000, FERRYD_UNGREETED_MAX, FERRYD_DEFAULT_SPILL_AT,
            transport_names(), FERRYD_DEFAULT_SPLIT_MIN_TEXT, FERRYD_DEFAULT_RELAY_MIN_TEXT,
            ENGINE_STALL_MS, ENGINE_HANDSHAKE_MS, ENGINE_ANSWER_MS, ENGINE_BREAKER_MS,
            ENGINE_RATE_MS);
}

static int parse_mode(const char *text, mode_t *out)
{
    char *end;
    unsigned long v = strtoul(text, &end, 8);

    if (!*text || *end || v > 0777)
        return err_set(FERRY_EINVAL, "socket mode '%s': expected octal permission bits", text);
    *out = (mode_t)v;
    return 0;
}

static int parse_busy_poll(const char *text, uint32_t *out)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);

    if (!*text || *end || v > 1000000)
        return err_set(FERRY_EINVAL, "busy poll '%s': expected microseconds, at most 1000000",
                       text);
    *out = (uint32_t)v;
    return 0;
}

static int parse_transport(const char *text, const char **out)
{
    if (strcmp(text, "auto") != 0 && !registry_find(text))
        return err_set(FERRY_EINVAL, "transport '%s': expected auto|%s", text, transport_names());
    *out = text;
    return 0;
}

static int parse_max_objects(const char *text, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 10);

    if (!*text || *end || text[0] == '-' || v < 1 || v > (1ull << 32))
        return err_set(FERRY_EINVAL, "--max-objects '%s': expected 1 to %llu", text, 1ull << 32);
    *out = v;
    return 0;
}

static int parse_max_clients(const char *text, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 10);

    if (!*text || *end || text[0] == '-' || v < 1 || v > (1ull << 20))
        return err_set(FERRY_EINVAL, "--max-clients '%s': expected 1 to %llu", text, 1ull << 20);
    *out = v;
    return 0;
}

static int parse_window(const char *text, uint32_t *out)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);

    if (!*text || *end || v < 1 || v > 256)
        return err_set(FERRY_EINVAL, "fabric window '%s': expected 1 to 256", text);
    *out = (uint32_t)v;
    return 0;
}

/* SIZE, auto, or @FILE: the first line of a file `ferry calibrate --save` wrote. */
static int parse_eager(const char *text, uint64_t *out)
{
    char line[64];
    FILE *f;

    if (strcmp(text, "auto") == 0) {
        *out = ENGINE_EAGER_AUTO;
        return 0;
    }
    if (text[0] != '@')
        return size_parse(text, out);
    if (!(f = fopen(text + 1, "r")))
        return err_set(FERRY_EINVAL, "--eager-max %s: %s", text, strerror(errno));
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (size_parse(line, out) < 0)
        return err_set(FERRY_EINVAL, "--eager-max %s: '%s' is not a size", text, line);
    return 0;
}

/* Keeps a copy of the directory URL and blanks its credentials ([[USER]:PASSWORD@]) in arg:
 * the process's arguments are visible to every local user (ps). Warns when they held a
 * password: blanked is not unseen (between exec and this, /proc/PID/cmdline shows it). */
static int keep_url(char *arg, const char **out)
{
    static char url[2048];
    char *creds = strstr(arg, "://"), *at;

    if (strlen(arg) >= sizeof(url))
        return err_set(FERRY_EINVAL, "--directory: a URL of at most %zu bytes", sizeof(url) - 1);
    memcpy(url, arg, strlen(arg) + 1);
    *out = url;
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

/* The directory's password, from the environment or a file (room for a CR LF and for a byte
 * too many: longer files are refused, not cut). */
static char password[DIRECTORY_PASSWORD_MAX + 4];

/* PASSWORD_ENV, taken out of the environment before anything else runs (no thread yet): its
 * bytes are overwritten where they lie, which is what /proc/PID/environ shows, and the variable
 * is unset, so that neither a later reader of the environment nor a child sees it. */
static int take_env_password(const char **out)
{
    char *v = getenv(PASSWORD_ENV);
    size_t len = v ? strlen(v) : 0;

    if (!v)
        return 0;
    if (len < sizeof(password)) {
        memcpy(password, v, len + 1);
        *out = password;
    }
    explicit_bzero(v, len);
    unsetenv(PASSWORD_ENV);
    if (len >= sizeof(password))
        return err_set(FERRY_EINVAL, "%s: a password of at most %d bytes, not %zu", PASSWORD_ENV,
                       DIRECTORY_PASSWORD_MAX, len);
    return 0;
}

/* --directory-password-file PATH: read once, its trailing newline cut. */
static int read_password_file(const char *path, const char **out)
{
    size_t len;
    int rc = server_read_secret(path, "--directory-password-file", (uint8_t *)password,
                                sizeof(password) - 1, 1, &len);

    if (rc < 0)
        return rc;
    if (memchr(password, '\0', len))
        return err_set(FERRY_EINVAL, "--directory-password-file %s: a NUL byte in the password",
                       path);
    password[len] = '\0';
    *out = password;
    return 0;
}

static int parse_percent(const char *text, unsigned *out)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);

    if (end == text || (*end && strcmp(end, "%") != 0) || v < 1 || v > 100)
        return err_set(FERRY_EINVAL, "--spill-at: '%s' is not a percent from 1 to 100", text);
    *out = (unsigned)v;
    return 0;
}

/* Checked before the arena is reserved: the form only (the listen comes later). */
static int parse_metrics(const char *text, const char **out)
{
    char host[256], port[16], why[256];
    int rc = transport_split_addr(text, host, sizeof(host), port, sizeof(port));

    if (rc < 0) {
        snprintf(why, sizeof(why), "%s", ferry_errmsg());
        return err_set(rc, "--metrics: %s", why);
    }
    *out = text;
    return 0;
}

static int parse_args(int argc, char **argv, struct server_config *cfg)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"memory", required_argument, NULL, 'm'},
                                         {"socket-mode", required_argument, NULL, 'M'},
                                         {"hugepages", no_argument, NULL, 'H'},
                                         {"verbose", no_argument, NULL, 'v'},
                                         {"busy-poll", required_argument, NULL, 'b'},
                                         {"node-id", required_argument, NULL, 'n'},
                                         {"listen", required_argument, NULL, 'l'},
                                         {"directory", required_argument, NULL, 'd'},
                                         {"directory-password-file", required_argument, NULL, 'F'},
                                         {"secret-file", required_argument, NULL, 'S'},
                                         {"verify", no_argument, NULL, 'V'},
                                         {"no-verify", no_argument, NULL, 'U'},
                                         {"strict-ids", no_argument, NULL, 'I'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'r'},
                                         {"transport", required_argument, NULL, 't'},
                                         {"fabric-provider", required_argument, NULL, 'P'},
                                         {"eager-max", required_argument, NULL, 'E'},
                                         {"fabric-window", required_argument, NULL, 'W'},
                                         {"split-min", required_argument, NULL, 'R'},
                                         {"relay-min", required_argument, NULL, 'Y'},
                                         {"no-relay-check", no_argument, NULL, 'Z'},
                                         {"timers", required_argument, NULL, 'T'},
                                         {"metrics", required_argument, NULL, 'x'},
                                         {"log-format", required_argument, NULL, 'L'},
                                         {"spill-dir", required_argument, NULL, 'D'},
                                         {"spill-max", required_argument, NULL, 'X'},
                                         {"spill-at", required_argument, NULL, 'A'},
                                         {"persist-on-exit", no_argument, NULL, 'p'},
                                         {"max-objects", required_argument, NULL, 'O'},
                                         {"max-kept", required_argument, NULL, 'K'},
                                         {"max-clients", required_argument, NULL, 'C'},
                                         {NULL, 0, NULL, 0}};
    const char *env = getenv("FERRY_SOCKET"), *password_file = NULL;
    int c, rc = 0;

    opterr = 0; /* getopt's own messages would come before ours */
    cfg->socket_path = env && *env ? env : FERRY_DEFAULT_SOCKET;
    cfg->socket_mode = 0600;
    cfg->memory = 1ull << 30;
    cfg->busy_poll_us = FERRYD_DEFAULT_BUSY_POLL_US;
    cfg->eager_max = ENGINE_EAGER_AUTO;
    cfg->spill_at = FERRYD_DEFAULT_SPILL_AT;
    cfg->verify = 1;
    (void)size_parse(FERRYD_DEFAULT_SPLIT_MIN_TEXT, &cfg->split_min);
    (void)size_parse(FERRYD_DEFAULT_RELAY_MIN_TEXT, &cfg->relay_min);
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1 && rc == 0) {
        switch (c) {
        case 's':
            cfg->socket_path = optarg;
            break;
        case 'm':
            rc = size_parse(optarg, &cfg->memory);
            break;
        case 'M':
            rc = parse_mode(optarg, &cfg->socket_mode);
            break;
        case 'H':
            cfg->hugepages = 1;
            break;
        case 'b':
            rc = parse_busy_poll(optarg, &cfg->busy_poll_us);
            break;
        case 'v':
            log_set_level(LOG_DEBUG);
            break;
        case 'n':
            cfg->node_id = optarg;
            break;
        case 'l':
            cfg->listen_addr = optarg;
            break;
        case 'd':
            rc = keep_url(optarg, &cfg->directory_url);
            break;
        case 'F':
            password_file = optarg;
            break;
        case 'S':
            cfg->secret_file = optarg;
            break;
        case 'V': /* the default; the last of --verify and --no-verify wins */
            cfg->verify = 1;
            break;
        case 'U':
            cfg->verify = 0;
            break;
        case 'I':
            cfg->strict_ids = 1;
            break;
        case 't':
            rc = parse_transport(optarg, &cfg->transport);
            break;
        case 'P':
            cfg->fabric_provider = optarg;
            break;
        case 'E':
            rc = parse_eager(optarg, &cfg->eager_max);
            break;
        case 'W':
            rc = parse_window(optarg, &cfg->fabric_window);
            break;
        case 'x':
            rc = parse_metrics(optarg, &cfg->metrics_addr);
            break;
        case 'L':
            if (strcmp(optarg, "json") == 0 || strcmp(optarg, "text") == 0)
                log_set_format(optarg[0] == 'j' ? LOG_JSON : LOG_TEXT);
            else
                rc = err_set(FERRY_EINVAL, "--log-format: '%s' is neither text nor json", optarg);
            break;
        case 'D':
            cfg->spill_dir = optarg;
            break;
        case 'X':
            rc = size_parse(optarg, &cfg->spill_max);
            break;
        case 'R':
            rc = size_parse(optarg, &cfg->split_min);
            break;
        case 'Y':
            rc = size_parse(optarg, &cfg->relay_min);
            break;
        case 'Z':
            cfg->relay_unchecked = 1;
            break;
        case 'T':
            rc = engine_timers_parse(optarg, &cfg->timers);
            break;
        case 'A':
            rc = parse_percent(optarg, &cfg->spill_at);
            break;
        case 'p':
            cfg->persist_on_exit = 1;
            break;
        case 'O':
            rc = parse_max_objects(optarg, &cfg->max_objects);
            break;
        case 'K':
            rc = size_parse(optarg, &cfg->max_kept);
            break;
        case 'C':
            rc = parse_max_clients(optarg, &cfg->max_clients);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'r':
            printf("ferryd %s (client protocol %u, transfer protocol %u)\n", ferry_version(),
                   PROTO_VERSION, WIRE_VERSION);
            exit(0);
        default:
            return err_set(FERRY_EINVAL, "unknown option '%s'", argv[optind - 1]);
        case ':':
            return err_set(FERRY_EINVAL, "option %s needs a value", argv[optind - 1]);
        }
    }
    if (rc == 0 && optind < argc)
        rc = err_set(FERRY_EINVAL, "unexpected argument '%s'", argv[optind]);
    if (!cfg->verify)
        cfg->relay_unchecked = 1; /* --no-verify: nothing fetched is checked */
    if (rc == 0 && password_file && cfg->directory_password)
        rc = err_set(FERRY_EINVAL, "--directory-password-file and %s: give one", PASSWORD_ENV);
    else if (rc == 0 && password_file)
        rc = read_password_file(password_file, &cfg->directory_password);
    if (rc == 0 && cfg->strict_ids && !cfg->directory_url)
        rc = err_set(FERRY_EINVAL, "--strict-ids needs --directory (it asks the directory)");
    if (rc == 0 && cfg->memory < (1u << 20))
        rc = err_set(FERRY_EINVAL, "--memory must be at least 1M");
    if (rc == 0) /* before the arena is reserved: a typo costs no gigabytes, no wait */
        rc = server_check_config(cfg);
    return rc;
}

int main(int argc, char **argv)
{
    struct server_config cfg = {0};
    struct server srv;
    int rc;

    log_set_name("ferryd");
    if (take_env_password(&cfg.directory_password) < 0 || parse_args(argc, argv, &cfg) < 0) {
        fprintf(stderr, "ferryd: %s (see ferryd --help)\n", ferry_errmsg());
        return 2;
    }
    if (server_init(&srv, &cfg) < 0) {
        log_error("cannot start: %s", ferry_errmsg());
        return 1;
    }
    rc = server_run(&srv);
    if (rc < 0 && !srv.id_taken)
        log_error("event loop failed: %s", ferry_errmsg());
    server_destroy(&srv);
    log_info("stopped");
    /* EX_CONFIG for a node id a live node uses: the service manager does not restart it. */
    return srv.id_taken ? FERRYD_EXIT_ID_TAKEN : rc < 0 ? 1 : 0;
}
