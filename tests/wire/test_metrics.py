"""--metrics-listen: `GET /metrics` in Prometheus' text format, checked with
the official Python client's parser (prometheus_client) and `promtool check
metrics`: memcached_exporter's names, types and labels for the stats it
serves, `strata_<name>` for the rest. strata only."""

import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import STRATA_BIN, Server, free_port
from wirelib import expect, stats

pytestmark = pytest.mark.strata_only

# Stats memcached_exporter serves under a name of its own, and that
# series' type (memcached_exporter's pkg/exporter/exporter.go; a level it
# declares a counter is a gauge here: docs/monitoring.md).
EXPORTED = {
    "uptime": ("memcached_uptime_seconds", "gauge"),
    "time": ("memcached_time_seconds", "gauge"),
    "rusage_user": ("memcached_process_user_cpu_seconds_total", "counter"),
    "rusage_system": ("memcached_process_system_cpu_seconds_total", "counter"),
    "bytes_read": ("memcached_read_bytes_total", "counter"),
    "bytes_written": ("memcached_written_bytes_total", "counter"),
    "curr_connections": ("memcached_current_connections", "gauge"),
    "max_connections": ("memcached_max_connections", "gauge"),
    "maxconns": ("memcached_max_connections", "gauge"),
    "total_connections": ("memcached_connections_total", "counter"),
    "rejected_connections": ("memcached_connections_rejected_total", "counter"),
    "conn_yields": ("memcached_connections_yielded_total", "counter"),
    "accepting_conns": ("memcached_accepting_connections", "gauge"),
    "bytes": ("memcached_current_bytes", "gauge"),
    "limit_maxbytes": ("memcached_limit_bytes", "gauge"),
    "total_malloced": ("memcached_malloced_bytes", "gauge"),
    "curr_items": ("memcached_current_items", "gauge"),
    "total_items": ("memcached_items_total", "counter"),
    "evictions": ("memcached_items_evicted_total", "counter"),
    "reclaimed": ("memcached_items_reclaimed_total", "counter"),
    "store_too_large": ("memcached_item_too_large_total", "counter"),
    "store_no_memory": ("memcached_item_no_memory_total", "counter"),
    "extstore_page_evictions": ("memcached_extstore_pages_evicted_total", "counter"),
    "extstore_objects_evicted": ("memcached_extstore_objects_evicted_total", "counter"),
    "extstore_objects_read": ("memcached_extstore_objects_read_total", "counter"),
    "extstore_objects_written": ("memcached_extstore_objects_written_total", "counter"),
    "extstore_objects_used": ("memcached_extstore_objects_used", "gauge"),
    "extstore_bytes_written": ("memcached_extstore_bytes_written_total", "counter"),
    "extstore_bytes_read": ("memcached_extstore_bytes_read_total", "counter"),
    "extstore_bytes_used": ("memcached_extstore_bytes_used", "gauge"),
    "extstore_limit_maxbytes": ("memcached_extstore_bytes_limit", "gauge"),
    "extstore_io_queue": ("memcached_extstore_io_queue_depth", "gauge"),
    "lru_crawler_starts": ("memcached_lru_crawler_starts_total", "counter"),
    "crawler_reclaimed": ("memcached_lru_crawler_reclaimed_total", "counter"),
    "crawler_items_checked": ("memcached_lru_crawler_items_checked_total", "counter"),
    "lru_crawler_sleep": ("memcached_lru_crawler_sleep", "gauge"),
    "lru_crawler_tocrawl": ("memcached_lru_crawler_to_crawl", "gauge"),
}
# The stats folded into memcached_commands_total{command,status}.
COMMANDS = {
    "get_hits": ("get", "hit"), "get_misses": ("get", "miss"),
    "delete_hits": ("delete", "hit"), "delete_misses": ("delete", "miss"),
    "incr_hits": ("incr", "hit"), "incr_misses": ("incr", "miss"),
    "decr_hits": ("decr", "hit"), "decr_misses": ("decr", "miss"),
    "cas_hits": ("cas", "hit"), "cas_misses": ("cas", "miss"), "cas_badval": ("cas", "badval"),
    "touch_hits": ("touch", "hit"), "touch_misses": ("touch", "miss"),
    "cmd_flush": ("flush", "hit"),
}
RENAMED = {
    "idle_timeout": "strata_idle_timeout_seconds",
    "snapshot_interval": "strata_snapshot_interval_seconds",
    "snapshot_last_time": "strata_snapshot_last_timestamp_seconds",
    "time_since_server_cert_refresh": "strata_time_since_server_cert_refresh_seconds",
}


def strata_name(stat, counter):
    """The rule for strata-only stats (docs/monitoring.md)."""
    if stat in RENAMED:
        return RENAMED[stat]
    name = "strata_" + stat.removeprefix("strata_")
    if name.endswith("_us"):
        name = name[: -len("_us")] + "_seconds"
    if counter and not name.endswith("_total"):
        name += "_total"
    if not counter and name.endswith("_total"):
        name = name[: -len("_total")]
    return name


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


def series(text):
    """{sample name: (family type, {frozenset(labels): value})}, parsed by
    prometheus_client (which names a counter's family without `_total`)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            _, samples = out.setdefault(s.name, (fam.type, {}))
            samples[frozenset(s.labels.items())] = s.value
    return out


def one(found, name, **labels):
    return found[name][1][frozenset(labels.items())]


def test_memcached_exporter_names_types_and_labels(metered):
    srv, url = metered
    c = srv.connect()
    expect(c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n")
    expect(c, b"get a b\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n")
    expect(c, b"delete b\r\n", b"NOT_FOUND\r\n")
    expect(c, b"incr a 1\r\n", b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
    expect(c, b"touch a 0\r\n", b"TOUCHED\r\n")
    found = series(scrape(url))
    s = stats(c)
    assert found["memcached_up"] == ("gauge", {frozenset(): 1})
    assert found["memcached_version"] == ("gauge", {frozenset({("version", s["version"])}): 1})
    commands = found["memcached_commands_total"]
    assert commands[0] == "counter"
    assert all({k for k, _ in labels} == {"command", "status"} for labels in commands[1])
    for (command, status), want in {
        ("get", "hit"): 1, ("get", "miss"): 1, ("set", "hit"): 1, ("delete", "miss"): 1,
        ("delete", "hit"): 0, ("touch", "hit"): 1, ("cas", "badval"): 0, ("flush", "hit"): 0,
        ("incr", "hit"): 0, ("incr", "miss"): 0, ("decr", "miss"): 0,
    }.items():
        assert one(found, "memcached_commands_total", command=command, status=status) == want, (command, status)
    assert len(commands[1]) == 15, "memcached_exporter's fifteen command/status pairs"
    for stat, (name, kind) in EXPORTED.items():
        if stat.startswith("extstore_") and stat not in s:
            assert name not in found, "extstore series only with the flash tier, as memcached_exporter"
            continue
        assert found[name][0] == kind, name
        assert list(found[name][1]) == [frozenset()], f"{name} has no labels"
    for stat in ("curr_items", "total_items", "bytes", "limit_maxbytes", "max_connections", "total_connections"):
        assert one(found, EXPORTED[stat][0]) == float(s[stat]), stat
    assert one(found, "memcached_current_items") == 1
    assert found["memcached_connections_listener_disabled_total"] == ("counter", {frozenset(): 0})
    # stats items' one class, as memcached_exporter's per-slab series.
    assert found["memcached_slab_current_items"] == ("gauge", {frozenset({("slab", "1")}): 1})
    for name in ("memcached_slab_items_evicted_unfetched_total", "memcached_slab_items_expired_unfetched_total",
                 "memcached_slab_items_evicted_total", "memcached_slab_items_reclaimed_total",
                 "memcached_slab_items_crawler_reclaimed_total"):
        assert found[name] == ("counter", {frozenset({("slab", "1")}): 0}), name
    # stats slabs' row for the class, as memcached_exporter's slab series.
    slabs = stats(c, "slabs")
    assert found["memcached_slab_chunk_size_bytes"] == ("gauge", {frozenset({("slab", "1")}): float(slabs["1:chunk_size"])})
    assert found["memcached_slab_chunks_used"] == ("gauge", {frozenset({("slab", "1")}): 1})
    assert one(found, "memcached_slab_current_pages", slab="1") >= 1
    # The old names are gone.
    for old in ("memcached_bytes", "memcached_evictions", "memcached_curr_items", "memcached_cmd_get",
                "memcached_info", "memcached_strata_request_duration_seconds_count"):
        assert old not in found, old


def test_every_memcached_series_served_is_documented(metered):
    """docs/monitoring.md's table lists each memcached_* series /metrics
    serves (with a class in stats items, so the per-class ones are there)."""
    srv, url = metered
    expect(srv.connect(), b"set a 0 0 1\r\nx\r\n", b"STORED\r\n")
    doc = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text()
    served = {name for name in series(scrape(url)) if name.startswith("memcached_")}
    assert "memcached_slab_items_crawler_reclaimed_total" in served
    assert sorted(n for n in served if f"`{n}`" not in doc) == []


def numeric(value):
    try:
        float(value)
        return True
    except ValueError:
        return False


def test_every_numeric_stat_is_served(metered):
    srv, url = metered
    c = srv.connect()
    expect(c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n")
    found = series(scrape(url))
    info = found["strata_info"][1]
    assert len(info) == 1
    info = dict(next(iter(info)))
    for group in (None, "settings"):
        for stat, value in stats(c, group).items():
            if stat in EXPORTED and numeric(value):
                assert EXPORTED[stat][0] in found, stat
            elif stat in COMMANDS:
                command, status = COMMANDS[stat]
                one(found, "memcached_commands_total", command=command, status=status)
            elif stat in info:
                # Text values (umask's 700 is text: an octal mode) are labels.
                assert info[stat] == value, stat
            elif stat == "version":
                assert found["memcached_version"][1] == {frozenset({("version", value)}): 1}
            else:
                name = strata_name(stat, counter=False)
                counter = strata_name(stat, counter=True)
                assert name in found or counter in found, stat
                kind, samples = found[name] if name in found else found[counter]
                assert list(samples) == [frozenset()], stat
    assert found["strata_cmd_get_total"][0] == "counter"
    assert found["strata_segments"][0] == "gauge"
    assert "strata_segments_total" not in found
    assert one(found, "strata_cmd_set_total") == 1
    assert info["binding_protocol"] == "auto-negotiate"
    assert info["strata_version"] == stats(c)["strata_version"]


def promtool_check(text):
    binary = shutil.which("promtool")
    assert binary, "make deps installs Debian's prometheus (promtool)"
    return subprocess.run([binary, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics-tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", "k.pem", "-out", "c.pem", "-days", "2", "-subj", "/CN=localhost"],
                   cwd=d, check=True, capture_output=True)
    return d


@pytest.mark.not_over_flash("gives its own ext_path")
@pytest.mark.parametrize("setup", ["flash-snapshot-compression", "durability", "tls"])
def test_promtool_check_metrics_finds_nothing(setup, tmp_path, tls_pair):
    """Debian's promtool lints a live scrape (counters end in _total, units
    spelt out, HELP on every family, ...): it must print nothing."""
    port = free_port()
    args = ["--metrics-listen", f"127.0.0.1:{port}"]
    if setup == "flash-snapshot-compression":
        args += ["-o", f"ext_path={tmp_path / 'flash'}:64m,compression=on", "--snapshot-dir", str(tmp_path)]
    elif setup == "durability":
        args += ["--snapshot-dir", str(tmp_path), "--durability", "interval"]
    else:
        args += ["-Z", "-o", f"ssl_chain_cert={tls_pair / 'c.pem'},ssl_key={tls_pair / 'k.pem'}"]
    srv = Server(args)
    try:
        if setup != "tls":
            c = srv.connect()
            expect(c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n")
            expect(c, b"get a b\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n")
        text = scrape(f"http://127.0.0.1:{port}")
        for needed in {"flash-snapshot-compression": ["memcached_extstore_bytes_used", "strata_snapshot_saves_total",
                                                      "strata_compress_writes_total"],
                       "durability": ["strata_durability_failed"],
                       "tls": ["strata_ssl_handshake_errors_total"]}[setup]:
            assert f"\n{needed} " in text, needed
        r = promtool_check(text)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), r.stdout.decode() + r.stderr.decode()
    finally:
        srv.stop()


def test_latency_histograms_by_command_family(metered):
    srv, url = metered
    c = srv.connect()
    for i in range(5):
        expect(c, b"set k%d 0 0 1\r\nx\r\n" % i, b"STORED\r\n")
    expect(c, b"get k1 k2\r\n", b"VALUE k1 0 1\r\nx\r\nVALUE k2 0 1\r\nx\r\nEND\r\n")
    expect(c, b"delete k1\r\n", b"DELETED\r\n")
    expect(c, b"mn\r\n", b"MN\r\n")
    families = {f.name: f for f in text_string_to_metric_families(scrape(url))}
    h = families["strata_request_duration_seconds"]
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
    assert "memcached_uptime_seconds" in scrape(url)


def test_a_bad_address_stops_the_start():
    r = subprocess.run([STRATA_BIN, "-p", "0", "--metrics-listen", "256.0.0.1:1"], capture_output=True, timeout=10)
    assert r.returncode != 0 and b"metrics" in r.stderr, r.stderr


@pytest.mark.one_event_loop("Prometheus's scrape of the exporter")
def test_debians_prometheus_scrapes_it(metered, tmp_path):
    """The real scraper: Debian's Prometheus, scraping every second, sees
    the target up and the values `stats` shows."""
    import json
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
                items = query("memcached_current_items")
                if up and up[0]["value"][1] == "1" and items:
                    break
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.3)
        assert items, "Prometheus never scraped the target"
        assert items[0]["value"][1] == stats(c)["curr_items"] == "7"
        hist = query('strata_request_duration_seconds_count{family="set"}')
        assert hist and float(hist[0]["value"][1]) >= 7
    finally:
        prom.terminate()
        prom.wait(timeout=10)
