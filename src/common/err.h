/* err.h - the error scheme shared by every module: 0 or a negative enum ferry_error code,
 * plus a per-thread detail message for the last failure (ferry_errmsg()). */
#ifndef FERRY_ERR_H
#define FERRY_ERR_H

#include "ferry.h"

/* The longest detail kept, with its NUL: copy a detail into a buffer this large before calls
 * that may record their own. */
#define ERR_DETAIL_MAX 512

/* Records a printf-style detail for the calling thread and returns err, so that a failure
 * path reads `return err_set(FERRY_ENOSPACE, "need %zu bytes", n);`. */
int err_set(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* err_set(FERRY_ESYS, "what: strerror(errno)"), errno preserved. */
int err_sys(const char *what);

/* Forgets the calling thread's detail. */
void err_clear(void);

/* For clang's static analyzer, which reads one file at a time and so cannot see err.c: the
 * contracts above, that err_set returns err and err_sys FERRY_ESYS. Without them it takes
 * `return err_set(...)` for a success and reports leaks and uninitialized outputs on failure
 * paths that never return 0. Not seen by compilers. */
#if defined(__clang_analyzer__) && !defined(FERRY_ERR_IMPL)
#define err_set(err, ...) (err_set((err), __VA_ARGS__), (err))
#define err_sys(what) (err_sys(what), FERRY_ESYS)
#endif

#endif
