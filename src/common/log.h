/* log.h - one-line log records on stderr: "ferryd 2026-11-21T10:00:00.123Z W message". */
#ifndef FERRY_LOG_H
#define FERRY_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

/* Records below level are dropped; the default is LOG_INFO. */
void log_set_level(enum log_level level);
void log_set_name(const char *name);
void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif
