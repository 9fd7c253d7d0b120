"""gets / cas: unique values and the STORED / EXISTS / NOT_FOUND outcomes."""

import random

import pytest

from wirelib import assert_in_sync, assert_missing, assert_value, expect, get, gets_cas, stored


def test_cas_with_current_unique_stores(conn):
    stored(conn, "k", b"old")
    cas = gets_cas(conn, "k")
    expect(conn, b"cas k 3 0 3 %d\r\nnew\r\n" % cas, b"STORED\r\n")
    assert_value(conn, "k", b"new", flags=3)


def test_cas_twice_with_same_unique_second_is_exists(conn):
    stored(conn, "k", b"old")
    cas = gets_cas(conn, "k")
    expect(conn, b"cas k 0 0 1 %d\r\na\r\n" % cas, b"STORED\r\n")
    expect(conn, b"cas k 0 0 1 %d\r\nb\r\n" % cas, b"EXISTS\r\n")
    assert_value(conn, "k", b"a")


def test_cas_after_intervening_set_is_exists(conn):
    stored(conn, "k", b"old")
    cas = gets_cas(conn, "k")
    stored(conn, "k", b"other")
    expect(conn, b"cas k 0 0 3 %d\r\nnew\r\n" % cas, b"EXISTS\r\n")
    assert_value(conn, "k", b"other")


def test_cas_on_missing_key_is_not_found(conn):
    expect(conn, b"cas nokey 0 0 1 1\r\na\r\n", b"NOT_FOUND\r\n")
    assert_missing(conn, "nokey")


def test_cas_after_delete_is_not_found(conn):
    stored(conn, "k", b"v")
    cas = gets_cas(conn, "k")
    expect(conn, b"delete k\r\n", b"DELETED\r\n")
    expect(conn, b"cas k 0 0 1 %d\r\na\r\n" % cas, b"NOT_FOUND\r\n")


def test_cas_with_wrong_unique_is_exists(conn):
    stored(conn, "k", b"v")
    cas = gets_cas(conn, "k")
    expect(conn, b"cas k 0 0 1 %d\r\na\r\n" % (cas + 1000), b"EXISTS\r\n")
    expect(conn, b"cas k 0 0 1 0\r\na\r\n", b"EXISTS\r\n")
    assert_value(conn, "k", b"v")


def test_cas_unique_differs_between_keys(conn):
    stored(conn, "a", b"1")
    stored(conn, "b", b"1")
    assert gets_cas(conn, "a") != gets_cas(conn, "b")


def test_cas_unique_is_stable_without_modification(conn):
    stored(conn, "k", b"1")
    assert gets_cas(conn, "k") == gets_cas(conn, "k")
    get(conn, "k")
    assert gets_cas(conn, "k") == gets_cas(conn, "k")


@pytest.mark.parametrize(
    "modify",
    [
        b"set k 0 0 1\r\n2\r\n",
        b"replace k 0 0 1\r\n3\r\n",
        b"append k 0 0 1\r\n0\r\n",
        b"prepend k 0 0 1\r\n1\r\n",
        b"incr k 1\r\n",
        b"decr k 1\r\n",
    ],
    ids=["set", "replace", "append", "prepend", "incr", "decr"],
)
def test_every_modification_changes_cas_unique(conn, modify):
    stored(conn, "k", b"5")
    before = gets_cas(conn, "k")
    conn.send(modify)
    conn.read_line()
    assert gets_cas(conn, "k") != before


def test_successful_cas_changes_cas_unique(conn):
    stored(conn, "k", b"5")
    before = gets_cas(conn, "k")
    expect(conn, b"cas k 0 0 1 %d\r\n6\r\n" % before, b"STORED\r\n")
    assert gets_cas(conn, "k") != before


@pytest.mark.parametrize("touch", [b"touch k 100\r\n", b"gat 100 k\r\n", b"gats 100 k\r\n"], ids=["touch", "gat", "gats"])
def test_touch_and_gat_do_not_change_cas_unique(conn, touch):
    stored(conn, "k", b"5")
    before = gets_cas(conn, "k")
    conn.send(touch)
    conn.read_line()
    if not touch.startswith(b"touch"):
        conn.read_until(b"END\r\n")
    assert gets_cas(conn, "k") == before


def test_gats_reports_same_cas_as_gets(conn):
    stored(conn, "k", b"5")
    cas = gets_cas(conn, "k")
    expect(conn, b"gats 0 k\r\n", b"VALUE k 0 1 %d\r\n5\r\nEND\r\n" % cas)


def test_cas_without_unique_token_is_error(conn):
    # The data line is then read as a command: a second ERROR.
    stored(conn, "k", b"v")
    expect(conn, b"cas k 0 0 1\r\nx\r\n", b"ERROR\r\nERROR\r\n")
    assert_value(conn, "k", b"v")
    assert_in_sync(conn)


@pytest.mark.parametrize("unique", [b"abc", b"-1"])
def test_cas_with_invalid_unique_is_bad_command_line(conn, unique):
    expect(conn, b"cas k 0 0 1 %s\r\nx\r\n" % unique, b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_in_sync(conn)


def test_cas_noreply_applies_silently(conn):
    stored(conn, "k", b"v")
    cas = gets_cas(conn, "k")
    expect(conn, b"cas k 0 0 1 %d noreply\r\nw\r\nget k\r\n" % cas, b"VALUE k 0 1\r\nw\r\nEND\r\n")


# ---------------------------------------------------------------- -C


@pytest.fixture(scope="module")
def nocas_conn(request):
    from harness import Server

    srv = Server(args=["-C"])
    request.addfinalizer(srv.stop)
    return srv.connect(timeout=2.0)


def test_disabled_cas_gets_reports_zero(nocas_conn):
    stored(nocas_conn, "k", b"a")
    expect(nocas_conn, b"gets k\r\n", b"VALUE k 0 1 0\r\na\r\nEND\r\n")


def test_disabled_cas_cas_command_is_exists(nocas_conn):
    stored(nocas_conn, "k", b"a")
    expect(nocas_conn, b"cas k 0 0 1 0\r\nb\r\n", b"EXISTS\r\n")
    expect(nocas_conn, b"cas k 0 0 1 1\r\nb\r\n", b"EXISTS\r\n")
    assert_value(nocas_conn, "k", b"a")


def test_disabled_cas_cas_on_missing_key_is_not_found(nocas_conn):
    expect(nocas_conn, b"cas nokey 0 0 1 0\r\nb\r\n", b"NOT_FOUND\r\n")


def test_each_write_takes_a_unique_above_the_last_from_any_connection(make_server):
    """memcached's uniques come from one counter, so a key's unique only
    grows, and `ms` with `I` compares a client's by order (an older one
    stores the value as stale). strata derives a unique from the segment a
    version lands in; two workers' open segments are of different ages, and
    1,763 of 40,000 sets from two connections took a unique below the
    key's last before such a version got an explicit one."""
    srv = make_server(["-t", "2"])
    conns = [srv.connect(), srv.connect()]
    rng = random.Random(3)
    last, lower = {}, []
    for i in range(20_000):
        c = conns[rng.randrange(2)]
        key = b"k%d" % rng.randrange(500)
        size = rng.randrange(10, 3000)
        c.send(b"ms %s %d c\r\n%s\r\n" % (key, size, b"v" * size))
        reply = c.read_line()
        assert reply.startswith(b"HD c"), reply
        unique = int(reply.split()[1][1:])
        if unique <= last.get(key, 0):
            lower.append((i, key, last[key], unique))
        last[key] = unique
    assert lower == [], "%d writes took a unique not above the key's last: %s" % (len(lower), lower[:3])
    # The order counts: an older unique with I stores the value as stale.
    c = conns[0]
    key = max(last, key=last.get)
    c.send(b"ms %s 1 I C%d\r\nz\r\n" % (key, last[key] - 1))
    assert c.read_line() == b"HD\r\n"
    c.send(b"mg %s v\r\n" % key)
    assert c.read_line() == b"VA 1 X W\r\n" and c.read_line() == b"z\r\n"
