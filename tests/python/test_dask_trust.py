"""ferry.dask trusts nothing it did not make: a reference names only objects a worker of this
Dask cluster stored, a worker unpickles only a pickle stream with the digest its producer
recorded, and a reference never marks for deletion an object the worker did not fetch. The
family's functions run here in one process, as a worker's would, against a real ferryd."""

import gc
import hashlib
import mmap
import os

import numpy as np
import pytest

import ferry

pytest.importorskip("distributed")
import ferry.dask as fd  # noqa: E402 - needs distributed
from conftest import wait_until  # noqa: E402

MiB = 1 << 20


@pytest.fixture
def worker(client):
    """This process set up as a worker of a Dask cluster whose key is fixed here."""
    saved = dict(fd._state)
    fd._state.update(client=client, data=fd.FerryData({}, threshold=1), key=b"k" * 32)
    yield client
    fd._state.clear()
    fd._state.update(saved)


def reference_of(value):
    """What a worker's get_data reply carries for value: its reference, stored on first ask."""
    token = fd._answering_peer.set(True)
    try:
        header, frames = fd._dumps(value)
    finally:
        fd._answering_peer.reset(token)
    assert frames == []
    return header


def arena_writable(daemon):
    """The daemon's arena mapped writable through its own descriptor (a local user who kept the
    descriptor HELLO passes could map it so)."""
    fds = f"/proc/{daemon.proc.pid}/fd"
    for name in os.listdir(fds):
        if os.readlink(os.path.join(fds, name)).startswith("/memfd:ferry-arena"):
            with open(os.path.join(fds, name), "r+b") as f:
                return mmap.mmap(f.fileno(), 0)
    raise AssertionError("no arena descriptor in ferryd")


def test_a_reference_round_trips_and_names_no_object_id(worker):
    value = np.arange(MiB // 8, dtype=np.int64)
    header = reference_of(value)
    assert set(header) == {"nonce", "stream"}
    got = fd._get(header)
    assert np.array_equal(got, value) and not got.flags.writeable
    assert reference_of(got) == header  # handed on by the same reference


def test_a_reference_cannot_name_another_applications_object(worker, client):
    """Old-style references (an ObjectID) and references under another key name nothing of
    another application: refused, its kept object untouched."""
    theirs = ferry.ObjectID.random()
    client._put_parts(theirs, ferry.pickle_parts(np.ones(1000)), True)
    with pytest.raises(fd.TransferFailed, match="malformed"):
        fd._get({"object": str(theirs)})
    header = reference_of(np.zeros(MiB))
    fd._state["key"] = b"another cluster's key".ljust(32)
    with pytest.raises(fd.TransferFailed):
        fd._get(header)  # its id, under this key, is an object nobody stored
    assert client.contains(theirs)


def test_a_rewritten_pickle_stream_is_never_unpickled(worker, daemon, client):
    """A stream rewritten in the arena after the put (through a writable mapping of the arena's
    descriptor) is refused before pickle sees it."""
    value = np.arange(MiB // 8, dtype=np.int64)
    header = reference_of(value)
    oid, _ = fd._reference(header)
    stream = ferry.pickle_parts(value)[0]
    arena = arena_writable(daemon)
    try:
        at = arena.find(stream)
        assert at >= 0 and arena.find(stream, at + 1) < 0
        arena[at + len(stream) // 2] ^= 0x01
    finally:
        arena.close()
    with pytest.raises(fd.TransferFailed, match="not the one its producer stored"):
        fd._get(header)
    assert client.contains(oid)


def test_a_reference_marks_every_copy_it_gets(worker, client):
    """Regression (py_test_dask's test_two_nodes left a copy behind): a reference marks the copy
    it gets delete-when-unused even when one was here before the get. A look before the get
    (contains) saw a copy that another worker's release deleted; the get then fetched a new one,
    left unmarked, which outlived every holder. Only ferry.dask makes objects under its key, and
    it marks each at its put, so marking again changes nothing but a copy like that one."""
    value = np.arange(MiB // 8, dtype=np.int64)
    parts = ferry.pickle_parts(value)
    nonce = os.urandom(16)
    digest = hashlib.sha256(parts[0]).digest()
    oid = fd._object_id(fd._state["key"], nonce, digest)
    client._put_parts(oid, parts)  # here before the get, unmarked: the copy the race left
    got = fd._get({"nonce": nonce.hex(), "stream": digest.hex()})
    assert np.array_equal(got, value)
    del got
    fd._held.clear()
    gc.collect()
    # Gone with its last holder: the release travels on the worker's connection, this look on
    # another, so the daemon may answer the look first.
    wait_until(lambda: not client.contains(oid), 10, "the copy deleted with its last holder")
