#!/bin/sh
# Runs every fuzz target of BUILD for SECONDS each, from its seed corpus; fails on a crash.
set -eu
build=$1
seconds=$2
top=$(cd "$(dirname "$0")/.." && pwd)
for target in "$build"/bin/fuzz_*; do
    name=$(basename "$target")
    work=$(mktemp -d)
    [ -d "$top/fuzz/corpus/$name" ] && cp "$top/fuzz/corpus/$name"/* "$work"/
    echo "fuzz: $name for ${seconds}s"
    "$target" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
        -artifact_prefix="$work/" "$work" 2>"$work.log" || {
        tail -n 40 "$work.log"
        echo "fuzz: $name FAILED (artifacts in $work)"
        exit 1
    }
    grep -E '^stat::number_of_executed_units' "$work.log" || true
    rm -rf "$work" "$work.log"
done
echo "fuzz: all targets ran clean"
