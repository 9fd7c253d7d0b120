"""Numbers parsed with memcached's safe_strtol wrap to 32 bits.

memcached 1.6.18 parses exptimes, value lengths and flush delays as a 64-bit
long and stores them in an int32_t: 2^31 becomes -2^31 (expired at once),
2^32 becomes 0 (never expires), 2^32 + 1 becomes 1. Only numbers beyond a
64-bit long are errors. Every reply here was checked against memcached
(WIRE_TARGET=memcached).
"""

from wirelib import assert_in_sync, assert_missing, assert_value, expect


def test_exptime_2_to_the_31_is_stored_and_already_expired(conn):
    expect(conn, b"set k 0 2147483648 1\r\na\r\n", b"STORED\r\n")
    assert_missing(conn, "k")


def test_exptime_2_to_the_32_wraps_to_never(conn):
    expect(conn, b"set k 0 4294967296 1\r\na\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"a")
    expect(conn, b"mg k t v\r\n", b"VA 1 t-1\r\na\r\n")


def test_exptime_2_to_the_32_plus_one_is_one_second(conn):
    expect(conn, b"set k 0 4294967297 1\r\na\r\n", b"STORED\r\n")
    expect(conn, b"mg k t v\r\n", b"VA 1 t1\r\na\r\n")


def test_a_negative_exptime_below_int_min_wraps_to_the_far_future(conn):
    expect(conn, b"set k 0 -2147483649 1\r\na\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"a")


def test_touch_with_4294967295_expires_the_item(conn):
    expect(conn, b"set k 0 0 1\r\na\r\n", b"STORED\r\n")
    expect(conn, b"touch k 4294967295\r\n", b"TOUCHED\r\n")
    assert_missing(conn, "k")


def test_gat_with_2_to_the_32_keeps_the_item_forever(conn):
    expect(conn, b"set k 0 100 1\r\na\r\n", b"STORED\r\n")
    expect(conn, b"gat 4294967296 k\r\n", b"VALUE k 0 1\r\na\r\nEND\r\n")
    expect(conn, b"mg k t\r\n", b"HD t-1\r\n")


def test_meta_ttl_wraps_too(conn):
    expect(conn, b"ms k 1 T4294967297\r\nb\r\n", b"HD\r\n")
    expect(conn, b"mg k t v\r\n", b"VA 1 t1\r\nb\r\n")
    expect(conn, b"mg k T2147483648 v\r\n", b"VA 1\r\nb\r\n")
    assert_missing(conn, "k")


def test_value_length_wraps_to_32_bits(conn):
    expect(conn, b"set k 0 0 4294967297\r\nz\r\n", b"STORED\r\n")
    assert_value(conn, "k", b"z")
    expect(conn, b"ms m 4294967297\r\nz\r\n", b"HD\r\n")
    expect(conn, b"mg m v\r\n", b"VA 1\r\nz\r\n")


def test_beyond_a_64_bit_long_is_still_an_error(conn):
    expect(conn, b"set k 0 9223372036854775808 1\r\na\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    expect(conn, b"touch k 99999999999999999999\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
    expect(conn, b"gat 99999999999999999999 k\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
    expect(conn, b"flush_all 99999999999999999999\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
    assert_in_sync(conn)


def test_flush_all_delay_of_2_to_the_32_flushes_now(conn):
    expect(conn, b"set k 0 0 1\r\na\r\n", b"STORED\r\n")
    expect(conn, b"flush_all 4294967296\r\n", b"OK\r\n")
    assert_missing(conn, "k")
