/*
 * cli.h - what the files of the ferry command line share: exit statuses, the subcommand's
 * context, argument parsing and the one-line failure reports (cli.c), and the subcommands that
 * live in files of their own (calibrate.c).
 */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

#include <stdint.h>

#include "ferry.h"

/* Exit statuses: part of the tool's interface. */
enum status {
    STATUS_OK = 0,
    STATUS_MISSING = 1,     /* FERRY_ENOENT, FERRY_ETIMEDOUT */
    STATUS_USAGE = 2,       /* bad command line */
    STATUS_NOSPACE = 3,     /* FERRY_ENOSPACE, FERRY_ETOOBIG */
    STATUS_UNREACHABLE = 4, /* FERRY_ECONN from ferry_connect(), FERRY_EDIRECTORY */
    STATUS_FAILED = 5,      /* anything else (FERRY_ETRANSFER, FERRY_EAUTH, ...) */
    STATUS_STANDALONE = 6,  /* FERRY_ESTANDALONE: a cluster command on a standalone node */
};

/* Most named positional arguments a subcommand takes (a list of ids goes to params.rest). */
#define MAX_PARAMS 2

/* What a subcommand works with. */
struct cli {
    const char *socket;   /* NULL: the library's default (ferry_connect, FERRY_SERVICE_SOCKET) */
    const char *cmd;      /* subcommand name, for messages */
    ferry_client *client; /* set by cli_open(); NULL before */
};

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

/* The exit status of a failure with code err (enum status). */
int cli_exit_status(int err);
/* Reports err with a detail of this tool's own and returns the exit status for err. */
int cli_report(const struct cli *cli, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Reports a failed ferry_ call, whose detail is ferry_errmsg(). */
int cli_fail(const struct cli *cli, int err);
/* Reports a failed system call on a file, from errno. */
int cli_fail_io(const struct cli *cli, const char *what, const char *name);
/* Reports a bad command line; always STATUS_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sorts argv into opts (may be NULL) and p. "-" alone is a positional argument, and so is
 * every word after "--". Returns STATUS_OK, or STATUS_USAGE after reporting the problem. */
int cli_parse_args(const char *cmd, int argc, char **argv, const struct opt *opts,
                   struct params *p);
/* A whole number of at least min; STATUS_USAGE (reported, naming what) otherwise. */
int cli_parse_int(const struct cli *cli, const char *what, const char *text, int64_t min,
                  int64_t *out);
/* A byte count: digits, then optionally K, M or G (binary multiples); STATUS_USAGE otherwise. */
int cli_parse_size(const struct cli *cli, const char *text, uint64_t *out);
/* Connects to the daemon, after parsing id_text into *id unless id_text is NULL. */
int cli_open(struct cli *cli, const char *id_text, ferry_id *id);
/* cli_parse_args(), then cli_open() with the first positional argument as the id when id is
 * not NULL. */
int cli_start(struct cli *cli, int argc, char **argv, const struct opt *opts, struct params *p,
              ferry_id *id);
/* cli_start() for the listing commands, whose one option is --json. */
int cli_start_json(struct cli *cli, int argc, char **argv, ferry_id *id, int *json);

/* calibrate.c: where one-sided reads start to beat messages on this node's fabric; the
 * defaults are in the usage text too. */
#define CAL_DEFAULT_SIZES "4K,16K,64K,256K,1M,4M,16M"
#define CAL_DEFAULT_REPS 5
int cmd_calibrate(struct cli *cli, int argc, char **argv);
/* stat [--json | --all] (stat.c). */
int cmd_stat(struct cli *cli, int argc, char **argv);

/* The name in names[0..n) nearest to word, when it is a likely misspelling of it; or NULL. */
const char *cli_nearest(const char *word, const char *const *names, size_t n);

/* The longest text cli_json_string writes whole: an object's name (node ids, addresses and
 * the peers' fields are shorter). */
#define CLI_JSON_TEXT_MAX FERRY_NAME_MAX
/* Writes s as a JSON string: quoted, escaped as text_json (common/text.h) says, so that no
 * control, C1 or bidi character and no invalid UTF-8 reaches the output raw. */
void cli_json_string(const char *s);

#endif
