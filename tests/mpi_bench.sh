#!/usr/bin/env bash
# mpi_bench.sh - ferry-bench mpi under mpirun, one rank per node, across three ferryd nodes on
# loopback with one redis-server as their directory: --json has both patterns with positive
# bandwidths, every fetched object was a transfer, the daemons counted the transfers
# (transfers_in on every fetching node) and nothing is left in them; the table output and
# --pattern work; one-from-many fetches what two nodes hold in ranges from both; --help and a
# bad option are answered without mpirun.
#
# Needs FERRY_BIN_DIR (the directory of ferryd, ferry and ferry-bench built with MPI),
# redis-server, python3 and mpirun (FERRY_MPIEXEC, else mpirun on $PATH). FERRY_TEST_DAEMON_ARGS,
# when set, is added to every ferryd's arguments, split at blanks (e.g. "--transport tcp").
# Prints each failed check, then "N passed, M failed"; exits non-zero when any check failed.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

# A failed check shows the logs of redis-server and of every node.
LOGS_ON_FAILURE=1
NODES=3
COUNT=8
SIZE=262144 # 256K
# How long one mpirun, and any other command, may take (seconds) before it is stopped: a hang
# fails the check instead.
MPI_LIMIT=120
CMD_LIMIT=30
MPIEXEC=${FERRY_MPIEXEC:-mpirun}
read -r -a DAEMON_ARGS <<<"${FERRY_TEST_DAEMON_ARGS:-}"
# Open MPI refuses to run as root without these; harmless for other users.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1


# Nodes ferry-0 .. ferry-(NODES-1), sockets $DIR/ferry-I.sock: rank I's node.
start_cluster() {
    local i port
    for ((i = 0; i < NODES; i++)); do
        port=$(free_port) || return 1
        start_node "ferry-$i" --node-id "node-$i" --listen "127.0.0.1:$port" \
            --directory "redis://127.0.0.1:$REDIS_PORT" --split-min "$SIZE" \
            "${DAEMON_ARGS[@]}" || return 1
    done
}

# mpi_bench ARGS...: ferry-bench mpi on every node, bounded in time. An ASan build's ranks do
# not check for leaks: Open MPI leaves its own allocations to the exit.
mpi_bench() {
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
        timeout --kill-after=10 "$MPI_LIMIT" "$MPIEXEC" -np "$NODES" --oversubscribe \
        "$BIN/ferry-bench" mpi --socket "$DIR/ferry-%d.sock" --size "$SIZE" --count "$COUNT" "$@"
}

# ferry-bench on its own, without mpirun (what it answers before it starts MPI).
bench_alone() { timeout "$CMD_LIMIT" "$BIN/ferry-bench" "$@"; }

# stat_field NODE NAME: one field of stat --json on node ferry-NODE.
stat_field() {
    timeout "$CMD_LIMIT" "$FERRY" --socket "$DIR/ferry-$1.sock" stat --json >"$DIR/stat.json" &&
        json_field "$DIR/stat.json" "$2"
}

# at_least NODE NAME MIN: true when stat field NAME of node NODE is at least MIN.
at_least() {
    local v
    v=$(stat_field "$1" "$2") || return 1
    [ "$v" -ge "$3" ] || { echo "node $1: $2 is $v, expected at least $3" >&2; return 1; }
}

# json_ok EXPR: true when EXPR holds for j, the list of the JSON lines in $DIR/bench.json.
json_ok() { pyjson "$DIR/bench.json" "$1"; }

test_usage() {
    run "mpi --help" 0 bench_alone mpi --help && pass
    ok "mpi --help names --socket with %d" grep -q -- '--socket PATH.*%d' "$OUT"
    ok "mpi --help names many-to-one" grep -q 'many-to-one' "$OUT"
    run "mpi with a bad --pattern" 1 bench_alone mpi --pattern ring && pass
    run "mpi with --count 0" 1 bench_alone mpi --count 0 && pass
    run "mpi with an unknown option" 2 bench_alone mpi --fast && pass
}

# Both patterns, one round, --json: one line per pattern.
test_json() {
    local per_node=$((COUNT * (NODES - 1))) # objects each node fetches in all-to-all
    run "mpirun ferry-bench mpi --json" 0 mpi_bench --rounds 1 --seed 42 --json || return
    pass
    { echo '['; paste -sd, "$OUT"; echo ']'; } >"$DIR/bench.json"
    ok "--json prints one object per pattern" \
        json_ok "sorted(p['pattern'] for p in j) == ['all-to-all', 'many-to-one']"
    ok "each pattern has one result at $SIZE bytes from $NODES ranks" \
        json_ok "all(p['suite'] == 'mpi' and p['ranks'] == $NODES and p['count'] == $COUNT and
                      [r['size'] for r in p['results']] == [$SIZE] for p in j)"
    ok "each pattern names its rounds and the seed asked for" \
        json_ok "all(p['rounds'] == 1 and p['seed'] == 42 for p in j)"
    ok "one round has no spread" \
        json_ok "all(r['iqr_relative'] == 0 and r['noisy'] is False for p in j for r in p['results'])"
    ok "every bandwidth is positive" json_ok "all(r['aggregate_mib_per_sec'] > 0 and
        r['rank_mib_per_sec']['min'] > 0 and r['slowest_seconds'] > 0
        for p in j for r in p['results'])"
    ok "all-to-all moved every rank's objects to every other rank" json_ok "[r['objects']
        for p in j if p['pattern'] == 'all-to-all' for r in p['results']] == [$NODES * $per_node]"
    ok "many-to-one moved rank 0's objects to every other rank" json_ok "[r['objects']
        for p in j if p['pattern'] == 'many-to-one' for r in p['results']] == [$per_node]"
    ok "every fetched object was a transfer, none a local hit" \
        json_ok "all(r['transfers_in'] == r['objects'] for p in j for r in p['results'])"
}

# What the daemons counted during test_json: node 0 fetched in all-to-all only.
test_daemons() {
    local i want
    for ((i = 0; i < NODES; i++)); do
        want=$((COUNT * (NODES - 1) + (i > 0 ? COUNT : 0)))
        ok "node $i received its $want objects from peers" at_least "$i" transfers_in "$want"
        ok "node $i received their bytes" at_least "$i" bytes_in $((want * SIZE))
        ok "node $i holds no object after the run" test "$(stat_field "$i" objects)" = 0
    done
}

# The table, one pattern, two rounds.
test_table() {
    run "mpirun ferry-bench mpi --pattern many-to-one --rounds 2" 0 mpi_bench \
        --pattern many-to-one --rounds 2 || return
    pass
    ok "the table has a many-to-one row at 256K" grep -Eq '^many-to-one +256K ' "$OUT"
    ok "the table says the rounds were interleaved" grep -q '^2 interleaved rounds (seed ' "$OUT"
    ok "the table has the aggregate's spread" grep -Eq '^many-to-one +256K .* [0-9]+% ' "$OUT"
    ok "the table has no all-to-all row" test -z "$(grep '^all-to-all ' "$OUT")"
    ok "the table says how much rank 0 served" grep -q "^many-to-one 256K: rank 0's node sent" "$OUT"
}

# one-from-many: ranks 0 and 1 hold the objects, rank 2 fetches them in ranges from both.
test_one_from_many() {
    local last=$((NODES - 1))
    run "mpirun ferry-bench mpi --pattern one-from-many --json" 0 mpi_bench \
        --pattern one-from-many --rounds 1 --json || return
    pass
    { echo '['; paste -sd, "$OUT"; echo ']'; } >"$DIR/bench.json"
    ok "one-from-many: only the last rank is timed, for its $COUNT objects" \
        json_ok "[(r['rank'], r['objects']) for p in j for x in p['results']
                 for r in x['per_rank'] if r['objects']] == [($last, $COUNT)]"
    ok "one-from-many: each came in ranges from both holders" \
        json_ok "[r['split_fetches'] for p in j for x in p['results']
                 for r in x['per_rank']] == [0] * $last + [$COUNT]"
    ok "one-from-many: each was a transfer" \
        json_ok "all(x['transfers_in'] == $COUNT for p in j for x in p['results'])"
}

main() {
    test_usage
    start_redis || exit 1
    start_cluster || exit 1
    test_json
    test_daemons
    test_table
    test_one_from_many
    summary
}

main
