#!/usr/bin/env python3
"""The flash tier, strata and memcached's extstore side by side (issue 17).

Both servers get the same settings: `-m 256 -t 2 -o ext_path=FILE:6G`
(memcached 1.6 from Debian, with `-U 0`).

Bar 1, capacity: 5 M distinct keys with 1000-byte random values, written
at 40 K sets/s (pipelined noreply sets, paced every 10 ms); then every key
is read back (multi-gets of 100) and compared byte for byte: how many are
retrievable with exact values, how many are wrong (must be 0), and the RSS
after the fill.

Bar 2, RAM per flash item: strata's `strata_extstore_ram_per_item` (its
index slots' share of the index plus region metadata).

Bar 3, reads from flash: `strata-bench run --addr --pid` with zipf 0.99
gets over the same 5 M keys, 16 connections, no warm-up (the keys are
there): hit ratio, server CPU per get and p99 for both. `--part paired`
runs only this, with both servers filled and alive at once and `--rounds`
runs each, taking turns, reporting medians; `--cold-rounds N` then runs
N more each with the page cache dropped first (root), so reads from flash
wait for the disk. Server `strata-sync` is strata
with `-o ext_threads=0` (reads from flash on the worker rather than the
I/O threads), for `--servers strata,strata-sync,memcached`.

Bar 4, restart: with `--snapshot-dir`, strata is stopped (SIGTERM: a
snapshot), the page cache dropped (root), and strata started again on the
same flash file; the time to the open port, and a sample of keys read
back exact.

    .venv/bin/python bench/flash.py [--items N] [--value BYTES] [--rate SETS/S]
        [--memory MB] [--flash-size 6G] [--dir DIR] [--part capacity,reads,restart]
        [--servers strata,memcached] [--duration SECS] [--rounds N] [--out FILE.json]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, HERE)

from snapshot import connect, drop_caches, recv_until, value, wait_port  # noqa: E402
from snapshot import mc_stats as stats  # noqa: E402

from harness import free_port  # noqa: E402  (bench/snapshot.py puts tests/ on the path)


def key(i):
    # strata-bench's key for index i with 5 M keys: 'k' and 13 digits.
    return b"k%013d" % i


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def start(kind, a, port, flash, snap=None):
    if kind.startswith("strata"):
        ext = f"ext_path={flash}:{a.flash_size}"
        if kind == "strata-sync":
            # Reads from flash on the worker instead of the I/O threads.
            ext += ",ext_threads=0"
        cmd = [a.strata_bin, "-p", str(port), "-m", str(a.memory), "-t", "2", "-o", ext]
        if snap:
            cmd += ["--snapshot-dir", snap]
    else:
        cmd = [
            "memcached", "-p", str(port), "-U", "0", "-u", "root", "-l", "127.0.0.1", "-m", str(a.memory), "-t", "2",
            "-o", f"ext_path={flash}:{a.flash_size}",
        ]
    log = open(os.path.join(a.dir, f"{kind}.log"), "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    ready = wait_port(port, proc)
    return proc, cmd, ready


def fill(port, items, n, rate):
    """Sets keys 0..items once each at `rate` sets/s; returns the rate achieved."""
    s = connect(port)
    t0 = time.monotonic()
    per_tick = max(1, int(rate / 100))
    i = 0
    tick = 0
    while i < items:
        batch = [
            b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(j), n, value(j, n)) for j in range(i, min(items, i + per_tick))
        ]
        s.sendall(b"".join(batch))
        i += len(batch)
        tick += 1
        # Pace: tick k is due at k / 100 s.
        ahead = t0 + tick / 100 - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    s.sendall(b"mn\r\n")
    recv_until(s, b"MN\r\n")
    s.close()
    return items / (time.monotonic() - t0)


def check(port, items, n, batch=100):
    """Reads every key back: (exact, wrong, missing)."""
    s = connect(port)
    exact = wrong = 0
    for start_i in range(0, items, batch):
        idx = range(start_i, min(items, start_i + batch))
        s.sendall(b"get " + b" ".join(key(i) for i in idx) + b"\r\n")
        buf = recv_until(s, b"END\r\n")
        while not buf.endswith(b"\r\nEND\r\n") and buf != b"END\r\n":
            buf = recv_until(s, b"END\r\n", buf + s.recv(1 << 20))
        at = 0
        while buf.startswith(b"VALUE ", at):
            eol = buf.index(b"\r\n", at)
            _, k, _flags, size = buf[at:eol].split()[:4]
            size = int(size)
            data = buf[eol + 2 : eol + 2 + size]
            if data == value(int(k[1:]), n):
                exact += 1
            else:
                wrong += 1
            at = eol + 2 + size + 2
    s.close()
    return exact, wrong, items - exact - wrong


def bench_reads(a, port, pid, out):
    cmd = [
        a.bench_bin, "run", "--addr", f"127.0.0.1:{port}", "--pid", str(pid), "--mode", "load", "--ratio", "0:1",
        "--keys", str(a.items), "--key-dist", "zipf:0.99", "--warmup", "false", "--duration", str(a.duration),
        "-c", "16", "--value-size", str(a.value), "--quiet", "--out", out, "--name", "reads",
    ]
    before = stats(port)
    subprocess.run(cmd, check=True, capture_output=True)
    after = stats(port)
    with open(os.path.join(out, "reads.json")) as f:
        r = json.load(f)["runs"][0]
    res = {
        "hit_ratio": r["hit_ratio"],
        "server_cpu_us_per_op": r["server_cpu_us_per_op"],
        "p99_us": r["latency_us"]["p99"],
        "ops_per_sec": r["ops_per_sec"],
    }
    # What the flash tier did during the run (reads from flash, how many
    # went to the I/O threads, items brought back into memory).
    for name in ("extstore_objects_read", "strata_extstore_reads_async", "recache_from_extstore"):
        if name in after:
            res[name] = int(after[name]) - int(before.get(name, 0))
    return res


def paired_reads(a, results):
    """Bar 3 in rounds: both servers filled and alive at once, the read run
    repeated `--rounds` times with the servers taking turns (the order
    rotating each round), and the medians reported: one run's noise on
    this 2-core machine decides nothing, paired rounds do."""
    servers = {}
    try:
        for kind in a.servers.split(","):
            flash = os.path.join(a.dir, f"{kind}.flash")
            if os.path.exists(flash):
                os.unlink(flash)
            port = free_port()
            proc, cmd, _ = start(kind, a, port, flash)
            servers[kind] = (proc, port)
            fill(port, a.items, a.value, a.rate)
            print(kind, "filled", flush=True)
        kinds = list(servers)
        runs = {k: [] for k in kinds}
        cold = {k: [] for k in kinds}
        for rnd in range(a.rounds + a.cold_rounds):
            order = kinds[rnd % len(kinds) :] + kinds[: rnd % len(kinds)]
            for kind in order:
                proc, port = servers[kind]
                into = runs if rnd < a.rounds else cold
                if into is cold and not drop_caches():
                    print("cold rounds need root (drop_caches)", flush=True)
                    into = None
                if into is None:
                    continue
                with tempfile.TemporaryDirectory() as out:
                    into[kind].append(bench_reads(a, port, proc.pid, out))
                print(kind, "cold" if into is cold else "", "round", rnd, into[kind][-1], flush=True)
        fields = ("hit_ratio", "server_cpu_us_per_op", "p99_us", "ops_per_sec")
        for kind in kinds:
            med = lambda rs, f: sorted(r[f] for r in rs)[len(rs) // 2]  # noqa: E731
            results[kind] = {"rounds": runs[kind], "median": {f: med(runs[kind], f) for f in fields}}
            print(kind, "median", results[kind]["median"], flush=True)
            if cold[kind]:
                results[kind]["cold_rounds"] = cold[kind]
                results[kind]["cold_median"] = {f: med(cold[kind], f) for f in fields}
                print(kind, "cold median", results[kind]["cold_median"], flush=True)
    finally:
        for proc, _ in servers.values():
            proc.kill()
            proc.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--items", type=int, default=5_000_000)
    p.add_argument("--value", type=int, default=1000)
    p.add_argument("--rate", type=int, default=40_000)
    p.add_argument("--memory", type=int, default=256)
    p.add_argument("--flash-size", default="6G")
    p.add_argument("--dir", default="/var/tmp/strata-flashbench")
    p.add_argument("--part", default="capacity,reads,restart")
    p.add_argument("--servers", default="strata,memcached")
    p.add_argument("--duration", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3, help="with --part paired: read runs per server")
    p.add_argument("--cold-rounds", type=int, default=0,
                   help="with --part paired: more runs each, the page cache dropped before each (root)")
    p.add_argument("--strata-bin", default=os.path.join(ROOT, "target", "release", "strata"))
    p.add_argument("--bench-bin", default=os.path.join(ROOT, "target", "release", "strata-bench"))
    p.add_argument("--out")
    a = p.parse_args()
    parts = a.part.split(",")
    os.makedirs(a.dir, exist_ok=True)
    results = {"args": vars(a)}
    if parts == ["paired"]:
        paired_reads(a, results)
    for kind in a.servers.split(",") if parts != ["paired"] else []:
        flash = os.path.join(a.dir, f"{kind}.flash")
        snap = os.path.join(a.dir, f"{kind}.snap") if kind == "strata" and "restart" in parts else None
        for path in (flash,):
            if os.path.exists(path):
                os.unlink(path)
        if snap:
            shutil.rmtree(snap, ignore_errors=True)
            os.makedirs(snap)
        port = free_port()
        proc, cmd, _ = start(kind, a, port, flash, snap)
        r = {"command": " ".join(cmd)}
        try:
            if parts:
                r["fill_rate"] = round(fill(port, a.items, a.value, a.rate))
                time.sleep(2)
                r["rss_after_fill"] = rss(proc.pid)
                st = stats(port)
                r["curr_items"] = int(st.get("curr_items", 0))
                r["evictions"] = int(st.get("evictions", 0))
                r["flash_items"] = int(st.get("extstore_objects_used", 0))
                if kind == "strata":
                    r["ram_per_flash_item"] = float(st.get("strata_extstore_ram_per_item", 0))
                    r["extstore_ram_bytes"] = int(st.get("strata_extstore_ram_bytes", 0))
                print(kind, "filled", r, flush=True)
            if "capacity" in parts:
                t0 = time.monotonic()
                r["exact"], r["wrong"], r["missing"] = check(port, a.items, a.value)
                r["check_secs"] = round(time.monotonic() - t0, 1)
                r["rss_after_check"] = rss(proc.pid)
                print(kind, "checked", r, flush=True)
            if "reads" in parts:
                with tempfile.TemporaryDirectory() as out:
                    r["reads"] = bench_reads(a, port, proc.pid, out)
                r["rss_after_reads"] = rss(proc.pid)
                print(kind, "reads", r["reads"], flush=True)
            if "restart" in parts and snap:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=600)
                # Cold: the snapshot and the flash file are read from disk.
                r["restart_cold"] = drop_caches()
                proc, _, ready = start(kind, a, port, flash, snap)
                r["restart_ready_secs"] = round(ready, 2)
                st = stats(port)
                r["restart_curr_items"] = int(st.get("curr_items", 0))
                sample = max(1, a.items // 20000)
                s = connect(port)
                exact = wrong = 0
                for i in range(0, a.items, sample):
                    s.sendall(b"get %s\r\n" % key(i))
                    out = recv_until(s, b"END\r\n")
                    if out == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key(i), a.value, value(i, a.value)):
                        exact += 1
                    elif out != b"END\r\n":
                        wrong += 1
                s.close()
                r["restart_sample"] = {"checked": len(range(0, a.items, sample)), "exact": exact, "wrong": wrong}
                print(kind, "restart", r["restart_ready_secs"], r["restart_sample"], flush=True)
        finally:
            proc.kill()
            proc.wait()
        results[kind] = r
    print(json.dumps(results, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
