"""Zero-copy reads and the lifetimes of Buffers and of every view made from them."""

import gc
import multiprocessing
import os
import signal

import numpy as np
import pytest

import ferry
from conftest import in_arena, wait_child

MiB = 1 << 20


def refcount(client, oid):
    (entry,) = [o for o in client.list() if o["id"] == ferry.ObjectID(oid)]
    return entry["refcount"]


def test_get_is_zero_copy(client):
    data = np.arange(MiB // 8, dtype=np.int64)
    client.put("a", data, metadata=b"int64")
    buf = client.get("a")
    arr = np.frombuffer(buf, dtype=np.int64)
    assert in_arena(arr.__array_interface__["data"][0])
    assert not in_arena(data.__array_interface__["data"][0])
    assert np.array_equal(arr, data)
    assert not arr.flags.writeable
    assert buf.size == data.nbytes and len(buf) == data.nbytes
    assert buf.metadata == b"int64" and buf.id == ferry.ObjectID("a") and buf.readonly
    # Two gets of one object are two references to the same bytes, not copies.
    again = np.frombuffer(client.get("a"), dtype=np.int64)
    assert again.__array_interface__["data"][0] == arr.__array_interface__["data"][0]
    assert bytes(buf) == data.tobytes()  # bytes() is the copy
    with pytest.raises(TypeError):
        memoryview(buf)[0] = 1  # read-only
    with pytest.raises(ValueError):
        arr[0] = 1


def _child_reads(socket, q):
    import numpy as np

    import ferry
    from conftest import arena_mapping

    with ferry.Client(socket) as c:
        arr = np.frombuffer(c.get("shared", timeout_ms=10000), dtype=np.uint8)
        q.put((arena_mapping(arr.__array_interface__["data"][0]), int(arr[0]), int(arr[-1])))


def test_two_processes_see_the_same_bytes(client, daemon):
    """A spawned process reads the object in place: its bytes lie in its own shared mapping of
    the arena, read-only (r--s: the MMU keeps sealed bytes from being written)."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    buf = client.create("shared", 4 * MiB)
    np.frombuffer(buf, dtype=np.uint8)[:] = 7
    client.seal("shared")
    child = ctx.Process(target=_child_reads, args=(daemon.socket, q))
    child.start()
    try:
        mapping, first, last = q.get(timeout=30)
    finally:
        child.join(30)
    assert child.exitcode == 0
    assert "memfd:ferry-arena" in mapping and mapping.split()[1] == "r--s"
    assert (first, last) == (7, 7)


def _write_after_seal(socket):
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    with ferry.Client(socket) as c:
        buf = c.create("late", 2 * MiB)
        mine = np.frombuffer(buf, dtype=np.uint8)  # writable: exported before the seal
        mine[:] = 7
        c.seal("late")
        mine[MiB] = 1  # the seal turned the pages read-only: this faults


def test_a_view_made_before_the_seal_cannot_write_after_it(client, daemon):
    """The creator's writable view ends at the seal: a write through a view exported before it
    kills the writer (SIGSEGV) and leaves the sealed bytes as they were."""
    pid = os.fork()
    if pid == 0:  # the child: never run pytest's code
        try:
            _write_after_seal(daemon.socket)
        finally:
            os._exit(0)
    assert wait_child(pid) == -signal.SIGSEGV
    arr = np.frombuffer(client.get("late", timeout_ms=5000), dtype=np.uint8)
    assert arr.size == 2 * MiB and (arr == 7).all()


def test_views_keep_the_object_referenced(client):
    client.put("x", np.ones(1024))
    buf = client.get("x")
    assert refcount(client, "x") == 1
    arr = np.frombuffer(buf, dtype=np.float64)[10:20]
    view = memoryview(buf)[8:]
    del buf
    gc.collect()
    assert refcount(client, "x") == 1  # the array and the memoryview hold it
    del view
    gc.collect()
    assert refcount(client, "x") == 1
    assert arr.sum() == 10.0
    del arr
    gc.collect()
    assert refcount(client, "x") == 0


def test_a_viewed_object_is_never_evicted(client):
    pinned = np.full(8 * MiB, 3, dtype=np.uint8)
    client.put("pinned", pinned)
    arr = np.frombuffer(client.get("pinned"), dtype=np.uint8)
    for i in range(20):  # 160 MiB through a 64 MiB arena
        client.put(f"filler{i}", np.full(8 * MiB, i, dtype=np.uint8))
    assert client.stats()["evicted_objects"] > 0
    assert client.contains("pinned")
    assert client.evict(1 << 40) > 0  # everything evictable goes
    assert client.contains("pinned") and np.array_equal(arr, pinned)
    del arr
    gc.collect()
    client.evict(1 << 40)
    assert not client.contains("pinned")


def test_delete_while_a_view_lives_is_safe(client):
    client.put("d", b"old" * 1000)
    arr = np.frombuffer(client.get("d"), dtype=np.uint8)
    client.delete("d")
    assert not client.contains("d")
    client.put("d", b"new" * 1000)  # the id is free again; the old bytes are still held
    assert arr.tobytes() == b"old" * 1000
    assert bytes(client.get("d")) == b"new" * 1000


def test_release_and_with(client):
    client.put("r", b"0123456789")
    buf = client.get("r")
    view = memoryview(buf)
    with pytest.raises(BufferError):
        buf.release()  # a view is alive: refused, as memoryview.release() does
    assert not buf.released and refcount(client, "r") == 1
    view.release()
    buf.release()
    assert buf.released and refcount(client, "r") == 0
    buf.release()  # twice is harmless
    for read in (memoryview, bytes, len, lambda b: b.size, lambda b: b.metadata):
        with pytest.raises(ValueError):
            read(buf)
    with client.get("r") as buf2:
        assert bytes(buf2) == b"0123456789"
    assert buf2.released and refcount(client, "r") == 0
    with pytest.raises(BufferError):
        with client.get("r") as buf3:
            arr = np.frombuffer(buf3, dtype=np.uint8)
    assert not buf3.released and refcount(client, "r") == 1  # the array still reads it
    del arr
    gc.collect()
    buf3.release()
    assert refcount(client, "r") == 0 and "released" in repr(buf3)


def test_buffers_outlive_their_client(daemon):
    c = ferry.Client(daemon.socket)
    c.put("o", np.arange(100000))
    arr = np.frombuffer(c.get("o"), dtype=np.int64)
    c.close()
    assert c.closed
    with pytest.raises(ValueError):
        c.get("o")
    assert arr.sum() == sum(range(100000))  # still mapped, still referenced
    with ferry.Client(daemon.socket) as other:
        assert refcount(other, "o") == 1
        del arr
        gc.collect()
        # The closed client's connection went with its last Buffer.
        for _ in range(100):
            if refcount(other, "o") == 0:
                break
        assert refcount(other, "o") == 0
        assert other.stats()["clients"] == 1


def test_create_seal_abort(client):
    buf = client.create("c", 8, metadata=b"meta")
    assert not buf.readonly and "unsealed" in repr(buf)
    memoryview(buf)[:] = b"abcdefgh"
    assert not client.contains("c")  # invisible until sealed
    with pytest.raises(ferry.ObjectNotSealed):
        buf.release()
    client.seal("c")
    assert buf.readonly and bytes(buf) == b"abcdefgh" and buf.metadata == b"meta"
    with pytest.raises(TypeError):
        memoryview(buf)[0:1] = b"x"  # sealed: new views are read-only
    assert bytes(client.get("c")) == b"abcdefgh"
    del buf
    gc.collect()
    assert refcount(client, "c") == 0

    buf = client.create("gone", 100)
    view = memoryview(buf)
    with pytest.raises(BufferError):
        client.abort("gone")  # a live view would point into freed memory
    view.release()
    client.abort("gone")
    assert buf.released
    with pytest.raises(ValueError):
        memoryview(buf)
    with pytest.raises(ferry.ObjectNotFound):
        client.get("gone")
    client.put("gone", b"again")  # the id is free


def test_dropped_create_buffer_still_seals(client):
    buf = client.create("later", 4)
    memoryview(buf)[:] = b"wxyz"
    del buf
    gc.collect()
    client.seal("later")
    got = client.get("later")
    assert bytes(got) == b"wxyz"
    assert refcount(client, "later") == 1  # the get's; the creator's went with the seal


def _seal_an_empty_object_then_write_another(socket):
    with ferry.Client(socket) as c:
        big = c.create("open", 8192)
        c.create("empty", 0)
        c.seal("empty")  # must leave the other open object writable
        np.frombuffer(big, dtype=np.uint8)[:] = 5
        c.seal("open")


def test_sealing_an_empty_object_leaves_other_creates_writable(daemon):
    """An empty object has no range to close: its seal once closed the range of another open
    object at the same offset, and the next write to that one killed the process."""
    pid = os.fork()
    if pid == 0:  # the child: never run pytest's code
        code = 1
        try:
            _seal_an_empty_object_then_write_another(daemon.socket)
            code = 0
        finally:
            os._exit(code)
    assert wait_child(pid) == 0

