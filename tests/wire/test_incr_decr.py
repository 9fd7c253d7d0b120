"""incr / decr: 64-bit unsigned arithmetic on decimal values."""

import pytest

from wirelib import assert_in_sync, assert_value, expect, stored

MAX = 18446744073709551615  # 2**64 - 1


def test_incr_returns_new_value_and_stores_it(conn):
    stored(conn, "n", b"10")
    expect(conn, b"incr n 5\r\n", b"15\r\n")
    assert_value(conn, "n", b"15")


def test_decr_returns_new_value(conn):
    stored(conn, "n", b"10")
    expect(conn, b"decr n 3\r\n", b"7\r\n")


def test_incr_by_zero(conn):
    stored(conn, "n", b"42")
    expect(conn, b"incr n 0\r\n", b"42\r\n")


def test_incr_on_missing_key_is_not_found(conn):
    expect(conn, b"incr nokey 1\r\n", b"NOT_FOUND\r\n")
    expect(conn, b"decr nokey 1\r\n", b"NOT_FOUND\r\n")


def test_incr_keeps_flags(conn):
    stored(conn, "n", b"10", flags=77)
    expect(conn, b"incr n 5\r\n", b"15\r\n")
    assert_value(conn, "n", b"15", flags=77)


def test_incr_to_max_uint64(conn):
    stored(conn, "n", b"%d" % (MAX - 1))
    expect(conn, b"incr n 1\r\n", b"%d\r\n" % MAX)


def test_incr_wraps_past_max_uint64(conn):
    stored(conn, "n", b"%d" % MAX)
    expect(conn, b"incr n 2\r\n", b"1\r\n")


def test_incr_by_max_delta_wraps(conn):
    stored(conn, "n", b"99")
    expect(conn, b"incr n %d\r\n" % MAX, b"98\r\n")
    assert_value(conn, "n", b"98")


def test_decr_below_zero_floors_at_zero(conn):
    stored(conn, "n", b"5")
    expect(conn, b"decr n 6\r\n", b"0\r\n")
    expect(conn, b"decr n 1\r\n", b"0\r\n")


def test_decr_max_value_by_max_delta(conn):
    stored(conn, "n", b"%d" % MAX)
    expect(conn, b"decr n %d\r\n" % MAX, b"0\r\n")


def test_decr_that_shortens_number_pads_with_spaces(conn):
    # memcached rewrites the value in place: same length, right-padded with spaces.
    stored(conn, "n", b"100")
    expect(conn, b"decr n 1\r\n", b"99\r\n")
    expect(conn, b"get n\r\n", b"VALUE n 0 3\r\n99 \r\nEND\r\n")


def test_decr_to_zero_pads_with_spaces(conn):
    stored(conn, "n", b"1000")
    expect(conn, b"decr n 1000\r\n", b"0\r\n")
    expect(conn, b"get n\r\n", b"VALUE n 0 4\r\n0   \r\nEND\r\n")


def test_incr_of_leading_zero_value_pads_with_spaces(conn):
    stored(conn, "n", b"007")
    expect(conn, b"incr n 1\r\n", b"8\r\n")
    expect(conn, b"get n\r\n", b"VALUE n 0 3\r\n8  \r\nEND\r\n")


def test_incr_of_space_padded_value_works(conn):
    stored(conn, "n", b"100")
    expect(conn, b"decr n 1\r\n", b"99\r\n")
    expect(conn, b"incr n 1\r\n", b"100\r\n")
    assert_value(conn, "n", b"100")


def test_incr_that_lengthens_number_grows_value(conn):
    stored(conn, "n", b"9")
    expect(conn, b"incr n 1\r\n", b"10\r\n")
    expect(conn, b"get n\r\n", b"VALUE n 0 2\r\n10\r\nEND\r\n")
    stored(conn, "m", b"99")
    expect(conn, b"incr m 1\r\n", b"100\r\n")
    expect(conn, b"get m\r\n", b"VALUE m 0 3\r\n100\r\nEND\r\n")


def test_value_with_surrounding_spaces_is_numeric(conn):
    stored(conn, "a", b"12 ")
    expect(conn, b"incr a 1\r\n", b"13\r\n")
    stored(conn, "b", b" 12")
    expect(conn, b"incr b 1\r\n", b"13\r\n")


@pytest.mark.parametrize(
    "value",
    [b"abc", b"1a", b"-1", b"", b"184467440737095516150", b"18446744073709551616"],
    ids=["letters", "digit-letter", "negative", "empty", "21-digits", "2**64"],
)
def test_non_numeric_value_is_client_error(conn, value):
    stored(conn, "n", value)
    expect(conn, b"incr n 1\r\n", b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
    expect(conn, b"decr n 1\r\n", b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
    assert_value(conn, "n", value)


@pytest.mark.parametrize(
    "delta",
    [b"abc", b"-1", b"18446744073709551616", b"0x10", b"1.5"],
    ids=["letters", "negative", "2**64", "hex", "fraction"],
)
def test_invalid_delta_is_client_error(conn, delta):
    stored(conn, "n", b"5")
    expect(conn, b"incr n %s\r\n" % delta, b"CLIENT_ERROR invalid numeric delta argument\r\n")
    expect(conn, b"decr n %s\r\n" % delta, b"CLIENT_ERROR invalid numeric delta argument\r\n")
    assert_value(conn, "n", b"5")


def test_invalid_delta_on_missing_key_is_client_error(conn):
    expect(conn, b"incr nokey abc\r\n", b"CLIENT_ERROR invalid numeric delta argument\r\n")


@pytest.mark.parametrize("line", [b"incr\r\n", b"incr n\r\n", b"decr n\r\n", b"incr n  \r\n"])
def test_incr_with_too_few_tokens_is_error(conn, line):
    expect(conn, line, b"ERROR\r\n")
    assert_in_sync(conn)


def test_incr_key_too_long_is_client_error(conn):
    expect(conn, b"incr " + b"a" * 251 + b" 1\r\n", b"CLIENT_ERROR bad command line format\r\n")
    expect(conn, b"decr " + b"a" * 251 + b" 1\r\n", b"CLIENT_ERROR bad command line format\r\n")


def test_incr_ignores_unknown_trailing_token(conn):
    stored(conn, "n", b"1")
    expect(conn, b"incr n 1 2\r\n", b"2\r\n")
