#!/usr/bin/env python3
"""Where a running strata's memory goes while a load runs beside it: polls
`stats` and prints the mean of the items' bytes and of the memory held idle
(free segments, the unwritten room of open ones), over the samples taken
once memory is full (`evictions` > 0). Issue 42's workload 15, for one:

    strata -p 11401 -m 16 -t 2 & S=$!
    .venv/bin/python bench/idle.py --port 11401 --secs 6 &
    strata-bench run --addr 127.0.0.1:11401 --pid $S --mode hit-ratio --key-dist zipf:0.9 \\
        --keys 100 --value-size 100-1000000 --ttls 0,600,3600,86400 -c 8 -t 2 --pipeline 2 \\
        --warmup-ops 10000 --ops 20000
"""

import argparse
import socket
import time

FIELDS = ("bytes", "strata_idle_free_bytes", "strata_idle_open_bytes")


def stats(s):
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("the server went away")
        buf += chunk
    return dict(line.split(" ", 2)[1:] for line in buf.decode().split("\r\n") if line.startswith("STAT "))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--secs", type=float, default=10, help="how long to sample")
    ap.add_argument("--every-ms", type=float, default=5)
    a = ap.parse_args()
    s = socket.create_connection(("127.0.0.1", a.port))
    sums = dict.fromkeys(FIELDS, 0)
    n = 0
    end = time.monotonic() + a.secs
    while time.monotonic() < end:
        try:
            st = stats(s)
        except OSError:
            break
        if int(st["evictions"]) > 0:
            n += 1
            for f in FIELDS:
                sums[f] += int(st[f])
        time.sleep(a.every_ms / 1000)
    if n == 0:
        print("no sample with memory full")
        return
    means = ", ".join(f"{f} {sums[f] / n / 1e6:.2f} MB" for f in FIELDS)
    print(f"{n} samples with memory full: {means}")


if __name__ == "__main__":
    main()
