"""flush_all, with and without delay; -F disables it."""

import pytest

from harness import Server
from wirelib import advance_clock, assert_in_sync, assert_missing, assert_value, expect, stored


def test_flush_all_removes_every_item(conn):
    for k in ("a", "b", "c"):
        stored(conn, k, b"v")
    expect(conn, b"flush_all\r\n", b"OK\r\n")
    expect(conn, b"get a b c\r\n", b"END\r\n")


def test_flush_all_zero(conn):
    stored(conn, "a", b"v")
    expect(conn, b"flush_all 0\r\n", b"OK\r\n")
    assert_missing(conn, "a")


def test_items_set_after_flush_all_are_visible(conn):
    stored(conn, "a", b"old")
    expect(conn, b"flush_all\r\n", b"OK\r\n")
    stored(conn, "a", b"new")
    assert_value(conn, "a", b"new")
    expect(conn, b"add b 0 0 1\r\nx\r\n", b"STORED\r\n")


def test_flush_all_noreply(conn):
    stored(conn, "a", b"v")
    expect(conn, b"flush_all noreply\r\nget a\r\n", b"END\r\n")


def test_flush_all_zero_noreply(conn):
    stored(conn, "a", b"v")
    expect(conn, b"flush_all 0 noreply\r\nget a\r\n", b"END\r\n")


def test_flush_all_invalid_delay_is_client_error(conn):
    stored(conn, "a", b"v")
    expect(conn, b"flush_all foo\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
    assert_value(conn, "a", b"v")


def test_flush_all_with_delay_keeps_items_for_now(make_server):
    c = make_server().connect(timeout=2.0)
    stored(c, "a", b"v")
    expect(c, b"flush_all 100\r\n", b"OK\r\n")
    assert_value(c, "a", b"v")
    stored(c, "b", b"w")
    assert_value(c, "b", b"w")


@pytest.mark.strata_only
def test_delayed_flush_removes_items_set_before_it_takes_effect(make_server):
    c = make_server(["--enable-debug-clock"]).connect(timeout=2.0)
    stored(c, "early", b"1")
    expect(c, b"flush_all 10\r\n", b"OK\r\n")
    advance_clock(c, 5)
    stored(c, "during", b"2")
    assert_value(c, "early", b"1")
    advance_clock(c, 6)
    assert_missing(c, "early")
    assert_missing(c, "during")
    stored(c, "after", b"3")
    advance_clock(c, 5)
    assert_value(c, "after", b"3")


@pytest.mark.strata_only
def test_delayed_flush_noreply(make_server):
    c = make_server(["--enable-debug-clock"]).connect(timeout=2.0)
    stored(c, "a", b"1")
    expect(c, b"flush_all 10 noreply\r\nget a\r\n", b"VALUE a 0 1\r\n1\r\nEND\r\n")
    advance_clock(c, 11)
    assert_missing(c, "a")


# ---------------------------------------------------------------- -F


@pytest.fixture(scope="module")
def noflush_conn(request):
    srv = Server(args=["-F"])
    request.addfinalizer(srv.stop)
    return srv.connect(timeout=2.0)


@pytest.mark.parametrize("line", [b"flush_all\r\n", b"flush_all 0\r\n", b"flush_all 10\r\n"])
def test_disabled_flush_all_is_client_error(noflush_conn, line):
    stored(noflush_conn, "a", b"v")
    expect(noflush_conn, line, b"CLIENT_ERROR flush_all not allowed\r\n")
    assert_value(noflush_conn, "a", b"v")


def test_disabled_flush_all_noreply_is_silent_and_keeps_items(noflush_conn):
    stored(noflush_conn, "a", b"v")
    expect(noflush_conn, b"flush_all noreply\r\nget a\r\n", b"VALUE a 0 1\r\nv\r\nEND\r\n")
    assert_in_sync(noflush_conn)
