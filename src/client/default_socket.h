/*
 * default_socket.h - the socket a client connects to when it names none: one rule for
 * libferry (ferry_connect(NULL), and so the ferry tool), ferry-bench mpi's socket template and
 * the Python module's Client() (which compiles libferry's sources in, but has names of its own
 * that client.h's would clash with). Defined in client.c.
 */
#ifndef FERRY_DEFAULT_SOCKET_H
#define FERRY_DEFAULT_SOCKET_H

/* The socket of a client that names none (ferry_connect(NULL), the ferry tool, the Python
 * module's Client()): $FERRY_SOCKET if it is set and not empty, else service_path if anything
 * is there, or if it cannot be told (stat fails with EACCES: a directory this user may not
 * search, whose connect then says so), else FERRY_DEFAULT_SOCKET (a daemon a user started).
 * service_path may be NULL (none). Returns the environment's string, service_path or the
 * constant: never NULL, valid while they are. */
const char *client_default_socket_at(const char *service_path);
/* client_default_socket_at(FERRY_SERVICE_SOCKET): the rule ferry.h states. */
const char *client_default_socket(void);

#endif
