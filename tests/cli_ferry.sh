#!/usr/bin/env bash
# cli_ferry.sh - the ferry command line against a real ferryd: every command with real data,
# every exit status, and the one-line error report on stderr.
#
# Needs FERRY_BIN_DIR (the directory holding ferryd and ferry) and python3 for the JSON checks.
# Prints each failed check, then "N passed, M failed"; exits non-zero when any check failed.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

SOCK=$DIR/ferry.sock
# No single command may take longer than this (seconds): a hang fails the check instead.
CMD_LIMIT=20
# The names of the objects in the store when test_ls and test_stat run.
STORED=(alpha beta empty empty-pipe delta named-object)

# The tool against the test daemon.
fy() { ferry_at "$SOCK" "$@"; }

# stat_field NAME: one field of stat --json.
stat_field() { fy stat --json >"$DIR/stat_field.json" && json_field "$DIR/stat_field.json" "$1"; }

# The raw id that a name stands for: its SHA-1.
sha1_hex() { printf %s "$1" | sha1sum | cut -c1-40; }

# cat, not a redirect: the point is a stdin of unknown size.
# shellcheck disable=SC2002
put_pipe() { cat "$2" | fy put "$1" -; }
put_redirect() { fy put "$1" <"$2"; }
stdout_is() { [ "$(cat "$OUT")" = "$1" ]; }

make_data() {
    head -c 100000 /dev/urandom >"$DIR/a.bin"
    head -c 3000000 /dev/urandom >"$DIR/b.bin" # over the CLI's first stdin buffer, many times
    head -c 5000 /dev/urandom >"$DIR/c.bin"
    : >"$DIR/empty.bin"
    truncate -s 65M "$DIR/big.bin" # sparse: larger than the 64 MiB arena, costs no disk
}

test_help_and_usage() {
    expect "--help" 0 "$FERRY" --help
    ok "--help prints the usage on stdout" grep -q '^Usage: ferry' "$OUT"
    expect "-h" 0 "$FERRY" -h
    expect "no command" 2 fy
    expect "unknown command" 2 fy frobnicate
    expect "unknown global option" 2 "$FERRY" --frob stat
    expect "--socket without a value" 2 "$FERRY" --socket
    expect "put without an id" 2 fy put
    expect "put with an extra argument" 2 fy put x "$DIR/a.bin" extra
    expect "put with an unknown option" 2 fy put x "$DIR/a.bin" --nope
    expect "put --meta without a value" 2 fy put x "$DIR/a.bin" --meta
    expect "put with an empty id" 2 fy put "" "$DIR/a.bin"
    expect "get without an id" 2 fy get
    expect "get with two ids" 2 fy get x y
    expect "get with a bad timeout" 2 fy get x --timeout abc
    expect "get with a timeout below -1" 2 fy get x --timeout -5
    expect "get with a timeout with junk" 2 fy get x --timeout 10ms
    expect "contains without an id" 2 fy contains
    expect "rm with two ids" 2 fy rm x y
    expect "ls with two arguments" 2 fy ls x y
    expect "stat with an unknown option" 2 fy stat --yaml
    expect "evict without bytes" 2 fy evict
    expect "evict with a bad suffix" 2 fy evict 12X
    expect "evict with a negative count" 2 fy evict -1
    expect "evict with junk after the suffix" 2 fy evict 1MiBs
    expect "evict with a fraction and no unit" 2 fy evict 1.5
    expect "evict 1.5G parses (then finds no daemon)" 4 fy evict 1.5G
    expect "evict 64KiB parses (then finds no daemon)" 4 fy evict 64KiB
    expect "evict beyond 64 bits" 2 fy evict 99999999999999999999
    expect "hash without an id" 2 fy hash
    # A command line error is found before the daemon is asked anything.
    expect "usage error with no daemon" 2 "$FERRY" --socket "$DIR/nothing.sock" get
}

test_unreachable() {
    expect "stat with no daemon" 4 "$FERRY" --socket "$DIR/nothing.sock" stat
    expect "put with no daemon" 4 "$FERRY" --socket "$DIR/nothing.sock" put x "$DIR/a.bin"
}

# wait: once it returns 0 the daemon answers, so a script's next line can use it (a large
# arena takes seconds to map); no daemon in time is status 1, saying so.
test_wait() {
    expect "wait for no daemon" 1 "$FERRY" --socket "$DIR/nothing.sock" wait --timeout 200
    ok "wait says why" grep -q "no daemon answered within 200 ms" "$ERR"
    expect "wait with a bad timeout" 2 fy wait --timeout soon
    "$BIN/ferryd" --socket "$DIR/late.sock" --memory 64M "${TRANSPORT_ARGS[@]}" \
        >"$DIR/late.log" 2>&1 &
    PIDS+=($!)
    expect "wait for a daemon starting" 0 "$FERRY" --socket "$DIR/late.sock" wait --timeout 20000
    expect "put right after wait" 0 "$FERRY" --socket "$DIR/late.sock" put waited "$DIR/a.bin"
    expect "wait --cluster on a standalone node" 6 \
        "$FERRY" --socket "$DIR/late.sock" wait --cluster --timeout 1000
}

test_put_get() {
    expect "put from a file" 0 fy put alpha "$DIR/a.bin"
    ok "put prints nothing" test ! -s "$OUT"
    expect "get -o" 0 fy get alpha -o "$DIR/a.out"
    ok "get -o writes the bytes put" cmp -s "$DIR/a.bin" "$DIR/a.out"
    expect "get to stdout" 0 fy get alpha
    ok "get to stdout writes the bytes put" cmp -s "$DIR/a.bin" "$OUT"
    expect "get -o -" 0 fy get alpha -o -
    ok "get -o - writes to stdout" cmp -s "$DIR/a.bin" "$OUT"
    expect "put from a pipe" 0 put_pipe beta "$DIR/b.bin"
    expect "get what came from a pipe" 0 fy get beta -o "$DIR/b.out"
    ok "a pipe's bytes round trip" cmp -s "$DIR/b.bin" "$DIR/b.out"
    expect "put from redirected stdin" 0 put_redirect gamma "$DIR/c.bin"
    expect "get what came from redirected stdin" 0 fy get gamma --timeout 0
    ok "redirected stdin's bytes round trip" cmp -s "$DIR/c.bin" "$OUT"
    expect "put of an empty file" 0 fy put empty "$DIR/empty.bin"
    expect "get of an empty object" 0 fy get empty
    ok "an empty object is empty" test ! -s "$OUT"
    expect "put of an empty pipe" 0 put_pipe empty-pipe "$DIR/empty.bin"
    expect "put with --meta" 0 fy put delta "$DIR/a.bin" --meta "hello world"
    expect "get of an object with metadata" 0 fy get delta -o "$DIR/d.out"
    ok "metadata does not leak into the data" cmp -s "$DIR/a.bin" "$DIR/d.out"
    expect "put of an existing id" 5 fy put alpha "$DIR/c.bin"
    ok "a refused put leaves the object alone" cmp -s "$DIR/a.bin" <(fy get alpha)
    expect "put of a missing file" 5 fy put nofile "$DIR/does-not-exist"
}

test_get_missing() {
    expect "get of a missing object (poll)" 1 fy get missing
    echo keep >"$DIR/keep.out"
    expect "get --timeout 100 of a missing object" 1 fy get missing --timeout 100 -o "$DIR/keep.out"
    ok "a failed get leaves the -o file alone" test "$(cat "$DIR/keep.out")" = keep
    expect "get -o into a missing directory" 5 fy get alpha -o "$DIR/no/such/dir"
}

# A get waits for a put made while it waits, with a timeout and with none.
test_get_waits() {
    local ms pid status
    for ms in 10000 -1; do
        fy get "later$ms" --timeout "$ms" -o "$DIR/later.out" 2>"$DIR/later.err" &
        pid=$!
        sleep 0.2
        expect "put while a get --timeout $ms waits" 0 fy put "later$ms" "$DIR/c.bin"
        wait "$pid"
        status=$?
        ok "get --timeout $ms returns what was put meanwhile" \
            test "$status" -eq 0 -a ! -s "$DIR/later.err"
        ok "get --timeout $ms writes the bytes put meanwhile" cmp -s "$DIR/c.bin" "$DIR/later.out"
    done
}

test_contains_rm() {
    expect_answer "contains of a stored object" 0 fy contains alpha
    ok "contains prints true" stdout_is true
    expect_answer "contains of a missing object" 1 fy contains missing
    ok "contains prints false" stdout_is false
    expect "rm" 0 fy rm gamma
    expect_answer "contains after rm" 1 fy contains gamma
    expect "get after rm" 1 fy get gamma
    expect "rm of a missing object" 1 fy rm gamma
}

test_too_big() {
    expect "put of a file larger than the arena" 3 fy put big "$DIR/big.bin"
    expect "put of a pipe larger than the arena" 3 put_pipe big-pipe "$DIR/big.bin"
    expect_answer "nothing stays of a refused put" 1 fy contains big
}

test_raw_id() {
    local hex
    hex=$(sha1_hex named-object)
    expect "put by name" 0 fy put named-object "$DIR/c.bin"
    expect "ls after put by name" 0 fy ls
    ok "ls shows the name's SHA-1 as the id" grep -q "^$hex " "$OUT"
    expect "get by raw hex id" 0 fy get "$hex" -o "$DIR/raw.out"
    ok "get by raw hex id gives the bytes put by name" cmp -s "$DIR/c.bin" "$DIR/raw.out"
    expect_answer "contains by upper case hex id" 0 fy contains "${hex^^}"
    expect "get by a 39-digit prefix is another id" 1 fy get "${hex:0:39}"
}

test_ls() {
    local ha hd name ids=""
    ha=$(sha1_hex alpha)
    hd=$(sha1_hex delta)
    for name in "${STORED[@]}"; do
        ids+="'$(sha1_hex "$name")', "
    done
    expect "ls --json" 0 fy ls --json
    cp "$OUT" "$DIR/ls.json"
    ok "ls --json lists alpha with its size" pyjson "$DIR/ls.json" \
        "any(o['id'] == '$ha' and o['data_size'] == 100000 and o['metadata_size'] == 0 for o in j)"
    ok "ls --json shows delta's metadata size" pyjson "$DIR/ls.json" \
        "any(o['id'] == '$hd' and o['metadata_size'] == len('hello world') for o in j)"
    ok "ls --json has every key of every object" pyjson "$DIR/ls.json" \
        "all(set(o) == {'id', 'data_size', 'metadata_size', 'state', 'refcount', 'age_ms', 'name'}
             for o in j)"
    ok "ls --json keeps the names put was given" pyjson "$DIR/ls.json" \
        "{o['id']: o['name'] for o in j}['$ha'] == 'alpha'"
    ok "objects put by the CLI are sealed and released" pyjson "$DIR/ls.json" \
        "all(o['state'] == 'sealed' and o['refcount'] == 0 for o in j)"
    ok "ls --json lists each object put and nothing else" pyjson "$DIR/ls.json" \
        "sorted(o['id'] for o in j) == sorted([$ids])"
    expect "ls" 0 fy ls
    ok "ls prints a header and a row per object" \
        test "$(wc -l <"$OUT")" -eq $((${#STORED[@]} + 1))
    ok "ls shows alpha sealed, by its name" grep -Eq "^$ha +100000 +0 +sealed +0 .*s  alpha$" "$OUT"
    expect "ls PREFIX" 0 fy ls alp
    ok "ls PREFIX keeps the names that start with it" \
        test "$(tail -n +2 "$OUT" | awk '{print $NF}' | sort | tr '\n' ' ')" = "alpha "
    expect "ls ID-PREFIX" 0 fy ls "${ha:0:8}"
    ok "ls ID-PREFIX keeps the ids that start with it" test "$(wc -l <"$OUT")" -eq 2
    expect "put under a raw id" 0 fy put "$(sha1_hex raw-one)" "$DIR/c.bin"
    expect "ls of it" 0 fy ls "$(sha1_hex raw-one)"
    ok "a raw id keeps no name" grep -Eq "s  $" "$OUT"
    expect "rm of it" 0 fy rm "$(sha1_hex raw-one)"
}

test_stat() {
    expect "stat --json" 0 fy stat --json
    cp "$OUT" "$DIR/stat.json"
    ok "stat --json has the five keys" pyjson "$DIR/stat.json" \
        "{'capacity_bytes', 'used_bytes', 'objects', 'clients', 'evicted_objects'} <= set(j)"
    ok "stat --json has sane values" pyjson "$DIR/stat.json" \
        "(0 < j['capacity_bytes'] <= 64 << 20 and 0 < j['used_bytes'] <= j['capacity_bytes']
          and j['objects'] == ${#STORED[@]} and j['clients'] >= 1 and j['evicted_objects'] == 0)"
    ok "stat --json has only numbers but for the fabric provider and peers" \
        pyjson "$DIR/stat.json" \
        "all(type(v) is int and v >= 0 for k, v in j.items()
             if k not in ('fabric_provider', 'peers'))"
    ok "stat --json: a standalone node has eager_max 0 and no transport's counters" \
        pyjson "$DIR/stat.json" \
        "j['eager_max'] == 0 and not [k for k in j if k.startswith('fabric_')
                                      and k != 'fabric_provider']"
    ok "stat --json: a standalone node has no fabric provider and no peers" \
        pyjson "$DIR/stat.json" "j['fabric_provider'] == '' and j['peers'] == []"
    expect "stat --all" 0 fy stat --all
    ok "stat --all prints every field of stat --json" pyjson "$DIR/stat.json" \
        "sorted(j) == sorted(l.split()[0] for l in open('$OUT'))"
    ok "stat --all prints no fabric provider and no peers" pyjson "$DIR/stat.json" \
        "[l.split() for l in open('$OUT')][-2:] == [['fabric_provider', '-'], ['peers', '-']]"
    expect "stat" 0 fy stat
    ok "stat for people: the release and uptime first" \
        grep -q "^ferryd $("$BIN/ferryd" --version | cut -d' ' -f2), up [0-9]" "$OUT"
    ok "stat for people: store and clients, with units" \
        grep -q '^  arena         64.0 MiB: .* used (.* %), .* free, .* evictable$' "$OUT"
    ok "stat for people: a standalone node shows no cluster, transports or peers" \
        pyjson "$DIR/stat.json" \
        "[l.rstrip() for l in open('$OUT') if not l.startswith(' ')][1:] == ['store', 'clients']"
    expect "stat through \$FERRY_SOCKET, the default socket" 0 \
        env FERRY_SOCKET="$SOCK" "$FERRY" stat
}

test_hash() {
    local h1 h2 h3 h4
    expect "put of a copy" 0 fy put alpha-copy "$DIR/a.bin"
    expect "hash" 0 fy hash alpha
    h1=$(cat "$OUT")
    ok "hash prints the 64 hex digits of the SHA-256 root" grep -Eqx '[0-9a-f]{64}' "$OUT"
    expect "hash of the copy" 0 fy hash alpha-copy
    h2=$(cat "$OUT")
    expect "hash of other data" 0 fy hash beta
    h3=$(cat "$OUT")
    expect "hash of the same data with metadata" 0 fy hash delta
    h4=$(cat "$OUT")
    ok "identical content hashes alike under two ids" test "$h1" = "$h2"
    ok "different content hashes differently" test "$h1" != "$h3"
    ok "metadata is part of the hash" test "$h1" != "$h4"
    expect "hash of a missing object" 1 fy hash missing
}

test_eager_max() {
    expect "eager-max with two sizes" 2 fy eager-max 1M 2M
    expect "eager-max with a bad suffix" 2 fy eager-max 12X
    expect "eager-max with a negative size" 2 fy eager-max -1
    expect "eager-max with a bad word" 2 fy eager-max automatic
    expect "eager-max reads the limit" 0 fy eager-max
    ok "eager-max of a standalone node is 0" stdout_is 0
    # A standalone node has no transfers to tune: the daemon refuses (FERRY_ESTANDALONE), 6.
    expect "eager-max 1M on a standalone node" 6 fy eager-max 1M
    ok "eager-max 1M names the reason" grep -q 'standalone node' "$ERR"
    expect "eager-max auto on a standalone node" 6 fy eager-max auto
    ok "the refusal leaves the connection usable" test "$(stat_field eager_max)" = 0
}

test_evict() {
    local before after freed
    before=$(stat_field used_bytes)
    expect "evict 1K" 0 fy evict 1K
    ok "evict says what it did" grep -Eq '^evicted [1-9][0-9]* objects?, [0-9.]+ [KMG]?i?B \([0-9]+ bytes\)$' "$OUT"
    freed=$(evicted_bytes)
    ok "evict 1K frees at least 1 KiB" test "$freed" -ge 1024
    expect "evict 64M" 0 fy evict 64M
    freed=$((freed + $(evicted_bytes)))
    after=$(stat_field used_bytes)
    ok "evict lowers used_bytes by what it freed" test "$after" -lt "$before" -a \
        "$((before - after))" -ge "$freed"
    ok "evict counts evicted objects" test "$(stat_field evicted_objects)" -gt 0
    expect_answer "an evicted object is gone" 1 fy contains alpha
    expect "evict with nothing left" 0 fy evict 1G
    ok "evict with nothing left frees nothing" stdout_is "evicted 0 objects, 0 B (0 bytes)"
}

# examples/put_get.c, the README's C example: stores, reads back in place, exits 0.
test_c_example() {
    expect "the C example runs" 0 env FERRY_SOCKET="$SOCK" "$BIN/example_put_get" c-example
    ok "it read its bytes back" grep -q '^c-example: 28 bytes at 0x[0-9a-f]* in the arena: hello from C' "$OUT"
    expect_answer "what it put is there" 0 fy contains c-example
}

# put --keep, keep and unkeep: a kept object survives evict and is counted until let go.
test_keep() {
    printf 'kept' >"$DIR/kept"
    expect "put --keep" 0 fy put kept-put "$DIR/kept" --keep
    expect "put another" 0 fy put kept-later "$DIR/kept"
    expect "keep it" 0 fy keep kept-later
    expect "keep of an object that is not there" 1 fy keep no-such-object
    expect "evict all" 0 fy evict 1G
    expect_answer "a kept object is not evicted" 0 fy contains kept-put
    ok "kept_objects counts both" test "$(stat_field kept_objects)" = 2
    expect "stat" 0 fy stat
    ok "stat shows what is kept" grep -Eq '^  kept +2 objects, 8 B' "$OUT"
    expect "unkeep" 0 fy unkeep kept-put
    expect "evict all again" 0 fy evict 1G
    expect_answer "let go, it is evicted" 1 fy contains kept-put
    expect_answer "the other stays" 0 fy contains kept-later
    expect "rm --unused of an unheld object" 0 fy rm --unused kept-later
    expect_answer "it went at once" 1 fy contains kept-later
    ok "deleted_unused counts it" test "$(stat_field deleted_unused)" = 1
    expect "--cluster and --unused together" 2 fy rm --cluster --unused kept-put
}

# The bytes in evict's "(N bytes)".
evicted_bytes() { sed -n 's/.*(\([0-9]*\) bytes)$/\1/p' "$OUT"; }

# help, did-you-mean, options anywhere and as --opt=value, get --meta, id, and messages that
# name the path or id and the next step.
test_command_line() {
    expect "help" 0 fy help
    ok "help is the usage" grep -q '^Usage: ferry' "$OUT"
    expect "help get" 0 fy help get
    ok "help get tells get's options" grep -q -- '--meta' "$OUT"
    expect "get --help" 0 fy get --help
    ok "get --help is help get" grep -q '^Usage: ferry \[--socket PATH\] get ID' "$OUT"
    expect "help of an unknown command" 2 fy help frob
    expect "a near miss of a command" 2 fy stats
    ok "did you mean stat" grep -q "did you mean 'stat'" "$ERR"
    expect "a near miss of an option" 2 fy ls --jsno
    ok "did you mean --json" grep -q "did you mean --json" "$ERR"
    expect "--socket after the command" 0 "$FERRY" contains alpha --socket "$SOCK"
    expect "--socket=PATH" 0 "$FERRY" --socket="$SOCK" contains alpha
    expect "--timeout=0" 0 fy get alpha --timeout=0 -o "$DIR/eq.out"
    ok "--opt=value round trip" cmp -s "$DIR/a.bin" "$DIR/eq.out"
    expect "a flag with a value" 2 fy ls --json=yes
    expect "get --meta" 0 fy get delta --meta
    ok "get --meta prints the metadata" stdout_is "hello world"
    expect "id of a name" 0 fy id abc
    ok "id is the name's SHA-1" stdout_is a9993e364706816aba3e25717850c26c9cd0d89d
    expect "put of an existing id" 5 fy put alpha "$DIR/c.bin"
    ok "it echoes the name, names the id and says rm it first" \
        grep -q "('alpha', id $("$FERRY" id alpha)).*rm it first" "$ERR"
    expect "a socket path that is a directory" 4 "$FERRY" --socket "$DIR" stat
    ok "it says so" grep -q "$DIR: a directory, not a socket" "$ERR"
    expect "a socket in a missing directory" 4 "$FERRY" --socket "$DIR/none/f.sock" stat
    ok "it names the directory" grep -q "the directory $DIR/none does not exist" "$ERR"
    if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
        chmod 755 "$DIR"
        expect "a socket whose mode denies the user" 4 setpriv --reuid=65534 --regid=65534 \
            --clear-groups "$FERRY" --socket "$SOCK" stat
        ok "it names the mode and the way out" grep -q "mode 0600, .*--socket-mode" "$ERR"
    fi
    head -c 3000000 /dev/urandom >"$DIR/stream.bin"
    expect "put - of 3 MB through a pipe" 0 put_pipe streamed "$DIR/stream.bin"
    ok "the stream round trips" cmp -s "$DIR/stream.bin" <(fy get streamed)
}

main() {
    make_data || exit 1
    test_help_and_usage
    test_unreachable
    test_wait
    start_node ferry || exit 1
    test_put_get
    test_get_missing
    test_contains_rm
    test_too_big
    test_raw_id
    test_ls
    test_stat
    test_eager_max
    test_get_waits
    test_hash
    test_command_line
    test_evict
    test_keep
    test_c_example
    summary
}

main
