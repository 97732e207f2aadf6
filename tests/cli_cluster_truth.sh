#!/usr/bin/env bash
# cli_cluster_truth.sh - the directory tells the truth after ordinary events, seen through the
# ferry command line against a real Redis and real ferryd nodes:
# - a node killed (-9) and restarted with the same node id: within a heartbeat period no `where`
#   lists what it lost, and fetches go to the remaining holder or wait for one;
# - a node stopped with SIGTERM leaves `nodes` and `where` at once;
# - a second put of an id with other bytes elsewhere is counted and logged, not listed, and a
#   third node receives the first content;
# - with --strict-ids, such a put fails (FERRY_EEXIST, naming the holder) and leaves nothing;
# - rm --cluster with a reader holding a reference;
# - the reasons of a failed fetch, per holder, on stderr and in stat's peers view.
#
# Needs FERRY_BIN_DIR (the directory holding ferryd and ferry), redis-server and python3.
# Prints each failed check, then "N passed, M failed"; exits non-zero when any check failed.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

LOGS_ON_FAILURE=1

# start_cluster_node NAME [ARGS...]: node-NAME with its pid in PID[NAME].
declare -A PID
start_cluster_node() {
    local name=$1 port
    shift
    port=$(free_port) || return 1
    start_node "$name" --node-id "node-$name" --listen "127.0.0.1:$port" \
        --directory "redis://127.0.0.1:$REDIS_PORT" "$@" || return 1
    PID[$name]=${PIDS[-1]}
}

# holders NODE ID: the ids of the nodes `where` on NODE lists for ID, sorted, on one line;
# "where failed" when where fails (other than status 1, no holder) or prints no JSON list.
holders() {
    fy "$1" where "$2" --json 2>/dev/null >"$DIR/where.json"
    [ $? -le 1 ] || {
        echo "where failed"
        return
    }
    pystd -c 'import json, sys
print(" ".join(sorted(n["id"] for n in json.load(open(sys.argv[1])))))' "$DIR/where.json" \
        2>/dev/null || echo "where failed"
}
holders_are() { [ "$(holders "$1" "$2")" = "$3" ]; }
# nodes_has NODE NAME YES: `nodes --json` on NODE succeeds and lists node-NAME (YES 1) or not (0).
nodes_has() {
    fy "$1" nodes --json >"$DIR/nodes.json" 2>/dev/null &&
        pyjson "$DIR/nodes.json" "('node-$2' in [n['id'] for n in j]) == bool($3)"
}
node_listed() { nodes_has "$1" "$2" 1; }
not_listed() { nodes_has "$1" "$2" 0; }
stat_field() { fy "$1" stat --json >"$DIR/stat.json" && json_field "$DIR/stat.json" "$2"; }
stat_is() { [ "$(stat_field "$1" "$2")" = "$3" ]; }

make_data() {
    head -c 200000 /dev/urandom >"$DIR/one.bin"
    head -c 200000 /dev/urandom >"$DIR/two.bin"
    head -c 3000 /dev/urandom >"$DIR/small.bin"
    head -c 3000 /dev/urandom >"$DIR/small2.bin"
    # Past the size hashed on the loop: these go through the hasher thread.
    head -c 700000 /dev/urandom >"$DIR/big.bin"
    head -c 700000 /dev/urandom >"$DIR/big2.bin"
}

# a holds lost (alone) and kept (with b); a is killed and restarted with its node id.
test_restart_same_node_id() {
    expect "put lost on a" 0 fy a put lost "$DIR/one.bin"
    expect "put kept on a" 0 fy a put kept "$DIR/two.bin"
    expect "fetch kept on b" 0 fy b fetch kept
    eventually "where lists a for lost" holders_are c lost "node-a"
    eventually "where lists a and b for kept" holders_are c kept "node-a node-b"
    kill -KILL "${PID[a]}"
    wait "${PID[a]}" 2>/dev/null
    # Killed, a is still in the directory until its TTL runs out; a fetch goes to b meanwhile.
    expect "fetch kept on c while a's entry is live but a is dead" 0 fy c fetch kept
    expect "get kept on c" 0 fy c get kept -o "$DIR/kept.out"
    ok "c received kept's bytes" cmp -s "$DIR/two.bin" "$DIR/kept.out"
    start_cluster_node a || return
    # Cleaned by a at its start, not expired by its TTL: the counter says which.
    eventually "after the restart, where of lost lists nobody" holders_are c lost ""
    ok "where of kept lists only b and c" holders_are c kept "node-b node-c"
    expect "where of lost exits 1" 1 fy c where lost
    ok "a counted what it cleaned" test "$(stat_field a directory_cleaned)" -ge 2
    expect "fetch kept on the restarted a goes to another holder" 0 fy a fetch kept
    # lost is nowhere: a fetch waits for it instead of failing, and takes it when it comes.
    fy c fetch lost --timeout 15000 >"$DIR/lost.out" 2>"$DIR/lost.err" &
    local waiter=$!
    sleep 0.3
    ok "the fetch of lost waits" kill -0 "$waiter"
    expect "put lost again on b" 0 fy b put lost "$DIR/one.bin"
    wait "$waiter"
    ok "the waiting fetch of lost succeeds" test $? -eq 0 -a ! -s "$DIR/lost.err"
}

test_sigterm_leaves_at_once() {
    start_cluster_node d || return
    expect "put leaving on d" 0 fy d put leaving "$DIR/small.bin"
    eventually "c sees d" node_listed c d
    eventually "where lists d for leaving" holders_are c leaving "node-d"
    kill -TERM "${PID[d]}"
    wait "${PID[d]}"
    ok "d exits 0 on SIGTERM" test $? -eq 0
    ok "d is not listed by nodes as soon as it is gone" not_listed c d
    ok "where of leaving lists nobody as soon as d is gone" holders_are c leaving ""
    ok "d logged its leave" grep -q 'leaving' "$DIR/d.log"
}

test_conflicting_puts() {
    expect "put twin on a" 0 fy a put twin "$DIR/one.bin"
    eventually "where lists a for twin" holders_are c twin "node-a"
    expect "put twin on b with other bytes: the local put succeeds" 0 fy b put twin "$DIR/two.bin"
    eventually "b counts the conflict" stat_is b id_conflicts 1
    ok "b's log names both nodes" grep -q 'sealed here (node-b) with other content.*than node node-a' "$DIR/b.log"
    ok "where still lists only a" holders_are c twin "node-a"
    expect "fetch twin on c" 0 fy c fetch twin
    expect "get twin on c" 0 fy c get twin -o "$DIR/twin.out"
    ok "c received the first content" cmp -s "$DIR/one.bin" "$DIR/twin.out"
}

# g seals only what the directory confirms: small (a batch), medium (hashed on the loop) and
# big (hashed on the hasher thread) objects.
test_strict_ids() {
    start_cluster_node g --strict-ids || return
    expect "put sm on a" 0 fy a put sm "$DIR/small.bin"
    expect "put big on a" 0 fy a put big "$DIR/big.bin"
    eventually "where lists a for big" holders_are c big "node-a"
    local id file
    for id in twin sm big; do
        case $id in
        twin) file=two.bin ;;
        sm) file=small2.bin ;;
        big) file=big2.bin ;;
        esac
        run "strict put of $id with other content fails" 5 fy g put "$id" "$DIR/$file" && pass
        ok "the failure of $id names the holder" \
            grep -q "exists on node node-a with other content" "$ERR"
        expect_answer "the refused $id is not on g" 1 fy g contains "$id"
    done
    expect "strict put of twin with the same content" 0 fy g put twin "$DIR/one.bin"
    expect "strict put of a new big object" 0 fy g put newbig "$DIR/big2.bin"
    expect "strict put of a new small object" 0 fy g put newsm "$DIR/small2.bin"
    ok "where lists g for the new objects at once" holders_are c newbig "node-g"
    ok "where lists g for newsm at once" holders_are c newsm "node-g"
    expect "g's objects" 0 fy g ls --json
    ok "g holds exactly twin, newbig and newsm, sealed, nothing else" pyjson "$OUT" \
        "len(j) == 3 and all(o['state'] == 'sealed' for o in j)"
    test_strict_seal_cut_short
    stop_process "${PID[g]}"
}

# A strict seal whose claim reaches Redis but whose answer does not (Redis stopped, the node's
# watchdog gives up), and one whose client is killed while it waits: neither leaves g listed,
# so a strict put of other bytes elsewhere succeeds.
test_strict_seal_cut_short() {
    local killed
    start_cluster_node h --strict-ids || return
    kill -STOP "$REDIS_PID"
    run "a strict put while Redis is stopped fails: directory unreachable" 4 \
        fy g put cut1 "$DIR/small.bin" && pass
    fy g put cut2 "$DIR/big.bin" >/dev/null 2>&1 &
    killed=$!
    sleep 0.3
    kill -KILL "$killed"
    wait "$killed" 2>/dev/null
    sleep 1.5 # past g's watchdog: the claims' answers are lost
    kill -CONT "$REDIS_PID"
    expect_answer "the failed strict put left nothing on g" 1 fy g contains cut1
    local id
    for id in cut1 cut2; do
        eventually "g is not listed for $id once Redis is back" holders_are c "$id" ""
        expect "a strict put of $id with other bytes on h" 0 fy h put "$id" "$DIR/small2.bin"
        ok "where lists only h for $id" holders_are c "$id" "node-h"
    done
    stop_process "${PID[h]}"
}

test_delete_cluster() {
    expect "put doomed on a" 0 fy a put doomed "$DIR/small.bin"
    expect "fetch doomed on b" 0 fy b fetch doomed
    # A reader on b holds a reference while the delete goes round.
    py_ferry - "$DIR/b.sock" >"$DIR/reader.out" 2>&1 <<'EOF' &
import sys, time
import ferry
with ferry.Client(sys.argv[1]) as c:
    buf = c.get("doomed")
    print("holding", flush=True)
    deadline = time.monotonic() + 10
    while c.contains("doomed") and time.monotonic() < deadline:
        time.sleep(0.02)
    print("gone" if not c.contains("doomed") else "still there", len(bytes(buf)), flush=True)
EOF
    local reader=$!
    eventually "the reader holds doomed" grep -q holding "$DIR/reader.out"
    expect "rm --cluster doomed on a" 0 fy a rm --cluster doomed
    expect_answer "doomed is gone from a at once" 1 fy a contains doomed
    wait "$reader"
    ok "b dropped doomed while the reader held its bytes" grep -q "^gone 3000$" "$DIR/reader.out"
    ok "where of doomed lists nobody" holders_are c doomed ""
    expect "rm --cluster of an id nobody holds succeeds" 0 fy c rm --cluster nobody
}

test_failure_reasons() {
    printf 'another secret\n' >"$DIR/secret"
    chmod 600 "$DIR/secret"
    start_cluster_node e --secret-file "$DIR/secret" || return
    expect "put guarded on e" 0 fy e put guarded "$DIR/small.bin"
    eventually "where lists e for guarded" holders_are c guarded "node-e"
    run "fetch guarded on c fails" 5 fy c fetch guarded --timeout 5000 && pass
    ok "the failure names e and the secret" grep -q 'node-e: .*cluster secret' "$ERR"
    expect "stat on c" 0 fy c stat
    ok "stat's peers view shows e's failure" grep -q 'node-e.*failed .*cluster secret' "$OUT"
    stop_process "${PID[e]}"
    # A node whose entry is live but which does not answer: connection refused.
    start_cluster_node f || return
    expect "put mute on f" 0 fy f put mute "$DIR/small.bin"
    eventually "where lists f for mute" holders_are c mute "node-f"
    kill -KILL "${PID[f]}"
    wait "${PID[f]}" 2>/dev/null
    run "fetch mute on c fails while f's entry lives" 5 fy c fetch mute --timeout 5000 && pass
    ok "the failure names f and why" grep -q 'node-f: cannot connect' "$ERR"
}

main() {
    export FERRY_PYTHONPATH=${FERRY_PYTHONPATH:-$BIN/../python}
    make_data || exit 1
    start_redis || exit 1
    REDIS_PID=${PIDS[-1]}
    start_cluster_node a || exit 1
    start_cluster_node b || exit 1
    start_cluster_node c || exit 1
    test_restart_same_node_id
    test_sigterm_leaves_at_once
    test_conflicting_puts
    test_strict_ids
    test_delete_cluster
    test_failure_reasons
    summary
}

main
