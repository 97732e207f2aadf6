"""Every call of Client against a real daemon: results, errors from real failures, and
arguments refused before anything reaches the daemon."""

import array
import gc
import os

import numpy as np
import pytest

import ferry

MiB = 1 << 20


def test_put_takes_any_contiguous_buffer(client):
    sources = {
        "bytes": b"\x01\x02\x03",
        "bytearray": bytearray(b"\x04\x05"),
        "memoryview": memoryview(b"abcdef")[1:4],
        "array": array.array("i", [1, 2, 3]),
        "numpy": np.arange(12, dtype=np.int16).reshape(3, 4),
        "numpy-fortran-1d": np.asfortranarray(np.arange(5)),
        "empty": b"",
        "large": np.random.default_rng(1).integers(0, 255, 3 * MiB, dtype=np.uint8),
    }
    for name, data in sources.items():
        oid = client.put(name, data, metadata=name.encode())
        assert oid == ferry.ObjectID(name)
        buf = client.get(name)
        assert bytes(buf) == memoryview(data).tobytes(), name
        assert buf.metadata == name.encode()
    assert client.put(ferry.ObjectID.random(), b"x") != client.put(ferry.ObjectID.random(), b"x")


def test_put_refuses_non_contiguous_and_non_buffers(client):
    strided = np.arange(100)[::2]
    with pytest.raises((ValueError, BufferError)):
        client.put("s", strided)
    for bad in ("text", 5, None, [1, 2]):
        with pytest.raises(TypeError):
            client.put("t", bad)
    with pytest.raises(TypeError):
        client.put("t", b"x", metadata="text")
    assert not client.contains("s") and not client.contains("t")
    assert client.stats()["created_objects"] == 0  # nothing reached the daemon


def test_put_many(client):
    items = [(f"k{i}", np.full(i, i, dtype=np.uint8)) for i in range(200)]
    items.append(("with-meta", b"data", b"meta"))
    items.append(("big", np.zeros(2 * MiB, dtype=np.uint8)))  # not a batched one
    ids = client.put_many(items)
    assert ids == [ferry.ObjectID(i[0]) for i in items]
    for name, data, *meta in items:
        buf = client.get(name)
        assert bytes(buf) == memoryview(data).tobytes()
        assert buf.metadata == (meta[0] if meta else b"")
    with pytest.raises(ferry.ObjectExists) as e:
        client.put_many([("k1", b"again"), ("fresh", b"new"), ("k2", b"again")])
    assert [(i, oid) for i, oid, _ in e.value.failures] == [
        (0, ferry.ObjectID("k1")), (2, ferry.ObjectID("k2"))]
    assert all(isinstance(x, ferry.ObjectExists) for _, _, x in e.value.failures)
    assert bytes(client.get("fresh")) == b"new"
    assert client.put_many([]) == []
    for bad in ([("only-id",)], [("a", b"b", b"c", b"d")], ["ab"], 5):
        with pytest.raises(TypeError):
            client.put_many(bad)


def test_put_without_waiting_and_flush(client, daemon):
    other = ferry.Client(daemon.socket)
    try:
        for i in range(300):
            assert client.put(f"nw{i}", np.full(i * 50, i % 251, dtype=np.uint8),
                              wait=False) == ferry.ObjectID(f"nw{i}")
        # Found at once, by this client and by another: nothing waits for the flush.
        assert bytes(client.get("nw7")) == bytes([7]) * 350
        assert bytes(other.get("nw299")) == bytes([299 % 251]) * 14950
        client.flush()
        assert client.stats()["puts_nowait"] == 300
        client.put("nw-large", np.zeros(2 * MiB, dtype=np.uint8), wait=False)  # at once
        assert other.contains("nw-large")
        client.put("nw1", b"other bytes", wait=False)  # exists: known only at the flush
        client.put("nw2", b"other bytes", wait=False)
        with pytest.raises(ferry.ObjectExists, match=str(ferry.ObjectID("nw1"))) as e:
            client.flush()
        assert "2 puts" in str(e.value)
        client.flush()  # reported once
    finally:
        other.close()


def test_contains_delete_hash_list_stats(client, daemon):
    client.put("a", b"12345", metadata=b"m")
    assert client.contains("a") and "a" in client and "b" not in client
    h = client.hash("a")
    import subprocess
    from conftest import BIN_DIR

    out = subprocess.run([os.path.join(BIN_DIR, "ferry"), "--socket", daemon.socket, "hash", "a"],
                         capture_output=True, text=True, timeout=10, check=True)
    d = client.digest("a")
    assert out.stdout.split()[0] == d.hex()  # the CLI prints the root, as the directory records it
    assert len(d) == 32 and h == int.from_bytes(d[:8], "little")  # hash: its first 8 bytes
    import hashlib
    import struct

    leaf = hashlib.sha256(b"\0" + struct.pack("<Q", 0) + b"12345m").digest()
    assert d == hashlib.sha256(b"\1" + struct.pack("<QQ", 5, 1) + leaf).digest()
    listing = {o["id"]: o for o in client.list()}
    a = listing[ferry.ObjectID("a")]
    assert (a["size"], a["metadata_size"], a["state"], a["refcount"]) == (5, 1, "sealed", 0)
    assert a["age_ms"] >= 0
    unsealed = client.create("u", 3)
    assert {o["id"]: o["state"] for o in client.list()}[ferry.ObjectID("u")] == "created"
    client.abort("u")
    del unsealed
    stats = client.stats()
    assert stats["objects"] == 1 and stats["sealed_objects"] == 1 and stats["clients"] == 1
    assert stats["capacity_bytes"] == 64 * MiB and stats["aborted_objects"] == 1
    client.delete("a")
    assert not client.contains("a")
    with pytest.raises(ferry.ObjectNotFound):
        client.delete("a")
    with pytest.raises(ferry.ObjectNotFound):
        client.hash("a")


def test_names_are_kept_and_listed(client):
    client.put("named", b"x")
    assert {o["id"]: o["name"] for o in client.list()}[ferry.ObjectID("named")] == ""
    client.set_name("named", "the named one, é")
    assert {o["id"]: o["name"] for o in client.list()}[ferry.ObjectID("named")] == "the named one, é"
    client.set_name("named", "renamed")
    assert {o["id"]: o["name"] for o in client.list()}[ferry.ObjectID("named")] == "renamed"
    for bad in ("", "x" * 256, "tab\there"):
        with pytest.raises(ferry.InvalidArgument):
            client.set_name("named", bad)
    with pytest.raises(ferry.ObjectNotFound):
        client.set_name("nobody", "ghost")
    with pytest.raises(TypeError):
        client.set_name("named", b"bytes")


def test_evict(client):
    for i in range(4):
        client.put(f"e{i}", np.zeros(MiB, dtype=np.uint8))
    freed = client.evict(2 * MiB)
    assert freed >= 2 * MiB
    assert not client.contains("e0") and not client.contains("e1")  # oldest first
    assert client.contains("e3")
    assert client.evict(0) == 0


def test_store_full_says_how_full(client):
    keep = [client.create(f"held{i}", 20 * MiB) for i in range(3)]  # unsealed: not evictable
    with pytest.raises(ferry.StoreFull) as e:
        client.put("more", np.zeros(10 * MiB, dtype=np.uint8))
    msg = str(e.value)
    assert "requested" in msg or "need" in msg or "MiB" in msg, msg
    assert e.value.code == -5 and not isinstance(e.value, ferry.ObjectTooLarge)
    with pytest.raises(ferry.ObjectTooLarge) as e:
        client.create("huge", 1 << 40)
    assert isinstance(e.value, ferry.StoreFull) and e.value.code == -4
    for i, b in enumerate(keep):
        client.abort(f"held{i}")


def test_get_timeout_and_missing(client):
    with pytest.raises(ferry.ObjectNotFound) as e:
        client.get("absent")
    assert isinstance(e.value, KeyError) and e.value.missing == [ferry.ObjectID("absent")]
    # str() is the message, not KeyError's quoting of it; it echoes the name typed and its id.
    msg = str(e.value)
    assert msg.startswith("no such object") and f"'absent', id {ferry.ObjectID('absent').hex()}" in msg
    with pytest.raises(ferry.Timeout) as e:
        client.get("absent", timeout_ms=50)
    assert isinstance(e.value, TimeoutError)
    client.put("here", b"1")
    with pytest.raises(ferry.Timeout) as e:
        client.get(["here", "absent", "also-absent"], timeout_ms=20)
    assert e.value.missing == [ferry.ObjectID("absent"), ferry.ObjectID("also-absent")]
    gc.collect()
    assert {o["id"]: o["refcount"] for o in client.list()}[ferry.ObjectID("here")] == 0
    bufs = client.get(("here", "here"))
    assert [bytes(b) for b in bufs] == [b"1", b"1"]
    assert client.get([]) == []


def test_errors_mirror_the_c_codes(client):
    assert issubclass(ferry.ObjectNotFound, ferry.Error)
    assert issubclass(ferry.DaemonUnreachable, ConnectionError)
    assert issubclass(ferry.InvalidArgument, ValueError)
    codes = {cls.code for cls in vars(ferry).values()
             if isinstance(cls, type) and issubclass(cls, ferry.Error) and cls is not ferry.Error}
    assert codes == set(range(-20, 0))
    client.put("exists", b"x")
    # The message echoes the name typed and its id, and says what to do (issue 38: the README's
    # example failed on its second run naming neither).
    oid = str(ferry.ObjectID("exists"))
    with pytest.raises(ferry.ObjectExists,
                       match=rf"\('exists', id {oid}\)\. An id is written once: delete\(\)"):
        client.put("exists", b"y")
    # A name is shown as repr() shows it (no raw newline), cut at a character's start.
    odd = "é" * 80 + "\n"
    client.put(odd, b"x")
    with pytest.raises(ferry.ObjectExists) as e:
        client.put(odd, b"y")
    assert "\n" not in str(e.value) and "'éé" in str(e.value)

    with pytest.raises(ferry.ObjectExists):
        client.create("exists", 1)


def test_only_the_creator_seals(client, daemon):
    buf = client.create("mine", 1)
    with ferry.Client(daemon.socket) as other:
        with pytest.raises(ferry.PermissionDenied):
            other.seal("mine")
        with pytest.raises(ferry.PermissionDenied):
            other.abort("mine")
    client.seal("mine")
    del buf


def test_unknown_socket(workdir):
    with pytest.raises(ferry.DaemonUnreachable) as e:
        ferry.Client(os.path.join(workdir, "nobody.sock"))
    assert "nobody.sock" in str(e.value)


def test_default_socket_is_ferry_socket(daemon, monkeypatch):
    monkeypatch.setenv("FERRY_SOCKET", daemon.socket)
    with ferry.Client() as c:
        assert c.socket == daemon.socket
        c.put("env", b"1")
    monkeypatch.delenv("FERRY_SOCKET")
    # Unset: the system service's socket where one is there, else ferryd's own default.
    assert ferry.DEFAULT_SOCKET == "/tmp/ferry.sock"
    assert ferry.SERVICE_SOCKET == "/run/ferry/ferry.sock"
    expected = ferry.SERVICE_SOCKET if os.path.exists(ferry.SERVICE_SOCKET) else ferry.DEFAULT_SOCKET
    try:
        c = ferry.Client()
    except ferry.DaemonUnreachable as e:
        assert expected in str(e)
    else:
        assert c.socket == expected
        c.close()


BAD_CALLS = [
    ("get", (5,), TypeError),
    ("get", ("x",), {"timeout_ms": -2}, ValueError),
    ("get", ("x",), {"timeout_ms": 1.5}, TypeError),
    ("get", ([b""],), ValueError),
    ("get", (["x"] * (ferry.MAX_IDS + 1),), ValueError),
    ("fetch", (5,), TypeError),
    ("fetch", ("x",), {"timeout_ms": -5}, ValueError),
    ("create", ("x", -1), ValueError),
    ("create", ("x", "10"), TypeError),
    ("create", ("x", 1.0), TypeError),
    ("create", ("x", 1), {"metadata": 3}, TypeError),
    ("put", (None, b"x"), TypeError),
    ("seal", (3,), TypeError),
    ("abort", ("",), ValueError),
    ("contains", (object(),), TypeError),
    ("delete", (1.0,), TypeError),
    ("hash", ([],), TypeError),
    ("evict", (-1,), ValueError),
    ("evict", ("1",), TypeError),
    ("where", (7,), TypeError),
    ("put_object", (1,), {"id": 5}, TypeError),
]


@pytest.mark.parametrize("call", BAD_CALLS, ids=[c[0] + str(i) for i, c in enumerate(BAD_CALLS)])
def test_bad_arguments_never_reach_the_daemon(client, call):
    name, args = call[0], call[1]
    kwargs = call[2] if len(call) == 4 else {}
    exc = call[-1]
    before = client.stats()
    with pytest.raises(exc):
        getattr(client, name)(*args, **kwargs)
    after = client.stats()
    for key in ("gets", "created_objects", "fetches", "protocol_errors"):
        assert after[key] == before[key], key


def test_bad_arguments_of_the_constructor_and_subscriptions(client, daemon):
    import pickle

    with pytest.raises(TypeError):
        ferry.Client(socket=5)
    with pytest.raises(TypeError):
        ferry.Client(daemon.socket, 5)
    with client.subscribe() as sub:
        with pytest.raises(ValueError):
            sub.read(timeout_ms=-3)
        with pytest.raises(TypeError):
            sub.read(timeout_ms="1")
    with pytest.raises(TypeError):
        pickle.dumps(client)  # a connection does not travel; ObjectIDs do
    client.put("p", b"1")
    with pytest.raises(TypeError):
        pickle.dumps(client.get("p"))
    with pytest.raises(TypeError):
        ferry.Buffer()
