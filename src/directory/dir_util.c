/*
 * dir_util.c - the small tools every file of the directory shares: growing arrays, arming
 * timers, and the turn (the 0 ms timer that runs the deferred work). It calls no other file
 * of the unit.
 */
#include "directory/directory_int.h"

/* Doubles an array's capacity (*cap elements of elem bytes). NULL, the array unchanged, when
 * out of memory. */
void *dir_grow(void *array, size_t *cap, size_t elem)
{
    size_t n = *cap ? *cap * 2 : 8;
    void *p = realloc(array, n * elem);

    if (p)
        *cap = n;
    return p;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

int dir_percent_decode(const char *s, const char *end, char *out, size_t cap)
{
    size_t n = 0;

    for (; s < end; s++) {
        int c = (unsigned char)*s;
        if (c == '%') {
            int hi = end - s >= 3 ? hex_digit(s[1]) : -1;
            int lo = hi >= 0 ? hex_digit(s[2]) : -1;
            if (lo < 0 || (c = hi << 4 | lo) == 0)
                return -1;
            s += 2;
        }
        if (n + 1 >= cap)
            return -1;
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return 0;
}

/* Arms t; a timer heap that cannot grow (the process is out of memory) is logged. */
void dir_arm(struct directory *d, struct loop_timer *t, uint64_t deadline_ms)
{
    if (loop_timer_start(d->loop, t, deadline_ms) < 0)
        log_error("directory: %s", ferry_errmsg());
}

/* Has the turn timer run the deferred work (hook, publications, answers) as soon as it can. */
void dir_turn_soon(struct directory *d)
{
    dir_turn_by(d, loop_now_ms());
}

void dir_turn_by(struct directory *d, uint64_t deadline_ms)
{
    if (!loop_timer_armed(&d->turn) || d->turn.deadline_ms > deadline_ms)
        dir_arm(d, &d->turn, deadline_ms);
}
