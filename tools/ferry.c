/* ferry.c - the ferry command line: one subcommand per store operation, talking to the node's
 * ferryd through the public API of libferry only (include/ferry.h).
 *
 * Every failure prints exactly one line on stderr,
 *     ferry: <command>: <ferry_strerror(err)>: <detail>
 * and ends with a status that scripts can test: see enum status. */
#include "ferry.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Exit statuses: part of the tool's interface. */
enum status {
    STATUS_OK = 0,
    STATUS_MISSING = 1,     /* FERRY_ENOENT, FERRY_ETIMEDOUT */
    STATUS_USAGE = 2,       /* bad command line */
    STATUS_NOSPACE = 3,     /* FERRY_ENOSPACE, FERRY_ETOOBIG */
    STATUS_UNREACHABLE = 4, /* FERRY_ECONN from ferry_connect(), FERRY_EDIRECTORY */
    STATUS_FAILED = 5,      /* anything else (FERRY_ETRANSFER, FERRY_EAUTH, ...) */
};

/* Largest single read() or write(): Linux moves at most about 2 GiB per call anyway. */
#define IO_CHUNK ((size_t)1 << 30)
/* First buffer size for input of unknown size; it doubles as needed. */
#define STREAM_START ((size_t)64 << 10)
/* Most named positional arguments a subcommand takes (a list of ids goes to params.rest). */
#define MAX_PARAMS 2
/* How long fetch and get --fetch wait without --timeout (ms): -1 could hang a script. */
#define FETCH_TIMEOUT_MS 10000

/* What a subcommand works with. */
struct cli {
    const char *socket;   /* NULL: the library's default ($FERRY_SOCKET, else /tmp/ferry.sock) */
    const char *cmd;      /* subcommand name, for messages */
    ferry_client *client; /* set by cli_open(); NULL before */
};

static void vreport(const char *cmd, int err, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Prints the one failure line; an empty detail is left out, and so is cmd when NULL. */
static void vreport(const char *cmd, int err, const char *fmt, va_list ap)
{
    char detail[1024];
    vsnprintf(detail, sizeof(detail), fmt, ap);
    fprintf(stderr, "ferry: %s%s%s%s%s\n", cmd ? cmd : "", cmd ? ": " : "", ferry_strerror(err),
            detail[0] ? ": " : "", detail);
}

static int exit_status(int err)
{
    switch (err) {
    case FERRY_OK:
        return STATUS_OK;
    case FERRY_ENOENT:
    case FERRY_ETIMEDOUT:
        return STATUS_MISSING;
    case FERRY_ENOSPACE:
    case FERRY_ETOOBIG:
        return STATUS_NOSPACE;
    case FERRY_EDIRECTORY: /* the cluster's directory is as unreachable as a daemon */
        return STATUS_UNREACHABLE;
    default:
        return STATUS_FAILED;
    }
}

static int report(const struct cli *cli, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reports err with a detail of this tool's own and returns the exit status for err. */
static int report(const struct cli *cli, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cli->cmd, err, fmt, ap);
    va_end(ap);
    return exit_status(err);
}

/* Reports a failed ferry_ call, whose detail is ferry_errmsg(). */
static int fail(const struct cli *cli, int err)
{
    return report(cli, err, "%s", ferry_errmsg());
}

/* Reports a failed system call on a file, from errno. */
static int fail_io(const struct cli *cli, const char *what, const char *name)
{
    return report(cli, FERRY_ESYS, "%s %s: %s", what, name, strerror(errno));
}

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports a bad command line; always STATUS_USAGE. */
static int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, FERRY_EINVAL, fmt, ap);
    va_end(ap);
    return STATUS_USAGE;
}

/* An option of a subcommand: one with value stores the next word in *value, one without is a
 * flag and sets *flag to 1. A list of them ends with a NULL name. */
struct opt {
    const char *name;
    const char **value;
    int *flag;
};

/* The positional arguments of a subcommand: value[i] receives the one named names[i] (the
 * name is for messages); the first min are required, the others stay NULL when absent. When
 * rest is not NULL (room for argc words), the words beyond the named ones go there. */
struct params {
    const char *names[MAX_PARAMS];
    const char *value[MAX_PARAMS];
    int min;
    const char **rest;
    int n_rest;
};

static const struct opt *find_opt(const struct opt *opts, const char *word)
{
    for (; opts && opts->name; opts++) {
        if (strcmp(opts->name, word) == 0)
            return opts;
    }
    return NULL;
}

/* Sorts argv into opts (may be NULL) and p. "-" alone is a positional argument, and so is
 * every word after "--". Returns STATUS_OK, or STATUS_USAGE after reporting the problem. */
static int parse_args(const char *cmd, int argc, char **argv, const struct opt *opts,
                      struct params *p)
{
    int max = 0, n = 0, options_done = 0;
    while (max < MAX_PARAMS && p->names[max])
        max++;
    for (int i = 0; i < argc; i++) {
        const char *word = argv[i];
        if (!options_done && strcmp(word, "--") == 0) {
            options_done = 1;
        } else if (!options_done && word[0] == '-' && word[1] != '\0') {
            const struct opt *o = find_opt(opts, word);
            if (!o)
                return usage_error(cmd, "unknown option '%s'", word);
            if (o->flag)
                *o->flag = 1;
            else if (++i < argc)
                *o->value = argv[i];
            else
                return usage_error(cmd, "option %s needs a value", word);
        } else if (n < max) {
            p->value[n++] = word;
        } else if (p->rest) {
            p->rest[p->n_rest++] = word;
        } else {
            return usage_error(cmd, "unexpected argument '%s'", word);
        }
    }
    if (n < p->min)
        return usage_error(cmd, "missing %s", p->names[n]);
    return STATUS_OK;
}

/* Parses a decimal integer of at least min; anything else is a usage error. */
static int parse_int(const struct cli *cli, const char *what, const char *text, int64_t min,
                     int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < min)
        return usage_error(cli->cmd, "bad %s '%s'", what, text);
    *out = v;
    return STATUS_OK;
}

/* Bits a size suffix shifts by; -1 for a character that is no suffix. */
static int suffix_shift(char c)
{
    switch (c) {
    case '\0':
        return 0;
    case 'K':
    case 'k':
        return 10;
    case 'M':
    case 'm':
        return 20;
    case 'G':
    case 'g':
        return 30;
    default:
        return -1;
    }
}

/* Parses a byte count: decimal digits, then optionally K, M or G (binary multiples). */
static int parse_size(const struct cli *cli, const char *text, uint64_t *out)
{
    unsigned long long v = 0;
    int shift = -1;
    char *end;
    errno = 0;
    /* A digit first: strtoull() would take a sign, and wrap a negative number around. */
    if (text[0] >= '0' && text[0] <= '9') {
        v = strtoull(text, &end, 10);
        shift = suffix_shift(*end);
    }
    if (errno || shift < 0 || (shift > 0 && end[1] != '\0') || v > UINT64_MAX >> shift)
        return usage_error(cli->cmd, "bad byte count '%s'", text);
    *out = (uint64_t)v << shift;
    return STATUS_OK;
}

/* Connects to the daemon, after parsing id_text into *id unless id_text is NULL: a command
 * line error is found before the daemon is asked anything. A daemon that does not answer is
 * STATUS_UNREACHABLE, set apart from the failures of operations. */
static int cli_open(struct cli *cli, const char *id_text, ferry_id *id)
{
    if (id_text && ferry_id_parse(id_text, id) != FERRY_OK)
        return usage_error(cli->cmd, "%s", ferry_errmsg());
    int err = ferry_connect(cli->socket, &cli->client);
    if (err == FERRY_OK)
        return STATUS_OK;
    cli->client = NULL;
    int status = fail(cli, err);
    return err == FERRY_ECONN ? STATUS_UNREACHABLE : status;
}

/* parse_args(), then cli_open() with the first positional argument as the id when id is not
 * NULL: the start of every subcommand without numbers to parse. */
static int cli_start(struct cli *cli, int argc, char **argv, const struct opt *opts,
                     struct params *p, ferry_id *id)
{
    int status = parse_args(cli->cmd, argc, argv, opts, p);
    return status != STATUS_OK ? status : cli_open(cli, id ? p->value[0] : NULL, id);
}

/* cli_start() for the listing commands, whose one option is --json (into *json): with id, they
 * take one argument, an ID; without, none. */
static int cli_start_json(struct cli *cli, int argc, char **argv, ferry_id *id, int *json)
{
    const struct opt opts[] = {{"--json", NULL, json}, {NULL, NULL, NULL}};
    struct params p = {.names = {id ? "ID" : NULL}, .min = id ? 1 : 0};
    return cli_start(cli, argc, argv, opts, &p, id);
}

/* Reads up to size bytes into buf, fewer only at end of input; *done receives the count.
 * Returns 0, or -1 with errno. */
static int read_full(int fd, uint8_t *buf, uint64_t size, uint64_t *done)
{
    *done = 0;
    while (*done < size) {
        size_t chunk = size - *done < IO_CHUNK ? (size_t)(size - *done) : IO_CHUNK;
        ssize_t n = read(fd, buf + *done, chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        *done += (uint64_t)n;
    }
    return 0;
}

/* Writes all size bytes. Returns 0, or -1 with errno. */
static int write_all(int fd, const uint8_t *buf, uint64_t size)
{
    while (size > 0) {
        ssize_t n = write(fd, buf, size < IO_CHUNK ? (size_t)size : IO_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        buf += n;
        size -= (uint64_t)n;
    }
    return 0;
}

static uint64_t meta_size(const char *meta)
{
    return meta ? strlen(meta) : 0;
}

/* Fills the object of size bytes at data from fd; the file must still hold all of them. */
static int fill_object(const struct cli *cli, int fd, const char *name, uint8_t *data,
                       uint64_t size)
{
    uint64_t got;
    if (read_full(fd, data, size, &got) < 0)
        return fail_io(cli, "read", name);
    if (got < size)
        return report(cli, FERRY_ESYS, "read %s: file shrank to %" PRIu64 " of %" PRIu64 " bytes",
                      name, got, size);
    return STATUS_OK;
}

/* Stores size bytes of a regular file: the object is created at that size and the file is
 * read straight into it, with no copy in this process. It is aborted when the file cannot be
 * read in full, so that no truncated object is ever sealed. */
static int put_sized(struct cli *cli, const ferry_id *id, int fd, const char *name, uint64_t size,
                     const char *meta)
{
    uint8_t *data;
    int err = ferry_create(cli->client, id, size, meta, meta_size(meta), &data);
    if (err != FERRY_OK)
        return fail(cli, err);
    int status = fill_object(cli, fd, name, data, size);
    if (status == STATUS_OK && (err = ferry_seal(cli->client, id)) != FERRY_OK)
        status = fail(cli, err);
    if (status != STATUS_OK) {
        /* The failure is reported already; an abort that fails too adds nothing to it. */
        ferry_abort(cli->client, id);
        return status;
    }
    err = ferry_release(cli->client, id);
    return err != FERRY_OK ? fail(cli, err) : STATUS_OK;
}

/* Reads fd to its end into a growing buffer (*buf, *len; *buf to free even on failure): for
 * input of unknown size such as a pipe. */
static int read_stream(const struct cli *cli, int fd, const char *name, uint8_t **buf, size_t *len)
{
    size_t cap = 0;
    for (;;) {
        if (*len == cap) {
            size_t grown_cap = cap ? 2 * cap : STREAM_START;
            uint8_t *grown = grown_cap > cap ? realloc(*buf, grown_cap) : NULL;
            if (!grown)
                return report(cli, FERRY_ENOMEM, "read %s: no memory for %zu bytes", name,
                              grown_cap);
            *buf = grown;
            cap = grown_cap;
        }
        uint64_t got;
        if (read_full(fd, *buf + *len, cap - *len, &got) < 0)
            return fail_io(cli, "read", name);
        *len += (size_t)got;
        if (*len < cap)
            return STATUS_OK;
    }
}

/* Stores input of unknown size: read whole first, then put. */
static int put_stream(struct cli *cli, const ferry_id *id, int fd, const char *name,
                      const char *meta)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int status = read_stream(cli, fd, name, &buf, &len);
    if (status == STATUS_OK) {
        int err = ferry_put(cli->client, id, buf, len, meta, meta_size(meta));
        status = err != FERRY_OK ? fail(cli, err) : STATUS_OK;
    }
    free(buf);
    return status;
}

/* Stores what is left to read from fd: a regular file (stdin too when redirected from one)
 * tells its size beforehand, anything else is read to its end first. */
static int put_fd(struct cli *cli, const ferry_id *id, int fd, const char *name, const char *meta)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return put_stream(cli, id, fd, name, meta);
    off_t at = lseek(fd, 0, SEEK_CUR);
    if (at < 0)
        return fail_io(cli, "seek", name);
    return put_sized(cli, id, fd, name, st.st_size > at ? (uint64_t)(st.st_size - at) : 0, meta);
}

/* put ID [FILE|-] [--meta STRING]: stores FILE, or stdin when it is "-" or absent. */
static int cmd_put(struct cli *cli, int argc, char **argv)
{
    const char *meta = NULL;
    const struct opt opts[] = {{"--meta", &meta, NULL}, {NULL, NULL, NULL}};
    struct params p = {.names = {"ID", "FILE"}, .min = 1};
    ferry_id id;
    int status = cli_start(cli, argc, argv, opts, &p, &id);
    if (status != STATUS_OK)
        return status;
    const char *path = p.value[1];
    if (!path || strcmp(path, "-") == 0)
        return put_fd(cli, &id, STDIN_FILENO, "stdin", meta);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail_io(cli, "open", path);
    status = put_fd(cli, &id, fd, path, meta);
    close(fd);
    return status;
}

/* Writes data to the file at path, or to stdout when path is NULL or "-". The file is opened
 * only once the object is at hand, so a failed get leaves an existing file alone. */
static int write_object(const struct cli *cli, const char *path, const uint8_t *data, uint64_t size)
{
    if (!path || strcmp(path, "-") == 0)
        return write_all(STDOUT_FILENO, data, size) < 0 ? fail_io(cli, "write", "stdout")
                                                        : STATUS_OK;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return fail_io(cli, "open", path);
    if (write_all(fd, data, size) < 0) {
        int status = fail_io(cli, "write", path);
        close(fd);
        return status;
    }
    /* close() is where a delayed write error (NFS, a full disk) shows up. */
    return close(fd) < 0 ? fail_io(cli, "close", path) : STATUS_OK;
}

/* get ID [-o FILE] [--timeout MS] [--fetch]: writes the object's data out; MS 0 polls, -1 waits
 * on. With --fetch an object that is not local is pulled from another node first, and MS
 * defaults to FETCH_TIMEOUT_MS instead of 0. */
static int cmd_get(struct cli *cli, int argc, char **argv)
{
    const char *out = NULL, *timeout = NULL;
    int fetch = 0;
    const struct opt opts[] = {{"-o", &out, NULL},
                               {"--timeout", &timeout, NULL},
                               {"--fetch", NULL, &fetch},
                               {NULL, NULL, NULL}};
    struct params p = {.names = {"ID"}, .min = 1};
    int64_t timeout_ms = 0;
    ferry_id id;
    int status = parse_args(cli->cmd, argc, argv, opts, &p);
    if (status == STATUS_OK && fetch)
        timeout_ms = FETCH_TIMEOUT_MS;
    if (status == STATUS_OK && timeout)
        status = parse_int(cli, "timeout", timeout, -1, &timeout_ms);
    if (status == STATUS_OK)
        status = cli_open(cli, p.value[0], &id);
    if (status != STATUS_OK)
        return status;
    ferry_buffer buf;
    int err = fetch ? ferry_get_fetch(cli->client, &id, 1, timeout_ms, &buf)
                    : ferry_get(cli->client, &id, 1, timeout_ms, &buf);
    if (err != FERRY_OK)
        return fail(cli, err);
    status = write_object(cli, out, buf.data, buf.data_size);
    err = ferry_release(cli->client, &id);
    return status == STATUS_OK && err != FERRY_OK ? fail(cli, err) : status;
}

/* The ids of a fetch: the words as given (for messages), parsed, and their results. */
struct fetch_list {
    const char **words;
    ferry_id *ids;
    int *statuses;
    size_t n;
};

static void fetch_list_free(struct fetch_list *f)
{
    free(f->words);
    free(f->ids);
    free(f->statuses);
}

/* Parses the command line of fetch into f (f->words sized for argc) and *timeout_ms (left
 * alone without --timeout). */
static int fetch_parse(struct cli *cli, int argc, char **argv, struct fetch_list *f,
                       int64_t *timeout_ms)
{
    const char *timeout = NULL;
    const struct opt opts[] = {{"--timeout", &timeout, NULL}, {NULL, NULL, NULL}};
    struct params p = {.rest = f->words};
    int status = parse_args(cli->cmd, argc, argv, opts, &p);
    if (status != STATUS_OK)
        return status;
    if (p.n_rest == 0)
        return usage_error(cli->cmd, "missing ID");
    f->n = (size_t)p.n_rest;
    return timeout ? parse_int(cli, "timeout", timeout, -1, timeout_ms) : STATUS_OK;
}

/* Parses every id of f: a bad one is a usage error, found before the daemon is asked. */
static int fetch_parse_ids(struct cli *cli, struct fetch_list *f)
{
    f->ids = calloc(f->n, sizeof(*f->ids));
    f->statuses = calloc(f->n, sizeof(*f->statuses));
    if (!f->ids || !f->statuses)
        return report(cli, FERRY_ENOMEM, "no memory for %zu ids", f->n);
    for (size_t i = 0; i < f->n; i++) {
        if (ferry_id_parse(f->words[i], &f->ids[i]) != FERRY_OK)
            return usage_error(cli->cmd, "%s", ferry_errmsg());
        f->statuses[i] = 1; /* no status: one the call never filled in stays positive */
    }
    return STATUS_OK;
}

/* Reports a failed fetch: a line per failed id, or one line for a call that failed as a
 * whole. The exit status is that of the first failure. */
static int fetch_report(const struct cli *cli, const struct fetch_list *f, int err)
{
    int first = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (f->statuses[i] >= 0)
            continue;
        fprintf(stderr, "ferry: %s: %s: %s\n", cli->cmd, f->words[i],
                ferry_strerror(f->statuses[i]));
        if (!first)
            first = f->statuses[i];
    }
    return first ? exit_status(first) : fail(cli, err);
}

/* fetch ID... [--timeout MS]: makes the objects local, pulling them from the nodes that hold
 * them; waits up to MS (default FETCH_TIMEOUT_MS) for ids that no node holds yet. */
static int cmd_fetch(struct cli *cli, int argc, char **argv)
{
    struct fetch_list f = {.words = calloc(argc > 0 ? (size_t)argc : 1, sizeof(char *))};
    int64_t timeout_ms = FETCH_TIMEOUT_MS;
    int status = f.words ? fetch_parse(cli, argc, argv, &f, &timeout_ms)
                         : report(cli, FERRY_ENOMEM, "no memory for the arguments");
    if (status == STATUS_OK)
        status = fetch_parse_ids(cli, &f);
    if (status == STATUS_OK)
        status = cli_open(cli, NULL, NULL);
    if (status == STATUS_OK) {
        int err = ferry_fetch(cli->client, f.ids, f.n, timeout_ms, f.statuses);
        status = err != FERRY_OK ? fetch_report(cli, &f, err) : STATUS_OK;
    }
    fetch_list_free(&f);
    return status;
}

/* Writes s as a JSON string: quoted, with quotes, backslashes and control characters escaped. */
static void print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* An array of nodes, one per line. */
static void print_nodes_json(const ferry_node_info *nodes, size_t n)
{
    fputs("[", stdout);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",\n  {\"id\": " : "\n  {\"id\": ", stdout);
        print_json_string(nodes[i].id);
        fputs(", \"address\": ", stdout);
        print_json_string(nodes[i].address);
        fputs(", \"transports\": ", stdout);
        print_json_string(nodes[i].transports);
        printf(", \"self\": %s}", nodes[i].self ? "true" : "false");
    }
    fputs(n ? "\n]\n" : "]\n", stdout);
}

/* A header and a row per node; a '*' in the first column marks the node that answered. */
static void print_nodes_table(const ferry_node_info *nodes, size_t n)
{
    int id_width = 2, addr_width = 7;
    for (size_t i = 0; i < n; i++) {
        int id_len = (int)strnlen(nodes[i].id, sizeof(nodes[i].id));
        int addr_len = (int)strnlen(nodes[i].address, sizeof(nodes[i].address));
        id_width = id_len > id_width ? id_len : id_width;
        addr_width = addr_len > addr_width ? addr_len : addr_width;
    }
    printf("  %-*s %-*s %s\n", id_width, "ID", addr_width, "ADDRESS", "TRANSPORTS");
    for (size_t i = 0; i < n; i++)
        printf("%c %-*s %-*s %s\n", nodes[i].self ? '*' : ' ', id_width, nodes[i].id, addr_width,
               nodes[i].address, nodes[i].transports);
}

/* Prints the nodes ferry_nodes() or ferry_where() gave (err), and frees them. */
static int print_nodes(const struct cli *cli, int err, ferry_node_info *nodes, size_t n, int json)
{
    if (err != FERRY_OK)
        return fail(cli, err);
    if (json)
        print_nodes_json(nodes, n);
    else
        print_nodes_table(nodes, n);
    ferry_free(nodes);
    return STATUS_OK;
}

/* nodes [--json]: lists the live nodes of the cluster. */
static int cmd_nodes(struct cli *cli, int argc, char **argv)
{
    int json = 0;
    int status = cli_start_json(cli, argc, argv, NULL, &json);
    if (status != STATUS_OK)
        return status;
    ferry_node_info *nodes = NULL;
    size_t n = 0;
    int err = ferry_nodes(cli->client, &nodes, &n);
    return print_nodes(cli, err, nodes, n, json);
}

/* where ID [--json]: lists the live nodes that hold ID (none: only the table's header). */
static int cmd_where(struct cli *cli, int argc, char **argv)
{
    int json = 0;
    ferry_id id;
    int status = cli_start_json(cli, argc, argv, &id, &json);
    if (status != STATUS_OK)
        return status;
    ferry_node_info *nodes = NULL;
    size_t n = 0;
    int err = ferry_where(cli->client, &id, &nodes, &n);
    return print_nodes(cli, err, nodes, n, json);
}

/* contains ID: prints true (status 0) when a sealed object ID is stored, else false (1). */
static int cmd_contains(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"ID"}, .min = 1};
    ferry_id id;
    int present = 0;
    int status = cli_start(cli, argc, argv, NULL, &p, &id);
    if (status != STATUS_OK)
        return status;
    int err = ferry_contains(cli->client, &id, &present);
    if (err != FERRY_OK)
        return fail(cli, err);
    puts(present ? "true" : "false");
    return present ? STATUS_OK : STATUS_MISSING;
}

/* rm ID: deletes the object. */
static int cmd_rm(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"ID"}, .min = 1};
    ferry_id id;
    int status = cli_start(cli, argc, argv, NULL, &p, &id);
    if (status != STATUS_OK)
        return status;
    int err = ferry_delete(cli->client, &id);
    return err != FERRY_OK ? fail(cli, err) : STATUS_OK;
}

static const char *state_name(int state)
{
    switch (state) {
    case FERRY_STATE_CREATED:
        return "created";
    case FERRY_STATE_SEALED:
        return "sealed";
    default:
        return "unknown";
    }
}

static void print_objects_table(const ferry_object_info *objs, size_t n)
{
    printf("%-40s %12s %8s %-7s %4s %11s\n", "ID", "DATA", "META", "STATE", "REFS", "AGE");
    for (size_t i = 0; i < n; i++) {
        char hex[2 * FERRY_ID_SIZE + 1];
        ferry_id_format(&objs[i].id, hex);
        printf("%-40s %12" PRIu64 " %8" PRIu64 " %-7s %4" PRIu32 " %6" PRIu64 ".%03" PRIu64 "s\n",
               hex, objs[i].data_size, objs[i].metadata_size, state_name(objs[i].state),
               objs[i].refcount, objs[i].age_ms / 1000, objs[i].age_ms % 1000);
    }
}

/* An array of objects, one per line. Ids are hex and states plain words: nothing to escape. */
static void print_objects_json(const ferry_object_info *objs, size_t n)
{
    fputs("[", stdout);
    for (size_t i = 0; i < n; i++) {
        char hex[2 * FERRY_ID_SIZE + 1];
        ferry_id_format(&objs[i].id, hex);
        printf("%s\n  {\"id\": \"%s\", \"data_size\": %" PRIu64 ", \"metadata_size\": %" PRIu64
               ", \"state\": \"%s\", \"refcount\": %" PRIu32 ", \"age_ms\": %" PRIu64 "}",
               i ? "," : "", hex, objs[i].data_size, objs[i].metadata_size,
               state_name(objs[i].state), objs[i].refcount, objs[i].age_ms);
    }
    fputs(n ? "\n]\n" : "]\n", stdout);
}

/* ls [--json]: lists every object, sealed or not. */
static int cmd_ls(struct cli *cli, int argc, char **argv)
{
    int json = 0;
    int status = cli_start_json(cli, argc, argv, NULL, &json);
    if (status != STATUS_OK)
        return status;
    ferry_object_info *objs;
    size_t n;
    int err = ferry_list(cli->client, &objs, &n);
    if (err != FERRY_OK)
        return fail(cli, err);
    if (json)
        print_objects_json(objs, n);
    else
        print_objects_table(objs, n);
    ferry_free(objs);
    return STATUS_OK;
}

static uint64_t stat_value(const ferry_stats *st, const ferry_stat_field *f)
{
    uint64_t v;
    memcpy(&v, (const char *)st + f->offset, sizeof(v));
    return v;
}

/* What stat shows: the counters, the fabric's provider ("" without one) and the peers. */
struct stat_view {
    ferry_stats st;
    char provider[32];
    ferry_peer *peers;
    size_t n_peers;
};

/* The peers as a JSON array, one per line. */
static void print_peers_json(const ferry_peer *peers, size_t n)
{
    fputs("[", stdout);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",\n    {\"node\": " : "\n    {\"node\": ", stdout);
        print_json_string(peers[i].node);
        fputs(", \"transport\": ", stdout);
        print_json_string(peers[i].transport);
        fputs(", \"provider\": ", stdout);
        print_json_string(peers[i].provider);
        fputs(", \"why\": ", stdout);
        print_json_string(peers[i].why);
        fputs("}", stdout);
    }
    fputs(n ? "\n  ]" : "]", stdout);
}

/* One object: the counters, then "fabric_provider" and "peers". */
static void print_stats_json(const struct stat_view *v)
{
    size_t n;
    const ferry_stat_field *f = ferry_stat_fields(&n);

    fputs("{", stdout);
    for (size_t i = 0; i < n; i++)
        printf("%s\n  \"%s\": %" PRIu64, i ? "," : "", f[i].name, stat_value(&v->st, &f[i]));
    fputs(",\n  \"fabric_provider\": ", stdout);
    print_json_string(v->provider);
    fputs(",\n  \"peers\": ", stdout);
    print_peers_json(v->peers, v->n_peers);
    fputs("\n}\n", stdout);
}

/* The peers section: a "peers" line per peer (node, transport, provider, why, in aligned
 * columns), or one "peers -" when there is none; every line of stat starts with a key of
 * stat --json. */
static void print_peers_table(const ferry_peer *peers, size_t n)
{
    int node_width = 1, provider_width = 1;
    for (size_t i = 0; i < n; i++) {
        int node_len = (int)strnlen(peers[i].node, sizeof(peers[i].node));
        int provider_len = (int)strnlen(peers[i].provider, sizeof(peers[i].provider));
        node_width = node_len > node_width ? node_len : node_width;
        provider_width = provider_len > provider_width ? provider_len : provider_width;
    }
    if (n == 0)
        printf("%-22s -\n", "peers");
    for (size_t i = 0; i < n; i++)
        printf("%-22s %-*s %-6s %-*s %s\n", "peers", node_width, peers[i].node, peers[i].transport,
               provider_width, peers[i].provider, peers[i].why);
}

/* name value lines (the provider "-" when there is none), then the peers section. */
static void print_stats_table(const struct stat_view *v)
{
    size_t n;
    const ferry_stat_field *f = ferry_stat_fields(&n);

    for (size_t i = 0; i < n; i++)
        printf("%-22s %" PRIu64 "\n", f[i].name, stat_value(&v->st, &f[i]));
    printf("%-22s %s\n", "fabric_provider", v->provider[0] ? v->provider : "-");
    print_peers_table(v->peers, v->n_peers);
}

/* Asks the daemon for everything stat shows; v->peers is to free even on failure. */
static int stat_fetch(const struct cli *cli, struct stat_view *v)
{
    int err = ferry_stats_get(cli->client, &v->st);
    if (err == FERRY_OK)
        err = ferry_peers(cli->client, &v->peers, &v->n_peers);
    if (err == FERRY_OK)
        err = ferry_fabric_info(cli->client, v->provider);
    return err != FERRY_OK ? fail(cli, err) : STATUS_OK;
}

/* stat [--json]: prints the daemon's counters, its fabric provider and its peers. */
static int cmd_stat(struct cli *cli, int argc, char **argv)
{
    int json = 0;
    int status = cli_start_json(cli, argc, argv, NULL, &json);
    if (status != STATUS_OK)
        return status;
    struct stat_view v = {.peers = NULL};
    status = stat_fetch(cli, &v);
    if (status == STATUS_OK && json)
        print_stats_json(&v);
    else if (status == STATUS_OK)
        print_stats_table(&v);
    ferry_free(v.peers);
    return status;
}

/* eager-max [SIZE|auto]: sets the eager limit of the node's fabric (auto: the provider's
 * default), then prints the limit in effect; without SIZE only prints it. */
static int cmd_eager_max(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"SIZE"}, .min = 0};
    uint64_t bytes = FERRY_EAGER_AUTO;
    int status = parse_args(cli->cmd, argc, argv, NULL, &p);
    const char *size = p.value[0];
    if (status == STATUS_OK && size && strcmp(size, "auto") != 0)
        status = parse_size(cli, size, &bytes);
    if (status == STATUS_OK)
        status = cli_open(cli, NULL, NULL);
    if (status != STATUS_OK)
        return status;
    int err = size ? ferry_set_eager_max(cli->client, bytes) : FERRY_OK;
    ferry_stats st;
    if (err == FERRY_OK)
        err = ferry_stats_get(cli->client, &st);
    if (err != FERRY_OK)
        return fail(cli, err);
    printf("%" PRIu64 "\n", st.eager_max);
    return STATUS_OK;
}

/* evict BYTES: evicts unreferenced objects, oldest first, and prints the bytes freed. */
static int cmd_evict(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"BYTES"}, .min = 1};
    uint64_t bytes = 0, freed = 0;
    int status = parse_args(cli->cmd, argc, argv, NULL, &p);
    if (status == STATUS_OK)
        status = parse_size(cli, p.value[0], &bytes);
    if (status == STATUS_OK)
        status = cli_open(cli, NULL, NULL);
    if (status != STATUS_OK)
        return status;
    int err = ferry_evict(cli->client, bytes, &freed);
    if (err != FERRY_OK)
        return fail(cli, err);
    printf("%" PRIu64 "\n", freed);
    return STATUS_OK;
}

/* hash ID: prints the XXH3 digest of the object's data and metadata, 16 hex digits. */
static int cmd_hash(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"ID"}, .min = 1};
    ferry_id id;
    uint64_t digest;
    int status = cli_start(cli, argc, argv, NULL, &p, &id);
    if (status != STATUS_OK)
        return status;
    int err = ferry_hash(cli->client, &id, &digest);
    if (err != FERRY_OK)
        return fail(cli, err);
    printf("%016" PRIx64 "\n", digest);
    return STATUS_OK;
}

/* ---- calibrate: where one-sided reads start to beat messages on this node's fabric ---- */

#define CAL_DEFAULT_SIZES "4K,16K,64K,256K,1M,4M,16M"
#define CAL_DEFAULT_REPS 5
#define CAL_MAX_SIZES 32
#define CAL_MAX_REPS 1000
#define CAL_MAX_SIZE ((uint64_t)1 << 30)
/* Probe copies the holder keeps per size: up to CAL_MAX_COPIES, at most CAL_COPY_BYTES of
 * them (but one at least), so that a small arena holds them all; the receiver cycles through
 * them. Both sides compute it from the size alone. */
#define CAL_MAX_COPIES 8
#define CAL_COPY_BYTES ((uint64_t)16 << 20)
/* How long a fetch of a probe may take, or wait for a probe not published yet. */
#define CAL_FETCH_MS 10000
#define CAL_EAGER_ALL (UINT64_MAX - 1)

enum cal_protocol { CAL_EAGER, CAL_RENDEZVOUS, CAL_PROTOCOLS };

/* What calibrate was asked, and what it measured. */
struct calibrate {
    int serve, apply;
    const char *from, *save, *peer_socket;
    uint64_t sizes[CAL_MAX_SIZES]; /* ascending, without repeats */
    size_t nsizes;
    int64_t reps;
    uint64_t original; /* the eager limit before calibrate changed it */
    char provider[32];
    double mibps[CAL_MAX_SIZES][CAL_PROTOCOLS]; /* medians */
};

static volatile sig_atomic_t cal_interrupted;

static void cal_on_signal(int sig)
{
    (void)sig;
    cal_interrupted = 1;
}

/* SIGINT and SIGTERM end the measurement at the next fetch, so that the limit is restored. */
static void cal_catch_signals(void)
{
    struct sigaction sa = {.sa_handler = cal_on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static uint64_t cal_copies(uint64_t size)
{
    uint64_t n = CAL_COPY_BYTES / size;
    return n < 1 ? 1 : n > CAL_MAX_COPIES ? CAL_MAX_COPIES : n;
}

/* The id of copy i of the probe of size bytes: "ferry-calibrate/<size>/<i>" hashed. */
static ferry_id cal_probe_id(uint64_t size, uint64_t i)
{
    char name[64];
    ferry_id id;
    snprintf(name, sizeof(name), "ferry-calibrate/%" PRIu64 "/%" PRIu64, size, i);
    ferry_id_parse(name, &id); /* a name that is not 40 hex digits always hashes */
    return id;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Parses --sizes (comma-separated byte counts) into c->sizes, sorted, without repeats. */
static int cal_parse_sizes(const struct cli *cli, struct calibrate *c, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    int status = STATUS_OK;
    if (!copy)
        return report(cli, FERRY_ENOMEM, "no memory for --sizes");
    c->nsizes = 0;
    for (char *w = strtok_r(copy, ",", &save); w && status == STATUS_OK;
         w = strtok_r(NULL, ",", &save)) {
        if (c->nsizes == CAL_MAX_SIZES)
            status = usage_error(cli->cmd, "more than %d sizes", CAL_MAX_SIZES);
        else if ((status = parse_size(cli, w, &c->sizes[c->nsizes])) == STATUS_OK &&
                 (c->sizes[c->nsizes] == 0 || c->sizes[c->nsizes] > CAL_MAX_SIZE))
            status = usage_error(cli->cmd, "size '%s' is not within 1 to 1G", w);
        c->nsizes++;
    }
    free(copy);
    if (status == STATUS_OK && c->nsizes == 0)
        status = usage_error(cli->cmd, "--sizes lists no size");
    if (status != STATUS_OK)
        return status;
    qsort(c->sizes, c->nsizes, sizeof(c->sizes[0]), cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < c->nsizes; i++)
        if (k == 0 || c->sizes[k - 1] != c->sizes[i])
            c->sizes[k++] = c->sizes[i];
    c->nsizes = k;
    return STATUS_OK;
}

/* Sorts the command line of calibrate into c; every mistake is a usage error. */
static int cal_parse(struct cli *cli, int argc, char **argv, struct calibrate *c)
{
    const char *sizes = CAL_DEFAULT_SIZES, *reps = NULL;
    const struct opt opts[] = {{"--serve", NULL, &c->serve},
                               {"--from", &c->from, NULL},
                               {"--sizes", &sizes, NULL},
                               {"--reps", &reps, NULL},
                               {"--save", &c->save, NULL},
                               {"--apply", NULL, &c->apply},
                               {"--peer-socket", &c->peer_socket, NULL},
                               {NULL, NULL, NULL}};
    struct params p = {.min = 0};
    int status = parse_args(cli->cmd, argc, argv, opts, &p);
    if (status != STATUS_OK)
        return status;
    if (c->serve == (c->from != NULL))
        return usage_error(cli->cmd, "give either --serve or --from NODE");
    if (c->serve && (reps || c->save || c->apply || c->peer_socket))
        return usage_error(cli->cmd, "--reps, --save, --apply and --peer-socket go with --from");
    if (c->from && !c->from[0])
        return usage_error(cli->cmd, "--from needs a node id");
    c->reps = CAL_DEFAULT_REPS;
    if (reps && (status = parse_int(cli, "--reps", reps, 1, &c->reps)) != STATUS_OK)
        return status;
    if (c->reps > CAL_MAX_REPS)
        return usage_error(cli->cmd, "--reps %" PRId64 " is more than %d", c->reps, CAL_MAX_REPS);
    return cal_parse_sizes(cli, c, sizes);
}

/* An existing probe is kept when it has the size; *kept counts it. */
static int cal_check_probe(const struct cli *cli, ferry_client *fc, const ferry_id *id,
                           uint64_t size, int *kept)
{
    ferry_buffer b;
    int err = ferry_get(fc, id, 1, 0, &b);
    if (err != FERRY_OK)
        return fail(cli, err);
    uint64_t got = b.data_size;
    ferry_release(fc, id);
    if (got != size)
        return report(cli, FERRY_EEXIST, "a probe of %" PRIu64 " bytes holds %" PRIu64 " bytes",
                      size, got);
    (*kept)++;
    return STATUS_OK;
}

/* Stores copy i of the probe of size bytes on fc, filled with a pattern in place. */
static int cal_put_probe(const struct cli *cli, ferry_client *fc, uint64_t size, uint64_t i,
                         int *kept)
{
    ferry_id id = cal_probe_id(size, i);
    uint8_t *data;
    int err = ferry_create(fc, &id, size, NULL, 0, &data);
    if (err == FERRY_EEXIST)
        return cal_check_probe(cli, fc, &id, size, kept);
    if (err != FERRY_OK)
        return fail(cli, err);
    for (uint64_t k = 0; k < size; k++)
        data[k] = (uint8_t)(k * 31 + i);
    if ((err = ferry_seal(fc, &id)) != FERRY_OK) {
        ferry_abort(fc, &id);
        return fail(cli, err);
    }
    err = ferry_release(fc, &id);
    return err != FERRY_OK ? fail(cli, err) : STATUS_OK;
}

/* The holder's part: every probe of every size on fc, and a line per size on stdout. */
static int cal_serve(const struct cli *cli, ferry_client *fc, const struct calibrate *c,
                     const char *where)
{
    for (size_t s = 0; s < c->nsizes; s++) {
        uint64_t size = c->sizes[s], n = cal_copies(size);
        int kept = 0, status = STATUS_OK;
        for (uint64_t i = 0; i < n && status == STATUS_OK; i++)
            status = cal_put_probe(cli, fc, size, i, &kept);
        if (status != STATUS_OK)
            return status;
        printf("probes on %s: ferry-calibrate/%" PRIu64 "/0..%" PRIu64 " (%" PRIu64 " x %" PRIu64
               " bytes, %d there already)\n",
               where, size, n - 1, n, size, kept);
    }
    return STATUS_OK;
}

/* 1 when the comma-separated list has the word. */
static int list_has(const char *list, const char *word)
{
    size_t len = strlen(word);
    for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        if (strncmp(p, word, len) == 0 && (p[len] == ',' || p[len] == '\0'))
            return 1;
    }
    return 0;
}

/* Failure unless the directory lists NODE, another node, with a fabric, and this node has one. */
static int cal_check_node(struct cli *cli, struct calibrate *c)
{
    ferry_node_info *nodes = NULL;
    size_t n = 0, i = 0;
    int err = ferry_nodes(cli->client, &nodes, &n);
    if (err != FERRY_OK)
        return fail(cli, err);
    while (i < n && strcmp(nodes[i].id, c->from) != 0)
        i++;
    int status = STATUS_OK;
    if (i == n)
        status = report(cli, FERRY_ENOENT, "no live node '%s' (see ferry nodes)", c->from);
    else if (nodes[i].self)
        status = usage_error(cli->cmd, "--from %s names this node", c->from);
    else if (!list_has(nodes[i].transports, "fabric"))
        status = report(cli, FERRY_ENOSYS,
                        "%s is reached over tcp (it offers %s, no fabric): nothing to calibrate",
                        c->from, nodes[i].transports);
    ferry_free(nodes);
    if (status == STATUS_OK && (err = ferry_fabric_info(cli->client, c->provider)) != FERRY_OK)
        return fail(cli, err);
    if (status == STATUS_OK && !c->provider[0])
        status = report(cli, FERRY_ENOSYS,
                        "this node has no fabric (--transport tcp, or none opened): %s is reached "
                        "over tcp, nothing to calibrate",
                        c->from);
    return status;
}

/* After a first fetch from NODE: failure unless this node pulls from it over the fabric. */
static int cal_check_peer(const struct cli *cli, const struct calibrate *c)
{
    ferry_peer *peers = NULL;
    size_t n = 0, i = 0;
    int err = ferry_peers(cli->client, &peers, &n);
    while (err == FERRY_OK && i < n && strcmp(peers[i].node, c->from) != 0)
        i++;
    int status = STATUS_OK;
    if (err != FERRY_OK)
        status = fail(cli, err);
    else if (i == n)
        status = report(cli, FERRY_ETRANSFER,
                        "the probes came from another node than %s (no connection to it)", c->from);
    else if (strcmp(peers[i].transport, "fabric") != 0)
        status = report(cli, FERRY_ENOSYS, "%s is reached over %s (%s): nothing to calibrate",
                        c->from, peers[i].transport, peers[i].why);
    ferry_free(peers);
    return status;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Deletes the local copy of a probe; one that is not there is fine. */
static int cal_drop(const struct cli *cli, const ferry_id *id)
{
    int err = ferry_delete(cli->client, id);
    return err != FERRY_OK && err != FERRY_ENOENT ? fail(cli, err) : STATUS_OK;
}

/* Drops every local copy of the probes, so that each fetch pulls its object. */
static int cal_drop_all(const struct cli *cli, const struct calibrate *c)
{
    int status = STATUS_OK;
    for (size_t s = 0; s < c->nsizes && status == STATUS_OK; s++)
        for (uint64_t i = 0; i < cal_copies(c->sizes[s]) && status == STATUS_OK; i++) {
            ferry_id id = cal_probe_id(c->sizes[s], i);
            status = cal_drop(cli, &id);
        }
    return status;
}

/* Fails unless the rendezvous counters moved as protocol p must: by the size for a one-sided
 * read, not at all for messages. */
static int cal_check_path(const struct cli *cli, int p, uint64_t size, const ferry_stats *before,
                          const ferry_stats *after)
{
    uint64_t read = after->fabric_rdv_bytes - before->fabric_rdv_bytes;
    if (p == CAL_RENDEZVOUS ? read == size : read == 0)
        return STATUS_OK;
    return report(cli, FERRY_EPROTO,
                  "a %" PRIu64 "-byte probe pulled %s read %" PRIu64
                  " bytes one-sided: it did not take that path",
                  size, p == CAL_RENDEZVOUS ? "by rendezvous" : "as messages", read);
}

/* Fetches copy i of the probe of size bytes by protocol p, checks its path and size, drops
 * it again; *seconds receives the fetch's time. */
static int cal_fetch(const struct cli *cli, int p, uint64_t size, uint64_t i, double *seconds)
{
    ferry_client *fc = cli->client;
    ferry_id id = cal_probe_id(size, i);
    ferry_stats before, after;
    ferry_buffer b;
    int st = 1;
    int err = ferry_set_eager_max(fc, p == CAL_EAGER ? CAL_EAGER_ALL : 0);
    if (err == FERRY_OK)
        err = ferry_stats_get(fc, &before);
    if (err != FERRY_OK)
        return fail(cli, err);
    double t0 = now_seconds();
    err = ferry_fetch(fc, &id, 1, CAL_FETCH_MS, &st);
    *seconds = now_seconds() - t0;
    if (err != FERRY_OK)
        return report(cli, err,
                      "probe ferry-calibrate/%" PRIu64 "/%" PRIu64 ": %s (is ferry "
                      "calibrate --serve with these sizes done on the node?)",
                      size, i, ferry_errmsg());
    if ((err = ferry_stats_get(fc, &after)) != FERRY_OK || (err = ferry_get(fc, &id, 1, 0, &b)))
        return fail(cli, err);
    uint64_t got = b.data_size;
    ferry_release(fc, &id);
    int status = cal_check_path(cli, p, size, &before, &after);
    if (status == STATUS_OK && got != size)
        status = report(cli, FERRY_EPROTO, "probe of %" PRIu64 " bytes holds %" PRIu64, size, got);
    return status == STATUS_OK ? cal_drop(cli, &id) : status;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One untimed fetch per protocol, then reps timed ones, the protocols taking turns. */
static int cal_measure_size(const struct cli *cli, struct calibrate *c, size_t s, double *samples)
{
    uint64_t size = c->sizes[s], copies = cal_copies(size);
    double t;
    for (int64_t r = -1; r < c->reps; r++) {
        for (int p = 0; p < CAL_PROTOCOLS; p++) {
            if (cal_interrupted)
                return report(cli, FERRY_ESYS, "interrupted");
            int status = cal_fetch(cli, p, size, (uint64_t)(r + 1) % copies, &t);
            if (status != STATUS_OK)
                return status;
            if (r >= 0)
                samples[p * c->reps + r] = (double)size / (t > 0 ? t : 1e-9) / (1024.0 * 1024.0);
        }
    }
    for (int p = 0; p < CAL_PROTOCOLS; p++)
        c->mibps[s][p] = median(samples + p * c->reps, (size_t)c->reps);
    return STATUS_OK;
}

/* The first size from which rendezvous is at least as fast as eager at that size and every
 * larger one: its index, or nsizes when eager wins at the largest. */
static size_t cal_crossover(const struct calibrate *c)
{
    size_t k = c->nsizes;
    while (k > 0 && c->mibps[k - 1][CAL_RENDEZVOUS] >= c->mibps[k - 1][CAL_EAGER])
        k--;
    return k;
}

/* The shortest exact form of a size: "4K", "1M", "1000". */
static void size_label(uint64_t size, char buf[24])
{
    static const char units[] = "GMK";
    for (int i = 0; i < 3; i++) {
        int shift = 30 - 10 * i;
        if (size >= (uint64_t)1 << shift && size % ((uint64_t)1 << shift) == 0) {
            snprintf(buf, 24, "%" PRIu64 "%c", size >> shift, units[i]);
            return;
        }
    }
    snprintf(buf, 24, "%" PRIu64, size);
}

/* Decimals that keep three significant digits of a rate below 100 MiB/s. */
static int cal_digits(double mibps)
{
    return mibps < 1 ? 3 : mibps < 10 ? 2 : 1;
}

static void cal_print_table(const struct calibrate *c)
{
    char label[24];
    printf("%8s %13s %17s  %s\n", "size", "eager MiB/s", "rendezvous MiB/s", "winner");
    for (size_t s = 0; s < c->nsizes; s++) {
        const double *m = c->mibps[s];
        size_label(c->sizes[s], label);
        printf("%8s %13.*f %17.*f  %s\n", label, cal_digits(m[CAL_EAGER]), m[CAL_EAGER],
               cal_digits(m[CAL_RENDEZVOUS]), m[CAL_RENDEZVOUS],
               m[CAL_RENDEZVOUS] >= m[CAL_EAGER] ? "rendezvous" : "eager");
    }
}

/* The eager limit the measurements call for (the crossover size), printed with why. */
static uint64_t cal_result(const struct calibrate *c)
{
    size_t k = cal_crossover(c);
    char label[24];
    if (k < c->nsizes) {
        size_label(c->sizes[k], label);
        printf("crossover: %s (%" PRIu64 " bytes): rendezvous at least as fast from there up\n",
               label, c->sizes[k]);
        return c->sizes[k];
    }
    size_label(c->sizes[c->nsizes - 1], label);
    printf("crossover: none up to %s (eager faster there): the limit is the largest size "
           "measured, %" PRIu64 " bytes\n",
           label, c->sizes[c->nsizes - 1]);
    return c->sizes[c->nsizes - 1];
}

static int cal_save(const struct cli *cli, const char *path, uint64_t limit)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fail_io(cli, "open", path);
    int bad = fprintf(f, "%" PRIu64 "\n", limit) < 0;
    if (fclose(f) != 0 || bad)
        return fail_io(cli, "write", path);
    printf("saved %" PRIu64 " to %s\n", limit, path);
    return STATUS_OK;
}

/* Measures every size with the limit changed, then restores it (unless --apply: the crossover)
 * whatever happened; --save afterwards. */
static int cal_run(struct cli *cli, struct calibrate *c)
{
    double *samples = calloc((size_t)c->reps * CAL_PROTOCOLS, sizeof(*samples));
    int status = samples ? STATUS_OK : report(cli, FERRY_ENOMEM, "no memory for the samples");
    uint64_t limit = 0;
    if (status == STATUS_OK)
        status = cal_fetch(cli, CAL_EAGER, c->sizes[0], 0, &(double){0}); /* connects */
    if (status == STATUS_OK)
        status = cal_check_peer(cli, c);
    if (status == STATUS_OK)
        printf("calibrating the fabric (%s) from %s: %" PRId64 " fetches per size and protocol, "
               "median MiB/s\n",
               c->provider, c->from, c->reps);
    for (size_t s = 0; s < c->nsizes && status == STATUS_OK; s++)
        status = cal_measure_size(cli, c, s, samples);
    free(samples);
    if (status == STATUS_OK) {
        cal_print_table(c);
        limit = cal_result(c);
    }
    int apply = status == STATUS_OK && c->apply;
    int err = ferry_set_eager_max(cli->client, apply ? limit : c->original);
    if (err != FERRY_OK)
        return status == STATUS_OK ? fail(cli, err) : status;
    if (status != STATUS_OK)
        return status;
    printf("eager limit: %" PRIu64 " (%s)\n", apply ? limit : c->original,
           apply ? "applied" : "restored");
    return c->save ? cal_save(cli, c->save, limit) : STATUS_OK;
}

/* --peer-socket: the holder's part on the daemon there, before measuring. */
static int cal_serve_peer(const struct cli *cli, const struct calibrate *c)
{
    ferry_client *peer;
    int err = ferry_connect(c->peer_socket, &peer);
    if (err != FERRY_OK) {
        int status = fail(cli, err);
        return err == FERRY_ECONN ? STATUS_UNREACHABLE : status;
    }
    int status = cal_serve(cli, peer, c, c->from);
    ferry_disconnect(peer);
    return status;
}

/* The receiver's part: checks, probes through --peer-socket, local copies dropped, then the
 * measurements. */
static int cal_from(struct cli *cli, struct calibrate *c)
{
    ferry_stats st;
    int status = cal_check_node(cli, c);
    if (status == STATUS_OK && c->peer_socket)
        status = cal_serve_peer(cli, c);
    if (status == STATUS_OK)
        status = cal_drop_all(cli, c);
    if (status != STATUS_OK)
        return status;
    int err = ferry_stats_get(cli->client, &st);
    if (err != FERRY_OK)
        return fail(cli, err);
    c->original = st.eager_max;
    cal_catch_signals();
    status = cal_run(cli, c);
    int drop = cal_drop_all(cli, c);
    return status != STATUS_OK ? status : drop;
}

/* calibrate --serve [--sizes LIST] | --from NODE [--sizes LIST] [--reps N] [--save FILE]
 * [--apply] [--peer-socket PATH]: measures pulls from NODE as messages (eager) and by one-sided
 * reads (rendezvous) at each size, and finds the size from which reads are at least as fast. */
static int cmd_calibrate(struct cli *cli, int argc, char **argv)
{
    struct calibrate c = {.serve = 0};
    int status = cal_parse(cli, argc, argv, &c);
    if (status == STATUS_OK)
        status = cli_open(cli, NULL, NULL);
    if (status != STATUS_OK)
        return status;
    return c.serve ? cal_serve(cli, cli->client, &c, "this node") : cal_from(cli, &c);
}

static const struct command {
    const char *name;
    const char *args; /* for the usage text */
    const char *summary;
    int (*run)(struct cli *cli, int argc, char **argv);
} commands[] = {
    {"put", "ID [FILE|-] [--meta STRING]", "store FILE (stdin when - or absent) as ID", cmd_put},
    {"get", "ID [-o FILE] [--timeout MS] [--fetch]", "write ID to FILE or stdout", cmd_get},
    {"contains", "ID", "print true (exit 0) if ID is stored, else false (1)", cmd_contains},
    {"rm", "ID", "delete ID", cmd_rm},
    {"ls", "[--json]", "list every object", cmd_ls},
    {"stat", "[--json]", "print the daemon's counters, fabric and peers", cmd_stat},
    {"evict", "BYTES", "evict unused objects until BYTES (K, M, G) freed", cmd_evict},
    {"hash", "ID", "print the XXH3 digest of ID's data and metadata", cmd_hash},
    {"fetch", "ID... [--timeout MS]", "make the IDs local, pulling them from other nodes",
     cmd_fetch},
    {"nodes", "[--json]", "list the live nodes (* marks this one)", cmd_nodes},
    {"where", "ID [--json]", "list the live nodes that hold ID", cmd_where},
    {"eager-max", "[SIZE|auto]", "set the fabric's eager limit (K, M, G); print it", cmd_eager_max},
    {"calibrate", "--serve | --from NODE [OPTIONS]", "measure where one-sided reads pay",
     cmd_calibrate},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void print_usage(void)
{
    puts("Usage: ferry [--socket PATH] COMMAND [ARGS]\n\nCommands:");
    for (size_t i = 0; i < N_COMMANDS; i++)
        printf("  %-9s %-36s %s\n", commands[i].name, commands[i].args, commands[i].summary);
    puts("\nAn ID of 40 hex digits is the raw id; any other string names the id by its SHA-1.\n"
         "PATH defaults to $FERRY_SOCKET, else " FERRY_DEFAULT_SOCKET ".");
    printf("MS: 0 polls, -1 waits on. get waits 0 ms unless told; fetch and get --fetch (which\n"
           "pulls ID from another node when it is not local) wait %d ms for an ID that no\n"
           "node holds yet. fetch prints nothing on success and a line per failed ID.\n",
           FETCH_TIMEOUT_MS);
    puts("eager-max: objects up to SIZE are pulled as messages, larger ones by one-sided\n"
         "reads; auto is the provider's default. A standalone node has none to set (status 5).");
    puts("calibrate --serve [--sizes LIST]: puts probe objects (ferry-calibrate/SIZE/I) on this\n"
         "node. calibrate --from NODE [--sizes LIST] [--reps N] [--save FILE] [--apply]\n"
         "[--peer-socket PATH]: pulls them from NODE over the fabric as messages (eager) and by\n"
         "one-sided reads (rendezvous), N times each per size (default " CAL_DEFAULT_SIZES ",\n"
         "5), prints the median MiB/s and the crossover (the smallest size from which rendezvous\n"
         "is at least as fast there and at every larger size), and restores the eager limit,\n"
         "or with --apply sets it to the crossover; --save writes the crossover to FILE (for\n"
         "ferryd --eager-max @FILE); --peer-socket does NODE's --serve through its socket\n"
         "first. Other pulls of this node meanwhile run with the limits calibrate sets. A NODE\n"
         "reached over tcp has nothing to calibrate (status 5).");
    puts("Exit status: 0 ok, 1 not found or timed out, 2 usage error, 3 no space or too big,\n"
         "4 daemon or cluster directory unreachable, 5 any other failure (a failed transfer).");
}

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

/* Output goes through stdio's buffer, so a failure to write it may show only at the flush.
 * It is reported only when nothing else was, to keep to one line on stderr. */
static int flush_stdout(const struct cli *cli, int status)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return status;
    return status == STATUS_OK ? fail_io(cli, "write", "stdout") : status;
}

int main(int argc, char **argv)
{
    struct cli cli = {.socket = NULL};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_usage();
            return flush_stdout(&cli, STATUS_OK);
        }
        if (strcmp(argv[i], "--socket") != 0)
            return usage_error(NULL, "unknown option '%s' (see ferry --help)", argv[i]);
        if (++i == argc)
            return usage_error(NULL, "option --socket needs a value");
        cli.socket = argv[i];
    }
    if (i == argc)
        return usage_error(NULL, "missing COMMAND (see ferry --help)");
    const struct command *command = find_command(argv[i]);
    if (!command)
        return usage_error(argv[i], "unknown command (see ferry --help)");
    cli.cmd = argv[i];
    int status = command->run(&cli, argc - i - 1, argv + i + 1);
    ferry_disconnect(cli.client);
    return flush_stdout(&cli, status);
}
