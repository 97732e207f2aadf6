#!/usr/bin/env python3
"""Two processes share NumPy arrays through ferry without copying them.

The producer stores a dict of arrays with put_object (one copy, into the daemon's shared
arena); the consumer, another process, reads it back with get_object: its arrays are read-only
views of the same arena pages, so nothing is copied however large they are.

    ferryd --socket /tmp/ferry.sock --memory 1G &        # a daemon on this node
    python3 examples/share_arrays.py                       # $FERRY_SOCKET, the service's, or /tmp/ferry.sock
    python3 examples/share_arrays.py --socket /run/ferry/ferry.sock --mib 256
"""

import argparse
import multiprocessing
import pickle
import time

import numpy as np

import ferry


def arena_file_of(address):
    """The file behind the mapping that holds address (the daemon's memfd for arena pages)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5] if len(fields) > 5 else "(anonymous)"
    return "(not mapped)"


def consumer(socket, oid, answers):
    with ferry.Client(socket) as client:
        start = time.perf_counter()
        batch = client.get_object(oid, timeout_ms=10_000)
        took = time.perf_counter() - start
        weights = batch["weights"]
        answers.put({
            "seconds": took,
            "checksum": float(weights.sum()),
            "writeable": weights.flags.writeable,
            "backed_by": arena_file_of(weights.__array_interface__["data"][0]),
            "step": batch["step"],
        })


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="the daemon's socket (default $FERRY_SOCKET, else "
                    f"{ferry.SERVICE_SOCKET} if it is there, else {ferry.DEFAULT_SOCKET})")
    ap.add_argument("--mib", type=int, default=64, help="MiB of arrays to share (default 64)")
    args = ap.parse_args()

    with ferry.Client(args.socket) as client:
        weights = np.random.default_rng(0).standard_normal(args.mib * 2**20 // 8)
        batch = {"weights": weights, "bias": np.zeros(1000), "step": 42}
        start = time.perf_counter()
        oid = client.put_object(batch)
        print(f"producer: put_object of {args.mib} MiB in {1000 * (time.perf_counter() - start):.1f} ms"
              f" -> {oid}")

        ctx = multiprocessing.get_context("spawn")
        answers = ctx.Queue()
        reader = ctx.Process(target=consumer, args=(client.socket, oid, answers))
        reader.start()
        got = answers.get(timeout=60)
        reader.join(60)
        print(f"consumer: get_object in {1e6 * got['seconds']:.0f} µs; step {got['step']}; "
              f"its array is backed by {got['backed_by']} (read-only: {not got['writeable']})")
        same = abs(got["checksum"] - float(weights.sum())) < 1e-6 * abs(float(weights.sum())) + 1e-9
        print(f"consumer's checksum matches the producer's: {same}")
        start = time.perf_counter()
        pickle.loads(pickle.dumps(batch, protocol=5))
        print(f"for comparison, a pickle round trip of the same dict in one process: "
              f"{1000 * (time.perf_counter() - start):.1f} ms")
        client.delete(oid)


if __name__ == "__main__":
    main()
