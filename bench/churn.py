#!/usr/bin/env python3
"""Live data kept under overwrite churn, strata and memcached side by side.

For each cell (live share of -m, overwrite distribution) and each server:
start the server with `-m MEM -t 2`, write KEYS keys of 1000 bytes once,
overwrite them OPS times (noreply sets, pipelined, one connection) with keys
drawn from the distribution, then read every key back (100-key multi-gets)
and count the keys that come back with their latest value. Reported: keys
kept, RSS, server CPU µs per overwrite, and strata's write amplification
(`strata_write_amplification`: bytes written to segments per byte stored).

Distributions: `hot` (90% of writes to the hottest 10% of keys, uniformly
within each part) and `zipf` (zipf 0.99 over the keys, rank 1 = key 0).

    .venv/bin/python bench/churn.py [--strata-bin PATH] [--ops 3000000]
        [--memory-mb 256] [--cells live70-hot,live70-zipf,live85-hot,live85-zipf]
        [--server strata,memcached] [--out FILE.md]

Bars (issue "keep live data under overwrite churn"): >= 99.5% of the keys
kept at 70% live, >= 97% at 85%.
"""

import argparse
import bisect
import itertools
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import harness  # noqa: E402

VALUE_LEN = 1000
# Live data as a share of -m, in keys of 14-byte names and 1000-byte values:
# 180,000 x ~1 KB is the 70% of 256 MiB the report used.
CELLS = {
    "live70-hot": (0.70, "hot"),
    "live70-zipf": (0.70, "zipf"),
    "live85-hot": (0.85, "hot"),
    "live85-zipf": (0.85, "zipf"),
}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def key(i):
    return b"key:%010d" % i  # 14 bytes


def value(i, version):
    head = b"%d:%d:" % (i, version)
    return head + b"." * (VALUE_LEN - len(head))


def chooser(dist, n, rng):
    if dist == "hot":
        hot = n // 10

        def draw():
            if rng.random() < 0.9:
                return rng.randrange(hot)
            return rng.randrange(hot, n)

        return draw
    if dist == "zipf":
        weights = [1.0 / (r ** 0.99) for r in range(1, n + 1)]
        cdf = list(itertools.accumulate(weights))
        total = cdf[-1]

        def draw():
            return min(bisect.bisect_left(cdf, rng.random() * total), n - 1)

        return draw
    raise ValueError(dist)


def cpu_secs(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def send_sets(c, writes):
    batch = []
    for i, version in writes:
        batch.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(i), VALUE_LEN, value(i, version)))
        if len(batch) == 512:
            c.send(b"".join(batch))
            batch = []
    c.send(b"".join(batch))
    c.send(b"version\r\n")
    line = c.read_line()
    assert line.startswith(b"VERSION"), line


def read_all(c, n, latest):
    kept = 0
    for start in range(0, n, 100):
        keys = range(start, min(start + 100, n))
        c.send(b"get " + b" ".join(key(i) for i in keys) + b"\r\n")
        reply = c.read_until(b"END\r\n")
        for i in keys:
            if b"VALUE %s 0 %d\r\n%s\r\n" % (key(i), VALUE_LEN, value(i, latest[i])) in reply:
                kept += 1
    return kept


def stats(c):
    c.send(b"stats\r\n")
    out = {}
    for line in c.read_until(b"END\r\n").split(b"\r\n"):
        parts = line.split(b" ", 2)
        if len(parts) == 3 and parts[0] == b"STAT":
            out[parts[1].decode()] = parts[2].decode()
    return out


def run_cell(kind, memory_mb, share, dist, ops, seed):
    n = int(memory_mb * 1024 * 1024 * share) // (VALUE_LEN + 14 + 34)
    rng = random.Random(seed)
    draw = chooser(dist, n, rng)
    latest = [0] * n
    writes = []
    for _ in range(ops):
        i = draw()
        latest[i] += 1
        writes.append((i, latest[i]))
    srv = harness.Server(["-m", str(memory_mb), "-t", "2"], kind=kind)
    try:
        c = srv.connect(timeout=120)
        send_sets(c, [(i, 0) for i in range(n)])
        cpu0, t0 = cpu_secs(srv.pid()), time.monotonic()
        send_sets(c, writes)
        cpu1, t1 = cpu_secs(srv.pid()), time.monotonic()
        kept = read_all(c, n, latest)
        st = stats(c)
        return {
            "server": kind,
            "keys": n,
            "overwrites": ops,
            "kept": kept,
            "kept_pct": 100.0 * kept / n,
            "rss_mib": srv.rss_bytes() / (1 << 20),
            "cpu_us_per_set": (cpu1 - cpu0) * 1e6 / ops,
            "sets_per_sec": ops / (t1 - t0),
            "evictions": int(st.get("evictions", "0")),
            "write_amp": st.get("strata_write_amplification", "–"),
            "cleaned": st.get("strata_segments_cleaned", "–"),
        }
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata-bin", default=harness.STRATA_PROD_BIN)
    ap.add_argument("--server", default="strata,memcached")
    ap.add_argument("--memory-mb", type=int, default=256)
    ap.add_argument("--ops", type=int, default=3_000_000)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    harness.STRATA_BIN = a.strata_bin
    rows = [
        "| cell | server | keys | overwrites | kept | kept % | evictions | RSS MiB | server CPU µs/set | sets/s | write amp. | segments cleaned |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cell in a.cells.split(","):
        share, dist = CELLS[cell]
        for kind in a.server.split(","):
            r = run_cell(kind, a.memory_mb, share, dist, a.ops, a.seed)
            row = (
                f"| {cell} | {kind} | {r['keys']} | {r['overwrites']} | {r['kept']} | {r['kept_pct']:.2f} | "
                f"{r['evictions']} | {r['rss_mib']:.0f} | {r['cpu_us_per_set']:.2f} | {r['sets_per_sec']:.0f} | "
                f"{r['write_amp']} | {r['cleaned']} |"
            )
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    head = f"`{' '.join(sys.argv)}` (-m {a.memory_mb} -t 2, 1000-byte values, 14-byte keys)\n\n"
    md = head + "\n".join(rows) + "\n"
    print(md)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
