/* ferry.c - the ferry command line: one subcommand per store operation, talking to the node's
 * ferryd through the public API of libferry only (include/ferry.h).
 *
 * Every failure prints exactly one line on stderr,
 *     ferry: <command>: <ferry_strerror(err)>: <detail>
 * and ends with a status that scripts can test: see enum status. */
#include "cli.h"

#include <ctype.h>
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

#include "common/clock.h"
#include "common/proto.h"
#include "common/size.h"
#include "common/text.h"

/* Largest single read() or write(): Linux moves at most about 2 GiB per call anyway. */
#define IO_CHUNK ((size_t)1 << 30)
/* Step in which input of unknown size is spooled to a temporary file. */
#define STREAM_CHUNK (1 << 20)
/* How long fetch and get --fetch wait without --timeout (ms): -1 could hang a script. */

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
        return cli_fail_io(cli, "read", name);
    if (got < size)
        return cli_report(cli, FERRY_ESYS,
                          "read %s: file shrank to %" PRIu64 " of %" PRIu64 " bytes", name, got,
                          size);
    return STATUS_OK;
}

/* What put stores under: the id, and the name people gave it (NULL for a raw id, or a word
 * that cannot be a name); keep: kept from before its seal (ferry_keep). */
struct put_target {
    ferry_id id;
    const char *name;
    int keep;
};

/* A failed create, with the name typed (NULL: an id), the id and the next step when the id
 * is taken. */
static int create_failed(const struct cli *cli, const char *typed, const ferry_id *id, int err)
{
    char text[2 * FERRY_ID_SIZE + 1], name[160];

    if (err != FERRY_EEXIST)
        return cli_fail(cli, err);
    ferry_id_format(id, text);
    return cli_report(cli, err,
                      "%s (%s%s%sid %s). An id is written once: ferry rm it first (--cluster on "
                      "every node), or put under another name",
                      ferry_errmsg(), typed ? "'" : "",
                      typed ? text_safe(typed, name, sizeof(name)) : "", typed ? "', " : "", text);
}

/* Stores size bytes of a regular file: the object is created at that size and the file is
 * read straight into it, with no copy in this process. It is aborted when the file cannot be
 * read in full, so that no truncated object is ever sealed. */
static int put_sized(struct cli *cli, const struct put_target *t, int fd, const char *name,
                     uint64_t size, const char *meta)
{
    const ferry_id *id = &t->id;
    uint8_t *data;
    int err = ferry_create(cli->client, id, size, meta, meta_size(meta), &data);
    if (err != FERRY_OK)
        return create_failed(cli, t->name, id, err);
    int status = fill_object(cli, fd, name, data, size);
    if (status == STATUS_OK && t->name && (err = ferry_set_name(cli->client, id, t->name)) != 0)
        status = cli_fail(cli, err);
    if (status == STATUS_OK && t->keep && (err = ferry_keep(cli->client, id, 1)) != 0)
        status = cli_fail(cli, err);
    if (status == STATUS_OK && (err = ferry_seal(cli->client, id)) != FERRY_OK)
        status = cli_fail(cli, err);
    if (status != STATUS_OK) {
        /* The failure is reported already; an abort that fails too adds nothing to it. */
        ferry_abort(cli->client, id);
        return status;
    }
    err = ferry_release(cli->client, id);
    return err != FERRY_OK ? cli_fail(cli, err) : STATUS_OK;
}

/* Stores input of unknown size (a pipe): it is spooled to an unnamed file in $TMPDIR (else
 * /tmp) in 1 MiB steps, then stored from there, so that this process never holds all of it. */
static int put_stream(struct cli *cli, const struct put_target *t, int fd, const char *name,
                      const char *meta)
{
    const char *dir = getenv("TMPDIR");
    int tmp = open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (tmp < 0)
        return cli_fail_io(cli, "spool to a temporary file in", dir && *dir ? dir : "/tmp");
    uint8_t *buf = malloc(STREAM_CHUNK);
    uint64_t got = 0, total = 0;
    int status = buf ? STATUS_OK : cli_report(cli, FERRY_ENOMEM, "a %d-byte buffer", STREAM_CHUNK);
    while (status == STATUS_OK) {
        if (read_full(fd, buf, STREAM_CHUNK, &got) < 0)
            status = cli_fail_io(cli, "read", name);
        else if (got && write_all(tmp, buf, got) < 0)
            status = cli_fail_io(cli, "spool", name);
        total += got;
        if (got < STREAM_CHUNK)
            break;
    }
    free(buf);
    if (status == STATUS_OK && lseek(tmp, 0, SEEK_SET) < 0)
        status = cli_fail_io(cli, "seek", "the spool file");
    if (status == STATUS_OK)
        status = put_sized(cli, t, tmp, name, total, meta);
    close(tmp);
    return status;
}

/* Stores what is left to read from fd: a regular file (stdin too when redirected from one)
 * tells its size beforehand, anything else is read to its end first. */
static int put_fd(struct cli *cli, const struct put_target *t, int fd, const char *name,
                  const char *meta)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return put_stream(cli, t, fd, name, meta);
    off_t at = lseek(fd, 0, SEEK_CUR);
    if (at < 0)
        return cli_fail_io(cli, "seek", name);
    return put_sized(cli, t, fd, name, st.st_size > at ? (uint64_t)(st.st_size - at) : 0, meta);
}

/* Whether word is a raw id (40 hex digits) rather than a name. */
static int is_raw_id(const char *word)
{
    return strlen(word) == 2 * FERRY_ID_SIZE &&
           strspn(word, "0123456789abcdefABCDEF") == 2 * FERRY_ID_SIZE;
}

/* put ID [FILE|-] [--meta STRING]: stores FILE, or stdin when it is "-" or absent; an ID that
 * is a name is kept with the object. */
static int cmd_put(struct cli *cli, int argc, char **argv)
{
    const char *meta = NULL;
    struct put_target t = {.name = NULL};
    const struct opt opts[] = {{"--meta", &meta, NULL}, {"--keep", NULL, &t.keep}, {NULL}};
    struct params p = {.names = {"ID", "FILE"}, .min = 1};
    int status = cli_start(cli, argc, argv, opts, &p, &t.id);
    if (status != STATUS_OK)
        return status;
    if (!is_raw_id(p.value[0]) && proto_check_name(p.value[0]) == 0)
        t.name = p.value[0]; /* kept with the object: ls shows it */
    const char *path = p.value[1];
    if (!path || strcmp(path, "-") == 0)
        return put_fd(cli, &t, STDIN_FILENO, "stdin", meta);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cli_fail_io(cli, "open", path);
    status = put_fd(cli, &t, fd, path, meta);
    close(fd);
    return status;
}

/* Writes data to the file at path, or to stdout when path is NULL or "-". The file is opened
 * only once the object is at hand, so a failed get leaves an existing file alone. */
static int write_object(const struct cli *cli, const char *path, const uint8_t *data, uint64_t size)
{
    if (!path || strcmp(path, "-") == 0)
        return write_all(STDOUT_FILENO, data, size) < 0 ? cli_fail_io(cli, "write", "stdout")
                                                        : STATUS_OK;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return cli_fail_io(cli, "open", path);
    if (write_all(fd, data, size) < 0) {
        int status = cli_fail_io(cli, "write", path);
        close(fd);
        return status;
    }
    /* close() is where a delayed write error (NFS, a full disk) shows up. */
    return close(fd) < 0 ? cli_fail_io(cli, "close", path) : STATUS_OK;
}

/* get ID [-o FILE] [--timeout MS] [--fetch]: writes the object's data out; MS 0 polls, -1 waits
 * on. With --fetch an object that is not local is pulled from another node first, and MS
 * defaults to FERRY_FETCH_TIMEOUT_MS instead of 0. */
static int cmd_get(struct cli *cli, int argc, char **argv)
{
    const char *out = NULL, *timeout = NULL;
    int fetch = 0, meta = 0;
    const struct opt opts[] = {{"-o", &out, NULL},
                               {"--timeout", &timeout, NULL},
                               {"--fetch", NULL, &fetch},
                               {"--meta", NULL, &meta},
                               {NULL, NULL, NULL}};
    struct params p = {.names = {"ID"}, .min = 1};
    int64_t timeout_ms = 0;
    ferry_id id;
    int status = cli_parse_args(cli->cmd, argc, argv, opts, &p);
    if (status == STATUS_OK && fetch)
        timeout_ms = FERRY_FETCH_TIMEOUT_MS;
    if (status == STATUS_OK && timeout)
        status = cli_parse_int(cli, "timeout", timeout, -1, &timeout_ms);
    if (status == STATUS_OK)
        status = cli_open(cli, p.value[0], &id);
    if (status != STATUS_OK)
        return status;
    ferry_buffer buf;
    int err = fetch ? ferry_get_fetch(cli->client, &id, 1, timeout_ms, &buf)
                    : ferry_get(cli->client, &id, 1, timeout_ms, &buf);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    status = meta ? write_object(cli, out, buf.metadata, buf.metadata_size)
                  : write_object(cli, out, buf.data, buf.data_size);
    err = ferry_release(cli->client, &id);
    return status == STATUS_OK && err != FERRY_OK ? cli_fail(cli, err) : status;
}

/* The ids of a fetch: the words as given (for messages), parsed, and their results. */
struct fetch_list {
    const char **words;
    ferry_id *ids;
    int *statuses;
    size_t n;
    const char *at;    /* --at: a location for every id, or NULL */
    const char **locs; /* at, once per id, for ferry_fetch_at; NULL without --at */
};

static void fetch_list_free(struct fetch_list *f)
{
    free(f->words);
    free(f->ids);
    free(f->statuses);
    free(f->locs);
}

/* Parses the command line of fetch into f (f->words sized for argc) and *timeout_ms (left
 * alone without --timeout). */
static int fetch_parse(struct cli *cli, int argc, char **argv, struct fetch_list *f,
                       int64_t *timeout_ms)
{
    const char *timeout = NULL;
    const struct opt opts[] = {
        {"--timeout", &timeout, NULL}, {"--at", &f->at, NULL}, {NULL, NULL, NULL}};
    struct params p = {.rest = f->words};
    int status = cli_parse_args(cli->cmd, argc, argv, opts, &p);
    if (status != STATUS_OK)
        return status;
    if (p.n_rest == 0)
        return cli_usage(cli->cmd, "missing ID");
    f->n = (size_t)p.n_rest;
    return timeout ? cli_parse_int(cli, "timeout", timeout, -1, timeout_ms) : STATUS_OK;
}

/* Parses every id of f: a bad one is a usage error, found before the daemon is asked. */
static int fetch_parse_ids(struct cli *cli, struct fetch_list *f)
{
    f->ids = calloc(f->n, sizeof(*f->ids));
    f->statuses = calloc(f->n, sizeof(*f->statuses));
    if (!f->ids || !f->statuses)
        return cli_report(cli, FERRY_ENOMEM, "no memory for %zu ids", f->n);
    for (size_t i = 0; i < f->n; i++) {
        if (ferry_id_parse(f->words[i], &f->ids[i]) != FERRY_OK)
            return cli_usage(cli->cmd, "%s", ferry_errmsg());
        f->statuses[i] = 1; /* no status: one the call never filled in stays positive */
    }
    return STATUS_OK;
}

/* Reports a failed fetch: a line per failed id, the first with why the daemon gave (each
 * holder's reason, or that no live node holds it), or one line for a call that failed as a
 * whole. The exit status is that of the first failure. */
static int fetch_report(const struct cli *cli, const struct fetch_list *f, int err)
{
    char why[512];
    int first = 0;

    snprintf(why, sizeof(why), "%s", ferry_errmsg());
    for (size_t i = 0; i < f->n; i++) {
        const char *what = ferry_strerror(f->statuses[i]);
        if (f->statuses[i] >= 0)
            continue;
        if (!first && why[0] && strncmp(why, what, strlen(what)) == 0)
            fprintf(stderr, "ferry: %s: %s: %s\n", cli->cmd, f->words[i], why); /* says it */
        else if (!first && why[0])
            fprintf(stderr, "ferry: %s: %s: %s: %s\n", cli->cmd, f->words[i], what, why);
        else
            fprintf(stderr, "ferry: %s: %s: %s\n", cli->cmd, f->words[i], what);
        if (!first)
            first = f->statuses[i];
    }
    return first ? cli_exit_status(first) : cli_fail(cli, err);
}

/* fetch ID... [--timeout MS]: makes the objects local, pulling them from the nodes that hold
 * them; waits up to MS (default FERRY_FETCH_TIMEOUT_MS) for ids that no node holds yet. */
static int cmd_fetch(struct cli *cli, int argc, char **argv)
{
    struct fetch_list f = {.words = calloc(argc > 0 ? (size_t)argc : 1, sizeof(char *))};
    int64_t timeout_ms = FERRY_FETCH_TIMEOUT_MS;
    int status = f.words ? fetch_parse(cli, argc, argv, &f, &timeout_ms)
                         : cli_report(cli, FERRY_ENOMEM, "no memory for the arguments");
    if (status == STATUS_OK)
        status = fetch_parse_ids(cli, &f);
    if (status == STATUS_OK)
        status = cli_open(cli, NULL, NULL);
    if (status == STATUS_OK && f.at && !(f.locs = calloc(f.n, sizeof(*f.locs))))
        status = cli_report(cli, FERRY_ENOMEM, "no memory for the locations");
    for (size_t i = 0; status == STATUS_OK && f.locs && i < f.n; i++)
        f.locs[i] = f.at;
    if (status == STATUS_OK) {
        int err = ferry_fetch_at(cli->client, f.ids, f.locs, f.n, timeout_ms, f.statuses);
        status = err != FERRY_OK ? fetch_report(cli, &f, err) : STATUS_OK;
    }
    fetch_list_free(&f);
    return status;
}

/* location: this node's location, for the references to what is put here (fetch --at). */
static int cmd_location(struct cli *cli, int argc, char **argv)
{
    struct params p = {.min = 0};
    char loc[FERRY_LOCATION_MAX];
    int status = cli_start(cli, argc, argv, NULL, &p, NULL);
    if (status != STATUS_OK)
        return status;
    int err = ferry_location(cli->client, loc);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    printf("%s\n", loc);
    return STATUS_OK;
}

/* ferry wait polls this often. */
#define WAIT_STEP_MS 50
#define WAIT_DEFAULT_MS 30000
#define WAIT_MAX_MS 86400000

static int64_t mono_ms(void)
{
    return (int64_t)(clock_mono_ns() / 1000000);
}

/* Whether this node is registered with its directory: 1, 0 (not yet: Redis down, or the
 * registration not made), or FERRY_ESTANDALONE (a node without one: waiting changes nothing).
 * From the daemon's own state (directory_up), not from the directory's listing, which names
 * nodes by id alone: an earlier run's entry, or a live node with this id, would be listed. */
static int node_registered(ferry_client *c, int *standalone_checked)
{
    ferry_stats st;
    ferry_node_info *nodes = NULL;
    size_t n = 0;

    if (!*standalone_checked) {
        *standalone_checked = 1;
        if (ferry_nodes(c, &nodes, &n) == FERRY_ESTANDALONE)
            return FERRY_ESTANDALONE;
        ferry_free(nodes);
    }
    return ferry_stats_get(c, &st, sizeof(st)) == FERRY_OK && st.directory_up == 1;
}

/* Connects within deadline (a daemon that accepts but does not answer is waited for no longer,
 * and tried again), every WAIT_STEP_MS: FERRY_OK, or the last failure. */
static int connect_by(struct cli *cli, int64_t deadline)
{
    int err;

    for (;;) {
        int64_t left = deadline - mono_ms();
        err = ferry_connect_timeout(cli->socket, left > 1 ? left : 1, &cli->client);
        if (err == FERRY_OK)
            return err;
        cli->client = NULL;
        if ((err != FERRY_ECONN && err != FERRY_EBUSY && err != FERRY_ETIMEDOUT) ||
            mono_ms() >= deadline)
            return err;
        usleep(WAIT_STEP_MS * 1000);
    }
}

/* wait [--timeout MS] [--cluster]: until the daemon answers (a script's next line can use it),
 * and with --cluster until it is registered with the directory. */
static int cmd_wait(struct cli *cli, int argc, char **argv)
{
    const char *timeout = NULL;
    int cluster = 0, registered = 0, checked = 0, err;
    const struct opt opts[] = {
        {"--timeout", &timeout, NULL}, {"--cluster", NULL, &cluster}, {NULL, NULL, NULL}};
    struct params p = {.min = 0};
    int64_t ms = WAIT_DEFAULT_MS, deadline;
    int status = cli_parse_args(cli->cmd, argc, argv, opts, &p);

    if (status == STATUS_OK && timeout)
        status = cli_parse_int(cli, "--timeout", timeout, 0, &ms);
    if (status != STATUS_OK)
        return status;
    if (ms > WAIT_MAX_MS)
        return cli_usage(cli->cmd, "--timeout %lld: at most %d ms (a day)", (long long)ms,
                         WAIT_MAX_MS);
    deadline = mono_ms() + ms;
    if ((err = connect_by(cli, deadline)) != FERRY_OK)
        return err == FERRY_ECONN || err == FERRY_EBUSY || err == FERRY_ETIMEDOUT
                   ? cli_report(cli, FERRY_ETIMEDOUT, "no daemon answered within %lld ms: %s",
                                (long long)ms, ferry_errmsg())
                   : cli_fail(cli, err);
    ferry_set_timeout(cli->client, ms > 1000 ? ms : 1000);
    while (cluster && (registered = node_registered(cli->client, &checked)) == 0 &&
           mono_ms() < deadline)
        usleep(WAIT_STEP_MS * 1000);
    if (registered < 0)
        return cli_report(cli, registered, "--cluster: this node has no directory");
    if (cluster && !registered)
        return cli_report(cli, FERRY_ETIMEDOUT,
                          "the daemon answers, but it is not registered with the directory "
                          "within %lld ms (ferry stat says why)",
                          (long long)ms);
    return STATUS_OK;
}

/* An array of nodes, one per line. */
static void print_nodes_json(const ferry_node_info *nodes, size_t n)
{
    fputs("[", stdout);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",\n  {\"id\": " : "\n  {\"id\": ", stdout);
        cli_json_string(nodes[i].id);
        fputs(", \"address\": ", stdout);
        cli_json_string(nodes[i].address);
        fputs(", \"transports\": ", stdout);
        cli_json_string(nodes[i].transports);
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
        return cli_fail(cli, err);
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

/* where ID [--json]: lists the live nodes that hold ID; none: the empty listing, a line on
 * stderr and status 1. */
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
    if ((status = print_nodes(cli, err, nodes, n, json)) != STATUS_OK || n > 0)
        return status;
    char hex[2 * FERRY_ID_SIZE + 1];
    ferry_id_format(&id, hex);
    return cli_report(cli, FERRY_ENOENT, "no live node holds %s", hex);
}

/* contains ID: prints true (status 0) when a sealed object ID is stored ("true (on disk)" when
 * it is spilled), else false (1). */
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
        return cli_fail(cli, err);
    puts(present == FERRY_ON_DISK ? "true (on disk)" : present ? "true" : "false");
    return present ? STATUS_OK : STATUS_MISSING;
}

/* rm [--cluster | --unused] ID: deletes the object here, on every node, or here once unused. */
static int cmd_rm(struct cli *cli, int argc, char **argv)
{
    int cluster = 0, unused = 0;
    const struct opt opts[] = {{"--cluster", NULL, &cluster}, {"--unused", NULL, &unused}, {NULL}};
    struct params p = {.names = {"ID"}, .min = 1};
    ferry_id id;
    int status = cli_start(cli, argc, argv, opts, &p, &id), err;
    if (status != STATUS_OK)
        return status;
    if (cluster && unused)
        return cli_usage(cli->cmd, "--cluster and --unused: one or the other");
    err = cluster  ? ferry_delete_cluster(cli->client, &id)
          : unused ? ferry_delete_unused(cli->client, &id)
                   : ferry_delete(cli->client, &id);
    return err != FERRY_OK ? cli_fail(cli, err) : STATUS_OK;
}

/* keep ID, unkeep ID: keeps an object until let go, or lets it go. */
static int cmd_keep(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"ID"}, .min = 1};
    ferry_id id;
    int status = cli_start(cli, argc, argv, NULL, &p, &id);
    if (status != STATUS_OK)
        return status;
    int err = ferry_keep(cli->client, &id, strcmp(cli->cmd, "keep") == 0);
    return err != FERRY_OK ? cli_fail(cli, err) : STATUS_OK;
}

static const char *state_name(int state)
{
    switch (state) {
    case FERRY_STATE_CREATED:
        return "created";
    case FERRY_STATE_SEALED:
        return "sealed";
    case FERRY_STATE_SPILLED:
        return "on disk";
    default:
        return "unknown";
    }
}

/* Names are shown escaped (common/text.h): they are kept as given, and may hold C1 controls or
 * bidi overrides that would act on the terminal. */
static void print_objects_table(const ferry_object_info *objs, size_t n)
{
    printf("%-40s %12s %8s %-7s %4s %11s  %s\n", "ID", "DATA", "META", "STATE", "REFS", "AGE",
           "NAME");
    for (size_t i = 0; i < n; i++) {
        char hex[2 * FERRY_ID_SIZE + 1], name[8 * FERRY_NAME_MAX + 1];
        ferry_id_format(&objs[i].id, hex);
        printf("%-40s %12" PRIu64 " %8" PRIu64 " %-7s %4" PRIu32 " %6" PRIu64 ".%03" PRIu64
               "s  %s\n",
               hex, objs[i].data_size, objs[i].metadata_size, state_name(objs[i].state),
               objs[i].refcount, objs[i].age_ms / 1000, objs[i].age_ms % 1000,
               text_safe(objs[i].name, name, sizeof(name)));
    }
}

/* An array of objects, one per line. Ids are hex and states plain words; names are escaped. */
static void print_objects_json(const ferry_object_info *objs, size_t n)
{
    fputs("[", stdout);
    for (size_t i = 0; i < n; i++) {
        char hex[2 * FERRY_ID_SIZE + 1];
        ferry_id_format(&objs[i].id, hex);
        printf("%s\n  {\"id\": \"%s\", \"data_size\": %" PRIu64 ", \"metadata_size\": %" PRIu64
               ", \"state\": \"%s\", \"refcount\": %" PRIu32 ", \"age_ms\": %" PRIu64
               ", \"name\": ",
               i ? "," : "", hex, objs[i].data_size, objs[i].metadata_size,
               state_name(objs[i].state), objs[i].refcount, objs[i].age_ms);
        cli_json_string(objs[i].name);
        fputs("}", stdout);
    }
    fputs(n ? "\n]\n" : "]\n", stdout);
}

/* Keeps the objects whose name or hex id starts with prefix; returns how many. */
static size_t filter_objects(ferry_object_info *objs, size_t n, const char *prefix)
{
    size_t kept = 0, len = strlen(prefix);

    for (size_t i = 0; i < n; i++) {
        char hex[2 * FERRY_ID_SIZE + 1];
        ferry_id_format(&objs[i].id, hex);
        if (strncmp(objs[i].name, prefix, len) == 0 || strncasecmp(hex, prefix, len) == 0)
            objs[kept++] = objs[i];
    }
    return kept;
}

/* ls [PREFIX] [--json]: lists every object, sealed or not (whose name or id starts with
 * PREFIX). */
static int cmd_ls(struct cli *cli, int argc, char **argv)
{
    int json = 0;
    const struct opt opts[] = {{"--json", NULL, &json}, {NULL, NULL, NULL}};
    struct params p = {.names = {"PREFIX"}, .min = 0};
    int status = cli_start(cli, argc, argv, opts, &p, NULL);
    if (status != STATUS_OK)
        return status;
    ferry_object_info *objs;
    size_t n;
    int err = ferry_list(cli->client, &objs, &n);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    if (p.value[0])
        n = filter_objects(objs, n, p.value[0]);
    if (json)
        print_objects_json(objs, n);
    else
        print_objects_table(objs, n);
    ferry_free(objs);
    return STATUS_OK;
}

/* eager-max [SIZE|auto]: sets the eager limit of the node's fabric (auto: the provider's
 * default), then prints the limit in effect; without SIZE only prints it. */
static int cmd_eager_max(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"SIZE"}, .min = 0};
    uint64_t bytes = FERRY_EAGER_AUTO;
    int status = cli_parse_args(cli->cmd, argc, argv, NULL, &p);
    const char *size = p.value[0];
    if (status == STATUS_OK && size && strcmp(size, "auto") != 0)
        status = cli_parse_size(cli, size, &bytes);
    if (status == STATUS_OK)
        status = cli_open(cli, NULL, NULL);
    if (status != STATUS_OK)
        return status;
    int err = size ? ferry_set_eager_max(cli->client, bytes) : FERRY_OK;
    ferry_stats st;
    if (err == FERRY_OK)
        err = ferry_stats_get(cli->client, &st, sizeof(st));
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    printf("%" PRIu64 "\n", st.eager_max);
    return STATUS_OK;
}

/* evict BYTES: evicts unreferenced objects, oldest first, and says how many and how much. */
static int cmd_evict(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"BYTES"}, .min = 1};
    uint64_t bytes = 0, freed = 0;
    int status = cli_parse_args(cli->cmd, argc, argv, NULL, &p);
    if (status == STATUS_OK)
        status = cli_parse_size(cli, p.value[0], &bytes);
    if (status == STATUS_OK)
        status = cli_open(cli, NULL, NULL);
    if (status != STATUS_OK)
        return status;
    ferry_stats before, after;
    int err = ferry_stats_get(cli->client, &before, sizeof(before));
    if (err == FERRY_OK)
        err = ferry_evict(cli->client, bytes, &freed);
    if (err == FERRY_OK)
        err = ferry_stats_get(cli->client, &after, sizeof(after));
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    char size[SIZE_FORMAT_LEN];
    uint64_t n = after.evicted_objects - before.evicted_objects; /* others' evictions count too */
    if (after.spill_enabled) /* memory freed, the objects kept on disk */
        n = after.spilled_objects > before.spilled_objects
                ? after.spilled_objects - before.spilled_objects
                : 0;
    printf("%s %" PRIu64 " object%s, %s (%" PRIu64 " bytes)\n",
           after.spill_enabled ? "moved to disk" : "evicted", n, n == 1 ? "" : "s",
           size_format(freed, size, sizeof(size)), freed);
    return STATUS_OK;
}

/* hash ID: prints the digest of the object's data and metadata (its SHA-256 root, ferry.h),
 * 64 hex digits, as the directory records it. */
static int cmd_hash(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"ID"}, .min = 1};
    ferry_id id;
    uint8_t digest[FERRY_DIGEST_LEN];
    int status = cli_start(cli, argc, argv, NULL, &p, &id);
    if (status != STATUS_OK)
        return status;
    int err = ferry_digest(cli->client, &id, digest);
    if (err != FERRY_OK)
        return cli_fail(cli, err);
    for (int i = 0; i < FERRY_DIGEST_LEN; i++)
        printf("%02x", digest[i]);
    printf("\n");
    return STATUS_OK;
}

/* id NAME: prints the id NAME stands for (itself when it is 40 hex digits). */
static int cmd_id(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"NAME"}, .min = 1};
    ferry_id id;
    char text[2 * FERRY_ID_SIZE + 1];
    int status = cli_parse_args(cli->cmd, argc, argv, NULL, &p);
    if (status != STATUS_OK)
        return status;
    if (ferry_id_parse(p.value[0], &id) != FERRY_OK)
        return cli_fail(cli, FERRY_EINVAL);
    ferry_id_format(&id, text);
    printf("%s\n", text);
    return STATUS_OK;
}

static const struct command {
    const char *name;
    const char *args; /* for the usage text */
    const char *summary;
    int (*run)(struct cli *cli, int argc, char **argv);
    const char *help; /* more for ferry help CMD, or NULL */
} commands[] = {
    {"put", "ID [FILE|-] [--meta STRING] [--keep]", "store FILE (stdin when - or absent) as ID",
     cmd_put,
     "An ID that is a name (not 40 hex digits) is kept with the object: ls shows it.\n"
     "--meta STRING stores STRING as the object's metadata. An ID that exists is refused:\n"
     "rm it first. From stdin (- or no FILE) the bytes are read to the end, then stored.\n"
     "--keep keeps the object until unkeep or rm: it is never evicted to make room.\n"},
    {"keep", "ID", "keep ID until unkeep or rm: never evicted to make room", cmd_keep,
     "For an object put for a reader that comes later. With a spill directory a kept object\n"
     "may still move to disk; without one, a store full of kept objects refuses creates.\n"},
    {"unkeep", "ID", "let a kept ID go: evictable again once nobody holds it", cmd_keep, NULL},
    {"get", "ID [-o FILE] [--timeout MS] [--fetch] [--meta]", "write ID to FILE or stdout", cmd_get,
     "--meta writes the object's metadata instead of its data.\n"
     "MS: 0 polls (the default), -1 waits on. --fetch pulls ID from another node when it is not\n"
     "local, waiting up to MS (default 60000) for an ID that no node holds yet.\n"},
    {"contains", "ID", "print true (exit 0) if ID is stored (on disk: spilled), else false (1)",
     cmd_contains, "Prints true or false; the exit status says the same (0, 1), for scripts.\n"},
    {"rm", "[--cluster | --unused] ID", "delete ID (--cluster: on every node)", cmd_rm,
     "Deletes this node's copy; --cluster deletes every node's (through the directory).\n"
     "An object a reader still holds goes when the last reader lets go. --unused keeps it\n"
     "visible until then (readers may still take it), and deletes it with the last release.\n"},
    {"ls", "[PREFIX] [--json]", "list the objects (whose name or id starts with PREFIX)", cmd_ls,
     "One line per object: id, data and metadata sizes, state, references, age and the name\n"
     "put kept with it (put NAME, for a NAME that is not 40 hex digits).\n"
     "--json prints one array, for scripts.\n"},
    {"stat", "[--json | --all]", "print the daemon's counters, grouped (--all: every one)",
     cmd_stat,
     "Grouped for people: the release and uptime, the store, clients, and for a node of a\n"
     "cluster its directory, transfers, transports and peers. --all prints every counter as\n"
     "NAME VALUE lines; --json one object with every counter, stable for scripts.\n"},
    {"evict", "BYTES", "evict unused objects until BYTES (64K, 1.5G, 2GiB) freed", cmd_evict,
     "Evicts sealed objects nobody holds, oldest first, and says how many and how much.\n"},
    {"id", "NAME", "print the id NAME stands for", cmd_id,
     "An ID of 40 hex digits is itself; any other NAME stands for its SHA-1.\n"},
    {"hash", "ID", "print the digest (SHA-256 root) of ID's data and metadata", cmd_hash,
     "The digest is XXH3-64 of the data, then the metadata, in 16 hex digits.\n"},
    {"fetch", "ID... [--timeout MS] [--at LOCATION]",
     "make the IDs local, pulling them from other nodes", cmd_fetch,
     "Waits up to MS (default 60000; -1 on, 0 not at all) for an ID that no node holds yet.\n"
     "--at: the location of the node that put them (ferry location there): asked first, the\n"
     "directory only if it does not give them. Prints nothing on success and a line per\n"
     "failed ID.\n"},
    {"location", "", "print this node's location, for fetch --at elsewhere", cmd_location,
     "Its id, transfer addresses and run, signed with the cluster secret when there is one;\n"
     "the same for every object put on this node until it restarts.\n"},
    {"nodes", "[--json]", "list the live nodes (* marks this one)", cmd_nodes,
     "From the cluster's directory: each live node's id, transfer address and transports.\n"},
    {"where", "ID [--json]", "list the live nodes that hold ID", cmd_where,
     "From the cluster's directory; exit status 1 when no live node holds ID.\n"},
    {"wait", "[--timeout MS] [--cluster]", "wait until the daemon answers (for scripts)", cmd_wait,
     "Tries every 50 ms for up to MS (default 30000): exit status 0 once the daemon answers,\n"
     "1 if none did in time. --cluster waits too until this node is registered with the\n"
     "cluster's directory (other nodes can fetch from it); a standalone node fails (status 6).\n"},
    {"eager-max", "[SIZE|auto]", "set the fabric's eager limit (K, M, G); print it", cmd_eager_max,
     "Objects up to SIZE are pulled as messages, larger ones by one-sided reads; auto is the\n"
     "provider's default. A standalone node has none to set (status 6).\n"},
    {"calibrate", "--serve | --from NODE [OPTIONS]", "measure where one-sided reads pay",
     cmd_calibrate,
     "calibrate --serve [--sizes LIST]: puts probe objects (ferry-calibrate/SIZE/I) on this\n"
     "node. calibrate --from NODE [--sizes LIST] [--reps N] [--save FILE] [--apply]\n"
     "[--peer-socket PATH]: pulls them from NODE over the fabric as messages (eager) and by\n"
     "one-sided reads (rendezvous), N times each per size (default " CAL_DEFAULT_SIZES ",\n"
     "5), prints the median MiB/s and the crossover (the smallest size from which rendezvous\n"
     "is at least as fast there and at every larger size), and restores the eager limit,\n"
     "or with --apply sets it to the crossover; --save writes the crossover to FILE (for\n"
     "ferryd --eager-max @FILE); --peer-socket does NODE's --serve through its socket\n"
     "first. Other pulls of this node meanwhile run with the limits calibrate sets. A NODE\n"
     "reached over tcp has nothing to calibrate (status 5).\n"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char exit_statuses[] =
    "Exit status: 0 ok, 1 not found or timed out (where: no node holds ID), 2 usage error,\n"
    "3 no space or too big, 4 daemon or cluster directory unreachable, 5 any other failure\n"
    "(a failed transfer), 6 a cluster command on a standalone node (no --directory).";

static void print_usage(void)
{
    puts("Usage: ferry [--socket PATH] COMMAND [ARGS]\n       ferry help [COMMAND] | --help | "
         "--version\n\nCommands:");
    for (size_t i = 0; i < N_COMMANDS; i++)
        printf("  %-9s %-36s %s\n", commands[i].name, commands[i].args, commands[i].summary);
    puts("\nAn ID of 40 hex digits is the raw id; any other string names the id by its SHA-1.\n"
         "PATH defaults to $FERRY_SOCKET, else " FERRY_SERVICE_SOCKET " if it exists (the\n"
         "system service's), else " FERRY_DEFAULT_SOCKET "; --socket may come before or after\n"
         "the command, and any option as --opt=value.\n"
         "Sizes: 4096, 64K, 1.5G, 2GiB (powers of 1024). ferry help COMMAND tells more.");
    puts(exit_statuses);
}

static void print_command_help(const struct command *c)
{
    printf("Usage: ferry [--socket PATH] %s %s\n\n%c%s.\n", c->name, c->args,
           toupper((unsigned char)c->summary[0]), c->summary + 1);
    if (c->help)
        printf("\n%s", c->help);
    printf("\n%s\n", exit_statuses);
}

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

/* An unknown command, with the nearest known one when it is near. */
static int unknown_command(const char *name)
{
    const char *names[N_COMMANDS + 1];

    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    names[N_COMMANDS] = "help";
    const char *near = cli_nearest(name, names, N_COMMANDS + 1);
    if (near)
        return cli_usage(name, "unknown command (did you mean '%s'? see ferry help)", near);
    return cli_usage(name, "unknown command (see ferry help)");
}

/* help [COMMAND] */
static int cmd_help(struct cli *cli, int argc, char **argv)
{
    struct params p = {.names = {"COMMAND"}, .min = 0};
    int status = cli_parse_args(cli->cmd, argc, argv, NULL, &p);
    if (status != STATUS_OK)
        return status;
    if (!p.value[0]) {
        print_usage();
        return STATUS_OK;
    }
    const struct command *c = find_command(p.value[0]);
    if (!c)
        return unknown_command(p.value[0]);
    print_command_help(c);
    return STATUS_OK;
}

/* Output goes through stdio's buffer, so a failure to write it may show only at the flush.
 * It is reported only when nothing else was, to keep to one line on stderr. */
static int flush_stdout(const struct cli *cli, int status)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return status;
    return status == STATUS_OK ? cli_fail_io(cli, "write", "stdout") : status;
}

/* Takes the global options out of argv wherever they are (before "--"): --socket PATH or
 * --socket=PATH, --help and -h (then *help is set), --version (*version). argv keeps the rest,
 * in order; returns their count, or -1 after reporting a usage error. */
static int take_globals(struct cli *cli, int argc, char **argv, int *help, int *version)
{
    int n = 0, done = 0;

    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        if (!done && strcmp(w, "--") == 0)
            done = 1;
        if (done) {
            argv[n++] = argv[i];
        } else if (strcmp(w, "--socket") == 0) {
            if (++i == argc)
                return cli_usage(NULL, "option --socket needs a value"), -1;
            cli->socket = argv[i];
        } else if (strncmp(w, "--socket=", 9) == 0) {
            cli->socket = w + 9;
        } else if (strcmp(w, "--help") == 0 || strcmp(w, "-h") == 0) {
            *help = 1;
        } else if (strcmp(w, "--version") == 0) {
            *version = 1;
        } else {
            argv[n++] = argv[i];
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    struct cli cli = {.socket = NULL};
    int help = 0, version = 0;
    int n = take_globals(&cli, argc - 1, argv + 1, &help, &version);
    char **args = argv + 1;
    if (n < 0)
        return STATUS_USAGE;
    if (version) {
        printf("ferry %s\n", ferry_version());
        return flush_stdout(&cli, STATUS_OK);
    }
    if (n > 0 && args[0][0] == '-')
        return cli_usage(NULL, "unknown option '%s' (see ferry help)", args[0]);
    if (n == 0 && !help)
        return cli_usage(NULL, "missing COMMAND (see ferry help)");
    if (n == 0 || strcmp(args[0], "help") == 0) {
        cli.cmd = "help";
        int status = help && n == 0 ? (print_usage(), STATUS_OK) : cmd_help(&cli, n - 1, args + 1);
        return flush_stdout(&cli, status);
    }
    const struct command *command = find_command(args[0]);
    if (!command)
        return unknown_command(args[0]);
    cli.cmd = args[0];
    if (help) {
        print_command_help(command);
        return flush_stdout(&cli, STATUS_OK);
    }
    int status = command->run(&cli, n - 1, args + 1);
    ferry_disconnect(cli.client);
    return flush_stdout(&cli, status);
}
