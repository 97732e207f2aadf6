"""relay_model.py - how a broadcast's time grows with its receivers, for relay layouts ferry has
and could have, calibrated by ferry-bench cluster's own broadcasts.

A broadcast of S bytes to n receivers over links of payload rate r, in ranges of R bytes each,
store-and-forward (a node passes a range on once it has it whole and checked):

  chain (ferry's relays: each receiver takes its ranges from the one that began just before it)
        T = S/r + (n - 1) * h,         h = R/r + o
  tree of k stripes (each node interior in one stripe's k-ary tree, a leaf of the others; every
  link still carries S once: a node sends its stripe, S/k, to k children at r/k each)
        T = S/r + (d - 1) * (k*R/r + o),   d = ceil(log_k(n*(k-1)/k + 1)) + 1

o is what a hop costs beyond its range's time on the link (asking for it, checking it, waking
the next node): fitted from broadcasts measured with --json (the median over testbeds), or
given. The pipeline's start, one range per hop, is the whole cost of depth: a raw TCP relay
chain streams each byte on at once and pays almost nothing per hop.

    build/bin/ferry-bench cluster --nodes 8,16,32 --rate 100mbit --workloads broadcast \\
        --broadcast 64M --json > bcast.json
    python3 tools/bench/relay_model.py --from bcast.json
"""
import argparse
import json
import math
import statistics

MIB = 1 << 20


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].isalpha() else int(text)


def chain_s(n, size, rate, rng, over):
    return size / rate + (n - 1) * (rng / rate + over)


def depth(n, k):
    """Hops from the holder to the deepest receiver of a k-stripe tree: the interior nodes of a
    stripe (n/k of them) form a k-ary tree under the holder, and the others hang below them."""
    interior = max(1, math.ceil(n / k))
    levels = 1
    while (k ** levels - 1) // (k - 1) < interior:
        levels += 1
    return levels + (1 if n > interior else 0)


def tree_s(n, size, rate, rng, over, k):
    return size / rate + (depth(n, k) - 1) * (k * rng / rate + over)


def fitted_overhead(docs, rng):
    """o from each measured broadcast (all at once): (T - S/r) / (n - 1) - R/r; their median,
    and the points it came from."""
    points = []
    for t in (t for d in docs for t in d["testbeds"]):
        b = t.get("broadcast")
        if not b or "error" in b or b.get("spread_s"):
            continue
        rate = t["link_mib_s"] * MIB
        n = b["receivers"]
        hop = (b["last_s"] - b["size"] / rate) / max(n - 1, 1)
        points.append((n, b["last_s"], b["alone_s"], hop, hop - rng / rate))
    if not points:
        raise SystemExit("relay_model: no broadcast in the documents given")
    return statistics.median(p[4] for p in points), points


def main():
    ap = argparse.ArgumentParser(prog="relay_model.py", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--from", dest="docs", metavar="FILE[,FILE]",
                    help="ferry-bench cluster --json documents to fit o from")
    ap.add_argument("--overhead-ms", type=float, help="o, instead of fitting it")
    ap.add_argument("--rate", type=float, default=11.4, help="link payload rate, MiB/s "
                    "(default 11.4: raw TCP on 100 Mbit/s links here)")
    ap.add_argument("--size", default="64M", help="the object (default 64M)")
    ap.add_argument("--range", default="1M", help="the relayed range ferry uses (default 1M)")
    ap.add_argument("--receivers", default="7,15,31,63,127,255,1000")
    a = ap.parse_args()
    rate, size, rng = a.rate * MIB, size_bytes(a.size), size_bytes(a.range)
    if a.overhead_ms is not None:
        over = a.overhead_ms / 1e3
    elif a.docs:
        docs = [json.load(open(f)) for f in a.docs.split(",")]
        over, points = fitted_overhead(docs, rng)
        for n, last, alone, hop, o in points:
            print(f"measured: {n} receivers, last after {last:.2f} s = {last / alone:.2f} x a "
                  f"lone fetch; {hop * 1e3:.0f} ms a hop, {o * 1e3:.0f} ms beyond the range")
    else:
        ap.error("give --from FILE or --overhead-ms MS")
    alone = size / rate
    print(f"model: {a.size} at {a.rate:.1f} MiB/s (alone {alone:.2f} s), a hop's overhead "
          f"{over * 1e3:.0f} ms; seconds to the last receiver (x a lone fetch)")
    layouts = [(f"chain, {a.range} ranges", lambda n: chain_s(n, size, rate, rng, over))]
    if rng != MIB:
        layouts.append(("chain, 1M ranges", lambda n: chain_s(n, size, rate, MIB, over)))
    layouts += [("2 stripes, 1M", lambda n: tree_s(n, size, rate, MIB, over, 2)),
                ("4 stripes, 1M", lambda n: tree_s(n, size, rate, MIB, over, 4))]
    print(f"{'receivers':>10}" + "".join(f"{name:>22}" for name, _ in layouts))
    for n in (int(x) for x in a.receivers.split(",")):
        cells = "".join(f"{f(n):11.1f} s ({f(n) / alone:5.2f})" for _, f in layouts)
        print(f"{n:>10}{cells}")


if __name__ == "__main__":
    main()
