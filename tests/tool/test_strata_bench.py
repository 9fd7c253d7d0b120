"""strata-bench end to end: it starts the servers itself, drives each
protocol, and its counts add up. Functional only: no figure is asserted
beyond what the workload fixes (request counts, hits, errors)."""

import json
import os
import shutil
import subprocess

import pytest

from harness import ROOT

BENCH = os.environ.get("STRATA_BENCH_BIN", os.path.join(ROOT, "target", "release", "strata-bench"))

# `make test` builds it; WIRE_TARGET=memcached runs skip the cargo build.
pytestmark = pytest.mark.skipif(not os.path.exists(BENCH), reason=f"{BENCH} not built")


def run(tmp_path, *args, servers="strata,memcached"):
    out = tmp_path / "out"
    cmd = [BENCH, "run", "-q", "--server", servers, "--out", str(out), "--memory-mb", "64", *args]
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    report = json.loads((out / "run.json").read_text())
    assert (out / "run.md").read_text().startswith("### run")
    return report, out


@pytest.mark.parametrize("protocol", ["text", "meta", "binary"])
def test_counts_add_up_for_each_memcached_protocol(tmp_path, protocol):
    report, out = run(
        tmp_path, "--protocol", protocol, "--ops", "3000", "--keys", "500", "--ratio", "1:2",
        "--multiget", "4", "--pipeline", "4", "-c", "4",
    )
    assert [r["server"] for r in report["runs"]] == ["strata", "memcached"]
    for r in report["runs"]:
        assert r["requests"] == 3000 and r["errors"] == 0
        assert r["sets"] + r["gets"] == 3000
        assert r["keys"] == 4 * r["gets"]
        # Every key was set during warm-up and nothing is evicted.
        assert r["hits"] == r["keys"] and r["misses"] == 0
        assert r["server_cpu_us_per_op"] is not None and r["server_rss_bytes"] > 0
        assert r["latency_us"]["p50"] <= r["latency_us"]["p99"] <= r["latency_us"]["max"]
    assert (out / "run-run.svg").read_text().startswith("<svg")


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_redis_is_driven_over_resp(tmp_path):
    report, _ = run(tmp_path, "--ops", "2000", "--keys", "300", "--multiget", "3", servers="redis")
    (r,) = report["runs"]
    assert r["protocol"] == "resp" and r["requests"] == 2000 and r["errors"] == 0
    assert r["hits"] == r["keys"]
    assert r["version"].startswith("Redis server")


def test_capacity_mode_fills_until_eviction(tmp_path):
    report, _ = run(
        tmp_path, "--mode", "capacity", "--value-size", "1000", "--keys", "2000000",
        "--pipeline", "16", "-c", "4", servers="strata",
    )
    (r,) = report["runs"]
    c = r["capacity"]
    assert c["evictions"] > 0 and c["first_eviction_at"] is not None
    assert 0 < c["items"] < c["written"]
    # 64 MB holds at most 64 MB of 1000-byte values.
    assert c["items"] * 1000 < 64 * 1024 * 1024


def test_open_loop_holds_the_rate(tmp_path):
    report, _ = run(tmp_path, "--rate", "2000", "--duration", "1.5", "--keys", "100", "-c", "2", servers="strata")
    (r,) = report["runs"]
    assert 2500 <= r["requests"] <= 3500


def test_a_traced_run_replays_to_the_same_counts(tmp_path):
    """--trace writes what the run sent (libCacheSim's CSV: the gets of a
    cache-aside run, the warm-up's count in the JSON); a replay of it sends
    the same gets, and a cache that evicts nothing hits on every get but
    each key's first."""
    report, out = run(
        tmp_path, "--mode", "hit-ratio", "--keys", "400", "--key-dist", "zipf:0.9", "--value-size", "100-300",
        "--warmup-ops", "1000", "--ops", "2000", "-c", "4", "--pipeline", "4", "--trace", servers="strata",
    )
    (r,) = report["runs"]
    trace = out / "run.run.trace.csv"
    meta = json.loads((out / "run.run.trace.csv.json").read_text())
    lines = trace.read_text().splitlines()
    assert lines[0] == "time,obj_id,obj_size,op,ttl"
    rows = [line.split(",") for line in lines[1:]]
    assert [int(t) for t, *_ in rows] == list(range(1, len(rows) + 1))
    assert {op for *_, op, _ in rows} == {"get"}
    # The measured phase's gets are the lines after the warm-up.
    assert meta["requests"] == len(rows) and len(rows) - meta["warmup"] == r["gets"]
    assert meta["server"] == "strata" and meta["memory_mb"] == 64 and meta["key_size"] == 14
    # A key's size is the same on every line: 14-byte key + its value.
    sizes = {}
    for _, key, size, *_ in rows:
        assert sizes.setdefault(key, size) == size and 114 <= int(size) <= 314

    out2 = tmp_path / "replay"
    cmd = [BENCH, "run", "-q", "--server", "strata,memcached", "--out", str(out2), "--memory-mb", "64",
           "--mode", "replay", "--replay", str(trace), "-c", "4", "--pipeline", "4"]
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    measured = rows[meta["warmup"]:]
    seen_before = {key for _, key, *_ in rows[: meta["warmup"]]}
    for rr in json.loads((out2 / "run.json").read_text())["runs"]:
        assert rr["gets"] == len(measured) and rr["errors"] == 0
        # A miss is a key's first get (then it is set): nothing is evicted
        # from 64 MB. Slack: a get of a key whose set is still in flight
        # (16 requests in flight at most), and the sets still queued when
        # the warm-up's last line went (16 at most).
        firsts = len({key for _, key, *_ in measured} - seen_before)
        assert firsts <= rr["misses"] <= firsts + 32, (rr["server"], rr["misses"], firsts)


@pytest.mark.parametrize("fill", [True, False])
def test_a_replay_sets_after_a_miss_only_where_the_trace_says(tmp_path, fill):
    """A load-mode trace (gets and sets mixed, no set after a miss) says so
    in its JSON, and its replay sets nothing after a miss, as the original
    clients did not: bench/policies.py then only looks the key up too.
    One connection, one request in flight: the order is the trace's."""
    report, out = run(
        tmp_path, "--ratio", "1:1", "--keys", "50", "--ops", "200", "-c", "1", "--trace", servers="strata",
    )
    meta = json.loads((out / "run.run.trace.csv.json").read_text())
    assert meta["fill_on_miss"] is False
    trace = tmp_path / "t.csv"
    # Key 1 is asked for twice and never set; key 2 is set, then read.
    trace.write_text("time,obj_id,obj_size,op,ttl\n1,1,114,get,0\n2,1,114,get,0\n3,2,114,set,0\n4,2,114,get,0\n")
    (tmp_path / "t.csv.json").write_text(json.dumps({
        "scenario": "s", "workload": "w", "server": "strata", "memory_mb": 64, "warmup": 0,
        "requests": 4, "key_size": 14, "fill_on_miss": fill,
    }))
    out2 = tmp_path / "replay"
    cmd = [BENCH, "run", "-q", "--server", "strata,memcached", "--out", str(out2), "--memory-mb", "64",
           "--mode", "replay", "--replay", str(trace), "-c", "1", "--pipeline", "1"]
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    for rr in json.loads((out2 / "run.json").read_text())["runs"]:
        # With the fill, key 1's first miss is followed by its set (counted)
        # and its second get hits; without, it misses again.
        assert (rr["gets"], rr["sets"], rr["errors"]) == (3, 2 if fill else 1, 0), rr["server"]
        assert (rr["hits"], rr["misses"]) == ((2, 1) if fill else (1, 2)), rr["server"]
