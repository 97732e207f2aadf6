/*
 * default_socket.h - the socket a client connects to when it names none: one rule for
 * libferry (ferry_connect(NULL), and so the ferry tool), ferry-bench mpi's socket template and
 * the Python module's Client() (which compiles libferry's sources in, but has names of its own
 * that client.h's would clash with). Defined in client.c.
 */
#ifndef FERRY_DEFAULT_SOCKET_H
#define FERRY_DEFAULT_SOCKET_H

/* The socket of a client that names none (ferry_connect(NULL), the ferry tool, the Python
 * module's Client()): $FERRY_SOCKET if it is set and not empty, else service_path if its
 * directory is there (the service ran on this host: it keeps the directory, so a client never
 * turns to /tmp while the service restarts), or if it cannot be told (EACCES), else
 * FERRY_DEFAULT_SOCKET (a daemon a user started; ferry_connect trusts the daemon there only
 * when it runs as this user or root, unless $FERRY_SOCKET names it).
 * service_path may be NULL (none). Returns the environment's string, service_path or the
 * constant: never NULL, valid while they are. */
const char *client_default_socket_at(const char *service_path);
/* 0 when the daemon connected on fd at path may be used: any named one, but one at
 * default_path (FERRY_DEFAULT_SOCKET, in /tmp, which any user can bind first) reached without
 * $FERRY_SOCKET naming it only when it runs as this user or root; else FERRY_ECONN saying so. */
int client_peer_trusted(int fd, const char *path, const char *default_path);
/* client_default_socket_at(FERRY_SERVICE_SOCKET): the rule ferry.h states. */
const char *client_default_socket(void);

#endif
