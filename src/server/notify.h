/*
 * notify.h - readiness for a service manager (systemd's sd_notify protocol, without
 * libsystemd): one datagram to the socket named by $NOTIFY_SOCKET, when it is set.
 */
#ifndef FERRY_NOTIFY_H
#define FERRY_NOTIFY_H

/* Sends state ("READY=1", "STOPPING=1", ...) to $NOTIFY_SOCKET; nothing when it is unset.
 * 0, or a negative FERRY_E* code (logged by the caller: a manager that cannot be told must not
 * stop the daemon). */
int notify_send(const char *state);

#endif
