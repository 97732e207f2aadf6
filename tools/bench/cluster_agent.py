"""cluster_agent.py - ferry-bench cluster's hands inside one node's network namespace.

Run by cluster_bench.py through `testbed.sh exec STATE NODE python3 cluster_agent.py`, it
serves the node's ferryd (FERRY_SOCKET) through the Python module and answers one JSON
request per line on stdin with one JSON line on stdout, so that every time it reports is
taken in this process, around the call alone (no process start in it). Requests that name
"at" start at that CLOCK_MONOTONIC time, which is one clock for every namespace: that is how
the nodes of a broadcast or a shuffle start together.

  {"op": "put", "names": [...], "size": S}     objects of S bytes (a pattern, seeded per name),
                                               answered once the directory lists them
  {"op": "fetch", "names": [...], "at": T}     fetch them all in one call: start and end times
  {"op": "reads", "names": [...], "loc": L, "gap": G}
                                               get(fetch=True) each in turn: microseconds each;
                                               with loc (a holder's location), at it; with gap,
                                               G seconds idle before each (outside its time)
  {"op": "fetch_many", "names": [...], "loc": L}  fetch them in one call (at loc): seconds
  {"op": "location"}                           the node's location (Client.location())
  {"op": "redis_gets", "host": H, "size": S, "count": K, "pipeline": B}
                                               SET one value of S bytes in the Redis at H:6379,
                                               then K GETs of it: microseconds each, or with
                                               pipeline the seconds of one pipeline of K
  {"op": "delete", "names": [...]}             delete the local copies
  {"op": "drop_all"}                           delete every object of the node
  {"op": "echo", "addr": A, "port": P}         serve a TCP echo (for round trips) on A:P
  {"op": "rtt", "addr": A, "port": P, "count": K}  K one-byte round trips: microseconds each
  {"op": "raw_recv", "addr": A, "port": P, "size": S}  receive S bytes of one TCP stream ...
  {"op": "raw_send", "addr": A, "port": P, "size": S, "at": T}   ... sent by another agent:
                                               when it began (its connect included)
  {"op": "raw_result"}                         the receiver's bytes, and when the last came
  {"op": "mesh", "addr": A, "peers": [...], "port": P, "size": S, "at": T}
                                               raw TCP all-to-all: S bytes to and from each peer
  {"op": "link"}                               eth0's rx and tx byte counters
  {"op": "tcp"}                                the namespace's TCP loss counters
  {"op": "stats"}                              the daemon's counters
Answers carry "ok": true, or "ok": false and "error".
"""
import hashlib
import json
import os
import socket
import sys
import threading
import time

import ferry

TIMEOUT_MS = 600_000
CHUNK = 1 << 20


def pattern(name, size):
    """size bytes that differ per name, made fast: a random MiB (seeded by name) repeated."""
    block = hashlib.shake_256(name.encode()).digest(min(size, CHUNK))
    whole, rest = divmod(size, len(block)) if block else (0, 0)
    return block * whole + block[:rest]


def wait_until(at):
    while True:
        left = at - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.001))


def background(fn):
    """fn running on a daemon thread of its own: the thread."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


class Agent:
    def __init__(self):
        self.client = ferry.Client(os.environ["FERRY_SOCKET"])
        self.raw = None  # what the receiver thread got: bytes and end, or an error
        self.receiver = None
        # The handle a waiting get or fetch takes is made by the first one: made here, so
        # that no timed call pays for it.
        try:
            self.client.get("cluster-agent-warm-up", timeout_ms=1)
        except ferry.Timeout:
            pass

    def put(self, names, size):
        """Puts, and returns once each name is hashed and the directory lists it: a fetch that
        comes sooner waits for the holder's digest (SHA-256 at ~1.9 GB/s per core here),
        which is not a transfer's time. where() lists this node as soon as it holds a sealed
        copy; digest() waits for the hash."""
        for name in names:
            self.client.put(name, pattern(name, size))
        end = time.monotonic() + 30
        for name in names:
            self.client.digest(name)
            while not self.listed(name):
                if time.monotonic() > end:
                    raise RuntimeError(f"{name} not listed in the directory within 30 s")
                time.sleep(0.01)
        return {}

    def listed(self, name):
        """Whether the directory lists name; not yet while it does not answer (32 nodes
        putting at once on two cores have had a request outlast its 1 s)."""
        try:
            return bool(self.client.where(name))
        except ferry.DirectoryUnavailable:
            return False

    def fetch(self, names, at=None):
        if at is not None:
            wait_until(at)
        start = time.monotonic()
        self.client.fetch(names, timeout_ms=TIMEOUT_MS)
        return {"start": start, "end": time.monotonic()}

    def check(self, names, size):
        """Raises unless each name holds exactly the bytes its put made: compared in place, a
        block at a time (31 agents each copying 256 MiB twice ran the machine out of memory)."""
        for name in names:
            block = pattern(name, min(size, CHUNK))
            buf = self.client.get(name, timeout_ms=TIMEOUT_MS)
            try:
                view = memoryview(buf).cast("B")
                ok = len(view) == size and all(
                    view[at:at + len(block)] == block[:size - at]
                    for at in range(0, size, len(block)))
                view.release()
            finally:
                buf.release()
            if not ok:
                raise RuntimeError(f"{name}: other bytes than were put")
        return {}

    def reads(self, names, loc=None, gap=0):
        us = []
        for name in names:
            time.sleep(gap)
            t0 = time.perf_counter()
            buf = self.client.get(name, timeout_ms=TIMEOUT_MS, fetch=True, at=loc)
            us.append((time.perf_counter() - t0) * 1e6)
            buf.release()
        return {"us": us}

    def fetch_many(self, names, loc=None):
        t0 = time.perf_counter()
        self.client.fetch(names, timeout_ms=TIMEOUT_MS, at=loc)
        return {"s": time.perf_counter() - t0}

    def location(self):
        return {"location": self.client.location()}

    def redis_gets(self, host, size, count, pipeline=False):
        import redis  # python3-redis: the reference client, over the same link
        r = redis.Redis(host=host, port=6379)
        r.set("bench-value", b"v" * size)
        if pipeline:
            p = r.pipeline(transaction=False)
            for _ in range(count):
                p.get("bench-value")
            t0 = time.perf_counter()
            p.execute()
            out = {"s": time.perf_counter() - t0}
        else:
            us = []
            for _ in range(count):
                t0 = time.perf_counter()
                r.get("bench-value")
                us.append((time.perf_counter() - t0) * 1e6)
            out = {"us": us}
        r.close()
        return out

    def delete(self, names):
        for name in names:
            try:
                self.client.delete(name)
            except ferry.ObjectNotFound:
                pass
        return {}

    def drop_all(self):
        """Deletes every object of the node (after a failed workload)."""
        for entry in self.client.list():
            try:
                self.client.delete(entry["id"])
            except ferry.Error:
                pass
        return {}

    def echo(self, addr, port):
        srv = socket.create_server((addr, port))

        def serve():
            while True:
                conn, _ = srv.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with conn:
                    while (b := conn.recv(64)):
                        conn.sendall(b)

        background(serve)
        return {}

    def rtt(self, addr, port, count):
        with socket.create_connection((addr, port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            us = []
            for _ in range(count):
                t0 = time.perf_counter()
                s.sendall(b"x")
                if s.recv(1) != b"x":
                    raise RuntimeError("echo closed")
                us.append((time.perf_counter() - t0) * 1e6)
        return {"us": us}

    def raw_recv(self, addr, port, size, forward=None):
        """Receives size bytes on addr:port (a thread; raw_result says when they were in); with
        forward, passes each piece on to forward:port as it comes (a raw TCP relay chain)."""
        srv = socket.create_server((addr, port))
        srv.settimeout(60)  # a sender that never comes frees the port
        self.raw = None

        def receive():
            try:
                conn, _ = srv.accept()
                out = socket.create_connection((forward, port), timeout=30) if forward else None
                got, buf = 0, bytearray(CHUNK)
                with conn:
                    while got < size:
                        n = conn.recv_into(buf)
                        if not n:
                            break
                        got += n
                        if out:
                            out.sendall(memoryview(buf)[:n])
                if out:
                    out.close()
                self.raw = {"bytes": got, "end": time.monotonic()}
            except OSError as e:
                self.raw = {"error": str(e)}
            finally:
                srv.close()

        self.receiver = background(receive)
        return {}

    def raw_send(self, addr, port, size, at=None):
        """Sends size bytes to addr:port (at at, after connecting): when it began, connect
        included, as a fetch's time includes its request."""
        block = bytes(CHUNK)
        start = time.monotonic()
        with socket.create_connection((addr, port), timeout=30) as s:
            if at is not None:
                wait_until(at)
            while size > 0:
                k = min(size, CHUNK)
                s.sendall(memoryview(block)[:k])
                size -= k
        return {"start": start}

    def mesh(self, addr, peers, port, size, at):
        """Raw TCP all-to-all: receives size bytes from each of peers (addresses) on addr:port
        while sending size bytes to each of them, all starting at at: when the last byte in
        came."""
        srv = socket.create_server((addr, port), backlog=len(peers))
        got, errors, lock = [], [], threading.Lock()

        def receive(conn):
            n, buf = 0, bytearray(CHUNK)
            with conn:
                while n < size and (k := conn.recv_into(buf)):
                    n += k
            with lock:
                got.append((n, time.monotonic()))

        def accept():
            for _ in peers:
                conn, _ = srv.accept()
                background(lambda c=conn: receive(c))

        def send(peer):
            try:
                self.raw_send(peer, port, size, at)
            except OSError as e:
                errors.append(f"{peer}: {e}")

        background(accept)
        time.sleep(max(0.0, at - time.monotonic() - 0.2))  # every listener is up by then
        for peer in peers:
            background(lambda p=peer: send(p))
        deadline = time.monotonic() + 600
        while len(got) < len(peers) and time.monotonic() < deadline and not errors:
            time.sleep(0.001)
        srv.close()
        if errors or len(got) < len(peers) or any(n != size for n, _ in got):
            raise RuntimeError(f"mesh: {errors or got}")
        return {"end": max(t for _, t in got)}

    def raw_result(self):
        if self.receiver:
            self.receiver.join(timeout=600)
        if self.raw is None or "error" in self.raw:
            raise RuntimeError(f"raw stream: {self.raw}")
        return dict(self.raw)

    def stats(self):
        """The daemon's counters (ferry stat)."""
        return {"stats": dict(self.client.stats())}

    def link(self):
        base = "/sys/class/net/eth0/statistics/"
        return {k: int(open(base + k).read()) for k in ("rx_bytes", "tx_bytes")}

    def tcp(self):
        """The namespace's TCP counters of losses (/proc/net/snmp and netstat are per network
        namespace): segments sent again, retransmission timeouts, tail loss probes."""
        want = {"Tcp": ("RetransSegs",), "TcpExt": ("TCPTimeouts", "TCPLossProbes")}
        out = {}
        for path in ("/proc/net/snmp", "/proc/net/netstat"):
            lines = open(path).read().splitlines()
            for names, values in zip(lines[::2], lines[1::2]):
                kind, names = names.split(":", 1)
                got = dict(zip(names.split(), values.split(":", 1)[1].split()))
                out.update({k: int(got[k]) for k in want.get(kind, ()) if k in got})
        return out

def main():
    agent = Agent()
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        op = req.pop("op")
        try:
            out = getattr(agent, op)(**req)
            out["ok"] = True
        except Exception as e:  # reported to the suite, which stops with it
            out = {"ok": False, "error": f"{op}: {type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
