"""--metrics-listen: `GET /metrics` in Prometheus' text format, checked with
the official Python client's parser (prometheus_client). strata only."""

import socket
import subprocess
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import STRATA_BIN, Server, free_port
from wirelib import expect, stats

pytestmark = pytest.mark.strata_only


@pytest.fixture
def metered():
    port = free_port()
    srv = Server(["--metrics-listen", f"127.0.0.1:{port}", "-A"])
    yield srv, f"http://127.0.0.1:{port}"
    srv.stop()


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def test_every_numeric_stat_with_its_type(metered):
    srv, url = metered
    c = srv.connect()
    expect(c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n")
    expect(c, b"get a b\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n")
    families = {f.name: f for f in text_string_to_metric_families(scrape(url))}
    s = stats(c)
    for name, value in s.items():
        try:
            float(value)
        except ValueError:
            continue
        fam = families.get("memcached_" + name)
        assert fam is not None, name
        assert len(fam.samples) == 1
    assert families["memcached_cmd_get"].type == "counter"
    assert families["memcached_get_hits"].samples[0].value == 1
    assert families["memcached_get_misses"].samples[0].value == 1
    assert families["memcached_curr_items"].type == "gauge"
    assert families["memcached_curr_items"].samples[0].value == 1
    info = families["memcached_info"].samples[0].labels
    assert info["version"] == s["version"]
    assert info["binding_protocol"] == "auto-negotiate"
    assert "items:1:number" not in "".join(families)


def test_latency_histograms_by_command_family(metered):
    srv, url = metered
    c = srv.connect()
    for i in range(5):
        expect(c, b"set k%d 0 0 1\r\nx\r\n" % i, b"STORED\r\n")
    expect(c, b"get k1 k2\r\n", b"VALUE k1 0 1\r\nx\r\nVALUE k2 0 1\r\nx\r\nEND\r\n")
    expect(c, b"delete k1\r\n", b"DELETED\r\n")
    expect(c, b"mn\r\n", b"MN\r\n")
    families = {f.name: f for f in text_string_to_metric_families(scrape(url))}
    h = families["memcached_strata_request_duration_seconds"]
    assert h.type == "histogram"
    counts = {s.labels["family"]: s.value for s in h.samples if s.name.endswith("_count")}
    assert (counts["set"], counts["get"], counts["delete"], counts["arith"]) == (5, 1, 1, 0)
    assert counts["other"] >= 1
    buckets = [s.value for s in h.samples if s.name.endswith("_bucket") and s.labels["family"] == "set"]
    assert buckets == sorted(buckets) and buckets[-1] == 5


def test_other_paths_and_methods(metered):
    _, url = metered
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/other", timeout=5)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url + "/metrics", data=b"x", method="POST"), timeout=5)
    assert e.value.code == 405


def test_a_huge_request_head_is_refused(metered):
    srv, url = metered
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")
    reply = s.recv(100)
    assert reply.startswith(b"HTTP/1.1 431"), reply
    # The server itself goes on.
    expect(srv.connect(), b"version\r\n", b"VERSION 1.6.38\r\n")
    assert "memcached_uptime" in scrape(url)


def test_a_bad_address_stops_the_start():
    r = subprocess.run([STRATA_BIN, "-p", "0", "--metrics-listen", "256.0.0.1:1"], capture_output=True, timeout=10)
    assert r.returncode != 0 and b"metrics" in r.stderr, r.stderr


def test_debians_prometheus_scrapes_it(metered, tmp_path):
    """The real scraper: Debian's Prometheus, scraping every second, sees
    the target up and the values `stats` shows."""
    import json
    import shutil
    import time

    binary = shutil.which("prometheus")
    assert binary, "make deps installs Debian's prometheus"
    srv, url = metered
    c = srv.connect()
    for i in range(7):
        expect(c, b"set p%d 0 0 1\r\nx\r\n" % i, b"STORED\r\n")
    target = url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n"
        f"  - job_name: strata\n    static_configs:\n      - targets: ['{target}']\n"
    )
    web = f"127.0.0.1:{free_port()}"
    prom = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address={web}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        def query(q):
            with urllib.request.urlopen(f"http://{web}/api/v1/query?query={q}", timeout=2) as r:
                return json.loads(r.read())["data"]["result"]

        deadline = time.monotonic() + 30
        items = None
        while time.monotonic() < deadline:
            try:
                up = query('up{job="strata"}')
                items = query("memcached_curr_items")
                if up and up[0]["value"][1] == "1" and items:
                    break
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.3)
        assert items, "Prometheus never scraped the target"
        assert items[0]["value"][1] == stats(c)["curr_items"] == "7"
        hist = query('memcached_strata_request_duration_seconds_count{family="set"}')
        assert hist and float(hist[0]["value"][1]) >= 7
    finally:
        prom.terminate()
        prom.wait(timeout=10)
