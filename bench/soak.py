#!/usr/bin/env python3
"""A soak with background work, and a probe's worst wait (issue 41, failure 6).

strata serves writers (several processes of pipelined 1000-byte sets over a
key space larger than -m, so the cleaner, eviction and the flash tier run)
while a snapshot is taken every --snapshot-every seconds and the LRU crawler
runs every --crawl-every seconds. A probe connection, in a process of its
own, sends one `get` every 10 ms and times each reply. Prints the probe's
p50/p99/p99.9/max, the snapshots taken, and how often a write waited for
memory: on its worker's thread (`strata_reclaim_waited`, every connection
of that worker waits too) or off it (`strata_memory_waits`); --out writes
the same as Markdown.

    .venv/bin/python bench/soak.py --strata-bin target/release/strata --secs 120
"""

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import tempfile
import time


def connect(port):
    for _ in range(200):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            time.sleep(0.05)
    raise SystemExit("strata did not start")


def read_until(s, end):
    buf = b""
    while not buf.endswith(end):
        chunk = s.recv(1 << 16)
        if not chunk:
            raise SystemExit("connection closed")
        buf += chunk
    return buf


def writer(port, wid, keys, deadline):
    s = connect(port)
    v = os.urandom(500).hex().encode()[:1000]
    i = wid
    while time.monotonic() < deadline:
        batch = b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % ((i + j * 7919) % keys, len(v), v) for j in range(32))
        s.sendall(batch + b"mn\r\n")
        read_until(s, b"MN\r\n")
        i += 32 * 4
    s.close()


def probe(port, deadline, out):
    s = connect(port)
    s.sendall(b"set probe 0 0 2\r\nok\r\n")
    read_until(s, b"STORED\r\n")
    waits = []
    while time.monotonic() < deadline:
        t = time.monotonic()
        s.sendall(b"get probe\r\n")
        read_until(s, b"END\r\n")
        waits.append(time.monotonic() - t)
        time.sleep(0.01)
    out.put(waits)


def admin(port, deadline, snap_every, crawl_every, out):
    s = connect(port)
    snaps = crawls = 0
    next_snap = time.monotonic() + snap_every
    next_crawl = time.monotonic() + crawl_every
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now >= next_snap:
            s.sendall(b"snapshot\r\n")
            read_until(s, b"\r\n")
            snaps += 1
            next_snap = now + snap_every
        if now >= next_crawl:
            s.sendall(b"lru_crawler crawl all\r\n")
            read_until(s, b"\r\n")
            crawls += 1
            next_crawl = now + crawl_every
        time.sleep(0.05)
    out.put((snaps, crawls))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strata-bin", default="target/release/strata")
    ap.add_argument("--secs", type=float, default=120)
    ap.add_argument("--port", type=int, default=22123)
    ap.add_argument("--mem", type=int, default=64)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--snapshot-every", type=float, default=10)
    ap.add_argument("--crawl-every", type=float, default=20)
    ap.add_argument("--flash-mb", type=int, default=512, help="0: no flash tier")
    ap.add_argument("--out")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="strata-soak-", dir="/var/tmp")
    cmd = [a.strata_bin, "-p", str(a.port), "-l", "127.0.0.1", "-m", str(a.mem), "-t", "2", "--snapshot-dir", d]
    if a.flash_mb:
        cmd += ["-o", f"ext_path={d}/flash:{a.flash_mb}M"]
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        connect(a.port).close()
        deadline = time.monotonic() + a.secs
        q = mp.Queue()
        procs = [mp.Process(target=writer, args=(a.port, w, a.keys, deadline)) for w in range(a.writers)]
        procs.append(mp.Process(target=probe, args=(a.port, deadline, q)))
        procs.append(mp.Process(target=admin, args=(a.port, deadline, a.snapshot_every, a.crawl_every, q)))
        for p in procs:
            p.start()
        got = [q.get(timeout=a.secs + 120) for _ in range(2)]
        for p in procs:
            p.join(timeout=60)
        waits = next(x for x in got if isinstance(x, list))
        snaps, crawls = next(x for x in got if isinstance(x, tuple))
        s = connect(a.port)
        s.sendall(b"stats\r\n")
        st = dict(
            line.split(" ", 2)[1:] for line in read_until(s, b"END\r\n").decode().split("\r\n") if line.startswith("STAT ")
        )
        ms = [w * 1000 for w in waits]
        row = (
            f"| {a.secs:.0f} s | {len(ms)} | {pct(ms, 0.5):.2f} | {pct(ms, 0.99):.2f} | {pct(ms, 0.999):.2f} | "
            f"{max(ms):.1f} | {snaps} ({st.get('snapshot_last_result', '?')}) | {crawls} | "
            f"{st.get('evictions', '?')} | {st.get('extstore_objects_written', st.get('flash_items_written', '?'))} | "
            f"{st.get('cmd_set', '?')} | {st.get('strata_reclaim_waited', '?')} | "
            f"{st.get('strata_memory_waits', '-')} | {st.get('strata_reclaim_inline', '?')} |"
        )
        head = (
            "| length | probes | p50 ms | p99 ms | p99.9 ms | max ms | snapshots (last) | crawls | evictions | flash writes "
            "| sets | waits on the worker | waits off it | reclaimed inline |\n"
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        )
        print(head + "\n" + row)
        if a.out:
            with open(a.out, "w") as f:
                f.write(f"`{' '.join(cmd)}`\n\n{head}\n{row}\n")
    finally:
        srv.terminate()
        srv.wait(timeout=60)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
