#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static enum log_level log_level_min = LOG_INFO;
static const char *log_name = "ferry";
static enum log_format log_fmt = LOG_TEXT;

void log_set_level(enum log_level level)
{
    log_level_min = level;
}

int log_enabled(enum log_level level)
{
    return level >= log_level_min;
}

void log_set_name(const char *name)
{
    log_name = name;
}

void log_set_format(enum log_format format)
{
    log_fmt = format;
}

/* msg as a JSON string's content: quotes, backslashes and control characters escaped. */
static void json_escape(const char *msg, char *out, size_t len)
{
    size_t o = 0;

    for (; *msg && o + 7 < len; msg++) {
        unsigned char c = (unsigned char)*msg;
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, len - o, "\\%c", c);
        else if (c < 0x20)
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = '\0';
}

static void vlog(enum log_level level, const char *fmt, va_list ap)
{
    static const char tags[] = "DIWE";
    static const char *const names[] = {"debug", "info", "warn", "error"};
    char msg[1024], esc[6 * 1024 + 8], stamp[32];
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    /* The caller started ap (va_start); clang 14 misreads that on x86-64: LLVM issue 40656. */
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
    vsnprintf(msg, sizeof(msg), fmt, ap);
    /* One fprintf per record so that concurrent writers do not interleave within a line. */
    if (log_fmt == LOG_JSON) {
        json_escape(msg, esc, sizeof(esc));
        fprintf(stderr,
                "{\"time\":\"%s.%03ldZ\",\"program\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n",
                stamp, ts.tv_nsec / 1000000, log_name, names[level], esc);
    } else {
        fprintf(stderr, "%s %s.%03ldZ %c %s\n", log_name, stamp, ts.tv_nsec / 1000000, tags[level],
                msg);
    }
}

void log_write(enum log_level level, const char *fmt, ...)
{
    va_list ap;

    if (level < log_level_min)
        return;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void log_limited(struct log_limit *lim, enum log_level level, const char *fmt, ...)
{
    struct timespec ts;
    va_list ap;

    if (level < log_level_min)
        return;
    clock_gettime(CLOCK_REALTIME, &ts); /* the records' clock: their seconds hold at most so many */
    if ((uint64_t)ts.tv_sec != lim->second) {
        if (lim->suppressed)
            log_write(level, "(%u more records like the next were left out in the last second)",
                      lim->suppressed);
        lim->second = (uint64_t)ts.tv_sec;
        lim->count = lim->suppressed = 0;
    }
    if (lim->count >= LOG_LIMIT_PER_SECOND) {
        lim->suppressed++;
        return;
    }
    lim->count++;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}
