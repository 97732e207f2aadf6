"""A daemon that dies under a running client, and a client used across fork(): exceptions,
never a crash, and never a read of memory that is gone."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import ferry
from conftest import wait_child


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


def test_a_restart_between_calls_costs_no_failed_call(client, daemon):
    """A daemon restarted under a live client cost it one failed call ("Broken pipe"), though
    the docs promised a reconnect (issue 38)."""
    client.put("before", b"1")
    daemon.kill()
    daemon.start()
    assert not client.contains("before")  # the first call goes to the new daemon
    client.put("after", b"2")
    assert bytes(client.get("after", fetch=True)) == b"2"


def test_waiting_handles_of_a_restarted_daemon_are_not_reused(client, daemon):
    """A get that waits takes a handle of its own from a pool; after a restart the pool's handles
    were the old run's, and a waiting get read the dead daemon's index through one: it gave
    back the old run's object."""
    client.put("old", b"1")
    with pytest.raises(ferry.Timeout):
        client.get("never", timeout_ms=50)  # leaves a waiting handle in the pool
    daemon.kill()
    daemon.start()
    with pytest.raises(ferry.Timeout):  # the new run has no "old"
        client.get("old", timeout_ms=300)


def test_a_get_by_the_index_fails_once_the_daemon_is_killed(client, daemon):
    """After kill -9, gets that look in the shared index (get with fetch=True) went on returning
    the dead daemon's objects with no error (issue 38)."""
    client.put("held", b"1")
    assert bytes(client.get("held", fetch=True)) == b"1"
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable):
        client.get("held", fetch=True)


def test_unsealed_object_of_a_dead_daemon(client, daemon):
    buf = client.create("half", 10)
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable):
        client.seal("half")
    # The seal was asked, and may have been made before the daemon went: writes ended there.
    assert buf.readonly and bytes(buf) == bytes(10)  # the mapping is still there
    with pytest.raises(TypeError):
        memoryview(buf)[:] = b"0123456789"
    del buf


def test_subscription_of_a_dead_daemon(client, daemon):
    sub = client.subscribe()
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable):
        sub.read(timeout_ms=5000)
    sub.close()
    with pytest.raises(ValueError):
        sub.fileno()


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
    assert wait_child(pid) == 0
    assert os.read(r, 1) == b"\x00"
    os.close(r)
    # The parent's session is intact: its reference is still held, the connection works.
    refs = {o["id"]: o["refcount"] for o in client.list()}
    assert refs[ferry.ObjectID("f")] == 1 and bytes(client.get("from-child")) == b"c"
    buf.release()


def stopped(daemon, call, bound_s):
    """Runs call with the daemon stopped (SIGSTOP) on a thread, waits for it at most bound_s,
    then lets the daemon go on: (the exception it raised or None, seconds it took, ended)."""
    out = {}

    def run():
        start = time.monotonic()
        try:
            call()
        except Exception as e:  # noqa: BLE001 - the test looks at what it was
            out["exc"] = e
        out["took"] = time.monotonic() - start

    os.kill(daemon.proc.pid, signal.SIGSTOP)
    t = threading.Thread(target=run)
    try:
        t.start()
        t.join(bound_s)
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    ended = not t.is_alive()
    t.join(30)
    return out.get("exc"), out.get("took"), ended


def after_the_stop(call, tries=10):
    """call()'s result once the daemon, just continued, answers within the handle's timeout: a
    loaded machine may take longer than 300 ms for the first HELLO after SIGCONT (seen in a full
    run), and each try that times out gives the handle up and the next connects again."""
    for i in range(tries):
        try:
            return call()
        except ferry.Timeout:
            if i == tries - 1:
                raise
            time.sleep(0.1)


def client_300ms(daemon):
    """A Client whose calls time out after 300 ms. Its HELLO may take longer on a loaded
    machine (a full run failed so, before any stop): it is tried again, as in after_the_stop."""
    return after_the_stop(lambda: ferry.Client(daemon.socket, timeout_ms=300))


def test_a_stopped_daemon_times_out_and_the_client_connects_again(daemon):
    with client_300ms(daemon) as c:
        c.put("kept", b"1")
        exc, took, ended = stopped(daemon, c.stats, 3.0)
        assert ended, "stats() on a stopped daemon did not end within 3 s"
        assert isinstance(exc, TimeoutError) and isinstance(exc, ferry.Timeout), exc
        assert took >= 0.29 and "STATS" in str(exc) and "300 ms" in str(exc), (took, exc)
        # The handle that timed out is given up; the next call connects again.
        assert after_the_stop(c.stats)["objects"] == 1
        assert bytes(c.get("kept")) == b"1"


def test_a_get_on_a_stopped_daemon_times_out(daemon):
    with client_300ms(daemon) as c:
        exc, took, ended = stopped(daemon, lambda: c.get("never", timeout_ms=200), 3.5)
        assert ended, "get() on a stopped daemon did not end within 3.5 s"
        # The first look (timeout 0, through the Client's main handle) times out already.
        assert isinstance(exc, TimeoutError) and "GET" in str(exc), exc
        assert took >= 0.29, took
        assert not after_the_stop(lambda: c.contains("never"))


def test_client_timeout_is_checked(daemon):
    for bad in (0, -2):
        with pytest.raises(ValueError):
            ferry.Client(daemon.socket, timeout_ms=bad)
    with pytest.raises(TypeError):
        ferry.Client(daemon.socket, timeout_ms="1")
    # Any bound from 1 ms is accepted; one long enough for a loaded sanitizer run (1 ms timed
    # out on HELLO there).
    for good in (None, -1, 10_000, 30_000):
        with ferry.Client(daemon.socket, timeout_ms=good) as c:
            assert c.stats()["clients"] >= 1
