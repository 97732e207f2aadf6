"""Regression tests for what an adversarial review of the module found, each named after what
it guards. Races are driven for a bounded number of attempts; a daemon is paused with SIGSTOP
where a call must be caught in the middle."""

import gc
import os
import signal
import subprocess
import threading
import time

import pytest

import ferry
from conftest import wait_until


def refcount(client, oid):
    for o in client.list():
        if o["id"] == ferry.ObjectID(oid):
            return o["refcount"]
    return None


def test_no_view_of_an_object_being_aborted(client):
    """abort() lets the GIL go while the daemon frees the bytes: no view may be taken then."""
    for _ in range(100):
        oid = ferry.ObjectID.random()
        buf = client.create(oid, 1 << 16)
        state = {"aborting": False, "kept": None, "stop": False}

        def grab():
            while not state["stop"]:
                try:
                    view = memoryview(buf)
                except (ValueError, BufferError):
                    continue
                if state["aborting"]:
                    state["kept"] = view
                    return
                del view

        t = threading.Thread(target=grab)
        t.start()
        for _ in range(1000):
            state["aborting"] = True
            try:
                client.abort(oid)
                break
            except BufferError:  # the grabber held a view: refused, rightly
                state["aborting"] = False
        state["stop"] = True
        t.join(10)
        kept = state["kept"]
        assert not (kept is not None and buf.released), "a view outlived the abort of its object"
        if kept is not None:
            kept.release()
            client.abort(oid)
        del buf, kept


def test_close_while_another_thread_reconnects(client, daemon):
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable):
        client.contains("x")
    daemon.start()
    errors = []

    def call():
        try:
            client.contains("x")
        except (ferry.Error, ValueError) as e:  # closed under it: fine; a crash is not
            errors.append(e)

    t = threading.Thread(target=call)
    t.start()
    client.close()
    t.join(10)
    assert not t.is_alive()


def test_put_many_reports_a_lost_connection_on_every_item(client, daemon):
    client.put_many([("warm", b"1")])  # the staging area exists, so the next batch is one send
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable) as e:
        client.put_many([("a", b"1"), ("b", b"2"), ("c", b"3")])
    assert [(i, oid) for i, oid, _ in e.value.failures] == [
        (0, ferry.ObjectID("a")), (1, ferry.ObjectID("b")), (2, ferry.ObjectID("c"))]


def test_flush_after_a_reconnection_says_puts_without_waiting_may_be_lost(client, daemon):
    client.put("before", b"1", wait=False)
    daemon.kill()
    with pytest.raises(ferry.DaemonUnreachable):
        client.contains("x")
    daemon.start()
    client.put("after", b"2", wait=False)  # a new connection, and its own ring
    with pytest.raises(ferry.DaemonUnreachable, match="1 put"):
        client.flush()
    client.flush()  # said once
    assert bytes(client.get("after")) == b"2"


def test_seal_racing_close_keeps_its_outcome(client, daemon):
    buf = client.create("s", 4)
    del buf
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    outcome = []

    def seal():
        try:
            client.seal("s")
            outcome.append("sealed")
        except Exception as e:
            outcome.append(e)

    t = threading.Thread(target=seal)
    t.start()
    time.sleep(0.2)
    client.close()  # forgets the object being sealed
    os.kill(daemon.proc.pid, signal.SIGCONT)
    t.join(10)
    assert outcome == ["sealed"], outcome
    with ferry.Client(daemon.socket) as other:
        assert other.contains("s")


def test_releases_never_freeze_the_interpreter(client, daemon):
    """A daemon that stops reading must not stop every thread: releases let the GIL go. Here
    60,000 releases fill the socket while the daemon is paused; another thread must go on
    running (and it is the one that resumes the daemon)."""
    pid = daemon.proc.pid
    client.put("a", b"x")
    bufs = client.get(["a"] * 60_000)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    t = threading.Thread(target=ticker)
    t.start()
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(0.5, lambda: os.kill(pid, signal.SIGCONT))
    # Only if the interpreter froze: resumes the daemon from outside, so the test ends. In a
    # session of its own, so that killing its group takes the sleep too (an orphaned sleep kept
    # ctest's output pipe open for 30 s after the test was over).
    rescue = subprocess.Popen(["sh", "-c", f"sleep 30; kill -CONT {pid}"], start_new_session=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    resume.start()
    try:
        start = time.monotonic()
        del bufs
        gc.collect()
        end = time.monotonic()
    finally:
        os.killpg(rescue.pid, signal.SIGKILL)
        rescue.wait()
        resume.join(10)
        stop.set()
        t.join(10)
        os.kill(pid, signal.SIGCONT)
    during = [x for x in ticks if start < x < end]
    assert end - start < 0.3 or during, f"no other thread ran during {end - start:.1f} s of releases"
    wait_until(lambda: refcount(client, "a") == 0, what="every release sent")


def test_releases_queued_behind_an_abort_are_sent(client, daemon):
    with ferry.Client(daemon.socket) as observer:
        client.put("a", b"1")
        client.put("z", b"2")
        b, keep = client.get("a"), client.get("z")
        u = client.create("u", 8)
        client.close()  # u's object is aborted when u goes
        holder = {"u": u}
        del u
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        t = threading.Thread(target=holder.clear)  # the abort, waiting for the paused daemon
        t.start()
        time.sleep(0.2)
        del b  # its handle is busy with the abort: queued
        os.kill(daemon.proc.pid, signal.SIGCONT)
        t.join(10)
        wait_until(lambda: refcount(observer, "a") == 0, what="the queued release sent")
        assert refcount(observer, "z") == 1
        del keep


def test_close_wakes_a_reader_of_the_subscription(client):
    sub = client.subscribe()
    result = []

    def reader():
        try:
            sub.read(timeout_ms=-1)
        except ValueError as e:
            result.append(e)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.2)
    sub.close()
    t.join(5)
    assert not t.is_alive() and len(result) == 1


def test_a_client_is_initialized_once(client, daemon):
    with pytest.raises(RuntimeError):
        client.__init__(daemon.socket)
    assert bytes(client.get(client.put("still", b"ok"))) == b"ok"
