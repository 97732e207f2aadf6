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
LOCK_TRIES = 500  # of 2 ms


@contextlib.contextmanager
def registry():
    """The registry's directory fd, its lock held; None where it cannot be used: not ours
    alone (another user's, a link, open to others), or its lock held for over a second."""
    dirfd = lock = None
    try:
        path = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"ferry-ports-{os.getuid()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        dirfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        st = os.fstat(dirfd)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise OSError("the port registry is not ours alone")
        lock = os.open(".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=dirfd)
        for _ in range(LOCK_TRIES):
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.002)
        else:
            raise OSError("the port registry's lock is held")
    except OSError:
        for fd in (lock, dirfd):
            if fd is not None:
                os.close(fd)
        yield None
        return
    try:
        yield dirfd
    finally:
        os.close(lock)
        os.close(dirfd)


def reserved_else_reserve(dirfd, port):
    """True if a pick reserved port in the last RESERVE_S seconds; else reserves it."""
    name = str(port)
    try:
        if time.time() - os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mtime < RESERVE_S:
            return True
    except OSError:
        pass
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=dirfd)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
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
            if path is not None and reserved_else_reserve(path, port):
                continue
            if binds(port):
                return port
    raise OSError("no free TCP port on 127.0.0.1 below the ephemeral range")


if __name__ == "__main__":
    print(free_port())
