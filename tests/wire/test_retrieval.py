"""get / gets with one, many, repeated and missing keys."""

from wirelib import assert_in_sync, expect, get, gets_cas, stored, value_reply


def test_get_missing_key_returns_only_end(conn):
    expect(conn, b"get nope\r\n", b"END\r\n")


def test_get_one_key(conn):
    stored(conn, "a", b"1", flags=12)
    expect(conn, b"get a\r\n", b"VALUE a 12 1\r\n1\r\nEND\r\n")


def test_get_many_keys_in_request_order(conn):
    keys = [f"key{i}" for i in range(100)]
    for i, k in enumerate(keys):
        stored(conn, k, b"v%d" % i, flags=i)
    order = list(reversed(keys))
    expected = b"".join(value_reply(k, b"v%d" % keys.index(k), flags=keys.index(k)) for k in order)
    assert get(conn, order) == expected + b"END\r\n"


def test_get_repeated_key_returns_it_each_time(conn):
    stored(conn, "a", b"1")
    expect(conn, b"get a a b a\r\n", b"VALUE a 0 1\r\n1\r\n" * 3 + b"END\r\n")


def test_get_mixed_hits_and_misses_returns_only_hits(conn):
    stored(conn, "a", b"1")
    stored(conn, "c", b"33")
    expect(conn, b"get x a y c z\r\n", b"VALUE a 0 1\r\n1\r\nVALUE c 0 2\r\n33\r\nEND\r\n")


def test_gets_includes_cas_unique(conn):
    stored(conn, "a", b"1", flags=4)
    cas = gets_cas(conn, "a")
    expect(conn, b"gets a\r\n", b"VALUE a 4 1 %d\r\n1\r\nEND\r\n" % cas)


def test_gets_many_keys_with_misses(conn):
    stored(conn, "a", b"1")
    stored(conn, "b", b"2")
    ca, cb = gets_cas(conn, "a"), gets_cas(conn, "b")
    expect(
        conn,
        b"gets a zz b a\r\n",
        b"VALUE a 0 1 %d\r\n1\r\nVALUE b 0 1 %d\r\n2\r\nVALUE a 0 1 %d\r\n1\r\nEND\r\n" % (ca, cb, ca),
    )


def test_get_without_key_is_error(conn):
    expect(conn, b"get\r\n", b"ERROR\r\n")
    expect(conn, b"gets\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


def test_get_trailing_space_is_ignored(conn):
    stored(conn, "a", b"1")
    expect(conn, b"get a \r\n", b"VALUE a 0 1\r\n1\r\nEND\r\n")


def test_get_key_too_long_is_client_error(conn):
    expect(conn, b"get " + b"a" * 251 + b"\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_multiget_with_a_too_long_key_returns_only_the_error(conn):
    # memcached discards the VALUE lines it had built for earlier keys.
    stored(conn, "a", b"1")
    expect(conn, b"get a " + b"b" * 251 + b" a\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_commands_are_case_sensitive(conn):
    stored(conn, "a", b"1")
    expect(conn, b"GET a\r\n", b"ERROR\r\n")
    assert_in_sync(conn)
