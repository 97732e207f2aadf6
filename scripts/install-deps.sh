#!/bin/sh
# shellcheck disable=SC2086,SC2046,SC2016 # lists of packages and units are split into words on purpose
# install-deps.sh - installs, from Debian's packages, the members of one set that are not on
# this machine yet. Does nothing, and asks for nothing (no sudo, no apt-get), when all are.
#
#   sh scripts/install-deps.sh build        what make build, make install and make demo need
#   sh scripts/install-deps.sh test         build's and what make test (the suite, lint, fuzz)
#                                           and make bench need: make deps
#   sh scripts/install-deps.sh --print SET  the set, one package a line; installs nothing
#   FERRY_DEPS_FUNCTIONS=1 . scripts/install-deps.sh
#                                           defines the functions and returns (tests/cli_deps.sh)
#
# It starts no service, and leaves none it installed enabled. Some members (SERVICE_PKGS) are
# daemons that Debian starts, and enables for every boot, when they are installed: on a host with
# systemd, redis-server would take port 6379, redis-sentinel 26379 and prometheus 9090 behind the
# user's back (and the user's own `redis-server --port 6379 --daemonize yes` would then fail to
# bind, out of sight). So apt-get runs under a policy-rc.d that forbids those daemons' starts
# (guard_services; any other service's action is left to the administrator's policy-rc.d, if
# any), and afterwards the services of those daemons that this run installed are disabled (and
# stopped), even when the install failed or was interrupted; ones that were already here are
# left as their owner set them. Runs take a lock (flock), so that two at once (make -j demo test)
# never guard over each other; a guard left by a run that was killed outright (SIGKILL, a
# reboot) is undone by the next run, even one with nothing to install.
#
# FERRY_DEPS_POLICY_RC_D: where the guard goes instead of /usr/sbin/policy-rc.d, and
# FERRY_DEPS_LOCK the lock file instead of /run/lock/ferry-install-deps (for the test).

# The build set. CMakeLists.txt: a C compiler and make (build-essential), cmake with Ninja
# (ninja-build: the Makefile's generator for new build directories), pkg-config and
# its REQUIRED modules libxxhash, libcrypto (libssl-dev), hiredis, libfabric; Python3's
# Development.Module (python3-dev) for python/. tests/CMakeLists.txt's REQUIRED cmocka: make build
# configures tests/ too (CTest's BUILD_TESTING is on by default). make demo: Debian's python3 with
# NumPy (python3-numpy), and redis-server (which brings redis-cli) as the two nodes' directory:
# a service, but never started here and left disabled, so it costs the user nothing.
BUILD_PKGS="build-essential cmake ninja-build pkg-config libxxhash-dev libssl-dev libhiredis-dev
libfabric-dev libcmocka-dev python3-dev python3-numpy redis-server"
# What the test set adds. make test: clang-format (format-check), clang-tidy and cppcheck
# (scripts/lint.sh), clang with its libFuzzer runtime (libclang-rt-14-dev: the fuzz build), the
# cluster and Python suites (redis-sentinel, prometheus with promtool, python3-pytest,
# python3-setuptools, python3-wheel and python3-venv for test_install.py, procps's pgrep and pkill,
# libfabric-bin's fi_info), openmpi for the mpi suite; make bench: gnuplot-nox (the plots),
# libmimalloc-dev (alloc-bench's comparison), python3-redis (ferry-bench python's Redis baseline);
# python3-distributed (with python3-dask: ferry.dask, test_dask.py, ferry-bench dask) and
# python3-torch (test_dlpack.py's PyTorch consumer).
TEST_EXTRA_PKGS="clang clang-format clang-tidy cppcheck libclang-rt-14-dev redis-sentinel
prometheus gnuplot-nox libmimalloc-dev procps libfabric-bin openmpi-bin libopenmpi-dev
python3-pytest python3-setuptools python3-wheel python3-venv python3-redis python3-distributed
python3-dask python3-torch"
# The members that are daemons started on install (checked with dpkg -L on Debian 12: each ships
# a systemd unit and an init script that run a server). procps ships /etc/init.d/procps, which
# applies sysctl.conf at boot and runs nothing: not one of them.
SERVICE_PKGS="redis-server redis-sentinel prometheus"

POLICY_RC_D=${FERRY_DEPS_POLICY_RC_D:-/usr/sbin/policy-rc.d}
LOCK=${FERRY_DEPS_LOCK:-/run/lock/ferry-install-deps}
POLICY_SAVED=$POLICY_RC_D.ferry-saved
# The guard's second line: how a later run knows one that was killed while guarded.
POLICY_MARK="# ferry scripts/install-deps.sh: no service starts while it installs packages"
guarded=""

# set_packages SET: sets pkgs to the set's packages; false for an unknown set.
set_packages() {
    case $1 in
    build) pkgs=$BUILD_PKGS ;;
    test) pkgs="$BUILD_PKGS $TEST_EXTRA_PKGS" ;;
    *) return 1 ;;
    esac
}

# installed_packages: the names of the installed packages, one a line, sorted.
installed_packages() {
    dpkg-query -W -f='${db:Status-Status} ${Package}\n' 2>/dev/null | sed -n 's/^installed //p' |
        sort -u
}

# pick in|out LIST WORD...: prints, on one line, the WORDs that are (in) or are not (out) words of
# LIST (words parted by spaces or lines).
pick() {
    pick_want=$1
    pick_list=" $(printf '%s ' $2)"
    pick_out=""
    shift 2
    for pick_word; do
        case $pick_list in *" $pick_word "*) pick_is=in ;; *) pick_is=out ;; esac
        [ "$pick_is" != "$pick_want" ] || pick_out="$pick_out${pick_out:+ }$pick_word"
    done
    echo "$pick_out"
}

# put_back_policy: removes the guard (ours only: a file that is not is left) and puts the
# policy-rc.d it stood in for back, if any.
put_back_policy() {
    if [ -e "$POLICY_RC_D" ] || [ -L "$POLICY_RC_D" ]; then
        grep -qsx "$POLICY_MARK" "$POLICY_RC_D" || return 0
    fi
    rm -f "$POLICY_RC_D" || return 1
    if [ -e "$POLICY_SAVED" ] || [ -L "$POLICY_SAVED" ]; then
        mv "$POLICY_SAVED" "$POLICY_RC_D" || return 1
    fi
}

# guard_services: until unguard_services, no package's maintainer script starts a service:
# invoke-rc.d and deb-systemd-invoke ask /usr/sbin/policy-rc.d first, and its exit status 101
# means "action forbidden" (Debian policy; init-system-helpers' README.policy-rc.d). A policy-rc.d
# already there is moved aside (never overwritten) and comes back byte for byte.
guard_services() {
    # A run killed while guarded (SIGKILL runs no trap) left its guard, and the original beside.
    if grep -qsx "$POLICY_MARK" "$POLICY_RC_D"; then
        put_back_policy || return 1
    fi
    if [ -e "$POLICY_SAVED" ] || [ -L "$POLICY_SAVED" ]; then
        echo "install-deps: $POLICY_SAVED is in the way: move it, and run again" >&2
        return 1
    fi
    if [ -e "$POLICY_RC_D" ] || [ -L "$POLICY_RC_D" ]; then
        mv "$POLICY_RC_D" "$POLICY_SAVED" || return 1
    fi
    guarded=1
    write_guard >"$POLICY_RC_D" && chmod 755 "$POLICY_RC_D"
}

# write_guard: the guard's text. policy-rc.d is called as [--options] ID ACTIONS [...]: the ID
# of an init script, or a unit name from deb-systemd-invoke. SERVICE_PKGS' daemons are
# forbidden (101); anything else goes to the administrator's policy-rc.d, moved aside, or is
# allowed as without one (104).
write_guard() {
    printf '#!/bin/sh\n%s\n' "$POLICY_MARK"
    printf 'for a; do case $a in --*) ;; *) id=${a%%.service}; break ;; esac; done\n'
    printf 'case " %s " in *" ${id:-} "*) exit 101 ;; esac\n' "$SERVICE_PKGS"
    printf '[ -x "%s" ] && exec "%s" "$@"\nexit 104\n' "$POLICY_SAVED" "$POLICY_SAVED"
}

# repair_stale: a guard that a run killed outright left (the lock shows no run holds it) is
# undone; as a user, only said.
repair_stale() {
    grep -qsx "$POLICY_MARK" "$POLICY_RC_D" || return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: $POLICY_RC_D is a guard left by a run that was killed: run this as" \
            "root to put the original back" >&2
        return 0
    fi
    lock
    ! grep -qsx "$POLICY_MARK" "$POLICY_RC_D" || put_back_policy
}

# lock: waits for any other run, until this one exits (the descriptor goes with the process).
lock() {
    exec 9>>"$LOCK" && flock 9
}

# unguard_services: undoes guard_services, if it ran; safe to call again.
unguard_services() {
    [ -n "$guarded" ] || return 0
    guarded=""
    put_back_policy
}

# disable_services PKG...: the services of each PKG (its systemd units, its init scripts) stopped
# and disabled: where systemd runs, by systemctl (which also disables the init script); elsewhere
# by update-rc.d, as the init there reads the rc.d links.
disable_services() {
    for p; do
        files=$(dpkg -L "$p") || return 1
        if [ -d /run/systemd/system ]; then
            units=$(printf '%s\n' "$files" |
                sed -n 's|^\(/usr\)\{0,1\}/lib/systemd/system/\([^/@]*\.service\)$|\2|p')
            [ -z "$units" ] || systemctl disable --now --quiet $units || return 1
        else
            for s in $(printf '%s\n' "$files" | sed -n 's|^/etc/init\.d/\([^/]*\)$|\1|p'); do
                update-rc.d "$s" disable >/dev/null || return 1
            done
        fi
    done
}

[ "${FERRY_DEPS_FUNCTIONS:-}" = 1 ] && return 0

set -eu
usage() {
    echo "usage: install-deps.sh build|test, or install-deps.sh --print build|test" >&2
    exit 2
}
if [ "${1:-}" = --print ]; then
    if [ $# -ne 2 ] || ! set_packages "$2"; then usage; fi
    printf '%s\n' $pkgs
    exit 0
fi
if [ $# -ne 1 ] || ! set_packages "$1"; then usage; fi

repair_stale
before=$(installed_packages)
missing=$(pick out "$before" $pkgs)
[ -z "$missing" ] && exit 0
# Root from here on (the guard is a file under /usr/sbin): again as root through sudo, once.
if [ "$(id -u)" -ne 0 ]; then
    [ -z "${FERRY_DEPS_SUDO:-}" ] || { echo "install-deps: sudo did not make this root" >&2; exit 1; }
    FERRY_DEPS_SUDO=1 exec sudo sh "$0" "$@"
fi
lock
# Another run may have installed some meanwhile.
before=$(installed_packages)
missing=$(pick out "$before" $pkgs)
[ -z "$missing" ] && exit 0
echo "install-deps: installing $missing"
apt-get update -qq
# quiet_new: the daemons this run installed, stopped and disabled; what the EXIT trap does too,
# so that a failed or interrupted install leaves none enabled.
quiet_new() {
    new=$(pick out "$before" $(installed_packages))
    quiet=$(pick in "$new" $SERVICE_PKGS)
    disable_services $quiet
}
trap 'unguard_services; quiet_new || true' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 131' QUIT
trap 'exit 141' PIPE
trap 'exit 143' TERM
guard_services
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
unguard_services
quiet_new
trap - EXIT
extra=$(($(echo "$new" | wc -w) - $(echo "$missing" | wc -w)))
echo "install-deps: installed $missing$([ "$extra" -le 0 ] || echo " (and $extra packages they need)")$(
    [ -z "$quiet" ] || echo "; the services of $(echo "$quiet" | sed 's/ /, /g') are stopped and" \
        "disabled (systemctl enable --now NAME runs one)")"
