"""Compatibility with memcached-tool, the Perl admin script Debian's memcached ships.

Each test runs ``memcached-tool 127.0.0.1:PORT MODE`` (under a timeout, so a
mode that never ends fails) against a fresh server and checks what it
prints: ``stats`` (``stats``), ``settings`` (``stats settings``), ``sizes``
(``stats sizes``), ``display`` (``stats items`` and ``stats slabs``), ``keys``
(``lru_crawler metadump all``) and ``dump`` (metadump, then a ``get`` per key,
printed as ``add`` commands that load the items into another server).
"""

import os
import re
import shutil
import subprocess

import pytest

import harness

TOOL = shutil.which("memcached-tool") or "/usr/share/memcached/scripts/memcached-tool"

pytestmark = pytest.mark.skipif(
    not os.path.exists(TOOL), reason="memcached-tool is not installed (Debian package memcached)"
)

# Over strata's flash tier (STRATA_FLASH=1: every item goes to flash at once)
# lru_crawler metadump lists only the items in memory (docs/protocol.md), so
# dump and keys find nothing there.
metadump_in_memory = pytest.mark.skipif(
    bool(os.environ.get("STRATA_FLASH")) and harness.target() == "strata",
    reason="over the flash tier: lru_crawler metadump lists items in memory only",
)

# key -> (flags, exptime, value); exptime 0 or seconds from now.
ITEMS = {
    "plain": (0, 0, b"abc"),
    "flags": (4294967295, 0, b"max flags"),
    "per%cent": (5, 0, b"percent in the key"),
    "a:b/c?d=e": (1, 0, b"url-ish key"),
    "ключ": (2, 0, "utf-8 key".encode()),
    "binary": (3, 0, b"line1\r\nline2\x00\xff END\r\n"),
    "empty": (0, 0, b""),
    "ttl": (7, 3600, b"expires in an hour"),
    "big": (0, 0, bytes(range(256)) * 1000),
}


def run_tool(srv, *mode, timeout=30):
    proc = subprocess.run(
        [TOOL, f"127.0.0.1:{srv.port}", *mode], capture_output=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc


def store(srv, items):
    conn = srv.connect()
    try:
        for key, (flags, exptime, value) in items.items():
            line = f"set {key} {flags} {exptime} {len(value)}\r\n".encode()
            assert conn.call(line + value + b"\r\n") == b"STORED\r\n", key
    finally:
        conn.close()


def raw_stats(srv, arg=""):
    conn = srv.connect()
    try:
        reply = conn.call(f"stats {arg}".strip().encode() + b"\r\n", b"END\r\n")
    finally:
        conn.close()
    out = {}
    for line in reply.decode().split("\r\n")[:-2]:
        _, name, value = line.split(" ", 2)
        out[name] = value
    return out


def raw_get(srv, key):
    conn = srv.connect()
    try:
        return conn.call(b"get " + key.encode() + b"\r\n", b"END\r\n")
    finally:
        conn.close()


def checked_server():
    s = harness.Server()
    yield s
    alive = s.proc.poll() is None
    s.stop()
    assert alive, f"server exited during the test with code {s.proc.returncode}"


# A server of its own for each test that looks at the items (display, dump,
# keys); one for the module's stats, settings and sizes, which store nothing
# but test_stats's items.
srv = pytest.fixture(checked_server)
shared = pytest.fixture(scope="module")(checked_server)


def parse_table(text, header):
    """The rows of a stats-like table. The tool strips only the \\n of each
    STAT line it reads, so every value it prints ends in the reply's \\r."""
    lines = text.split("\n")
    assert lines[0] == header and lines[-1] == ""
    rows = {}
    for line in lines[1:-1]:
        m = re.fullmatch(r" *(\S+) +(.*)\r", line)
        assert m, line
        rows[m.group(1)] = m.group(2)
    return rows


def test_stats(shared):
    srv = shared
    store(srv, ITEMS)
    proc = run_tool(srv, "stats")
    out = proc.stdout.decode()
    # printf("#%-22s %5s %13s\n") then ("%29s %14s\n") per stat, sorted by name.
    header = f"#{f'127.0.0.1:{srv.port}':<22} Field         Value"
    rows = parse_table(out, header)
    assert list(rows) == sorted(rows)
    raw = raw_stats(srv)
    assert set(rows) == set(raw)
    for name in ("pid", "version", "curr_items", "total_items", "cmd_set", "limit_maxbytes", "threads"):
        assert rows[name] == raw[name], name
    assert rows["pid"] == str(srv.pid())
    assert rows["curr_items"] == str(len(ITEMS))
    assert rows["cmd_set"] == str(len(ITEMS))


def test_settings(shared):
    srv = shared
    out = run_tool(srv, "settings").stdout.decode()
    header = f"#{f'127.0.0.1:{srv.port}':<17} Field       Value"
    rows = parse_table(out, header)
    assert list(rows) == sorted(rows)
    assert set(rows) == set(raw_stats(srv, "settings"))
    assert rows["tcpport"] == str(srv.port)
    assert rows["maxbytes"] == str(64 * 1024 * 1024)
    assert rows["item_size_max"] == str(1024 * 1024)
    assert rows["cas_enabled"] == "yes"
    assert rows["evictions"] == "on"


def test_sizes(shared):
    srv = shared
    out = run_tool(srv, "sizes").stdout.decode()
    header = f"#{f'127.0.0.1:{srv.port}':<17}  Size       Count"
    assert out == f"{header}\n{'sizes_status':>24} {'disabled' + chr(13):>12}\n"


DISPLAY_HEADER = "  #  Item_Size  Max_age   Pages   Count   Full?  Evicted Evict_Time OOM"


def test_empty_cache(srv):
    # No items: no slab class has pages yet, so display prints its header
    # only; dump and keys print nothing, and end.
    assert run_tool(srv).stdout.decode() == DISPLAY_HEADER + "\n"
    proc = run_tool(srv, "dump")
    assert (proc.stdout, proc.stderr) == (b"", b"Dumping memcache contents\n")
    proc = run_tool(srv, "keys")
    assert (proc.stdout, proc.stderr) == (b"", b"Dumping memcache keys\n")


# Over the flash tier every item is on flash: memcached-tool display leaves
# out the class that counts them, which has no pages in memory.
@pytest.mark.skipif(
    bool(os.environ.get("STRATA_FLASH")) and harness.target() == "strata",
    reason="over the flash tier: items on flash are counted in class 1, which has no pages in memory",
)
def test_display(srv):
    header = DISPLAY_HEADER
    store(srv, ITEMS)
    out = run_tool(srv, "display").stdout.decode()
    lines = out.split("\n")
    assert lines[0] == header and lines[-1] == ""
    row = re.compile(r" *(\d+) +(\d+B|\d+\.\dK) +(\d+)s +(\d+) +(\d+) +(yes| no) +(\d+) +(\d+) +(\d+)")
    counts = []
    for line in lines[1:-1]:
        m = row.fullmatch(line)
        assert m, line
        _cls, _size, _age, pages, count, _full, evicted, _evict_time, oom = m.groups()
        assert int(pages) >= 1 and evicted == "0" and oom == "0", line
        counts.append(int(count))
    # Every item is counted once, in some class.
    assert sum(counts) == len(ITEMS)


def parse_dump(data):
    """memcached-tool dump's output: key -> (flags, exptime, value)."""
    items = {}
    rest = data
    while rest:
        line, rest = rest.split(b"\r\n", 1)
        m = re.fullmatch(rb"add (\S+) (\d+) (\d+) (\d+)", line)
        assert m, line
        n = int(m.group(4))
        assert rest[n : n + 2] == b"\r\n"
        items[m.group(1).decode()] = (int(m.group(2)), int(m.group(3)), rest[:n])
        rest = rest[n + 2 :]
    return items


@metadump_in_memory
def test_dump_lists_every_item_and_loads_into_another_server(srv):
    store(srv, ITEMS)
    now = int(raw_stats(srv)["time"])
    proc = run_tool(srv, "dump")
    assert proc.stderr == b"Dumping memcache contents\n"
    dumped = parse_dump(proc.stdout)
    assert set(dumped) == set(ITEMS)
    for key, (flags, exptime, value) in ITEMS.items():
        got_flags, got_exp, got_value = dumped[key]
        assert (got_flags, got_value) == (flags, value), key
        if exptime:
            # An absolute Unix time (the server's clock).
            assert now + exptime - 2 <= got_exp <= now + exptime + 2, (key, got_exp, now)
        else:
            assert got_exp == 0, key
    # The dump is a stream of add commands: fed to an empty server, it
    # recreates the items.
    with harness.Server() as other:
        conn = other.connect()
        conn.send(proc.stdout)
        for _ in ITEMS:
            assert conn.read_line() == b"STORED\r\n"
        conn.close()
        for key in ITEMS:
            assert raw_get(other, key) == raw_get(srv, key), key


@metadump_in_memory
def test_dump_with_a_limit(srv):
    store(srv, ITEMS)
    proc = run_tool(srv, "dump", "3")
    assert proc.stderr == b"Dumping memcache contents (limiting to 3 keys)\n"
    dumped = parse_dump(proc.stdout)
    assert len(dumped) == 3
    for key, (flags, _exp, value) in dumped.items():
        assert (flags, value) == (ITEMS[key][0], ITEMS[key][2])
    # The tool hung up in the middle of the metadump; the server goes on.
    assert raw_get(srv, "plain") == b"VALUE plain 0 3\r\nabc\r\nEND\r\n"


@metadump_in_memory
def test_keys(srv):
    store(srv, ITEMS)
    now = int(raw_stats(srv)["time"])
    proc = run_tool(srv, "keys")
    assert proc.stderr == b"Dumping memcache keys\n"
    line_re = re.compile(r"key=(\S+) exp=(-?\d+) la=(\d+) cas=(\d+) fetch=(yes|no) cls=(\d+) size=(\d+)")
    seen = {}
    for line in proc.stdout.decode().split("\n")[:-1]:
        m = line_re.fullmatch(line)
        assert m, line
        seen[m.group(1)] = m
    # Keys are URL-encoded (% and bytes outside printable ASCII, ':' and '/').
    encoded = {
        "plain": "plain",
        "flags": "flags",
        "per%cent": "per%25cent",
        "a:b/c?d=e": "a%3Ab%2Fc%3Fd%3De",
        "ключ": "%D0%BA%D0%BB%D1%8E%D1%87",
        "binary": "binary",
        "empty": "empty",
        "ttl": "ttl",
        "big": "big",
    }
    assert set(seen) == set(encoded.values())
    for key, enc in encoded.items():
        m = seen[enc]
        exptime = ITEMS[key][1]
        if exptime:
            assert now + exptime - 2 <= int(m.group(2)) <= now + exptime + 2
        else:
            assert m.group(2) == "-1"
        assert m.group(5) == "no"
        assert now - 2 <= int(m.group(3)) <= now + 2
