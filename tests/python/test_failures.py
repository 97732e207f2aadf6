"""A daemon that dies under a running client, and a client used across fork(): exceptions,
never a crash, and never a read of memory that is gone."""

import os
import threading
import time

import numpy as np
import pytest

import ferry


def test_daemon_killed_mid_call(client, daemon):
    errors = []

    def waiter():
        try:
            client.get("never", timeout_ms=30_000)
        except ferry.Error as e:
            errors.append(e)

    client.put("kept", np.arange(1000))
    arr = np.frombuffer(client.get("kept"), dtype=np.int64)
    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.2)
    daemon.kill()
    t.join(30)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ferry.DaemonUnreachable), errors
    # What was read stays readable: the mapping outlives the daemon.
    assert arr.sum() == sum(range(1000))
    for call in (lambda: client.put("x", b"1"), lambda: client.get("kept"), client.stats,
                 lambda: client.contains("kept"), client.list):
        with pytest.raises(ferry.DaemonUnreachable):
            call()
    del arr


def test_client_reconnects_to_a_restarted_daemon(client, daemon):
    client.put("before", b"1")
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable):
        client.contains("before")
    daemon.start()
    assert not client.contains("before")  # a new daemon, a new arena
    client.put("after", b"2")
    assert bytes(client.get("after")) == b"2"


def test_unsealed_object_of_a_dead_daemon(client, daemon):
    buf = client.create("half", 10)
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable):
        client.seal("half")
    memoryview(buf)[:] = b"0123456789"  # the mapping is still there
    del buf


def test_subscription_of_a_dead_daemon(client, daemon):
    sub = client.subscribe()
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable):
        sub.read(timeout_ms=5000)
    sub.close()
    with pytest.raises(ValueError):
        sub.fileno()


def _wait_child(pid):
    for _ in range(1000):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    raise AssertionError("child did not exit within 10 s")


def test_fork_child_gets_a_clear_error(client, daemon):
    client.put("f", b"parent's")
    buf = client.get("f")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never run pytest's code
        code = 0
        try:
            try:
                client.get("f")
                code = 1
            except ferry.Error as e:
                code = 0 if "fork" in str(e) and type(e) is ferry.Error else 2
            try:  # the parent may give an inherited Buffer's object back at any time
                bytes(buf)
                code = 3
            except ferry.Error as e:
                if "parent" not in str(e):
                    code = 5
            del buf  # gives nothing back on the parent's socket
            with ferry.Client(daemon.socket) as mine:
                mine.put("from-child", b"c")
        except BaseException:
            code = 4
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    assert _wait_child(pid) == 0
    assert os.read(r, 1) == b"\x00"
    os.close(r)
    # The parent's session is intact: its reference is still held, the connection works.
    refs = {o["id"]: o["refcount"] for o in client.list()}
    assert refs[ferry.ObjectID("f")] == 1 and bytes(client.get("from-child")) == b"c"
    buf.release()
