#!/usr/bin/env python3
"""The literature's eviction policies on the request sequence a server saw.

Replays a trace written by `strata-bench ... --out DIR --trace` through
libCacheSim's policies (PyPI `libcachesim`) at the same bytes the servers
had, and prints their request and byte hit ratios beside the servers'
measured ones (from the strata-bench report in the same directory):

    target/release/strata-bench scenario bench/scenarios/5-hit-ratio.toml \\
        --out target/bench/policies --trace
    make bench-venv
    .venv-bench/bin/python bench/policies.py target/bench/policies/hit-ratio.*.trace.csv

The simulated cache holds exactly `memory_mb` MiB of objects, an object
being key plus value bytes with no metadata at all: a stricter test than
the servers', which pay for their index and headers inside `-m`. Only the
measured part counts (the lines after the trace's warm-up, its JSON's
`warmup`); a `set` line is an access that counts as no get (an overwrite
bumps the key, as memcached's LRU does). A get that misses inserts its key
only where the client set it after the miss (cache-aside, the JSON's
`fill_on_miss`); in a mix of gets and sets a miss inserts nothing, as on
the servers, and the policy only looks the key up. Belady is the offline optimum
(it knows every next access), the bound no online policy reaches.

`make bench-venv` installs libcachesim in .venv-bench (a benchmark
dependency, never the server's).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

import libcachesim as lcs

# Online policies first, then the offline bound.
POLICIES = ["LRU", "FIFO", "Clock", "ARC", "TwoQ", "LIRS", "S3FIFO", "Sieve", "WTinyLFU", "LHD", "GDSF", "Belady"]


class Trace:
    """The trace's lines as libCacheSim reads them, plus what it cannot
    carry: which lines are sets, and where the measured part starts."""

    def __init__(self, path: Path):
        self.path = path
        meta_path = Path(str(path) + ".json")
        self.meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        self.warmup = int(self.meta.get("warmup", 0))
        # Traces from before the field was written were all cache-aside.
        self.fill_on_miss = bool(self.meta.get("fill_on_miss", True))
        self.sets: list[bool] = []
        self.sizes: list[int] = []
        with path.open(newline="") as f:
            rows = csv.reader(f)
            next(rows, None)
            for row in rows:
                self.sets.append(row[3].strip() != "get")
                self.sizes.append(int(row[2]))
        self.has_sets = any(self.sets)
        # The oracle format carries each request's next access: Belady
        # needs it, and it reads faster than CSV for every policy.
        self.oracle = Path(tempfile.mkdtemp(prefix="policies-")) / (path.name + ".oracleGeneral")
        lcs.Util.convert_to_oracleGeneral(self.csv_reader()._reader, str(self.oracle))

    def csv_reader(self):
        p = lcs.ReaderInitParam(has_header=True, has_header_set=True, delimiter=",")
        p.time_field, p.obj_id_field, p.obj_size_field, p.op_field, p.ttl_field = 1, 2, 3, 4, 5
        return lcs.TraceReader(str(self.path), lcs.TraceType.CSV_TRACE, p)

    def reader(self, cap: int = -1):
        p = lcs.ReaderInitParam(cap_at_n_req=cap)
        return lcs.TraceReader(str(self.oracle), lcs.TraceType.ORACLE_GENERAL_TRACE, p)

    def measured(self) -> tuple[int, int]:
        """Gets after the warm-up, and the bytes they asked for."""
        n = b = 0
        for i in range(self.warmup, len(self.sizes)):
            if not self.sets[i]:
                n += 1
                b += self.sizes[i]
        return n, b


def simulate(trace: Trace, policy: str, cache_bytes: int) -> tuple[float, float]:
    """Request and byte hit ratio of the measured gets under `policy`."""
    gets, asked = trace.measured()
    if gets == 0:
        return float("nan"), float("nan")
    if not trace.has_sets:
        # Every line is a get: the measured part's misses are the whole
        # trace's less the warm-up's (the same requests, from empty).
        whole = getattr(lcs, policy)(cache_bytes)
        mr, bmr = whole.process_trace(trace.reader())
        n, total_bytes = len(trace.sizes), sum(trace.sizes)
        misses, missed = mr * n, bmr * total_bytes
        if trace.warmup > 0:
            warm = getattr(lcs, policy)(cache_bytes)
            wmr, wbmr = warm.process_trace(trace.reader(trace.warmup))
            misses -= wmr * trace.warmup
            missed -= wbmr * sum(trace.sizes[: trace.warmup])
        return 1 - misses / gets, 1 - missed / asked
    # Sets are accesses but not gets: one request at a time. A get that
    # misses inserts only if the client set the key after it.
    cache = getattr(lcs, policy)(cache_bytes)
    hits = hit_bytes = 0
    for i, req in enumerate(trace.reader()):
        if trace.sets[i] or trace.fill_on_miss:
            hit = cache.get(req)
        else:
            hit = cache.find(req, True) is not None
        if i >= trace.warmup and not trace.sets[i] and hit:
            hits += 1
            hit_bytes += trace.sizes[i]
    return hits / gets, hit_bytes / asked


def measured_servers(trace: Trace) -> list[tuple[str, float, float]]:
    """The servers' medians from the strata-bench report beside the trace."""
    scenario, workload = trace.meta.get("scenario"), trace.meta.get("workload")
    report = trace.path.parent / f"{scenario}.json"
    if not report.exists():
        return []
    runs = [r for r in json.loads(report.read_text())["runs"] if r["workload"]["name"] == workload]
    out = []
    for server in dict.fromkeys(r["server"] for r in runs):
        mine = [r for r in runs if r["server"] == server and r.get("hit_ratio") is not None]
        if not mine:
            continue
        mid = sorted(mine, key=lambda r: r["hit_ratio"])[len(mine) // 2]
        out.append((f"{server} (measured)", mid["hit_ratio"], mid.get("byte_hit_ratio") or float("nan")))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--memory-mb", type=float, help="cache size (default: the trace's run's memory_mb)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    a = ap.parse_args()
    results = {}
    for path in a.traces:
        t0 = time.time()
        trace = Trace(path)
        mb = a.memory_mb or trace.meta.get("memory_mb")
        if not mb:
            print(f"{path}: no memory_mb in its JSON; give --memory-mb", file=sys.stderr)
            return 2
        cache_bytes = int(mb * 1024 * 1024)
        gets, _ = trace.measured()
        rows = measured_servers(trace)
        for policy in a.policies.split(","):
            hr, bhr = simulate(trace, policy, cache_bytes)
            rows.append((policy, hr, bhr))
        name = f"{trace.meta.get('scenario', path.stem)}/{trace.meta.get('workload', '')}"
        print(f"\n{name}: {gets} measured gets of {len(trace.sizes)} lines, {mb:g} MiB "
              f"(recorded from {trace.meta.get('server', '?')}; {time.time() - t0:.0f} s)\n")
        print("| cache | request hit % | byte hit % |\n|---|---:|---:|")
        best = max((r for r in rows if "measured" not in r[0] and r[0] != "Belady"), key=lambda r: r[1])
        for who, hr, bhr in rows:
            mark = " (best online)" if who == best[0] else ""
            print(f"| {who}{mark} | {hr * 100:.1f} | {bhr * 100:.1f} |")
        results[name] = {who: {"hit_ratio": hr, "byte_hit_ratio": bhr} for who, hr, bhr in rows}
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
