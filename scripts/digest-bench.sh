#!/bin/sh
# digest-bench.sh BASE_BUILD NEW_BUILD [RUNS] - the digest's cost, one build against another,
# interleaved (base, new, base, new, ...), RUNS runs each (default 3), medians and ranges:
#   fetch        ferry-bench remote --sizes 256M --transport tcp (no --verify): MiB/s of fetch
#                (since 0.11 a node checks by default: for such a build this row checks too)
#   fetch-verify the same with --verify (every fetched chunk hashed by the receiver)
#   put          ferry-bench local --sizes 64M (a standalone ferryd): MiB/s of put
#   put-cluster  ferry-bench local --socket on a ferryd with a directory (a cluster node, which
#                hashes every sealed object to publish its root): MiB/s of put
# Each ferry-bench call: --rounds 3 --seconds 0.3 --json. BUILD is a build directory (bin/
# holds ferryd and ferry-bench). Needs redis-server.
set -eu

[ $# -ge 2 ] || { echo "usage: $0 BASE_BUILD NEW_BUILD [RUNS]" >&2; exit 2; }
BASE=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
RUNS=${3:-3}
TMP=$(mktemp -d /tmp/digest-bench.XXXXXX)
REDIS_PID=
FERRYD_PID=
cleanup() {
    [ -z "$FERRYD_PID" ] || kill "$FERRYD_PID" 2>/dev/null || true
    [ -z "$REDIS_PID" ] || kill "$REDIS_PID" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

COMMON="--rounds 3 --seconds 0.3 --json"

# mibps FILE SYSTEM OP: the MiB/s of that result in a ferry-bench JSON output.
mibps() {
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
print(next(r["mib_per_sec"] for r in d["results"] if r["system"] == sys.argv[2] and r["op"] == sys.argv[3]))' "$1" "$2" "$3"
}

# put_cluster BUILD OUT: a ferryd with a directory (redis on $REDIS_PORT), its put of 64M.
put_cluster() {
    sock=$TMP/cluster.sock
    "$1/bin/ferryd" --socket "$sock" --memory 1G --node-id digest-bench \
        --listen 127.0.0.1:$FERRYD_PORT --directory "redis://127.0.0.1:$REDIS_PORT" \
        >"$TMP/ferryd.log" 2>&1 &
    FERRYD_PID=$!
    i=0
    while [ ! -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    PATH="$1/bin:$PATH" "$1/bin/ferry-bench" local --socket "$sock" --sizes 64M $COMMON \
        >"$2" 2>/dev/null
    kill "$FERRYD_PID"
    wait "$FERRYD_PID" 2>/dev/null || true
    FERRYD_PID=
    rm -f "$sock"
}

REDIS_PORT=$((20000 + $$ % 20000))
FERRYD_PORT=$((REDIS_PORT + 1))
redis-server --port $REDIS_PORT --bind 127.0.0.1 --save '' --appendonly no \
    >"$TMP/redis.log" 2>&1 &
REDIS_PID=$!
sleep 0.3

: >"$TMP/figures"
run=1
while [ $run -le "$RUNS" ]; do
    for side in base new; do
        if [ $side = base ]; then B=$BASE; else B=$NEW; fi
        out=$TMP/$side.$run
        PATH="$B/bin:$PATH" "$B/bin/ferry-bench" remote --sizes 256M --transport tcp $COMMON \
            >"$out.fetch" 2>/dev/null
        echo "fetch $side $(mibps "$out.fetch" ferry-tcp fetch)" >>"$TMP/figures"
        PATH="$B/bin:$PATH" "$B/bin/ferry-bench" remote --sizes 256M --transport tcp --verify \
            $COMMON >"$out.verify" 2>/dev/null
        echo "fetch-verify $side $(mibps "$out.verify" ferry-tcp fetch)" >>"$TMP/figures"
        PATH="$B/bin:$PATH" "$B/bin/ferry-bench" local --sizes 64M $COMMON >"$out.put" 2>/dev/null
        echo "put $side $(mibps "$out.put" ferry put)" >>"$TMP/figures"
        put_cluster "$B" "$out.cput"
        echo "put-cluster $side $(mibps "$out.cput" ferry put)" >>"$TMP/figures"
        tail -n 4 "$TMP/figures" | sed "s/^/run $run: /" >&2
    done
    run=$((run + 1))
done

python3 - "$TMP/figures" "$RUNS" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    what, side, v = line.split()
    rows.setdefault(what, {}).setdefault(side, []).append(float(v))
print(f"MiB/s, median (min-max) of {sys.argv[2]} interleaved runs")
print(f"{'':14}{'base':>24}{'new':>24}{'new/base':>10}")
for what in ("fetch", "fetch-verify", "put", "put-cluster"):
    b, n = rows[what]["base"], rows[what]["new"]
    mb, mn = statistics.median(b), statistics.median(n)
    cell = lambda v, m: f"{m:.0f} ({min(v):.0f}-{max(v):.0f})"
    print(f"{what:14}{cell(b, mb):>24}{cell(n, mn):>24}{mn / mb:>10.3f}")
EOF
