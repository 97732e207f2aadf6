"""Two daemons and a Redis directory on this host: fetch, get with fetch, nodes, where, and
notifications read through selectors and asyncio."""

import asyncio
import os
import selectors
import signal
import threading
import time

import numpy as np
import pytest

import ferry
from conftest import in_arena, wait_until


def test_fetch_across_two_daemons(cluster):
    a, b = cluster
    data = np.random.default_rng(3).standard_normal(1 << 18)
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        ca.put("w", data, metadata=b"float64")
        oid = ca.put_object({"arr": data, "tag": "t"}, id="obj")
        assert not cb.contains("w")
        buf = cb.get("w", timeout_ms=10_000, fetch=True)
        arr = np.frombuffer(buf, dtype=np.float64)
        assert np.array_equal(arr, data) and buf.metadata == b"float64"
        assert in_arena(arr.__array_interface__["data"][0])
        assert cb.hash("w") == ca.hash("w")
        cb.fetch(oid, timeout_ms=10_000)
        assert cb.contains(oid)
        back = cb.get_object(oid)
        assert np.array_equal(back["arr"], data) and back["tag"] == "t"
        holders = sorted(n["id"] for n in cb.where("w"))
        assert holders == ["a", "b"]
        nodes = {n["id"]: n for n in cb.nodes()}
        assert set(nodes) == {"a", "b"} and nodes["b"]["self"] and not nodes["a"]["self"]
        assert nodes["a"]["address"].startswith("127.0.0.1:") and "tcp" in nodes["a"]["transports"]
        stats = cb.stats()
        assert stats["transfers_in"] == 2 and stats["directory_up"] == 1


def test_fetch_with_default_arguments(cluster):
    """A fetch with its defaults waits for the transfer (it waited 0 ms, and always failed with
    "not sealed within 0 ms" while a live node held the object); a plain get still does not
    wait."""
    a, b = cluster
    data = os.urandom(1 << 20)
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        ca.put("defaults-get", data)
        ca.put("defaults-fetch", data)
        # A get looks here only: on a node of a cluster its failure says how to pull it.
        with pytest.raises(ferry.ObjectNotFound, match=r"'defaults-get'.*fetch=True"):
            cb.get("defaults-get")
        assert bytes(cb.get("defaults-get", fetch=True)) == data
        cb.fetch(["defaults-fetch"])
        assert bytes(cb.get("defaults-fetch")) == data
        oid = ca.put_object({"arr": data}, id="defaults-object")
        assert cb.get_object(oid, fetch=True)["arr"] == data


def test_fetch_at_a_location_asks_no_directory(cluster):
    """A get or fetch given the location of the node that put the objects asks that node and
    not the directory: one str for all ids, or one per id (None: looked up); a location that
    is no location is ignored, counted, and the id looked up; a wrong type or count raises."""
    a, b = cluster
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        loc = ca.location()
        assert loc.startswith("ferry1;a;") and loc == ca.location()
        for i in range(4):
            ca.put(f"located-{i}", bytes([i]) * 5000)
        lookups = cb.stats()["directory_lookups"]
        assert bytes(cb.get("located-0", fetch=True, at=loc)) == bytes([0]) * 5000
        cb.fetch(["located-1", "located-2"], at=[loc, loc], timeout_ms=10_000)
        stats = cb.stats()
        assert stats["directory_lookups"] == lookups and stats["fetch_hints"] == 3
        wait_until(lambda: cb.where("located-3"))
        cb.fetch(["located-3"], at="not a location")
        assert cb.stats()["fetch_hints_refused"] == 1 and bytes(cb.get("located-3"))
        with pytest.raises(TypeError):
            cb.fetch("located-0", at=b"bytes")
        with pytest.raises(ValueError):
            cb.fetch(["located-0", "located-1"], at=[loc])
        cb.fetch("located-0", at="x" * 5000)  # too long to be one: ignored, as garbage is
        cb.fetch(["located-0"], at=[None])


def test_a_location_of_the_fetching_node_itself_is_looked_up(cluster):
    """The node that put an object, its copy gone, fetches it back by the reference's location
    (its own): the directory is asked, another holder gives it, and that is counted as
    fetch_hints_self, not as a hint (ferry.dask's workers do this when Dask drops a result
    where it was made and wants it back)."""
    a, b = cluster
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        oid = ca.put("back-home", b"h" * 4096)
        assert bytes(cb.get(oid, fetch=True, at=oid.location)) == b"h" * 4096
        ca.delete(oid)
        wait_until(lambda: [n["id"] for n in cb.where(oid)] == ["b"])
        before = ca.stats()
        assert bytes(ca.get(oid, fetch=True, at=oid.location)) == b"h" * 4096
        after = ca.stats()
        assert after["fetch_hints_self"] == before["fetch_hints_self"] + 1
        assert after["fetch_hints"] == before["fetch_hints"]
        assert after["transfers_in"] == before["transfers_in"] + 1


def test_a_fetching_get_sends_no_get_before_its_fetch(cluster):
    """get(fetch=True) looks in the shared index, then fetches what it lacks: no get goes to
    the daemon before the fetch (a message less per remote read), and an object at hand is
    read with no message at all. Every get counts in gets, found or not, fast or not."""
    a, b = cluster
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        oid = ca.put("remote-once", b"r" * 4096)
        wait_until(lambda: cb.where("remote-once"))
        before = cb.stats()
        assert bytes(cb.get(oid, fetch=True)) == b"r" * 4096
        assert cb.stats()["gets"] == before["gets"] + 1  # the one after the fetch
        assert bytes(cb.get(oid, fetch=True)) == b"r" * 4096
        after = cb.stats()
        assert after["gets"] == before["gets"] + 2
        assert after["fast_gets"] == before["fast_gets"] + 2


def test_ids_that_puts_return_carry_their_location(cluster):
    """put, put_many and put_object return ObjectIDs that carry their node's location; pickled
    and unpickled on the way to another node they keep it, and get or fetch there asks that
    node and not the directory. Equality and hashing ignore it; an explicit at wins."""
    import pickle
    a, b = cluster
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        loc = ca.location()
        one = ca.put("carried-one", b"1" * 3000)
        many = ca.put_many([("carried-many-0", b"m0"), ("carried-many-1", b"m1")])
        obj = ca.put_object({"k": 1})
        assert one.location == loc and all(i.location == loc for i in many)
        assert obj.location == loc
        assert one == ferry.ObjectID("carried-one") and ferry.ObjectID("carried-one").location is None
        assert hash(one) == hash(ferry.ObjectID("carried-one"))
        assert ferry.ObjectID(one).location == loc
        assert ferry.ObjectID(one, location="ferry1;x").location == "ferry1;x"
        with pytest.raises(TypeError):
            ferry.ObjectID("x", location=5)
        travelled = pickle.loads(pickle.dumps([one, *many, obj]))
        assert [t.location for t in travelled] == [loc] * 4
        lookups = cb.stats()["directory_lookups"]
        assert bytes(cb.get(travelled[0], fetch=True)) == b"1" * 3000
        cb.fetch(travelled[1:3])
        assert cb.get_object(travelled[3], fetch=True) == {"k": 1}
        stats = cb.stats()
        assert stats["directory_lookups"] == lookups and stats["fetch_hints"] == 4


def test_fetch_waits_for_a_later_seal_and_times_out(cluster):
    a, b = cluster
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        with pytest.raises(ferry.Timeout) as e:
            cb.fetch(["nowhere", "nor-here"], timeout_ms=300)
        assert len(e.value.missing) == 2
        with pytest.raises(ferry.Timeout):
            cb.get("nowhere", timeout_ms=200, fetch=True)
        ca.put("nowhere", b"late")
        cb.fetch("nowhere", timeout_ms=10_000)
        assert bytes(cb.get("nowhere")) == b"late"


def test_fetch_on_a_standalone_node(client):
    with pytest.raises(ferry.StandaloneNode, match="started without --directory"):
        client.fetch("x", timeout_ms=1000)
    with pytest.raises(ferry.StandaloneNode):
        client.nodes()
    with pytest.raises(ferry.StandaloneNode):
        client.delete("x", cluster=True)
    client.put("local", b"1")
    client.fetch("local")  # already local: nothing to ask anyone
    assert bytes(client.get("local", fetch=True)) == b"1"
    with pytest.raises(ferry.ObjectNotFound) as e:  # nowhere else to look: no fetch hint
        client.get("x")
    assert "fetch=True" not in str(e.value)


def until(cond, seconds=10.0):
    """True once cond() is, polling every 20 ms for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_cluster_delete_with_a_reader_holding_a_reference(cluster):
    a, b = cluster
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        ca.put("doomed", b"d" * 5000)
        held = cb.get("doomed", timeout_ms=10_000, fetch=True)
        assert until(lambda: len(ca.where("doomed")) == 2)
        heard = cb.stats()["deletes_heard"]
        ca.delete("doomed", cluster=True)
        assert not ca.contains("doomed")
        assert until(lambda: not cb.contains("doomed")), "b never dropped its copy"
        assert bytes(held) == b"d" * 5000  # the reader's copy lives until released
        assert ca.where("doomed") == [] and cb.where("doomed") == []
        assert cb.stats()["deletes_heard"] == heard + 1
        held.release()
        with pytest.raises(ferry.ObjectNotFound):
            cb.get("doomed", timeout_ms=0)


def told_of_delete(cb, a, b):
    """What node b heard, and both nodes' logs: a fetch that outlived a cluster delete was seen
    twice in loaded suite runs and never alone, so a failure keeps its evidence."""
    s = cb.stats()
    keys = ("fetches", "deletes_heard", "directory_up", "directory_reconnects")
    return f"b: {({k: s.get(k) for k in keys})}\na's log:\n{a.log()}\nb's log:\n{b.log()}"


def test_cluster_delete_fails_a_waiting_fetch(cluster):
    a, b = cluster
    errors = []

    def wait_for_it():
        with ferry.Client(b.socket) as cb:
            try:
                cb.fetch("awaited", timeout_ms=20_000)
            except ferry.Error as e:
                errors.append(e)

    with ferry.Client(b.socket) as cb, ferry.Client(a.socket) as ca:
        before = cb.stats()["fetches"]
        t = threading.Thread(target=wait_for_it)
        t.start()
        assert until(lambda: cb.stats()["fetches"] > before)
        ca.delete("awaited", cluster=True)
        t.join(15)
        assert not t.is_alive(), told_of_delete(cb, a, b)
    assert len(errors) == 1 and isinstance(errors[0], ferry.ObjectNotFound)
    assert "deleted" in str(errors[0])


def test_subscribe_with_selectors(client, daemon):
    with client.subscribe() as sub, ferry.Client(daemon.socket) as other:
        sel = selectors.DefaultSelector()
        sel.register(sub, selectors.EVENT_READ)
        assert sel.select(timeout=0) == []
        assert sub.read(timeout_ms=0) is None
        other.put("n", b"12345", metadata=b"mm")
        assert len(sel.select(timeout=10)) == 1
        note = sub.read(timeout_ms=0)
        assert note == ("sealed", ferry.ObjectID("n"), 5, 2)
        assert (note.event, note.id, note.size, note.metadata_size) == note
        other.delete("n")
        assert next(iter(sub)).event == "deleted"
        sel.close()
    assert sub.closed


def test_subscribe_with_asyncio(client, daemon):
    async def main():
        loop = asyncio.get_running_loop()
        got = asyncio.Queue()
        sub = client.subscribe()

        def readable():
            while (note := sub.read(timeout_ms=0)) is not None:
                got.put_nowait(note)

        loop.add_reader(sub.fileno(), readable)
        with ferry.Client(daemon.socket) as other:
            for i in range(3):
                await loop.run_in_executor(None, other.put, f"a{i}", b"x")
            notes = [await asyncio.wait_for(got.get(), 10) for _ in range(3)]
        loop.remove_reader(sub.fileno())
        sub.close()
        return notes

    notes = asyncio.run(main())
    assert [n.id for n in notes] == [ferry.ObjectID(f"a{i}") for i in range(3)]


def test_fetch_waits_out_a_directory_that_stops_answering(cluster, redis_server):
    """Redis stopped for longer than a wait round (100 ms) and the directory's request timeout
    (1 s): the fetch waits on and completes once Redis answers again. It raised
    DirectoryUnavailable at the first round that ended with the directory down (a 32-node
    shuffle on the testbed failed so, with 600 s of its timeout left)."""
    a, b = cluster
    redis = redis_server[1]
    data = os.urandom(64 << 10)
    with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
        ca.put("directory-stalled", data)
        wait_until(lambda: ca.where("directory-stalled"), what="the object listed")
        t0 = time.monotonic()
        redis.send_signal(signal.SIGSTOP)
        resume = threading.Timer(2.5, redis.send_signal, (signal.SIGCONT,))
        resume.start()
        try:
            with cb.get("directory-stalled", timeout_ms=20000, fetch=True) as buf:
                assert bytes(buf) == data
            assert time.monotonic() - t0 >= 2.0  # it did wait for Redis
        finally:
            resume.cancel()
            redis.send_signal(signal.SIGCONT)
