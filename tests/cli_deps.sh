#!/usr/bin/env bash
# cli_deps.sh - scripts/install-deps.sh, with no network and without installing anything: its
# build set is part of its test set, every member is a package apt knows, every member that
# ships a service is one it quiets, its guard forbids service starts while apt-get runs and puts
# back the policy-rc.d it stood in for, byte for byte (also after a failed, an interrupted or a
# killed run), and a run installs only what is missing, after apt-get update, disables the
# services of the daemons it installed and no others, and does nothing when all is there.
#
# Every run of the script, and every sourcing of it, goes through stubs of apt-get, dpkg-query,
# dpkg, systemctl, update-rc.d and sudo (STUBS), which only log, and of id, which says root; its
# guard goes in DIR (FERRY_DEPS_POLICY_RC_D): neither this script nor an older one that ignored its
# arguments can install a package or touch /usr/sbin here. Only apt-cache and dpkg -L, which read,
# are real.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

SCRIPT=$(cd "$(dirname "$0")/.." && pwd)/scripts/install-deps.sh
STUBS=$DIR/stubs
export STUB_STATE=$DIR/installed # the stubs' installed packages, one a line
export STUB_LOG=$DIR/calls.log   # one line per stub call
POLICY=$DIR/policy-rc.d
MEMBERS=()
ORIGINAL=$DIR/original-policy-rc.d

# The stubs. apt-get install asks the guard as a maintainer script's invoke-rc.d would, logs its
# answer, then (unless STUB_APT=fail or hang) "installs" its arguments and one dependency.
mkdir -p "$STUBS"
cat >"$STUBS/apt-get" <<'EOF'
#!/bin/bash
echo "apt-get $*" >>"$STUB_LOG"
[ "$1" = install ] || exit 0
"$FERRY_DEPS_POLICY_RC_D" redis-server start
echo "policy-rc.d answered $?" >>"$STUB_LOG"
case ${STUB_APT:-} in
fail) exit 100 ;;
hang) echo "$PPID $$" >"$STUB_LOG.hang" && exec sleep 30 ;;
esac
for a in "$@"; do
    case $a in install | -*) ;; *) echo "$a" >>"$STUB_STATE" ;; esac
done
echo stub-dependency >>"$STUB_STATE"
EOF
cat >"$STUBS/dpkg-query" <<'EOF'
#!/bin/bash
echo "dpkg-query $*" >>"$STUB_LOG"
sed 's/^/installed /' "$STUB_STATE"
EOF
# dpkg -L: the files of a daemon (a unit, a template unit, an init script), or a doc directory.
cat >"$STUBS/dpkg" <<'EOF'
#!/bin/bash
case $2 in
redis-server | redis-sentinel | prometheus)
    printf '%s\n' /lib/systemd/system/"$2".service /lib/systemd/system/"$2"@.service /etc/init.d/"$2" ;;
*) echo /usr/share/doc/"$2" ;;
esac
EOF
for cmd in systemctl update-rc.d; do
    # shellcheck disable=SC2016 # the stubs' own expansions
    printf '#!/bin/bash\necho "%s $*" >>"$STUB_LOG"\n' "$cmd" >"$STUBS/$cmd"
done
# shellcheck disable=SC2016
printf '#!/bin/bash\necho "sudo $*" >>"$STUB_LOG"\nexec "$@"\n' >"$STUBS/sudo"
# id: root, for the script, whoever runs the test (its guard is in DIR).
printf '#!/bin/sh\necho 0\n' >"$STUBS/id"
chmod +x "$STUBS"/*
: >"$STUB_STATE"
: >"$STUB_LOG"

# deps ARGS...: the script, under the stubs.
deps() { PATH=$STUBS:$PATH FERRY_DEPS_POLICY_RC_D=$POLICY FERRY_DEPS_LOCK=$DIR/lock sh "$SCRIPT" "$@"; }

# with_functions CMD...: CMD in a subshell that sourced the script for its functions, under the
# stubs; the subshell ends there, as a run killed during CMD would.
with_functions() {
    (
        export PATH=$STUBS:$PATH FERRY_DEPS_POLICY_RC_D=$POLICY FERRY_DEPS_LOCK=$DIR/lock
        # shellcheck disable=SC2034 # read by the script
        FERRY_DEPS_FUNCTIONS=1
        # shellcheck source=../scripts/install-deps.sh
        . "$SCRIPT"
        "$@"
    )
}

# ask_guarded: guards, asks policy-rc.d to start a service, unguards; prints the answer.
ask_guarded() {
    guard_services || return 1
    "$POLICY" redis-server start
    echo "while guarded: $?"
    unguard_services
}

# an_original: a policy-rc.d of the administrator's at POLICY (mode 750), its copy at ORIGINAL.
an_original() {
    printf '#!/bin/sh\n# the administrator'"'"'s own: everything may start\nexit 0\n' >"$POLICY"
    chmod 750 "$POLICY"
    cp -p "$POLICY" "$ORIGINAL"
}

# original_is_back WHEN: checks that POLICY is ORIGINAL again, mode included, and alone.
original_is_back() {
    ok "$1: the original policy-rc.d is back byte for byte" cmp -s "$ORIGINAL" "$POLICY"
    ok "$1: with its mode" test "$(stat -c %a "$POLICY")" = 750
    ok "$1: nothing left beside it" test -z "$(compgen -G "$POLICY?*")"
}

# The sets (MEMBERS: the test set's), and what --print may not do.
test_sets() {
    run "--print build" 0 deps --print build && cp "$OUT" "$DIR/build.set"
    run "--print test" 0 deps --print test && cp "$OUT" "$DIR/test.set"
    mapfile -t MEMBERS < <(sort -u "$DIR/test.set")
    ok "the build set is not empty" test -s "$DIR/build.set"
    ok "the build set is part of the test set" \
        test -z "$(comm -23 <(sort -u "$DIR/build.set") <(sort -u "$DIR/test.set"))"
    ok "the test set is larger" test "$(sort -u "$DIR/test.set" | wc -l)" -gt "$(sort -u "$DIR/build.set" | wc -l)"
    ok "--print asked nothing of apt-get or dpkg" test ! -s "$STUB_LOG"
    run "an unknown set is refused" 2 deps --print everything && pass
    run "no set is refused" 2 deps && pass
}

# apt knows each member: in its lists (after apt-get update), or installed. A virtual package, or
# one that only another Debian release has, prints no Package line of its own. (One apt-cache for
# all: each call reads the whole cache.)
test_members_are_packages() {
    local p known
    known=$(apt-cache show --no-all-versions "${MEMBERS[@]}" 2>/dev/null |
        sed -n 's/^Package: //p')
    for p in "${MEMBERS[@]}"; do
        if grep -qx -- "$p" <<<"$known"; then
            pass
        else
            fail "$p: not a package apt knows (no such package, or apt-get update never ran)"
        fi
    done
}

# Each member that ships a unit or an init script (dpkg -L, where installed) is a daemon the
# script quiets (SERVICE_PKGS), or procps, whose init script applies sysctl.conf at boot and runs
# nothing.
test_service_members_are_quieted() {
    local p quiet files checked=0
    # shellcheck disable=SC2016 # expanded in the subshell that sourced the script
    quiet=$(with_functions eval 'echo "$SERVICE_PKGS"')
    ok "the script names the daemons it quiets" test -n "$quiet"
    for p in "${MEMBERS[@]}"; do
        files=$(dpkg -L "$p" 2>/dev/null) || continue
        checked=$((checked + 1))
        grep -Eq '^((/usr)?/lib/systemd/system/[^/]+\.service|/etc/init\.d/.+)$' <<<"$files" || continue
        case " $quiet procps " in
        *" $p "*) pass ;;
        *) fail "$p ships a service the script does not quiet (SERVICE_PKGS)" ;;
        esac
    done
    ok "members' files were read ($checked installed)" test "$checked" -gt 0
}

# The guard, by the functions alone: forbids starts while it stands, and then leaves what was
# there, a policy-rc.d of the administrator's or none; a run killed while guarded is undone by the
# next.
test_guard() {
    an_original
    run "guard with an original policy-rc.d" 0 with_functions ask_guarded &&
        ok "while guarded, policy-rc.d forbids a start (101)" grep -qx "while guarded: 101" "$OUT"
    original_is_back "after the guard"

    rm -f "$POLICY"
    run "guard with none" 0 with_functions ask_guarded &&
        ok "while guarded, policy-rc.d forbids a start (101)" grep -qx "while guarded: 101" "$OUT"
    ok "after the guard there is none again" test -z "$(compgen -G "$POLICY*")"

    an_original
    run "a run killed while guarded" 0 with_functions guard_services
    ok "its guard stands" test "$("$POLICY" redis-server start; echo $?)" = 101
    ok "it forbids only the daemons it installs: others go to the original (0)" \
        test "$("$POLICY" --quiet ssh restart; echo $?)" = 0
    ok "and a unit's name counts as its daemon's" test "$("$POLICY" prometheus.service start; echo $?)" = 101
    run "the next run" 0 with_functions ask_guarded &&
        ok "it guards too" grep -qx "while guarded: 101" "$OUT"
    original_is_back "after a killed run and the next"
}

# Whole runs under the stubs, on a machine where nothing (then something) is installed.
test_runs() {
    local st line_update line_install hang
    : >"$STUB_STATE"
    : >"$STUB_LOG"
    an_original
    run "the build set on a bare machine" 0 deps build
    line_update=$(grep -n -m1 '^apt-get update' "$STUB_LOG" | cut -d: -f1)
    line_install=$(grep -n -m1 '^apt-get install' "$STUB_LOG" | cut -d: -f1)
    ok "apt-get update, then apt-get install" test "${line_update:-9999}" -lt "${line_install:-0}"
    ok "it installs the build set" \
        test -z "$(comm -23 <(sort -u "$DIR/build.set") <(sort -u "$STUB_STATE"))"
    ok "and nothing of the test set's own" \
        test -z "$(comm -12 <(comm -13 <(sort -u "$DIR/build.set") <(sort -u "$DIR/test.set")) <(sort -u "$STUB_STATE"))"
    ok "under the guard (policy-rc.d answered 101)" grep -qx "policy-rc.d answered 101" "$STUB_LOG"
    ok "redis-server's services are disabled" grep -Eqx \
        'systemctl disable --now --quiet redis-server\.service|update-rc\.d redis-server disable' "$STUB_LOG"
    ok "no other package's are" test -z "$(grep -E '^(systemctl|update-rc\.d)' "$STUB_LOG" | grep -v redis-server)"
    original_is_back "after a run"
    ok "its last line names what it installed and the services left disabled" \
        grep -Eq '^install-deps: installed .*redis-server.* \(and 1 packages they need\); the services of redis-server are stopped and disabled' "$OUT"

    : >"$STUB_LOG"
    run "the build set when all is there" 0 deps build
    ok "it prints nothing" test ! -s "$OUT" -a ! -s "$ERR"
    ok "it asks nothing of apt-get or sudo" test -z "$(grep -E '^(apt-get|sudo|systemctl|update-rc)' "$STUB_LOG")"

    # redis-server already there (the user's, enabled as they chose): left alone.
    echo redis-server >"$STUB_STATE"
    : >"$STUB_LOG"
    run "the test set with redis-server already there" 0 deps test
    ok "redis-server is not installed again" test -z "$(grep '^apt-get install.* redis-server\b' "$STUB_LOG")"
    ok "nor its services disabled" test -z "$(grep -E '^(systemctl|update-rc\.d).*redis-server' "$STUB_LOG")"
    ok "the daemons it installed are quiet" grep -Eqx \
        'systemctl disable --now --quiet prometheus\.service|update-rc\.d prometheus disable' "$STUB_LOG"
    original_is_back "after a run with redis-server there"

    : >"$STUB_STATE"
    export STUB_APT=fail
    run "a failing apt-get install fails the run with its status" 100 deps build && pass
    original_is_back "after a failed install"

    rm -f "$STUB_LOG.hang"
    STUB_APT=hang
    deps build >"$OUT" 2>"$ERR" &
    for ((st = 0; st < POLLS; st++)); do
        [ -s "$STUB_LOG.hang" ] && break
        sleep 0.05
    done
    # As ^C would: the signal to the script and to apt-get, which it waits for.
    read -r -a hang <"$STUB_LOG.hang" 2>/dev/null || hang=()
    [ "${#hang[@]}" -eq 2 ] && kill -TERM "${hang[@]}"
    wait $!
    st=$?
    unset STUB_APT
    ok "an interrupted run ends with 143 (it was $st)" test "$st" -eq 143
    original_is_back "after an interrupted install"
}

test_sets
test_members_are_packages
test_service_members_are_quieted
test_guard
test_runs
summary
