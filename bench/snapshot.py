#!/usr/bin/env python3
"""Snapshots and warm restarts, strata and Redis side by side (issue 16).

Bar 1, save and load (`--items 5000000 --value 1000`, about 5 GB):
  - the disk's sequential write and read bandwidth, measured in the same run
    with `dd ... conv=fdatasync` and a cold-cache `dd` read;
  - strata: fill, `snapshot` (timed by the server: snapshot_last_duration_us),
    kill -9, drop the page cache, start again and time it to the open port;
  - Redis 7: the same data, `SAVE` (timed by the client), kill, drop the
    page cache, start again and time it until PING answers PONG.
  Every server is checked afterwards: a sample of keys must read back exact.

Bar 2, an online snapshot during workload 2 (1 set : 2 gets, 1000-byte
values over 100k keys, 16 connections, strata-bench): the same run with
and without snapshots taken back to back for its whole length; throughput,
p99 and the peak RSS against the RSS before it. Redis with `BGSAVE` back
to back in the same way, its fork's RSS sampled too.

    .venv/bin/python bench/snapshot.py [--items N] [--value BYTES] [--compression]
        [--dir DIR] [--strata-bin PATH] [--bench-bin PATH] [--skip-redis]
        [--part save-load,online] [--duration SECS] [--out FILE.md]
        [--keep-snapshot] [--load-only] [--warm] [--strata-log FILE]

Many small items (issue 45, item 2): `--value 0` stores JSON objects of
100-300 bytes (mean 200) instead of random bytes, and `--compression` adds
a row for strata with `-o compression=on`; each strata row is compared
with Redis's save plus load to serving.

Load-only rounds (issue 34): one run with --keep-snapshot fills, saves and
leaves strata's snapshot in DIR/strata; later runs with --load-only (same
--items and --value) skip the fill and the save and load that file again,
still dropping the page cache and reading the file cold with dd just
before each load, so several builds can be timed in turn on one file.
Values come from a fixed seed, so each load is checked all the same.

Needs root for dropping the page cache (`/proc/sys/vm/drop_caches`); without
it the loads read from the page cache and the report says so.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import harness  # noqa: E402

# Fixed, so that a --load-only run checks the values an earlier run saved.
RANDOM = random.Random(16).randbytes(1 << 20)


def value(i, n):
    """Item i's value: `n` random bytes, or with `n` = 0 (--json) a JSON
    object of 100-300 bytes."""
    if n == 0:
        return json_value(i)
    at = (i * 7919) % (len(RANDOM) - n)
    return RANDOM[at : at + n]


# The words JSON values' text is drawn from (English-like, so that a
# compressor finds what it would in real records).
WORDS = (b"the of and to in is was for on that with as by at from his her an were are which this be has had not"
         b" user account order item price total status active pending shipped delivered review rating city"
         b" country street email phone name first last created updated session token device mobile desktop"
         b" browser agent region zone cache value key count level score group admin member guest").split()
TEXT = b" ".join(WORDS[(i * 7 + i // 13) % len(WORDS)] for i in range(20000))
TAGS = [b"new", b"sale", b"vip", b"eu", b"us", b"apac", b"beta", b"mobile", b"web", b"api", b"gold", b"silver",
        b"trial", b"churn", b"loyal", b"test"]


def json_value(i):
    """A JSON object of 100-300 bytes (the length drawn per item), fixed by i."""
    h = (i * 0x9E3779B1) & 0xFFFFFFFF
    size = 100 + h % 201
    head = b'{"id":%d,"user":"user_%d","score":%d.%02d,"active":%s,"tags":["%s","%s"],"bio":"' % (
        i, h % 1000003, h % 1000, h % 97, b"true" if h & 1 else b"false", TAGS[h % 16], TAGS[(h >> 4) % 16])
    at = (h >> 8) % (len(TEXT) - 300)
    return head + TEXT[at : at + max(0, size - len(head) - 2)] + b'"}'


def key(i):
    return b"key:%010d" % i


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def dd_rate(out):
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", out)
    return int(m.group(1)) / float(m.group(2)) / 1e6


def dd_write(path, mb):
    """Write MB/s with fdatasync for an `mb` MiB file of random bytes (copied
    from RAM: /dev/urandom itself is slower than a disk). Measured just
    before each save: this machine's disk speed moves from minute to minute."""
    src = "/dev/shm/strata-snapbench-dd"
    subprocess.run(["dd", "if=/dev/urandom", f"of={src}", "bs=1M", f"count={mb}"], capture_output=True, check=True)
    w = subprocess.run(
        ["dd", f"if={src}", f"of={path}", "bs=1M", f"count={mb}", "conv=fdatasync"], capture_output=True, text=True
    )
    os.unlink(src)
    os.unlink(path)
    return dd_rate(w.stderr)


def dd_read(path, warm=False):
    """Read MB/s of the file just saved, measured just before it is loaded:
    cold (the page cache dropped first), or with `warm` as the file is
    after a stop wrote it (read once first, so that it is all cached)."""
    cold = False if warm else drop_caches()
    if warm:
        subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M"], capture_output=True, check=True)
    r = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M"], capture_output=True, text=True)
    return dd_rate(r.stderr), cold


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_until(s, end, buf=b""):
    while not buf.endswith(end):
        chunk = s.recv(1 << 20)
        if not chunk:
            raise RuntimeError("connection closed")
        buf += chunk
    return buf


def mc_fill(port, items, n):
    s = connect(port)
    batch = []
    for i in range(items):
        v = value(i, n)
        batch.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(i), len(v), v))
        if len(batch) == 2000:
            s.sendall(b"".join(batch))
            batch = []
    s.sendall(b"".join(batch) + b"mn\r\n")
    recv_until(s, b"MN\r\n")
    s.close()


def mc_stats(port):
    s = connect(port)
    s.sendall(b"stats\r\n")
    out = recv_until(s, b"END\r\n").decode()
    s.close()
    return dict(line.split(" ", 2)[1:] for line in out.split("\r\n") if line.startswith("STAT "))


def mc_check(port, items, n, sample=20000):
    s = connect(port)
    step = max(1, items // sample)
    bad = 0
    for i in range(0, items, step):
        s.sendall(b"get %s\r\n" % key(i))
        out = recv_until(s, b"END\r\n")
        v = value(i, n)
        if out != b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key(i), len(v), v):
            bad += 1
    s.close()
    return bad


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def redis_call(s, *args):
    s.sendall(resp(*args))
    return recv_until(s, b"\r\n") if args[0] != b"GET" else None


def redis_fill(port, items, n):
    s = connect(port)
    batch = []
    sent = 0
    for i in range(items):
        batch.append(resp(b"SET", key(i), value(i, n)))
        if len(batch) == 2000:
            s.sendall(b"".join(batch))
            sent += len(batch)
            batch = []
            # Read the +OKs as they come, so neither side's buffer fills.
            need = sent * 5
            got = 0
            while got < need:
                got += len(s.recv(need - got))
            sent = 0
    s.sendall(b"".join(batch))
    need, got = len(batch) * 5, 0
    while got < need:
        got += len(s.recv(need - got))
    s.close()


def redis_check(port, items, n, sample=20000):
    s = connect(port)
    step = max(1, items // sample)
    bad = 0
    for i in range(0, items, step):
        s.sendall(resp(b"GET", key(i)))
        v = value(i, n)
        want = b"$%d\r\n%s\r\n" % (len(v), v)
        buf = b""
        while len(buf) < len(want) and not buf.startswith(b"$-1\r\n"):
            buf += s.recv(len(want) - len(buf))
        bad += buf != want
    s.close()
    return bad


def wait_port(port, proc, timeout=600):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("server exited while starting")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return time.monotonic() - t0
        except OSError:
            time.sleep(0.005)
    raise RuntimeError("server did not open its port")


def rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def mean_value(args):
    return 200 if args.value == 0 else args.value


def strata_save_load(args, work, compressed=False):
    snapdir = os.path.join(work, "strata")
    snapfile = os.path.join(snapdir, "strata.snapshot")
    mem = str(args.items * (mean_value(args) + 40) // (1 << 20) + 512)
    port = harness.free_port()
    cmd = [args.strata_bin, "-p", str(port), "-m", mem, "-t", "2", "--snapshot-dir", snapdir]
    if compressed:
        cmd += ["-o", "compression=on"]
    if args.load_only and os.path.exists(snapfile):
        # A snapshot kept by an earlier --keep-snapshot run: loaded again,
        # not filled and saved again (the dd read and cache drop still
        # come just before the load).
        items, fill_s, save_s, wbw, size = args.items, float("nan"), float("nan"), float("nan"), os.path.getsize(snapfile)
    else:
        shutil.rmtree(snapdir, ignore_errors=True)
        os.makedirs(snapdir)
        items, fill_s, save_s, wbw, size = strata_fill_save(args, work, cmd, port)
    rbw, _ = dd_read(snapfile, args.warm)
    cold = False if args.warm else drop_caches()
    t0 = time.monotonic()
    log = open(args.strata_log, "ab") if args.strata_log else subprocess.DEVNULL
    p = subprocess.Popen(cmd, stderr=log)
    ready_s = wait_port(port, p)
    st = mc_stats(port)
    load_s = int(st["snapshot_load_duration_us"]) / 1e6
    loaded = int(st["curr_items"])
    bad = mc_check(port, args.items, args.value)
    p.send_signal(signal.SIGKILL)
    p.wait()
    if log is not subprocess.DEVNULL:
        log.close()
    if not (args.keep_snapshot or args.load_only):
        shutil.rmtree(snapdir, ignore_errors=True)
    return dict(server="strata, compressed" if compressed else "strata", items=items, loaded=loaded, bytes=size, fill_s=fill_s, save_s=save_s,
                load_s=load_s, ready_s=ready_s, bad=bad, cold=cold, wbw=wbw, rbw=rbw)


def strata_fill_save(args, work, cmd, port):
    """Fills a server, saves a snapshot and kills it: items, fill s, save s, dd write MB/s, snapshot bytes."""
    p = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    t0 = time.monotonic()
    mc_fill(port, args.items, args.value)
    fill_s = time.monotonic() - t0
    items = int(mc_stats(port)["curr_items"])
    wbw = dd_write(os.path.join(work, "dd.bin"), min(max(args.items * mean_value(args) >> 20, 256), 4096))
    s = connect(port)
    s.sendall(b"snapshot\r\n")
    assert recv_until(s, b"\r\n") == b"OK\r\n"
    while True:
        st = mc_stats(port)
        if st["snapshot_in_progress"] == "0" and int(st["snapshot_saves"]) + int(st["snapshot_save_errors"]) >= 1:
            break
        time.sleep(0.05)
    assert st["snapshot_last_result"] == "ok", st
    save_s = int(st["snapshot_last_duration_us"]) / 1e6
    size = int(st["snapshot_last_bytes"])
    p.send_signal(signal.SIGKILL)
    p.wait()
    return items, fill_s, save_s, wbw, size


def redis_save_load(args, work):
    rdir = os.path.join(work, "redis")
    shutil.rmtree(rdir, ignore_errors=True)
    os.makedirs(rdir)
    maxmem = f"{args.items * (mean_value(args) + 100) // (1 << 20) + 1024}mb"
    port = harness.free_port()
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
           "--maxmemory", maxmem, "--maxmemory-policy", "allkeys-lru", "--dir", rdir, "--dbfilename", "dump.rdb",
           "--protected-mode", "no"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    t0 = time.monotonic()
    redis_fill(port, args.items, args.value)
    fill_s = time.monotonic() - t0
    s = connect(port)
    items = int(redis_call(s, b"DBSIZE")[1:-2])
    wbw = dd_write(os.path.join(work, "dd.bin"), min(max(args.items * mean_value(args) >> 20, 256), 4096))
    t0 = time.monotonic()
    assert redis_call(s, b"SAVE") == b"+OK\r\n"
    save_s = time.monotonic() - t0
    size = os.path.getsize(os.path.join(rdir, "dump.rdb"))
    p.send_signal(signal.SIGKILL)
    p.wait()
    rbw, _ = dd_read(os.path.join(rdir, "dump.rdb"))
    cold = drop_caches()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    # Redis opens its port before loading and answers -LOADING meanwhile.
    while True:
        try:
            s = connect(port)
            if redis_call(s, b"PING") == b"+PONG\r\n":
                break
            s.close()
        except OSError:
            pass
        time.sleep(0.005)
    ready_s = time.monotonic() - t0
    loaded = int(redis_call(s, b"DBSIZE")[1:-2])
    bad = redis_check(port, args.items, args.value)
    p.send_signal(signal.SIGKILL)
    p.wait()
    shutil.rmtree(rdir, ignore_errors=True)
    return dict(server="redis", items=items, loaded=loaded, bytes=size, fill_s=fill_s, save_s=save_s,
                load_s=ready_s, ready_s=ready_s, bad=bad, cold=cold, wbw=wbw, rbw=rbw)


def bench_run(args, kind, port, pid, name, out):
    cmd = [args.bench_bin, "run", "--server", kind, "--addr", f"127.0.0.1:{port}", "--pid", str(pid),
           "--ratio", "1:2", "--value-size", "1000", "--keys", "100000", "-c", "16", "-t", "1",
           "--duration", str(args.duration), "--name", name, "--out", out, "-q"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, name + ".json")) as f:
        rep = json.load(f)
    r = rep["runs"][0]
    return r["ops_per_sec"], r["latency_us"]["p99"]


def online(args, work, kind):
    """Workload 2 without, then with, snapshots back to back."""
    out = os.path.join(work, "bench-out")
    os.makedirs(out, exist_ok=True)
    snapdir = os.path.join(work, f"online-{kind}")
    shutil.rmtree(snapdir, ignore_errors=True)
    os.makedirs(snapdir)
    port = harness.free_port()
    if kind == "strata":
        cmd = [args.strata_bin, "-p", str(port), "-m", "1024", "-t", "2", "--snapshot-dir", snapdir]
    else:
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--maxmemory", "1024mb", "--maxmemory-policy", "allkeys-lru", "--dir", snapdir,
               "--protected-mode", "no"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, p)
    results = {}
    for mode in ("plain", "snapshots"):
        # The first run's warm-up fills the 100k keys; the second finds them.
        stop = threading.Event()
        peak = {"rss": 0, "child": 0, "saves": 0}
        base = rss(p.pid)

        def sample():
            while not stop.is_set():
                peak["rss"] = max(peak["rss"], rss(p.pid))
                for c in children(p.pid):
                    peak["child"] = max(peak["child"], rss(c))
                time.sleep(0.02)

        def snapshots():
            s = connect(port)
            while not stop.is_set():
                if kind == "strata":
                    s.sendall(b"snapshot\r\n")
                    recv_until(s, b"\r\n")
                    while not stop.is_set():
                        st = mc_stats(port)
                        if st["snapshot_in_progress"] == "0":
                            peak["saves"] = int(st["snapshot_saves"])
                            break
                        time.sleep(0.05)
                else:
                    s.sendall(resp(b"BGSAVE"))
                    recv_until(s, b"\r\n")
                    while not stop.is_set():
                        s.sendall(resp(b"INFO", b"persistence"))
                        info = recv_until(s, b"\r\n\r\n")
                        info += b"" if b"rdb_bgsave_in_progress" in info else recv_until(s, b"\r\n")
                        if b"rdb_bgsave_in_progress:0" in info:
                            peak["saves"] += 1
                            break
                        time.sleep(0.05)
            s.close()

        threads = [threading.Thread(target=sample)]
        if mode == "snapshots":
            threads.append(threading.Thread(target=snapshots))
        for t in threads:
            t.start()
        ops, p99 = bench_run(args, kind, port, p.pid, f"{kind}-{mode}", out)
        stop.set()
        for t in threads:
            t.join()
        results[mode] = dict(ops=ops, p99=p99, base=base, peak=peak["rss"], child=peak["child"], saves=peak["saves"])
    p.send_signal(signal.SIGKILL)
    p.wait()
    shutil.rmtree(snapdir, ignore_errors=True)
    return results


def durable(args, work):
    """1000-byte sets from 16 connections: strata --durability always and
    interval against Redis appendfsync always and everysec."""
    out = os.path.join(work, "bench-out")
    os.makedirs(out, exist_ok=True)
    rows = []
    for kind, mode in [("strata", "always"), ("redis", "always"), ("strata", "interval"), ("redis", "everysec")]:
        d = os.path.join(work, f"durable-{kind}-{mode}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        port = harness.free_port()
        if kind == "strata":
            cmd = [args.strata_bin, "-p", str(port), "-m", "1024", "-t", "2", "--snapshot-dir", d,
                   "--durability", mode]
        else:
            cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                   "--appendfsync", mode, "--maxmemory", "1024mb", "--maxmemory-policy", "allkeys-lru",
                   "--dir", d, "--protected-mode", "no"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port, p)
        name = f"durable-{kind}-{mode}"
        bench = [args.bench_bin, "run", "--server", kind, "--addr", f"127.0.0.1:{port}", "--pid", str(p.pid),
                 "--ratio", "1:0", "--value-size", "1000", "--keys", "100000", "-c", "16", "-t", "2",
                 "--duration", str(args.duration), "--name", name, "--out", out, "-q"]
        subprocess.run(bench, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, name + ".json")) as f:
            r = json.load(f)["runs"][0]
        syncs, per_sync, sync_us = "", "", ""
        if kind == "strata":
            st = mc_stats(port)
            syncs = st.get("durability_syncs", "")
            n = int(syncs or 0)
            if n:
                # Records a commit carried, and what one took (the stat is
                # missing from binaries before issue 34's preallocation).
                per_sync = f"{int(st.get('durability_log_records', 0)) / n:.1f}"
                if "durability_sync_us" in st:
                    sync_us = f"{int(st['durability_sync_us']) / n:.0f}"
        p.send_signal(signal.SIGKILL)
        p.wait()
        shutil.rmtree(d, ignore_errors=True)
        rows.append((kind, mode, r["ops_per_sec"], r["latency_us"]["p50"], r["latency_us"]["p99"],
                     r.get("server_cpu_us_per_op"), syncs, per_sync, sync_us))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=5_000_000)
    ap.add_argument("--value", type=int, default=1000, help="value bytes; 0: JSON objects of 100-300 bytes")
    ap.add_argument("--compression", action="store_true",
                    help="save-load: strata with -o compression=on too (a row of its own)")
    ap.add_argument("--dir", default="/var/tmp/strata-snapbench")
    ap.add_argument("--strata-bin", default=harness.STRATA_PROD_BIN)
    ap.add_argument("--bench-bin", default=os.path.join(harness.ROOT, "target", "release", "strata-bench"))
    ap.add_argument("--skip-redis", action="store_true")
    ap.add_argument("--warm", action="store_true",
                    help="load with the snapshot in the page cache (as a restart right after a stop finds it);"
                    " the dd read is then a warm one too")
    ap.add_argument("--part", default="save-load,online,durable")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--out")
    ap.add_argument("--keep-snapshot", action="store_true",
                    help="leave strata's snapshot in DIR/strata for later --load-only runs")
    ap.add_argument("--load-only", action="store_true",
                    help="strata: load the snapshot a --keep-snapshot run left in DIR/strata (no fill, no save;"
                         " still a cache drop and a cold dd read before the load); fills and saves if there is none")
    ap.add_argument("--strata-log", help="append the loading server's log (stderr) to this file")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    parts = args.part.split(",")
    lines = [f"Command: `{' '.join(sys.argv)}`", ""]
    if "save-load" in parts:
        lines.append("dd is run just before each save (write, conv=fdatasync) and each load (a cold read of the"
                     " file about to be loaded); the bars are 1.1 x bytes / write rate and 1.25 x bytes / read rate.")
        lines.append("")
        lines.append("| server | items | loaded | bytes | dd write MB/s | save s | save bar s | dd read MB/s | load s |"
                     " to serving s | load bar s | cold | wrong |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        rows = [strata_save_load(args, args.dir)]
        if args.compression:
            rows.append(strata_save_load(args, args.dir, compressed=True))
        if not args.skip_redis:
            rows.append(redis_save_load(args, args.dir))
        for r in rows:
            save_bar = 1.1 * r["bytes"] / (r["wbw"] * 1e6)
            load_bar = 1.25 * r["bytes"] / (r["rbw"] * 1e6)
            lines.append(
                f"| {r['server']} | {r['items']} | {r['loaded']} | {r['bytes']} | {r['wbw']:.0f} | {r['save_s']:.2f} |"
                f" {save_bar:.2f} | {r['rbw']:.0f} | {r['load_s']:.2f} | {r['ready_s']:.2f} | {load_bar:.2f} |"
                f" {'yes' if r['cold'] else 'no'} | {r['bad']} |"
            )
        if not args.skip_redis:
            rd = rows[-1]
            lines.append("")
            for s in rows[:-1]:
                ratio = (rd["save_s"] + rd["ready_s"]) / (s["save_s"] + s["ready_s"])
                lines.append(f"{s['server']}: save + load to serving {ratio:.1f}x faster than Redis's")
        print("\n".join(lines), flush=True)
    if "online" in parts:
        lines.append("")
        lines.append("| server | snapshots | ops/s | p99 µs | RSS before MB | peak RSS MB | fork child peak MB | saves |")
        lines.append("|---|---|---|---|---|---|---|---|")
        kinds = ["strata"] + ([] if args.skip_redis else ["redis"])
        for kind in kinds:
            res = online(args, args.dir, kind)
            for mode, r in res.items():
                lines.append(
                    f"| {kind} | {'back to back' if mode == 'snapshots' else 'none'} | {r['ops']:.0f} | {r['p99']:.0f} |"
                    f" {r['base'] / 1e6:.0f} | {r['peak'] / 1e6:.0f} | {r['child'] / 1e6:.0f} | {r['saves']} |"
                )
            a, b = res["plain"], res["snapshots"]
            lines.append(f"| {kind} | ratio | {b['ops'] / a['ops']:.2f} | {b['p99'] / max(a['p99'], 1):.2f} | | "
                         f"{(b['peak'] - a['peak']) / max(a['peak'], 1) * 100:+.1f}% | | |")
        print("\n".join(lines), flush=True)
    if "durable" in parts:
        lines.append("")
        lines.append("| server | fsync | sets/s | p50 µs | p99 µs | server CPU µs/op | fdatasyncs | records/sync |"
                     " µs/fdatasync |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for kind, mode, ops, p50, p99, cpu, syncs, per_sync, sync_us in durable(args, args.dir):
            cpu = f"{cpu:.1f}" if cpu else ""
            lines.append(f"| {kind} | {mode} | {ops:.0f} | {p50:.0f} | {p99:.0f} | {cpu} | {syncs} | {per_sync} |"
                         f" {sync_us} |")
        print("\n".join(lines), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
