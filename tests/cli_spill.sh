#!/usr/bin/env bash
# cli_spill.sh - ferryd --spill-dir from the command line: its options checked before the arena
# is reserved, contains / ls / stat / evict / get of spilled objects, and a restart that serves
# them again.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

SOCK=$DIR/ferry.sock
SPILL=$DIR/spill
CMD_LIMIT=20
fy() { ferry_at "$SOCK" "$@"; }

start() {
    "$BIN/ferryd" --socket "$SOCK" --memory 16M --spill-dir "$SPILL" "$@" >>"$DIR/ferryd.log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
    wait_for ferryd "$PID" "$FERRY" --socket "$SOCK" stat
}

test_options_are_checked_first() {
    run "--spill-max without --spill-dir" 2 "$BIN/ferryd" --socket "$DIR/x.sock" --spill-max 1G &&
        ok "it names the options" grep -q "need --spill-dir" "$ERR"
    run "--spill-at 0" 2 "$BIN/ferryd" --socket "$DIR/x.sock" --spill-dir "$SPILL" --spill-at 0 &&
        ok "it names --spill-at" grep -q -- "--spill-at" "$ERR"
    run "--spill-at 101%" 2 "$BIN/ferryd" --socket "$DIR/x.sock" --spill-dir "$SPILL" \
        --spill-at 101% && pass
    run "--spill-max nonsense" 2 "$BIN/ferryd" --socket "$DIR/x.sock" --spill-dir "$SPILL" \
        --spill-max lots && pass
}

test_spilled_objects_from_the_cli() {
    local i
    head -c 1000000 /dev/urandom >"$DIR/obj"
    start || { fail "ferryd did not start"; return; }
    for i in $(seq 0 39); do
        fy put "o$i" "$DIR/obj" >/dev/null || fail "put o$i"
    done
    expect_answer "contains of a spilled object" 0 fy contains o0
    ok "it says on disk" grep -qx 'true (on disk)' "$OUT"
    expect_answer "contains of a recent object" 0 fy contains o39
    ok "it says true" grep -qx 'true' "$OUT"
    expect "ls" 0 fy ls
    ok "ls shows objects on disk" grep -q ' on disk .* o0$' "$OUT"
    expect "stat" 0 fy stat
    ok "stat has a spill section" grep -q '^spill$' "$OUT"
    ok "stat counts what was written" grep -Eq '^  written +[1-9][0-9]* objects' "$OUT"
    expect "get of a spilled object" 0 fy get o0 -o "$DIR/back"
    ok "it comes back bit-exact" cmp -s "$DIR/obj" "$DIR/back"
    expect_answer "it is in memory again" 0 fy contains o0
    ok "contains says true" grep -qx 'true' "$OUT"
    expect "evict" 0 fy evict 8M
    ok "evict says the objects went to disk" \
        grep -Eq '^moved to disk [0-9]+ objects?, [0-9.]+ [KMG]?i?B \([0-9]+ bytes\)$' "$OUT"
    expect "rm of a spilled object" 0 fy rm o1
    stop_process "$PID"
    start --persist-on-exit || { fail "ferryd did not start again"; return; }
    expect_answer "after a restart o1 stays deleted" 1 fy contains o1
    expect "get after a restart" 0 fy get o2 -o "$DIR/back2"
    ok "it comes back bit-exact" cmp -s "$DIR/obj" "$DIR/back2"
    ok "the daemon logged what it found" grep -q 'objects found' "$DIR/ferryd.log"
}

test_options_are_checked_first
test_spilled_objects_from_the_cli
summary
