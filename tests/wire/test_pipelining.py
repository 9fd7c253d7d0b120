"""Many commands in one send, and one command spread over many sends."""

import socket
import time

from wirelib import assert_in_sync, expect, read_n, stored


def test_mixed_pipeline_replies_in_order(conn):
    request = (
        b"set a 1 0 3\r\nabc\r\n"
        b"set n 0 0 2\r\n10\r\n"
        b"get a\r\n"
        b"add a 0 0 1\r\nx\r\n"
        b"incr n 5\r\n"
        b"decr n 20\r\n"
        b"append a 0 0 2\r\nde\r\n"
        b"get a n missing\r\n"
        b"delete a\r\n"
        b"delete a\r\n"
        b"touch n 0\r\n"
        b"bogus\r\n"
        b"get a\r\n"
    )
    expected = (
        b"STORED\r\n"
        b"STORED\r\n"
        b"VALUE a 1 3\r\nabc\r\nEND\r\n"
        b"NOT_STORED\r\n"
        b"15\r\n"
        b"0\r\n"
        b"STORED\r\n"
        b"VALUE a 1 5\r\nabcde\r\nVALUE n 0 2\r\n0 \r\nEND\r\n"
        b"DELETED\r\n"
        b"NOT_FOUND\r\n"
        b"TOUCHED\r\n"
        b"ERROR\r\n"
        b"END\r\n"
    )
    expect(conn, request, expected)
    assert_in_sync(conn)


def test_thousand_sets_then_gets_in_one_send(conn):
    n = 1000
    request = b"".join(b"set key%d 0 0 %d\r\n%s\r\n" % (i, len(b"%d" % i), b"%d" % i) for i in range(n))
    request += b"".join(b"get key%d\r\n" % i for i in range(n))
    expected = b"STORED\r\n" * n + b"".join(
        b"VALUE key%d 0 %d\r\n%d\r\nEND\r\n" % (i, len(b"%d" % i), i) for i in range(n)
    )
    expect(conn, request, expected)


def test_pipeline_with_values_containing_crlf(conn):
    v = b"\r\nget a\r\n"
    request = b"set a 0 0 %d\r\n%s\r\nget a\r\ndelete a\r\n" % (len(v), v)
    expect(conn, request, b"STORED\r\nVALUE a 0 %d\r\n%s\r\nEND\r\nDELETED\r\n" % (len(v), v))


def test_pipeline_of_gets_interleaved_with_errors(conn):
    stored(conn, "a", b"1")
    request = b"get a\r\nfoo\r\nincr a x\r\nget a\r\n"
    expected = b"VALUE a 0 1\r\n1\r\nEND\r\nERROR\r\nCLIENT_ERROR invalid numeric delta argument\r\nVALUE a 0 1\r\n1\r\nEND\r\n"
    expect(conn, request, expected)


def test_command_sent_one_byte_at_a_time(conn):
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = b"set k 3 0 5\r\nhe\r\no\r\nget k\r\nincr nokey 1\r\n"
    for i in range(len(request)):
        conn.send(request[i:i + 1])
        if i % 8 == 0:
            time.sleep(0.002)
    expected = b"STORED\r\nVALUE k 3 5\r\nhe\r\no\r\nEND\r\nNOT_FOUND\r\n"
    assert read_n(conn, len(expected)) == expected
    assert_in_sync(conn)


def test_data_block_split_across_sends(conn):
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.send(b"set k 0 0 1\r\n")
    time.sleep(0.05)
    conn.send(b"x")
    time.sleep(0.05)
    conn.send(b"\r")
    time.sleep(0.05)
    expect(conn, b"\n", b"STORED\r\n")


def test_line_split_between_cr_and_lf(conn):
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    stored(conn, "k", b"v")
    conn.send(b"get k\r")
    time.sleep(0.05)
    expect(conn, b"\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")


def test_large_value_then_command_in_one_send(conn):
    v = bytes(i % 256 for i in range(300_000))
    request = b"set big 0 0 %d\r\n%s\r\nget big\r\n" % (len(v), v)
    expect(conn, request, b"STORED\r\nVALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(v), v))


def test_two_connections_are_independent(conn, server):
    other = server.connect(timeout=2.0)
    conn.send(b"set k 0 0 5\r\nhel")
    expect(other, b"set k 0 0 1\r\nx\r\nget k\r\n", b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")
    expect(conn, b"lo\r\nget k\r\n", b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n")
    other.close()


def test_batch_arriving_while_the_last_one_is_served(make_server):
    """A pipelined batch that lands while the previous batch of the same size
    is still being served must be answered. With `-R 1` the server needs one
    turn per request, so the second batch arrives before it has finished the
    first; strata once took "read exactly as many bytes as it had just
    consumed" for "read nothing" and left such a batch unanswered."""
    srv = make_server(["-R", "1"])
    c = srv.connect()
    batch = b"mn\r\n" * 1000
    for _ in range(5):
        c.send(batch)
        first = c.read_exact(4)
        c.send(batch)
        assert first + c.read_exact(2 * len(batch) - 4) == b"MN\r\n" * 2000
    c.close()


def test_gets_read_ahead_see_writes_between_them(conn):
    # Strata prefetches the keys of the reads at the front of its buffer
    # (up to 32 at a time); a write among them must still be seen by the
    # reads after it, and keys past the read-ahead window must be found.
    keys = [b"ra%d" % i for i in range(40)]
    request = b"".join(b"set %s 0 0 1\r\na\r\n" % k for k in keys)
    expect(conn, request, b"STORED\r\n" * len(keys))
    request = (
        b"".join(b"get %s\r\n" % k for k in keys[:20])
        + b"mg ra3 v\r\nmn\r\n"
        + b"set ra21 0 0 1\r\nb\r\n"
        + b"gat 0 ra21 ra22\r\n"
        + b"get " + b" ".join(keys) + b"\r\n"
    )
    value = {k: b"b" if k == b"ra21" else b"a" for k in keys}
    expected = (
        b"".join(b"VALUE %s 0 1\r\na\r\nEND\r\n" % k for k in keys[:20])
        + b"VA 1\r\na\r\nMN\r\n"
        + b"STORED\r\n"
        + b"VALUE ra21 0 1\r\nb\r\nVALUE ra22 0 1\r\na\r\nEND\r\n"
        + b"".join(b"VALUE %s 0 1\r\n%s\r\n" % (k, value[k]) for k in keys)
        + b"END\r\n"
    )
    expect(conn, request, expected)
    assert_in_sync(conn)
