"""delete."""

from wirelib import assert_in_sync, assert_missing, assert_value, expect, stored


def test_delete_existing_key(conn):
    stored(conn, "k", b"v")
    expect(conn, b"delete k\r\n", b"DELETED\r\n")
    assert_missing(conn, "k")


def test_delete_missing_key_is_not_found(conn):
    expect(conn, b"delete nokey\r\n", b"NOT_FOUND\r\n")


def test_delete_twice_second_is_not_found(conn):
    stored(conn, "k", b"v")
    expect(conn, b"delete k\r\n", b"DELETED\r\n")
    expect(conn, b"delete k\r\n", b"NOT_FOUND\r\n")


def test_delete_with_zero_time_is_accepted(conn):
    stored(conn, "k", b"v")
    expect(conn, b"delete k 0\r\n", b"DELETED\r\n")
    assert_missing(conn, "k")


def test_delete_with_nonzero_time_is_rejected_with_usage(conn):
    stored(conn, "k", b"v")
    expect(conn, b"delete k 5\r\n", b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n")
    assert_value(conn, "k", b"v")


def test_delete_noreply(conn):
    stored(conn, "k", b"v")
    expect(conn, b"delete k noreply\r\nget k\r\n", b"END\r\n")


def test_delete_zero_noreply(conn):
    stored(conn, "k", b"v")
    expect(conn, b"delete k 0 noreply\r\ndelete nokey 0 noreply\r\nget k\r\n", b"END\r\n")


def test_delete_without_key_is_error(conn):
    expect(conn, b"delete\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


def test_delete_key_too_long_is_client_error(conn):
    expect(conn, b"delete " + b"a" * 251 + b"\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_delete_only_removes_named_key(conn):
    stored(conn, "a", b"1")
    stored(conn, "b", b"2")
    expect(conn, b"delete a\r\n", b"DELETED\r\n")
    assert_value(conn, "b", b"2")
