/*
 * loop_driver.h - drives a daemon's event loop from a unit test: runs it until a condition
 * holds or a time runs out, checking every 5 ms. Fails nothing itself: the caller asserts.
 */
#ifndef FERRY_TEST_LOOP_DRIVER_H
#define FERRY_TEST_LOOP_DRIVER_H

#include <stdint.h>

#include "loop/loop.h"

typedef int condition_fn(void *arg);

/* Runs l until cond(arg) holds (1) or ms pass (0). */
int run_until(struct loop *l, condition_fn *cond, void *arg, uint64_t ms);

/* Runs l for ms. */
void run_for(struct loop *l, uint64_t ms);

#endif
