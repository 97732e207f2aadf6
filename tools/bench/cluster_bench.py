"""ferry-bench cluster - ferry on a testbed of nodes in network namespaces (scripts/testbed.sh),
every figure beside its physical bound measured in the same run. Needs root.

For each N of --nodes a testbed of N nodes comes up with links shaped to --rate each way; an
agent (cluster_agent.py) in every node's namespace times each call in-process. Workloads:

  rtt        one-byte TCP round trips between two nodes: the round trip every latency below
             is a multiple of
  hot        objects of --hot-sizes on nodes that nobody has fetched from yet, read in turn by
             the other nodes: a first read (a holder the reader has never reached), reads of
             other objects of the same holder (seen), and a read again (local); and a first
             read at a holder's location (no lookup), each reader from another; and seen
             reads back to back beside seen reads each after 0.2 s idle (what waking idle
             processes costs)
  small      --small-size objects on node 2, read by node 1 (already connected to it) one at a
             time by id (the directory asked), with node 2's location (not asked), and Redis
             GETs of such a value from node 1 to the testbed's Redis over the same link; then
             --small-batch of them in one fetch each way, beside one Redis pipeline of as many
             GETs; --runs rounds interleaved (medians)
  pair       node 2 fetches objects of --sizes from node 1, beside a raw TCP stream of the same
             bytes between the same namespaces, --runs times interleaved (medians)
  gather     nodes 2..N each hold an object of --gather bytes / (N-1), node 1 fetches them all
             in one call
  shuffle    every node holds an object of --shuffle bytes / (N-1) for each other node and
             fetches its N-1 at once (all-to-all; each node receives --shuffle bytes)
  broadcast  a --broadcast object on node 1, nodes 2..N ask for it at once: time to the last,
             each node's rate, against node 2's fetch of such an object alone; every copy
             checked bit-exact; the ranges receivers relayed to each other (ferry stat)
  broadcast-join  the same, the receivers' starts spread over --join-spread seconds
  broadcast-cut   the same, node 3 (a receiver, relaying) partitioned half a lone fetch's time
             in: its link down for a lone fetch's time, then up again; the others must still
             complete, node 3 too (or say why)
  broadcast-kill  the same, node 3 (a receiver, relaying) killed half a lone fetch's time in:
             the others must still complete (runs last: the node stays dead)
hot, small and pair run on the first N only; the others on every N. The link's payload rate (the
bound of gather, shuffle and broadcast) is a raw TCP stream of --link-probe bytes on each
testbed. Progress on stderr; a table on stdout, or with --json the JSON document on stdout and
the table on stderr; --plot DIR writes gnuplot charts of pair, broadcast and shuffle.
    ferry-bench cluster --nodes 8,16 --rate 1gbit --json --plot /tmp/charts > cluster.json
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TESTBED = os.path.join(ROOT, "scripts", "testbed.sh")
AGENT = os.path.join(HERE, "cluster_agent.py")
MIB = 1 << 20
PORT = 9100  # raw streams and echoes, inside the namespaces
START_LEAD_S = 0.3  # how far ahead a synchronised start is set


def log(*args):
    print("cluster:", *args, file=sys.stderr, flush=True)


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].isalpha() else int(text)


def size_text(n):
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def rate_bits(text):
    """tc's rate units (bit, kbit, mbit, gbit) in bits per second."""
    t = text.lower()
    for unit, k in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3), ("bit", 1)):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * k
    raise ValueError(f"rate {text}: give it in tc's units (1gbit, 100mbit)")


def median(xs):
    return statistics.median(xs) if xs else float("nan")


class Agent:
    """One node's agent process, answering one JSON line per request."""

    def __init__(self, state, node, bin_dir):
        env = dict(os.environ, FERRY_BIN_DIR=bin_dir)
        if os.environ.get("FERRY_PY_PRELOAD"):  # a sanitizer build's module (tests/CMakeLists)
            env.update(LD_PRELOAD=os.environ["FERRY_PY_PRELOAD"], PYTHONMALLOC="malloc",
                       ASAN_OPTIONS="detect_leaks=0:abort_on_error=1")
        self.node = node
        self.proc = subprocess.Popen(
            [TESTBED, "exec", state, str(node), sys.executable, AGENT], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.answer()

    def send(self, op, **args):
        self.proc.stdin.write(json.dumps(dict(args, op=op)) + "\n")
        self.proc.stdin.flush()

    def answer(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"node {self.node}'s agent ended (see its ferryd.log)")
        out = json.loads(line)
        if not out.pop("ok"):
            raise RuntimeError(f"node {self.node}: {out['error']}")
        return out

    def call(self, op, **args):
        self.send(op, **args)
        return self.answer()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Testbed:
    def __init__(self, a, nodes, memory):
        cmd = [TESTBED, "up", "-n", str(nodes), "-r", a.rate, "-m", memory, "-t",
               a.transport, "-b", a.bin] + (["-a", a.ferryd_args] if a.ferryd_args else [])
        cmd += (["-d", a.rtt] if a.rtt else []) + (["-l", a.loss] if a.loss else [])
        cmd += ["-L"] if a.delayline else []
        up = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            out, _ = up.communicate(timeout=300)
        except BaseException:  # a timeout, Ctrl-C, TERM: its own trap takes down what it made
            up.terminate()
            up.wait(timeout=120)
            raise
        if up.returncode != 0:
            raise SystemExit(f"ferry-bench cluster: testbed.sh up failed ({up.returncode})")
        self.state = out.strip().splitlines()[-1]
        self.env = dict(line.split("=", 1) for line in open(os.path.join(self.state, "env"))
                        .read().split())
        self.n = nodes
        self.keep_logs = a.keep_logs
        self.agents = {}
        try:
            for i in range(1, nodes + 1):
                self.agents[i] = Agent(self.state, i, a.bin)
        except BaseException:
            self.down()
            raise

    def addr(self, node):
        return f"{self.env['SUBNET']}.{node}"

    def all(self, requests):
        """Sends {node: (op, args)} at once, then takes every answer: {node: answer}."""
        for node, (op, args) in requests.items():
            self.agents[node].send(op, **args)
        answers, failed = {}, None
        for node in requests:  # every answer is read, so that none is left for the next call
            try:
                answers[node] = self.agents[node].answer()
            except RuntimeError as e:
                failed = failed or e
        if failed:
            raise failed
        return answers

    def down(self):
        if self.keep_logs:  # each node's ferryd.log, before the testbed and its files go
            out = os.path.join(self.keep_logs, f"N{self.n}")
            os.makedirs(out, exist_ok=True)
            for i in range(1, self.n + 1):
                log_file = os.path.join(self.state, f"node{i}", "ferryd.log")
                if os.path.exists(log_file):
                    shutil.copy(log_file, os.path.join(out, f"node{i}.log"))
        for agent in self.agents.values():
            try:
                agent.close()
            except Exception:
                agent.proc.kill()
        subprocess.run([TESTBED, "down", self.state], check=False, timeout=120)


def raw_stream(tb, src, dst, size):
    """Seconds a raw TCP stream of size bytes takes from src's namespace to dst's."""
    tb.agents[dst].call("raw_recv", addr=tb.addr(dst), port=PORT, size=size)
    start = tb.agents[src].call("raw_send", addr=tb.addr(dst), port=PORT, size=size)["start"]
    got = tb.agents[dst].call("raw_result")
    if got["bytes"] != size:
        raise RuntimeError(f"raw stream {src}->{dst}: {got['bytes']} of {size} bytes")
    return got["end"] - start  # one clock in every namespace: connect to the last byte


def raw_chain(tb, nodes, size):
    """Seconds size bytes take through a raw TCP relay chain from node 1 through nodes, each
    passing on what it receives as it comes: the pipeline this machine's cores allow."""
    for k, n in enumerate(nodes):
        nxt = tb.addr(nodes[k + 1]) if k + 1 < len(nodes) else None
        tb.agents[n].call("raw_recv", addr=tb.addr(n), port=PORT + 4, size=size, forward=nxt)
    start = tb.agents[1].call("raw_send", addr=tb.addr(nodes[0]), port=PORT + 4,
                              size=size)["start"]
    got = tb.all({n: ("raw_result", {}) for n in nodes})
    if any(g["bytes"] != size for g in got.values()):
        raise RuntimeError(f"raw chain: {got}")
    return max(g["end"] for g in got.values()) - start


def link_rate(tb, size, runs):
    """The link's payload rate in MiB/s: the median of runs raw streams, node 1 to node 2."""
    rates = [size / raw_stream(tb, 1, 2, size) / MIB for _ in range(runs)]
    log(f"link: raw TCP {median(rates):.1f} MiB/s (runs {', '.join(f'{r:.1f}' for r in rates)})")
    return median(rates)


def rtt(tb, count):
    tb.agents[1].call("echo", addr=tb.addr(1), port=PORT + 1)
    node = tb.agents[2].call("rtt", addr=tb.addr(1), port=PORT + 1, count=count)["us"]
    out = {"node_us": median(node[count // 10:]), "count": count}
    log(f"rtt: node to node {out['node_us']:.0f} us (median of {count}, one-byte TCP round "
        "trips from Python)")
    return out


def hot(tb, sizes, round_trip_us):
    """Holder N-i serves size i; readers 1..N-len(sizes) read in turn."""
    sizes = sizes[: max(0, tb.n - 2)]
    readers = range(1, tb.n - len(sizes) + 1)
    rows = []
    for i, size in enumerate(sizes):
        holder = tb.n - i
        names = [f"hot-{size}-{k}" for k in range(4)]
        tb.agents[holder].call("put", names=names, size=size)
        first, seen, local = [], [], []
        for r in readers:
            first += tb.agents[r].call("reads", names=names[:1])["us"]
            seen += tb.agents[r].call("reads", names=names[1:])["us"]
            local += tb.agents[r].call("reads", names=names[:1])["us"]
        row = {"size": size, "holder": holder, "readers": len(readers),
               "first_us": median(first), "seen_us": median(seen), "local_us": median(local)}
        for k in ("first", "seen", "local"):
            row[k + "_rtts"] = row[k + "_us"] / round_trip_us
        if i == 0 and len(readers) >= 2:
            row["first_at_us"] = first_at(tb, readers, size)
            row["first_at_rtts"] = row["first_at_us"] / round_trip_us
        if i == 0:
            row.update(idle_gap(tb, readers[0], holder, size, round_trip_us))
        rows.append(row)
        log(f"hot {size_text(size)}: first read {row['first_us']:.0f} us "
            f"({row['first_rtts']:.1f} RTT), holder seen {row['seen_us']:.0f} us "
            f"({row['seen_rtts']:.1f} RTT), local {row['local_us']:.0f} us "
            f"(medians over {len(readers)} readers)"
            + (f"; first read at a location {row['first_at_us']:.0f} us "
               f"({row['first_at_rtts']:.1f} RTT)" if "first_at_us" in row else ""))
    return rows


def idle_gap(tb, reader, holder, size, round_trip_us, count=8, gap_s=0.2):
    """Reads from a holder the reader is connected to, back to back and then each after
    gap_s idle: what waking the idle processes on the way (reader, daemons, Redis, the delay
    line) adds to a read, which a reader's first read of a run pays."""
    names = [f"hot-gap-{size}-{kind}-{k}" for kind in ("warm", "idle") for k in range(count)]
    tb.agents[holder].call("put", names=names, size=size)
    warm = tb.agents[reader].call("reads", names=names[:count])["us"]
    idle = tb.agents[reader].call("reads", names=names[count:], gap=gap_s)["us"]
    return {"warm_us": median(warm), "idle_us": median(idle),
            "warm_rtts": median(warm) / round_trip_us, "idle_rtts": median(idle) / round_trip_us}


def first_at(tb, readers, size):
    """Each reader reads an object of the next reader, a holder it never reached, at that
    holder's location (no lookup): the median of the first reads."""
    us = []
    for k, r in enumerate(readers):
        holder = readers[(k + 1) % len(readers)]
        name = f"hot-at-{size}-{holder}"
        tb.agents[holder].call("put", names=[name], size=size)
        loc = tb.agents[holder].call("location")["location"]
        us += tb.agents[r].call("reads", names=[name], loc=loc)["us"]
    return median(us)


def small(tb, size, count, batch, rounds):
    reader, holder, host = 1, 2, f"{tb.env['SUBNET']}.254"
    loc = tb.agents[holder].call("location")["location"]
    names = {(r, kind): [f"small-{kind}-{r}-{k}" for k in range(count)]
             for r in range(rounds) for kind in ("id", "at")}
    many = {(r, kind): [f"many-{kind}-{r}-{k}" for k in range(batch)]
            for r in range(rounds) for kind in ("id", "at")}
    tb.agents[holder].call("put", names=sum(names.values(), []) + sum(many.values(), []),
                           size=size)
    tb.agents[holder].call("put", names=["small-warm-up"], size=size)
    tb.agents[reader].call("reads", names=["small-warm-up"])  # connected from here on
    us = {"id": [], "at": [], "redis": []}
    rate = {"id": [], "at": [], "redis": []}
    for r in range(rounds):
        us["id"] += tb.agents[reader].call("reads", names=names[r, "id"])["us"]
        us["at"] += tb.agents[reader].call("reads", names=names[r, "at"], loc=loc)["us"]
        us["redis"] += tb.agents[reader].call("redis_gets", host=host, size=size,
                                              count=count)["us"]
        rate["id"].append(batch / tb.agents[reader].call("fetch_many", names=many[r, "id"])["s"])
        rate["at"].append(batch / tb.agents[reader].call("fetch_many", names=many[r, "at"],
                                                         loc=loc)["s"])
        rate["redis"].append(batch / tb.agents[reader].call(
            "redis_gets", host=host, size=size, count=batch, pipeline=True)["s"])
    out = {"size": size, "count": count * rounds, "batch": batch}
    for k in us:
        out[f"{k}_p50_us"] = median(us[k])
        out[f"{k}_batch_per_s"] = median(rate[k])
    for k in ("id", "at"):
        out[f"{k}_p50_ratio"] = out[f"{k}_p50_us"] / out["redis_p50_us"]
        out[f"{k}_batch_ratio"] = out[f"{k}_batch_per_s"] / out["redis_batch_per_s"]
    log(f"small {size_text(size)}: p50 by id {out['id_p50_us']:.0f} us, at a location "
        f"{out['at_p50_us']:.0f} us, Redis GET {out['redis_p50_us']:.0f} us (ratios "
        f"{out['id_p50_ratio']:.2f}, {out['at_p50_ratio']:.2f}); {batch} in one call: by id "
        f"{out['id_batch_per_s']:.0f}/s, at {out['at_batch_per_s']:.0f}/s, Redis pipeline "
        f"{out['redis_batch_per_s']:.0f}/s")
    return out


def fetch_alone(tb, node, names):
    got = tb.agents[node].call("fetch", names=names)
    return got["end"] - got["start"]


def pair(tb, sizes, runs):
    rows = []
    for size in sizes:
        ferry_s, raw_s = [], []
        for run in range(runs):
            name = f"pair-{size}-{run}"
            tb.agents[1].call("put", names=[name], size=size)
            ferry_s.append(fetch_alone(tb, 2, [name]))
            raw_s.append(raw_stream(tb, 1, 2, size))
            for node in (1, 2):
                tb.agents[node].call("delete", names=[name])
        f, r = median(ferry_s), median(raw_s)
        rows.append({"size": size, "runs": runs, "ferry_s": ferry_s, "raw_s": raw_s,
                     "ferry_mib_s": size / f / MIB, "raw_mib_s": size / r / MIB, "ratio": r / f})
        log(f"pair {size_text(size)}: ferry {rows[-1]['ferry_mib_s']:.1f} MiB/s, raw TCP "
            f"{rows[-1]['raw_mib_s']:.1f} MiB/s, ratio {rows[-1]['ratio']:.3f} "
            f"(medians of {runs})")
    return rows


def at_once(tb, requests):
    """Fetches {node: names} starting together: {node: seconds}, and the span to the last."""
    at = time.monotonic() + START_LEAD_S
    got = tb.all({n: ("fetch", {"names": names, "at": at}) for n, names in requests.items()})
    per = {n: g["end"] - g["start"] for n, g in got.items()}
    late = max(g["start"] for g in got.values()) - at
    if late > 0.05:
        log(f"a node started {late * 1e3:.0f} ms after the others were told to")
    return per, max(g["end"] for g in got.values()) - at


def link_bytes(tb, node):
    return tb.agents[node].call("link")["rx_bytes"]


def share(total, parts):
    """total split in parts, each a whole number of 64 KiB."""
    return total // parts // (64 << 10) * (64 << 10)


def gather(tb, total, link_mib_s, wire_bits):
    size = share(total, tb.n - 1)
    names = {n: f"gather-{n}" for n in range(2, tb.n + 1)}
    tb.all({n: ("put", {"names": [name], "size": size}) for n, name in names.items()})
    rx0 = link_bytes(tb, 1)
    seconds = fetch_alone(tb, 1, list(names.values()))
    rx = link_bytes(tb, 1) - rx0
    got = size * len(names)
    out = {"size": size, "total": got, "sources": len(names), "seconds": seconds,
           "mib_s": got / seconds / MIB, "busy": got / seconds / MIB / link_mib_s,
           "wire_busy": rx * 8 / seconds / wire_bits}
    log(f"gather {len(names)} x {size_text(size)} to node 1: {seconds:.2f} s, "
        f"{out['mib_s']:.1f} MiB/s, the receiving link {out['busy']:.1%} busy (of raw TCP; "
        f"{out['wire_busy']:.1%} of the wire rate)")
    tb.all({n: ("delete", {"names": [name]}) for n, name in names.items()})
    tb.agents[1].call("delete", names=list(names.values()))
    return out


def cpu_seconds(tb, skip=None):
    """CPU seconds so far of every node's ferryd (but skip's), and of the whole machine (busy,
    all cores)."""
    tick = os.sysconf("SC_CLK_TCK")
    daemons = 0
    for n in (n for n in tb.agents if n != skip):
        with open(os.path.join(tb.state, f"node{n}", "pid")) as f:
            pid = f.read().strip()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        daemons += int(fields[11]) + int(fields[12])  # utime, stime
    with open("/proc/stat") as f:
        cpu = [int(v) for v in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal guest...: guest is inside user, steal is
    # another machine's
    return daemons / tick, (sum(cpu[0:3]) + cpu[5] + cpu[6]) / tick


def shuffle(tb, total, link_mib_s):
    size = share(total, tb.n - 1)
    nodes = range(1, tb.n + 1)
    tb.all({i: ("put", {"names": [f"sh-{i}-{j}" for j in nodes if j != i], "size": size})
            for i in nodes})
    cpu0 = cpu_seconds(tb)
    per, span = at_once(tb, {j: [f"sh-{i}-{j}" for i in nodes if i != j] for j in nodes})
    cpu1 = cpu_seconds(tb)
    each = size * (tb.n - 1)
    at = time.monotonic() + START_LEAD_S + 0.5
    got = tb.all({i: ("mesh", {"addr": tb.addr(i), "port": PORT + 3, "size": size, "at": at,
                               "peers": [tb.addr(j) for j in nodes if j != i]}) for i in nodes})
    raw_span = max(g["end"] for g in got.values()) - at
    out = {"size": size, "total": each, "nodes": tb.n, "span_s": span, "per_node_s": per,
           "raw_span_s": raw_span, "ratio_to_raw": raw_span / span,
           "ferryd_cpu_s": cpu1[0] - cpu0[0], "machine_busy_cores": (cpu1[1] - cpu0[1]) / span,
           "busy": each * tb.n / span / MIB / (link_mib_s * tb.n),
           "min_node_busy": min(each / s / MIB / link_mib_s for s in per.values()),
           "bound_s": each / MIB / link_mib_s}
    log(f"shuffle {tb.n} x {tb.n - 1} x {size_text(size)}: {span:.2f} s to the last "
        f"(bound {out['bound_s']:.2f} s; raw TCP all-to-all of the same bytes {raw_span:.2f} s, "
        f"ratio {out['ratio_to_raw']:.2f}), receiving links {out['busy']:.1%} busy over the "
        f"span, the least busy node {out['min_node_busy']:.1%} over its own fetch; the daemons "
        f"took {out['ferryd_cpu_s']:.1f} s of CPU, the machine {out['machine_busy_cores']:.2f} "
        f"of its {os.cpu_count()} cores")
    tb.all({i: ("delete", {"names": [f"sh-{i}-{j}" for j in nodes if j != i] +
                           [f"sh-{j}-{i}" for j in nodes if j != i]}) for i in nodes})
    return out


BCAST_COUNTERS = ("transfer_failures", "split_fetches", "relays", "ranges_relayed",
                  "relay_waits_expired", "relay_asked_again", "relays_silent",
                  "tcp_RetransSegs", "tcp_TCPTimeouts", "tcp_TCPLossProbes")


def node_stats(tb, nodes):
    """Each node's daemon counters, with its namespace's TCP loss counters (tcp_*) beside."""
    stats = {n: s["stats"] for n, s in tb.all({n: ("stats", {}) for n in nodes}).items()}
    for n, t in tb.all({n: ("tcp", {}) for n in nodes}).items():
        stats[n].update({f"tcp_{k}": v for k, v in t.items() if k != "ok"})
    return stats


def kill_node(tb, node):
    with open(os.path.join(tb.state, f"node{node}", "pid")) as f:
        os.kill(int(f.read().strip()), signal.SIGKILL)


def cut_node(tb, node, seconds):
    """Takes node's link down (a partition of the node from everyone: its peers see silence, no
    reset) for seconds, then up again, on a thread of its own."""
    def run(state):
        subprocess.run([TESTBED, "link", tb.state, str(node), state], check=True, timeout=60)

    run("down")
    timer = threading.Timer(seconds, run, args=("up",))
    timer.start()
    return timer


def fetch_spread(tb, nodes, name, spread_s, fault=None):
    """nodes fetch name, the k-th starting spread_s * k / (len - 1) after the first; with fault
    = (node, seconds, act), act(tb, node) is done that long after the first start. {node:
    (start, end)} of the nodes that completed, the first start, and the fault's node's error
    (None when it completed too)."""
    at = time.monotonic() + START_LEAD_S
    step = spread_s / max(len(nodes) - 1, 1)
    for k, n in enumerate(nodes):
        tb.agents[n].send("fetch", names=[name], at=at + k * step)
    victim_why, undo = None, None
    if fault:
        time.sleep(max(0.0, at + fault[1] - time.monotonic()))
        undo = fault[2](tb, fault[0])
    got = {}
    try:
        for n in nodes:
            try:
                g = tb.agents[n].answer()
                got[n] = (g["start"], g["end"])
            except RuntimeError as e:
                if not fault or n != fault[0]:
                    raise
                victim_why = str(e)
    finally:
        if undo:
            undo.join()
    return got, at, victim_why


def broadcast(tb, size, link_mib_s, spread_s=0.0, fault=None):
    """size bytes on node 1, nodes 2..N ask for them (at once, or their starts spread over
    spread_s; with a fault, 20 ms apart in order and node 3, the second, hit half a lone
    fetch's time in: "kill" kills its daemon, "cut" takes its link down for a lone fetch's
    time): the time to the last of the others (from the first start, and from its own start),
    beside node 2's fetch of such an object alone; each copy checked bit-exact, node 3's too
    when a cut one completed."""
    tb.agents[1].call("put", names=["bcast-alone"], size=size)
    alone = fetch_alone(tb, 2, ["bcast-alone"])
    for node in (1, 2):
        tb.agents[node].call("delete", names=["bcast-alone"])
    receivers = list(range(2, tb.n + 1))
    chain = raw_chain(tb, receivers, size) if not spread_s and not fault else None
    tb.agents[1].call("put", names=["bcast"], size=size)
    victim = 3 if fault else None
    if fault:  # 20 ms apart, in order: node 3 is the second receiver, the third's source
        spread_s = 0.02 * (len(receivers) - 1)
    act = {None: None, "kill": lambda tb, n: kill_node(tb, n),
           "cut": lambda tb, n: cut_node(tb, n, alone)}[fault]
    before = node_stats(tb, range(1, tb.n + 1))
    cpu0 = cpu_seconds(tb)
    got, at, victim_why = fetch_spread(tb, receivers, "bcast", spread_s,
                                       (victim, alone / 2, act) if fault else None)
    cpu1 = cpu_seconds(tb, skip=victim if fault == "kill" else None)
    victim_got = got.pop(victim, None)  # the others' span is the figure
    live = [n for n in range(1, tb.n + 1) if fault != "kill" or n != victim]
    after = node_stats(tb, live)
    counted = {k: sum(after[n][k] - before[n][k] for n in live) for k in BCAST_COUNTERS}
    per_node = {n: {k: after[n][k] - before[n][k] for k in BCAST_COUNTERS} for n in live}
    checked = list(got) + ([victim] if victim_got and fault == "cut" else [])
    tb.all({n: ("check", {"names": ["bcast"], "size": size}) for n in checked})
    span = max(e for _, e in got.values()) - at
    own = max(e - s for s, e in got.values())
    out = {"size": size, "receivers": tb.n - 1, "spread_s": spread_s, "fault": fault,
           "victim": victim, "victim_error": victim_why,
           "victim_s": victim_got[1] - at if victim_got and fault == "cut" else None,
           "completed": len(got), "last_s": span, "alone_s": alone,
           "ratio_to_alone": span / alone, "longest_own_s": own,
           "own_ratio_to_alone": own / alone, "bound_s": size / MIB / link_mib_s,
           "per_node_mib_s": {n: size / (e - s) / MIB for n, (s, e) in got.items()},
           "bit_exact": True, "counters_per_node": per_node,
           "machine_busy_cores": (cpu1[1] - cpu0[1]) / span,
           "raw_chain_s": chain, "ratio_to_raw_chain": span / chain if chain else None,
           **counted}
    rates = sorted(out["per_node_mib_s"].values())
    how = (f"starts spread over {spread_s:.1f} s" if spread_s else "at once") + \
        (f", node {victim} killed after {alone / 2:.2f} s" if fault == "kill" else "") + \
        (f", node {victim}'s link down after {alone / 2:.2f} s for {alone:.2f} s"
         if fault == "cut" else "")
    if fault == "cut":
        how += (f"; it completed after {out['victim_s']:.2f} s" if victim_got else
                f"; its fetch failed: {victim_why}")
    log(f"broadcast {size_text(size)} to {tb.n - 1} nodes ({how}): the last "
        + ("other " if fault else "") + f"after {span:.2f} s = "
        f"{span / alone:.2f} x one node's fetch alone ({alone:.2f} s; the link's bound "
        f"{out['bound_s']:.2f} s); the longest fetch {own:.2f} s = {own / alone:.2f} x; "
        f"{len(got)} of {tb.n - 1 - bool(fault)} others done, bit-exact; per node "
        f"{rates[0]:.1f}-{rates[-1]:.1f} MiB/s; the machine {out['machine_busy_cores']:.2f} of "
        f"its {os.cpu_count()} cores busy; "
        + (f"a raw TCP relay chain through the same nodes {chain:.2f} s "
           f"({span / chain:.2f} x); " if chain else "")
        + f"counted {counted['ranges_relayed']} ranges relayed by receivers, "
        f"{counted['transfer_failures']} failed transfers, {counted['relay_waits_expired']} "
        f"relay waits expired, {counted['relay_asked_again']} ranges asked again, "
        f"{counted['relays_silent']} silent relays given up; TCP: {counted['tcp_RetransSegs']} "
        f"segments sent again, {counted['tcp_TCPTimeouts']} timeouts, "
        f"{counted['tcp_TCPLossProbes']} loss probes")
    tb.all({n: ("delete", {"names": ["bcast"]}) for n in live})
    return out


def attempt(tb, name, run):
    """A workload's figures; or, where one of its calls failed, {"error": why}, the testbed's
    objects deleted (the other workloads still run: a failure is a result too)."""
    try:
        return run()
    except RuntimeError as e:
        log(f"{name} failed on {tb.n} nodes: {e}")
        tb.all({n: ("drop_all", {}) for n in tb.agents})
        return {"error": str(e)}


def one_testbed(a, n, first, wire_bits):
    memory = a.memory
    if not memory:
        biggest = max(a.sizes) if first and "pair" in a.workloads else 0
        memory = f"{max(512, (biggest >> 20) + 256)}M"
    log(f"testbed: {n} nodes, {a.rate} links, transport {a.transport}, arenas of {memory}"
        + (f", round trip {a.rtt}" if a.rtt else "") + (f", loss {a.loss} %" if a.loss else "")
        + (", through the delay line" if a.delayline else ""))
    tb = Testbed(a, n, memory)
    try:
        doc = {"nodes": n, "env": tb.env}
        doc["link_mib_s"] = link_rate(tb, a.link_probe, 3)
        work = a.workloads
        if first and "hot" in work:
            doc["rtt"] = rtt(tb, 200)
            doc["hot"] = hot(tb, a.hot_sizes, doc["rtt"]["node_us"])
        if first and "small" in work:
            doc["small"] = small(tb, a.small_size, 200, a.small_batch, a.runs)
        if first and "pair" in work:
            doc["pair"] = pair(tb, a.sizes, a.runs)
        rate = doc["link_mib_s"]
        for name, run in (("gather", lambda: gather(tb, a.gather, rate, wire_bits)),
                          ("shuffle", lambda: shuffle(tb, a.shuffle, rate)),
                          ("broadcast", lambda: broadcast(tb, a.broadcast, rate)),
                          ("broadcast-join",
                           lambda: broadcast(tb, a.broadcast, rate, spread_s=a.join_spread)),
                          ("broadcast-cut",
                           lambda: broadcast(tb, a.broadcast, rate, fault="cut")),
                          ("broadcast-kill",  # last: it leaves a node dead
                           lambda: broadcast(tb, a.broadcast, rate, fault="kill"))):
            if name in work:
                doc[name] = attempt(tb, name, run)
        return doc
    finally:
        tb.down()


def table(doc, f):
    p = lambda *x: print(*x, file=f)
    p(f"ferry-bench cluster: {doc['rate']} links, transport {doc['transport']}")
    for t in doc["testbeds"]:
        env = t.get("env", {})
        shaping = (f", round trip {int(env.get('RTT_US', 0))} us set, loss {env.get('LOSS', 0)} %"
                   + (" (delay line in user space)" if env.get("DELAYLINE") == "1" else
                      " (netem)" if env.get("NETEM") == "1" else ""))
        p(f"\nN = {t['nodes']}: link payload rate (raw TCP) {t['link_mib_s']:.1f} MiB/s{shaping}")
        if "rtt" in t:
            p(f"  round trip node to node {t['rtt']['node_us']:.0f} us")
        for h in t.get("hot", []):
            p(f"  hot {size_text(h['size']):>4}: first {h['first_us']:6.0f} us "
              f"({h['first_rtts']:4.1f} RTT)  seen {h['seen_us']:6.0f} us "
              f"({h['seen_rtts']:4.1f} RTT)  local {h['local_us']:4.0f} us"
              + (f"  first at a location {h['first_at_us']:6.0f} us ({h['first_at_rtts']:4.1f} RTT)"
                 if "first_at_us" in h else "")
              + (f"\n       seen, back to back {h['warm_us']:6.0f} us ({h['warm_rtts']:4.1f} RTT), "
                 f"each after 0.2 s idle {h['idle_us']:6.0f} us ({h['idle_rtts']:4.1f} RTT)"
                 if "warm_us" in h else ""))
        if "small" in t:
            s = t["small"]
            p(f"  small {size_text(s['size'])} p50: by id {s['id_p50_us']:.0f} us "
              f"({s['id_p50_ratio']:.2f} x Redis GET), at a location {s['at_p50_us']:.0f} us "
              f"({s['at_p50_ratio']:.2f} x), Redis {s['redis_p50_us']:.0f} us")
            p(f"  small {s['batch']} in one call: by id {s['id_batch_per_s']:.0f}/s "
              f"({s['id_batch_ratio']:.2f} x a Redis pipeline), at a location "
              f"{s['at_batch_per_s']:.0f}/s ({s['at_batch_ratio']:.2f} x), Redis "
              f"{s['redis_batch_per_s']:.0f}/s")
        for r in t.get("pair", []):
            p(f"  pair {size_text(r['size']):>4}: ferry {r['ferry_mib_s']:7.1f} MiB/s  raw TCP "
              f"{r['raw_mib_s']:7.1f} MiB/s  ratio {r['ratio']:.3f}")
        for name in RESULTS:
            if "error" in t.get(name, {}):
                p(f"  {name}: failed: {t[name]['error']}")
        if "gather" in t and "error" not in t["gather"]:
            g = t["gather"]
            p(f"  gather {g['sources']} x {size_text(g['size'])}: {g['seconds']:.2f} s, link "
              f"{g['busy']:.1%} busy")
        if "shuffle" in t and "error" not in t["shuffle"]:
            s = t["shuffle"]
            p(f"  shuffle {size_text(s['total'])} per node: {s['span_s']:.2f} s (bound "
              f"{s['bound_s']:.2f} s, raw TCP {s['raw_span_s']:.2f} s, ratio "
              f"{s['ratio_to_raw']:.2f}), links {s['busy']:.1%} busy, least busy node "
              f"{s['min_node_busy']:.1%}")
        for name in ("broadcast", "broadcast-join", "broadcast-cut", "broadcast-kill"):
            if name not in t or "error" in t[name]:
                continue
            b = t[name]
            p(f"  {name} {size_text(b['size'])} to {b['receivers']}: {b['last_s']:.2f} s = "
              f"{b['ratio_to_alone']:.2f} x alone, the longest fetch {b['longest_own_s']:.2f} s "
              f"= {b['own_ratio_to_alone']:.2f} x (bound {b['bound_s']:.2f} s); "
              f"{b['completed']} done, {b['ranges_relayed']} ranges relayed"
              + ("" if b.get("fault") != "cut" else
                 f"; node {b['victim']}, cut, done after {b['victim_s']:.2f} s"
                 if b["victim_s"] else f"; node {b['victim']}, cut, failed: {b['victim_error']}"))


def load_before(files):
    """The earlier runs' documents as one: their testbeds together, the first one's args."""
    docs = [json.load(open(f)) for f in files.split(",")]
    return {"ferryd_args": docs[0].get("ferryd_args", ""),
            "testbeds": [t for d in docs for t in d["testbeds"]]}


def plots(doc, out_dir, before=None):
    if not shutil.which("gnuplot"):
        raise SystemExit("--plot needs gnuplot, which is not on $PATH (Debian: apt-get install "
                         "gnuplot-nox)")
    os.makedirs(out_dir, exist_ok=True)
    beds = doc["testbeds"]
    earlier = {t["nodes"]: t.get("broadcast", {}).get("last_s", "NaN")
               for t in (before or {}).get("testbeds", [])}
    with open(os.path.join(out_dir, "cluster-n.dat"), "w") as f:
        f.write("# N broadcast_s broadcast_bound_s shuffle_s shuffle_bound_s shuffle_raw_s "
                "broadcast_serial_s broadcast_before_s broadcast_alone_s\n")
        for t in beds:
            b, s = t.get("broadcast", {}), t.get("shuffle", {})
            f.write(f"{t['nodes']} {b.get('last_s', 'NaN')} {b.get('bound_s', 'NaN')} "
                    f"{s.get('span_s', 'NaN')} {s.get('bound_s', 'NaN')} "
                    f"{s.get('raw_span_s', 'NaN')} "
                    f"{b['receivers'] * b['alone_s'] if 'alone_s' in b else 'NaN'} "
                    f"{earlier.get(t['nodes'], 'NaN')} {b.get('alone_s', 'NaN')}\n")
    pair_rows = next((t["pair"] for t in beds if "pair" in t), [])
    with open(os.path.join(out_dir, "cluster-pair.dat"), "w") as f:
        f.write("# size_bytes ferry_mib_s raw_mib_s\n")
        for r in pair_rows:
            f.write(f"{r['size']} {r['ferry_mib_s']} {r['raw_mib_s']}\n")
    b0 = next((t["broadcast"] for t in beds if "broadcast" in t), {"size": 0})
    before_label = (before or {}).get("ferryd_args") or "none given"
    s0 = next((t["shuffle"] for t in beds if "shuffle" in t), {"total": 0})
    script = f"""# ferry-bench cluster charts; run `gnuplot cluster.gp` in this directory.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {{
    set terminal pngcairo size 1000,650
}} else {{
    set terminal png size 1000,650
}}
set grid
set key top left
set xlabel "nodes (N)"
set ylabel "seconds to the last node"
set output "cluster-broadcast.png"
set title "broadcast of {size_text(b0['size'])} from one node to N-1 ({doc['rate']} links)" noenhanced
set yrange [0:*]
plot "cluster-n.dat" using 1:2 with linespoints title "ferry", \\
     "" using 1:8 with linespoints title "ferry before (--before: {before_label})", \\
     "" using 1:9 with lines dashtype 4 title "one node's fetch alone (a pair)", \\
     "" using 1:7 with lines dashtype 3 title "N-1 fetches, one after another, from the one holder", \\
     "" using 1:3 with lines dashtype 2 title "one link's time (raw TCP): a pipeline's bound"
set output "cluster-shuffle.png"
set title "shuffle: every node receives {size_text(s0['total'])} from the N-1 others at once ({doc['rate']} links)" noenhanced
plot "cluster-n.dat" using 1:4 with linespoints title "ferry", \\
     "" using 1:6 with linespoints title "raw TCP all-to-all of the same bytes", \\
     "" using 1:5 with lines dashtype 2 title "bound: what a node receives over its link (raw TCP)"
set output "cluster-pair.png"
set title "pair: one node fetches from another ({doc['rate']} links)" noenhanced
set logscale x 2
set xlabel "object size (bytes)"
set ylabel "MiB/s"
plot "cluster-pair.dat" using 1:2 with linespoints title "ferry", \\
     "" using 1:3 with linespoints title "raw TCP stream"
"""
    with open(os.path.join(out_dir, "cluster.gp"), "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", "cluster.gp"], cwd=out_dir, check=True)
    log(f"charts: {out_dir}/cluster-broadcast.png, cluster-shuffle.png, cluster-pair.png")


RESULTS = ("gather", "shuffle", "broadcast", "broadcast-join", "broadcast-cut",
           "broadcast-kill")
WORKLOADS = ("hot", "small", "pair") + RESULTS


def main():
    ap = argparse.ArgumentParser(prog="ferry-bench cluster",
                                 description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--nodes", default="8", help="testbed sizes, comma-separated (default 8)")
    ap.add_argument("--rate", default="1gbit", help="each link's rate each way (default 1gbit)")
    ap.add_argument("--rtt", help="round trip between two nodes (testbed.sh -d: 100us, 1ms); "
                    "without netem in the kernel, a delay line in user space adds it")
    ap.add_argument("--loss", help="loss in percent per hop, each way (testbed.sh -l)")
    ap.add_argument("--delayline", action="store_true",
                    help="links through the delay line even without --rtt or --loss "
                    "(testbed.sh -L: what it costs)")
    ap.add_argument("--transport", default="tcp", help="tcp (default), rxm, fabric or auto")
    ap.add_argument("--memory", help="each node's arena (default: 512M, and on the first "
                    "testbed the largest pair size and 256M more where that is larger)")
    ap.add_argument("--sizes", default="64K,1M,16M,128M,1G", help="pair sizes")
    ap.add_argument("--runs", type=int, default=3, help="pair runs per size (default 3)")
    ap.add_argument("--hot-sizes", default="1K,4K,16K,64K")
    ap.add_argument("--small-size", default="4K", help="small: the objects (default 4K)")
    ap.add_argument("--small-batch", type=int, default=500,
                    help="small: objects in one call (default 500)")
    ap.add_argument("--gather", default="224M", help="bytes gathered (default 224M)")
    ap.add_argument("--shuffle", default="224M", help="bytes each node receives (default 224M)")
    ap.add_argument("--broadcast", default="256M", help="the object (default 256M)")
    ap.add_argument("--join-spread", type=float, default=1.0,
                    help="broadcast-join: receivers' starts spread over this many seconds")
    ap.add_argument("--before", metavar="FILE[,FILE]", help="--plot: earlier runs' JSON whose "
                    "broadcast is drawn beside this one's (e.g. --ferryd-args \"--relay-min 0\")")
    ap.add_argument("--link-probe", default="64M", help="raw stream measuring the link")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--ferryd-args", metavar="ARGS", help="more arguments for every ferryd "
                    "(testbed.sh -a: \"--timers answer=10000\")")
    ap.add_argument("--json", action="store_true", help="the JSON document on stdout")
    ap.add_argument("--keep-logs", metavar="DIR", help="each node's ferryd.log into DIR/N<n>/")
    ap.add_argument("--plot", metavar="DIR", help="gnuplot charts into DIR")
    ap.add_argument("--bin", default=os.environ.get("FERRY_BIN_DIR",
                                                    os.path.join(ROOT, "build", "bin")))
    a = ap.parse_args()
    a.sizes = [size_bytes(s) for s in a.sizes.split(",")]
    a.hot_sizes = [size_bytes(s) for s in a.hot_sizes.split(",")]
    a.small_size = size_bytes(a.small_size)
    for k in ("gather", "shuffle", "broadcast", "link_probe"):
        setattr(a, k, size_bytes(getattr(a, k)))
    a.workloads = a.workloads.split(",")
    unknown = set(a.workloads) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    if os.geteuid() != 0:
        raise SystemExit("ferry-bench cluster: needs root (network namespaces, veth links, tc)")
    counts = [int(n) for n in a.nodes.split(",")]
    if any(n < 3 for n in counts):
        ap.error("--nodes: at least 3 nodes per testbed")
    # TERM (a timeout's, a scheduler's) unwinds like Ctrl-C, through every testbed's down().
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    doc = {"suite": "cluster", "rate": a.rate, "transport": a.transport,
           "ferryd_args": a.ferryd_args or "",
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "testbeds": []}
    wire = rate_bits(a.rate)
    for k, n in enumerate(counts):
        doc["testbeds"].append(one_testbed(a, n, k == 0, wire))
    table(doc, sys.stderr if a.json else sys.stdout)
    if a.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    if a.plot:
        plots(doc, a.plot, load_before(a.before) if a.before else None)
    failed = [f"{name} on {t['nodes']} nodes" for t in doc["testbeds"]
              for name in RESULTS if "error" in t.get(name, {})]
    if failed:
        log(f"failed: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
