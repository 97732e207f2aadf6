#!/usr/bin/env python3
"""Dask on ferry: four worker processes keep their chunks in the node's ferry store and pass
them to each other by reference, read in place; the result equals Dask's own.

    ferryd --socket /tmp/ferry.sock --memory 2G &        # a daemon on this node
    python3 examples/dask_on_ferry.py                      # $FERRY_SOCKET, the service's, or /tmp/ferry.sock
    python3 examples/dask_on_ferry.py --socket /run/ferry/ferry.sock --gib 1

(Debian: apt-get install python3-distributed. On several nodes, run a ferryd per node in one
cluster, start each node's dask-worker with FERRY_SOCKET naming its node's daemon, and call
ferry.dask.install(client) once: the same code runs.)
"""

import argparse
import time

import dask.array as da
import distributed

import ferry
import ferry.dask


def rechunked_sums(gib):
    """A GiB-sized array in row chunks of 64 MiB, rechunked to column chunks: every output
    chunk takes a piece of every input chunk, held by another worker."""
    rows = 256 * max(int(gib * 16), 1)  # 16 chunks of 256 x 32768 float64 a GiB
    x = da.random.RandomState(0).random((rows, 32768), chunks=(256, 32768))
    return x.rechunk((rows, (8 << 20) // rows)).sum(axis=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", help="the node's ferryd (default: ferry's default socket)")
    ap.add_argument("--gib", type=float, default=0.5, help="the array's size (default 0.5)")
    a = ap.parse_args()
    with distributed.LocalCluster(n_workers=4, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        t = time.perf_counter()
        plain = rechunked_sums(a.gib).compute()
        plain_s = time.perf_counter() - t

        ferry.dask.install(client, socket=a.socket)
        t = time.perf_counter()
        shared = rechunked_sums(a.gib).compute()
        ferry_s = time.perf_counter() - t

        per_worker = client.run(ferry.dask.ferry_objects)
        stored = sum(c[1] for c in per_worker.values())
        received = sum(c[2] for c in per_worker.values())
        assert (plain == shared).all(), "the results differ"
        print(f"Dask alone {plain_s:.1f} s, on ferry {ferry_s:.1f} s; the same result; "
              f"{stored} chunks stored in ferry, {received} received by reference")
    with ferry.Client(a.socket) if a.socket else ferry.Client() as c:
        print(f"left in the store afterwards: {len(c.list())} objects")


if __name__ == "__main__":
    main()
