"""ferry-bench dask - Dask with ferry (ferry.dask) against Dask's own transfer, in the same run.

Each workload runs on a fresh Dask cluster per configuration and round, with ferry.dask
installed (ferry: results of --threshold bytes or more kept in the node's ferry store and moved
between workers as references) and without (dask: Dask's own serialisation over its TCP comms),
interleaved: ferry, dask, ferry, dask ... for --rounds rounds; medians and the ratio. Cluster
start-up, the workers' imports and a warm-up task on each worker are not timed; the timed part
is the computation, from client.compute to its small result in the client. The two results of a
round must be identical (bit for bit): otherwise MISMATCH is printed and the run exits 1; so
does a ferry run in which ferry.dask stored or received nothing (the figure would be Dask's).

One node (default; --workers worker processes x 1 thread, LocalCluster, one ferryd of --memory):
  rechunk    a float64 array of --size in 64 MiB row chunks (--cols columns), made on the workers
             (da.random), rechunked to 64 MiB column chunks, then summed over its rows (a small
             vector gathered)
  broadcast  one array of --bcast-size made by one task, used by --bcast-tasks tasks spread over
             the workers in turn (each a dot product of a slice of it with a small chunk of its
             own); the result is their --bcast-tasks numbers
  matmul     (x @ x.T).sum() for x of --matmul-n squared in --matmul-chunk blocks (BLAS-bound;
             this machine's reference BLAS makes it slow)
A testbed (--nodes N >= 2, root): scripts/testbed.sh brings up N nodes in network namespaces
(links of --rate each way, a ferryd of --memory on each, their Redis directory); a Dask
scheduler and the driving client in node 1's namespace, --workers dask-worker processes (1
thread) in each node's (testbed.sh exec, so that each finds its node's ferryd), and the
workloads (default rechunk of 512M, broadcast) beside their link-rate bound: the bytes that
must cross a link over the link's payload rate (a raw TCP stream between two nodes, measured
as ferry-bench cluster does), and the bytes each node's link did carry in the timed part.

Memory: every 100 ms of the timed part, each worker process's /proc/PID/smaps_rollup (the sum
over workers of Private_Clean + Private_Dirty, and of Pss; the peaks) and each ferryd's
used_bytes (the objects in the arena; its peak). Progress on stderr; a table on stdout, or
with --json the JSON document on stdout and the table on stderr.
    ferry-bench dask --workloads rechunk,broadcast,matmul --rounds 3
    ferry-bench dask --nodes 4 --workloads rechunk,broadcast
"""
import argparse
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TESTBED = os.path.join(ROOT, "scripts", "testbed.sh")
MIB = 1 << 20
WORKLOADS = ("rechunk", "broadcast", "matmul")
MODES = ("ferry", "dask")  # the order within a round
PROTO = "@@ "  # the driver's protocol lines on its stdout (testbed)
START_TIMEOUT_S = 180  # a cluster's start, its workers' arrival, a ferryd's arena
STOP_TIMEOUT_S = 30

sys.path.insert(0, HERE)
from cluster_bench import median, size_bytes, size_text  # noqa: E402


def log(*args):
    print("dask:", *args, file=sys.stderr, flush=True)


def mib(n):
    return n / MIB


# ---- what runs on the workers (pickled by value: this file is __main__) ----

def _imports():
    import dask.array  # noqa: F401
    import numpy  # noqa: F401
    try:
        import ferry.dask  # noqa: F401
    except ImportError:
        pass
    return os.getpid()


def _noop(i):
    return i


def make_big(n, seed):
    import numpy as np
    return np.random.default_rng(seed).random(n)


def make_small(m, seed):
    import numpy as np
    return np.random.default_rng(seed).random(m)


def use_big(big, small, i):
    """Something cheap with the big array and a small chunk: a dot product with a slice of it."""
    import numpy as np
    m = len(small)
    at = (i * 7919 * m) % (len(big) - m + 1)
    return float(np.dot(big[at:at + m], small))


def _transfers(dask_worker):
    """What this worker received from its peers (Dask's log of transfers, through ferry or not):
    {"keys": {key prefix: [keys, bytes (their nbytes)]}, "busy_s": the time in which at least
    one transfer was under way, "sum_s": the transfers' summed durations, "max": the most under
    way at once}: sum_s / busy_s is how many ran at once on average."""
    from dask.utils import key_split
    keys, spans = {}, []
    for t in dask_worker.transfer_incoming_log:
        if all(key_split(k).startswith("bench-warm") for k in t["keys"]):
            continue
        spans.append((t["start"], t["stop"]))
        for key, nbytes in t["keys"].items():
            e = keys.setdefault(key_split(key), [0, 0])
            e[0] += 1
            e[1] += nbytes or 0
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    busy = under = most = 0
    last = None
    for at, step in events:
        if under > 0:
            busy += at - last
        under += step
        most = max(most, under)
        last = at
    return {"keys": keys, "busy_s": busy, "sum_s": sum(b - a for a, b in spans), "max": most}


def _instrument(dask_worker):
    """Counts, per key prefix, where FerryData put each result this worker set: stored in ferry,
    received through ferry, refused by the store, or kept by Dask (small, or large: the kind of
    value). Also times the "ferry" family's loads (a reference received: the get, which fetches
    from another node), and whether it ran on the worker's event loop (the thread this runs on,
    Client.run's). Observes ferry.dask, changes nothing it does (a subclass whose __setitem__
    calls FerryData's, then compares its counters; the family registered again with its own
    functions, the loads wrapped in a timer)."""
    import ferry.dask as fd
    from dask.utils import key_split
    from distributed.protocol.serialize import families, register_serialization_family
    data = dask_worker.memory_manager.data
    if not isinstance(data, fd.FerryData) or "bench_kinds" in vars(data):
        return False
    base = type(data)

    class Counted(base):
        def __setitem__(self, key, value):
            before = (self.stored, self.received, self.refused)
            base.__setitem__(self, key, value)
            after = (self.stored, self.received, self.refused)
            nbytes = getattr(value, "nbytes", 0) or 0
            if after[0] > before[0]:
                kind = "stored"
            elif after[1] > before[1]:
                kind = "received"
            elif after[2] > before[2]:
                kind = "refused"
            elif nbytes < self.threshold:
                kind = "small"
            else:  # the worker's until a peer asks for it: then stored (ferry stored counts it)
                flags = getattr(value, "flags", None)
                strided = flags is not None and not (flags.c_contiguous or flags.f_contiguous)
                kind = f"large {type(value).__name__}" + (" (strided)" if strided else "")
            e = self.bench_kinds.setdefault(f"{key_split(key)}: {kind}", [0, 0])
            e[0] += 1
            e[1] += nbytes

    data.bench_kinds = {}
    data.__class__ = Counted
    dumps, loads, _ = families[fd.FAMILY]
    loop = threading.get_ident()
    calls = data.bench_loads = {"calls": 0, "seconds": 0.0, "longest_s": 0.0, "on_loop": 0}

    def timed_loads(header, frames):
        start = time.perf_counter()
        try:
            return loads(header, frames)
        finally:
            took = time.perf_counter() - start
            calls["calls"] += 1
            calls["seconds"] += took
            calls["longest_s"] = max(calls["longest_s"], took)
            calls["on_loop"] += threading.get_ident() == loop

    register_serialization_family(fd.FAMILY, dumps, timed_loads)
    return True


def _instrumented(dask_worker):
    mine = vars(dask_worker.memory_manager.data)
    return dict(mine.get("bench_kinds", {})), dict(mine.get("bench_loads", {}))


def _memory_limit(dask_worker):
    return dask_worker.memory_manager.memory_limit


def _ferry_objects(dask_worker):
    try:
        import ferry.dask
    except ImportError:
        return (0, 0, 0, 0)
    return ferry.dask.ferry_objects(dask_worker)


# ---- the driver: one configuration on a running cluster ----

class Sampler(threading.Thread):
    """Every period seconds, the sum over pids of smaps_rollup's Private (Clean + Dirty), Pss and
    Rss, and the sum over sockets of ferryd's used_bytes; keeps the peaks."""

    KEYS = {"Rss": "rss", "Pss": "pss", "Private_Clean": "private", "Private_Dirty": "private"}

    def __init__(self, pids, sockets, period=0.1, ours=()):
        super().__init__(daemon=True)
        self.pids = list(pids)
        self.ours = self.pids + list(ours)  # the processes of the run, for the CPU account
        self.cpu = {}
        self.sockets = list(sockets)
        self.period = period
        self.peak = {"private": 0, "pss": 0, "rss": 0, "arena": 0}
        self.first = {}
        self.samples = 0
        self.cpu_s = 0.0
        self.error = None
        self.ready = threading.Event()
        self.done = threading.Event()

    def sample(self, clients):
        total = {"private": 0, "pss": 0, "rss": 0}
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    for line in f:
                        name, _, rest = line.partition(":")
                        key = self.KEYS.get(name)
                        if key:
                            total[key] += int(rest.split()[0]) * 1024
            except (OSError, ValueError, IndexError):
                pass  # a worker gone: Dask's failure, seen by the computation
        total["arena"] = sum(c.stats()["used_bytes"] for c in clients)
        for k, v in total.items():
            self.peak[k] = max(self.peak[k], v)
        if not self.first:
            self.first = total
        self.samples += 1

    def cpu_now(self):
        """(monotonic s, the machine's busy s, the run's processes' s) from /proc."""
        tick = os.sysconf("SC_CLK_TCK")
        with open("/proc/stat") as f:
            t = [int(x) for x in f.readline().split()[1:9]]
        busy = sum(t) - t[3] - t[4]  # all but idle and iowait
        ours = 0
        for pid in self.ours:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ours += int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, ValueError, IndexError):
                pass
        return time.monotonic(), busy / tick, ours / tick

    def run(self):
        cpu = time.thread_time()
        try:
            import ferry
            clients = [ferry.Client(s) for s in self.sockets]
            start = self.cpu_now()
            self.sample(clients)
            self.ready.set()
            while not self.done.wait(self.period):
                self.sample(clients)
            self.sample(clients)
            end = self.cpu_now()
            wall = end[0] - start[0]
            busy, ours = end[1] - start[1], end[2] - start[2]
            self.cpu = {"busy_cores": busy / wall, "ours_cores": ours / wall,
                        "others_cores": max(busy - ours, 0) / wall}
        except Exception as e:  # noqa: BLE001 - reported by stop()
            self.error = e
        finally:
            self.ready.set()
            self.cpu_s = time.thread_time() - cpu

    def stop(self):
        self.done.set()
        self.join(timeout=30)
        if self.error:
            raise RuntimeError(f"memory sampler: {self.error}")


def rechunk_shape(p):
    """rows, cols, row chunk, column chunk of the rechunk workload (64 MiB chunks)."""
    cols = p["cols"]
    rows = p["size"] // (8 * cols)
    row_chunk = max(1, p["chunk"] // (8 * cols))
    col_chunk = max(1, p["chunk"] // (8 * rows))
    return rows, cols, row_chunk, col_chunk


def memory_warnings(client):
    """How many of Dask's memory warnings the workers logged: pauses, unmanaged memory high."""
    out = {"paused": 0, "unmanaged": 0}
    try:
        for records in client.get_worker_logs(n=1000).values():
            for _, msg in records:
                out["paused"] += "Pausing worker" in msg
                out["unmanaged"] += "Unmanaged memory use is high" in msg
    except Exception:  # noqa: BLE001 - informative only
        pass
    return out


def measure(client, workload, p, mode, sockets, marks=None, timeout=900, ours=()):
    """Runs one configuration on client's cluster (ferry.dask installed or not): returns its
    figures and, under "result", the NumPy result. ours: the run's processes besides the
    workers (this one, the scheduler, the ferryds), for the account of the machine's CPU."""
    import numpy as np
    from distributed import wait

    workers = sorted(client.scheduler_info()["workers"])
    client.run(_imports)
    warm = [client.submit(_noop, i, key=f"bench-warm-{i}", workers=[w])
            for i, w in enumerate(workers)]
    wait(warm, timeout=60)
    del warm
    pids = client.run(os.getpid)
    if mode == "ferry":
        client.run(_instrument)
    limits = client.run(_memory_limit)

    if workload == "rechunk":
        import dask.array as da
        rows, cols, rc, cc = rechunk_shape(p)
        x = da.random.RandomState(p["seed"]).random((rows, cols), chunks=(rc, cols))
        graph = x.rechunk((rows, cc)).sum(axis=0)
    elif workload == "matmul":
        import dask.array as da
        n, c = p["matmul_n"], p["matmul_chunk"]
        x = da.random.RandomState(p["seed"]).random((n, n), chunks=(c, c))
        graph = (x @ x.T).sum()

    ours = [os.getpid(), client.run_on_scheduler(os.getpid), *ours]
    sampler = Sampler(pids.values(), sockets if mode == "ferry" else [], p["sample_ms"] / 1000,
                      sorted(set(ours)))
    sampler.start()
    sampler.ready.wait(30)
    if marks:
        marks("start")
    start = time.monotonic()
    if workload == "broadcast":
        n, m, k = p["bcast_size"] // 8, p["bcast_small"] // 8, p["bcast_tasks"]
        big = client.submit(make_big, n, p["seed"], key="bcast-big", workers=[workers[0]])
        futures = []
        for i in range(k):
            w = [workers[i % len(workers)]]
            small = client.submit(make_small, m, p["seed"] + 1 + i, key=f"bcast-small-{i}",
                                  workers=w)
            futures.append(client.submit(use_big, big, small, i, key=f"bcast-use-{i}",
                                         workers=w, allow_other_workers=False))
        wait(futures, timeout=timeout)
        result = np.array(client.gather(futures))
        del big, small, futures
    else:
        future = client.compute(graph)
        result = np.asarray(future.result(timeout=timeout))
        del future
    seconds = time.monotonic() - start
    if marks:
        marks("end")
    sampler.stop()

    out = {"seconds": seconds, "result": result, "workers": len(workers),
           "memory_limit": min(limits.values()),
           "peak_private": sampler.peak["private"], "peak_pss": sampler.peak["pss"],
           "peak_rss": sampler.peak["rss"], "peak_arena": sampler.peak["arena"],
           "arena_before": sampler.first.get("arena", 0), "samples": sampler.samples,
           "sampler_cpu_s": sampler.cpu_s, "memory_warnings": memory_warnings(client),
           **{f"cpu_{k}": v for k, v in sampler.cpu.items()}}
    counts = client.run(_ferry_objects)
    out["ferry"] = dict(zip(("held", "stored", "received", "refused"),
                            (sum(c[i] for c in counts.values()) for i in range(4))))
    transfers = {}
    per_worker = client.run(_transfers)
    for per in per_worker.values():
        for prefix, (keys, nbytes) in per["keys"].items():
            e = transfers.setdefault(prefix, [0, 0])
            e[0] += keys
            e[1] += nbytes
    out["transfers"] = transfers
    busy = sum(w["busy_s"] for w in per_worker.values())
    out["transfer_concurrency"] = (sum(w["sum_s"] for w in per_worker.values()) / busy
                                   if busy else 0.0)
    out["transfer_max_at_once"] = max(w["max"] for w in per_worker.values())
    out["transfer_busy_s"] = busy
    out["transfer_keys"] = sum(e[0] for e in transfers.values())
    out["transfer_bytes"] = sum(e[1] for e in transfers.values())
    if mode == "ferry":
        kinds = {}
        loads = {"calls": 0, "seconds": 0.0, "longest_s": 0.0, "on_loop": 0}
        for per, timed in client.run(_instrumented).values():
            for kind, (count, nbytes) in per.items():
                if kind.startswith("bench-warm"):
                    continue
                e = kinds.setdefault(kind, [0, 0])
                e[0] += count
                e[1] += nbytes
            for k, v in timed.items():
                loads[k] = max(loads[k], v) if k == "longest_s" else loads[k] + v
        out["ferry_kinds"] = kinds
        out["ferry_loads"] = loads
    return out


def drive(spec_file):
    """--drive: the testbed's driver, in node 1's namespace: one configuration on the cluster of
    spec's scheduler file; protocol lines (PROTO) on stdout, a "go" line on stdin after each
    mark, the figures as the last line, the result in spec's .npy file."""
    import numpy as np
    from distributed import Client

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with open(spec_file) as f:
        spec = json.load(f)

    def say(line):
        sys.stdout.write(PROTO + line + "\n")
        sys.stdout.flush()

    def marks(what):
        say(what)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("dask driver: no go from ferry-bench")

    client = Client(scheduler_file=spec["scheduler_file"], timeout=60)
    try:
        client.wait_for_workers(spec["workers"], timeout=START_TIMEOUT_S)
        if spec["mode"] == "ferry":
            import ferry.dask
            ferry.dask.install(client, threshold=spec["params"]["threshold"])
        say("ready")
        out = measure(client, spec["workload"], spec["params"], spec["mode"], spec["sockets"],
                      marks, spec["timeout"], spec["ferryd_pids"])
        np.save(spec["result_file"], out.pop("result"))
        say("result " + json.dumps(out))
    finally:
        client.close(timeout=STOP_TIMEOUT_S)


# ---- processes ----

def stop_group(proc, grace=10):
    """Ends proc and its process group (started with start_new_session): TERM, then KILL."""
    if proc is None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            if sig == signal.SIGTERM:  # its children too, if any outlived it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until(check, timeout, what, proc=None):
    end = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process ended ({proc.returncode})")
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


class Daemon:
    """The one-node runs' ferryd, in the run's scratch directory."""

    def __init__(self, bin_dir, memory, directory):
        self.sock = os.path.join(directory, "ferryd.sock")
        self.log_file = os.path.join(directory, "ferryd.log")
        with open(self.log_file, "w") as logf:
            self.proc = subprocess.Popen(
                [os.path.join(bin_dir, "ferryd"), "--socket", self.sock, "--memory", memory],
                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        # Served at once, the arena mapped (prefaulted at idle priority) after: nothing
        # measured may share the cores with that.
        wait_until(lambda: "arena mapped" in open(self.log_file).read(), START_TIMEOUT_S,
                   f"ferryd (see {self.log_file})", self.proc)

    def stats(self):
        import ferry
        return ferry.Client(self.sock).stats()

    def stop(self):
        stop_group(self.proc)


def drained(sockets, timeout=30):
    """Waits until each ferryd holds no object (what a run stored goes with its workers);
    returns the objects left."""
    import ferry
    clients = [ferry.Client(s) for s in sockets]
    end = time.monotonic() + timeout
    while True:
        left = sum(c.stats()["objects"] for c in clients)
        if left == 0 or time.monotonic() > end:
            return left
        time.sleep(0.1)


# ---- one node ----

def one_node_run(a, workload, mode, daemon, scratch):
    from distributed import Client, LocalCluster

    directory = tempfile.mkdtemp(prefix=f"{workload}-{mode}-", dir=scratch)
    cluster = client = None
    # Without a dashboard the scheduler still serves HTTP (health, metrics), on 8787 or, when
    # another cluster of this machine has it, on a port of its choice with a warning.
    warnings.filterwarnings("ignore", message="Port 8787 is already in use")
    try:
        cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, local_directory=directory,
                               silence_logs=logging.WARNING)
        client = Client(cluster, timeout=60)
        client.wait_for_workers(a.workers, timeout=START_TIMEOUT_S)
        if mode == "ferry":
            import ferry.dask
            ferry.dask.install(client, socket=daemon.sock, threshold=a.threshold)
        return measure(client, workload, vars(a), mode, [daemon.sock], None, a.timeout,
                       [daemon.proc.pid])
    finally:
        if client is not None:
            client.close(timeout=STOP_TIMEOUT_S)
        if cluster is not None:
            cluster.close(timeout=STOP_TIMEOUT_S)
        left = drained([daemon.sock])
        if left:
            log(f"ferryd still holds {left} objects {STOP_TIMEOUT_S} s after the cluster closed")
        shutil.rmtree(directory, ignore_errors=True)


# ---- the testbed ----

def testbed_refused():
    """Why this machine cannot run a testbed, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth links, tc)"
    for tool in ("ip", "tc", "redis-server"):
        if not shutil.which(tool):
            return f"needs {tool}"
    probe = f"ftbdaskprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return f"cannot make a network namespace here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


class Lines(threading.Thread):
    """A process's protocol lines, through a queue: next() waits at most a timeout."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream = stream
        self.q = queue.Queue()
        self.start()

    def run(self):
        for line in self.stream:
            if line.startswith(PROTO):
                self.q.put(line[len(PROTO):].rstrip("\n"))
        self.q.put(None)

    def next(self, timeout, what):
        try:
            line = self.q.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"dask driver: no {what} within {timeout} s") from None
        if line is None:
            raise RuntimeError(f"dask driver ended before {what}")
        return line


def testbed_run(a, tb, workload, mode, scratch):
    directory = tempfile.mkdtemp(prefix=f"{workload}-{mode}-", dir=scratch)
    os.chmod(directory, 0o755)
    sched_file = os.path.join(directory, "scheduler.json")
    procs = []
    links = {}

    def start(node, argv, name, **kw):
        with open(os.path.join(directory, f"{name}.log"), "w") as logf:
            p = subprocess.Popen([TESTBED, "exec", tb.state, str(node)] + argv,
                                 stdout=kw.pop("stdout", logf), stderr=logf,
                                 start_new_session=True, **kw)
        procs.append(p)
        return p

    def counters():
        return {n: tb.agents[n].call("link") for n in range(1, tb.n + 1)}

    try:
        sched = start(1, [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                          tb.addr(1), "--port", "0", "--no-dashboard", "--scheduler-file",
                          sched_file], "scheduler")
        wait_until(lambda: os.path.exists(sched_file) and os.path.getsize(sched_file) > 0,
                   START_TIMEOUT_S, "dask scheduler", sched)
        for n in range(1, tb.n + 1):
            start(n, [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                      sched_file, "--nworkers", str(a.workers), "--nthreads", "1",
                      "--no-dashboard", "--host", tb.addr(n), "--local-directory",
                      os.path.join(directory, f"node{n}")], f"workers{n}")
        spec = {"scheduler_file": sched_file, "workers": a.workers * tb.n, "mode": mode,
                "workload": workload, "params": vars(a), "timeout": a.timeout,
                "sockets": [os.path.join(tb.state, f"node{n}", "ferry.sock")
                            for n in range(1, tb.n + 1)],
                "result_file": os.path.join(directory, "result.npy"),
                "ferryd_pids": [int(open(os.path.join(tb.state, f"node{n}", "pid")).read())
                                for n in range(1, tb.n + 1)]}
        spec_file = os.path.join(directory, "spec.json")
        with open(spec_file, "w") as f:
            json.dump(spec, f)
        driver = start(1, [sys.executable, os.path.abspath(__file__), "--drive", spec_file],
                       "driver", stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
        lines = Lines(driver.stdout)
        for want, timeout in (("ready", START_TIMEOUT_S), ("start", START_TIMEOUT_S)):
            got = lines.next(timeout, want)
            if got != want:
                raise RuntimeError(f"dask driver: {got!r} for {want!r}")
        links["start"] = counters()
        driver.stdin.write("go\n")
        driver.stdin.flush()
        got = lines.next(a.timeout + 60, "end")
        links["end"] = counters()
        driver.stdin.write("go\n")
        driver.stdin.flush()
        got = lines.next(START_TIMEOUT_S, "result")
        if not got.startswith("result "):
            raise RuntimeError(f"dask driver: {got!r}")
        out = json.loads(got[len("result "):])
        import numpy as np
        out["result"] = np.load(spec["result_file"])
        sent = {n: links["end"][n]["tx_bytes"] - links["start"][n]["tx_bytes"] for n in links["end"]}
        recv = {n: links["end"][n]["rx_bytes"] - links["start"][n]["rx_bytes"] for n in links["end"]}
        out["link_sent"], out["link_received"] = sent, recv
        out["link_busiest"] = max(max(sent.values()), max(recv.values()))
        return out
    except Exception:
        for name in ("driver", "scheduler"):
            path = os.path.join(directory, f"{name}.log")
            if os.path.exists(path):
                tail = open(path, errors="replace").read()[-3000:]
                log(f"{name}.log (tail):\n{tail}")
        raise
    finally:
        for p in reversed(procs):  # the driver, the workers, the scheduler
            stop_group(p)
        left = drained([os.path.join(tb.state, f"node{n}", "ferry.sock")
                        for n in range(1, tb.n + 1)])
        if left:
            log(f"the ferryds still hold {left} objects {STOP_TIMEOUT_S} s after the cluster ended")
        shutil.rmtree(directory, ignore_errors=True)


def bound_bytes(a, workload, nodes):
    """The bytes that must cross the busiest link: rechunk, each node's share of the columns
    gathered from the other nodes' rows (an even spread); broadcast, the array into each node."""
    if workload == "rechunk":
        return a.size * (nodes - 1) / nodes / nodes
    if workload == "broadcast":
        return a.bcast_size
    return None


# ---- the run ----

def run_rounds(a, workloads, run):
    """Interleaved rounds of every workload; returns {workload: {mode: [run figures]}}."""
    doc = {}
    for workload in workloads:
        runs = doc.setdefault(workload, {m: [] for m in MODES})
        first = None
        for r in range(a.rounds):
            for mode in MODES:
                log(f"{workload}: round {r + 1} of {a.rounds}, {mode}")
                out = run(workload, mode)
                log(f"{workload} {mode}: {out['seconds']:.2f} s, private peak "
                    f"{mib(out['peak_private']):.0f} MiB, arena peak "
                    f"{mib(out['peak_arena']):.0f} MiB, ferry {out['ferry']}")
                result = out.pop("result")
                if first is None:
                    first = result
                import numpy as np
                if result.shape != first.shape or not np.array_equal(result, first):
                    print(f"MISMATCH: {workload} round {r + 1}, {mode}: the result differs from "
                          f"the first run's ({result.ravel()[:4]} against "
                          f"{first.ravel()[:4]})", flush=True)
                    sys.exit(1)
                out["round"] = r + 1
                runs[mode].append(out)
            counts = runs["ferry"][-1]["ferry"]
            if counts["stored"] == 0 or counts["received"] == 0:
                print(f"NOT FERRY'S: {workload} round {r + 1}: ferry.dask stored "
                      f"{counts['stored']} and received {counts['received']} results: the "
                      "figure would be Dask's", flush=True)
                sys.exit(1)
    return doc


def summary(a, runs, link_mib_s=None, nodes=1):
    out = {}
    for mode in MODES:
        rs = runs[mode]
        s = {k: median([r[k] for r in rs]) for k in
             ("seconds", "peak_private", "peak_pss", "peak_rss", "peak_arena", "transfer_keys",
              "transfer_bytes", "sampler_cpu_s", "transfer_concurrency", "transfer_busy_s",
             "transfer_max_at_once", "cpu_busy_cores", "cpu_ours_cores", "cpu_others_cores")}
        s["min_s"] = min(r["seconds"] for r in rs)
        s["max_s"] = max(r["seconds"] for r in rs)
        s["footprint"] = s["peak_private"] + (s["peak_arena"] if mode == "ferry" else 0)
        s["ferry"] = {k: median([r["ferry"][k] for r in rs]) for k in rs[0]["ferry"]}
        s["warnings"] = {k: sum(r["memory_warnings"][k] for r in rs)
                         for k in rs[0]["memory_warnings"]}
        if "link_busiest" in rs[0]:
            s["link_busiest"] = median([r["link_busiest"] for r in rs])
            s["link_received"] = median([sum(r["link_received"].values()) for r in rs])
        out[mode] = s
    out["ratio"] = out["dask"]["seconds"] / out["ferry"]["seconds"]
    return out


def describe(workload, a):
    if workload == "rechunk":
        rows, cols, rc, cc = rechunk_shape(vars(a))
        return (f"rechunk {size_text(a.size)}: {rows} x {cols} float64, chunks ({rc}, {cols}) -> "
                f"({rows}, {cc}), then .sum(axis=0)")
    if workload == "broadcast":
        return (f"broadcast {size_text(a.bcast_size)}: made by one task, used by "
                f"{a.bcast_tasks} tasks in turn on every worker, each with its own "
                f"{size_text(a.bcast_small)} chunk")
    return (f"matmul: (x @ x.T).sum(), x {a.matmul_n} x {a.matmul_n} float64 in "
            f"{a.matmul_chunk} x {a.matmul_chunk} blocks")


def table(doc, a, f):
    p = lambda *x: print(*x, file=f)  # noqa: E731
    p("# " + doc["command"])
    if doc["nodes"] == 1:
        p(f"ferry-bench dask: one node, {a.workers} worker processes x 1 thread (LocalCluster), "
          f"one ferryd --memory {a.memory}; ferry.dask threshold {size_text(a.threshold)}")
    else:
        p(f"ferry-bench dask: testbed of {doc['nodes']} nodes, {a.rate} links (raw TCP payload "
          f"{doc['link_mib_s']:.1f} MiB/s), {a.workers} dask-worker processes x 1 thread and a "
          f"ferryd --memory {a.memory} per node; scheduler and client in node 1; ferry.dask "
          f"threshold {size_text(a.threshold)}")
    p(f"{a.rounds} interleaved rounds (ferry, dask, ferry, dask ...), a fresh cluster per run, "
      f"medians; results identical in every run; ferry.dask: {doc['ferry_dask']}")
    if doc.get("skipped"):
        p(f"\nskipped: {doc['skipped']}")
        return
    for workload, w in doc["workloads"].items():
        s = w["summary"]
        p(f"\n{w['description']}")
        hdr = (f"  {'system':6} {'time s':>7} {'(min-max)':>13} {'private':>8} {'pss':>7} "
               f"{'arena':>7} {'priv+arena':>10}  {'ferry stored/recv/refused':>25}  "
               f"{'transfers (keys, MiB)':>21}")
        if doc["nodes"] > 1:
            hdr += f"  {'busiest link':>12}"
        p(hdr)
        for mode in MODES:
            m = s[mode]
            fr = m["ferry"]
            ferry_counts = (f"{fr['stored']:.0f}/{fr['received']:.0f}/{fr['refused']:.0f}"
                            if mode == "ferry" else "-")
            arena = f"{mib(m['peak_arena']):7.0f}" if mode == "ferry" else f"{'-':>7}"
            line = (f"  {mode:6} {m['seconds']:7.2f} {m['min_s']:6.2f}-{m['max_s']:<6.2f} "
                    f"{mib(m['peak_private']):8.0f} {mib(m['peak_pss']):7.0f} {arena} "
                    f"{mib(m['footprint']):10.0f}  {ferry_counts:>25}  "
                    f"{m['transfer_keys']:>9.0f} {mib(m['transfer_bytes']):>11.0f}")
            if doc["nodes"] > 1:
                line += f"  {mib(m['link_busiest']):8.0f} MiB"
            p(line)
        line = f"  dask/ferry time {s['ratio']:.2f}"
        fp = s["dask"]["footprint"] / s["ferry"]["footprint"] if s["ferry"]["footprint"] else 0
        line += f"; memory dask/ferry: private+arena {fp:.2f}"
        p(line)
        p("  the machine in the timed part: " + "; ".join(
            f"{m} {s[m]['cpu_busy_cores']:.2f} cores busy, other processes' "
            f"{s[m]['cpu_others_cores']:.2f}, the sampler's CPU {s[m]['sampler_cpu_s']:.2f} s"
            for m in MODES))
        if "bound_s" in w:
            b = w["bound_s"]
            p(f"  link bound {b:.2f} s ({mib(w['bound_bytes']):.0f} MiB over the busiest link at "
              f"{doc['link_mib_s']:.1f} MiB/s): ferry {s['ferry']['seconds'] / b:.2f} x, dask "
              f"{s['dask']['seconds'] / b:.2f} x; as carried (the busiest link's bytes at that "
              f"rate): ferry {mib(s['ferry']['link_busiest']) / doc['link_mib_s']:.2f} s, dask "
              f"{mib(s['dask']['link_busiest']) / doc['link_mib_s']:.2f} s")
        p("  transfers into a worker: " + "; ".join(
            f"{m} {s[m]['transfer_concurrency']:.1f} at once on average (most "
            f"{s[m]['transfer_max_at_once']:.0f}), {s[m]['transfer_busy_s']:.2f} s receiving "
            "(summed over workers)" for m in MODES))
        warn = {m: s[m]["warnings"] for m in MODES if any(s[m]["warnings"].values())}
        if warn:
            p("  Dask's memory warnings (all rounds): " + "; ".join(
                f"{m}: {v['paused']} pauses, {v['unmanaged']} 'unmanaged memory high'"
                for m, v in warn.items()))
        ld = w["runs"]["ferry"][-1].get("ferry_loads")
        if ld and ld["calls"]:
            p(f"  ferry.dask's loads (a reference received: its get, fetching from another node; "
              f"last ferry run): {ld['calls']} calls, {ld['seconds']:.2f} s in all, the longest "
              f"{ld['longest_s']:.3f} s; {ld['on_loop']} of them on the worker's event loop "
              "(which waits meanwhile)")
        kinds = w["runs"]["ferry"][-1].get("ferry_kinds", {})
        if kinds:
            p("  where ferry.dask put the results (last ferry run): " + "; ".join(
                f"{k} {c} ({mib(b):.0f} MiB)" for k, (c, b) in sorted(kinds.items())))
    p(f"""
time: the computation's wall time, client.compute (or the broadcast's submits) to its result in
  the client; cluster start-up, imports and a warm-up task per worker not timed. dask/ferry > 1:
  ferry faster.
memory (MiB), each the median over rounds of the run's peak, sampled every {a.sample_ms:g} ms in
  the timed part: private = sum over the worker processes of Private_Clean + Private_Dirty
  (smaps_rollup): memory no other process maps, so not the arena; pss = sum of their Pss:
  private pages plus each shared page divided by the processes that map it (ferryd maps its
  whole arena, so arena pages count only in part); arena = ferryd's used_bytes (the objects in
  its store, summed over nodes); priv+arena = private + arena for ferry, private for dask: the
  footprints to compare. RSS is not shown (it is in --json): it counts each arena page a
  worker has touched in full, in every worker that maps it, and keeps counting pages of
  objects already gone.
the machine: its busy time (/proc/stat) over the timed part, in cores (of {os.cpu_count()}), and
  the part of it not of the run's processes (workers, client, scheduler, ferryd): other
  processes' load, which makes a run noisy. The sampler runs in the timed part on the same
  cores: its CPU per run (smaps_rollup walks the arena pages a worker maps: more with ferry).
ferry stored/recv/refused: ferry.dask's counters summed over the workers (results put in the
  store, received through it as references, refused by the store and kept by Dask).
transfers: the results the workers received from each other (Dask's transfer log; with ferry
  the references ferry moved count too), and their size (nbytes); transfers into a worker:
  from Dask's log of them (start to stop, deserialisation included), how many ran at once in
  the time a worker was receiving, the most at once, and that time. "where ferry.dask put the
  results": each result a worker set, by key prefix: received (a reference), small (under the
  threshold, Dask's), or large (the worker's; put in the store when a peer first asks for it,
  which "ferry stored" counts); its nbytes before any copy.
ferry.dask's loads: the "ferry" family's deserialisation on the receiving worker (the get,
  fetching from the holder's node when it is another, and the unpickling), timed by the suite.
  A reference is a small message, which Dask deserialises on the worker's event loop (only
  messages over distributed.comm.offload, 10 MiB, go to a thread): the loop waits meanwhile.""")
    if doc["nodes"] > 1:
        p("""busiest link: the most bytes any node's link carried one way in the timed part (eth0
  counters). link bound: the bytes that must cross the busiest link at the least (rechunk: a
  node's columns from the other nodes' rows, evenly spread: size x (N-1) / N^2; broadcast: the
  array into each node) over the raw TCP payload rate.""")


def main():
    ap = argparse.ArgumentParser(prog="ferry-bench dask", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--workloads", help=f"comma-separated, of {', '.join(WORKLOADS)} (default: "
                    "all on one node; rechunk,broadcast on a testbed)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--size", help="rechunk: the array (default 2G; 512M on a testbed)")
    ap.add_argument("--cols", type=int, default=32768, help="rechunk: columns (default 32768)")
    ap.add_argument("--chunk", default="64M", help="rechunk: chunk bytes (default 64M)")
    ap.add_argument("--bcast-size", default="512M", help="broadcast: the array (default 512M)")
    ap.add_argument("--bcast-tasks", type=int, default=32, help="broadcast: tasks (default 32)")
    ap.add_argument("--bcast-small", default="128K", help="broadcast: each task's own chunk")
    ap.add_argument("--matmul-n", type=int, default=4096, help="matmul: x's side (default 4096)")
    ap.add_argument("--matmul-chunk", type=int, default=1024, help="matmul: block side (1024)")
    ap.add_argument("--nodes", type=int, default=1, help="1: one node (default); N >= 2: a "
                    "testbed of N nodes (root)")
    ap.add_argument("--workers", type=int, help="worker processes per node (default 4 on one "
                    "node, 2 per testbed node)")
    ap.add_argument("--rate", default="1gbit", help="testbed: each link's rate (default 1gbit)")
    ap.add_argument("--link-probe", default="64M", help="testbed: the raw stream measuring the "
                    "link (default 64M)")
    ap.add_argument("--memory", help="each ferryd's arena (default 4G; 2G per testbed node)")
    ap.add_argument("--threshold", default="1M", help="ferry.dask's threshold (default 1M)")
    ap.add_argument("--sample-ms", type=float, default=100, help="memory sampling period "
                    "(default 100 ms; each sample reads every worker's smaps_rollup, whose cost "
                    "grows with the arena pages a worker maps: the sampler's CPU is reported)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900, help="seconds a computation may take")
    ap.add_argument("--json", action="store_true", help="the JSON document on stdout")
    ap.add_argument("--bin", default=os.environ.get("FERRY_BIN_DIR",
                                                    os.path.join(ROOT, "build", "bin")))
    ap.add_argument("--drive", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.drive:
        return drive(a.drive)
    testbed = a.nodes > 1
    a.workloads = (a.workloads or ("rechunk,broadcast" if testbed else ",".join(WORKLOADS))
                   ).split(",")
    unknown = set(a.workloads) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    a.size = size_bytes(a.size or ("512M" if testbed else "2G"))
    a.memory = a.memory or ("2G" if testbed else "4G")
    a.workers = a.workers or (2 if testbed else 4)
    for k in ("chunk", "bcast_size", "bcast_small", "threshold", "link_probe"):
        setattr(a, k, size_bytes(getattr(a, k)))
    if a.rounds < 1 or a.workers < 1:
        ap.error("--rounds and --workers: at least 1")
    if a.size < a.chunk or a.size // (8 * a.cols) < 1:
        ap.error("--size: at least one chunk (--chunk) and one row of --cols")
    # TERM (a timeout's, a scheduler's) unwinds like Ctrl-C, through every cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    import ferry.dask
    doc = {"suite": "dask", "command": "ferry-bench dask " + " ".join(sys.argv[1:]),
           "nodes": a.nodes, "workers_per_node": a.workers, "rounds": a.rounds,
           "memory": a.memory, "threshold": a.threshold, "ferry_dask": ferry.dask.__file__,
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "workloads": {}}
    scratch = tempfile.mkdtemp(prefix="ferry-bench-dask-")
    os.chmod(scratch, 0o755)
    try:
        if not testbed:
            daemon = Daemon(a.bin, a.memory, scratch)
            try:
                results = run_rounds(a, a.workloads,
                                     lambda w, m: one_node_run(a, w, m, daemon, scratch))
            finally:
                daemon.stop()
            for w, runs in results.items():
                doc["workloads"][w] = {"description": describe(w, a), "runs": runs,
                                       "summary": summary(a, runs)}
        else:
            reason = testbed_refused()
            if reason:
                doc["skipped"] = f"the testbed cannot run here: {reason}"
                log(doc["skipped"])
            else:
                import cluster_bench
                tb_args = argparse.Namespace(rate=a.rate, transport="tcp", bin=a.bin,
                                             ferryd_args=None, keep_logs=None)
                tb = cluster_bench.Testbed(tb_args, a.nodes, a.memory)
                try:
                    doc["link_mib_s"] = cluster_bench.link_rate(tb, a.link_probe, 3)
                    results = run_rounds(a, a.workloads,
                                         lambda w, m: testbed_run(a, tb, w, m, scratch))
                finally:
                    tb.down()
                for w, runs in results.items():
                    entry = {"description": describe(w, a), "runs": runs,
                             "summary": summary(a, runs)}
                    b = bound_bytes(a, w, a.nodes)
                    if b:
                        entry["bound_bytes"] = b
                        entry["bound_s"] = b / MIB / doc["link_mib_s"]
                    doc["workloads"][w] = entry
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table(doc, a, sys.stderr if a.json else sys.stdout)
    if a.json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        print()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # everything started is stopped by then (the finally clauses)
        log("interrupted")
        sys.exit(130)
