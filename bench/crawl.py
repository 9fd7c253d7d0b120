#!/usr/bin/env python3
"""How long `lru_crawler crawl all` takes: fills a strata with N items of
100 bytes, half with a 60 s TTL, moves its clock past the TTL
(`debug_advance_clock`), waits a second (the background reclaimer takes
segments whose items all expired, whole), then starts a crawl and polls
`lru_crawler_running` until it ends. Prints the wall time, the server's CPU
time over the crawl and the crawler's counters.

    python3 bench/crawl.py [--items 1000000] [--bin target/release/strata-test]

The debug clock is a test hook: the default binary is the test build
(`make test-bin`).
"""

import argparse
import socket
import subprocess
import time


def stats(s):
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        buf += s.recv(1 << 20)
    return {k.decode(): v.decode() for k, v in (l.split(b" ")[1:3] for l in buf.split(b"\r\n") if l.startswith(b"STAT "))}


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().split()
    return (int(f[13]) + int(f[14])) / 100


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--bin", default="target/release/strata-test")
    ap.add_argument("--port", type=int, default=22333)
    a = ap.parse_args()
    p = subprocess.Popen([a.bin, "-p", str(a.port), "-m", "1024", "-t", "2", "--enable-debug-clock"],
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", a.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        s = socket.create_connection(("127.0.0.1", a.port))
        batch = []
        for i in range(a.items):
            batch.append(b"set k%d 0 %d 100 noreply\r\n%s\r\n" % (i, 60 if i % 2 else 0, b"v" * 100))
            if len(batch) == 1000:
                s.sendall(b"".join(batch))
                batch = []
        s.sendall(b"".join(batch) + b"mn\r\n")
        buf = b""
        while not buf.endswith(b"MN\r\n"):
            buf += s.recv(1 << 16)
        s.sendall(b"debug_advance_clock 61\r\n")
        assert s.recv(100) == b"OK\r\n"
        time.sleep(1)
        before = stats(s)
        cpu0, t0 = cpu_seconds(p.pid), time.monotonic()
        s.sendall(b"lru_crawler crawl all\r\n")
        reply = s.recv(100)
        while stats(s)["lru_crawler_running"] != "0":
            time.sleep(0.01)
        wall, cpu = time.monotonic() - t0, cpu_seconds(p.pid) - cpu0
        st = stats(s)
        print(f"{a.items} items; before the crawl {before['curr_items']} linked "
              f"({before['strata_segments_reclaimed']} segments reclaimed whole); crawl {reply!r}: "
              f"{wall:.3f} s wall, {cpu:.2f} s server CPU; checked {st['crawler_items_checked']}, "
              f"reclaimed {st['crawler_reclaimed']}, {st['curr_items']} left")
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
