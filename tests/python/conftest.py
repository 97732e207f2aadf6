"""Fixtures of the Python module's tests: real ferryd processes (from $FERRY_BIN_DIR) and a real
redis-server, each in a short temporary directory, stopped after the test. Every wait is
bounded by a count and a time."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import ferry
from free_port import free_port

BIN_DIR = os.environ.get("FERRY_BIN_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "bin"
)
START_S = 10.0


def wait_until(check, seconds=START_S, what="condition"):
    """Polls check() every 20 ms until it is true, at most `seconds`."""
    for _ in range(int(seconds / 0.02) + 1):
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} not within {seconds} s")


def wait_child(pid, seconds=10.0):
    """A forked child's exit code, waited for at most `seconds` (then killed, reaped, and an
    AssertionError)."""
    for _ in range(int(seconds / 0.01)):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"child did not exit within {seconds} s")


def plain_env():
    """The environment without the sanitizer runtimes that an instrumented build preloads into
    this interpreter: for programs that are not ours (redis-server, a compiler)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


class Daemon:
    """A ferryd on a socket of its own; log in its directory."""

    def __init__(self, workdir, name, memory, args):
        self.socket = os.path.join(workdir, name + ".sock")
        self.log_path = os.path.join(workdir, name + ".log")
        self.memory = memory
        self.args = list(args)
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        cmd = [os.path.join(BIN_DIR, "ferryd"), "--socket", self.socket, "--memory", self.memory]
        if os.environ.get("FERRY_TEST_TIMERS"):  # the protocol's timers scaled down (CMake)
            cmd += ["--timers", os.environ["FERRY_TEST_TIMERS"]]
        self.proc = subprocess.Popen(cmd + self.args, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + START_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"ferryd exited during start:\n{self.log()}")
            try:
                ferry.Client(self.socket).close()
                return self
            except ferry.DaemonUnreachable:
                if time.monotonic() > deadline:
                    raise AssertionError(f"ferryd did not answer within {START_S} s:\n{self.log()}")
                time.sleep(0.02)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=START_S)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=START_S)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="pyferry.", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start_daemon(workdir):
    """start_daemon(name="d", memory="64M", *args) -> a started Daemon, stopped at teardown."""
    daemons = []

    def start(name="d", memory="64M", *args):
        d = Daemon(workdir, name, memory, args)
        daemons.append(d)
        return d.start()

    yield start
    for d in daemons:
        d.stop()


@pytest.fixture
def daemon(start_daemon):
    return start_daemon()


@pytest.fixture
def client(daemon):
    with ferry.Client(daemon.socket) as c:
        yield c


@pytest.fixture
def redis_port(redis_server):
    return redis_server[0]


@pytest.fixture
def redis_server(workdir):
    """A redis-server for the test: (port, its Popen)."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=plain_env(),
    )

    def answers():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    wait_until(answers, what="redis-server")
    yield port, proc
    proc.send_signal(signal.SIGCONT)  # a test may have stopped it
    proc.terminate()
    proc.wait(timeout=START_S)


@pytest.fixture
def cluster(start_daemon, redis_port):
    """Two nodes, a and b, over tcp with the directory on redis_port: (Daemon a, Daemon b)."""
    nodes = []
    for name in ("a", "b"):
        nodes.append(
            start_daemon(name, "64M", "--node-id", name, "--listen", f"127.0.0.1:{free_port()}",
                         "--directory", f"redis://127.0.0.1:{redis_port}", "--transport", "tcp")
        )
    with ferry.Client(nodes[1].socket) as c:
        wait_until(lambda: listed(c) == 2, what="both nodes in the directory")
    return tuple(nodes)


def listed(c):
    """How many nodes c's daemon lists; 0 while its directory is not reached yet (a node that
    just started connects to Redis in the background: slow under a loaded sanitizer run)."""
    try:
        return len(c.nodes())
    except ferry.DirectoryUnavailable:
        return 0


def arena_mapping(address):
    """The /proc/self/maps line of the mapping that holds address, or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return line.strip()
    return None


def in_arena(address):
    """True when address lies in a mapping of a ferryd arena (its memfd)."""
    line = arena_mapping(address)
    return line is not None and "memfd:ferry-arena" in line
