"""ferry.ObjectID and the id rule every call applies (the ferry command line's)."""

import hashlib
import os
import pickle
import subprocess

import pytest

import ferry
from conftest import BIN_DIR


def test_raw_hex_and_names():
    raw = bytes(range(20))
    assert ferry.ObjectID(raw).binary() == raw
    assert ferry.ObjectID(raw.hex()) == ferry.ObjectID(raw)
    assert ferry.ObjectID(raw.hex().upper()) == ferry.ObjectID(raw)
    assert ferry.ObjectID(raw.hex().encode()) == ferry.ObjectID(raw)
    assert ferry.ObjectID("weights").binary() == hashlib.sha1(b"weights").digest()
    assert ferry.ObjectID(b"weights") == ferry.ObjectID("weights")
    assert ferry.ObjectID("gr\u00fc\u00df").binary() == hashlib.sha1("gr\u00fc\u00df".encode()).digest()
    # 19 or 21 bytes are names, and so is a name with NUL bytes.
    assert ferry.ObjectID(raw[:19]).binary() == hashlib.sha1(raw[:19]).digest()
    assert ferry.ObjectID(b"a\0b").binary() == hashlib.sha1(b"a\0b").digest()
    # 40 characters that are not all hex digits are a name.
    name = "g" * 40
    assert ferry.ObjectID(name).binary() == hashlib.sha1(name.encode()).digest()
    assert ferry.ObjectID.from_name(raw.hex()).binary() == hashlib.sha1(raw.hex().encode()).digest()
    assert ferry.ObjectID(ferry.ObjectID("x")) == ferry.ObjectID("x")


def test_printing_hashing_ordering_pickling():
    oid = ferry.ObjectID("x")
    assert str(oid) == oid.hex() == hashlib.sha1(b"x").hexdigest()
    assert repr(oid) == f"ObjectID('{oid.hex()}')"
    assert bytes(oid) == oid.binary()
    assert {oid: 1}[ferry.ObjectID("x")] == 1
    assert len({ferry.ObjectID("x"), ferry.ObjectID("x"), ferry.ObjectID("y")}) == 2
    a, b = sorted([ferry.ObjectID(b"\x02" * 20), ferry.ObjectID(b"\x01" * 20)])
    assert a.binary() == b"\x01" * 20 and a < b and a != b
    assert oid != "x"  # an ObjectID equals only ObjectIDs
    assert pickle.loads(pickle.dumps(oid)) == oid


def test_random_ids_differ():
    ids = {ferry.ObjectID.random() for _ in range(1000)}
    assert len(ids) == 1000


@pytest.mark.parametrize("bad", [None, 5, 1.5, ["x"], bytearray(b"x" * 20)])
def test_wrong_types_raise_type_error(bad):
    with pytest.raises(TypeError):
        ferry.ObjectID(bad)


@pytest.mark.parametrize("empty", ["", b""])
def test_empty_name_raises_value_error(empty):
    with pytest.raises(ValueError):
        ferry.ObjectID(empty)
    with pytest.raises(ValueError):
        ferry.ObjectID.from_name(empty)


def test_the_cli_and_python_name_objects_alike(client, daemon):
    client.put("model weights", b"abc")
    hexid = ferry.ObjectID("model weights").hex()
    cli = os.path.join(BIN_DIR, "ferry")
    for name in ("model weights", hexid):
        out = subprocess.run([cli, "--socket", daemon.socket, "get", name], capture_output=True,
                             timeout=10)
        assert out.returncode == 0 and out.stdout == b"abc", out.stderr
    subprocess.run([cli, "--socket", daemon.socket, "put", "from-cli", "-"], input=b"xyz",
                   check=True, timeout=10)
    assert bytes(client.get("from-cli")) == b"xyz"
    assert bytes(client.get(b"from-cli")) == b"xyz"


def test_a_standalone_nodes_ids_carry_no_location(client):
    """A node without a directory has no location: its puts return plain ids, and location()
    says why."""
    assert client.put("no-location", b"1").location is None
    assert all(i.location is None for i in client.put_many([("nl-0", b"0"), ("nl-1", b"1")]))
    with pytest.raises(ferry.DirectoryUnavailable):
        client.location()
