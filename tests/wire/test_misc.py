"""version, verbosity, quit."""

import re

import pytest

from wirelib import assert_in_sync, assert_missing, expect, read_line_or_partial, stats


def test_version_reply_format(conn):
    conn.send(b"version\r\n")
    line = read_line_or_partial(conn)
    assert re.fullmatch(rb"VERSION [!-~]+\r\n", line), line


def test_version_is_a_bare_memcached_release_number(conn):
    """Clients parse this line: node's `memcached` takes its last three
    numbers, so anything after the release (a server's own version) would
    be read as the memcached version."""
    conn.send(b"version\r\n")
    line = read_line_or_partial(conn)
    assert re.fullmatch(rb"VERSION 1\.\d+\.\d+\r\n", line), line


@pytest.mark.strata_only
def test_strata_reports_its_own_version_in_stats(conn):
    st = stats(conn)
    assert st["version"] == "1.6.38"
    assert re.fullmatch(r"\d+\.\d+\.\d+", st["strata_version"]), st["strata_version"]


def test_version_twice_gives_same_reply(conn):
    conn.send(b"version\r\nversion\r\n")
    assert read_line_or_partial(conn) == read_line_or_partial(conn)


@pytest.mark.parametrize("level", [b"0", b"1", b"2", b"5"])
def test_verbosity_level_is_ok(conn, level):
    expect(conn, b"verbosity " + level + b"\r\n", b"OK\r\n")
    expect(conn, b"verbosity 0\r\n", b"OK\r\n")


def test_verbosity_noreply_is_silent(conn):
    expect(conn, b"verbosity 1 noreply\r\nverbosity 0 noreply\r\nget x\r\n", b"END\r\n")


def test_verbosity_without_level_is_error(conn):
    expect(conn, b"verbosity\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


@pytest.mark.parametrize("level", [b"a", b"-1"])
def test_verbosity_bad_level_is_bad_command_line(conn, level):
    expect(conn, b"verbosity " + level + b"\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_verbosity_with_too_many_arguments_is_error(conn):
    expect(conn, b"verbosity 1 2 3\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


def test_quit_closes_connection(conn):
    conn.send(b"quit\r\n")
    assert conn.is_closed()
    assert conn.buf == b""


def test_commands_after_quit_are_not_run(conn, server):
    conn.send(b"quit\r\nset afterquit 0 0 1\r\nx\r\n")
    assert conn.is_closed()
    assert conn.buf == b""
    other = server.connect(timeout=2.0)
    assert_missing(other, "afterquit")


def test_replies_before_quit_are_sent(conn):
    conn.send(b"set q 0 0 1\r\nx\r\nget q\r\nquit\r\n")
    assert conn.is_closed()
    assert conn.buf == b"STORED\r\nVALUE q 0 1\r\nx\r\nEND\r\n"
