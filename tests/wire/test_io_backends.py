"""strata's two I/O backends (-o io=uring, -o io=epoll) under the cases where
they differ: more connections than the io_uring worker has receive buffers,
values larger than one receive buffer, replies held back (back-pressure)
while the client keeps sending, and connections that close with replies in
flight. Every case runs on both backends and expects memcached's bytes."""

import socket
import time

import pytest

from harness import Conn, Server, free_port
from wirelib import (
    READ_TIMEOUT,
    assert_in_sync,
    expect,
    read_line_or_partial,
    read_n,
    run_binary,
    set_cmd,
    stats,
    stored,
    value_reply,
)

pytestmark = pytest.mark.strata_only

# io_buffers=2 starves the ring, so nearly every receive ends with ENOBUFS
# and is re-armed: the bytes must still arrive whole and in order.
BACKENDS = {"uring": "io=uring", "uring-2-buffers": "io=uring,io_buffers=2", "epoll": "io=epoll"}


@pytest.fixture(params=list(BACKENDS.values()), ids=list(BACKENDS))
def backend_server(request):
    # One worker thread, so every connection shares one ring and its
    # receive buffers.
    srv = Server(["-t", "1", "-o", request.param])
    yield srv
    srv.stop()


def connect(srv):
    return Conn(socket.create_connection(("127.0.0.1", srv.port), timeout=READ_TIMEOUT))


def assert_connections(c, n):
    """`curr_connections` reaches n (closes are noticed asynchronously)."""
    deadline = time.monotonic() + 5
    while stats(c)["curr_connections"] != str(n) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stats(c)["curr_connections"] == str(n)


def test_more_connections_than_receive_buffers(backend_server):
    conns = [connect(backend_server) for _ in range(150)]
    for i, c in enumerate(conns):
        c.send(set_cmd(b"key%d" % i, b"value-%d" % i))
    for c in conns:
        assert read_n(c, 8) == b"STORED\r\n"
    for i, c in enumerate(conns):
        c.send(b"get key%d\r\n" % ((i + 1) % len(conns)))
    for i, c in enumerate(conns):
        k = (i + 1) % len(conns)
        want = value_reply(b"key%d" % k, b"value-%d" % k) + b"END\r\n"
        assert read_n(c, len(want)) == want
    for c in conns:
        c.close()


def test_value_larger_than_a_receive_buffer(backend_server):
    c = connect(backend_server)
    v = bytes(range(256)) * 1200  # 300 KiB
    stored(c, b"big", v, flags=7)
    want = value_reply(b"big", v, 7) + b"END\r\n"
    c.send(b"get big\r\n")
    assert read_n(c, len(want)) == want
    assert_in_sync(c)


def test_large_values_pipelined_with_other_requests(backend_server):
    # On io_uring the rest of a large value is received straight into the
    # connection's buffer, exactly to its end: what follows it in the same
    # send must still be read, in order.
    c = connect(backend_server)
    a = bytes(range(256)) * 1200  # 300 KiB
    b = bytes(range(255, -1, -1)) * 800  # 200 KiB
    c.send(set_cmd(b"a", a) + b"get a\r\n" + set_cmd(b"b", b, flags=3) + b"get b a\r\n")
    want = (
        b"STORED\r\n"
        + value_reply(b"a", a)
        + b"END\r\n"
        + b"STORED\r\n"
        + value_reply(b"b", b, 3)
        + value_reply(b"a", a)
        + b"END\r\n"
    )
    assert read_n(c, len(want), timeout=30) == want
    assert_in_sync(c)


def test_a_large_value_arriving_in_pieces(backend_server):
    c = connect(backend_server)
    v = bytes(range(256)) * 2000  # 500 KiB
    msg = set_cmd(b"slow", v)
    # Pieces with pauses between them: a receive waiting for the whole
    # rest gets it over several arrivals.
    for at in range(0, len(msg), 60_000):
        c.send(msg[at : at + 60_000])
        time.sleep(0.01)
    assert read_n(c, 8) == b"STORED\r\n"
    want = value_reply(b"slow", v) + b"END\r\n"
    c.send(b"get slow\r\n")
    assert read_n(c, len(want)) == want


def test_clients_gone_in_the_middle_of_a_large_value(backend_server):
    # A receive in flight into a connection's buffer when its client goes:
    # the connection is cancelled and dropped, the server goes on.
    for _ in range(20):
        d = connect(backend_server)
        d.send(b"set big 0 0 500000\r\n" + b"z" * 150_000)
        d.sock.close()
    other = connect(backend_server)
    expect(other, set_cmd(b"k", b"v"), b"STORED\r\n")
    assert_connections(other, 1)


def test_pipelined_gets_past_the_reply_limit_arrive_whole(backend_server):
    # 64 gets of a 100 KiB value queue 6.4 MiB of replies, far past the
    # 256 KiB at which strata stops taking requests from the client.
    c = connect(backend_server)
    v = b"x" * 100_000
    stored(c, b"v", v)
    one = value_reply(b"v", v) + b"END\r\n"
    c.send(b"get v\r\n" * 64 + b"get v v\r\n")
    got = read_n(c, 64 * len(one), timeout=30)
    assert got == one * 64
    two = value_reply(b"v", v) * 2 + b"END\r\n"
    assert read_n(c, len(two)) == two
    assert_in_sync(c)


def test_connection_closed_with_replies_in_flight(backend_server):
    c = connect(backend_server)
    v = b"y" * 200_000
    stored(c, b"w", v)
    for _ in range(20):
        d = connect(backend_server)
        d.send(b"get w\r\n" * 50)
        d.sock.close()
    # The server survives and forgets those connections.
    other = connect(backend_server)
    want = value_reply(b"w", v) + b"END\r\n"
    other.send(b"get w\r\n")
    assert read_n(other, len(want)) == want
    assert_connections(other, 2)


def test_quit_stops_reading_the_rest_of_the_batch(backend_server):
    c = connect(backend_server)
    expect(c, b"set q 0 0 1\r\nq\r\n", b"STORED\r\n")
    c.send(b"get q\r\nquit\r\nget q\r\n")
    want = b"VALUE q 0 1\r\nq\r\nEND\r\n"
    assert read_n(c, len(want)) == want
    assert c.is_closed()


@pytest.mark.parametrize(
    "opt, message",
    [("io=kqueue", b"invalid io"), ("io_buffers=3", b"invalid io_buffers"), ("io_buffers=8192", b"invalid io_buffers")],
)
def test_bad_io_options_are_refused(opt, message):
    r = run_binary(["-o", opt, "-l", "127.0.0.1", "-p", str(free_port())])
    assert r.returncode != 0
    assert message in r.stderr


@pytest.mark.parametrize("tail", [b"", b"quit\r\n"], ids=["eof", "quit"])
@pytest.mark.parametrize("reqs_per_event", ["20", "1"])
@pytest.mark.parametrize("opt", list(BACKENDS.values()), ids=list(BACKENDS))
def test_requests_then_half_close_get_replies_then_close(opt, tail, reqs_per_event):
    # A client that writes its requests and shuts down its sending side
    # (`printf ... | nc -N`) must get every reply, then see the server close.
    srv = Server(["-t", "1", "-R", reqs_per_event, "-o", opt])
    try:
        c = connect(srv)
        stored(c, b"h", b"hi")
        c.send(b"get h\r\n" * 3 + b"version\r\n" + tail)
        c.sock.shutdown(socket.SHUT_WR)
        want = (value_reply(b"h", b"hi") + b"END\r\n") * 3
        assert read_n(c, len(want)) == want
        assert read_line_or_partial(c).startswith(b"VERSION ")
        assert c.is_closed()
        assert_connections(connect(srv), 1)
    finally:
        srv.stop()
