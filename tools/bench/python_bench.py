#!/usr/bin/env python3
"""ferry-bench python: the ferry Python module against the standard library's shared memory
(with and without pickle), redis-py on a local Redis, pickle itself and numpy.copyto, with NumPy
arrays of each size, in one run.

Measured in interleaved rounds: every round runs a short slice of every (system, operation,
size) in a shuffled order, so that a burst of noise lands on one slice of one round, not on one
system. Each figure is the median over rounds of the slice's median latency, with the
interquartile range over rounds beside it; each target ratio is computed within each round and
reported as the median of the per-round ratios with their range.

Run through `ferry-bench python` (which points PYTHONPATH at the build's module and
FERRY_BIN_DIR at its ferryd), or directly with those two set.
"""

import argparse
import gc
import json
import os
import pickle
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import shared_memory

import numpy as np

import ferry

KiB, MiB = 1 << 10, 1 << 20
SIZES = [KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB, 256 * MiB]
DICT_BYTES = 100 * MiB  # the get_object target's dict: 10 arrays of 10 MiB
NOISY_IQR = 0.25  # a figure whose IQR exceeds this share of its median is flagged

READS = [("ferry", "get"), ("ferry", "get_object"), ("shm", "get"), ("shm+pickle", "get_object"),
         ("redis", "get"), ("pickle", "loads")]
WRITES = [("ferry", "put"), ("ferry", "put_object"), ("shm", "put"), ("shm+pickle", "put_object"),
          ("redis", "set"), ("pickle", "dumps"), ("numpy", "copyto")]


def label(size):
    for unit, name in ((MiB, "M"), (KiB, "K")):
        if size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)


def parse_size(text):
    units = {"K": KiB, "M": MiB, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


# ---- the peers ----

class Peers:
    """The ferryd and redis-server this run measures against, in a scratch directory."""

    def __init__(self, memory, bin_dir):
        self.dir = tempfile.mkdtemp(prefix="ferry-bench-python.")
        self.procs = []
        sock = os.path.join(self.dir, "ferryd.sock")
        self.start([os.path.join(bin_dir, "ferryd"), "--socket", sock, "--memory", memory],
                   "ferryd")
        self.client = self.wait(lambda: ferry.Client(sock), "ferryd")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.redis_port = s.getsockname()[1]
        self.start(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", self.dir], "redis")
        import redis

        r = redis.Redis(port=self.redis_port)
        self.wait(r.ping, "redis-server")
        self.redis = r

    def start(self, argv, name):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=log))
        log.close()

    def wait(self, attempt, what):
        for _ in range(500):  # 10 s
            try:
                return attempt()
            except Exception:
                time.sleep(0.02)
        sys.exit(f"ferry-bench python: {what} did not answer within 10 s (logs in {self.dir})")

    def close(self):
        self.client.close()
        for p in self.procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- the operations: each returns (prepare, run, undo); only run is timed ----

class Workload:
    """The objects every operation reads, made once per size."""

    def __init__(self, peers, sizes):
        self.c, self.r = peers.client, peers.redis
        self.seq = 0
        self.warm_arena()  # first: it fills the arena, which would evict what is stored
        rng = np.random.default_rng(1)
        self.arrays = {n: rng.integers(0, 256, n, dtype=np.uint8) for n in sizes}
        self.dsts = {n: np.empty(n, dtype=np.uint8) for n in sizes}
        self.pickled = {n: pickle.dumps(a, protocol=5) for n, a in self.arrays.items()}
        self.segments = {}
        # Ids and keys made once, as a program that reads the same objects again would.
        self.ids = {(kind, n): ferry.ObjectID(f"{kind}-{n}") for kind in ("get", "getobj")
                    for n in self.arrays}
        for n, a in self.arrays.items():
            self.c.put(self.ids[("get", n)], a)
            self.c.put_object(a, id=self.ids[("getobj", n)])
            self.r.set(self.ids[("get", n)].binary(), memoryview(a))
            seg = shared_memory.SharedMemory(create=True, size=n)
            np.ndarray(n, np.uint8, buffer=seg.buf)[:] = a
            pseg = shared_memory.SharedMemory(create=True, size=len(self.pickled[n]))
            pseg.buf[: len(self.pickled[n])] = self.pickled[n]
            self.segments[n] = (seg, pseg)
        count = DICT_BYTES // (10 * MiB)
        self.big_dict = {f"a{i}": rng.standard_normal(10 * MiB // 8) for i in range(count)}
        self.big_dict["meta"] = {"name": "weights", "step": 7}
        self.c.put_object(self.big_dict, id="dict")
        self.big_pickle = pickle.dumps(self.big_dict, protocol=5)

    def warm_arena(self):
        """Writes every free page of the arena once from this process, as a long-running
        client will have: a write into arena pages this process never touched costs a page
        fault per 4 KiB page (as any fresh memory does; shm put and redis set pay it on every
        call), and the figures are of the steady state, as np.copyto's warm destination is."""
        held, chunk = [], 64 * MiB
        while chunk >= MiB:
            try:
                buf = self.c.create(self.fresh(), chunk)
            except ferry.StoreFull:
                chunk //= 2
                continue
            np.frombuffer(buf, dtype=np.uint8)[:] = 0
            held.append(buf.id)
        for oid in held:
            self.c.abort(oid)

    def close(self):
        for seg, pseg in self.segments.values():
            for s in (seg, pseg):
                s.close()
                s.unlink()

    def fresh(self):
        self.seq += 1
        return ferry.ObjectID(f"w{self.seq}")

    def op(self, system, name, n):
        """The callables of one measurement: run() is timed, after() is not."""
        c, a = self.c, self.arrays.get(n)
        if (system, name) == ("ferry", "put"):
            oid = self.fresh()
            return lambda: c.put(oid, a), lambda: c.delete(oid)
        if (system, name) == ("ferry", "put_object"):
            oid = self.fresh()
            return lambda: c.put_object(a, id=oid), lambda: c.delete(oid)
        if (system, name) == ("ferry", "get"):
            oid = self.ids[("get", n)]
            return lambda: c.get(oid).release(), None
        if (system, name) == ("ferry", "get_object"):
            oid = self.ids[("getobj", n)]
            return lambda: c.get_object(oid), None
        if (system, name) == ("ferry", "get_object-dict"):
            return lambda: c.get_object("dict"), None
        if (system, name) == ("pickle", "loads-dict"):
            return lambda: pickle.loads(self.big_pickle), None
        if (system, name) == ("shm", "put"):
            made = []

            def put():
                seg = shared_memory.SharedMemory(create=True, size=n)
                np.ndarray(n, np.uint8, buffer=seg.buf)[:] = a
                made.append(seg)

            return put, lambda: [made[0].close(), made[0].unlink()]
        if (system, name) == ("shm", "get"):
            # Attached as a reader process would (Python < 3.13 also registers the segment
            # with the resource tracker then: part of the stdlib's cost).
            name_ = self.segments[n][0].name

            def get():
                seg = shared_memory.SharedMemory(name=name_)
                arr = np.ndarray(n, np.uint8, buffer=seg.buf)
                arr[0]  # used, as a reader would
                del arr
                seg.close()

            return get, None
        if (system, name) == ("shm+pickle", "put_object"):
            made = []

            def put():
                p = pickle.dumps(a, protocol=5)
                seg = shared_memory.SharedMemory(create=True, size=len(p))
                seg.buf[: len(p)] = p
                made.append(seg)

            return put, lambda: [made[0].close(), made[0].unlink()]
        if (system, name) == ("shm+pickle", "get_object"):
            name_ = self.segments[n][1].name

            def get():
                seg = shared_memory.SharedMemory(name=name_)
                pickle.loads(seg.buf)
                seg.close()

            return get, None
        if (system, name) == ("redis", "set"):
            return lambda: self.r.set("set", memoryview(a)), None
        if (system, name) == ("redis", "get"):
            key = self.ids[("get", n)].binary()
            return lambda: np.frombuffer(self.r.get(key), np.uint8), None
        if (system, name) == ("pickle", "dumps"):
            return lambda: pickle.dumps(a, protocol=5), None
        if (system, name) == ("pickle", "loads"):
            p = self.pickled[n]
            return lambda: pickle.loads(p), None
        if (system, name) == ("numpy", "copyto"):
            dst = self.dsts[n]
            return lambda: np.copyto(dst, a), None
        raise KeyError((system, name))


def slice_median(work, system, name, n, seconds, min_runs):
    """Runs one operation for about `seconds` (at least min_runs times, after one untimed run
    that faults in what it touches) and returns the median latency in microseconds."""
    times = []
    start = time.perf_counter()
    runs = -1
    while runs < min_runs or time.perf_counter() - start < seconds:
        run, after = work.op(system, name, n)
        t0 = time.perf_counter_ns()
        run()
        t1 = time.perf_counter_ns()
        if after:
            after()
        if runs >= 0:
            times.append((t1 - t0) / 1000)
        runs += 1
        if runs >= 100_000:
            break
    return statistics.median(times)


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def summarize(per_round):
    med = statistics.median(per_round)
    q1, q3 = quartiles(per_round)
    return {"p50_us": med, "q1_us": q1, "q3_us": q3, "rounds": per_round,
            "noisy": med > 0 and (q3 - q1) / med > NOISY_IQR}


def measure(work, cases, rounds, seconds, min_runs):
    per_round = {case: [] for case in cases}
    for r in range(rounds):
        order = list(cases)
        random.shuffle(order)
        for system, name, n in order:
            gc.collect()
            per_round[(system, name, n)].append(slice_median(work, system, name, n, seconds,
                                                             min_runs))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    return per_round


# ---- targets ----

def ratio_stats(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": values}


def targets(per_round, sizes):
    out = []

    def add(name, values, target, at_most):
        s = ratio_stats(values)
        s.update(name=name, target=target, at_most=at_most,
                 met=(s["median"] <= target) if at_most else (s["median"] >= target))
        out.append(s)

    get = {n: per_round[("ferry", "get", n)] for n in sizes}
    if KiB in sizes and 256 * MiB in sizes:
        add("get p50 256 MiB / 1 KiB", [b / a for a, b in zip(get[KiB], get[256 * MiB])], 1.5,
            True)
    if MiB in sizes:
        add("get p50 at 1 MiB (µs)", get[MiB], 10.0, True)
    add("get_object of a 100 MiB dict: pickle.loads time / get_object time",
        [p / f for f, p in zip(per_round[("ferry", "get_object-dict", DICT_BYTES)],
                               per_round[("pickle", "loads-dict", DICT_BYTES)])], 100.0, False)
    if 64 * MiB in sizes:
        add("put 64 MiB: np.copyto time / put time",
            [c / p for p, c in zip(per_round[("ferry", "put", 64 * MiB)],
                                   per_round[("numpy", "copyto", 64 * MiB)])], 0.7, False)
    return out


# ---- output ----

def cell(s):
    text = f"{s['p50_us']:,.1f}" if s["p50_us"] < 100 else f"{s['p50_us']:,.0f}"
    spread = s["q3_us"] - s["q1_us"]
    return f"{text} ±{spread / 2:,.1f}" + (" (noisy)" if s["noisy"] else "")


def table(title, columns, results, sizes):
    lines = [f"{title}: median latency per operation in µs (± half the IQR over rounds)", "",
             "| size | " + " | ".join(f"{s} {o}" for s, o in columns) + " |",
             "| ---: |" + " ---: |" * len(columns)]
    for n in sizes:
        lines.append(f"| {label(n)} | " + " | ".join(cell(results[(s, o, n)]) for s, o in columns)
                     + " |")
    return "\n".join(lines)


def report(results, ratios, sizes, rounds):
    print(f"ferry-bench python: {rounds} interleaved rounds\n")
    print(table("Reads", READS, results, sizes))
    print()
    print(table("Writes", WRITES, results, sizes))
    print()
    d, p = results[("ferry", "get_object-dict", DICT_BYTES)], results[("pickle", "loads-dict",
                                                                       DICT_BYTES)]
    print(f"dict of 100 MiB of arrays: ferry get_object {cell(d)} µs, pickle.loads {cell(p)} µs\n")
    print("| target | median over rounds | range | |")
    print("| --- | ---: | ---: | --- |")
    for q in ratios:
        bound = f"{'≤' if q['at_most'] else '≥'} {q['target']:g}"
        print(f"| {q['name']} {bound} | {q['median']:,.2f} | {q['min']:,.2f}-{q['max']:,.2f} | "
              f"{'met' if q['met'] else 'MISSED'} |")


def plot(results, sizes, outdir):
    if not shutil.which("gnuplot"):
        sys.exit("ferry-bench python: --plot needs gnuplot (Debian: apt-get install gnuplot-nox)")
    os.makedirs(outdir, exist_ok=True)
    charts = [("python-reads", READS, "p50 latency (µs)", lambda n, s: s["p50_us"]),
              ("python-writes", WRITES, "MiB/s", lambda n, s: n / s["p50_us"] * 1e6 / MiB)]
    tics = ", ".join(f'"{label(n)}" {n}' for n in sizes)
    for name, columns, ylabel, value in charts:
        series = []
        for system, op in columns:
            data = os.path.join(outdir, f"{name}-{system}-{op}.dat".replace("+", "_"))
            with open(data, "w") as f:
                for n in sizes:
                    f.write(f"{n} {value(n, results[(system, op, n)])}\n")
            series.append(f'"{os.path.basename(data)}" using 1:2 with linespoints lw 2 '
                          f'title "{system} {op}" noenhanced')
        script = (
            'set terminal pngcairo size 1000,650\n' f'set output "{name}.png"\n'
            f'set title "ferry-bench python: {ylabel} by size (median of interleaved rounds)"\n'
            f'set logscale xy\nset grid\nset key outside right\nset xlabel "array size"\n'
            f'set ylabel "{ylabel}"\nset xtics ({tics})\n' + "plot " + ", \\\n  ".join(series) + "\n")
        with open(os.path.join(outdir, name + ".gp"), "w") as f:
            f.write(script)
        subprocess.run(["gnuplot", name + ".gp"], cwd=outdir, check=True)


def main():
    ap = argparse.ArgumentParser(prog="ferry-bench python", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(label(n) for n in SIZES),
                    help="array sizes (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--slice", type=float, default=0.05,
                    help="seconds per operation and size in each round (default 0.05)")
    ap.add_argument("--min-runs", type=int, default=3, help="runs per slice at least (default 3)")
    ap.add_argument("--memory", default="3G", help="the daemon's arena (default 3G)")
    ap.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    ap.add_argument("--plot", metavar="DIR", help="write charts (gnuplot PNG) to DIR")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.rounds < 1 or any(n < 1 or n > 512 * MiB for n in sizes):
        ap.error("--rounds must be at least 1 and sizes 1..512M")
    bin_dir = os.environ.get("FERRY_BIN_DIR") or sys.exit("FERRY_BIN_DIR must name ferryd's dir")
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    peers = Peers(args.memory, bin_dir)
    try:
        work = Workload(peers, sizes)
        try:
            cases = [(s, o, n) for s, o in READS + WRITES for n in sizes]
            cases += [("ferry", "get_object-dict", DICT_BYTES), ("pickle", "loads-dict",
                                                                  DICT_BYTES)]
            per_round = measure(work, cases, args.rounds, args.slice, args.min_runs)
        finally:
            work.close()
    finally:
        peers.close()
    results = {case: summarize(v) for case, v in per_round.items()}
    ratios = targets(per_round, sizes)
    report(results, ratios, sizes, args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "slice_s": args.slice,
                       "results": [dict(system=s, op=o, size=n, **v)
                                   for (s, o, n), v in results.items()],
                       "targets": ratios}, f, indent=1)
    if args.plot:
        plot(results, sizes, args.plot)


if __name__ == "__main__":
    main()
