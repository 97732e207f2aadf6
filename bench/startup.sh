#!/bin/bash
# startup.sh [BIN_DIR] [MEMORY] [HOGS] [RUNS]: how long a ferryd takes from exec to its first
# answered `ferry stat`, on a machine kept busy by HOGS CPU-bound processes (default 2), for a
# cluster node on the fabric (tcp;ofi_rxm) and, as the reference in the same run, a standalone
# node (no fabric, no directory). Prints each run and the medians, in ms. Needs redis-server.
# Example: bench/startup.sh build/bin 1G 2 5
set -u
BIN=${1:-build/bin}
MEMORY=${2:-1G}
HOGS=${3:-2}
RUNS=${4:-5}
DIR=$(mktemp -d /tmp/ferry-startup.XXXXXX) || exit 1
HOG_PIDS=()
# Ports below the ephemeral range, where no connect() takes them first (tools/free_port.h).
FREE_PORT="python3 $(dirname "$0")/../tests/python/free_port.py"
REDIS_PORT=$($FREE_PORT) || exit 1

cleanup() {
    kill "${HOG_PIDS[@]}" 2>/dev/null
    redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1
    rm -rf "$DIR"
}
trap cleanup EXIT

redis-server --port "$REDIS_PORT" --save '' --appendonly no --daemonize yes \
    --logfile "$DIR/redis.log" --dir "$DIR" >/dev/null || exit 1
for ((i = 0; i < 50; i++)); do
    [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
done
for ((i = 0; i < HOGS; i++)); do
    (while :; do :; done) &
    HOG_PIDS+=($!)
done

# once NAME ARGS...: one start of ferryd with ARGS; prints the ms until it answered (or
# "failed" after 60 s), then stops it.
once() {
    local sock=$DIR/node.sock t0 t1 pid n
    t0=$(date +%s%N)
    "$BIN/ferryd" --socket "$sock" --memory "$MEMORY" "$@" >"$DIR/node.log" 2>&1 &
    pid=$!
    for ((n = 0; n < 6000; n++)); do
        "$BIN/ferry" --socket "$sock" stat >/dev/null 2>&1 && break
        sleep 0.01
    done
    t1=$(date +%s%N)
    if ((n == 6000)); then echo failed; else echo $(((t1 - t0) / 1000000)); fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

median() { sort -n | awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : "-")}'; }

fabric=() standalone=()
for ((r = 0; r < RUNS; r++)); do
    port=$($FREE_PORT) || exit 1
    fabric+=("$(once --node-id n1 --listen "127.0.0.1:$port" \
        --directory "redis://127.0.0.1:$REDIS_PORT" --transport fabric \
        --fabric-provider 'tcp;ofi_rxm')")
    standalone+=("$(once)")
    echo "run $r: fabric node ${fabric[r]} ms, standalone node ${standalone[r]} ms"
done
echo "median over $RUNS runs, $HOGS CPU hogs, --memory $MEMORY: fabric node" \
    "$(printf '%s\n' "${fabric[@]}" | median) ms, standalone node" \
    "$(printf '%s\n' "${standalone[@]}" | median) ms"
