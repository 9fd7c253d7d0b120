"""set / add / replace / append / prepend (cas has its own file)."""

import pytest

from wirelib import (
    assert_in_sync,
    assert_missing,
    assert_value,
    expect,
    get,
    set_cmd,
    stored,
    value_reply,
)


def test_set_then_get_returns_value(conn):
    expect(conn, b"set k 0 0 5\r\nhello\r\n", b"STORED\r\n")
    expect(conn, b"get k\r\n", b"VALUE k 0 5\r\nhello\r\nEND\r\n")


def test_set_overwrites_value_and_flags(conn):
    stored(conn, "k", b"first", flags=1)
    stored(conn, "k", b"second!", flags=2)
    assert_value(conn, "k", b"second!", flags=2)


@pytest.mark.parametrize("flags", [0, 1, 65535, 65536, 2147483648, 4294967295])
def test_flags_are_returned_unchanged(conn, flags):
    stored(conn, "k", b"v", flags=flags)
    expect(conn, b"get k\r\n", b"VALUE k %d 1\r\nv\r\nEND\r\n" % flags)


def test_negative_flags_is_bad_command_line_and_data_line_is_parsed_as_command(conn):
    # memcached does not swallow the data block after a bad command line:
    # the data line "a" is then read as a command and answered ERROR.
    expect(conn, b"set k -1 0 1\r\na\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


def test_non_numeric_flags_is_bad_command_line(conn):
    expect(conn, b"set k abc 0 1\r\na\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_in_sync(conn)


def test_non_numeric_exptime_is_bad_command_line(conn):
    expect(conn, b"set k 0 abc 1\r\na\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    expect(conn, b"set k 0 1.5 1\r\na\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_in_sync(conn)


def test_zero_length_value(conn):
    expect(conn, b"set k 0 0 0\r\n\r\n", b"STORED\r\n")
    expect(conn, b"get k\r\n", b"VALUE k 0 0\r\n\r\nEND\r\n")


def test_value_containing_crlf_is_stored_verbatim(conn):
    value = b"a\r\nb\r\r\nEND\r\n"
    expect(conn, b"set k 0 0 %d\r\n%s\r\n" % (len(value), value), b"STORED\r\n")
    expect(conn, b"get k\r\n", b"VALUE k 0 %d\r\n%s\r\nEND\r\n" % (len(value), value))


def test_binary_value_with_every_byte(conn):
    value = bytes(range(256)) * 4
    stored(conn, "bin", value)
    assert get(conn, "bin") == value_reply("bin", value) + b"END\r\n"


def test_large_value_under_default_item_size(conn):
    value = bytes(i % 251 for i in range(500_000))
    stored(conn, "big", value)
    assert get(conn, "big") == value_reply("big", value) + b"END\r\n"


def test_length_with_leading_zeros_is_accepted(conn):
    expect(conn, b"set k 0 0 01\r\na\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"a")


def test_extra_spaces_between_tokens_are_ignored(conn):
    expect(conn, b"set  k  7  0  1 \r\nx\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"x", flags=7)


def test_unknown_trailing_token_is_ignored(conn):
    # Only the literal word "noreply" in the last position means noreply.
    expect(conn, b"set k 0 0 1 xx\r\nb\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"b")


def test_noreply_is_case_sensitive(conn):
    expect(conn, b"set k 0 0 1 NOREPLY\r\nx\r\n", b"STORED\r\n")


def test_key_of_250_bytes_is_accepted(conn):
    key = b"k" * 250
    expect(conn, set_cmd(key, b"x"), b"STORED\r\n")
    expect(conn, b"get " + key + b"\r\n", value_reply(key, b"x") + b"END\r\n")


# ---------------------------------------------------------------- add


def test_add_on_missing_key_stores(conn):
    expect(conn, b"add k 3 0 1\r\na\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"a", flags=3)


def test_add_on_existing_key_is_not_stored_and_keeps_value(conn):
    stored(conn, "k", b"old", flags=1)
    expect(conn, b"add k 2 0 3\r\nnew\r\n", b"NOT_STORED\r\n")
    assert_value(conn, "k", b"old", flags=1)


def test_add_after_delete_stores(conn):
    stored(conn, "k", b"old")
    expect(conn, b"delete k\r\n", b"DELETED\r\n")
    expect(conn, b"add k 0 0 3\r\nnew\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"new")


# ---------------------------------------------------------------- replace


def test_replace_on_missing_key_is_not_stored(conn):
    expect(conn, b"replace k 0 0 1\r\na\r\n", b"NOT_STORED\r\n")
    assert_missing(conn, "k")


def test_replace_on_existing_key_replaces_value_and_flags(conn):
    stored(conn, "k", b"old", flags=1)
    expect(conn, b"replace k 9 0 3\r\nnew\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"new", flags=9)


# ---------------------------------------------------------------- append / prepend


def test_append_on_missing_key_is_not_stored(conn):
    expect(conn, b"append k 0 0 1\r\na\r\n", b"NOT_STORED\r\n")
    assert_missing(conn, "k")


def test_prepend_on_missing_key_is_not_stored(conn):
    expect(conn, b"prepend k 0 0 1\r\na\r\n", b"NOT_STORED\r\n")
    assert_missing(conn, "k")


def test_append_adds_data_at_end(conn):
    stored(conn, "k", b"hello")
    expect(conn, b"append k 0 0 6\r\n world\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"hello world")


def test_prepend_adds_data_at_start(conn):
    stored(conn, "k", b"world")
    expect(conn, b"prepend k 0 0 6\r\nhello \r\n", b"STORED\r\n")
    assert_value(conn, "k", b"hello world")


def test_append_and_prepend_keep_original_flags(conn):
    stored(conn, "k", b"b", flags=5)
    expect(conn, b"append k 9 0 1\r\nc\r\n", b"STORED\r\n")
    expect(conn, b"prepend k 7 0 1\r\na\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"abc", flags=5)


def test_append_keeps_original_exptime(conn):
    # An exptime of -1 on append would expire the item if it were applied.
    stored(conn, "k", b"a")
    expect(conn, b"append k 0 -1 1\r\nb\r\n", b"STORED\r\n")
    expect(conn, b"prepend k 0 -1 1\r\nc\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"cab")


def test_append_binary_data_with_crlf(conn):
    stored(conn, "k", b"\r\n")
    expect(conn, b"append k 0 0 3\r\n\x00\r\n\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"\r\n\x00\r\n")


def test_append_to_empty_value(conn):
    stored(conn, "k", b"")
    expect(conn, b"append k 0 0 2\r\nxy\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"xy")


def test_append_of_zero_bytes_keeps_value(conn):
    stored(conn, "k", b"xy")
    expect(conn, b"append k 0 0 0\r\n\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"xy")


def test_bare_newline_line_endings_are_accepted(conn):
    expect(conn, b"set k 0 0 1\nx\r\n", b"STORED\r\n")
    expect(conn, b"get k\n", b"VALUE k 0 1\r\nx\r\nEND\r\n")
