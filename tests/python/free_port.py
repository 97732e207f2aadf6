"""A TCP port on 127.0.0.1 for a test's daemon to listen on: drawn at random from below the
kernel's ephemeral range (or above it), where no outgoing connection takes it between the test
choosing it and the daemon binding it, and checked free by a bind without SO_REUSEADDR. The
same rule as tools/free_port.c; run as a program, it prints one."""

import os
import random
import socket
import time

LOWEST_PORT = 10000
HIGHEST_PORT = 65535
MIN_WINDOW = 1000
TRIES = 200


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(v) for v in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def binds(port):
    """The port bound on 127.0.0.1 (port 0: any), or None."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return None
        return s.getsockname()[1]


def free_port():
    lo, hi = ephemeral_range()
    if lo - LOWEST_PORT >= MIN_WINDOW:
        window = range(LOWEST_PORT, lo)
    elif HIGHEST_PORT - hi >= MIN_WINDOW:
        window = range(hi + 1, HIGHEST_PORT + 1)
    else:
        port = binds(0)  # the range covers everything: the kernel's pick
        if port is None:
            raise OSError("no free TCP port on 127.0.0.1")
        return port
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(TRIES):
        port = binds(rng.choice(window))
        if port:
            return port
    raise OSError("no free TCP port on 127.0.0.1 below the ephemeral range")


if __name__ == "__main__":
    print(free_port())
