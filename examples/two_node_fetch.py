#!/usr/bin/env python3
"""A two-node ferry cluster on one host: a Redis directory and two daemons, a and b. An array
stored on a is fetched by b, arena to arena, then read on b without a copy.

    python3 examples/two_node_fetch.py                  # finds ferryd on $PATH or in build/bin
    python3 examples/two_node_fetch.py --ferryd build/bin/ferryd

The same calls work across machines: give each daemon --listen on its own address and the
same --directory.
"""

import argparse
import os
import shutil
import socket
import subprocess
import tempfile
import time

import numpy as np

import ferry


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(check, what, seconds=10):
    for _ in range(int(seconds / 0.05)):
        try:
            if check():
                return
        except (ferry.Error, OSError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"{what} did not happen within {seconds} s")


def find_ferryd(given):
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "ferryd")
    for path in (given, shutil.which("ferryd"), here):
        if path and os.access(path, os.X_OK):
            return path
    raise SystemExit("no ferryd found: build it (make) or pass --ferryd PATH")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ferryd", help="the ferryd binary (default: $PATH, else build/bin)")
    ap.add_argument("--mib", type=int, default=32, help="MiB to move (default 32)")
    args = ap.parse_args()
    ferryd = find_ferryd(args.ferryd)
    work = tempfile.mkdtemp(prefix="ferry-example.")
    procs = []
    try:
        redis_port = free_port()
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL))
        directory = f"redis://127.0.0.1:{redis_port}"
        sockets = {}
        for node in ("a", "b"):
            sockets[node] = os.path.join(work, f"{node}.sock")
            procs.append(subprocess.Popen(
                [ferryd, "--socket", sockets[node], "--memory", "256M", "--node-id", node,
                 "--listen", f"127.0.0.1:{free_port()}", "--directory", directory],
                stderr=subprocess.DEVNULL))
        for node in ("a", "b"):
            wait(lambda: ferry.Client(sockets[node]).close() or True, f"ferryd {node} answering")

        with ferry.Client(sockets["a"]) as a, ferry.Client(sockets["b"]) as b:
            wait(lambda: len(b.nodes()) == 2, "both nodes in the directory")
            print("nodes:", ", ".join(f"{n['id']} at {n['address']} ({','.join(n['transports'])})"
                                      for n in b.nodes()))
            data = np.arange(args.mib * 2**20 // 8, dtype=np.float64)
            a.put("example-array", data, metadata=b"float64")
            print(f"a holds example-array ({data.nbytes >> 20} MiB); b has it: "
                  f"{b.contains('example-array')}")
            start = time.perf_counter()
            buf = b.get("example-array", fetch=True)  # waits up to 60 s by default
            took = time.perf_counter() - start
            arr = np.frombuffer(buf, dtype=np.float64)
            print(f"b fetched it in {1000 * took:.1f} ms, cold: a connection to a first "
                  f"({data.nbytes / took / 2**30:.2f} GiB/s), and reads it in place: "
                  f"equal = {np.array_equal(arr, data)}, metadata = {buf.metadata!r}")
            a.put("example-array-2", data + 1, metadata=b"float64")
            start = time.perf_counter()
            warm = b.get("example-array-2", fetch=True)
            took = time.perf_counter() - start
            print(f"a second array of the same size, warm (the connection kept): "
                  f"{1000 * took:.1f} ms ({data.nbytes / took / 2**30:.2f} GiB/s)")
            del warm
            print("held by:", sorted(n["id"] for n in b.where("example-array")))
            stats = b.stats()
            print(f"b's counters: transfers_in {stats['transfers_in']}, bytes_in "
                  f"{stats['bytes_in']}, connections_opened {stats['connections_opened']}")
            del arr, buf
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
