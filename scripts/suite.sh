#!/usr/bin/env bash
# The whole suite, part by part (make targets given as arguments, in order), each timed; at the
# end, or at the first part that fails, a table of the parts' times. Exits with the failing
# part's status.
set -uo pipefail
names=()
secs=()
status=0
start=$(date +%s)
for part in "$@"; do
    t0=$(date +%s)
    make --no-print-directory "$part"
    status=$?
    names+=("$part")
    secs+=($(($(date +%s) - t0)))
    [ "$status" -eq 0 ] || break
done
echo
echo "suite: time per part"
for i in "${!names[@]}"; do
    printf '  %-14s %4d s\n' "${names[$i]}" "${secs[$i]}"
done
total=$(($(date +%s) - start))
printf '  %-14s %4d s (%d min %02d s)%s\n' total "$total" $((total / 60)) $((total % 60)) \
    "$([ "$status" -eq 0 ] || echo ", stopped at ${names[-1]}: FAILED")"
exit "$status"
