/* ferryd - the ferry daemon of one node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "server/options.h"
#include "server/server.h"

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

/* The options, then the checks that take several of them together. */
static int parse_args(int argc, char **argv, struct server_config *cfg)
{
    struct ferryd_args a = {.cfg = cfg};
    int rc = options_parse(argc, argv, &a);

    if (rc == 0 && !cfg->verify)
        cfg->relay_unchecked = 1; /* --no-verify: nothing fetched is checked */
    if (rc == 0 && a.password_file && cfg->directory_password)
        rc = err_set(FERRY_EINVAL, "--directory-password-file and %s: give one", PASSWORD_ENV);
    else if (rc == 0 && a.password_file)
        rc = read_password_file(a.password_file, &cfg->directory_password);
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
