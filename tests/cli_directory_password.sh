#!/usr/bin/env bash
# cli_directory_password.sh - the directory's Redis password reaches AUTH without showing in
# the process's command line or environment, against a real Redis with requirepass:
# - given by --directory-password-file (mode 0600) and by FERRY_DIRECTORY_PASSWORD, the node
#   joins the directory; a watcher that starts ferryd and reads /proc/PID/cmdline and
#   /proc/PID/environ from the moment of exec (without a pause for the first 200 ms, then every
#   5 ms until the node serves) never sees the password. From the environment the kernel puts
#   it in /proc/PID/environ at exec, readable by ferryd's user alone; ferryd wipes it there at
#   start, so the environment is watched from the moment the node serves.
# - a wrong password (in a file its group can read: warned about) keeps the node out with an
#   AUTH message that does not name the password;
# - a password in the URL still works, with a warning that /proc shows it until blanked.
#
# Needs FERRY_BIN_DIR (the directory holding ferryd and ferry), redis-server and python3.
# Prints each failed check, then "N passed, M failed"; exits non-zero when any check failed.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

LOGS_ON_FAILURE=1
PW="pw-$$-Zq7-never-shown"

# watched NAME MODE [ARGS...]: ferryd NAME started by a watcher of its /proc files (MODE env:
# the password in FERRY_DIRECTORY_PASSWORD; else none), stopped on exit. The watcher's verdict
# is in $DIR/NAME.watch ("clean N" after N reads, else where the password was seen).
watched() {
    local name=$1 mode=$2 port
    shift 2
    port=$(free_port) || return 1
    python3 - "$PW" "$mode" "$DIR/$name.sock" "$DIR/$name.log" "$BIN/ferryd" \
        --socket "$DIR/$name.sock" --memory 16M --transport tcp --node-id "node-$name" \
        --listen "127.0.0.1:$port" "$@" >"$DIR/$name.watch" 2>&1 <<'EOF'
import os, subprocess, sys, time
pw, mode, sock, log = sys.argv[1].encode(), sys.argv[2], sys.argv[3], sys.argv[4]
env = dict(os.environ)
if mode == "env":
    env["FERRY_DIRECTORY_PASSWORD"] = pw.decode()
with open(log, "wb") as out:
    p = subprocess.Popen(sys.argv[5:], env=env, stdout=out, stderr=out)  # returns after exec
t0, reads, serving = time.monotonic(), 0, False
while time.monotonic() - t0 < 10 and p.poll() is None and reads < 200000:
    serving = serving or os.path.exists(sock)
    for what in ("cmdline", "environ"):
        if what == "environ" and mode == "env" and not serving:
            continue
        try:
            with open(f"/proc/{p.pid}/{what}", "rb") as f:
                data = f.read()
        except OSError:
            continue
        reads += 1
        if pw in data:
            print(f"seen in /proc/PID/{what} at {(time.monotonic() - t0) * 1000:.1f} ms")
            sys.exit(1)
    if serving and time.monotonic() - t0 > 0.5:
        break
    if time.monotonic() - t0 > 0.2:
        time.sleep(0.005)
print(f"pid {p.pid}\nclean {reads}")
EOF
    local rc=$?
    PIDS+=("$(sed -n 's/^pid //p' "$DIR/$name.watch")")
    return $rc
}

# joined NAME: the node lists itself among the directory's live nodes.
joined() { fy "$1" nodes --json 2>/dev/null | grep -q "\"node-$1\""; }

test_password_from_a_file() {
    printf '%s\n' "$PW" >"$DIR/pw"
    chmod 600 "$DIR/pw"
    ok "watched from exec, the file's password never shows" watched file none \
        --directory "redis://127.0.0.1:$REDIS_PORT" --directory-password-file "$DIR/pw"
    eventually "a node given the password by file joins" joined file
    ok "a mode 0600 file is not warned about" bash -c "! grep -q 'can be read' '$DIR/file.log'"
}

test_password_from_the_environment() {
    ok "watched from exec, the environment's password never shows once ferryd runs" \
        watched env env --directory "redis://127.0.0.1:$REDIS_PORT"
    eventually "a node given the password by the environment joins" joined env
}

test_wrong_password() {
    printf 'not-%s\n' "$PW" >"$DIR/wrong"
    chmod 640 "$DIR/wrong"
    ok "watched, a wrong password starts" watched wrong none \
        --directory "redis://127.0.0.1:$REDIS_PORT" --directory-password-file "$DIR/wrong"
    eventually "AUTH's refusal is logged" grep -q "AUTH refused" "$DIR/wrong.log"
    ok "ferry nodes on that node says why (it said \"directory unavailable\" twice)" \
        bash -c "'$FERRY' --socket '$DIR/wrong.sock' nodes 2>&1 >/dev/null | grep -q 'AUTH refused: WRONGPASS'"
    ok "ferry stat on that node says why the directory is down" \
        bash -c "'$FERRY' --socket '$DIR/wrong.sock' stat | grep -q '^  down .*AUTH refused: WRONGPASS'"
    ok "the node is not listed" bash -c "! '$FERRY' --socket '$DIR/file.sock' nodes --json | grep -q node-wrong"
    ok "the log names no password" bash -c "! grep -q -e '$PW' '$DIR/wrong.log'"
    ok "a file its group can read is warned about" grep -q "can be read by its group" "$DIR/wrong.log"
}

test_password_in_the_url() {
    local port
    port=$(free_port) || return
    ok "a password in the URL still starts" start_node url --node-id node-url \
        --listen "127.0.0.1:$port" --directory "redis://:$PW@127.0.0.1:$REDIS_PORT"
    eventually "and joins" joined url
    ok "with a warning that /proc shows it" grep -q "can be read by every local user" "$DIR/url.log"
}

main() {
    start_redis || {
        fail "redis-server did not start"
        summary
        exit
    }
    redis-cli -p "$REDIS_PORT" config set requirepass "$PW" >/dev/null
    test_password_from_a_file
    test_password_from_the_environment
    test_wrong_password
    test_password_in_the_url
    summary
}

main
