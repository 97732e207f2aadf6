/* err.h's analyzer contracts do not apply here: this file defines the functions. */
#define FERRY_ERR_IMPL
#include "common/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_detail[ERR_DETAIL_MAX];

static const char *const err_names[] = {
    [0] = "success",
    [-FERRY_EINVAL] = "invalid argument",
    [-FERRY_ENOENT] = "no such object",
    [-FERRY_EEXIST] = "object exists already",
    [-FERRY_ETOOBIG] = "object larger than the arena",
    [-FERRY_ENOSPACE] = "no space in the arena, even after eviction",
    [-FERRY_EPERM] = "only the creator may do this",
    [-FERRY_ETIMEDOUT] = "timed out",
    [-FERRY_ENOTSEALED] = "object not sealed",
    [-FERRY_ECONN] = "daemon unreachable or connection lost",
    [-FERRY_EPROTO] = "protocol error",
    [-FERRY_ENOMEM] = "out of memory",
    [-FERRY_ESYS] = "system call failed",
    [-FERRY_ENOSYS] = "operation not supported",
    [-FERRY_EBUSY] = "resource busy",
    [-FERRY_EDIRECTORY] = "directory unavailable",
    [-FERRY_ETRANSFER] = "transfer failed from every holder",
    [-FERRY_EAUTH] = "peer authentication failed",
    [-FERRY_EAGAIN] = "nothing there now, try again",
    [-FERRY_ESTANDALONE] = "standalone node (started without --directory)",
    [-FERRY_EIO] = "the object's bytes on disk are unreadable or damaged",
};

const char *ferry_strerror(int err)
{
    if (err > 0 || err < FERRY_ERROR_MIN)
        return "unknown error";
    return err_names[-err];
}

const char *ferry_errmsg(void)
{
    return err_detail;
}

int err_set(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* ap is started (va_start); clang 14 misreads that on x86-64: LLVM issue 40656. */
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
    vsnprintf(err_detail, sizeof(err_detail), fmt, ap);
    va_end(ap);
    return err;
}

int err_sys(const char *what)
{
    int saved = errno;
    err_set(FERRY_ESYS, "%s: %s", what, strerror(saved));
    errno = saved;
    return FERRY_ESYS;
}

void err_clear(void)
{
    err_detail[0] = '\0';
}
