/*
 * notify.h - readiness for a service manager (systemd's sd_notify protocol, without
 * libsystemd): one datagram to the socket named by $NOTIFY_SOCKET, when it is set.
 */
#ifndef FERRY_NOTIFY_H
#define FERRY_NOTIFY_H

#include <stdint.h>

/* Sends state ("READY=1", "STOPPING=1", ...) to $NOTIFY_SOCKET; nothing when it is unset.
 * 0, or a negative FERRY_E* code (logged by the caller: a manager that cannot be told must not
 * stop the daemon). */
int notify_send(const char *state);

/* Long work while stopping (persisting at exit) asks the manager for more time than its
 * TimeoutStopSec= as long as it makes progress: EXTEND_TIMEOUT_USEC=NOTIFY_EXTEND_USEC
 * (systemd 236 and later; older ones ignore it), which gives NOTIFY_EXTEND_USEC from when it
 * arrives; sent at most once per NOTIFY_EXTEND_EVERY_NS. Each step of the work must so end
 * within NOTIFY_EXTEND_USEC - NOTIFY_EXTEND_EVERY_NS of the last sent: a daemon whose work
 * stopped moving is killed that long after its last step, or at TimeoutStopSec=, whichever is
 * later. */
#define NOTIFY_EXTEND_USEC 30000000ull
#define NOTIFY_EXTEND_EVERY_NS 1000000000ull

struct notify_extender {
    int sent;         /* one was sent */
    uint64_t last_ns; /* when (CLOCK_MONOTONIC) */
};

/* A step of the work ended at now_ns (CLOCK_MONOTONIC); status is a line for the manager's
 * STATUS= (`systemctl status` shows it). EXTEND_TIMEOUT_USEC and status go in one datagram
 * when it is the first, or NOTIFY_EXTEND_EVERY_NS have passed since the last sent, or final
 * is set (the work's last step: what follows, such as syncing files and tearing down, gets a
 * full extension). 1 when it was due (and sent, if $NOTIFY_SOCKET is set), 0 when not, or a
 * negative FERRY_E* code when it could not be sent. */
int notify_extend(struct notify_extender *e, uint64_t now_ns, int final, const char *status);

#endif
