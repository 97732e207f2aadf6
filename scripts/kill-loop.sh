#!/bin/sh
# Runs one integration test over and over for SECONDS under a CPU hog, the way hangs that need a
# kill at the wrong instant were found (it_cluster_kills on shm: a daemon's loop spinning in a
# dead peer's shm lock). A run still going after 45 s counts as hung: the stacks of every
# ferryd (gdb, when installed) go to OUT/hang-N.txt, and the run is killed. Prints a line per
# run and a summary; exits 1 when a run failed or hung.
#   scripts/kill-loop.sh [BUILD [TEST [TRANSPORT [SECONDS [OUT]]]]]
#   defaults: build it_cluster_kills shm 600 a new temporary directory
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
test=${2:-it_cluster_kills}
transport=${3:-shm}
seconds=${4:-600}
out=${5:-$(mktemp -d)}
mkdir -p "$out" "$build/tests"
export FERRY_BIN_DIR="$build/bin" FERRY_PYTHONPATH="$build/python" FERRY_TEST_TRANSPORT="$transport"
cd "$build/tests" || exit 2
(while :; do :; done) &
hog=$!
trap 'kill $hog 2>/dev/null' EXIT
end=$(($(date +%s) + seconds))
n=0 ok=0 bad=0 hung=0
while [ "$(date +%s)" -lt "$end" ]; do
    n=$((n + 1))
    "$build/bin/$test" >"$out/run-$n.log" 2>&1 &
    pid=$!
    t=0
    while kill -0 $pid 2>/dev/null && [ $t -lt 45 ]; do
        sleep 1
        t=$((t + 1))
    done
    if kill -0 $pid 2>/dev/null; then
        hung=$((hung + 1))
        result=hung
        if command -v gdb >/dev/null; then
            for d in $(pgrep -f "$build/bin/ferryd"); do
                gdb -p "$d" -batch -ex "thread apply all bt" >>"$out/hang-$n.txt" 2>&1
            done
        fi
        pkill -9 -P $pid
        kill -9 $pid
        pkill -9 -f "$build/bin/ferryd"
        wait $pid 2>/dev/null
    elif wait $pid; then
        ok=$((ok + 1))
        result=ok
    else
        bad=$((bad + 1))
        result=failed
    fi
    echo "run $n: $result after ${t}s (ok $ok, failed $bad, hung $hung)"
done
echo "kill-loop: $test on $transport, $n runs: $ok ok, $bad failed, $hung hung (logs in $out)"
[ $bad -eq 0 ] && [ $hung -eq 0 ]
