"""DLPack: numpy.from_dlpack and torch.from_dlpack read a Buffer's bytes in place, and the
tensor they hold keeps the object referenced as any other view does. A sealed object is
read-only: DLPack 1.0 consumers are told so by the tensor's flags; 0.x consumers (NumPy 1.24,
PyTorch 1.13), which cannot be told, get it only through ferry.dlpack_unmarked or as a copy."""

import ctypes
import gc
import os
import signal

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
    arr = np.from_dlpack(ferry.dlpack_unmarked(buf))
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
    again = np.from_dlpack(ferry.dlpack_unmarked(client.get("n")))
    assert again.__array_interface__["data"][0] == at  # no copy


def test_a_sealed_object_is_not_exported_unmarked_to_dlpack_0x(client):
    """DLPack 0.x cannot say read-only: a consumer that asks for it (NumPy 1.24 and PyTorch 1.13
    both do) is refused, and the message says what to do instead."""
    client.put("z", b"sealed bytes")
    buf = client.get("z")
    for export in (buf.__dlpack__, lambda: buf.__dlpack__(copy=False), lambda: np.from_dlpack(buf)):
        with pytest.raises(BufferError, match="read-only.*copy=True.*dlpack_unmarked"):
            export()
    torch = pytest.importorskip("torch")
    with pytest.raises(BufferError, match="cannot mark a tensor read-only"):
        torch.from_dlpack(buf)
    buf.release()  # nothing was exported


def _capsule_flags(capsule):
    """The flags word of the DLManagedTensorVersioned in a "dltensor_versioned" capsule, and its
    data pointer (dlpack.h's layout: version, manager_ctx, deleter, flags, then the DLTensor)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    at = get(capsule, b"dltensor_versioned")
    flags = ctypes.c_uint64.from_address(at + 24).value
    data = ctypes.c_void_p.from_address(at + 32).value
    return flags, data


def test_dlpack_1_consumers_are_told_read_only(client):
    client.put("v", b"versioned" * 100)
    buf = client.get("v")
    capsule = buf.__dlpack__(max_version=(1, 0))
    assert '"dltensor_versioned"' in repr(capsule)
    flags, data = _capsule_flags(capsule)
    assert flags == 1 and data == address(buf)  # DLPACK_FLAG_BITMASK_READ_ONLY, in place
    with pytest.raises(BufferError):
        buf.release()  # the unconsumed capsule is a view until it goes
    del capsule
    copy = buf.__dlpack__(max_version=(1, 2), copy=True)
    flags, data = _capsule_flags(copy)
    assert flags == 2 and not in_arena(data)  # DLPACK_FLAG_BITMASK_IS_COPIED, writable
    assert ctypes.string_at(data, 900) == b"versioned" * 100
    buf.release()  # a copy holds nothing of the Buffer
    del copy
    with pytest.raises(BufferError, match="host memory"):
        client.get("v").__dlpack__(max_version=(1, 0), dl_device=(2, 0))


def test_a_copy_is_writable_and_leaves_the_object_alone(client):
    torch = pytest.importorskip("torch")

    client.put("c", bytes(64))
    buf = client.get("c")
    t = torch.utils.dlpack.from_dlpack(buf.__dlpack__(copy=True))
    t[:] = 5  # the consumer's own bytes
    assert not in_arena(t.data_ptr()) and bytes(buf) == bytes(64)


def test_a_tensor_write_to_a_sealed_object_faults_and_changes_nothing(client, daemon):
    """The write the MMU stops: torch 1.13 believes a DLPack 0.x tensor writable; an in-place
    write through one over a sealed object kills the writer (SIGSEGV) and the bytes stay."""
    torch = pytest.importorskip("torch")

    client.put("w", np.arange(4096, dtype=np.uint8))
    pid = os.fork()
    if pid == 0:  # the child: never run pytest's code
        try:
            signal.signal(signal.SIGSEGV, signal.SIG_DFL)
            with ferry.Client(daemon.socket) as c:
                t = torch.from_dlpack(ferry.dlpack_unmarked(c.get("w")))
                t[0] = 42
        finally:
            os._exit(0)
    assert wait_child(pid) == -signal.SIGSEGV
    assert np.array_equal(np.frombuffer(client.get("w"), np.uint8), np.arange(4096, dtype=np.uint8))


def test_torch_reads_in_place(client):
    torch = pytest.importorskip("torch")
    import torch.utils.dlpack

    client.put("t", np.arange(4096, dtype=np.uint8))
    buf = client.get("t")
    for read in (torch.from_dlpack, torch.utils.dlpack.from_dlpack):
        t = read(ferry.dlpack_unmarked(buf))
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
    arr = np.from_dlpack(ferry.dlpack_unmarked(buf))
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
    capsule = buf.__dlpack__(max_version=(1, 0))  # never consumed: it gives the export back
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
    for capsule in (buf._dlpack_unmarked(stream=None), buf._dlpack_unmarked(None)):
        assert type(capsule).__name__ == "PyCapsule" and '"dltensor"' in repr(capsule)
    del capsule
    buf.release()


def test_an_empty_object(client):
    client.put("e", b"")
    buf = client.get("e")
    arr = np.from_dlpack(ferry.dlpack_unmarked(buf))
    assert arr.shape == (0,) and arr.dtype == np.uint8
    del arr
    buf.release()


def test_an_empty_object_in_torch(client):
    torch = pytest.importorskip("torch")

    client.put("e", b"")
    buf = client.get("e")
    t = torch.from_dlpack(ferry.dlpack_unmarked(buf))
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
