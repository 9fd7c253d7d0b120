"""memcached 1.6.18's t/lru-crawler.t, step by step, against either server
(issue 43, item 8): `-o no_modern` turns the crawler off and `lru_crawler
enable` turns it on; a crawl of class 1 reclaims the 30 expired items; a
metadump pipelined behind another request is refused; metadump lists
every item (60, then 70,090 by hash walk); `lru_crawler disable`; and
under `-o no_modern,lru_crawler` a crawl leaves class 1's row in `stats
slabs` with `used_chunks 0`, as memcached keeps a class's pages.

strata's clock is moved forward for the one-second TTLs (it takes
--enable-debug-clock); memcached's pass sleeps, as the .t file does.
"""

import time

import pytest

from harness import target
from wirelib import advance_clock, expect, read_line_or_partial, read_until_end, stats

pytestmark = pytest.mark.not_over_flash("metadump and the crawler see items in memory only")


def start(make_server, opts):
    clock = ["--enable-debug-clock"] if target() == "strata" else []
    return make_server(["-m", "32", "-o", opts] + clock).connect(timeout=30)


def let_expire(c):
    if target() == "strata":
        advance_clock(c, 3)
    else:
        time.sleep(3)


def crawl_class_1(c):
    expect(c, b"lru_crawler crawl 1\r\n", b"OK\r\n")
    deadline = time.monotonic() + 30
    while stats(c).get("lru_crawler_running", "0") != "0":
        assert time.monotonic() < deadline, "the crawl did not finish"
        time.sleep(0.05)


def dump_count(c, arg):
    c.send(b"lru_crawler metadump " + arg + b"\r\n")
    reply = read_until_end(c, timeout=60)
    assert reply.endswith(b"END\r\n"), reply[-200:]
    return reply[: -len(b"END\r\n")].count(b"\n")


def test_lru_crawler_t(make_server):
    c = start(make_server, "no_modern")
    assert stats(c, "settings")["lru_crawler"] == "no"
    for prefix, ttl in ((b"ifoo", 0), (b"lfoo", 3600), (b"sfoo", 1)):
        for i in range(1, 31):
            expect(c, b"set %s%d 0 %d 2\r\nok\r\n" % (prefix, i, ttl), b"STORED\r\n")
    assert stats(c, "slabs")["1:used_chunks"] == "90"
    let_expire(c)
    expect(c, b"lru_crawler enable\r\n", b"OK\r\n")
    assert stats(c, "settings")["lru_crawler"] == "yes"
    crawl_class_1(c)
    assert stats(c, "slabs")["1:used_chunks"] == "60"
    assert stats(c, "items")["items:1:crawler_reclaimed"] == "30"
    # A dump behind a reply not yet sent is refused (mg: get would flush).
    expect(
        c,
        b"mg foo v\r\nlru_crawler metadump all\r\n",
        b"EN\r\nERROR cannot pipeline other commands before metadump\r\n",
    )
    assert dump_count(c, b"all") == 60
    for i in range(1, 31):
        expect(c, b"get ifoo%d\r\n" % i, b"VALUE ifoo%d 0 2\r\nok\r\nEND\r\n" % i)
        expect(c, b"get sfoo%d\r\n" % i, b"END\r\n")
    for i in range(1, 31):
        expect(c, b"set mfoo%d 0 0 512\r\n%s\r\n" % (i, b"x" * 512), b"STORED\r\n")
    c.send(b"".join(b"set bfoo%d 0 0 1 noreply\r\nz\r\n" % i for i in range(1, 70001)))
    c.send(b"version\r\n")
    assert read_line_or_partial(c, timeout=30).startswith(b"VERSION ")
    assert dump_count(c, b"hash") == 70090
    expect(c, b"lru_crawler disable\r\n", b"OK\r\n")
    assert stats(c, "settings")["lru_crawler"] == "no"
    c.close()

    c = start(make_server, "no_modern,lru_crawler")
    for i in range(1, 31):
        expect(c, b"set sfoo%d 0 1 2\r\nok\r\n" % i, b"STORED\r\n")
    let_expire(c)
    crawl_class_1(c)
    assert stats(c, "slabs")["1:used_chunks"] == "0"


def test_watch_behind_a_pipelined_reply_is_refused(make_server):
    c = make_server().connect()
    expect(
        c,
        b"mg foo v\r\nwatch fetchers\r\n",
        b"EN\r\nERROR cannot pipeline other commands before watch\r\n",
    )
    expect(c, b"watch fetchers\r\n", b"OK\r\n")
