/*
 * cpuload.h - whether polling can pay: a thread that polls instead of sleeping only helps
 * while the machine has a CPU for every runnable task. When it has not, the poller takes
 * the CPU from the very thread it waits for, and each request then waits for a scheduler
 * tick (milliseconds). Thread-safe; cheap (a cached reading of /proc/loadavg).
 */
#ifndef FERRY_CPULOAD_H
#define FERRY_CPULOAD_H

/* 1 when runnable tasks (the caller included) do not outnumber the online CPUs, as read at
 * most every 10 ms; 0 otherwise, or when the figure cannot be read. */
int cpuload_can_poll(void);

#endif
