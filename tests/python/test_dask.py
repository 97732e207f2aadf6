"""ferry.dask under a real Dask cluster: worker processes (LocalCluster with processes, and
workers of two ferryd nodes) that keep results in ferry and move them through it; results equal
to NumPy's; zero copy seen from the workers' own mappings; a worker killed mid-computation; a
store too small; nothing left in any store afterwards."""

import gc
import os
import signal
import sys
import time

import numpy as np
import pytest

import ferry
from conftest import wait_until

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
import ferry.dask  # noqa: E402 - needs distributed

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
START_S = 60  # a cluster of worker processes starting, under a loaded CI machine


@pytest.fixture(autouse=True)
def workers_import_this_module(monkeypatch):
    """Worker processes import the functions below by reference (cloudpickle), as this test."""
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", HERE + (os.pathsep + path if path else ""))
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__DAEMON", "False")


def local_cluster(n):
    return distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                    dashboard_address=None, memory_limit=0,
                                    silence_logs=40, timeout=START_S)


def held_in_arena():
    """On a worker: (values held in ferry, how many of their buffers lie in a ferry arena)."""
    from conftest import in_arena

    data = distributed.get_worker().memory_manager.data
    arrays = [v for v in data.held.values() if isinstance(v, np.ndarray)]
    return len(data.held), sum(in_arena(a.__array_interface__["data"][0]) for a in arrays)


def memory_seen():
    """On a worker: (its RSS, the memory its spill and pause thresholds see)."""
    worker = distributed.get_worker()
    return worker.monitor.proc.memory_info().rss, worker.monitor.get_process_memory()


def workload(seed, n=2048, chunk=512):
    """A computation whose tasks exchange chunks of 2 MiB: a transpose sum then a product."""
    x = da.random.RandomState(seed).random((n, n), chunks=(chunk, chunk))
    y = (x + x.T) * 2
    return x, (y @ y[:, :chunk]).sum(axis=1)


def expected(seed, n=2048, chunk=512):
    x = da.random.RandomState(seed).random((n, n), chunks=(chunk, chunk)).compute(
        scheduler="sync")
    y = (x + x.T) * 2
    return (y @ y[:, :chunk]).sum(axis=1)


def counts(client):
    """Summed over workers: (held, stored, received, refused)."""
    per = client.run(ferry.dask.ferry_objects).values()
    return tuple(sum(c[i] for c in per) for i in range(4))


def wait_drained(client, *stores, seconds=30):
    """Waits until the stores hold nothing, collecting the workers' garbage between looks (a
    value in a reference cycle holds its object until then); says what is left otherwise."""
    def drained():
        client.run(gc.collect)
        return all(c.list() == [] for c in stores)

    try:
        wait_until(drained, seconds, "the stores emptied")
    except AssertionError as e:
        left = [[(str(o["id"]), o["refcount"]) for o in c.list()] for c in stores]
        raise AssertionError(f"{e}: left {left}; the workers' (held, stored, received, "
                             f"refused): {client.run(ferry.dask.ferry_objects)}") from None


def test_results_equal_zero_copy_and_nothing_left(start_daemon):
    d = start_daemon("dask", "512M")
    # Without the active memory manager, which drops extra replicas every 2 s: what the workers
    # hold stays put between the two counts below.
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}), \
            local_cluster(3) as cluster, distributed.Client(cluster) as client:
        ferry.dask.install(client, socket=d.socket)
        _, result = workload(1)
        future = client.compute(result)
        got = future.result(timeout=120)
        np.testing.assert_allclose(got, expected(1), rtol=1e-12)
        held, stored, received, refused = counts(client)
        assert stored > 0 and received > 0 and refused == 0
        # Results that stay (persisted), computed here or received from another worker, are
        # held in the arena and read in place by their workers.
        x = workload(2)[0]
        xs = x.compute(scheduler="sync")
        x, y = client.persist([x, (x + x.T) * 2])
        distributed.wait([x, y], timeout=60)
        seen = client.run(held_in_arena)
        assert sum(h for h, _ in seen.values()) > 0
        assert all(h == a for h, a in seen.values()), seen
        assert counts(client)[2] > received  # y's tasks received chunks of x through ferry
        # The arena's pages a worker maps are not its memory to spill: its thresholds see less
        # than its RSS, by at least a chunk (each worker put or received some).
        mem = client.run(memory_seen)
        assert all(rss - seen >= 2 * MiB for rss, seen in mem.values()), mem
        # Regression: install() again replaces the plugin; what the workers hold stays theirs.
        ferry.dask.install(client, socket=d.socket)
        assert counts(client)[0] == sum(h for h, _ in seen.values())
        np.testing.assert_allclose(y.sum().compute(), (xs + xs.T).sum() * 2, rtol=1e-12)
        with ferry.Client(d.socket) as c:
            # Only what travelled is in the store, once however many workers hold it.
            assert 0 < len(c.list()) <= 32 + 16
            del x, y, future
            wait_drained(client, c)
            assert c.stats()["deleted_unused"] >= stored


def slow_square(block):
    time.sleep(1.0)
    return block * block


def keys_held():
    return len(distributed.get_worker().data)


def test_a_worker_killed_mid_computation(start_daemon):
    d = start_daemon("kill", "512M")
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        ferry.dask.install(client, socket=d.socket)
        x = da.random.RandomState(3).random((2048, 2048), chunks=(512, 512))
        result = (x.map_blocks(slow_square) + x.T).sum(axis=0)
        future = client.compute(result)
        pids = client.run(os.getpid)
        # Mid-computation: some results in the workers (of 16 slow ones, 8 s of work), not all.
        wait_until(lambda: sum(client.run(keys_held).values()) >= 4, 60, "results before the kill")
        assert not future.done()
        victim = sorted(pids.values())[0]
        os.kill(victim, signal.SIGKILL)
        got = future.result(timeout=180)
        xs = da.random.RandomState(3).random((2048, 2048), chunks=(512, 512)).compute(
            scheduler="sync")
        np.testing.assert_allclose(got, (xs * xs + xs.T).sum(axis=0), rtol=1e-12)
        del future
    # Once the workers are gone, the store holds nothing: no object the dead worker made or
    # marked stays behind. (Checked with the cluster still up, one object was once left on CI
    # with one reference, held by a live worker whose Dask keys were all released; the cause is
    # not found: see the closing note of issue 28.)
    with ferry.Client(d.socket) as c:
        wait_until(lambda: c.list() == [], 30, "the store emptied")


def test_a_full_store_sends_results_dasks_way(start_daemon):
    d = start_daemon("full", "8M")  # 64 chunks of 2 MiB, half of them travelling: most stay out
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        ferry.dask.install(client, socket=d.socket)
        x = da.random.RandomState(4).random((4096, 4096), chunks=(512, 512))
        (y,) = client.persist([x + x.T])
        distributed.wait(y, timeout=120)
        got = y.sum(axis=0).compute()
        xs = da.random.RandomState(4).random((4096, 4096), chunks=(512, 512)).compute(
            scheduler="sync")
        np.testing.assert_allclose(got, (xs + xs.T).sum(axis=0), rtol=1e-12)
        held, stored, received, refused = counts(client)
        assert refused > 0 and stored > 0
        del y
        with ferry.Client(d.socket) as c:
            wait_drained(client, c)


def spec_cluster(a, b):
    """A scheduler and a worker process on each of the daemons a and b (its FERRY_SOCKET)."""
    workers = {
        name: {"cls": distributed.Nanny,
               "options": {"nthreads": 1, "memory_limit": 0, "env": {"FERRY_SOCKET": node.socket},
                           "silence_logs": 40}}
        for name, node in (("a", a), ("b", b))
    }
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": None}}
    return distributed.SpecCluster(workers=workers, scheduler=scheduler, silence_logs=40)


def test_two_nodes(cluster):
    a, b = cluster
    with spec_cluster(a, b) as spec, distributed.Client(spec) as client:
        ferry.dask.install(client)  # each worker's own default socket: its node's
        _, result = workload(5)
        got = client.compute(result).result(timeout=180)
        np.testing.assert_allclose(got, expected(5), rtol=1e-12)
        held, stored, received, refused = counts(client)
        assert stored > 0 and received > 0 and refused == 0
        with ferry.Client(a.socket) as ca, ferry.Client(b.socket) as cb:
            sa, sb = ca.stats(), cb.stats()
            fetched = sa["transfers_in"] + sb["transfers_in"]
            assert fetched > 0  # received across the nodes through ferry's transfer
            # References carry their producer's location: each was asked of it first, but for
            # a producer's node that wants its own result back after its copy went (Dask
            # dropped it there): its location names itself, and the directory is asked.
            hints = sa["fetch_hints"] + sb["fetch_hints"]
            assert hints + sa["fetch_hints_self"] + sb["fetch_hints_self"] == fetched
            assert hints > 0
            assert sa["fetch_hint_misses"] + sb["fetch_hint_misses"] == 0
            wait_drained(client, ca, cb)


def test_references_that_cannot_be_got_turn_into_bytes(start_daemon):
    """Regression: two workers on daemons of no common cluster cannot get each other's
    references. install() says so; past that, Dask asks the same worker again after a failed
    transfer, which must then send bytes, or the computation retries for ever."""
    a, b = start_daemon("alone-a", "256M"), start_daemon("alone-b", "256M")
    with spec_cluster(a, b) as spec, distributed.Client(spec) as client:
        with pytest.raises(ValueError, match="cannot fetch from each other"):
            ferry.dask.install(client)
        _, result = workload(6)
        got = client.compute(result).result(timeout=120)
        np.testing.assert_allclose(got, expected(6), rtol=1e-12)
