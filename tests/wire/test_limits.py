"""Line-length limits, big multi-gets, memory limits (-m, -M)."""

import time

import pytest

from wirelib import assert_in_sync, expect, read_until_end, set_cmd, stats, stored, value_reply


def test_long_line_without_newline_closes_connection(conn):
    conn.send(b"x" * 3000)
    assert conn.is_closed()
    assert conn.buf == b""


def test_long_set_line_without_newline_closes_connection(conn):
    conn.send(b"set " + b"k" * 3000)
    assert conn.is_closed()


def test_long_partial_line_sent_in_two_parts_closes_connection(conn):
    conn.send(b"y" * 2000)
    time.sleep(0.2)
    assert not conn.is_closed(timeout=0.2)
    conn.send(b"y" * 1000)
    assert conn.is_closed()


def test_short_partial_line_keeps_connection_open(conn):
    conn.send(b"x" * 1000)
    assert not conn.is_closed(timeout=0.3)


def test_long_get_line_without_newline_yet_is_kept_open(conn):
    stored(conn, "k", b"v")
    conn.send(b"get " + b"nokey " * 1000)
    assert not conn.is_closed(timeout=0.3)
    expect(conn, b"k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")


def test_multiget_of_50kb_line(conn):
    keys = [b"key_%04d_%s" % (i, b"p" * 40) for i in range(1000)]  # ~50 KB of keys
    for k in keys[::10]:
        stored(conn, k, k[:8])
    conn.send(b"get " + b" ".join(keys) + b"\r\n")
    expected = b"".join(value_reply(k, k[:8]) for k in keys[::10]) + b"END\r\n"
    assert read_until_end(conn) == expected
    assert_in_sync(conn)


def test_gets_of_many_missing_keys(conn):
    conn.send(b"gets " + b"x " * 30000 + b"\r\n")
    assert read_until_end(conn) == b"END\r\n"
    assert_in_sync(conn)


# ---------------------------------------------------------------- memory


VALUE = b"v" * 100_000


@pytest.mark.not_over_flash("the memory limit does not bound what flash holds")
def test_disable_evictions_reports_out_of_memory(make_server):
    c = make_server(["-m", "2", "-M"]).connect(timeout=5.0)
    replies = []
    for i in range(200):
        c.send(set_cmd(b"key%d" % i, VALUE))
        reply = c.read_line()
        replies.append(reply)
        if reply != b"STORED\r\n":
            break
    assert replies[-1] == b"SERVER_ERROR out of memory storing object\r\n"
    assert set(replies[:-1]) == {b"STORED\r\n"}
    # nothing was evicted to make room
    expect(c, b"get key0\r\n", value_reply("key0", VALUE) + b"END\r\n")
    assert stats(c)["evictions"] == "0"
    assert_in_sync(c)


def test_disable_evictions_out_of_memory_noreply_is_silent(make_server):
    c = make_server(["-m", "2", "-M"]).connect(timeout=5.0)
    for i in range(200):
        c.send(set_cmd(b"key%d" % i, VALUE, noreply=True))
    assert_in_sync(c)


@pytest.mark.not_over_flash("an item evicted from memory is still on flash")
def test_evictions_make_room_by_default(make_server):
    c = make_server(["-m", "2"]).connect(timeout=5.0)
    for i in range(100):
        expect(c, set_cmd(b"key%d" % i, VALUE), b"STORED\r\n")
    expect(c, b"get key0\r\n", b"END\r\n")
    expect(c, b"get key99\r\n", value_reply("key99", VALUE) + b"END\r\n")
    assert int(stats(c)["evictions"]) > 0
