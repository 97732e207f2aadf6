/*
 * timeout.h - the timeout_ms arguments: parsing (None or -1: no end; 0: do not wait; a
 * positive int: milliseconds) and the deadline a wait keeps to while it is cut into slices.
 */
#ifndef PYF_TIMEOUT_H
#define PYF_TIMEOUT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

struct pyf_deadline {
    int64_t timeout_ms; /* as given: -1 without end */
    uint64_t end_ns;    /* CLOCK_MONOTONIC, when timeout_ms >= 0 */
};

/* Starts a deadline timeout_ms (>= -1) from now. */
void pyf_deadline_start(struct pyf_deadline *d, int64_t timeout_ms);

/* Parses a timeout_ms argument (o NULL: dflt; None: -1; an int from -1 to a year) into *ms: 0,
 * or -1 with TypeError or ValueError. */
int pyf_timeout_from_object(PyObject *o, int64_t dflt, int64_t *ms);

/* The same, and starts its deadline. */
int pyf_deadline_from_object(PyObject *o, int64_t dflt, struct pyf_deadline *d);

/* 1 once a deadline with an end has passed. */
int pyf_deadline_passed(const struct pyf_deadline *d);

/* What is left, rounded up, at most slice_ms: for a libferry wait, which a signal does not
 * cut short, so that a caller checks for signals at least every slice_ms. */
int64_t pyf_deadline_slice_ms(const struct pyf_deadline *d, int64_t slice_ms);

/* What is left for poll(): -1 without end (poll returns early for a signal). */
int pyf_deadline_poll_ms(const struct pyf_deadline *d);

#endif
