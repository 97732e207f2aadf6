/*
 * free_port.h - a TCP port on 127.0.0.1 for a daemon that a test or ferry-bench starts.
 *
 * A port the kernel hands out for bind(port 0) lies in the ephemeral range, the same range it
 * draws the local ports of outgoing connections from: between the test releasing it and the
 * daemon binding it, any connect() on the machine may take it ("Address already in use").
 * These ports are drawn at random from below that range (or above it), where no connect()
 * lands, and checked free by a bind without SO_REUSEADDR, which a TIME_WAIT also refuses.
 *
 * Tests run in parallel, and two of them may draw the same free port within the moment before
 * either daemon binds it (seen: "listen on 127.0.0.1:11038: Address already in use" under
 * ctest -j6). So every port handed out is also reserved for RESERVE_S seconds in a registry
 * that all pickers share: a file per port under $TMPDIR/ferry-ports-<uid>/, its mtime the
 * time of the reservation, checked and renewed under an flock of the directory's .lock.
 * The directory must be the caller's own, mode 0700, not a link, and nothing in it is followed
 * (a directory another user made first is not used); a lock held for more than a second is
 * not waited for. Where the registry cannot be used the pick goes on without it. It holds at
 * most one empty file per port of the window.
 * tests/python/free_port.py is the same rule, on the same registry, for the shell and Python.
 */
#ifndef FERRY_TOOLS_FREE_PORT_H
#define FERRY_TOOLS_FREE_PORT_H

/* A port that was free a moment ago and that no picker handed out in the last RESERVE_S
 * seconds, or -1 with errno. */
int free_port_pick(void);

#endif
