/*
 * free_port.h - a TCP port on 127.0.0.1 for a daemon that a test or ferry-bench starts.
 *
 * A port the kernel hands out for bind(port 0) lies in the ephemeral range, the same range it
 * draws the local ports of outgoing connections from: between the test releasing it and the
 * daemon binding it, any connect() on the machine may take it ("Address already in use").
 * These ports are drawn at random from below that range (or above it), where no connect()
 * lands, and checked free by a bind without SO_REUSEADDR, which a TIME_WAIT also refuses.
 * tests/python/free_port.py is the same rule for the shell and Python tests.
 */
#ifndef FERRY_TOOLS_FREE_PORT_H
#define FERRY_TOOLS_FREE_PORT_H

/* A port that was free a moment ago, or -1 with errno. */
int free_port_pick(void);

#endif
