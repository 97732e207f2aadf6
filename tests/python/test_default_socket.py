"""The socket a Client takes when it is given none: libferry's rule (client_default_socket,
src/client/default_socket.h: $FERRY_SOCKET, else /run/ferry/ferry.sock if it exists, else
/tmp/ferry.sock), chosen once, so that a Client connects again where it first did. The host's
/run/ferry is only looked at, never touched."""

import errno
import os
import threading

import ferry

SERVICE_SOCKET = "/run/ferry/ferry.sock"


def rule_without_env():
    """Where the rule points with $FERRY_SOCKET unset, as the C function decides."""
    try:
        os.stat(SERVICE_SOCKET)
        return SERVICE_SOCKET
    except PermissionError:
        return SERVICE_SOCKET
    except OSError as e:
        assert e.errno in (errno.ENOENT, errno.ENOTDIR)
        return ferry.DEFAULT_SOCKET


def test_no_socket_named_follows_the_rule(monkeypatch):
    monkeypatch.delenv("FERRY_SOCKET", raising=False)
    want = rule_without_env()
    try:
        c = ferry.Client(timeout_ms=2000)
    except ferry.DaemonUnreachable as e:  # no daemon there (the usual test host)
        assert want in str(e)
    else:
        with c:
            assert c.socket == want


def test_an_empty_ferry_socket_counts_as_unset(monkeypatch):
    monkeypatch.setenv("FERRY_SOCKET", "")
    want = rule_without_env()
    try:
        c = ferry.Client(timeout_ms=2000)
    except ferry.DaemonUnreachable as e:
        assert want in str(e)
    else:
        with c:
            assert c.socket == want


def test_the_default_is_chosen_once(start_daemon, monkeypatch):
    """A Client's later connections (a get that waits takes one of its own) go to the daemon
    its first reached, even when $FERRY_SOCKET names another by then."""
    first, second = start_daemon("first"), start_daemon("second")
    monkeypatch.setenv("FERRY_SOCKET", first.socket)
    with ferry.Client() as c:
        assert c.socket == first.socket
        monkeypatch.setenv("FERRY_SOCKET", second.socket)
        putter = threading.Timer(0.2, lambda: ferry.Client(first.socket).put("late", b"there"))
        putter.start()
        try:
            assert bytes(c.get("late", timeout_ms=5000)) == b"there"
        finally:
            putter.join()
        assert c.socket == first.socket
