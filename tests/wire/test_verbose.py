"""-vv: memcached's log of each connection, command and reply line, and
strata's start-up line. The -vv lines hold against memcached too
(WIRE_TARGET=memcached): strata's log puts a timestamp and level before
each, so lines are matched by their end.
"""

import os
import re
import signal
import time

import pytest

from wirelib import expect, stats, target


def log_of(srv):
    """Stops the server; returns its log (stderr) as lines."""
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(10)
    return srv.proc.stderr.read().decode(errors="replace").splitlines()


def fd_of(srv, c):
    """The server's descriptor for connection `c` (from `stats conns` on
    another connection: `c` has not yet chosen its protocol)."""
    me = "tcp:127.0.0.1:%d" % c.sock.getsockname()[1]
    other = srv.connect()
    # Listed once the server has accepted it, which may be a moment after
    # the client's connect returned.
    deadline = time.monotonic() + 5
    while True:
        s = stats(other, "conns")
        fds = [int(k.split(":")[0]) for k, v in s.items() if k.endswith(":addr") and v == me]
        if fds or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    other.close()
    assert fds, s
    return fds[0]


def logged(lines, text):
    """Lines that end with `text` as a whole (after strata's log prefix)."""
    pat = re.compile(r"(^|\s)" + re.escape(text) + r"$")
    return [line for line in lines if pat.search(line)]


def test_vv_logs_commands_and_replies_as_memcached_does(make_server):
    srv = make_server(["-vv"])
    c = srv.connect()
    fd = fd_of(srv, c)
    expect(c, b"get foo\r\n", b"END\r\n")
    expect(c, b"set foo 0 0 3\r\nbar\r\n", b"STORED\r\n")
    expect(c, b"get foo\r\n", b"VALUE foo 0 3\r\nbar\r\nEND\r\n")
    c.send(b"set n 0 0 1 noreply\r\n5\r\n")
    expect(c, b"incr n 2\r\n", b"7\r\n")
    expect(c, b"delete nope\r\n", b"NOT_FOUND\r\n")
    expect(c, b"mn\r\n", b"MN\r\n")
    expect(c, b"mg foo v\r\n", b"VA 3\r\nbar\r\n")
    expect(c, b"bogus\r\n", b"ERROR\r\n")
    c.send(b"quit\r\n")
    assert c.is_closed()
    lines = log_of(srv)
    want = [
        "<%d new auto-negotiating client connection" % fd,
        "%d: Client using the ascii protocol" % fd,
        "<%d get foo" % fd,
        ">%d END" % fd,
        "<%d set foo 0 0 3" % fd,
        ">%d STORED" % fd,
        ">%d sending key foo" % fd,
        "<%d set n 0 0 1 noreply" % fd,
        ">%d NOREPLY STORED" % fd,
        "<%d incr n 2" % fd,
        ">%d 7" % fd,
        "<%d delete nope" % fd,
        ">%d NOT_FOUND" % fd,
        "<%d mn" % fd,
        ">%d MN" % fd,
        "<%d mg foo v" % fd,
        "<%d bogus" % fd,
        ">%d ERROR" % fd,
        "<%d quit" % fd,
        "<%d connection closed." % fd,
    ]
    for text in want:
        assert logged(lines, text), (text, lines)
    # In order: each at its place after the one before.
    at = [lines.index(logged(lines, text)[0]) for text in want[2:5]]
    assert at == sorted(at), at
    # memcached logs no reply line for a meta command's success, and a
    # get's value only by its key.
    assert not logged(lines, ">%d VA 3" % fd) and not logged(lines, ">%d bar" % fd), lines
    assert len(logged(lines, ">%d END" % fd)) == 2


def test_vv_logs_the_binary_header(make_server):
    srv = make_server(["-vv"])
    c = srv.connect()
    fd = fd_of(srv, c)
    noop = bytes([0x80, 0x0A]) + bytes(22)
    c.send(noop)
    got = c.read_exact(24)
    assert got[:2] == bytes([0x81, 0x0A])
    c.close()
    lines = log_of(srv)
    want = [
        "<%d Read binary protocol data:" % fd,
        "<%d    0x80 0x0a 0x00 0x00" % fd,
        "<%d    0x00 0x00 0x00 0x00" % fd,
        ">%d Writing bin response:" % fd,
        ">%d   0x81 0x0a 0x00 0x00" % fd,
    ]
    for text in want:
        assert logged(lines, text), (text, lines)


def test_without_vv_no_command_is_logged(make_server):
    srv = make_server(["-v"])
    c = srv.connect()
    fd = fd_of(srv, c)
    expect(c, b"get foo\r\n", b"END\r\n")
    lines = log_of(srv)
    assert not logged(lines, "<%d get foo" % fd) and not logged(lines, ">%d END" % fd), lines


def test_v_logs_nothing_per_connection(make_server):
    """memcached's -v is errors and warnings: a config that keeps it does not
    get a line per connection (memcached prints none for these)."""
    srv = make_server(["-v"])
    n = 66
    peers = []
    for _ in range(n):
        c = srv.connect()
        peers.append("127.0.0.1:%d" % c.sock.getsockname()[1])
        assert c.call(b"version\r\n").startswith(b"VERSION ")
        c.close()
    lines = log_of(srv)
    assert [line for line in lines if any(p in line for p in peers)] == [], lines
    assert not [line for line in lines if "connection accepted" in line or "client connection" in line], lines
    assert len(lines) < n, lines


@pytest.mark.strata_only
def test_vvv_logs_each_connection_with_its_peer(make_server):
    srv = make_server(["-vvv"])
    c = srv.connect()
    me = "127.0.0.1:%d" % c.sock.getsockname()[1]
    assert stats(c, "settings")["verbosity"] == "3"
    lines = log_of(srv)
    assert [line for line in lines if "connection accepted" in line and me in line], lines


@pytest.mark.strata_only
def test_verbosity_2_turns_the_command_log_on(make_server):
    srv = make_server()
    c = srv.connect()
    fd = fd_of(srv, c)
    expect(c, b"get before\r\n", b"END\r\n")
    expect(c, b"verbosity 2\r\n", b"OK\r\n")
    expect(c, b"get after\r\n", b"END\r\n")
    lines = log_of(srv)
    assert logged(lines, "<%d get after" % fd) and not logged(lines, "<%d get before" % fd), lines


@pytest.mark.strata_only
def test_start_up_line_gives_the_version_and_settings(make_server):
    srv = make_server(["-m", "100", "-c", "50", "-t", "2", "-I", "2m"])
    version = stats(srv.connect())["strata_version"]
    lines = [line for line in log_of(srv) if "strata starting" in line]
    assert len(lines) == 1, lines
    line = lines[0]
    assert " INFO " in line
    fields = dict(kv.split("=", 1) for kv in line.split("strata starting ", 1)[1].split(" "))
    assert fields == {
        "version": version,
        "protocol": "1.6.38",
        "port": str(srv.port),
        "udp_port": "0",
        "listen": "127.0.0.1",
        "memory_mb": "100",
        "max_conns": "50",
        "threads": "2",
        "item_size_max": str(2 << 20),
        "io": fields["io"],
        "flash": fields["flash"],
        "snapshot": "off",
        "durability": "off",
        "compression": "off",
    }, line
    assert fields["io"] in ("io_uring", "epoll")
    if os.environ.get("STRATA_IO") == "epoll":
        assert fields["io"] == "epoll"
    assert fields["flash"] == "off" or fields["flash"].startswith("/")


def test_v_logs_a_memory_limit_changed_by_cache_memlimit(make_server):
    # memcached at -v: "maxbytes adjusted to 100m" for each change that
    # took; nothing for one refused, nor without -v.
    srv = make_server(["-v", "-m", "64"])
    c = srv.connect()
    expect(c, b"cache_memlimit 100\r\n", b"OK\r\n")
    expect(c, b"cache_memlimit 4\r\n", b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n")
    expect(c, b"cache_memlimit 80\r\n", b"OK\r\n")
    lines = log_of(srv)
    assert len(logged(lines, "maxbytes adjusted to 100m")) == 1, lines
    assert len(logged(lines, "maxbytes adjusted to 80m")) == 1, lines
    assert not logged(lines, "maxbytes adjusted to 4m"), lines
    quiet = make_server(["-m", "64"])
    c = quiet.connect()
    expect(c, b"cache_memlimit 100\r\n", b"OK\r\n")
    assert not [line for line in log_of(quiet) if "maxbytes adjusted" in line]
