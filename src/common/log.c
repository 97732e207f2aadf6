#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static enum log_level log_level_min = LOG_INFO;
static const char *log_name = "ferry";

void log_set_level(enum log_level level)
{
    log_level_min = level;
}

void log_set_name(const char *name)
{
    log_name = name;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    static const char tags[] = "DIWE";
    char msg[1024], stamp[32];
    struct timespec ts;
    struct tm tm;
    va_list ap;

    if (level < log_level_min)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One fprintf per record so that concurrent writers do not interleave within a line. */
    fprintf(stderr, "%s %s.%03ldZ %c %s\n", log_name, stamp, ts.tv_nsec / 1000000, tags[level],
            msg);
}
