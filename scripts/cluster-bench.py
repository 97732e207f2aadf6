#!/usr/bin/env python3
"""cluster-bench.py - ferry on a testbed of nodes in network namespaces (scripts/testbed.sh),
each figure beside its physical bound, measured in the same run:

  pair       node 2 fetches an object of each size from node 1, beside a raw TCP stream of the
             same bytes from node 1's namespace to node 2's over the same shaped links;
  broadcast  an object on node 1, nodes 2..N ask for it at once: the time to the last node,
             against node 2's time for another object of that size alone (N-1 times it when
             every node pulls from the one holder).

Progress on stderr, a table on stdout, the figures as JSON with --json FILE. Needs root.
A fetch is timed around the `ferry fetch` command run in the node's namespace, so each figure
carries a process start (tenths of a second here): sizes below ~128 MiB understate ferry, and
vary from run to run.
    scripts/cluster-bench.py --nodes 8 --rate 1gbit --sizes 16M,128M --broadcast 128M
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTBED = os.path.join(ROOT, "scripts", "testbed.sh")

# The raw reference: a receiver that reads n bytes and says how long from its first byte.
RECEIVER = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("ready", flush=True)
c, _ = s.accept(); n = int(sys.argv[3]); got = 0; t0 = None
while got < n:
    b = c.recv(1 << 20)
    if not b: break
    if t0 is None: t0 = time.monotonic()
    got += len(b)
print(got, time.monotonic() - t0, flush=True)
"""
SENDER = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
buf = b"\0" * (1 << 20); n = int(sys.argv[3])
while n > 0:
    k = min(n, len(buf)); c.sendall(buf[:k]); n -= k
c.close()
"""


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].isalpha() else int(text)


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class Testbed:
    def __init__(self, nodes, rate, memory, bin_dir):
        out = subprocess.run([TESTBED, "up", "-n", str(nodes), "-r", rate, "-m", memory,
                              "-b", bin_dir], check=True, capture_output=True, text=True,
                             timeout=120)
        self.state = out.stdout.strip().splitlines()[-1]
        self.env = dict(line.split("=", 1) for line in open(os.path.join(self.state, "env"))
                        .read().split())
        self.bin = bin_dir

    def down(self):
        subprocess.run([TESTBED, "down", self.state], check=False, timeout=60)

    def cmd(self, node, *args):
        return [TESTBED, "exec", self.state, str(node), *args]

    def ferry(self, node, *args, timeout=300):
        return subprocess.run(self.cmd(node, os.path.join(self.bin, "ferry"), *args),
                              check=True, capture_output=True, text=True, timeout=timeout)

    def address(self, node):
        return f"{self.env['SUBNET']}.{node}"


def raw_stream(tb, size, port=9100):
    """Seconds a raw TCP stream of size bytes takes from node 1 to node 2."""
    rx = subprocess.Popen(tb.cmd(2, sys.executable, "-c", RECEIVER, tb.address(2), str(port),
                                 str(size)), stdout=subprocess.PIPE, text=True)
    assert rx.stdout.readline().strip() == "ready"
    subprocess.run(tb.cmd(1, sys.executable, "-c", SENDER, tb.address(2), str(port),
                          str(size)), check=True, timeout=300)
    got, seconds = rx.stdout.readline().split()
    rx.wait(timeout=60)
    assert int(got) == size, f"raw stream: {got} of {size} bytes"
    return float(seconds)


def put(tb, node, name, size, tmp):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    tb.ferry(node, "put", name, path)
    os.unlink(path)


def timed_fetch(tb, node, name):
    t0 = time.monotonic()
    tb.ferry(node, "fetch", name, "--timeout", "600000", timeout=700)
    return time.monotonic() - t0


def pair(tb, sizes, tmp):
    rows = []
    for size in sizes:
        name = f"pair-{size}"
        put(tb, 1, name, size, tmp)
        ferry_s = timed_fetch(tb, 2, name)
        raw_s = raw_stream(tb, size)
        rows.append({"size": size, "ferry_s": ferry_s, "raw_s": raw_s,
                     "ferry_mib_s": size / ferry_s / (1 << 20), "raw_mib_s": size / raw_s / (1 << 20),
                     "ratio": raw_s / ferry_s})
        log(f"pair {size >> 20} MiB: ferry {rows[-1]['ferry_mib_s']:.0f} MiB/s, raw TCP "
            f"{rows[-1]['raw_mib_s']:.0f} MiB/s, ratio {rows[-1]['ratio']:.2f}")
    return rows


def broadcast(tb, size, nodes, tmp):
    put(tb, 1, f"bref-{size}", size, tmp)
    pair_s = timed_fetch(tb, 2, f"bref-{size}")  # an object of the same size, alone: the pair
    name = f"bcast-{size}"
    put(tb, 1, name, size, tmp)
    t0 = time.monotonic()
    procs = {n: subprocess.Popen(tb.cmd(n, os.path.join(tb.bin, "ferry"), "fetch", name,
                                        "--timeout", "600000"), stdout=subprocess.DEVNULL)
             for n in range(2, nodes + 1)}
    ended = {}
    while procs:
        for n, p in list(procs.items()):
            if p.poll() is not None:
                if p.returncode != 0:
                    raise RuntimeError(f"broadcast: node {n}'s fetch failed ({p.returncode})")
                ended[n] = time.monotonic() - t0
                del procs[n]
        time.sleep(0.005)
    last = max(ended.values())
    log(f"broadcast {size >> 20} MiB to {nodes - 1} nodes at once: last after {last:.2f} s, "
        f"{last / pair_s:.2f} x the pair ({pair_s:.2f} s)")
    return {"size": size, "receivers": nodes - 1, "pair_s": pair_s, "last_s": last,
            "per_node_s": ended, "ratio_to_pair": last / pair_s}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--memory", default="1G")
    ap.add_argument("--sizes", default="1M,16M,128M")
    ap.add_argument("--broadcast", default="128M")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--json")
    a = ap.parse_args()
    sizes = [size_bytes(s) for s in a.sizes.split(",")]
    log(f"testbed: {a.nodes} nodes, {a.rate} links")
    tb = Testbed(a.nodes, a.rate, a.memory, a.bin)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = {"nodes": a.nodes, "rate": a.rate, "env": tb.env,
                      "pair": pair(tb, sizes, tmp),
                      "broadcast": broadcast(tb, size_bytes(a.broadcast), a.nodes, tmp)}
    finally:
        tb.down()
    print(f"{'pair':<10}{'size':>8}{'ferry MiB/s':>14}{'raw MiB/s':>12}{'ratio':>8}")
    for r in result["pair"]:
        print(f"{'':<10}{r['size'] >> 20:>6}Mi{r['ferry_mib_s']:>14.0f}{r['raw_mib_s']:>12.0f}"
              f"{r['ratio']:>8.2f}")
    b = result["broadcast"]
    print(f"broadcast {b['size'] >> 20} MiB to {b['receivers']} nodes: last after "
          f"{b['last_s']:.2f} s = {b['ratio_to_pair']:.2f} x the pair")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
