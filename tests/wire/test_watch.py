"""watch: memcached's live event log (fetchers, mutations, evictions,
connevents), line formats compared with Debian's memcached.

Both log the lookup a storage command or a delete makes as an item_get
(a set logs one before its item_store). Sequences are checked as
subsequences of what each server printed.
"""

import re
import socket
import time

import pytest

from harness import Conn, target
from wirelib import assert_in_sync, expect, stats

LINE = re.compile(rb"ts=(\d+)\.(\d+) gid=(\d+) type=(\w+) (.*)")


def fields(rest):
    return dict(kv.split(b"=", 1) for kv in rest.split(b" "))


class Watch:
    def __init__(self, srv, kinds=b""):
        self.sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        self.sock.sendall(b"watch" + (b" " + kinds if kinds else b"") + b"\r\n")
        assert self.sock.recv(4) == b"OK\r\n"
        self.buf = b""

    def events(self, want, timeout=5.0):
        """Parsed lines until `want(events)` holds."""
        out, deadline = [], time.monotonic() + timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                m = LINE.fullmatch(line)
                assert m, line
                out.append((m.group(4).decode(), fields(m.group(5)), int(m.group(3))))
            if want(out):
                return out
            left = deadline - time.monotonic()
            assert left > 0, out
            self.sock.settimeout(left)
            self.buf += self.sock.recv(65536)


def subsequence(events, wanted):
    """Each (type, {field: value}) of `wanted` appears, in order."""
    it = iter(events)
    return all(any(t == wt and all(f.get(k) == v for k, v in wf.items()) for t, f, _ in it) for wt, wf in wanted)


def test_fetchers_and_mutations_in_memcacheds_format(make_server):
    srv = make_server()
    w = Watch(srv, b"fetchers mutations")
    c = srv.connect()
    expect(c, b"set wk 5 100 3\r\nabc\r\n", b"STORED\r\n")
    expect(c, b"get wk nokey\r\n", b"VALUE wk 5 3\r\nabc\r\nEND\r\n")
    expect(c, b"add wk 0 0 1\r\nx\r\n", b"NOT_STORED\r\n")
    expect(c, b"append wk 0 0 2\r\nde\r\n", b"STORED\r\n")
    big = b"z" * (1100 * 1024)
    expect(c, b"set big 0 0 %d\r\n%s\r\n" % (len(big), big), b"SERVER_ERROR object too large for cache\r\n")
    expect(c, b"delete wk\r\n", b"DELETED\r\n")
    expect(c, b"delete wk\r\n", b"NOT_FOUND\r\n")
    expect(c, b"incr wk 1\r\n", b"NOT_FOUND\r\n")
    wanted = [
        # The set's own lookup, then its store.
        ("item_get", {b"key": b"wk", b"status": b"not_found", b"clsid": b"0", b"size": b"0"}),
        ("item_store", {b"key": b"wk", b"status": b"stored", b"cmd": b"set", b"ttl": b"100", b"clsid": b"1",
                        b"size": b"3"}),
        ("item_get", {b"key": b"wk", b"status": b"found", b"clsid": b"1", b"size": b"3"}),
        ("item_get", {b"key": b"nokey", b"status": b"not_found", b"clsid": b"0", b"size": b"0"}),
        ("item_store", {b"key": b"wk", b"status": b"not_stored", b"cmd": b"add", b"size": b"1"}),
        ("item_store", {b"key": b"wk", b"status": b"stored", b"cmd": b"append"}),
        ("item_store", {b"key": b"big", b"status": b"too_large", b"cmd": b"set"}),
        # Each delete's lookup: the appended value, then nothing.
        ("item_get", {b"key": b"wk", b"status": b"found", b"clsid": b"1", b"size": b"5"}),
        ("item_get", {b"key": b"wk", b"status": b"not_found", b"clsid": b"0", b"size": b"0"}),
        ("item_get", {b"key": b"wk", b"status": b"not_found", b"clsid": b"0", b"size": b"0"}),  # incr
    ]
    events = w.events(lambda ev: subsequence(ev, wanted))
    gids = [g for _, _, g in events]
    assert gids == sorted(gids) and len(set(gids)) == len(gids)
    # cfd is the client's descriptor: the same on every line of it.
    assert len({f[b"cfd"] for _, f, _ in events if f[b"key"] != b"big"}) == 1


def test_plain_watch_is_fetchers_only(make_server):
    srv = make_server()
    w = Watch(srv)
    c = srv.connect()
    expect(c, b"set k 0 0 1\r\nv\r\nmg k v\r\n", b"STORED\r\nVA 1\r\nv\r\n")
    events = w.events(lambda ev: subsequence(ev, [("item_get", {b"key": b"k", b"status": b"found"})]))
    assert {t for t, _, _ in events} == {"item_get"}


def test_connection_events(make_server):
    srv = make_server()
    w = Watch(srv, b"connevents")
    c = socket.create_connection(("127.0.0.1", srv.port))
    port = str(c.getsockname()[1]).encode()
    c.sendall(b"version\r\n")
    assert c.recv(100).startswith(b"VERSION ")
    c.close()
    peer = {b"rip": b"127.0.0.1", b"rport": port, b"transport": b"tcp"}
    events = w.events(lambda ev: subsequence(ev, [("conn_new", peer), ("conn_close", {**peer, b"reason": b"normal"})]))
    new = next(f for t, f, _ in events if t == "conn_new" and f[b"rport"] == port)
    close = next(f for t, f, _ in events if t == "conn_close" and f[b"rport"] == port)
    assert new[b"cfd"] == close[b"cfd"]


def test_close_reasons_error_and_normal(make_server):
    """memcached's reason=error for a connection it closes over a protocol
    error (a line too long to be a command, a binary header whose key
    does not fit its body),
    and reason=normal for quit and for the client closing."""
    srv = make_server()
    w = Watch(srv, b"connevents")
    ports = {}
    for case, data in [("long_line", b"x" * 5000), ("bad_binary", bytes([0x80, 0x00, 0x00, 0x03]) + bytes(20) + b"foo"),
                       ("quit", b"quit\r\n"), ("client", b"")]:
        c = socket.create_connection(("127.0.0.1", srv.port))
        ports[case] = str(c.getsockname()[1]).encode()
        if case == "client":
            c.sendall(b"version\r\n")
            assert c.recv(100).startswith(b"VERSION ")
            c.close()
            continue
        c.sendall(data)
        assert Conn(c).is_closed(), case
        c.close()
    reasons = {"long_line": b"error", "bad_binary": b"error", "quit": b"normal", "client": b"normal"}
    # memcached gathers lines per worker thread: across connections they
    # need not come in order.
    closed = lambda ev: {f[b"rport"] for t, f, _ in ev if t == "conn_close"}  # noqa: E731
    events = w.events(lambda ev: set(ports.values()) <= closed(ev))
    for case, reason in reasons.items():
        close = [f for t, f, _ in events if t == "conn_close" and f[b"rport"] == ports[case]]
        assert [f[b"reason"] for f in close] == [reason], (case, close)


@pytest.mark.not_over_flash("items go to flash rather than being evicted")
def test_eviction_events(make_server):
    srv = make_server(["-m", "8"])
    w = Watch(srv, b"evictions")
    c = srv.connect()
    value = b"x" * 100000
    c.send(b"".join(b"set e%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value) for i in range(200)))
    assert_in_sync(c)
    events = w.events(lambda ev: len(ev) >= 1)
    t, f, _ = events[0]
    assert t == "eviction"
    assert re.fullmatch(rb"e\d+", f[b"key"])
    assert (f[b"fetch"], f[b"ttl"]) == (b"no", b"-1")
    assert int(f[b"la"]) >= 0 and int(f[b"clsid"]) >= 1 and int(f[b"size"]) >= 100000


def test_bad_kinds_and_the_limit(make_server):
    srv = make_server()
    c = srv.connect()
    expect(c, b"watch fetchers bogus\r\n", b"ERROR\r\n")
    assert_in_sync(c)
    watchers = [Watch(srv) for _ in range(20)]
    expect(c, b"watch\r\n", b"WATCHER_TOO_MANY log watcher limit reached\r\n")
    assert_in_sync(c)
    assert stats(c)["log_watchers"] == "20"
    watchers[0].sock.close()
    deadline = time.monotonic() + 5
    while stats(c)["log_watchers"] != "19":
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_w_refuses_watch(make_server):
    c = make_server(["-W"]).connect()
    expect(c, b"watch\r\n", b"CLIENT_ERROR watch commands not allowed\r\n")
    assert_in_sync(c)


@pytest.mark.strata_only
def test_a_watcher_is_not_an_idle_connection(make_server):
    srv = make_server(["-o", "idle_timeout=5", "--enable-debug-clock"])
    w = Watch(srv, b"mutations")
    c = srv.connect()
    expect(c, b"debug_advance_clock 10\r\n", b"OK\r\n")
    time.sleep(1.5)  # the idle sweep runs once a second
    expect(c, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
    w.events(lambda ev: subsequence(ev, [("item_store", {b"key": b"k"})]))
