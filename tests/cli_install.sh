#!/bin/bash
# cli_install.sh - `cmake --install` of this build into a DESTDIR, checked as an operator and a
# C programmer would use it: the programs say their version, a program built with pkg-config
# against the installed libferry runs against the installed ferryd, the systemd units name the
# installed daemon, and ferryd tells a service manager (NOTIFY_SOCKET) READY=1 once it serves
# and STOPPING=1 on SIGTERM. No systemd is needed: the test reads the datagrams itself.
# shellcheck source=tests/lib_cli.sh
source "$(dirname "$0")/lib_cli.sh"

BUILD=$(dirname "$BIN")
DEST=$DIR/root
PREFIX=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$BUILD/CMakeCache.txt")
LIBDIR=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$BUILD/CMakeCache.txt")
ROOT=$DEST$PREFIX

test_install() {
    run "install into DESTDIR" 0 env DESTDIR="$DEST" cmake --install "$BUILD" && pass
    local f
    for f in bin/ferryd bin/ferry bin/ferry-bench include/ferry.h "$LIBDIR/libferry.a" \
        "$LIBDIR/pkgconfig/ferry.pc" lib/systemd/system/ferryd.service \
        lib/systemd/system/ferryd@.service etc/ferry/ferryd.conf share/man/man8/ferryd.8 \
        share/man/man1/ferry.1; do
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
}

# NOTIFY_SOCKET: a datagram socket of ours; ferryd must say READY=1 once it serves, and
# STOPPING=1 when it is told to stop.
test_notify() {
    local sock=$DIR/notify.sock pid reader
    python3 - "$sock" >"$DIR/notify.out" 2>&1 <<'EOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(20)
for _ in range(2):
    print(s.recv(4096).decode(), flush=True)
EOF
    reader=$!
    # Bound before ferryd starts, or its READY=1 goes nowhere. (A `-S` test inside (( )) is
    # arithmetic: it failed at once and the wait never happened, so ferryd could win the race.)
    for ((n = 0; n < POLLS; n++)); do
        [ -S "$sock" ] && break
        sleep 0.05
    done
    [ -S "$sock" ] || fail "the NOTIFY_SOCKET reader did not bind $sock"
    NOTIFY_SOCKET=$sock "$ROOT/bin/ferryd" --socket "$DIR/notified.sock" --memory 16M \
        >"$DIR/notified.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    eventually "ferryd says READY=1 to NOTIFY_SOCKET" grep -qx "READY=1" "$DIR/notify.out"
    ok "and serves by then" "$ROOT/bin/ferry" --socket "$DIR/notified.sock" stat
    kill -TERM "$pid"
    eventually "ferryd says STOPPING=1 on SIGTERM" grep -qx "STOPPING=1" "$DIR/notify.out"
    wait "$reader" 2>/dev/null
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
        python3 -c 'import ferry, sys
with ferry.Client(sys.argv[1]) as c:
    c.put(ferry.ObjectID.from_name("installed"), b"from the installed module")
    print(ferry.__version__, bytes(c.get(ferry.ObjectID.from_name("installed"))).decode())' "$DIR/py.sock" && pass
    ok "it is this release, and works" grep -qx "$("$ROOT/bin/ferry" --version | cut -d' ' -f2) from the installed module" "$OUT"
}

main() {
    test_install
    test_conf_mode
    test_versions
    test_pkg_config
    test_python
    test_notify
    summary
}

main
