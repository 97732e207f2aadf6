/* timeout.c - timeout_ms arguments and deadlines. */
#include "timeout.h"

#include <limits.h>

#include "common/clock.h"

void pyf_deadline_start(struct pyf_deadline *d, int64_t timeout_ms)
{
    d->timeout_ms = timeout_ms;
    d->end_ns = timeout_ms < 0 ? 0 : clock_mono_ns() + (uint64_t)timeout_ms * 1000000u;
}

int pyf_timeout_from_object(PyObject *o, int64_t dflt, int64_t *out)
{
    long long ms = dflt;

    if (o && o != Py_None) {
        if (!PyLong_Check(o)) {
            PyErr_Format(PyExc_TypeError, "timeout_ms must be an int or None, not %.100s",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        ms = PyLong_AsLongLong(o);
        if (ms == -1 && PyErr_Occurred())
            return -1;
        /* A year is more than any wait needs and keeps the arithmetic far from overflow. */
        if (ms < -1 || ms > 365LL * 24 * 3600 * 1000) {
            PyErr_Format(PyExc_ValueError,
                         "timeout_ms must be -1 (no end), 0 (do not wait) or a positive number "
                         "of milliseconds up to a year, not %lld",
                         ms);
            return -1;
        }
    } else if (o == Py_None) {
        ms = -1;
    }
    *out = ms;
    return 0;
}

int pyf_deadline_from_object(PyObject *o, int64_t dflt, struct pyf_deadline *d)
{
    int64_t ms;

    if (pyf_timeout_from_object(o, dflt, &ms) < 0)
        return -1;
    pyf_deadline_start(d, ms);
    return 0;
}

int pyf_deadline_passed(const struct pyf_deadline *d)
{
    return d->timeout_ms >= 0 && clock_mono_ns() >= d->end_ns;
}

static int64_t left_ms(const struct pyf_deadline *d)
{
    uint64_t now = clock_mono_ns();
    return now >= d->end_ns ? 0 : (int64_t)((d->end_ns - now + 999999u) / 1000000u);
}

int64_t pyf_deadline_slice_ms(const struct pyf_deadline *d, int64_t slice_ms)
{
    int64_t left;

    if (d->timeout_ms < 0)
        return slice_ms;
    left = left_ms(d);
    return left < slice_ms ? left : slice_ms;
}

int pyf_deadline_poll_ms(const struct pyf_deadline *d)
{
    int64_t left;

    if (d->timeout_ms < 0)
        return -1;
    left = left_ms(d);
    return left > INT_MAX ? INT_MAX : (int)left;
}
