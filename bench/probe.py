#!/usr/bin/env python3
"""A probe connection's waits beside a load: one `get` every 2 ms against a
running strata (or memcached) for --secs, each reply timed; prints the
count, p50, p99, p99.9 and the largest wait. With `-t 1` the probe shares
the worker of every other connection, so what a request does on the event
loop (a write clearing a victim itself, `Store::reclaim_cheap`) shows in
its waits. Issue 45's large sets:

    strata -p 11402 -m 48 -t 1 & S=$!
    python3 bench/probe.py --port 11402 --secs 4 &
    strata-bench run -q --addr 127.0.0.1:11402 --pid $S --mode load --ratio 1:0 \\
        --value-size 409600-614400 --keys 60000 --ops 60000 --key-dist sequential \\
        --connections 4 --threads 2 --pipeline 1
"""

import argparse
import socket
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--secs", type=float, default=4)
    ap.add_argument("--every-ms", type=float, default=2)
    a = ap.parse_args()
    s = socket.create_connection(("127.0.0.1", a.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"set probe 0 0 2\r\nok\r\n")
    assert s.recv(100) == b"STORED\r\n"
    waits = []
    end = time.monotonic() + a.secs
    while time.monotonic() < end:
        t = time.monotonic()
        s.sendall(b"get probe\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(100)
            if not chunk:
                raise ConnectionError("the server went away")
            buf += chunk
        waits.append(time.monotonic() - t)
        time.sleep(a.every_ms / 1000)
    waits.sort()
    n = len(waits)

    def ms(q):
        return waits[min(n - 1, int(n * q))] * 1e3

    print(f"probes {n} p50 {ms(0.5):.3f} p99 {ms(0.99):.3f} p99.9 {ms(0.999):.3f} max {waits[-1] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
