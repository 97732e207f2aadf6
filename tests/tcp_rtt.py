"""tcp_rtt.py - one-byte TCP round trips between two network namespaces, for tests of the
testbed's links (cli_testbed.sh): `serve ADDR PORT` answers one connection's bytes (echo) until
it closes; `probe ADDR PORT COUNT` makes COUNT round trips and prints the median in microseconds.
Every wait is bounded (10 s)."""
import socket
import sys
import time


def serve(addr, port):
    s = socket.create_server((addr, port))
    s.settimeout(10)
    c, _ = s.accept()
    c.settimeout(10)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := c.recv(4096):
        c.sendall(data)


def probe(addr, port, count):
    for _ in range(100):  # the server may not listen yet: 5 s at most
        try:
            c = socket.create_connection((addr, port), timeout=10)
            break
        except OSError:
            time.sleep(0.05)
    else:
        raise SystemExit("tcp_rtt: no server")
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    us = []
    for _ in range(count):
        t = time.perf_counter()
        c.sendall(b"x")
        if c.recv(1) != b"x":
            raise SystemExit("tcp_rtt: the echo broke off")
        us.append((time.perf_counter() - t) * 1e6)
    c.close()
    print(int(sorted(us)[len(us) // 2]))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        probe(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
