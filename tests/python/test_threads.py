"""One Client shared by threads: waits release the GIL and never hold up the others."""

import gc
import signal
import threading
import time

import numpy as np
import pytest

import ferry


def test_a_blocked_get_does_not_block_a_put_of_the_same_client(client):
    got = {}

    def reader():
        got["buf"] = client.get("produced", timeout_ms=20_000)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.2)  # the reader is waiting now
    client.put("other", b"x")  # must not wait behind the blocked get:
    assert t.is_alive()  # it returned while the get still waits for "produced"
    buf = client.create("produced", 3)
    memoryview(buf)[:] = b"abc"
    client.seal("produced")
    t.join(20)
    assert not t.is_alive() and bytes(got["buf"]) == b"abc"


def test_waiting_releases_the_gil(client):
    count = 0
    stop = threading.Event()

    def spin():
        nonlocal count
        while not stop.is_set():
            count += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        before = count
        with pytest.raises(ferry.Timeout):
            client.get("never", timeout_ms=300)
        progressed = count - before
    finally:
        stop.set()
        t.join()
    assert progressed > 10_000, progressed


def test_threads_share_a_client(client):
    errors = []

    def work(k):
        try:
            for i in range(200):
                name = f"t{k}-{i}"
                data = np.full(100 + i, k, dtype=np.uint8)
                client.put(name, data)
                with client.get(name) as buf:
                    assert bytes(buf) == data.tobytes()
                arr = np.frombuffer(client.get(name), dtype=np.uint8)
                assert arr[0] == k
                del arr
                client.delete(name)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    gc.collect()
    assert client.list() == []


def test_more_waiters_than_waiting_connections(client, daemon):
    n = 70  # above the 64 waiting connections a Client keeps
    results = [None] * n

    def wait(i):
        try:
            results[i] = bytes(client.get(f"w{i}", timeout_ms=30_000))
        except Exception as e:
            results[i] = e

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    with ferry.Client(daemon.socket) as producer:
        producer.put_many([(f"w{i}", str(i).encode()) for i in range(n)])
    for t in threads:
        t.join(30)
    assert results == [str(i).encode() for i in range(n)]
    assert client.stats()["clients"] <= 1 + 64 + 1


def test_a_signal_interrupts_an_endless_get(client):
    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(Interrupted):
            client.get("never", timeout_ms=-1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    client.put("after", b"1")  # the client is still usable
    assert bytes(client.get("after")) == b"1"
