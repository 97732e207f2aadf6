"""A TCP port on 127.0.0.1 for a test's daemon to listen on: drawn at random from below the
kernel's ephemeral range (or above it), where no outgoing connection takes it between the test
choosing it and the daemon binding it, and checked free by a bind without SO_REUSEADDR, and
reserved for RESERVE_S seconds in the registry that every picker shares, so that two tests
running at once never draw the same one. The same rule as tools/free_port.c (whose header says
why), on the same registry; run as a program, it prints one."""

import contextlib
import fcntl
import os
import random
import socket
import time

LOWEST_PORT = 10000
HIGHEST_PORT = 65535
MIN_WINDOW = 1000
TRIES = 200
RESERVE_S = 120


@contextlib.contextmanager
def registry():
    """The registry's directory, its lock held; None where it cannot be used."""
    try:
        path = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"ferry-ports-{os.getuid()}")
        os.makedirs(path, mode=0o700, exist_ok=True)
        lock = os.open(os.path.join(path, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield None
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path
    finally:
        os.close(lock)


def reserved_else_reserve(path, port):
    """True if a pick reserved port in the last RESERVE_S seconds; else reserves it."""
    entry = os.path.join(path, str(port))
    try:
        if time.time() - os.stat(entry).st_mtime < RESERVE_S:
            return True
    except OSError:
        pass
    try:
        with open(entry, "a"):
            pass
        os.utime(entry)
    except OSError:
        pass
    return False


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
    with registry() as path:
        for _ in range(TRIES):
            port = rng.choice(window)
            if path and reserved_else_reserve(path, port):
                continue
            if binds(port):
                return port
    raise OSError("no free TCP port on 127.0.0.1 below the ephemeral range")


if __name__ == "__main__":
    print(free_port())
