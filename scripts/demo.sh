#!/bin/sh
# make demo: starts a daemon, stores a file and reads it back, prints the stats and a short
# benchmark table; then a cluster of two daemons with a redis-server as their directory: a
# file stored on one node is fetched to the other, and a short benchmark of fetches between
# them. Everything runs on loopback and in a temporary directory.
set -eu
build=${1:-build}
bin=$(cd "$build/bin" && pwd)
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
cleanup() {
    stop_all
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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
        p=$(python3 "$(dirname "$0")/../tests/python/free_port.py") || exit 1
        case " $used_ports " in *" $p "*) continue ;; esac
        break
    done
    used_ports="$used_ports $p"
    port=$p
}

sock="$dir/ferry.sock"
echo "== starting ferryd (256 MiB arena) on $sock"
start ferryd "$bin/ferryd" --socket "$sock" --memory 256M
wait_for ferryd "ferryd did not start" "$bin/ferry" --socket "$sock" stat

echo "== put a 8 MiB file as 'demo-file', read it back"
head -c 8388608 /dev/urandom >"$dir/in"
"$bin/ferry" --socket "$sock" put demo-file "$dir/in" --meta "from make demo"
"$bin/ferry" --socket "$sock" get demo-file -o "$dir/out"
cmp "$dir/in" "$dir/out" && echo "read back: identical ($(wc -c <"$dir/out") bytes)"
echo "hash: $("$bin/ferry" --socket "$sock" hash demo-file)"
"$bin/ferry" --socket "$sock" ls
echo "== stats"
"$bin/ferry" --socket "$sock" stat
stop_all

echo "== benchmark (short run; 'make bench' for the full one)"
"$bin/ferry-bench" local --seconds 0.2

# ---- cluster ----
# node_a / node_b ARGS...: the ferry CLI on node demo-a / demo-b.
node_a() { "$bin/ferry" --socket "$dir/a.sock" "$@"; }
node_b() { "$bin/ferry" --socket "$dir/b.sock" "$@"; }
both_listed() {
    nodes=$(node_b nodes) || return 1
    case $nodes in *demo-a*) ;; *) return 1 ;; esac
    case $nodes in *demo-b*) ;; *) return 1 ;; esac
}

free_port
rport=$port
echo "== cluster: redis-server on 127.0.0.1:$rport as the directory, ferryd demo-a and demo-b"
start redis redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$dir"
wait_for redis "redis-server did not start" redis-cli -p "$rport" ping
for n in a b; do
    free_port
    start "ferryd-$n" "$bin/ferryd" --socket "$dir/$n.sock" --memory 256M --node-id "demo-$n" \
        --listen "127.0.0.1:$port" --directory "redis://127.0.0.1:$rport"
    wait_for "ferryd-$n" "ferryd demo-$n did not start" "node_$n" stat
done
wait_for ferryd-b "the directory did not list both nodes" both_listed

echo "== put a 16 MiB file as 'demo-cluster' on demo-a, fetch it on demo-b"
head -c 16777216 /dev/urandom >"$dir/in-cluster"
node_a put demo-cluster "$dir/in-cluster" --meta "from make demo, on demo-a"
node_b fetch demo-cluster
node_b get demo-cluster -o "$dir/out-cluster"
cmp "$dir/in-cluster" "$dir/out-cluster" &&
    echo "read on demo-b: identical ($(wc -c <"$dir/out-cluster") bytes)"
echo "== where demo-cluster is"
node_b where demo-cluster
echo "== how demo-b reached demo-a: transport, provider, first-contact cost (fabric_connect_us)"
node_b stat --all | grep -E '^(peers|fabric_provider|fabric_connects|fabric_connect_us|fabric_registrations|fabric_av_inserts|connections_opened) '
echo "== 1000 more fetches: no new connection, registration or address (the same counters)"
head -c 4096 /dev/urandom >"$dir/small"
for i in $(seq 1 1000); do node_a put "small-$i" "$dir/small"; done
node_b fetch $(seq -f 'small-%g' 1 1000) >/dev/null
node_b stat --all | grep -E '^(transfers_in|fabric_connects|fabric_registrations|fabric_av_inserts|connections_opened) '
echo "== nodes"
node_b nodes
stop_all

echo "== Python: two processes share NumPy arrays through one daemon, without copies"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
start ferryd-py "$bin/ferryd" --socket "$dir/py.sock" --memory 512M
wait_for ferryd-py "ferryd did not start" "$bin/ferry" --socket "$dir/py.sock" stat
PYTHONPATH="$(cd "$build" && pwd)/python" "$py" examples/share_arrays.py --socket "$dir/py.sock"
stop_all
echo "== Python: a two-node fetch (two daemons and Redis on this host)"
PYTHONPATH="$(cd "$build" && pwd)/python" "$py" examples/two_node_fetch.py --ferryd "$bin/ferryd"

echo "== fetch benchmark between two nodes (short run; 'ferry-bench remote' for the full one)"
"$bin/ferry-bench" remote --seconds 0.2 --sizes 1K,1M,64M
