"""strata-bench end to end: it starts the servers itself, drives each
protocol, and its counts add up. Functional only: no figure is asserted
beyond what the workload fixes (request counts, hits, errors)."""

import json
import os
import shutil
import subprocess

import pytest

from harness import ROOT

BENCH = os.path.join(ROOT, "target", "release", "strata-bench")

# `make test` builds it; WIRE_TARGET=memcached runs skip the cargo build.
pytestmark = pytest.mark.skipif(not os.path.exists(BENCH), reason="target/release/strata-bench not built")


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
