#!/usr/bin/env bash
# Runs every fuzz target of BUILD for SECONDS each, from its seed corpus, JOBS at a time
# (default: the cores); fails on a crash, naming the target and where its artifacts are.
set -euo pipefail
build=$1
seconds=$2
jobs=${3:-$(nproc)}
top=$(cd "$(dirname "$0")/.." && pwd)

# One target: its corpus copied to a work directory, its log kept there when it fails.
fuzz_one() {
    local target=$1 name work
    name=$(basename "$target")
    work=$(mktemp -d)
    if [ -d "$top/fuzz/corpus/$name" ]; then cp "$top/fuzz/corpus/$name"/* "$work"/; fi
    if ! "$target" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
        -artifact_prefix="$work/" "$work" 2>"$work.log"; then
        tail -n 40 "$work.log"
        echo "fuzz: $name FAILED (artifacts in $work)"
        return 1
    fi
    echo "fuzz: $name ran ${seconds}s clean, $(grep -E '^stat::number_of_executed_units' "$work.log" |
        awk '{print $2}') inputs"
    rm -rf "$work" "$work.log"
}

failed=0
running=0
for target in "$build"/bin/fuzz_*; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
    fuzz_one "$target" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
[ "$failed" -eq 0 ] || exit 1
echo "fuzz: all targets ran clean"
