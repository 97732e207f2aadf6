#!/usr/bin/env bash
# with-hogs.sh N CMD...: runs CMD beside N processes that each keep a core busy (make check-load:
# the suite on a busy machine), and stops them when CMD ends, however it ends. Each hog also
# ends by itself after HOG_LIMIT seconds (default 3600), should this script be killed first.
# Exits with CMD's status.
set -u
[ $# -ge 2 ] && [ "$1" -ge 0 ] 2>/dev/null || { echo "usage: with-hogs.sh N CMD..." >&2; exit 2; }
n=$1
shift
hogs=()
stop_hogs() {
    [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null
    wait "${hogs[@]}" 2>/dev/null
    hogs=()
}
trap stop_hogs EXIT
for ((i = 0; i < n; i++)); do
    timeout "${HOG_LIMIT:-3600}" sh -c 'while :; do :; done' &
    hogs+=($!)
done
echo "with-hogs.sh: $n busy processes beside: $*"
# In the background, so that a signal to this script is handled at once (bash runs a trap only
# after its foreground command), and passed on to CMD.
"$@" &
cmd=$!
trap 'kill "$cmd" 2>/dev/null; wait "$cmd"; exit 130' INT TERM
wait "$cmd"
