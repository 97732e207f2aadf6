"""Objects kept until let go (Client.keep, put(keep=True)): a producer's object waits for its
consumer however much else is put meanwhile; a store full of kept objects says so; evictions of
objects nobody read are counted and logged."""

import os

import numpy as np
import pytest

import ferry

MiB = 1 << 20


def fill(c, n, size=4 * MiB):
    """Puts n objects of size bytes nobody reads: enough to evict all that is evictable."""
    for _ in range(n):
        c.put(ferry.ObjectID.random(), bytes(size))


def test_a_kept_object_outlives_pressure_and_its_producer(start_daemon):
    d = start_daemon("keep", "32M")
    with ferry.Client(d.socket) as producer:
        kept = producer.put_object({"w": np.arange(1 << 20, dtype=np.uint32)}, keep=True)
        plain = producer.put(ferry.ObjectID.random(), b"x" * MiB, keep=False)
        big = producer.put(ferry.ObjectID.random(), bytes(2 * MiB), keep=True)
    with ferry.Client(d.socket) as other:
        fill(other, 24)  # 96 MiB through a 32 MiB arena
        assert not other.contains(plain)
        assert other.get_object(kept)["w"][-1] == (1 << 20) - 1
        assert other.contains(big)
        st = other.stats()
        assert st["kept_objects"] == 2
        assert st["kept_bytes"] >= 6 * MiB
        assert st["evicted_unread"] >= 15  # the plain one and most of the fill
    assert "that no reader had taken" in d.log()


def test_kept_objects_stay_within_max_kept(start_daemon):
    d = start_daemon("bound", "16M")  # --max-kept: half the arena by default
    with ferry.Client(d.socket) as c:
        c.put(ferry.ObjectID.random(), bytes(7 * MiB), keep=True)
        oid = ferry.ObjectID.random()
        with pytest.raises(ferry.StoreFull, match="--max-kept"):
            c.put(oid, bytes(2 * MiB), keep=True)
        assert not c.contains(oid)  # refused before its seal: not stored unkept either
        c.put(oid, bytes(2 * MiB))  # unkept puts still have room
        with pytest.raises(ferry.StoreFull, match="--max-kept"):
            c.keep(oid)


def test_a_store_full_of_kept_objects_refuses_puts_and_says_so(start_daemon):
    d = start_daemon("full", "16M", "--max-kept", "16M")
    with ferry.Client(d.socket) as c:
        ids = [c.put(ferry.ObjectID.random(), bytes(3 * MiB), keep=True) for _ in range(5)]
        with pytest.raises(ferry.StoreFull, match="full of kept objects"):
            c.put(ferry.ObjectID.random(), bytes(3 * MiB))
        c.unkeep(ids[0])
        c.put(ferry.ObjectID.random(), bytes(3 * MiB))  # takes ids[0]'s room
        assert not c.contains(ids[0])
        c.delete(ids[1])
        assert c.stats()["kept_objects"] == 3


def test_keep_and_unkeep_name_missing_objects(client):
    oid = ferry.ObjectID.random()
    with pytest.raises(ferry.ObjectNotFound):
        client.keep(oid)
    with pytest.raises(ferry.ObjectNotFound):
        client.unkeep(oid)


def test_evictions_of_read_objects_are_not_counted_unread(start_daemon):
    d = start_daemon("read", "16M")
    with ferry.Client(d.socket) as c:
        oid = c.put(ferry.ObjectID.random(), bytes(4 * MiB))
        c.get(oid).release()
        fill(c, 8)
        assert not c.contains(oid)
        st = c.stats()
        assert st["evicted_objects"] - st["evicted_unread"] >= 1


def test_with_a_spill_directory_kept_objects_move_to_disk_and_come_back(start_daemon, workdir):
    spill = os.path.join(workdir, "spill")
    d = start_daemon("spill", "16M", "--spill-dir", spill)
    with ferry.Client(d.socket) as c:
        data = [np.full(3 * MiB, i, dtype=np.uint8) for i in range(12)]  # 36 MiB through 16
        ids = [c.put(ferry.ObjectID.random(), a, keep=True) for a in data]
        assert c.stats()["spilled_objects"] > 0
        for oid, a in zip(ids, data):
            assert np.array_equal(np.frombuffer(c.get(oid, timeout_ms=10000), np.uint8), a)
        assert c.stats()["kept_objects"] == 12
