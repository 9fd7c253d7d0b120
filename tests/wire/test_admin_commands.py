"""memcached's run-time tuning commands (`slabs`, `lru`, `lru_crawler`,
`extstore`) and the size-class views (`stats items`, `stats slabs`,
memcached-tool's `display`), as operators' scripts use them.

The replies are memcached 1.6's, byte for byte; where strata has no such
machinery (slab classes, segmented LRUs) the setting is recorded and
reported by `stats settings` (docs/protocol.md). Tests that hold for both
servers run against memcached too (WIRE_TARGET=memcached).
"""

import subprocess
import time

import pytest

from harness import target
from wirelib import advance_clock, assert_in_sync, expect, set_cmd, stats, stored

TOOL = "/usr/share/memcached/scripts/memcached-tool"

SAME_REPLIES = [
    (b"slabs automove 1", b"OK\r\n"),
    (b"slabs automove 0", b"OK\r\n"),
    (b"slabs automove 3", b"ERROR\r\n"),
    (b"slabs automove x", b"CLIENT_ERROR bad command line format\r\n"),
    (b"slabs automove ratio 0.5", b"OK\r\n"),
    (b"slabs automove ratio", b"ERROR\r\n"),
    (b"slabs reassign 1", b"ERROR\r\n"),
    (b"slabs", b"ERROR\r\n"),
    (b"lru_crawler crawl 99", b"BADCLASS invalid class id\r\n"),
    (b"lru_crawler crawl x", b"BADCLASS invalid class id\r\n"),
    (b"lru_crawler sleep 100", b"OK\r\n"),
    (b"lru_crawler sleep 2000000", b"CLIENT_ERROR sleep must be one second or less\r\n"),
    (b"lru_crawler sleep x", b"CLIENT_ERROR bad command line format\r\n"),
    (b"lru_crawler tocrawl 10", b"OK\r\n"),
    (b"lru_crawler tocrawl 0", b"OK\r\n"),
    (b"lru_crawler tocrawl x", b"CLIENT_ERROR bad command line format\r\n"),
    (b"lru_crawler bogus", b"ERROR\r\n"),
    (b"lru_crawler", b"ERROR\r\n"),
    (b"lru mode flat", b"OK\r\n"),
    (b"lru mode segmented", b"OK\r\n"),
    (b"lru mode x", b"ERROR\r\n"),
    (b"lru temp_ttl 10", b"OK\r\n"),
    (b"lru temp_ttl -1", b"OK\r\n"),
    (b"lru temp_ttl x", b"ERROR\r\n"),
    (b"lru tune 10 20 0.2 2", b"OK\r\n"),
    (b"lru tune 50 50 0.2 2", b"ERROR hot and warm pcts must not exceed 80\r\n"),
    (b"lru tune 10 20 0 2", b"ERROR hot/warm age factors must be greater than 0\r\n"),
    (b"lru x", b"ERROR\r\n"),
    (b"lru", b"ERROR\r\n"),
    (b"extstore item_age 10", b"OK\r\n"),
    (b"extstore item_size 100", b"OK\r\n"),
    (b"extstore recache_rate 100", b"OK\r\n"),
    (b"extstore max_frag 0.5", b"OK\r\n"),
    (b"extstore drop_unread 1", b"OK\r\n"),
    (b"extstore free_memchunks 1 2", b"OK\r\n"),
    (b"extstore x 1", b"ERROR\r\n"),
    (b"extstore", b"ERROR\r\n"),
]


@pytest.mark.parametrize("line,reply", SAME_REPLIES, ids=[l.decode() for l, _ in SAME_REPLIES])
def test_replies_are_memcacheds(conn, line, reply):
    expect(conn, line + b"\r\n", reply)
    assert_in_sync(conn)


def test_noreply_forms_say_nothing(conn):
    for line in [b"slabs automove 1 noreply", b"lru mode flat noreply", b"extstore item_age 10 noreply",
                 b"lru temp_ttl 5 noreply"]:
        conn.send(line + b"\r\n")
    assert_in_sync(conn)


def test_a_crawl_of_an_empty_cache_is_ok(make_server):
    # memcached starts its crawlers and they find nothing (issue 43).
    c = make_server().connect()
    for line in [b"lru_crawler crawl all", b"lru_crawler crawl 1", b"lru_crawler crawl 1,2", b"lru_crawler crawl 40"]:
        expect(c, line + b"\r\n", b"OK\r\n")
        wait_crawl(c)
    assert_in_sync(c)


def test_crawler_enable_and_disable(make_server):
    c = make_server().connect()
    stored(c, "k", b"v")
    expect(c, b"lru_crawler disable\r\n", b"OK\r\n")
    expect(c, b"lru_crawler disable\r\n", b"OK\r\n")
    expect(c, b"lru_crawler crawl all\r\n", b"CLIENT_ERROR lru crawler disabled\r\n")
    expect(c, b"lru_crawler metadump all\r\n", b"CLIENT_ERROR lru crawler disabled\r\n")
    assert stats(c, "settings")["lru_crawler"] == "no"
    expect(c, b"lru_crawler enable\r\n", b"OK\r\n")
    # memcached's answer to starting a crawler that runs.
    expect(c, b"lru_crawler enable\r\n", b"ERROR failed to start lru crawler thread\r\n")
    assert stats(c, "settings")["lru_crawler"] == "yes"


def test_settings_show_what_the_commands_set(make_server):
    c = make_server().connect()
    for line in [b"slabs automove 2", b"slabs automove ratio 0.5", b"lru_crawler sleep 250",
                 b"lru_crawler tocrawl 7", b"lru tune 10 20 0.5 3", b"lru mode flat", b"lru temp_ttl 30"]:
        expect(c, line + b"\r\n", b"OK\r\n")
    s = stats(c, "settings")
    want = {"slab_automove": "2", "slab_automove_ratio": "0.50", "lru_crawler_sleep": "250",
            "lru_crawler_tocrawl": "7", "hot_lru_pct": "10", "warm_lru_pct": "20", "hot_max_factor": "0.50",
            "warm_max_factor": "3.00", "lru_segmented": "no", "temp_lru": "yes", "temporary_ttl": "30"}
    assert {k: s.get(k) for k in want} == want
    expect(c, b"lru temp_ttl -1\r\n", b"OK\r\n")
    s = stats(c, "settings")
    assert (s["temp_lru"], s["temporary_ttl"]) == ("no", "30")


def test_growth_factor_and_chunk_size_flags(make_server):
    c = make_server(["-f", "2", "-n", "16"]).connect()
    s = stats(c, "settings")
    assert (s["growth_factor"], s["chunk_size"]) == ("2.00", "16")


@pytest.mark.parametrize("args", [["-f", "1"], ["-f", "0.5"], ["-n", "0"]])
def test_growth_factor_and_chunk_size_are_checked(args):
    from wirelib import run_binary
    r = run_binary(args + ["-p", "0"])
    assert r.returncode != 0


@pytest.mark.strata_only
def test_slabs_reassign_is_off(conn):
    """strata reports slab_reassign no (memory is not divided by size), and
    answers as memcached does with reassignment off."""
    assert stats(conn, "settings")["slab_reassign"] == "no"
    for line in [b"slabs reassign 1 2", b"slabs reassign 1 1", b"slabs reassign x y"]:
        expect(conn, line + b"\r\n", b"CLIENT_ERROR slab reassignment disabled\r\n")


def test_slabs_reassign_with_reassignment_on_answers_as_memcached(make_server):
    """With -o slab_reassign (memcached 1.6's default), memcached's checks
    of the class ids (0 to the largest class, 39 at -I 1m), then NOSPARE:
    no class here ever has a page to give (issue 43)."""
    c = make_server(["-o", "slab_reassign"]).connect()
    stored(c, "a", b"hello")
    for line, reply in [
        (b"slabs reassign 39 1", b"NOSPARE source class has no spare pages"),
        (b"slabs reassign 40 1", b"BADCLASS invalid src or dst class id"),
        (b"slabs reassign 1 2", b"NOSPARE source class has no spare pages"),
        (b"slabs reassign 1 1", b"SAME src and dst class are identical"),
        (b"slabs reassign 0 2", b"NOSPARE source class has no spare pages"),
        (b"slabs reassign 2 99", b"BADCLASS invalid src or dst class id"),
        (b"slabs reassign -1 2", b"BADCLASS invalid src or dst class id"),
        (b"slabs reassign 63 2", b"BADCLASS invalid src or dst class id"),
        (b"slabs reassign x y", b"CLIENT_ERROR bad command line format"),
    ]:
        expect(c, line + b"\r\n", reply + b"\r\n")


@pytest.mark.strata_only
def test_lru_mode_needs_the_lru_maintainer(make_server):
    c = make_server(["-o", "no_lru_maintainer"]).connect()
    expect(c, b"lru mode flat\r\n", b"ERROR\r\n")
    expect(c, b"lru temp_ttl 5\r\n", b"ERROR\r\n")
    expect(c, b"lru tune 10 20 0.5 3\r\n", b"OK\r\n")


def wait_crawl(c, timeout=10.0):
    deadline = time.monotonic() + timeout
    while stats(c)["lru_crawler_running"] != "0":
        assert time.monotonic() < deadline, "the crawl did not end"
        time.sleep(0.01)


@pytest.mark.strata_only
@pytest.mark.not_over_flash("the crawler walks items in memory")
def test_crawl_unlinks_expired_items_only(make_server):
    # Without the background reclaimer, which would also take a segment
    # whose items have all expired, whole, before the crawl gets to them.
    c = make_server(["--enable-debug-clock", "-o", "no_lru_maintainer"]).connect()
    for i in range(200):
        stored(c, f"k{i}", b"v" * (10 if i % 2 else 5000), exptime=5 if i % 4 == 0 else 0)
    assert int(stats(c)["curr_items"]) == 200
    expect(c, b"lru_crawler crawl all\r\n", b"OK\r\n")
    wait_crawl(c)
    assert stats(c)["crawler_reclaimed"] == "0", "nothing had expired"
    advance_clock(c, 6)
    # The 5000-byte values are in a class of their own: a crawl of the
    # small values' class leaves the large expired ones linked.
    items = stats(c, "items")
    classes = sorted({int(k.split(":")[1]) for k in items})
    assert len(classes) == 2
    small, large = classes
    expect(c, b"lru_crawler crawl %d\r\n" % small, b"OK\r\n")
    wait_crawl(c)
    s = stats(c)
    assert (s["crawler_reclaimed"], s["curr_items"]) == ("0", "200"), "no small value had an expiry"
    expect(c, b"lru_crawler crawl %d\r\n" % large, b"OK\r\n")
    wait_crawl(c)
    s, items = stats(c), stats(c, "items")
    assert (s["crawler_reclaimed"], s["curr_items"], s["lru_crawler_starts"]) == ("50", "150", "4")
    assert items[f"items:{large}:crawler_reclaimed"] == "50"
    assert items[f"items:{large}:number"] == "50"
    # A class without items: OK, as memcached (its crawler finds nothing).
    expect(c, b"lru_crawler crawl 40\r\n", b"OK\r\n")
    assert stats(c)["lru_crawler_starts"] == "4", "nothing to crawl: no crawl started"


@pytest.mark.not_over_flash("stats items and slabs count the items in memory")
def test_size_classes_are_rows_per_item_size(make_server):
    """Items of four sizes fill four rows of `stats items` and `stats
    slabs`, each with its count and bytes, as memcached's slab classes."""
    c = make_server().connect()
    sizes = {10: 5, 300: 6, 5000: 7, 100_000: 8}
    for size, count in sizes.items():
        for i in range(count):
            stored(c, f"s{size}_{i}", b"x" * size)
    items, slabs = stats(c, "items"), stats(c, "slabs")
    numbers = {int(k.split(":")[1]): int(v) for k, v in items.items() if k.endswith(":number")}
    assert sorted(numbers.values()) == [5, 6, 7, 8]
    chunk = {int(k.split(":")[0]): int(v) for k, v in slabs.items() if k.endswith(":chunk_size")}
    assert set(numbers) <= set(chunk)
    # Each class's items are no larger than its chunk size, and the larger
    # values are in the classes with larger chunks.
    by_chunk = [numbers[cls] for cls in sorted(numbers, key=lambda cls: chunk[cls])]
    assert by_chunk == [5, 6, 7, 8]
    for cls, n in numbers.items():
        req = int(items[f"items:{cls}:mem_requested"])
        assert 0 < req <= n * chunk[cls]
        assert int(slabs[f"{cls}:total_pages"]) >= 1
    assert int(slabs["active_slabs"]) == len(chunk)


@pytest.mark.not_over_flash("stats items and slabs count the items in memory")
def test_memcached_tool_display_has_a_row_per_size(make_server):
    srv = make_server()
    c = srv.connect()
    for size in (10, 300, 5000, 100_000):
        for i in range(3):
            stored(c, f"s{size}_{i}", b"x" * size)
    out = subprocess.run([TOOL, f"127.0.0.1:{srv.port}", "display"], capture_output=True, timeout=30, check=True)
    rows = out.stdout.decode().splitlines()[1:]
    assert len(rows) == 4, out.stdout
    assert all(r.split()[4] == "3" for r in rows), rows
    # Memory to spare: no class is full (memcached: its pages have free
    # chunks; strata: the free memory would hold more of each size).
    assert all(r.split()[5] == "no" for r in rows), rows


@pytest.mark.not_over_flash("stats items and slabs count the items in memory")
def test_memcached_tool_display_says_full_once_memory_is(make_server):
    srv = make_server(["-m", "8"])
    c = srv.connect()
    value = b"x" * 2000
    batch = 0
    while int(stats(c)["evictions"]) == 0:
        assert batch < 1000, "no eviction after 200 MB written into -m 8"
        c.send(b"".join(set_cmd(f"full{batch}_{i}", value, noreply=True) for i in range(100)))
        batch += 1
    out = subprocess.run([TOOL, f"127.0.0.1:{srv.port}", "display"], capture_output=True, timeout=30, check=True)
    rows = out.stdout.decode().splitlines()[1:]
    assert len(rows) == 1, out.stdout
    assert rows[0].split()[5] == "yes", rows


@pytest.mark.strata_only
@pytest.mark.not_over_flash("metadump lists items in memory only")
def test_metadump_names_each_items_class(make_server):
    c = make_server().connect()
    stored(c, "small", b"x")
    stored(c, "large", b"x" * 50_000)
    items = stats(c, "items")
    classes = sorted(int(k.split(":")[1]) for k in items if k.endswith(":number"))
    c.send(b"lru_crawler metadump all\r\n")
    from wirelib import read_until_end
    lines = read_until_end(c).split(b"\n")
    cls = {l.split(b" ")[0][4:]: int(l.split(b"cls=")[1].split(b" ")[0]) for l in lines if l.startswith(b"key=")}
    assert cls == {b"small": classes[0], b"large": classes[1]}
    c.send(b"lru_crawler metadump %d\r\n" % classes[1])
    lines = read_until_end(c).split(b"\n")
    assert [l.split(b" ")[0] for l in lines if l.startswith(b"key=")] == [b"key=large"]
