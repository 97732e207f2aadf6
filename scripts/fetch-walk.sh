#!/bin/bash
# fetch-walk.sh [REV...]: how far a fetch of one 4 KiB object from another node walks on the
# receiver, at each git revision given (default HEAD): ferryd is built with
# -finstrument-functions (scripts/fetch-walk/trace.c records the loop thread's function
# entries), two nodes and a Redis run on loopback, and node b fetches FETCH_WALK_FETCHES (7)
# objects of a: the first over a new connection, the others over it once connected, whose
# medians close the report (a run varies: which timers fire, a lookup cached or not). For each
# fetch: the
# function entries, the source files and folders they are in, and how many times the walk
# moves from one file to another (an entry in another file than the entry before it); with
# FETCH_WALK_FILES=1, the entries per file too. Everything the loop's thread runs between the
# command's start and its end counts: the client's session, the lookup, the transfer, the seal,
# and any timer that fires meanwhile.
# Needs redis-server, cmake, ninja, addr2line. Builds in a temporary directory, removed after.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
TRACE=$REPO/scripts/fetch-walk/trace.c
FETCHES=${FETCH_WALK_FETCHES:-7}
TMP=$(mktemp -d /tmp/fetch-walk.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    git -C "$REPO" worktree remove --force "$TMP/src" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

# The tests' port picker: below the ephemeral range, reserved in the registry they share.
free_port() { /usr/bin/python3 -I -S "$REPO/tests/python/free_port.py"; }

wait_for() { # wait_for WHAT CMD...: CMD succeeds within 10 s
    local what=$1 n
    shift
    for ((n = 0; n < 200; n++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
    echo "fetch-walk: $what" >&2
    return 1
}

# build REV: an instrumented ferryd and ferry of REV in $TMP/build
build() {
    git -C "$REPO" worktree remove --force "$TMP/src" 2>/dev/null || true
    rm -rf "$TMP/src" "$TMP/build"
    git -C "$REPO" worktree add -q --detach "$TMP/src" "$1"
    cc -O2 -g -c -fPIC "$TRACE" -o "$TMP/trace.o"
    cmake -S "$TMP/src" -B "$TMP/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_FLAGS="-finstrument-functions -finstrument-functions-exclude-file-list=/usr/" \
        -DCMAKE_EXE_LINKER_FLAGS="$TMP/trace.o -ldl" >/dev/null
    cmake --build "$TMP/build" --target ferryd ferry >/dev/null
}

# walk OUT: b's record in OUT (one segment per fetch)
walk() {
    local bin=$TMP/build/bin rport pa pb n
    rport=$(free_port)
    redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" \
        >"$TMP/redis.log" 2>&1 &
    PIDS+=($!)
    wait_for "redis-server did not start" redis-cli -p "$rport" ping
    for n in a b; do
        pa=$(free_port)
        FERRY_WALK_OUT=$1.$n "$bin/ferryd" --socket "$TMP/$n.sock" --memory 64M \
            --node-id "walk-$n" --listen "127.0.0.1:$pa" --directory "redis://127.0.0.1:$rport" \
            >"$TMP/$n.log" 2>&1 &
        PIDS+=($!)
        [ "$n" = b ] && pb=$!
    done
    wait_for "node b does not list node a" sh -c "'$bin/ferry' --socket '$TMP/b.sock' nodes | grep -q walk-a"
    for ((n = 1; n <= FETCHES; n++)); do
        head -c 4096 /dev/urandom >"$TMP/obj"
        "$bin/ferry" --socket "$TMP/a.sock" put "walk-$n" "$TMP/obj"
    done
    for ((n = 1; n <= FETCHES; n++)); do
        wait_for "walk-$n is not listed" "$bin/ferry" --socket "$TMP/b.sock" where "walk-$n"
        kill -USR1 "$pb"
        "$bin/ferry" --socket "$TMP/b.sock" fetch "walk-$n"
        kill -USR2 "$pb"
    done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=()
    mv "$1.b" "$1"
}

# median FIELD REPORT: the median of FIELD over REPORT's lines of connected fetches
median() {
    grep '(connected)' "$2" | awk -v f="$1" '{ print $f }' | sort -n |
        awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }'
}

# report REV OUT: per segment, entries, files, folders and file switches (src/ only)
report() {
    # shellcheck disable=SC2094 # both read $2
    addr2line -e "$TMP/build/bin/ferryd" <"$2" 2>/dev/null | paste -d' ' "$2" - |
        awk -v rev="$1" -v src="$TMP/src/" -v per_file="${FETCH_WALK_FILES:-0}" '
        function flush() {
            if (!seg) return
            nf = 0; for (f in files) nf++
            nd = 0; for (d in dirs) nd++
            printf "%s, fetch %d (%s): %d entries in %d files of %d folders of src/, %d moves between files\n",
                rev, seg, seg == 1 ? "new connection" : "connected", entries, nf, nd, moves
            if (per_file == 1)
                for (f in files) printf "    %6d %s\n", files[f], f | "sort -rn"
            close("sort -rn")
        }
        $1 == "--" { flush(); seg++; entries = moves = 0; last = ""; delete files; delete dirs; next }
        {
            split($2, at, ":"); file = at[1]
            if (index(file, src) != 1) next
            file = substr(file, length(src) + 1)
            if (file !~ /^src\//) next
            entries++; files[file]++
            dir = file; sub(/\/[^\/]*$/, "", dir); dirs[dir] = 1
            if (last != "" && file != last) moves++
            last = file
        }
        END { flush() }' | tee "$2.report"
    # the medians of the fetches over the connection made: entries (field 5), moves (15)
    printf '%s, connected, median of %d fetches: %d entries, %d moves between files\n' "$1" \
        "$(grep -c '(connected)' "$2.report")" "$(median 5 "$2.report")" "$(median 15 "$2.report")"
}

for rev in "${@:-HEAD}"; do
    build "$rev"
    walk "$TMP/walk.$rev"
    report "$(git -C "$REPO" log -1 --format=%h "$rev")" "$TMP/walk.$rev"
done
