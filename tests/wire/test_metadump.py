"""lru_crawler metadump and stats cachedump: a line of metadata per live item, memcached's
format, streamed under back-pressure; and memcached-tool's dump (which is
built on it) warming a second server, the migration recipe in docs.
lru_crawler mgdump (memcached 1.6.28's: newer than Debian's 1.6.18, so
strata only) and scripts/mgdump_copy.py, the other recipe.

cls= is the item's size band, as stats items/slabs number them (memcached's
slab class sizes); la= is when the item was written (strata keeps no
last-access time per item).
"""

import os
import re
import subprocess
import sys
import time

import pytest

from harness import target
from wirelib import expect, read_line_or_partial, read_until_end

LINE = re.compile(rb"key=(\S+) exp=(-1|\d+) la=(\d+) cas=(\d+) fetch=(yes|no) cls=(\d+) size=(\d+)")
TOOL = "/usr/share/memcached/scripts/memcached-tool"


pytestmark = pytest.mark.not_over_flash("metadump lists items in memory only")

def metadump(c, arg=b"all"):
    c.send(b"lru_crawler metadump " + arg + b"\r\n")
    reply = read_until_end(c, timeout=30)
    assert reply.endswith(b"END\r\n"), reply[-200:]
    lines = reply[: -len(b"END\r\n")].split(b"\n")
    assert lines[-1] == b""
    return [LINE.fullmatch(line) or pytest.fail(f"bad line {line!r}") for line in lines[:-1]]


def test_lines_in_memcacheds_format(make_server):
    c = make_server().connect()
    expect(c, b"set a:1 0 0 1\r\nx\r\nset b 5 100 3\r\nabc\r\nset sp%20ce 0 0 1\r\nx\r\n", b"STORED\r\n" * 3)
    expect(c, b"get a:1\r\n", b"VALUE a:1 0 1\r\nx\r\nEND\r\n")
    now = int(time.time())
    rows = {m.group(1): m for m in metadump(c)}
    assert set(rows) == {b"a%3A1", b"b", b"sp%2520ce"}
    assert rows[b"a%3A1"].group(2) == b"-1"
    assert abs(int(rows[b"b"].group(2)) - (now + 100)) <= 2
    assert abs(int(rows[b"b"].group(3)) - now) <= 2
    assert rows[b"a%3A1"].group(5) == b"yes" and rows[b"b"].group(5) == b"no"
    assert {m.group(6) for m in rows.values()} == {b"1"}
    assert len({m.group(4) for m in rows.values()}) == 3, "CAS values differ"
    # The other forms, and what is refused.
    assert {m.group(1) for m in metadump(c, b"hash")} == set(rows)
    assert {m.group(1) for m in metadump(c, b"1,2")} == set(rows)
    assert metadump(c, b"2") == []
    for bad in (b"0", b"abc", b"64"):
        expect(c, b"lru_crawler metadump " + bad + b"\r\n", b"BADCLASS invalid class id\r\n")
    for bad in (b"lru_crawler metadump", b"lru_crawler metadump all extra", b"lru_crawler mgdump"):
        expect(c, bad + b"\r\n", b"ERROR\r\n")
    # Expired and flushed items are not listed.
    expect(c, b"flush_all\r\n", b"OK\r\n")
    assert metadump(c) == []


def test_a_large_dump_streams_every_key_once(make_server):
    """~1.3 MB of lines: more than a connection's reply buffer, so the dump
    pauses for the client and resumes where it stopped."""
    c = make_server(["-m", "64"]).connect()
    n = 20000
    for i in range(0, n, 500):
        c.send(b"".join(b"set key:%06d 0 0 1 noreply\r\nv\r\n" % k for k in range(i, i + 500)))
    expect(c, b"mn\r\n", b"MN\r\n")
    # The dump is larger than the reply limit whatever the client's pace,
    # so the server pauses it and resumes where it stopped.
    keys = [m.group(1) for m in metadump(c)]
    assert len(keys) == n
    assert set(keys) == {b"key%%3A%06d" % k for k in range(n)}
    expect(c, b"mn\r\n", b"MN\r\n")


@pytest.mark.skipif(not os.path.exists(TOOL), reason="memcached-tool not installed")
def test_memcached_tool_dump_warms_another_server(make_server):
    src, dst = make_server(), make_server()
    c = src.connect()
    items = {b"user:%d" % i: (i % 7, b"value-%d" % i * (i % 5 + 1)) for i in range(300)}
    for k, (flags, v) in items.items():
        expect(c, b"set %s %d 0 %d\r\n%s\r\n" % (k, flags, len(v), v), b"STORED\r\n")
    expect(c, b"set ttl:1 0 3600 2\r\nhi\r\n", b"STORED\r\n")
    dump = subprocess.run(
        ["perl", TOOL, f"127.0.0.1:{src.port}", "dump"], capture_output=True, timeout=60, check=True
    ).stdout
    assert dump.count(b"add ") == len(items) + 1
    d = dst.connect()
    d.send(dump + b"mn\r\n")
    replies = read_until_end(d, terminator=b"MN\r\n", timeout=30)
    assert replies == b"STORED\r\n" * (len(items) + 1) + b"MN\r\n"
    for k, (flags, v) in items.items():
        expect(d, b"get %s\r\n" % k, b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k, flags, len(v), v))
    d.send(b"mg ttl:1 t v\r\n")
    line = read_line_or_partial(d)
    ttl = re.fullmatch(rb"VA 2 t(\d+)\r\n", line)
    assert ttl and 3590 <= int(ttl.group(1)) <= 3600, line
    assert read_line_or_partial(d) == b"hi\r\n"


def mgdump(c, arg=b"all"):
    c.send(b"lru_crawler mgdump " + arg + b"\r\n")
    reply = read_until_end(c, terminator=b"EN\r\n", timeout=30)
    return reply[: -len(b"EN\r\n")].split(b"\r\n")[:-1]


@pytest.mark.strata_only
def test_mgdump_lists_replayable_mg_commands(make_server):
    c = make_server().connect()
    expect(c, b"set a:1 0 0 1\r\nx\r\nset b 5 100 3\r\nabc\r\n", b"STORED\r\n" * 2)
    # A key no text command could carry (a space) was stored through base64,
    # and so was a plain one ("plain"): both are listed in base64.
    expect(c, b"ms c3AgY2U= 2 b\r\nhi\r\n", b"HD\r\n")
    expect(c, b"ms cGxhaW4= 1 b\r\np\r\n", b"HD\r\n")
    lines = mgdump(c)
    assert sorted(lines) == [b"mg a:1", b"mg b", b"mg c3AgY2U= b", b"mg cGxhaW4= b"]
    # Each line is a command: sent back with v, it fetches its item.
    c.send(b"".join(line + b" v\r\n" for line in sorted(lines)))
    assert read_until_end(c, terminator=b"p\r\n") == b"VA 1\r\nx\r\nVA 3\r\nabc\r\nVA 2\r\nhi\r\nVA 1\r\np\r\n"
    assert sorted(mgdump(c, b"hash")) == sorted(lines)
    assert mgdump(c, b"2") == []
    expect(c, b"lru_crawler mgdump 0\r\n", b"BADCLASS invalid class id\r\n")
    expect(c, b"flush_all\r\n", b"OK\r\n")
    assert mgdump(c) == []


@pytest.mark.strata_only
def test_mgdump_copy_warms_another_server(make_server):
    src, dst = make_server(), make_server()
    c = src.connect()
    items = {b"user:%d" % i: (i % 7, os.urandom(i % 50 + 1)) for i in range(1200)}
    c.send(b"".join(b"ms %s %d F%d q\r\n%s\r\n" % (k, len(v), f, v) for k, (f, v) in items.items()) + b"mn\r\n")
    assert read_until_end(c, terminator=b"MN\r\n") == b"MN\r\n"
    expect(c, b"ms dHRsIGtleQ== 2 b T3600\r\nhi\r\n", b"HD\r\n")
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "mgdump_copy.py")
    r = subprocess.run(
        [sys.executable, script, f"127.0.0.1:{src.port}", f"127.0.0.1:{dst.port}", "--batch", "500", "--quiet"],
        capture_output=True, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == b"1201 keys listed, 1201 items copied\n"
    d = dst.connect()
    for k, (f, v) in items.items():
        expect(d, b"mg %s f v\r\n" % k, b"VA %d f%d\r\n%s\r\n" % (len(v), f, v))
    d.send(b"mg dHRsIGtleQ== b t v\r\n")
    line = read_line_or_partial(d)
    ttl = re.fullmatch(rb"VA 2 t(\d+)\r\n", line)
    assert ttl and 3590 <= int(ttl.group(1)) <= 3600, line
    assert read_line_or_partial(d) == b"hi\r\n"
    # Nothing was given a time to live it did not have.
    d.send(b"mg user:1 t\r\n")
    assert read_line_or_partial(d) == b"HD t-1\r\n"
    # Without --quiet, how far it is (here after every batch: --every 0).
    r = subprocess.run(
        [sys.executable, script, f"127.0.0.1:{src.port}", f"127.0.0.1:{dst.port}", "--batch", "500", "--every", "0"],
        capture_output=True, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stderr.decode().splitlines()
    assert [line.split(" (")[0] for line in lines if "copied (" in line] == [
        "500/1201 keys copied", "1000/1201 keys copied", "1201/1201 keys copied"], lines
    assert lines[-1] == "1201 keys listed, 1201 items copied"


def test_stats_cachedump(make_server):
    """memcached's debugging dump (pymemcache's own tests call it). Small
    items only: memcached puts them in class 1, strata's one class. Lines
    compared as a set: memcached walks its LRU, strata its index."""
    c = make_server().connect()
    expect(c, b"set a:1 0 0 1\r\nx\r\nset b 5 100 3\r\nabc\r\n", b"STORED\r\nSTORED\r\n")
    now = int(time.time())
    c.send(b"stats cachedump 1 0\r\n")
    lines = read_until_end(c).split(b"\r\n")
    assert lines[-2:] == [b"END", b""]
    items = {}
    for line in lines[:-2]:
        m = re.fullmatch(rb"ITEM (\S+) \[(\d+) b; (\d+) s\]", line)
        assert m, line
        items[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    # memcached lists one LRU segment of the class (items just set are not
    # in it yet); strata lists every live item.
    assert set(items) <= {b"a:1", b"b"}
    assert items.get(b"a:1", (1, 0)) == (1, 0)
    size, exp = items.get(b"b", (3, now + 100))
    assert size == 3 and abs(exp - (now + 100)) <= 2
    if target() == "strata":
        assert set(items) == {b"a:1", b"b"}
        c.send(b"stats cachedump 1 1\r\n")
        assert read_until_end(c).count(b"ITEM ") == 1
    for args, reply in [
        (b"2 0", b"END\r\n"),
        (b"63 0", b"END\r\n"),
        (b"64 0", b"CLIENT_ERROR Illegal slab id\r\n"),
        (b"1", b"CLIENT_ERROR bad command line\r\n"),
        (b"1 x", b"CLIENT_ERROR bad command line format\r\n"),
        (b"-1 0", b"CLIENT_ERROR bad command line format\r\n"),
    ]:
        expect(c, b"stats cachedump " + args + b"\r\n", reply)
