#!/bin/bash
# metrics.sh [BIN_DIR] [ROUNDS] [INTERVAL_MS]: what serving /metrics costs the clients of a
# ferryd. In each round, ferry-bench local measures get and put of 1 KiB objects (p50) once on
# an idle daemon and once while a scraper asks for /metrics every INTERVAL_MS (default 100:
# 150 times Prometheus' default of 15 s), in alternating order; then 200 back-to-back scrapes
# give a scrape's duration and size. Prints each round, the medians and the ratios.
# Example: bench/metrics.sh build/bin 5 100
set -u
BIN=${1:-build/bin}
ROUNDS=${2:-5}
INTERVAL_MS=${3:-100}
DIR=$(mktemp -d /tmp/ferry-metrics.XXXXXX) || exit 1
PIDS=()
cleanup() {
    kill "${PIDS[@]}" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT

"$BIN/ferryd" --socket "$DIR/f.sock" --memory 1G --metrics 127.0.0.1:0 >"$DIR/ferryd.log" 2>&1 &
PIDS+=($!)
for ((i = 0; i < 100; i++)); do
    ADDR=$(sed -n 's|.*metrics: http://\([^/]*\)/metrics.*|\1|p' "$DIR/ferryd.log")
    [ -n "$ADDR" ] && "$BIN/ferry" --socket "$DIR/f.sock" stat >/dev/null 2>&1 && break
    sleep 0.1
done
[ -n "$ADDR" ] || { echo "metrics.sh: ferryd did not start" >&2; exit 1; }

# scrape N PAUSE_MS: N scrapes, PAUSE_MS apart; prints "median_ms bytes". Run in a subshell
# (exec: killing it stops the scraper).
scrape() {
    exec python3 - "$ADDR" "$1" "$2" <<'PY'
import http.client, statistics, sys, time
host, port = sys.argv[1].rsplit(":", 1)
n, pause = int(sys.argv[2]), int(sys.argv[3]) / 1000
times, size = [], 0
for _ in range(n):
    t = time.monotonic()
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    c.request("GET", "/metrics")
    size = len(c.getresponse().read())
    c.close()
    times.append((time.monotonic() - t) * 1000)
    time.sleep(pause)
print(f"{statistics.median(times):.3f} {size}")
PY
}

# p50 OP: ferry's p50 in us for OP at 1 KiB, from one ferry-bench local run.
bench_p50() {
    "$BIN/ferry-bench" local --socket "$DIR/f.sock" --sizes 1K --seconds 0.5 --json 2>/dev/null |
        python3 -c 'import json, sys
r = json.load(sys.stdin)["results"]
print(" ".join(str(next(x["p50_us"] for x in r if x["system"] == "ferry" and x["op"] == op))
               for op in ("get", "put")))'
}

printf '%-6s %14s %14s %14s %14s\n' round "get idle" "get scraped" "put idle" "put scraped"
IDLE_GET=() SCR_GET=() IDLE_PUT=() SCR_PUT=()
for ((r = 1; r <= ROUNDS; r++)); do
    for mode in $([ $((r % 2)) = 1 ] && echo "idle scraped" || echo "scraped idle"); do
        if [ "$mode" = scraped ]; then
            scrape 1000000 "$INTERVAL_MS" >/dev/null &
            SCRAPER=$!
        fi
        read -r g p < <(bench_p50)
        if [ "$mode" = scraped ]; then
            kill "$SCRAPER" 2>/dev/null
            wait "$SCRAPER" 2>/dev/null
            SCR_GET+=("$g") SCR_PUT+=("$p")
        else
            IDLE_GET+=("$g") IDLE_PUT+=("$p")
        fi
    done
    printf '%-6s %14s %14s %14s %14s\n' "$r" "${IDLE_GET[-1]}" "${SCR_GET[-1]}" \
        "${IDLE_PUT[-1]}" "${SCR_PUT[-1]}"
done
python3 - "${IDLE_GET[*]}" "${SCR_GET[*]}" "${IDLE_PUT[*]}" "${SCR_PUT[*]}" <<'PY'
import statistics as s, sys
ig, sg, ip, sp = ([float(x) for x in a.split()] for a in sys.argv[1:5])
print(f"median  get p50 {s.median(ig):.2f} us idle, {s.median(sg):.2f} us scraped "
      f"(ratio {s.median(sg) / s.median(ig):.3f}); put p50 {s.median(ip):.2f} us idle, "
      f"{s.median(sp):.2f} us scraped (ratio {s.median(sp) / s.median(ip):.3f})")
PY
read -r ms bytes < <(scrape 200 0)
echo "a scrape: median $ms ms for $bytes bytes (200 back to back, connect to close)"
