"""put_object / get_object: Python objects through pickle protocol 5, their buffers in the arena,
read back without a copy."""

import gc
import pickle
import struct

import numpy as np
import pytest

import ferry
from conftest import in_arena

MiB = 1 << 20


def data_address(arr):
    return arr.__array_interface__["data"][0]


def test_nested_containers_of_large_arrays_come_back_in_place(client):
    rng = np.random.default_rng(7)
    obj = {
        "weights": [rng.standard_normal((256, 1024)), rng.standard_normal(3 * MiB // 8)],
        "ids": (np.arange(10_000, dtype=np.int32), "label", 3.5),
        "nested": {"mask": rng.integers(0, 2, (64, 64)).astype(bool), "none": None},
        "fortran": np.asfortranarray(rng.standard_normal((50, 40))),
        "strided": rng.standard_normal(1000)[::3],  # not contiguous: in the pickle stream
    }
    oid = client.put_object(obj)
    assert isinstance(oid, ferry.ObjectID)
    back = client.get_object(oid)
    arrays = [back["weights"][0], back["weights"][1], back["ids"][0], back["nested"]["mask"],
              back["fortran"]]
    originals = [obj["weights"][0], obj["weights"][1], obj["ids"][0], obj["nested"]["mask"],
                 obj["fortran"]]
    for got, want in zip(arrays, originals):
        assert np.array_equal(got, want) and got.dtype == want.dtype and got.shape == want.shape
        assert in_arena(data_address(got)), "an out-of-band array was copied"
        assert not got.flags.writeable
        assert data_address(got) % 64 == 0
    assert back["fortran"].flags.f_contiguous
    assert np.array_equal(back["strided"], obj["strided"])
    assert back["ids"][1:] == ("label", 3.5) and back["nested"]["none"] is None
    # Each get_object is another view of the same bytes.
    again = client.get_object(oid)
    assert data_address(again["weights"][0]) == data_address(back["weights"][0])


def test_arrays_keep_the_object_referenced(client):
    oid = client.put_object({"a": np.ones(MiB)}, id="kept")
    a = client.get_object("kept")["a"]
    gc.collect()
    refs = {o["id"]: o["refcount"] for o in client.list()}
    assert refs[oid] == 1 and a.sum() == MiB
    del a
    gc.collect()
    assert {o["id"]: o["refcount"] for o in client.list()}[oid] == 0


def test_plain_objects_and_ids(client):
    for i, value in enumerate([None, 0, "text", b"bytes", [1, [2, (3, {4: 5})]], {"k": {1, 2}}]):
        oid = client.put_object(value, id=f"plain{i}")
        assert oid == ferry.ObjectID(f"plain{i}")
        assert client.get_object(f"plain{i}") == value
    with pytest.raises(ferry.ObjectExists):
        client.put_object(1, id="plain0")
    with pytest.raises((pickle.PicklingError, AttributeError)):
        client.put_object(lambda: 0)
    assert not any(o["state"] == "created" for o in client.list())  # nothing left unsealed


def test_format_is_documented_and_checked(client):
    arr = np.arange(100, dtype=np.uint8)
    oid = client.put_object([arr, arr + 1])  # two arrays (one twice would be memoized)
    buf = client.get(oid)
    meta = buf.metadata
    magic, version, count = struct.unpack_from("<8sII", meta)
    assert (magic, version, count) == (b"FERRYPK5", ferry.OBJECT_FORMAT_VERSION, 3)
    parts = [struct.unpack_from("<QQ", meta, 16 + 16 * i) for i in range(count)]
    assert parts[0][0] == 0 and all(at % 64 == 0 for at, _ in parts)
    data = bytes(buf)
    stream = data[parts[0][0]:sum(parts[0])]
    oob = [data[at:at + n] for at, n in parts[1:]]
    assert [bytes(x) for x in pickle.loads(stream, buffers=oob)] == [arr.tobytes(),
                                                                     (arr + 1).tobytes()]
    del buf
    # Objects of another kind, or with a damaged header, are refused with ValueError.
    client.put("raw", b"not a pickle")
    client.put("bad-version", b"x" * 64, metadata=meta[:8] + struct.pack("<I", 99) + meta[12:])
    client.put("bad-part", b"x" * 64, metadata=meta[:16] + struct.pack("<QQ", 0, 65) + meta[32:])
    client.put("truncated", b"x" * 64, metadata=meta[:-1])
    for name in ("raw", "bad-version", "bad-part", "truncated"):
        with pytest.raises(ValueError, match="put_object"):
            client.get_object(name)
    gc.collect()
    assert all(o["refcount"] == 0 for o in client.list())


def test_get_object_waits(client, daemon):
    import threading

    def later():
        with ferry.Client(daemon.socket) as c:
            c.put_object({"late": np.arange(3)}, id="late")

    t = threading.Timer(0.2, later)
    t.start()
    try:
        assert client.get_object("late", timeout_ms=10_000)["late"].tolist() == [0, 1, 2]
    finally:
        t.join()
    with pytest.raises(ferry.Timeout):
        client.get_object("never", timeout_ms=30)
