#!/usr/bin/env bash
# with-hogs.sh N CMD...: runs CMD beside N processes that each keep a core busy (make check-load:
# the suite on a busy machine), and stops them when CMD ends, however it ends. A hog also ends
# by itself once this script is gone (it looks every few million steps), should this script be
# killed first. Exits with CMD's status; on SIGINT or SIGTERM, passes the signal to CMD's whole
# process group and exits with 128 + its number.
set -u
[ $# -ge 2 ] && [ "$1" -ge 0 ] 2>/dev/null || {
    echo "usage: with-hogs.sh N CMD..." >&2
    exit 2
}
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
    sh -c 'while kill -0 "$1" 2>/dev/null; do i=0; while [ $i -lt 2000000 ]; do i=$((i + 1)); done; done' \
        hog $$ &
    hogs+=($!)
done
echo "with-hogs.sh: $n busy processes beside: $*"
# In the background, so that a signal to this script is handled at once (bash runs a trap only
# after its foreground command ends), and as a job of its own (set -m): a process group with
# SIGINT not ignored, to which the signal is passed.
set -m
"$@" &
cmd=$!
set +m
on_signal() {
    kill -s "$1" -- -"$cmd" 2>/dev/null
    wait "$cmd"
    exit $((128 + $2))
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
wait "$cmd"
