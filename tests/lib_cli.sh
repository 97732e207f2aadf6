# shellcheck shell=bash
# lib_cli.sh - what the cli_*.sh tests share: their work directory, the processes they start
# and stop, and the checks that count passes and failures. Sourced, never run: its name keeps
# it out of the tests that tests/CMakeLists.txt finds by the pattern cli_*.sh.
#
# Sets BIN, FERRY, DIR (a fresh work directory named after the script), OUT, ERR, PASSED,
# FAILED, PIDS (the processes to stop on exit) and POLLS, and stops the processes and removes
# DIR on exit. A script that sets LOGS_ON_FAILURE=1 also gets every $DIR/*.log on stderr when
# a check has failed.

BIN=${FERRY_BIN_DIR:?FERRY_BIN_DIR must name the directory of ferryd and ferry}
FERRY=$BIN/ferry
DIR=$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX") || exit 1
OUT=$DIR/stdout
ERR=$DIR/stderr
PIDS=()
PASSED=0
FAILED=0
# python3 ARGS...: the interpreter the build found (FERRY_PYTHON), not the first python3 on
# PATH: a version manager's shim there (pyenv's) runs shell scripts on every call, which cost
# 4 s a call instead of 0.4 s on this machine during a full make test, and the shell tests call
# python3 thousands of times.
# pystd ARGS...: the same for code that needs only the standard library (the JSON checks),
# isolated and without site (-I -S): it starts in a quarter of the time.
FERRY_PYTHON=${FERRY_PYTHON:-python3}
python3() { command "$FERRY_PYTHON" "$@"; }
pystd() { command "$FERRY_PYTHON" -I -S "$@"; }

# py_ferry ARGS...: python3 with this build's module (FERRY_PYTHONPATH); in a sanitizer build
# with its runtimes preloaded (FERRY_PY_PRELOAD), as tests/CMakeLists.txt does for pytest.
py_ferry() {
    if [ -n "${FERRY_PY_PRELOAD:-}" ]; then
        LD_PRELOAD=$FERRY_PY_PRELOAD ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
            PYTHONMALLOC=malloc PYTHONPATH=$FERRY_PYTHONPATH python3 "$@"
    else
        PYTHONPATH=$FERRY_PYTHONPATH python3 "$@"
    fi
}

# How long a start or a convergence may take: 200 polls of 50 ms, about 10 s.
POLLS=200
LOGS_ON_FAILURE=

# No single command may take longer than this (seconds): a hang fails the check instead.
CMD_LIMIT=30

# ferry_at SOCKET ARGS...: the tool against the daemon at SOCKET. Its connection's own timer
# ($FERRY_TIMEOUT_MS, CMD_LIMIT) bounds each request; a get's or fetch's --timeout its wait.
# Not wrapped in timeout(1): that doubled the processes the shell tests start, their largest
# cost (ctest's timeout ends a test that hangs anyway).
ferry_at() {
    local sock=$1
    shift
    FERRY_TIMEOUT_MS=$((CMD_LIMIT * 1000)) "$FERRY" --socket "$sock" "$@"
}

# fy NODE ARGS...: the tool against the daemon of start_node NODE.
fy() {
    local node=$1
    shift
    ferry_at "$DIR/$node.sock" "$@"
}

# stop_process PID: TERM, then KILL after 5 s.
stop_process() {
    local pid=$1 n
    kill "$pid" 2>/dev/null
    for ((n = 0; n < 100; n++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

# Prints every log (on failure, when asked), stops the processes, removes the work directory.
cleanup() {
    local pid log
    if [ -n "$LOGS_ON_FAILURE" ] && [ "$FAILED" -ne 0 ]; then
        for log in "$DIR"/*.log; do
            echo "---- $log ----" >&2
            cat "$log" >&2
        done
    fi
    for pid in "${PIDS[@]}"; do
        stop_process "$pid"
    done
    rm -rf "$DIR"
}
trap cleanup EXIT

pass() { PASSED=$((PASSED + 1)); }
fail() {
    FAILED=$((FAILED + 1))
    echo "FAIL: $*" >&2
}

# summary: prints "N passed, M failed"; true when nothing failed.
summary() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}

# run NAME STATUS CMD...: runs CMD with stdout in $OUT and stderr in $ERR. True when it exits
# with STATUS; else the check has failed, and is reported.
run() {
    local name=$1 want=$2 got
    shift 2
    "$@" >"$OUT" 2>"$ERR"
    got=$?
    [ "$got" -eq "$want" ] && return 0
    fail "$name: exit status $got, expected $want; stderr: $(head -c 300 "$ERR")"
    return 1
}

# expect NAME STATUS CMD...: run, and then a success must print nothing on stderr and a
# failure exactly one line "ferry: ...".
expect() {
    run "$@" || return
    local lines
    lines=$(wc -l <"$ERR")
    if [ "$2" -eq 0 ] && [ "$lines" -ne 0 ]; then
        fail "$1: succeeded but wrote on stderr: $(head -c 300 "$ERR")"
    elif [ "$2" -ne 0 ] && { [ "$lines" -ne 1 ] || ! grep -q '^ferry: ' "$ERR"; }; then
        fail "$1: stderr is not one 'ferry: ' line: $(head -c 300 "$ERR")"
    else
        pass
    fi
}

# expect_answer NAME STATUS CMD...: run, for a command whose status is an answer (contains):
# nothing on stderr either way.
expect_answer() {
    run "$@" || return
    if [ -s "$ERR" ]; then
        fail "$1: wrote on stderr: $(head -c 300 "$ERR")"
    else
        pass
    fi
}

# expect_lines NAME STATUS LINES... CMD: run, then stderr must be exactly LINES (one
# argument each, before the command, which starts at the word "--").
expect_lines() {
    local name=$1 want=$2 lines=()
    shift 2
    while [ "$1" != "--" ]; do
        lines+=("$1")
        shift
    done
    shift
    run "$name" "$want" "$@" || return
    if [ "$(cat "$ERR")" = "$(printf '%s\n' "${lines[@]}")" ]; then
        pass
    else
        fail "$name: stderr is '$(head -c 300 "$ERR")', expected '$(printf '%s|' "${lines[@]}")'"
    fi
}

# ok NAME CMD...: checks that CMD succeeds.
ok() {
    local name=$1
    shift
    if "$@"; then pass; else fail "$name"; fi
}

# eventually NAME CMD...: checks that CMD succeeds within POLLS polls (for what happens
# asynchronously).
eventually() {
    local name=$1 n
    shift
    for ((n = 0; n < POLLS; n++)); do
        if "$@"; then
            pass
            return
        fi
        sleep 0.05
    done
    fail "$name (not within $((POLLS / 20)) s)"
}

# pyjson FILE EXPR: true when the Python expression EXPR, with j the JSON document in FILE,
# is true.
pyjson() {
    pystd -c 'import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2"
}

# json_field FILE KEY: prints the value of KEY in the JSON object in FILE.
json_field() {
    pystd -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# wait_for NAME PID CMD...: polls CMD until it succeeds (true), PID exits or ~10 s pass.
wait_for() {
    local name=$1 pid=$2 n
    shift 2
    for ((n = 0; n < POLLS; n++)); do
        "$@" >/dev/null 2>&1 && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name exited during start" >&2
            return 1
        fi
        sleep 0.05
    done
    echo "$name did not answer within 10 s" >&2
    return 1
}

# A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range (why: tools/free_port.h).
free_port() {
    pystd "$(dirname "${BASH_SOURCE[0]}")/python/free_port.py"
}

# start_redis: a redis-server on 127.0.0.1 at a free port (REDIS_PORT), stopped on exit.
start_redis() {
    REDIS_PORT=$(free_port) || return 1
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$DIR" >"$DIR/redis.log" 2>&1 &
    PIDS+=($!)
    wait_for redis-server $! redis_ping
}

redis_ping() { [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }

# FERRY_TEST_TRANSPORT runs the cluster suites over one transport: tcp, rxm (fabric over
# tcp;ofi_rxm) or shm (fabric over shm); unset, the daemons choose (auto).
case "${FERRY_TEST_TRANSPORT:-}" in
"") TRANSPORT_ARGS=() ;;
tcp) TRANSPORT_ARGS=(--transport tcp) ;;
rxm) TRANSPORT_ARGS=(--transport fabric --fabric-provider "tcp;ofi_rxm") ;;
*) TRANSPORT_ARGS=(--transport fabric --fabric-provider "$FERRY_TEST_TRANSPORT") ;;
esac

# FERRY_TEST_TIMERS (tests/CMakeLists.txt): the protocol's timers scaled down (ferryd --timers).
TIMER_ARGS=()
[ -n "${FERRY_TEST_TIMERS:-}" ] && TIMER_ARGS=(--timers "$FERRY_TEST_TIMERS")

# start_node NAME [ARGS...]: a ferryd with its socket at $DIR/NAME.sock and its log at
# $DIR/NAME.log, stopped on exit; true once it answers. The log goes to stderr when it does not.
start_node() {
    local name=$1
    shift
    "$BIN/ferryd" --socket "$DIR/$name.sock" --memory 64M "${TRANSPORT_ARGS[@]}" "${TIMER_ARGS[@]}" "$@" \
        >"$DIR/$name.log" 2>&1 &
    PIDS+=($!)
    wait_for "ferryd $name" $! "$FERRY" --socket "$DIR/$name.sock" stat && return 0
    cat "$DIR/$name.log" >&2
    return 1
}
