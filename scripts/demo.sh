#!/bin/sh
# make demo: what ferry does, in four steps of a line or two each, in seconds:
#   1. C: examples/put_get.c (built as example_put_get) stores a buffer and reads it in place;
#      the ferry command line (over libferry) stores a file and reads it back;
#   2. Python: one process puts a 1 GiB NumPy array, another reads it without a copy (its array
#      lies in the daemon's arena mapping) and times that against a copy of it;
#   3. two nodes: two ferryd with a redis-server as their directory; an object stored on one
#      is fetched by the other;
#   4. spill: a ferryd with a small arena and a spill directory stores more than fits, and
#      every object reads back.
# Benchmarks are make bench's. Everything runs on loopback (free ports) and in a temporary
# directory; every process it starts is stopped on exit, however it exits.
# Usage: demo.sh [BUILD_DIR] (default build); needs redis-server and Debian's python3 with
# NumPy (scripts/install-deps.sh build).
set -eu
build=${1:-build}
bin=$(cd "$build/bin" && pwd)
pythonpath=$(cd "$build" && pwd)/python
root=$(cd "$(dirname "$0")/.." && pwd)
# Debian's python3, which has NumPy (the one first on PATH may be another build without it).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
dir=$(mktemp -d)
pids=""
# stop_all: ends every process started so far.
stop_all() {
    for p in $pids; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    pids=""
}
# cleanup: stops everything; the directory goes, but for a failed demo, whose logs it keeps.
cleanup() {
    status=$?
    stop_all
    if [ "$status" -eq 0 ]; then
        rm -rf "$dir"
    else
        echo "demo failed: the logs are in $dir" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

# start NAME COMMAND...: runs COMMAND in the background, output in $dir/NAME.log.
start() {
    name=$1
    shift
    "$@" >"$dir/$name.log" 2>&1 &
    pids="$pids $!"
}

# wait_for LOG WHAT COMMAND...: retries COMMAND for up to 10 s, else shows LOG and fails.
wait_for() {
    log=$1
    what=$2
    shift 2
    i=0
    until "$@" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -gt 200 ] && { cat "$dir/$log.log"; echo "$what"; exit 1; }
        sleep 0.05
    done
}

# free_port: sets port to a TCP port below the ephemeral range that was free a moment ago and
# that no earlier call handed out (the tests' rule: tools/free_port.h).
used_ports=""
free_port() {
    while :; do
        p=$("$py" "$root/tests/python/free_port.py") || exit 1
        case " $used_ports " in *" $p "*) continue ;; esac
        break
    done
    used_ports="$used_ports $p"
    port=$p
}

# ferryd NAME ARGS...: a ferryd with its socket at $dir/NAME.sock, once it answers.
ferryd() {
    name=$1
    shift
    start "$name" "$bin/ferryd" --socket "$dir/$name.sock" "$@"
    wait_for "$name" "ferryd $name did not start" "$bin/ferry" --socket "$dir/$name.sock" stat
}
# fy NAME ARGS...: the ferry command line against ferryd NAME.
fy() {
    name=$1
    shift
    "$bin/ferry" --socket "$dir/$name.sock" "$@"
}
# ms: milliseconds since the epoch; elapsed: sets took to the milliseconds since $t0.
ms() { date +%s%3N; }
elapsed() { took=$(($(ms) - t0)); }
# same A B: fails the demo unless files A and B are identical.
same() {
    cmp -s "$1" "$2" || { echo "FAILED: $2 differs from $1" >&2; exit 1; }
}

echo "ferry demo: on loopback, in $dir"

# ---- 1. C ----
ferryd local --memory 1280M
head -c 67108864 /dev/urandom >"$dir/file"
t0=$(ms)
fy local put demo-file "$dir/file" --meta "from make demo"
elapsed
put_ms=$took
t0=$(ms)
fy local get demo-file -o "$dir/file.back"
elapsed
# The C example is built with the tests (tests/CMakeLists.txt): absent when BUILD_TESTING is off.
step="1. C:"
if [ -x "$bin/example_put_get" ]; then
    said=$(FERRY_SOCKET=$dir/local.sock "$bin/example_put_get" demo-hello)
    echo "$step examples/put_get.c says $said"
    step="  "
fi
same "$dir/file" "$dir/file.back"
echo "$step the ferry CLI put a 64 MiB file into a ferryd in $put_ms ms, got it back in $took ms:" \
    "identical"

# ---- 2. Python ----
# python_array put|get: the writer stores a 1 GiB float64 array (0, 1, 2, ...) as demo-array
# and exits; the reader, another process, gets it, finds the mapping its data lies in
# (examples/share_arrays.py's arena_file_of), checks its sum (exact in float64: every partial
# sum is an integer below 2**53), and times a copy of it for comparison.
python_array() {
    PYTHONPATH="$pythonpath:$root/examples" "$py" - "$1" "$dir/local.sock" <<'EOF'
import os, sys, time
import numpy as np
import ferry
from share_arrays import arena_file_of

mode, sock = sys.argv[1:]
n = 2**27  # float64: 1 GiB
with ferry.Client(sock) as client:
    if mode == "put":
        array = np.arange(n, dtype=np.float64)
        t0 = time.perf_counter()
        client.put("demo-array", array, metadata=b"float64")
        took = time.perf_counter() - t0
        print(f"2. Python: process {os.getpid()} put a 1 GiB NumPy array in {1e3 * took:.0f} ms"
              " (its one copy, into the arena) and exited;")
    else:
        t0 = time.perf_counter()
        buf = client.get("demo-array")
        array = np.frombuffer(buf, dtype=np.float64)
        took = time.perf_counter() - t0
        address = array.__array_interface__["data"][0]
        t0 = time.perf_counter()
        copy = array.copy()
        copy_took = time.perf_counter() - t0
        if float(array.sum()) != n * (n - 1) / 2 or copy[-1] != n - 1:
            sys.exit("FAILED: demo-array does not hold 0, 1, 2, ...")
        where = arena_file_of(address)
        print(f"   process {os.getpid()} got it in {1e6 * took:.0f} µs: no copy, its data lies in"
              f" the arena ({where}{'' if array.flags.writeable else ', read-only'});"
              f" a copy of it takes {1e3 * copy_took:.0f} ms")
        del copy, array, buf
        if where != "/memfd:ferry-arena":
            sys.exit("FAILED: the array is not in the arena")
EOF
}
python_array put
python_array get
stop_all

# ---- 3. two nodes ----
# node_a / node_b ARGS...: the ferry CLI on node demo-a / demo-b.
node_a() { fy a "$@"; }
node_b() { fy b "$@"; }
both_listed() {
    nodes=$(node_b nodes) || return 1
    case $nodes in *demo-a*) ;; *) return 1 ;; esac
    case $nodes in *demo-b*) ;; *) return 1 ;; esac
}
free_port
rport=$port
start redis redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$dir"
wait_for redis "redis-server did not start" redis-cli -p "$rport" ping
for n in a b; do
    free_port
    ferryd "$n" --memory 256M --node-id "demo-$n" --listen "127.0.0.1:$port" \
        --directory "redis://127.0.0.1:$rport"
done
wait_for b "the directory did not list both nodes" both_listed
node_a put demo-cluster "$dir/file" --meta "from make demo, on demo-a"
t0=$(ms)
node_b fetch demo-cluster
elapsed
node_b get demo-cluster -o "$dir/cluster.back"
# How demo-b reaches demo-a: "fabric, PROVIDER, connected in N ms" or "tcp" (ferry stat --all:
# peers, fabric_connect_us).
how=$(node_b stat --all | awk '$1 == "peers" && $2 == "demo-a" { how = $3; provider = $4 }
    $1 == "fabric_connect_us" { us = $2 }
    END { if (how == "fabric") printf "fabric, %s, connected in %.1f ms", provider, us / 1000
          else printf "%s", how }')
same "$dir/file" "$dir/cluster.back"
echo "3. Two ferryd, redis-server on 127.0.0.1:$rport as their directory: demo-b fetched 64 MiB" \
    "from demo-a in $took ms ($how): identical;"
head -c 67108864 /dev/urandom >"$dir/file2"
node_a put demo-cluster-2 "$dir/file2"
t0=$(ms)
node_b fetch demo-cluster-2
elapsed
echo "   a second 64 MiB over that connection in $took ms ($((64000 / (took > 0 ? took : 1))) MiB/s); the first" \
    "is held by $(node_b where demo-cluster | sed -n 's/^[* ] *\(demo-[ab]\) .*/\1/p' | paste -sd,)"
stop_all

# ---- 4. spill ----
ferryd spill --memory 32M --spill-dir "$dir/spill"
head -c 8388608 /dev/urandom >"$dir/object"
for i in 1 2 3 4 5 6 7 8 9 10; do fy spill put "spilled-$i" "$dir/object"; done
on_disk=$(fy spill ls | grep -c ' on disk ')
t0=$(ms)
for i in 1 2 3 4 5 6 7 8 9 10; do
    fy spill get "spilled-$i" -o "$dir/object.back"
    same "$dir/object" "$dir/object.back"
done
elapsed
echo "4. Spill: a ferryd with a 32 MiB arena and a --spill-dir took 10 objects of 8 MiB ($on_disk" \
    "went to disk); all 10 read back identical in $took ms"
stop_all
echo "Benchmarks: make bench. More: examples/share_arrays.py, examples/two_node_fetch.py."
