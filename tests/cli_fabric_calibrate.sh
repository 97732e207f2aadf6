#!/usr/bin/env bash
# cli_fabric_calibrate.sh - ferry calibrate between two nodes on the fabric provider that
# FERRY_TEST_TRANSPORT names (rxm or shm; shm when unset): the probes go on node a through
# --peer-socket, node b measures both protocols at each size, saves a crossover that is one of
# the sizes, and restores its eager limit (or sets it, with --apply); --serve alone puts the
# probes on its own node; a node reached over tcp has nothing to calibrate (status 5); a bad
# command line is a usage error (status 2).
#
# Needs FERRY_BIN_DIR (the directory holding ferryd and ferry), redis-server and python3.
# Prints each failed check, then "N passed, M failed"; exits non-zero when any check failed.
set -u

case "${FERRY_TEST_TRANSPORT:-}" in
rxm | shm) ;;
*) export FERRY_TEST_TRANSPORT=shm ;; # calibrate needs a fabric
esac

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

# A failed check shows the logs of redis-server and of every node.
LOGS_ON_FAILURE=1
SIZES=4K,1M

# on NODE ARGS...: the tool against node NODE, bounded in time (a hang fails the check).
on() {
    local node=$1
    shift
    timeout 60 "$FERRY" --socket "$DIR/$node.sock" "$@"
}

# start_member NAME [ARGS...]: node-NAME of the cluster, ARGS last (they override the
# transport lib_cli.sh chose).
start_member() {
    local name=$1 port
    shift
    port=$(free_port) || return 1
    start_node "$name" --node-id "node-$name" --listen "127.0.0.1:$port" \
        --directory "redis://127.0.0.1:$REDIS_PORT" "$@"
}

# eager_max NODE: the node's eager limit, from stat --json.
eager_max() {
    on "$1" stat --json >"$DIR/stat.json" && json_field "$DIR/stat.json" eager_max
}

# True once node $1's directory lists node-a, node-b and node-t.
all_listed() {
    on "$1" nodes --json >"$DIR/nodes.json" 2>/dev/null &&
        pyjson "$DIR/nodes.json" "sorted(n['id'] for n in j) == ['node-a', 'node-b', 'node-t']"
}

# The table lists both protocols' figures and a winner for every size of $SIZES.
table_ok() {
    grep -Eq '^ +4K +[0-9.]+ +[0-9.]+ +(eager|rendezvous)$' "$OUT" &&
        grep -Eq '^ +1M +[0-9.]+ +[0-9.]+ +(eager|rendezvous)$' "$OUT"
}

# The file holds one line, a number that is one of the sizes.
saved_ok() {
    [ "$(wc -l <"$1")" -eq 1 ] && grep -Eqx '4096|1048576' "$1"
}

test_usage() {
    expect "without --serve or --from" 2 on b calibrate
    expect "with both --serve and --from" 2 on b calibrate --serve --from node-a
    expect "--from without a node" 2 on b calibrate --from
    expect "an empty --from" 2 on b calibrate --from ""
    expect "--reps 0" 2 on b calibrate --from node-a --reps 0
    expect "--reps not a number" 2 on b calibrate --from node-a --reps many
    expect "a bad size" 2 on b calibrate --from node-a --sizes 4K,lots
    expect "a size of 0" 2 on b calibrate --from node-a --sizes 0
    expect "an empty size list" 2 on b calibrate --from node-a --sizes ,
    expect "--apply with --serve" 2 on b calibrate --serve --apply
    expect "--save with --serve" 2 on b calibrate --serve --save "$DIR/x"
    expect "an unknown option" 2 on b calibrate --from node-a --fast
    expect "an argument" 2 on b calibrate --from node-a extra
    expect "--from this node" 2 on b calibrate --from node-b --sizes 4K
    expect "--from a node that does not exist" 1 on b calibrate --from node-z --sizes 4K
    ok "--help names calibrate" sh -c "'$FERRY' --help | grep -q '^  calibrate '"
}

test_calibrate() {
    local before
    before=$(eager_max b)
    expect "calibrate through --peer-socket" 0 on b calibrate --peer-socket "$DIR/a.sock" \
        --from node-a --sizes "$SIZES" --reps 2 --save "$DIR/F"
    ok "it names the provider" grep -q "calibrating the fabric ($PROVIDER) from node-a" "$OUT"
    ok "it put the probes on node-a" grep -q '^probes on node-a: ferry-calibrate/4096/0' "$OUT"
    ok "it prints both protocols for both sizes" table_ok
    ok "it prints the crossover" grep -Eq '^crossover: ' "$OUT"
    ok "the saved crossover is one of the sizes" saved_ok "$DIR/F"
    ok "b's eager limit is restored ($before)" test "$(eager_max b)" = "$before"
    expect "the probes stay on node-a" 0 on a contains ferry-calibrate/1048576/0
    expect_answer_b_has_no_probe
    expect "calibrate --apply (probes served already)" 0 on b calibrate --from node-a \
        --sizes "$SIZES" --reps 2 --apply --save "$DIR/G"
    ok "--apply sets b's eager limit to the crossover" test "$(eager_max b)" = "$(cat "$DIR/G")"
    expect "restore b's eager limit" 0 on b eager-max auto
}

# b keeps no probe: each fetch's copy is dropped again.
expect_answer_b_has_no_probe() {
    run "b holds no probe afterwards" 1 on b contains ferry-calibrate/4096/0 && pass
}

test_serve() {
    expect "calibrate --serve on b" 0 on b calibrate --serve --sizes 8K
    ok "--serve prints what it put" grep -q '^probes on this node: ferry-calibrate/8192/0..7 (8 x 8192' "$OUT"
    expect "the probe is on b" 0 on b contains ferry-calibrate/8192/7
    expect "calibrate --serve again keeps them" 0 on b calibrate --serve --sizes 8K
    ok "--serve again finds them there" grep -q '8 there already' "$OUT"
}

test_over_tcp() {
    local before
    before=$(eager_max b)
    expect "calibrate from a node reached over tcp" 5 on b calibrate --from node-t --sizes 4K \
        --reps 1
    ok "it says the node is reached over tcp" grep -q 'node-t is reached over tcp' "$ERR"
    ok "b's eager limit is untouched" test "$(eager_max b)" = "$before"
    expect "calibrate on a node without a fabric" 5 on t calibrate --from node-a --sizes 4K
}

main() {
    [ "$FERRY_TEST_TRANSPORT" = rxm ] && PROVIDER="tcp;ofi_rxm" || PROVIDER=$FERRY_TEST_TRANSPORT
    start_redis || exit 1
    start_member a || exit 1
    start_member b || exit 1
    start_member t --transport tcp || exit 1
    eventually "b's directory lists a, b and t" all_listed b
    test_usage
    test_calibrate
    test_serve
    test_over_tcp
    summary
}

main
