"""What connections cost in memory: an idle one holds no buffers (at most
2 KB of the server's RSS each; it was 12.5 KB, memcached's is 0.7 KB), what
connections used is given back once they close, and clients that never read
their replies are held to a server-wide budget (-o read_buf_mem_limit).
"""

import socket
import time

import pytest

from wirelib import expect, read_until_end, stats

pytestmark = [
    pytest.mark.strata_only,
    pytest.mark.not_over_flash("RSS figures for memory items only"),
]

N = 2000


def wait_conns(c, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while int(stats(c)["curr_connections"]) != n:
        assert time.monotonic() < deadline, f"curr_connections never reached {n}"
        time.sleep(0.02)


def test_idle_connections_hold_no_buffers_and_give_memory_back(make_server):
    srv = make_server(["-c", str(N + 100), "-t", "2"])
    probe = srv.connect()
    expect(probe, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
    # Warm the workers' pools and allocator with a first round.
    first = [srv.connect() for _ in range(64)]
    for c in first:
        c.send(b"get k\r\n")
    for c in first:
        assert read_until_end(c) == b"VALUE k 0 1\r\nv\r\nEND\r\n"
    for c in first:
        c.sock.close()
    wait_conns(probe, 1)
    base = srv.rss_bytes()
    conns = [srv.connect() for _ in range(N)]
    # Each has sent a request and had its reply: it has been served, then
    # gone idle.
    for c in conns:
        c.send(b"get k\r\n")
    for c in conns:
        assert read_until_end(c) == b"VALUE k 0 1\r\nv\r\nEND\r\n"
    wait_conns(probe, N + 1)
    per_conn = (srv.rss_bytes() - base) / N
    assert per_conn <= 2048, f"{per_conn:.0f} bytes of RSS per idle connection"
    for c in conns:
        c.sock.close()
    wait_conns(probe, 1)
    # The workers' connection tables keep their slots (a few hundred bytes
    # each) for the next connections; the rest is given back.
    kept = (srv.rss_bytes() - base) / N
    assert kept <= 1024, f"{kept:.0f} bytes per closed connection still resident"
    expect(probe, b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")


def charged(c):
    return int(stats(c)["strata_reply_bytes_charged"])


VALUE = b"v" * 50_000
KEYS = [b"big:%d" % i for i in range(200)]
HOGS = 80


def hog(srv, limit_mb):
    """A server whose queued replies are limited to `limit_mb`, and HOGS
    clients that each ask for 10 MB of values and read nothing (their small
    receive buffers fill at once, so the replies queue in the server)."""
    srv = srv(["-m", "64", "-t", "2", "-o", f"read_buf_mem_limit={limit_mb}"])
    c = srv.connect()
    for k in KEYS:
        expect(c, b"set %s 0 0 %d\r\n%s\r\n" % (k, len(VALUE), VALUE), b"STORED\r\n")
    hogs = []
    for _ in range(HOGS):
        h = srv.connect()
        h.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        h.send(b"get " + b" ".join(KEYS) + b"\r\n")
        hogs.append(h)
    return srv, c, hogs


def settled(c, at_least, timeout=10.0):
    """The charges once they stop growing (and have reached `at_least`)."""
    deadline = time.monotonic() + timeout
    last = -1
    while True:
        now = charged(c)
        if now >= at_least and now == last:
            return now
        assert time.monotonic() < deadline, f"charges still moving: {now}"
        last = now
        time.sleep(0.2)


def test_clients_that_never_read_are_held_to_the_reply_budget(make_server):
    limit = 4 << 20
    srv, c, hogs = hog(make_server, 4)
    assert stats(c, "settings")["read_buf_mem_limit"] == str(limit)
    held = settled(c, limit)
    # Held at the limit: past it, a connection may still finish the value
    # that took it over its 64 KiB allowance.
    assert held <= limit + HOGS * len(VALUE), held
    # A client that reads gets a reply of any size meanwhile.
    reader = srv.connect()
    reader.send(b"get " + b" ".join(KEYS) + b"\r\n")
    want = b"".join(b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(VALUE), VALUE) for k in KEYS) + b"END\r\n"
    assert read_until_end(reader, timeout=30) == want
    expect(c, b"get big:0\r\n", b"VALUE big:0 0 %d\r\n%s\r\nEND\r\n" % (len(VALUE), VALUE))
    for h in hogs:
        h.sock.close()
    deadline = time.monotonic() + 10
    while charged(c) != 0:
        assert time.monotonic() < deadline, f"charges left after the clients closed: {charged(c)}"
        time.sleep(0.05)


def test_without_the_budget_each_client_holds_its_own_limit(make_server):
    """The same clients with read_buf_mem_limit=0 (memcached's default):
    each queues up to its own 256 KiB, three times what the budget allowed."""
    srv, c, hogs = hog(make_server, 0)
    unlimited = settled(c, HOGS * (150 << 10))
    assert unlimited >= 3 * ((4 << 20) + HOGS * len(VALUE)) // 2, unlimited
