"""strata's two I/O backends (-o io=uring, -o io=epoll) under the cases where
they differ: more connections than the io_uring worker has receive buffers,
values larger than one receive buffer, replies held back (back-pressure)
while the client keeps sending, and connections that close with replies in
flight. Every case runs on both backends and expects memcached's bytes."""

import socket
import time

import pytest

from harness import Conn, Server, free_port
from wirelib import READ_TIMEOUT, assert_in_sync, expect, read_line_or_partial, read_n, run_binary, stats

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


def test_more_connections_than_receive_buffers(backend_server):
    conns = [connect(backend_server) for _ in range(150)]
    for i, c in enumerate(conns):
        v = b"value-%d" % i
        c.send(b"set key%d 0 0 %d\r\n%s\r\n" % (i, len(v), v))
    for c in conns:
        assert read_n(c, 8) == b"STORED\r\n"
    for i, c in enumerate(conns):
        c.send(b"get key%d\r\n" % ((i + 1) % len(conns)))
    for i, c in enumerate(conns):
        k = (i + 1) % len(conns)
        v = b"value-%d" % k
        want = b"VALUE key%d 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v)
        assert read_n(c, len(want)) == want
    for c in conns:
        c.close()


def test_value_larger_than_a_receive_buffer(backend_server):
    c = connect(backend_server)
    v = bytes(range(256)) * 1200  # 300 KiB
    expect(c, b"set big 7 0 %d\r\n%s\r\n" % (len(v), v), b"STORED\r\n")
    want = b"VALUE big 7 %d\r\n%s\r\nEND\r\n" % (len(v), v)
    c.send(b"get big\r\n")
    assert read_n(c, len(want)) == want
    assert_in_sync(c)


def test_pipelined_gets_past_the_reply_limit_arrive_whole(backend_server):
    # 64 gets of a 100 KiB value queue 6.4 MiB of replies, far past the
    # 256 KiB at which strata stops taking requests from the client.
    c = connect(backend_server)
    v = b"x" * 100_000
    expect(c, b"set v 0 0 %d\r\n%s\r\n" % (len(v), v), b"STORED\r\n")
    one = b"VALUE v 0 %d\r\n%s\r\nEND\r\n" % (len(v), v)
    c.send(b"get v\r\n" * 64 + b"get v v\r\n")
    got = read_n(c, 64 * len(one), timeout=30)
    assert got == one * 64
    two = b"VALUE v 0 %d\r\n%s\r\nVALUE v 0 %d\r\n%s\r\nEND\r\n" % (len(v), v, len(v), v)
    assert read_n(c, len(two)) == two
    assert_in_sync(c)


def test_connection_closed_with_replies_in_flight(backend_server):
    c = connect(backend_server)
    v = b"y" * 200_000
    expect(c, b"set w 0 0 %d\r\n%s\r\n" % (len(v), v), b"STORED\r\n")
    for _ in range(20):
        d = connect(backend_server)
        d.send(b"get w\r\n" * 50)
        d.sock.close()
    # The server survives and forgets those connections.
    other = connect(backend_server)
    want = b"VALUE w 0 %d\r\n%s\r\nEND\r\n" % (len(v), v)
    other.send(b"get w\r\n")
    assert read_n(other, len(want)) == want
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if stats(other)["curr_connections"] == "2":
            break
        time.sleep(0.02)
    assert stats(other)["curr_connections"] == "2"


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
def test_requests_then_half_close_get_replies_then_close(tail, reqs_per_event):
    # A client that writes its requests and shuts down its sending side
    # (`printf ... | nc -N`) must get every reply, then see the server close.
    for opt in BACKENDS.values():
        srv = Server(["-t", "1", "-R", reqs_per_event, "-o", opt])
        try:
            c = connect(srv)
            expect(c, b"set h 0 0 2\r\nhi\r\n", b"STORED\r\n")
            c.send(b"get h\r\n" * 3 + b"version\r\n" + tail)
            c.sock.shutdown(socket.SHUT_WR)
            want = b"VALUE h 0 2\r\nhi\r\nEND\r\n" * 3
            assert read_n(c, len(want)) == want, opt
            assert read_line_or_partial(c).startswith(b"VERSION "), opt
            assert c.is_closed(), opt
            other = connect(srv)
            deadline = time.monotonic() + 5
            while stats(other)["curr_connections"] != "1" and time.monotonic() < deadline:
                time.sleep(0.02)
            assert stats(other)["curr_connections"] == "1", opt
        finally:
            srv.stop()
