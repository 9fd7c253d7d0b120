"""Malformed requests: exact error replies and how the stream continues."""

import pytest

from harness import Server
from wirelib import (
    assert_in_sync,
    assert_missing,
    assert_value,
    expect,
    set_cmd,
    stored,
)


def test_unknown_command_is_error_and_connection_still_works(conn):
    expect(conn, b"foo\r\n", b"ERROR\r\n")
    expect(conn, b"bogus command with args\r\n", b"ERROR\r\n")
    stored(conn, "k", b"v")
    assert_value(conn, "k", b"v")


def test_unknown_command_with_noreply_is_still_error(conn):
    expect(conn, b"foo noreply\r\n", b"ERROR\r\n")


def test_empty_line_is_error(conn):
    expect(conn, b"\r\n", b"ERROR\r\n")
    expect(conn, b"\n", b"ERROR\r\n")
    assert_in_sync(conn)


def test_many_errors_in_one_send_each_get_a_reply(conn):
    expect(conn, b"foo\r\nbar\r\n\r\nbaz\r\n", b"ERROR\r\n" * 4)
    assert_in_sync(conn)


# ---------------------------------------------------------------- keys


def test_set_key_too_long_is_client_error_and_data_is_read_as_a_command(conn):
    # memcached does not swallow the data block: "x" is then an unknown command.
    key = b"a" * 251
    expect(conn, set_cmd(key, b"x"), b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    expect(conn, b"get " + b"a" * 250 + b"\r\n", b"END\r\n")


def test_set_key_too_long_data_that_is_a_command_gets_executed(conn):
    key = b"a" * 251
    conn.send(b"set " + key + b" 0 0 7\r\nversion\r\n")
    assert conn.read_line() == b"CLIENT_ERROR bad command line format\r\n"
    assert conn.read_line().startswith(b"VERSION ")


@pytest.mark.parametrize("cmd", [b"add", b"replace", b"append", b"prepend"])
def test_storage_command_key_too_long_is_client_error(conn, cmd):
    expect(conn, set_cmd(b"b" * 251, b"x", cmd=cmd), b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_in_sync(conn)


def test_cas_key_too_long_is_client_error(conn):
    expect(conn, b"cas " + b"c" * 251 + b" 0 0 1 1\r\nx\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")


@pytest.mark.parametrize("key", [b"k\x01y", b"k\x1bz", b"k\x7f"], ids=["ctrl-a", "esc", "del"])
def test_key_with_control_characters_is_accepted(conn, key):
    expect(conn, set_cmd(key, b"x"), b"STORED\r\n")
    expect(conn, b"get " + key + b"\r\n", b"VALUE " + key + b" 0 1\r\nx\r\nEND\r\n")


def test_key_with_utf8_bytes_is_accepted(conn):
    key = "clé-日本".encode()
    expect(conn, set_cmd(key, b"x"), b"STORED\r\n")
    expect(conn, b"get " + key + b"\r\n", b"VALUE " + key + b" 0 1\r\nx\r\nEND\r\n")


# ---------------------------------------------------------------- command line


def test_non_numeric_length_is_bad_command_line(conn):
    expect(conn, b"set k 0 0 abc\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_negative_length_is_bad_command_line_and_data_is_read_as_a_command(conn):
    expect(conn, b"set k 0 0 -1\r\na\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


@pytest.mark.parametrize("line", [b"set\r\n", b"set k\r\n", b"set k 0\r\n", b"set k 0 0\r\n", b"add k 0 0\r\n",
                                  b"cas k 0 0\r\n"])
def test_storage_command_with_too_few_tokens_is_error(conn, line):
    expect(conn, line, b"ERROR\r\n")
    assert_in_sync(conn)


def test_storage_command_with_too_many_tokens_is_error(conn):
    # and the data line is then read as a command.
    expect(conn, b"set k 0 0 1 2 3 4\r\nx\r\n", b"ERROR\r\nERROR\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


def test_cas_with_too_many_tokens_is_error(conn):
    expect(conn, b"cas k 0 0 1 1 noreply extra\r\nx\r\n", b"ERROR\r\nERROR\r\n")


# ---------------------------------------------------------------- data block


def test_bad_data_chunk_one_extra_byte(conn):
    # memcached reads exactly <bytes>+2 ("ab\r"), rejects it, then parses the
    # rest ("\n" = an empty command line) as a new command.
    expect(conn, b"set k 0 0 1\r\nab\r\n", b"CLIENT_ERROR bad data chunk\r\nERROR\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


def test_bad_data_chunk_then_following_command_still_runs(conn):
    conn.send(b"set k 0 0 1\r\nabcdef\r\nversion\r\n")
    assert conn.read_line() == b"CLIENT_ERROR bad data chunk\r\n"
    assert conn.read_line() == b"ERROR\r\n"  # "def" as a command
    assert conn.read_line().startswith(b"VERSION ")
    assert_missing(conn, "k")


def test_bad_data_chunk_bytes_after_block_consumed_exactly(conn):
    # "a" + "bv" is the block; "ersion" is the next command line.
    expect(conn, b"set k 0 0 1\r\nabversion\r\n", b"CLIENT_ERROR bad data chunk\r\nERROR\r\n")
    assert_in_sync(conn)


def test_bad_data_chunk_wrong_terminator_without_extra_bytes(conn):
    expect(conn, b"set k 0 0 1\r\na\rX", b"CLIENT_ERROR bad data chunk\r\n")
    assert_in_sync(conn)


def test_bad_data_chunk_lf_only_terminator(conn):
    # "a\n\r" is the block (bad); the remaining "\n" is an empty command.
    expect(conn, b"set k 0 0 1\r\na\n\r\n", b"CLIENT_ERROR bad data chunk\r\nERROR\r\n")
    assert_in_sync(conn)


def test_bad_data_chunk_keeps_existing_value(conn):
    stored(conn, "k", b"a")
    expect(conn, b"set k 0 0 1\r\nab\r\n", b"CLIENT_ERROR bad data chunk\r\nERROR\r\n")
    assert_value(conn, "k", b"a")


def test_bad_data_chunk_on_append_keeps_value(conn):
    stored(conn, "k", b"a")
    expect(conn, b"append k 0 0 1\r\nbc\r\n", b"CLIENT_ERROR bad data chunk\r\nERROR\r\n")
    assert_value(conn, "k", b"a")


# ---------------------------------------------------------------- too large (-I)

BIG = 600_000  # over -I 512k


@pytest.fixture(scope="module")
def small_item_server():
    srv = Server(args=["-I", "512k"])
    yield srv
    srv.stop()


@pytest.fixture
def sconn(small_item_server):
    c = small_item_server.connect(timeout=5.0)
    yield c
    c.close()


def test_value_over_item_size_is_server_error_and_data_is_swallowed(sconn):
    expect(sconn, set_cmd("big", b"x" * BIG), b"SERVER_ERROR object too large for cache\r\n")
    assert_missing(sconn, "big")
    assert_in_sync(sconn)


def test_too_large_data_that_looks_like_commands_is_swallowed(sconn):
    value = (b"version\r\n" * (BIG // 9 + 1))[:BIG]
    expect(sconn, set_cmd("big", value), b"SERVER_ERROR object too large for cache\r\n")
    assert_in_sync(sconn)


def test_value_under_item_size_is_stored(sconn):
    stored(sconn, "fits", b"y" * 500_000)
    expect(sconn, b"get fits\r\n", b"VALUE fits 0 500000\r\n" + b"y" * 500_000 + b"\r\nEND\r\n")


def test_too_large_set_deletes_existing_key(sconn):
    stored(sconn, "k", b"old")
    expect(sconn, set_cmd("k", b"x" * BIG), b"SERVER_ERROR object too large for cache\r\n")
    assert_missing(sconn, "k")


def test_too_large_append_keeps_existing_key(sconn):
    stored(sconn, "k2", b"old")
    expect(sconn, set_cmd("k2", b"x" * BIG, cmd=b"append"), b"SERVER_ERROR object too large for cache\r\n")
    assert_value(sconn, "k2", b"old")


@pytest.mark.parametrize("cmd", [b"add", b"replace", b"prepend"])
def test_too_large_other_storage_commands_are_server_error(sconn, cmd):
    stored(sconn, "k3", b"old")
    expect(sconn, set_cmd("k3", b"x" * BIG, cmd=cmd), b"SERVER_ERROR object too large for cache\r\n")
    assert_value(sconn, "k3", b"old")


def test_too_large_cas_is_server_error(sconn):
    stored(sconn, "k4", b"old")
    expect(sconn, b"cas k4 0 0 %d 1\r\n%s\r\n" % (BIG, b"x" * BIG), b"SERVER_ERROR object too large for cache\r\n")
    assert_value(sconn, "k4", b"old")


def test_too_large_set_noreply_is_silent(sconn):
    expect(sconn, set_cmd("big", b"x" * BIG, noreply=True) + b"get big\r\n", b"END\r\n")
