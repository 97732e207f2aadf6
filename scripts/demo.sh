#!/bin/sh
# make demo: starts a daemon, stores a file and reads it back, prints the stats and a short
# benchmark table. Everything runs on loopback and in a temporary directory.
set -eu
build=${1:-build}
bin=$(cd "$build/bin" && pwd)
dir=$(mktemp -d)
sock="$dir/ferry.sock"
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

echo "== starting ferryd (256 MiB arena) on $sock"
"$bin/ferryd" --socket "$sock" --memory 256M 2>"$dir/ferryd.log" &
pid=$!
i=0
until "$bin/ferry" --socket "$sock" stat >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -gt 200 ] && { cat "$dir/ferryd.log"; echo "ferryd did not start"; exit 1; }
    sleep 0.05
done

echo "== put a 8 MiB file as 'demo-file', read it back"
head -c 8388608 /dev/urandom >"$dir/in"
"$bin/ferry" --socket "$sock" put demo-file "$dir/in" --meta "from make demo"
"$bin/ferry" --socket "$sock" get demo-file -o "$dir/out"
cmp "$dir/in" "$dir/out" && echo "read back: identical ($(wc -c <"$dir/out") bytes)"
echo "hash: $("$bin/ferry" --socket "$sock" hash demo-file)"
"$bin/ferry" --socket "$sock" ls
echo "== stats"
"$bin/ferry" --socket "$sock" stat
kill "$pid" && wait "$pid" || true
pid=""

echo "== benchmark (short run; 'make bench' for the full one)"
"$bin/ferry-bench" local --seconds 0.2
