#!/usr/bin/env bash
# cli_bench.sh - ferry-bench's interleaved rounds, end to end against real daemons: the remote
# suite over the tcp transport (two ferryd, a redis-server, raw TCP) with --rounds, --repeat
# and --seed, and the local suite; every figure is a median over the rounds asked for with its
# spread, every ratio lies within the range of its rounds, --repeat shows each ratio of every
# comparison, and bad counts are refused. It checks the shape of the figures, never their
# values: speed is for the benchmark to print.
#
# Needs FERRY_BIN_DIR (ferryd and ferry-bench), redis-server and python3.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

BENCH_LIMIT=300
bench() { timeout --kill-after=10 "$BENCH_LIMIT" "$BIN/ferry-bench" "$@"; }
json_ok() { pyjson "$DIR/bench.json" "$1"; }

test_refused_counts() {
    run "--rounds 0" 1 bench local --rounds 0 && ok "it names --rounds" grep -q -- "--rounds" "$ERR"
    run "--repeat 21" 1 bench local --repeat 21 && ok "it names --repeat" grep -q -- "--repeat" "$ERR"
    run "--seed x" 1 bench local --seed x && pass
    run "--help names the rounds" 0 bench remote --help && ok "--rounds in the usage" \
        grep -q -- "--rounds N" "$OUT"
}

test_remote_rounds() {
    run "remote --rounds 3 --repeat 2 --json" 0 bench remote --transport tcp --sizes 1K,64K \
        --seconds 0.02 --rounds 3 --repeat 2 --seed 7 --json || return
    pass
    cp "$OUT" "$DIR/bench.json"
    ok "the document names its rounds and seed" json_ok "j['rounds'] == 3 and j['seed'] == 7"
    # noisy is decided before the spread is rounded to 4 places: not checked right at 20 %.
    ok "every figure is of 3 rounds, with its spread" json_ok "all(r['rounds'] == 3 and
        r['iqr_relative'] >= 0 and (abs(r['iqr_relative'] - 0.2) < 1e-3 or
        r['noisy'] == (r['iqr_relative'] > 0.2)) for r in j['results'])"
    ok "raw TCP is measured as a stream and as request/response" json_ok "({(r['op'], r['size'])
        for r in j['results'] if r['system'] == 'raw-tcp' and r['mib_per_sec'] > 0} ==
        {('stream', 1024), ('stream', 65536), ('reqresp', 1024), ('reqresp', 65536)})"
    ok "fetch is compared with the request/response at 64K" json_ok "any(q['name'] ==
        'fetch_over_raw_tcp_reqresp_mibps_64K' and q['value'] > 0 for q in j['ratios'])"
    ok "every measured ratio lies within the range of its rounds" json_ok "all(q['value'] is None
        or q['min'] <= q['value'] <= q['max'] for q in j['ratios'])"
    ok "ratios of two figures are taken in each of the 3 rounds" json_ok "all(q['rounds'] == 3
        for q in j['ratios'] if q['name'] != 'new_connections_steady_state')"
    ok "the stream target below 16M is shown as not measured" json_ok "any(q['name'] ==
        'fetch_over_raw_tcp_stream_mibps_16M' and q['value'] is None for q in j['ratios'])"
    ok "--repeat 2 shows every ratio of both comparisons" json_ok "(len(j['stability']) ==
        len(j['ratios']) and all(s['comparisons'] == 2 and len(s['values']) == 2
        for s in j['stability']))"
    ok "the last comparison's ratios are the ones reported" json_ok "all(s['values'][1] ==
        (None if q['value'] is None else round(q['value'], 4))
        for s, q in zip(j['stability'], j['ratios']))"
    ok "the table says how steady each ratio was" grep -q '^stability over 2 comparisons' "$ERR"
    ok "progress names the rounds" grep -q 'comparison 2 of 2, round 3 of 3' "$ERR"
}

test_local_rounds() {
    run "local --rounds 2" 0 bench local --sizes 1K --seconds 0.02 --rounds 2 || return
    pass
    ok "the table says the rounds were interleaved" grep -q '^2 interleaved rounds of 0.02 s' "$OUT"
    ok "ferry get has a row with its spread" grep -Eq '^ferry +get +1K .* [0-9]+% ' "$OUT"
    ok "ratios show their range" grep -Eq 'ops/s at 1K: ferry get / redis get +[0-9.]+ \([0-9.]+-[0-9.]+\)' "$OUT"
}

test_refused_counts
test_remote_rounds
test_local_rounds
summary
