"""touch / gat / gats (expiry effects that need time to pass: test_expiry.py)."""

import pytest

from wirelib import assert_in_sync, assert_missing, assert_value, expect, gets_cas, stored


def test_touch_existing_key_is_touched(conn):
    stored(conn, "k", b"v")
    expect(conn, b"touch k 100\r\n", b"TOUCHED\r\n")
    assert_value(conn, "k", b"v")


def test_touch_missing_key_is_not_found(conn):
    expect(conn, b"touch nokey 100\r\n", b"NOT_FOUND\r\n")


def test_touch_with_negative_exptime_expires_item(conn):
    stored(conn, "k", b"v")
    expect(conn, b"touch k -1\r\n", b"TOUCHED\r\n")
    assert_missing(conn, "k")


def test_touch_with_invalid_exptime_is_client_error(conn):
    stored(conn, "k", b"v")
    expect(conn, b"touch k abc\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
    assert_value(conn, "k", b"v")


def test_touch_without_exptime_is_error(conn):
    expect(conn, b"touch k\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


def test_touch_key_too_long_is_client_error(conn):
    expect(conn, b"touch " + b"a" * 251 + b" 1\r\n", b"CLIENT_ERROR bad command line format\r\n")


def test_touch_noreply(conn):
    stored(conn, "k", b"v")
    expect(conn, b"touch k 100 noreply\r\ntouch nokey 1 noreply\r\nget k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")


def test_gat_returns_value_without_cas(conn):
    stored(conn, "k", b"hello", flags=3)
    expect(conn, b"gat 100 k\r\n", b"VALUE k 3 5\r\nhello\r\nEND\r\n")


def test_gats_returns_value_with_cas(conn):
    stored(conn, "k", b"hello", flags=3)
    cas = gets_cas(conn, "k")
    expect(conn, b"gats 100 k\r\n", b"VALUE k 3 5 %d\r\nhello\r\nEND\r\n" % cas)


def test_gat_many_keys_with_misses(conn):
    stored(conn, "a", b"1")
    stored(conn, "b", b"22")
    expect(conn, b"gat 0 a x b a\r\n", b"VALUE a 0 1\r\n1\r\nVALUE b 0 2\r\n22\r\nVALUE a 0 1\r\n1\r\nEND\r\n")


def test_gat_missing_key_returns_end(conn):
    expect(conn, b"gat 10 nokey\r\n", b"END\r\n")
    expect(conn, b"gats 10 nokey\r\n", b"END\r\n")


def test_gat_with_negative_exptime_returns_value_then_expires_it(conn):
    stored(conn, "k", b"v")
    expect(conn, b"gat -1 k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    assert_missing(conn, "k")


def test_gats_with_negative_exptime_returns_value_then_expires_it(conn):
    stored(conn, "k", b"v")
    cas = gets_cas(conn, "k")
    expect(conn, b"gats -1 k\r\n", b"VALUE k 0 1 %d\r\nv\r\nEND\r\n" % cas)
    expect(conn, b"gets k\r\n", b"END\r\n")


@pytest.mark.parametrize("cmd", [b"gat", b"gats"])
def test_gat_with_invalid_exptime_is_client_error(conn, cmd):
    stored(conn, "k", b"v")
    expect(conn, cmd + b" abc k\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
    assert_value(conn, "k", b"v")


def test_gat_without_arguments_is_error(conn):
    expect(conn, b"gat\r\n", b"ERROR\r\n")
    expect(conn, b"gats\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


def test_gat_with_exptime_but_no_key_returns_end(conn):
    expect(conn, b"gat 10\r\n", b"END\r\n")


def test_gat_key_too_long_is_client_error(conn):
    expect(conn, b"gat 1 " + b"a" * 251 + b"\r\n", b"CLIENT_ERROR bad command line format\r\n")
