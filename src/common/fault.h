/*
 * fault.h - the test hooks of FERRY_FAULT ("name" or "name=N", comma-separated), read once
 * where each is used. Never set in production; whoever reads a hook that is on logs it.
 */
#ifndef FERRY_FAULT_H
#define FERRY_FAULT_H

/* Whether the hook name is in FERRY_FAULT. */
int fault_on(const char *name);
/* N of "name=N" in FERRY_FAULT when it lies in [1, max]; 0 when absent or out of that range
 * (logged). */
unsigned fault_value(const char *name, unsigned max);

#endif
