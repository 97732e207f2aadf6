"""Objects deleted when unused (Client.delete_unused): visible while any client holds them,
gone with the last release, whichever client that is, or with its death; held without the
daemon (the shared index) before the mark, they wait for that holder too."""

import gc
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import ferry
from conftest import wait_until

MiB = 1 << 20


def test_an_unheld_object_goes_at_once(start_daemon):
    d = start_daemon("now", "16M")
    with ferry.Client(d.socket) as c:
        oid = c.put(ferry.ObjectID.random(), b"x" * MiB)
        c.delete_unused(oid)
        assert not c.contains(oid)
        assert c.stats()["deleted_unused"] == 1
        with pytest.raises(ferry.ObjectNotFound):
            c.delete_unused(oid)


def test_a_shared_object_goes_with_its_last_holder(start_daemon):
    d = start_daemon("shared", "16M")
    with ferry.Client(d.socket) as a, ferry.Client(d.socket) as b, ferry.Client(d.socket) as c:
        oid = a.put_object(np.arange(MiB // 8, dtype=np.int64))
        held_a = a.get_object(oid)
        a.delete_unused(oid)
        held_b = b.get_object(oid)  # still visible: b takes it after the mark
        del held_a
        gc.collect()
        assert c.contains(oid)
        held_c = c.get_object(oid)  # and c, after the first holder let go
        assert held_c[-1] == MiB // 8 - 1
        del held_b, held_c
        gc.collect()
        wait_until(lambda: not a.contains(oid), what="the object's delete")
        assert a.stats()["deleted_unused"] == 1
        assert a.list() == []


def test_a_kept_object_is_let_go_and_not_kept_again(start_daemon):
    d = start_daemon("kept", "16M")
    with ferry.Client(d.socket) as c:
        oid = c.put(ferry.ObjectID.random(), b"k" * MiB, keep=True)
        buf = c.get(oid)
        c.delete_unused(oid)
        assert c.stats()["kept_objects"] == 0
        with pytest.raises(ferry.InvalidArgument, match="deleted when unused"):
            c.keep(oid)
        buf.release()  # through the index, it may be a sweep later (1 ms)
        wait_until(lambda: not c.contains(oid), what="the delete at the release")


def test_a_holder_that_dies_lets_go(start_daemon):
    d = start_daemon("dies", "16M")
    with ferry.Client(d.socket) as c:
        oid = c.put(ferry.ObjectID.random(), b"d" * MiB)
        child = subprocess.Popen(
            [sys.executable, "-c",
             "import ferry, sys, time\n"
             f"c = ferry.Client({d.socket!r})\n"
             f"b = c.get(ferry.ObjectID({str(oid)!r}))\n"
             "print('held', flush=True)\n"
             "time.sleep(60)\n"],
            stdout=subprocess.PIPE, env=dict(os.environ))
        try:
            assert child.stdout.readline().strip() == b"held"
            c.delete_unused(oid)
            assert c.contains(oid)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
            wait_until(lambda: not c.contains(oid), what="the delete after the holder's death")
        finally:
            child.kill()
            child.wait(timeout=10)


@pytest.mark.skipif(os.environ.get("FERRY_FASTPATH") == "0", reason="needs the shared index")
def test_a_holder_without_the_daemon_delays_it(start_daemon):
    """Regression: a get through the shared index holds no reference the daemon counts; the
    mark must not free the bytes under it (the object is adopted until the slot is given back)."""
    d = start_daemon("fast", "16M")
    with ferry.Client(d.socket) as a, ferry.Client(d.socket) as b:
        oid = a.put(ferry.ObjectID.random(), b"f" * MiB)
        fast = b.get(oid)  # sealed and resident: through the index
        assert b.stats()["fast_gets"] >= 1
        a.delete_unused(oid)
        assert a.contains(oid)
        a.put(ferry.ObjectID.random(), b"z" * (8 * MiB))
        assert bytes(memoryview(fast)[:4]) == b"ffff"
        fast.release()
        wait_until(lambda: not a.contains(oid), what="the delete after the slot's release")
