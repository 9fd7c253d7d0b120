"""dist/: the Grafana dashboard and the Prometheus alert rules, checked
against a real Prometheus (Debian's) scraping live strata servers: every
series a dashboard panel or an alert rule queries exists, every dashboard
query runs, and every rule evaluates without error. strata only."""

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from harness import ROOT, Server, free_port
from wirelib import expect

pytestmark = pytest.mark.strata_only

DIST = Path(ROOT) / "dist"
DASHBOARD = DIST / "grafana" / "strata-dashboard.json"
ALERTS = DIST / "prometheus" / "strata-alerts.yml"
# The series names in a PromQL expression: ours all start with one of
# these prefixes; `up` is Prometheus' own.
SERIES = re.compile(r"\b(?:memcached|strata)_[a-z0-9_]+\b|\bup\b(?=\s*[{=<>!])")


def binary(name):
    path = shutil.which(name)
    assert path, f"make deps installs Debian's prometheus ({name})"
    return path


def dashboard_exprs():
    """Every PromQL expression of the dashboard's panels, Grafana's
    variables filled in; and its template variables' queries (Grafana's
    `label_values(...)`, not PromQL)."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    variables = [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return [e.replace("$__rate_interval", "1m").replace("$instance", ".*") for e in exprs], variables


def test_promtool_checks_the_rules():
    r = subprocess.run([binary("promtool"), "check", "rules", str(ALERTS)], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert b"SUCCESS" in r.stdout


def test_the_dashboard_takes_its_datasource_as_an_input():
    dash = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    for p in panels:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
        assert p["targets"] and all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in p["targets"])
    text = "\n".join(t["expr"] for p in panels for t in p["targets"])
    for needed in ('command="get",status="hit"', "memcached_limit_bytes", "memcached_slab_items_evicted_unfetched",
                   "memcached_max_connections", "memcached_extstore_bytes_used", "strata_extstore_read_errors",
                   "strata_snapshot_save_errors", "strata_durability_failed", "histogram_quantile"):
        assert needed in text, needed


@pytest.mark.not_over_flash("gives its own ext_path")
@pytest.mark.one_event_loop("Prometheus's queries of the exporter's series")
def test_a_real_prometheus_finds_every_series_they_query(tmp_path):
    # Two servers, as durable mode does not run with the flash tier yet:
    # one with the flash tier and snapshots, one in durable mode.
    ports = [free_port(), free_port()]
    servers = []
    prom = None
    try:
        servers.append(Server(["--metrics-listen", f"127.0.0.1:{ports[0]}", "-o",
                               f"ext_path={tmp_path / 'flash'}:64m", "--snapshot-dir", str(tmp_path / "a")]))
        servers.append(Server(["--metrics-listen", f"127.0.0.1:{ports[1]}", "--snapshot-dir", str(tmp_path / "b"),
                               "--durability", "interval"]))
        for srv in servers:
            c = srv.connect()
            # An item (stats items' class, memcached_slab_*), a hit and a miss.
            expect(c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n")
            expect(c, b"get a b\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n")
            c.close()
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {ALERTS}\n"
            "scrape_configs:\n  - job_name: strata\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{ports[0]}', '127.0.0.1:{ports[1]}']\n"
        )
        web = f"127.0.0.1:{free_port()}"
        prom = subprocess.Popen(
            [binary("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address={web}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def api(path, **params):
            url = f"http://{web}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    body = json.loads(r.read())
            except urllib.error.HTTPError as e:
                # A query Prometheus refuses; anything else (503 while it
                # starts) is for the caller's poll to retry.
                if e.code != 400:
                    raise
                pytest.fail(f"{path} {params}: {e.read().decode(errors='replace')}")
            assert body["status"] == "success", body
            return body["data"]

        exprs, variables = dashboard_exprs()
        names = {n for e in exprs + variables for n in SERIES.findall(e)}
        rules = []
        missing = names
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(0.25)
            if prom.poll() is not None:
                pytest.fail(f"prometheus exited with {prom.returncode}")
            try:
                up = api("query", query='sum(up{job="strata"})')["result"]
                rules = [r for g in api("rules")["groups"] for r in g["rules"]]
            except OSError:
                continue
            if not up or up[0]["value"][1] != "2" or not rules:
                continue
            names = {n for e in exprs + variables + [r["query"] for r in rules] for n in SERIES.findall(e)}
            missing = {n for n in names if not api("series", **{"match[]": n})}
            # Every rule evaluated at least once, without error.
            evaluated = all(not r.get("lastEvaluation", "0001").startswith("0001") for r in rules)
            if not missing and evaluated:
                break
        assert rules, "Prometheus never loaded the rules or never scraped both targets"
        assert not missing, f"series no target serves: {sorted(missing)}"
        assert len(rules) == 8
        for r in rules:
            assert r["health"] == "ok", (r["name"], r.get("lastError"))
            assert r["type"] == "alerting"
        assert {"memcached_up", "memcached_commands_total", "memcached_current_connections",
                "memcached_max_connections", "memcached_slab_items_evicted_unfetched_total",
                "strata_snapshot_save_errors_total", "strata_durability_failed", "strata_extstore_read_errors_total",
                "strata_request_duration_seconds_bucket", "up"} <= names
        # Every dashboard query runs (a typo in a function or a label
        # matcher is an error, not an empty panel).
        for e in exprs:
            api("query", query=e)
        # No alert fires on a healthy pair (a rule's expression inverted
        # would).
        firing = [a for a in api("alerts")["alerts"] if a["state"] == "firing"]
        assert not firing, firing
        hit = api("query", query='sum(memcached_commands_total{command="get",status="hit"})')["result"]
        assert hit and hit[0]["value"][1] == "2"
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        for srv in servers:
            srv.stop()
