/*
 * options.h - ferryd's options, from one table: getopt's list, --help, the OPTIONS section of
 * ferryd(8) and the list in ferryd.conf are all made from it (the build writes the last two
 * with `ferryd --print-options man|conf`), and cli_options checks that every option is in
 * each.
 */
#ifndef FERRY_OPTIONS_H
#define FERRY_OPTIONS_H

#include <stdio.h>

#include "server/server.h"

/* The environment variable that may hold the directory's password (ferryd.conf can set it for
 * the systemd unit). */
#define PASSWORD_ENV "FERRY_DIRECTORY_PASSWORD"

/* What the options say, before the checks that take several of them together. */
struct ferryd_args {
    struct server_config *cfg;
    const char *password_file; /* --directory-password-file, read after the parse */
};

/* Sets the defaults in a->cfg, then the options of argv. 0, or FERRY_EINVAL with why; --help,
 * --version and --print-options print and exit(0). */
int options_parse(int argc, char **argv, struct ferryd_args *a);

/* --help. */
void options_usage(FILE *f);

#endif
