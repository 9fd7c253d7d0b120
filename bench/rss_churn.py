#!/usr/bin/env python3
"""RSS under mixed churn, strata and memcached side by side (issue 18).

Both servers run at once with `-m 256 -t 2` (memcached also `-U 0`), each
driven by its own client process with the same seeded sequence of
requests for `--duration` seconds (default 600): sets of random sizes from
10 B to 200 KB (log-uniform, so most are small and most bytes are in large
ones) over 20,000 keys, a third of them with TTLs of 1 to 10 seconds;
overwrites; deletes; appends; incr on counters; gets and 10-key multi-gets.
Requests go in pipelined batches of 32 with replies read after each batch.
Every 5 seconds each server's RSS is read from /proc. Reported: the RSS
series (a table every 30 s, the whole series in the JSON), the peak, the
last value, and the peak as a multiple of -m; an SVG plot of both series.

    .venv/bin/python bench/rss_churn.py [--duration 600] [--memory 256]
        [--out /tmp/rss-churn.json] [--svg docs/rss-churn.svg]
"""

import argparse
import json
import math
import multiprocessing
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import harness  # noqa: E402

KEYS = 20_000
COUNTERS = 100
BATCH = 32
SAMPLE_EVERY = 5.0
MIN_SIZE, MAX_SIZE = 10, 200_000


def size(rng):
    return int(math.exp(rng.uniform(math.log(MIN_SIZE), math.log(MAX_SIZE))))


def requests(rng):
    """One batch of requests (bytes) and how many replies it expects, as
    (terminator, count) pairs read in order."""
    out = []
    for _ in range(BATCH):
        r = rng.random()
        k = b"k:%d" % rng.randrange(KEYS)
        if r < 0.40:
            ttl = rng.randint(1, 10) if rng.random() < 0.33 else 0
            n = size(rng)
            out.append((b"set %s 0 %d %d\r\n%s\r\n" % (k, ttl, n, b"x" * n), b"\r\n"))
        elif r < 0.55:
            out.append((b"get %s\r\n" % k, b"END\r\n"))
        elif r < 0.65:
            keys = b" ".join(b"k:%d" % rng.randrange(KEYS) for _ in range(10))
            out.append((b"get %s\r\n" % keys, b"END\r\n"))
        elif r < 0.75:
            out.append((b"delete %s\r\n" % k, b"\r\n"))
        elif r < 0.85:
            n = rng.randint(1, 2000)
            out.append((b"append %s 0 0 %d\r\n%s\r\n" % (k, n, b"a" * n), b"\r\n"))
        elif r < 0.95:
            c = b"c:%d" % rng.randrange(COUNTERS)
            out.append((b"incr %s 1\r\n" % c, b"\r\n"))
        else:
            c = b"c:%d" % rng.randrange(COUNTERS)
            out.append((b"set %s 0 0 1\r\n0\r\n" % c, b"\r\n"))
    return out


def read_replies(sock, buf, terms):
    """Reads one reply per terminator (a get's VALUE blocks hold no END
    line of their own: the values here are only x and a)."""
    for term in terms:
        while True:
            i = buf.find(term)
            if i >= 0:
                buf = buf[i + len(term):]
                break
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
    return buf


def drive(port, seed, duration, ops):
    rng = random.Random(seed)
    sock = socket.create_connection(("127.0.0.1", port))
    buf = b""
    end = time.monotonic() + duration
    n = 0
    while time.monotonic() < end:
        batch = requests(rng)
        sock.sendall(b"".join(r for r, _ in batch))
        buf = read_replies(sock, buf, [t for _, t in batch])
        n += len(batch)
    ops.value = n


def svg(series, memory_mb, duration):
    """A plain SVG line plot of RSS (MiB) over time, one line per server."""
    w, h, pad = 720, 320, 50
    top = max(max(v for _, v in s) for s in series.values()) / (1 << 20) * 1.1
    top = max(top, memory_mb * 1.2)

    def xy(t, v):
        return pad + (w - 2 * pad) * t / duration, h - pad - (h - 2 * pad) * (v / (1 << 20)) / top

    colors = {"strata": "#1f77b4", "memcached": "#d62728"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             'font-size="12">', f'<rect width="{w}" height="{h}" fill="white"/>']
    x0, y0 = xy(0, 0)
    x1, _ = xy(duration, 0)
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="black"/>')
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{pad}" stroke="black"/>')
    for mib in range(0, int(top) + 1, 64):
        _, y = xy(0, mib << 20)
        parts.append(f'<text x="{x0 - 6}" y="{y + 4}" text-anchor="end">{mib}</text>')
        parts.append(f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#eee"/>')
    _, ym = xy(0, memory_mb << 20)
    parts.append(f'<line x1="{x0}" y1="{ym}" x2="{x1}" y2="{ym}" stroke="gray" stroke-dasharray="4"/>')
    parts.append(f'<text x="{x1}" y="{ym - 4}" text-anchor="end" fill="gray">-m {memory_mb}</text>')
    for t in range(0, int(duration) + 1, 60):
        x, _ = xy(t, 0)
        parts.append(f'<text x="{x}" y="{y0 + 16}" text-anchor="middle">{t}</text>')
    parts.append(f'<text x="{w / 2}" y="{h - 8}" text-anchor="middle">seconds</text>')
    parts.append(f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">RSS, MiB</text>')
    for i, (name, s) in enumerate(series.items()):
        pts = " ".join("%.1f,%.1f" % xy(t, v) for t, v in s)
        c = colors.get(name, "black")
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
        parts.append(f'<text x="{x0 + 10}" y="{pad + 16 * i}" fill="{c}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=600)
    p.add_argument("--memory", type=int, default=256)
    p.add_argument("--seed", type=int, default=18)
    p.add_argument("--out", default="/tmp/rss-churn.json")
    p.add_argument("--svg")
    a = p.parse_args()
    servers = {
        "strata": harness.Server(["-m", str(a.memory), "-t", "2"], kind="strata", production=True),
        "memcached": harness.Server(["-m", str(a.memory), "-t", "2"], kind="memcached"),
    }
    try:
        ops = {k: multiprocessing.Value("q", 0) for k in servers}
        procs = {k: multiprocessing.Process(target=drive, args=(s.port, a.seed, a.duration, ops[k]))
                 for k, s in servers.items()}
        for pr in procs.values():
            pr.start()
        t0 = time.monotonic()
        series = {k: [] for k in servers}
        while any(pr.is_alive() for pr in procs.values()):
            t = time.monotonic() - t0
            for k, s in servers.items():
                series[k].append((round(t, 1), s.rss_bytes()))
            time.sleep(SAMPLE_EVERY)
        for pr in procs.values():
            pr.join()
    finally:
        for s in servers.values():
            s.stop()
    res = {
        "memory_mb": a.memory,
        "duration_s": a.duration,
        "ops": {k: v.value for k, v in ops.items()},
        "series": series,
        "peak": {k: max(v for _, v in s) for k, s in series.items()},
        "last": {k: s[-1][1] for k, s in series.items()},
    }
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(series, a.memory, a.duration))
    mib = 1 << 20
    print("| t (s) | " + " | ".join(f"{k} RSS MiB" for k in series) + " |")
    print("|---:|" + "---:|" * len(series))
    names = list(series)
    for i in range(0, len(series[names[0]]), 6):
        row = [series[k][i][1] / mib if i < len(series[k]) else float("nan") for k in names]
        print(f"| {series[names[0]][i][0]:.0f} | " + " | ".join(f"{v:.0f}" for v in row) + " |")
    for k in names:
        print(f"{k}: {res['ops'][k]} requests, peak {res['peak'][k] / mib:.0f} MiB "
              f"({res['peak'][k] / (a.memory * mib):.2f} x -m), last {res['last'][k] / mib:.0f} MiB")


if __name__ == "__main__":
    main()
