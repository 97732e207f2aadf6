#!/bin/bash
# cli_install.sh - `cmake --install` of this build into a DESTDIR, checked as an operator and a
# C programmer would use it: the programs say their version, a program built with pkg-config
# against the installed libferry runs against the installed ferryd, the systemd units name the
# installed daemon, and ferryd tells a service manager (NOTIFY_SOCKET) READY=1 once it serves,
# STOPPING=1 on SIGTERM and EXTEND_TIMEOUT_USEC while it persists its objects at exit. No
# systemd is needed: the test reads the datagrams itself. The service as installed: the user
# and group ferry it runs as (sysusers.d; systemd-sysusers runs on an install without DESTDIR
# alone), a socket its group may use (checked as root with stand-in users: nobody/nogroup for
# ferry), the man page naming the installed paths.
# shellcheck source=tests/lib_cli.sh
source "$(dirname "$0")/lib_cli.sh"

BUILD=$(dirname "$BIN")
DEST=$DIR/root
PREFIX=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$BUILD/CMakeCache.txt")
LIBDIR=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$BUILD/CMakeCache.txt")
ROOT=$DEST$PREFIX
UNIT=$ROOT/lib/systemd/system/ferryd.service
TEMPLATE=$ROOT/lib/systemd/system/ferryd@.service
SYSUSERS=$ROOT/lib/sysusers.d/ferry.conf

# A stand-in systemd-sysusers first on PATH, which notes how it was called in $DIR/sysusers.calls.
SHIM=$DIR/shim
mkdir -p "$SHIM"
printf '#!/bin/sh\necho "$@" >>"%s/sysusers.calls"\n' "$DIR" >"$SHIM/systemd-sysusers"
chmod +x "$SHIM/systemd-sysusers"

test_install() {
    run "install into DESTDIR" 0 env PATH="$SHIM:$PATH" DESTDIR="$DEST" cmake --install "$BUILD" && pass
    ok "an install into a DESTDIR runs no systemd-sysusers" test ! -e "$DIR/sysusers.calls"
    local f
    for f in bin/ferryd bin/ferry bin/ferry-bench include/ferry.h "$LIBDIR/libferry.a" \
        "$LIBDIR/pkgconfig/ferry.pc" lib/systemd/system/ferryd.service \
        lib/systemd/system/ferryd@.service etc/ferry/ferryd.conf share/man/man8/ferryd.8 \
        share/man/man1/ferry.1 lib/sysusers.d/ferry.conf; do
        ok "installed $f" test -e "$ROOT/$f"
    done
    # The shared library by its SONAME, and the name a linker looks for.
    ok "libferry.so.6 installed" test -e "$ROOT/$LIBDIR/libferry.so.6"
    ok "libferry.so links to it" test -L "$ROOT/$LIBDIR/libferry.so"
    ok "SONAME libferry.so.6" bash -c "objdump -p '$ROOT/$LIBDIR/libferry.so' | grep -q 'SONAME *libferry.so.6'"
    ok "the unit runs the installed daemon" \
        grep -q "^ExecStart=$PREFIX/bin/ferryd --socket /run/ferry/ferry.sock" \
        "$ROOT/lib/systemd/system/ferryd.service"
    ok "the unit waits for READY=1" grep -q '^Type=notify' "$ROOT/lib/systemd/system/ferryd.service"
}

# seconds_between N LO HI: N is a whole number of seconds, LO to HI.
seconds_between() { [[ $1 =~ ^[0-9]+$ ]] && (($1 >= $2 && $1 <= $3)); }

# The units as installed: the user ferry, a socket its group may use, the directories it needs,
# the options file that was installed, a bounded stop.
test_units() {
    local unit conf stop
    for unit in "$UNIT" "$TEMPLATE"; do
        ok "$(basename "$unit") runs as User=ferry" grep -qx 'User=ferry' "$unit"
        ok "$(basename "$unit") runs as Group=ferry" grep -qx 'Group=ferry' "$unit"
        ok "$(basename "$unit") opens its socket to the group (--socket-mode 0660)" \
            grep -q '^ExecStart=.* --socket-mode 0660 ' "$unit"
        ok "$(basename "$unit") has a runtime directory others can search (0755)" \
            grep -qx 'RuntimeDirectoryMode=0755' "$unit"
        ok "$(basename "$unit") has a state directory for spilling" grep -q '^StateDirectory=ferry' "$unit"
        ok "$(basename "$unit") lets the arena be pinned" grep -qx 'LimitMEMLOCK=infinity' "$unit"
        # A hung daemon is killed within minutes; a persisting one extends it (test_notify_persist).
        stop=$(sed -n 's/^TimeoutStopSec=//p' "$unit")
        ok "$(basename "$unit") bounds its stop: TimeoutStopSec=$stop is 10 to 300 s" \
            seconds_between "$stop" 10 300
    done
    ok "stopping ferryd.service leaves the instances' sockets in /run/ferry" \
        grep -qx 'RuntimeDirectoryPreserve=yes' "$UNIT"
    ok "the template's socket is its instance's" \
        grep -q '^ExecStart=.* --socket /run/ferry/%i/ferry.sock ' "$TEMPLATE"
    conf=$(sed -n 's/^EnvironmentFile=-//p' "$UNIT")
    ok "the unit reads the ferryd.conf that was installed ($conf)" test -f "$DEST$conf"
    # systemd's own reading, where it is installed: unknown keys, bad values. The daemon and the
    # man page are looked for where they were installed.
    if ! command -v systemd-analyze >/dev/null; then
        echo "note: no systemd-analyze; the units' syntax is not checked"
        return
    fi
    mkdir -p "$DIR/units"
    sed "s|^ExecStart=$PREFIX/bin/|ExecStart=$ROOT/bin/|" "$UNIT" >"$DIR/units/ferryd.service"
    sed "s|^ExecStart=$PREFIX/bin/|ExecStart=$ROOT/bin/|" "$TEMPLATE" >"$DIR/units/ferryd@node.service"
    run "systemd-analyze verify the units" 0 env MANPATH="$ROOT/share/man" \
        systemd-analyze verify "$DIR/units/ferryd.service" "$DIR/units/ferryd@node.service" &&
        if [ -s "$OUT" ] || [ -s "$ERR" ]; then
            fail "systemd-analyze verify the units: $(head -c 300 "$ERR")$(head -c 300 "$OUT")"
        else
            pass
        fi
}

# The user the units run as is the one the sysusers.d file declares, with a group of its name;
# systemd-sysusers (where there is one) creates both in a root of our own.
test_sysusers() {
    local user
    user=$(sed -n 's/^User=//p' "$UNIT")
    ok "sysusers.d declares the unit's user ($user), with its group" \
        grep -Eq "^u $user - \"[^\"]+\" /var/lib/ferry\$" "$SYSUSERS"
    ok "sysusers.d declares nothing else" test "$(grep -cv '^#' "$SYSUSERS")" -eq 1
    if command -v systemd-sysusers >/dev/null; then
        mkdir -p "$DIR/sysroot/etc"
        run "systemd-sysusers --root reads it" 0 systemd-sysusers --root="$DIR/sysroot" "$SYSUSERS" && pass
        ok "it creates the user $user" grep -q "^$user:x:[0-9]*:[0-9]*:.*:/var/lib/ferry:.*nologin\$" \
            "$DIR/sysroot/etc/passwd"
        ok "and the group $user" grep -q "^$user:x:[0-9]*:\$" "$DIR/sysroot/etc/group"
    else
        echo "note: no systemd-sysusers; the sysusers.d file is not read"
    fi
    # An install without DESTDIR under a prefix that is not the system's (a staging tree, a
    # user's own) creates no user; asked (FERRY_SYSUSERS=1), or under /usr or /usr/local, it runs
    # systemd-sysusers (the sysusers component alone, under a prefix of ours, a shim for it).
    rm -f "$DIR/sysusers.calls"
    run "install the sysusers component without DESTDIR under another prefix" 0 \
        env -u DESTDIR PATH="$SHIM:$PATH" cmake --install "$BUILD" --component sysusers \
        --prefix "$DIR/nodest" && pass
    ok "it creates no system user there" test ! -e "$DIR/sysusers.calls"
    run "the same, asked to" 0 env -u DESTDIR FERRY_SYSUSERS=1 PATH="$SHIM:$PATH" \
        cmake --install "$BUILD" --component sysusers --prefix "$DIR/nodest" && pass
    ok "it runs systemd-sysusers on the installed file" \
        grep -qx "$DIR/nodest/lib/sysusers.d/ferry.conf" "$DIR/sysusers.calls"
}

# man_text PAGE: the page as man renders it, into $OUT, its lines joined (a hyphen that broke a
# word at the end of a line taken out), so that a path is found whole.
man_text() {
    run "man -l $(basename "$1")" 0 env LANG=C.UTF-8 LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$1" || return
    python3 -c 'import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
print(re.sub(r"\s+", " ", re.sub("\u2010\n\\s*", "", text)))' "$OUT" >"$DIR/man.txt" &&
        mv "$DIR/man.txt" "$OUT" && pass
}

# The man pages name what was installed: the options file the unit reads, its socket, the
# group, the sysusers.d file; man renders them.
test_man() {
    local page=$ROOT/share/man/man8/ferryd.8 conf
    conf=$(sed -n 's/^EnvironmentFile=-//p' "$UNIT")
    ok "ferryd(8) is configured (no @VAR@ left)" bash -c "! grep -q '@[A-Z_]*@' '$page' '$ROOT/share/man/man1/ferry.1'"
    man_text "$page"
    cp "$OUT" "$DIR/ferryd.8.txt"
    ok "ferryd(8) names the installed options file $conf" grep -qF "$conf" "$DIR/ferryd.8.txt"
    ok "ferryd(8) names the unit's socket" grep -qF "$(sed -n 's/.* --socket \([^ ]*\) .*/\1/p' "$UNIT")" \
        "$DIR/ferryd.8.txt"
    ok "ferryd(8) names the sysusers.d file" grep -qF "$PREFIX/lib/sysusers.d/ferry.conf" "$DIR/ferryd.8.txt"
    ok "ferryd(8) tells how to join the group" grep -qF "usermod -aG ferry" "$DIR/ferryd.8.txt"
    ok "ferryd(8) is of this release" grep -q " ferry $(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' \
        "$BUILD/CMakeCache.txt") " "$DIR/ferryd.8.txt"
    man_text "$ROOT/share/man/man1/ferry.1"
    ok "ferry(1) names the service's socket as a default" grep -qF "/run/ferry/ferry.sock if it exists" "$OUT"
}

# ferryd.conf may hold the directory's password: installed 0640, and an operator's (edited,
# made 0600) is neither loosened nor replaced by the next install.
test_conf_mode() {
    local conf=$ROOT/etc/ferry/ferryd.conf
    ok "ferryd.conf is installed mode 0640" test "$(stat -c %a "$conf")" = 640
    chmod 600 "$conf"
    echo 'FERRY_DIRECTORY_PASSWORD=operators' >>"$conf"
    run "install again" 0 env DESTDIR="$DEST" cmake --install "$BUILD" && pass
    ok "an existing ferryd.conf keeps its mode" test "$(stat -c %a "$conf")" = 600
    ok "and its contents" grep -qx 'FERRY_DIRECTORY_PASSWORD=operators' "$conf"
}

test_versions() {
    local version
    version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")
    expect "ferryd --version" 0 "$ROOT/bin/ferryd" --version
    ok "ferryd --version names $version and the protocols" \
        grep -q "^ferryd $version (client protocol [0-9]*, transfer protocol [0-9]*)$" "$OUT"
    expect "ferry --version" 0 "$ROOT/bin/ferry" --version
    ok "ferry --version names $version" grep -qx "ferry $version" "$OUT"
}

# A program of a user of the library, built the way the README says: cc prog.c $(pkg-config
# --cflags --libs ferry); the sysroot points pkg-config's paths into DESTDIR.
test_pkg_config() {
    local cflags extra=()
    cat >"$DIR/prog.c" <<'EOF'
#include <ferry.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    ferry_client *c;
    ferry_stats s;

    printf("libferry %s\n", ferry_version());
    if (ferry_connect(argv[1], &c) < 0 || ferry_stats_get(c, &s, sizeof(s)) < 0) {
        fprintf(stderr, "prog: %s\n", ferry_errmsg());
        return 1;
    }
    printf("clients %llu\n", (unsigned long long)s.clients);
    ferry_disconnect(c);
    return 0;
}
EOF
    # A sanitizer build's library needs its runtimes in the program too.
    grep -q '^FERRY_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" && extra=(-fsanitize=address,undefined)
    cflags=$(PKG_CONFIG_SYSROOT_DIR=$DEST PKG_CONFIG_PATH=$ROOT/$LIBDIR/pkgconfig \
        pkg-config --cflags --libs ferry) || fail "pkg-config --cflags --libs ferry"
    run "cc prog.c \$(pkg-config --cflags --libs ferry)" 0 \
        cc "${extra[@]}" -o "$DIR/prog" "$DIR/prog.c" $cflags && pass
    "$ROOT/bin/ferryd" --socket "$DIR/node.sock" --memory 16M >"$DIR/node.log" 2>&1 &
    PIDS+=($!)
    wait_for "installed ferryd" $! "$ROOT/bin/ferry" --socket "$DIR/node.sock" stat || return
    run "the program runs against the installed ferryd" 0 env LD_LIBRARY_PATH="$ROOT/$LIBDIR" \
        "$DIR/prog" "$DIR/node.sock" && pass
    ok "it reports the library's version" grep -qx "libferry $("$ROOT/bin/ferry" --version | cut -d' ' -f2)" "$OUT"
    ok "and the daemon's stats" grep -qx "clients 1" "$OUT"
    ok "the static library has the API" bash -c "nm '$ROOT/$LIBDIR/libferry.a' | grep -q ' T ferry_version$'"
    # The Python module's private calls (src/client/private.h) hand out writable pointers into
    # the arena: the shared library must not offer them to programs.
    ok "the shared library exports only ferry_*" bash -c \
        "! nm -D --defined-only '$ROOT/$LIBDIR/libferry.so' | grep -v ' ferry_' | grep -q ' T '"
}

# notify_start NAME: a service manager's datagram socket of ours at $DIR/NAME.notify, bound
# before this returns; each datagram it gets is one line of $DIR/NAME.notify.out, its fields
# joined by " | ". notify_stop NAME ends it.
notify_start() {
    local sock=$DIR/$1.notify n
    python3 - "$sock" >"$sock.out" 2>&1 <<'EOF' &
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(0.2)
end = time.monotonic() + 120
while True:
    done = os.path.exists(sys.argv[1] + ".done") or time.monotonic() > end
    try:
        print(s.recv(4096).decode().replace("\n", " | "), flush=True)
    except socket.timeout:
        if done:  # and nothing is left to read
            break
EOF
    NOTIFY_READER=$!
    # Bound before ferryd starts, or its READY=1 goes nowhere. (A `-S` test inside (( )) is
    # arithmetic: it failed at once and the wait never happened, so ferryd could win the race.)
    for ((n = 0; n < POLLS; n++)); do
        [ -S "$sock" ] && return 0
        sleep 0.05
    done
    fail "the NOTIFY_SOCKET reader did not bind $sock"
    return 1
}

notify_stop() {
    touch "$DIR/$1.notify.done"
    wait "$NOTIFY_READER" 2>/dev/null
}

# NOTIFY_SOCKET: ferryd must say READY=1 once it serves, and STOPPING=1 when it is told to
# stop; with nothing to persist, nothing more.
test_notify() {
    local pid
    notify_start plain || return
    NOTIFY_SOCKET=$DIR/plain.notify "$ROOT/bin/ferryd" --socket "$DIR/notified.sock" --memory 16M \
        >"$DIR/notified.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    eventually "ferryd says READY=1 to NOTIFY_SOCKET" grep -qx "READY=1" "$DIR/plain.notify.out"
    ok "and serves by then" "$ROOT/bin/ferry" --socket "$DIR/notified.sock" stat
    kill -TERM "$pid"
    eventually "ferryd says STOPPING=1 on SIGTERM" grep -qx "STOPPING=1" "$DIR/plain.notify.out"
    wait "$pid"
    notify_stop plain
    ok "and nothing else" test "$(cat "$DIR/plain.notify.out")" = "$(printf 'READY=1\nSTOPPING=1')"
}

# --persist-on-exit under a service manager: the objects not on disk are written after
# STOPPING=1, and ferryd asks for the time it takes (EXTEND_TIMEOUT_USEC, with a STATUS= of how
# far it is) before it exits, the last when every write has ended, so that TimeoutStopSec does
# not kill a long persist. 192 MiB: three 64 MiB objects, below --spill-at (nothing is written
# before the stop).
test_notify_persist() {
    local pid out=$DIR/persist.notify.out i first_extend stopping
    notify_start persist || return
    NOTIFY_SOCKET=$DIR/persist.notify "$ROOT/bin/ferryd" --socket "$DIR/persist.sock" \
        --memory 256M --spill-dir "$DIR/persist.spill" --persist-on-exit >"$DIR/persist.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    if ! wait_for "ferryd --persist-on-exit" "$pid" "$ROOT/bin/ferry" --socket "$DIR/persist.sock" stat; then
        fail "ferryd --persist-on-exit did not start"
        notify_stop persist
        return
    fi
    head -c 64M /dev/urandom >"$DIR/64M"
    for i in 1 2 3; do
        run "put 64 MiB object $i" 0 "$ROOT/bin/ferry" --socket "$DIR/persist.sock" put "obj$i" "$DIR/64M" && pass
    done
    kill -TERM "$pid"
    run "ferryd persists and exits 0" 0 wait "$pid" && pass
    notify_stop persist
    ok "it wrote the three objects at exit" \
        grep -Eq 'spill: 3 objects \(192(\.0)? MiB\) written to .* at exit$' "$DIR/persist.log"
    stopping=$(grep -nx 'STOPPING=1' "$out" | head -1 | cut -d: -f1)
    first_extend=$(grep -n '^EXTEND_TIMEOUT_USEC=' "$out" | head -1 | cut -d: -f1)
    ok "an EXTEND_TIMEOUT_USEC comes after STOPPING=1 (got: $(tr '\n' '/' <"$out"))" \
        test "${first_extend:-0}" -gt "${stopping:-999}"
    ok "each gives at least 10 s, with a STATUS=" bash -c "! grep '^EXTEND_TIMEOUT_USEC=' '$out' |
        grep -vE '^EXTEND_TIMEOUT_USEC=[0-9]{8,} \\| STATUS=persisting at exit: '"
    ok "the first as the work starts" \
        grep -Eqx 'EXTEND_TIMEOUT_USEC=[0-9]+ \| STATUS=persisting at exit: 0 B of 192(\.0)? MiB hashed' "$out"
    ok "the last once every write has ended" bash -c "tail -1 '$out' |
        grep -Eqx 'EXTEND_TIMEOUT_USEC=[0-9]+ \| STATUS=persisting at exit: (192(\.0)? MiB) of \1 written'"
}

# The socket as the unit makes it: ferryd as a system user of its own (nobody and nogroup,
# uid and gid 65534, stand in for ferry, which this test does not create) with the unit's
# --socket-mode; a user in its group (uid 1 with the supplementary group 65534) connects,
# puts and gets, one outside it is refused, and told why. Its spill directory, in a state
# directory of its user's (as StateDirectory= makes /var/lib/ferry), works. Root only.
test_socket_group() {
    local mode uid=65534 gid=65534 run=$DIR/run state=$DIR/state pid
    local member=(setpriv --reuid=1 --regid=1 --groups="$gid")
    local other=(setpriv --reuid=1 --regid=1 --clear-groups)
    if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null; then
        echo "note: the socket's group is not checked (it needs root and setpriv)"
        return
    fi
    mode=$(sed -n 's/^ExecStart=.* --socket-mode \([0-7]*\) .*/\1/p' "$UNIT")
    ok "the unit gives a socket mode" test -n "$mode"
    chmod 0711 "$DIR" # other users may pass through to run/ and the installed programs
    mkdir -m 0755 "$run" && chown "$uid:$gid" "$run"
    mkdir -m 0750 "$state" && chown "$uid:$gid" "$state"
    setpriv --reuid="$uid" --regid="$gid" --clear-groups "$ROOT/bin/ferryd" \
        --socket "$run/ferry.sock" --socket-mode "${mode:-0600}" --memory 16M \
        --spill-dir "$state/spill" --persist-on-exit >"$DIR/group.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    if ! wait_for "ferryd as uid $uid" "$pid" "$ROOT/bin/ferry" --socket "$run/ferry.sock" stat; then
        fail "ferryd as uid $uid did not start: $(head -c 300 "$DIR/group.log")"
        return
    fi
    ok "its socket is its user's and its group's, mode $mode" \
        test "$(stat -c '%u:%g %a' "$run/ferry.sock")" = "$uid:$gid ${mode#0}"
    ok "its spill directory is its own, 0700" test "$(stat -c '%u %a' "$state/spill")" = "$uid 700"
    run "a member of the group puts" 0 bash -c 'echo from-a-member | "$@"' _ "${member[@]}" \
        "$ROOT/bin/ferry" --socket "$run/ferry.sock" put member - && pass
    run "and gets" 0 "${member[@]}" "$ROOT/bin/ferry" --socket "$run/ferry.sock" get member && pass
    ok "what it put" grep -qx from-a-member "$OUT"
    run "a user outside the group is refused" 4 \
        "${other[@]}" "$ROOT/bin/ferry" --socket "$run/ferry.sock" stat && pass
    ok "and told why" grep -q "no access to $run/ferry.sock: mode $mode" "$ERR"
    kill -TERM "$pid"
    run "ferryd as uid $uid persists and exits 0" 0 wait "$pid" && pass
    ok "having written what it held" grep -q 'spill: 1 objects .* written to .* at exit$' "$DIR/group.log"
}

# The Python module from the same install: imported from the installed tree alone, it reports
# the release and talks to the installed daemon.
test_python() {
    local pydir py
    pydir=$(sed -n 's/^FERRY_PYTHON_DIR:STRING=//p' "$BUILD/CMakeCache.txt")
    [ "${pydir#/}" = "$pydir" ] && pydir=$PREFIX/$pydir
    ok "the Python package is installed" test -f "$DEST$pydir/ferry/__init__.py"
    py=$(sed -n 's/^_\{0,1\}Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" | head -1)
    ok "where the interpreter it is built for looks ($py: $pydir)" env -u PYTHONPATH "$py" -c \
        'import sys; sys.exit(sys.argv[1] not in sys.path)' "$pydir"
    "$ROOT/bin/ferryd" --socket "$DIR/py.sock" --memory 16M >"$DIR/py.log" 2>&1 &
    PIDS+=($!)
    wait_for "installed ferryd for Python" $! "$ROOT/bin/ferry" --socket "$DIR/py.sock" stat || return
    run "import ferry from the installed tree" 0 env -u PYTHONPATH PYTHONPATH="$DEST$pydir" \
        ${FERRY_PY_PRELOAD:+LD_PRELOAD=$FERRY_PY_PRELOAD ASAN_OPTIONS=detect_leaks=0} \
        "$FERRY_PYTHON" -c 'import ferry, sys
with ferry.Client(sys.argv[1]) as c:
    c.put(ferry.ObjectID.from_name("installed"), b"from the installed module")
    print(ferry.__version__, bytes(c.get(ferry.ObjectID.from_name("installed"))).decode())' "$DIR/py.sock" && pass
    ok "it is this release, and works" grep -qx "$("$ROOT/bin/ferry" --version | cut -d' ' -f2) from the installed module" "$OUT"
}

main() {
    test_install
    test_units
    test_sysusers
    test_man
    test_conf_mode
    test_versions
    test_pkg_config
    test_python
    test_notify
    test_notify_persist
    test_socket_group
    summary
}

main
