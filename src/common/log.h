/* log.h - one-line log records on stderr: "ferryd 2026-11-21T10:00:00.123Z W message", or one
 * JSON object per line for log collectors ({"time", "program", "level", "msg"}). */
#ifndef FERRY_LOG_H
#define FERRY_LOG_H

#include <stddef.h>
#include <stdint.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };
enum log_format { LOG_TEXT = 0, LOG_JSON = 1 };

/* Records below level are dropped; the default is LOG_INFO. */
void log_set_level(enum log_level level);
/* Whether records of level are written (to skip preparing what would be dropped). */
int log_enabled(enum log_level level);
void log_set_name(const char *name);
void log_set_format(enum log_format format);
void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records of one kind that may come by the thousand (one per request): at most
 * LOG_LIMIT_PER_SECOND each second; how many were left out is said before the next record of
 * a later second. One per kind, zeroed; the loop's thread only. */
#define LOG_LIMIT_PER_SECOND 50
struct log_limit {
    uint64_t second;
    unsigned count, suppressed;
};
void log_limited(struct log_limit *lim, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif
