"""DLPack: numpy.from_dlpack and torch.from_dlpack read a Buffer's bytes in place, and the
tensor they hold keeps the object referenced as any other view does."""

import gc
import os

import numpy as np
import pytest

import ferry
from conftest import in_arena, wait_child

MiB = 1 << 20


def address(buf):
    """Where the Buffer's bytes are, as the buffer protocol shows them."""
    return np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0]


def refcount(client, oid):
    (entry,) = [o for o in client.list() if o["id"] == ferry.ObjectID(oid)]
    return entry["refcount"]


def test_numpy_reads_in_place_read_only(client):
    data = np.arange(MiB, dtype=np.uint64).view(np.uint8)
    client.put("n", data)
    buf = client.get("n")
    arr = np.from_dlpack(buf)
    at = arr.__array_interface__["data"][0]
    assert at == address(buf) and in_arena(at)
    assert arr.dtype == np.uint8 and arr.shape == (data.nbytes,) and np.array_equal(arr, data)
    # NumPy 1.24 makes every array from a DLPack capsule read-only, and will not be talked out
    # of it: DLPack 0.x cannot say whether the memory may be written.
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 1
    with pytest.raises(ValueError):
        arr.flags.writeable = True
    assert np.from_dlpack(client.get("n")).__array_interface__["data"][0] == at  # no copy


def test_torch_reads_in_place(client):
    torch = pytest.importorskip("torch")
    import torch.utils.dlpack

    client.put("t", np.arange(4096, dtype=np.uint8))
    buf = client.get("t")
    for read in (torch.from_dlpack, torch.utils.dlpack.from_dlpack):
        t = read(buf)
        assert t.data_ptr() == address(buf) and in_arena(t.data_ptr())
        assert t.dtype == torch.uint8 and tuple(t.shape) == (4096,) and t.device.type == "cpu"
        assert np.array_equal(t.numpy(), np.arange(4096, dtype=np.uint8))


def test_torch_fills_a_created_object(client):
    torch = pytest.importorskip("torch")

    buf = client.create("filled", 64)
    t = torch.from_dlpack(buf)  # writable: it writes the arena
    t[:] = 9
    del t
    gc.collect()
    client.seal("filled")
    assert bytes(client.get("filled")) == b"\x09" * 64


def test_a_tensor_keeps_the_object_referenced(client):
    client.put("k", b"kept" * 1000)
    buf = client.get("k")
    arr = np.from_dlpack(buf)
    with pytest.raises(BufferError):
        buf.release()  # as with a memoryview
    assert not buf.released
    del buf
    gc.collect()
    assert refcount(client, "k") == 1 and arr.tobytes() == b"kept" * 1000
    del arr
    gc.collect()
    assert refcount(client, "k") == 0

    buf = client.get("k")
    capsule = buf.__dlpack__()  # never consumed: the capsule gives the export back itself
    with pytest.raises(BufferError):
        buf.release()
    del capsule
    buf.release()
    assert buf.released and refcount(client, "k") == 0


def test_abort_waits_for_tensors(client):
    buf = client.create("a", 100)
    arr = np.from_dlpack(buf)
    with pytest.raises(BufferError):
        client.abort("a")  # the array would point into freed memory
    del arr
    gc.collect()
    client.abort("a")
    assert buf.released


def test_a_released_buffer_exports_nothing(client):
    client.put("r", b"x")
    buf = client.get("r")
    buf.release()
    with pytest.raises(ValueError):
        buf.__dlpack__()
    with pytest.raises(ValueError):
        np.from_dlpack(buf)


def test_stream_and_device(client):
    client.put("s", b"stream")
    buf = client.get("s")
    assert buf.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
    assert all(type(x) is int for x in buf.__dlpack_device__())
    for stream in (0, 1, -1):
        with pytest.raises(RuntimeError, match="stream=None"):  # NumPy's answer for its arrays
            buf.__dlpack__(stream=stream)
        with pytest.raises(RuntimeError):
            buf.__dlpack__(stream)
    with pytest.raises(TypeError):
        buf.__dlpack__(max_version=(1, 0))  # a DLPack 1.0 consumer then asks again without
    for capsule in (buf.__dlpack__(stream=None), buf.__dlpack__(None)):
        assert type(capsule).__name__ == "PyCapsule" and '"dltensor"' in repr(capsule)
    del capsule
    buf.release()


def test_an_empty_object(client):
    client.put("e", b"")
    buf = client.get("e")
    arr = np.from_dlpack(buf)
    assert arr.shape == (0,) and arr.dtype == np.uint8
    del arr
    buf.release()


def test_an_empty_object_in_torch(client):
    torch = pytest.importorskip("torch")

    client.put("e", b"")
    buf = client.get("e")
    t = torch.from_dlpack(buf)
    assert t.numel() == 0 and t.dtype == torch.uint8
    del t
    buf.release()


def test_a_forked_child_exports_nothing(client):
    client.put("f", b"parent's")
    buf = client.get("f")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never run pytest's code
        code = 0
        try:
            try:
                buf.__dlpack__()
                code = 1
            except ferry.Error as e:
                code = 0 if "parent" in str(e) else 2
        except BaseException:
            code = 3
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    assert wait_child(pid) == 0
    assert os.read(r, 1) == b"\x00"
    os.close(r)
    buf.release()
