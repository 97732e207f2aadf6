#!/bin/sh
# lint.sh BUILD_DIR - the static checks that must run clean over src/: cppcheck,
# clang-tidy's analyzer checks (BUILD_DIR must hold compile_commands.json: configure it with
# -DCMAKE_EXPORT_COMPILE_COMMANDS=ON). Exits non-zero, naming the tool, on any finding.
#
# A finding the tool is provably wrong about is suppressed where it stands, with the reason
# (cppcheck-suppress, NOLINT). Left out as a whole:
#   clang-analyzer-security.insecureAPI.DeprecatedOrUnsafeBufferHandling: it flags every
#   memcpy, memset and snprintf and asks for C11 Annex K's *_s functions, which glibc does not
#   have (LLVM issue 64027; later LLVMs report it only where Annex K exists).
# cppcheck gets the definitions the build gives every file (CMakeLists.txt's
# add_compile_definitions): without FERRY_VERSION_STRING, version.c's #error fires.
set -u

[ $# -eq 1 ] || { echo "usage: lint.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
root=$(cd "$(dirname "$0")/.." && pwd)
status=0

cd "$root" || exit 2
if [ ! -f "$build/compile_commands.json" ]; then
    echo "lint.sh: $build/compile_commands.json missing (cmake -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)" >&2
    exit 2
fi

out=$(cppcheck --enable=warning,performance,portability --inline-suppr -q --error-exitcode=1 \
    -D_GNU_SOURCE -DFERRY_VERSION_STRING='"lint"' -I include -I src src/ 2>&1)
if [ $? -ne 0 ] || [ -n "$out" ]; then
    printf '%s\n' "$out"
    echo "lint.sh: cppcheck found problems" >&2
    status=1
fi

# As many at a time as the machine has cores, a few files per run so that both stay busy.
out=$(find src -name '*.c' | sort | xargs -P "$(nproc)" -n 4 clang-tidy -quiet -p "$build" \
    -checks='-*,clang-analyzer-*,-clang-analyzer-security.insecureAPI.DeprecatedOrUnsafeBufferHandling' \
    --warnings-as-errors='*' 2>&1)
if [ $? -ne 0 ] || printf '%s\n' "$out" | grep -q 'warning:\|error:'; then
    printf '%s\n' "$out" | grep -v '^[0-9]* warnings\? generated\.$'
    echo "lint.sh: clang-tidy found problems" >&2
    status=1
fi
# Files of one folder calling each other both ways: none beyond the known ones.
python3 scripts/file-calls.py "$build" || status=1
exit $status
