#!/usr/bin/env bash
# cli_cluster_metrics.sh - ferryd --metrics against real daemons in a cluster (a real Redis):
# scrapes during a fetch, the output checked by Prometheus' own promtool, values that move with
# the work done (transfers, bytes, latency histograms, peers), and the endpoint's bounds: bad
# requests answered with their HTTP status, connections past the limit turned away while
# scrapes still work, a bad --metrics refused before the arena is reserved.
#
# Needs FERRY_BIN_DIR, redis-server, python3 and promtool (Debian's prometheus package).
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

LOGS_ON_FAILURE=1
OBJECTS=12
OBJECT_BYTES=2097152

# start_metrics_node NAME: node-NAME with --metrics on a port the kernel picks; its address
# (from the log) in MADDR[NAME].
declare -A MADDR
start_metrics_node() {
    local name=$1 port
    port=$(free_port) || return 1
    start_node "$name" --node-id "node-$name" --listen "127.0.0.1:$port" \
        --directory "redis://127.0.0.1:$REDIS_PORT" --metrics 127.0.0.1:0 || return 1
    MADDR[$name]=$(sed -n 's|.*metrics: http://\([^/]*\)/metrics.*|\1|p' "$DIR/$name.log")
    [ -n "${MADDR[$name]}" ]
}

# scrape NAME FILE [PATH [METHOD]]: one HTTP request to node NAME's metrics address; the body
# in FILE, the status code on stdout (5 s at most).
scrape() {
    pystd - "${MADDR[$1]}" "$2" "${3:-/metrics}" "${4:-GET}" <<'EOF'
import sys, http.client
host, port = sys.argv[1].rsplit(":", 1)
c = http.client.HTTPConnection(host, int(port), timeout=5)
c.request(sys.argv[4], sys.argv[3])
r = c.getresponse()
open(sys.argv[2], "wb").write(r.read())
print(r.status, r.getheader("Content-Type"))
EOF
}

# value FILE SAMPLE: the value of the sample line that starts with SAMPLE (name and labels).
value() {
    pystd - "$1" "$2" <<'EOF'
import sys
for line in open(sys.argv[1]):
    if line.startswith(sys.argv[2] + " "):
        print(int(float(line.split()[-1])))
        sys.exit(0)
sys.exit(1)
EOF
}

valid_scrape() {
    [ "$(scrape "$1" "$2")" = "200 text/plain; version=0.0.4; charset=utf-8" ] &&
        promtool check metrics <"$2" >"$DIR/promtool.out" 2>&1
}

# grew FILE0 FILE1 SAMPLE N: SAMPLE's value grew by at least N from FILE0 to FILE1.
grew() {
    local v0 v1
    v0=$(value "$1" "$3") && v1=$(value "$2" "$3") && [ $((v1 - v0)) -ge "$4" ]
}

# A bad command line is refused with its reason before the arena is reserved: with --memory
# 64T a reservation would fail otherwise, with another message.
test_refused_before_the_arena() {
    local x=(--socket "$DIR/x.sock" --memory 64T)
    local r="redis://127.0.0.1:$REDIS_PORT"
    run "--metrics without a port" 2 "$BIN/ferryd" "${x[@]}" --metrics nope
    ok "--metrics names the option" grep -q -- "--metrics: address 'nope'" "$ERR"
    run "a bad node id" 2 "$BIN/ferryd" "${x[@]}" --node-id "a b" --listen 127.0.0.1:1 --directory "$r"
    ok "the node id is named" grep -q "node id 'a b'" "$ERR"
    run "a bad directory URL" 2 "$BIN/ferryd" "${x[@]}" --node-id n --listen 127.0.0.1:1 \
        --directory http://x
    ok "the URL's form is named" grep -q "directory URL: expected redis://" "$ERR"
    run "a bad --listen" 2 "$BIN/ferryd" "${x[@]}" --node-id n --listen nope --directory "$r"
    ok "--listen is named" grep -q -- "--listen nope: expected HOST:PORT" "$ERR"
    run "two of the three cluster options" 2 "$BIN/ferryd" "${x[@]}" --node-id n --directory "$r"
    ok "all three are named" grep -q -- "needs --node-id, --listen and --directory" "$ERR"
    run "a bad size" 2 "$BIN/ferryd" --socket "$DIR/x.sock" --memory 1.5Q
    ok "the size is named" grep -q "size '1.5Q'" "$ERR"
}

test_scrapes_during_a_fetch() {
    local ids=() i
    for i in $(seq 1 $OBJECTS); do
        head -c $OBJECT_BYTES /dev/urandom >"$DIR/obj$i"
        ok "put obj$i on b" fy b put "metrics-obj$i" "$DIR/obj$i"
        ids+=("metrics-obj$i")
    done
    ok "a scrape of a is valid for promtool" valid_scrape a "$DIR/a0.prom"
    ok "a scrape of b is valid for promtool" valid_scrape b "$DIR/b0.prom"
    ok "build_info has the release" grep -q "^ferry_build_info{version=\"$("$BIN/ferryd" --version |
        cut -d' ' -f2)\",node=\"node-a\"} 1" "$DIR/a0.prom"
    ok "capacity in bytes" [ "$(value "$DIR/a0.prom" ferry_capacity_bytes)" = 67108864 ]
    ok "b counted its puts" [ "$(value "$DIR/b0.prom" \
        'ferry_operation_duration_seconds_count{op="put"}')" -ge $OBJECTS ]

    fy a fetch "${ids[@]}" >"$DIR/fetch.out" 2>&1 &
    local fetch=$! n=0 bad=0
    while kill -0 "$fetch" 2>/dev/null && [ $n -lt 50 ]; do
        valid_scrape a "$DIR/during.prom" || bad=$((bad + 1))
        n=$((n + 1))
    done
    wait "$fetch"
    ok "the fetch succeeded" [ $? -eq 0 ]
    ok "every scrape during the fetch was valid ($n)" [ $bad -eq 0 ]

    ok "a scrape after it is valid" valid_scrape a "$DIR/a1.prom"
    ok "transfers_in moved by $OBJECTS" grew "$DIR/a0.prom" "$DIR/a1.prom" \
        ferry_transfers_in_total $OBJECTS
    ok "bytes_in moved by the bytes" grew "$DIR/a0.prom" "$DIR/a1.prom" \
        ferry_bytes_in_total $((OBJECTS * OBJECT_BYTES))
    ok "the fetch's latency was counted" grew "$DIR/a0.prom" "$DIR/a1.prom" \
        'ferry_operation_duration_seconds_count{op="fetch"}' 1
    ok "each transfer's latency was counted" grew "$DIR/a0.prom" "$DIR/a1.prom" \
        'ferry_operation_duration_seconds_count{op="transfer"}' $OBJECTS
    ok "the +Inf bucket is the count" [ "$(value "$DIR/a1.prom" \
        'ferry_operation_duration_seconds_bucket{op="transfer",le="+Inf"}')" = \
        "$(value "$DIR/a1.prom" 'ferry_operation_duration_seconds_count{op="transfer"}')" ]
    ok "a lists b as a peer" grep -q '^ferry_peer_info{peer="node-b",' "$DIR/a1.prom"
    ok "scrapes are counted" grew "$DIR/a0.prom" "$DIR/a1.prom" ferry_metrics_scrapes_total 1
    scrape b "$DIR/b1.prom" >/dev/null
    ok "b sent them" grew "$DIR/b0.prom" "$DIR/b1.prom" ferry_transfers_out_total $OBJECTS
    if [ "${FERRY_TEST_TRANSPORT:-}" != tcp ]; then
        ok "the fabric's counters carry their transport" \
            grep -q '^ferry_transport_[a-z_]*{transport="fabric"}' "$DIR/a1.prom"
        ok "the provider is named" grep -q '^ferry_provider_info{provider="' "$DIR/a1.prom"
    fi
}

# ferry stat for people on a node of the cluster: every section, b among the peers, and the
# bytes received with their unit.
test_stat_for_people() {
    # A fetch from b just before: a closes a connection idle for 45 s, which the cases before
    # can outlast on a loaded machine (b was then missing from the peers, once in a full run).
    ok "put stat-obj on b" fy b put stat-obj "$DIR/obj1"
    ok "a fetches it" fy a fetch stat-obj
    fy a stat --json >"$DIR/stat.json"
    expect "stat on a" 0 fy a stat
    # Every transport counts something of its own (tcp: its listener's accept pauses).
    ok "stat: every section" pyjson "$DIR/stat.json" "[l.rstrip() for l in open('$OUT')
        if not l.startswith(' ')][1:] == ['store', 'clients', 'metrics', 'cluster', 'transports',
                                          'peers']"
    ok "stat: b among the peers" grep -q '^  node-b ' "$OUT"
    # The scrapes' objects and stat-obj, of OBJECT_BYTES each.
    ok "stat: the bytes fetched, in MiB" \
        grep -q "objects in ($(((OBJECTS + 1) * OBJECT_BYTES >> 20)).0 MiB)" "$OUT"
}

# --verbose --log-format json: every record one JSON object; a record per request and per
# object received, at most LOG_LIMIT_PER_SECOND (50) a second of each kind, and what was left
# out counted in a record before the next of its kind: logged and left out add up to all.
test_verbose_json_logs() {
    local port
    port=$(free_port) || return
    start_node c --node-id node-c --listen "127.0.0.1:$port" \
        --directory "redis://127.0.0.1:$REDIS_PORT" --verbose --log-format json || return
    expect "fetch on c" 0 fy c fetch metrics-obj1 metrics-obj2
    # 300 requests from one client: faster than the limit even under the sanitizers (a ferry
    # process per request made 10 a second there, which the limit never met).
    ok "300 contains from one client" py_ferry - "$DIR/c.sock" <<'EOF2'
import signal, sys, ferry
signal.alarm(30)  # a daemon that stops answering fails the check, not the whole test's time
with ferry.Client(sys.argv[1]) as c:
    assert all(c.contains("metrics-obj1") for _ in range(300))
EOF2
    sleep 1.2
    fy c contains metrics-obj2 >/dev/null
    ok "c's log is JSON, with requests, transfers and the rate limit" python3 - "$DIR/c.log" <<'EOF2'
import collections, json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
msgs = [r["msg"] for r in recs]
per_second = collections.Counter(r["time"][:19] for r in recs if ": CONTAINS " in r["msg"])
logged = sum(": CONTAINS " in m for m in msgs)
left_out = sum(int(m.split()[0][1:]) for m, after in zip(msgs, msgs[1:])
               if "more records like the next were left out" in m and ": CONTAINS " in after)
ok = (all({"time", "program", "level", "msg"} <= set(r) for r in recs)
      and any(": FETCH " in m for m in msgs)
      and sum(m.startswith("transfer: ") and " in, 2097152 bytes" in m for m in msgs) == 2
      and max(per_second.values()) <= 50 and left_out > 0 and logged + left_out == 301)
print(f"CONTAINS records: {logged} logged, {left_out} left out", file=sys.stderr)
sys.exit(0 if ok else 1)
EOF2
}

test_bad_requests() {
    ok "POST: 405" [ "$(scrape a "$DIR/x" /metrics POST | cut -d' ' -f1)" = 405 ]
    ok "another path: 404" [ "$(scrape a "$DIR/x" /other | cut -d' ' -f1)" = 404 ]
    ok "HEAD: 200 without a body" [ "$(scrape a "$DIR/x" /metrics HEAD | cut -d' ' -f1)" = 200 ] &&
        [ ! -s "$DIR/x" ]
    ok "garbage: 400" python3 - "${MADDR[a]}" <<'EOF'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=5)
s.sendall(b"\xff\xfe garbage\r\n\r\n")
sys.exit(0 if s.recv(100).startswith(b"HTTP/1.1 400 ") else 1)
EOF
    ok "an endless header: 431" python3 - "${MADDR[a]}" <<'EOF'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=5)
s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 8192)
sys.exit(0 if s.recv(100).startswith(b"HTTP/1.1 431 ") else 1)
EOF
}

# Eight silent connections fill the endpoint: a ninth is closed at once, client requests are
# served meanwhile, and once the silent ones go, scrapes work again.
test_connection_bound() {
    scrape a "$DIR/c0.prom" >/dev/null
    ok "past the limit a connection is closed, and the daemon serves" python3 - "${MADDR[a]}" \
        "$FERRY" "$DIR/a.sock" <<'EOF'
import socket, subprocess, sys
host, port = sys.argv[1].rsplit(":", 1)
silent = [socket.create_connection((host, int(port)), timeout=5) for _ in range(8)]
extra = socket.create_connection((host, int(port)), timeout=5)
closed = extra.recv(1) == b""
served = subprocess.run([sys.argv[2], "--socket", sys.argv[3], "stat"], capture_output=True,
                        timeout=10).returncode == 0
for s in silent:
    s.close()
sys.exit(0 if closed and served else 1)
EOF
    eventually "scrapes work once they are gone" valid_scrape a "$DIR/c1.prom"
    ok "refusals are counted" grew "$DIR/c0.prom" "$DIR/c1.prom" ferry_metrics_refused_total 1
}

start_redis || exit 1
start_metrics_node a || exit 1
start_metrics_node b || exit 1
test_refused_before_the_arena
test_scrapes_during_a_fetch
test_stat_for_people
test_verbose_json_logs
test_bad_requests
test_connection_bound
summary
