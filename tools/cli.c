/* cli.c - the ferry command line's shared parts: failure reports, argument parsing, connecting
 * (cli.h). */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/size.h"
#include "common/text.h"

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

int cli_exit_status(int err)
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
    case FERRY_ESTANDALONE:
        return STATUS_STANDALONE;
    default:
        return STATUS_FAILED;
    }
}

/* Reports err with a detail of this tool's own and returns the exit status for err. */
int cli_report(const struct cli *cli, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cli->cmd, err, fmt, ap);
    va_end(ap);
    return cli_exit_status(err);
}

/* Reports a failed ferry_ call, whose detail is ferry_errmsg(). */
int cli_fail(const struct cli *cli, int err)
{
    return cli_report(cli, err, "%s", ferry_errmsg());
}

/* Reports a failed system call on a file, from errno. */
int cli_fail_io(const struct cli *cli, const char *what, const char *name)
{
    return cli_report(cli, FERRY_ESYS, "%s %s: %s", what, name, strerror(errno));
}

/* Reports a bad command line; always STATUS_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, FERRY_EINVAL, fmt, ap);
    va_end(ap);
    return STATUS_USAGE;
}

/* The edit distance of a and b (insertions, deletions, substitutions, swaps of neighbours),
 * for words of up to 31 characters; 99 beyond. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int d[32][32];

    if (la > 31 || lb > 31)
        return 99;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            int v = sub < del ? sub : del;
            v = v < ins ? v : ins;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[la][lb];
}

const char *cli_nearest(const char *word, const char *const *names, size_t n)
{
    const char *best = NULL;
    int best_d = 3; /* at most 2 edits, and fewer than a third of the word */

    for (size_t i = 0; i < n; i++) {
        int d = distance(word, names[i]);
        if (d < best_d && (size_t)d * 3 < strlen(names[i]) + 1) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

static const struct opt *find_opt(const struct opt *opts, const char *word, size_t len)
{
    for (; opts && opts->name; opts++) {
        if (strlen(opts->name) == len && strncmp(opts->name, word, len) == 0)
            return opts;
    }
    return NULL;
}

static int unknown_opt(const char *cmd, const struct opt *opts, const char *word, size_t len)
{
    const char *names[16];
    char name[64];
    size_t n = 0;

    snprintf(name, sizeof(name), "%.*s", (int)len, word);
    for (; opts && opts->name && n < 16; opts++)
        names[n++] = opts->name;
    const char *near = cli_nearest(name, names, n);
    if (near)
        return cli_usage(cmd, "unknown option '%s' (did you mean %s?)", name, near);
    return cli_usage(cmd, "unknown option '%s' (see ferry help %s)", name, cmd ? cmd : "");
}

/* Sorts argv into opts (may be NULL) and p. "-" alone is a positional argument, and so is
 * every word after "--". Returns STATUS_OK, or STATUS_USAGE after reporting the problem. */
int cli_parse_args(const char *cmd, int argc, char **argv, const struct opt *opts, struct params *p)
{
    int max = 0, n = 0, options_done = 0;
    while (max < MAX_PARAMS && p->names[max])
        max++;
    for (int i = 0; i < argc; i++) {
        const char *word = argv[i];
        if (!options_done && strcmp(word, "--") == 0) {
            options_done = 1;
        } else if (!options_done && word[0] == '-' && word[1] != '\0') {
            const char *eq = word[1] == '-' ? strchr(word, '=') : NULL; /* --opt=value */
            size_t len = eq ? (size_t)(eq - word) : strlen(word);
            const struct opt *o = find_opt(opts, word, len);
            if (!o)
                return unknown_opt(cmd, opts, word, len);
            if (o->flag && eq)
                return cli_usage(cmd, "option %s takes no value", o->name);
            if (o->flag)
                *o->flag = 1;
            else if (eq)
                *o->value = eq + 1;
            else if (++i < argc)
                *o->value = argv[i];
            else
                return cli_usage(cmd, "option %s needs a value", word);
        } else if (n < max) {
            p->value[n++] = word;
        } else if (p->rest) {
            p->rest[p->n_rest++] = word;
        } else {
            return cli_usage(cmd, "unexpected argument '%s'", word);
        }
    }
    if (n < p->min)
        return cli_usage(cmd, "missing %s", p->names[n]);
    return STATUS_OK;
}

/* Parses a decimal integer of at least min; anything else is a usage error. */
int cli_parse_int(const struct cli *cli, const char *what, const char *text, int64_t min,
                  int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < min)
        return cli_usage(cli->cmd, "bad %s '%s'", what, text);
    *out = v;
    return STATUS_OK;
}

/* Parses a byte count as size_parse does (4096, 64K, 1.5G, 2GiB: binary multiples). */
int cli_parse_size(const struct cli *cli, const char *text, uint64_t *out)
{
    return size_parse(text, out) < 0 ? cli_usage(cli->cmd, "%s", ferry_errmsg()) : STATUS_OK;
}

/* Connects to the daemon, after parsing id_text into *id unless id_text is NULL: a command
 * line error is found before the daemon is asked anything. A daemon that does not answer is
 * STATUS_UNREACHABLE, set apart from the failures of operations. */
int cli_open(struct cli *cli, const char *id_text, ferry_id *id)
{
    if (id_text && ferry_id_parse(id_text, id) != FERRY_OK)
        return cli_usage(cli->cmd, "%s", ferry_errmsg());
    int err = ferry_connect(cli->socket, &cli->client);
    if (err == FERRY_OK)
        return STATUS_OK;
    cli->client = NULL;
    int status = cli_fail(cli, err);
    return err == FERRY_ECONN ? STATUS_UNREACHABLE : status;
}

/* parse_args(), then cli_open() with the first positional argument as the id when id is not
 * NULL: the start of every subcommand without numbers to parse. */
int cli_start(struct cli *cli, int argc, char **argv, const struct opt *opts, struct params *p,
              ferry_id *id)
{
    int status = cli_parse_args(cli->cmd, argc, argv, opts, p);
    return status != STATUS_OK ? status : cli_open(cli, id ? p->value[0] : NULL, id);
}

/* cli_start() for the listing commands, whose one option is --json (into *json): with id, they
 * take one argument, an ID; without, none. */
int cli_start_json(struct cli *cli, int argc, char **argv, ferry_id *id, int *json)
{
    const struct opt opts[] = {{"--json", NULL, json}, {NULL, NULL, NULL}};
    struct params p = {.names = {id ? "ID" : NULL}, .min = id ? 1 : 0};
    return cli_start(cli, argc, argv, opts, &p, id);
}

/* s of at most CLI_JSON_TEXT_MAX bytes (a longer one is cut at a whole character). */
void cli_json_string(const char *s)
{
    char buf[TEXT_JSON_MAX(CLI_JSON_TEXT_MAX)];

    printf("\"%s\"", text_json(s, buf, sizeof(buf)));
}
