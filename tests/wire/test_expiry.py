"""Expiry: 0 = never, <= 30 days relative, larger = absolute unix time, negative = expired.

Tests that need time to pass use strata's debug clock (--enable-debug-clock and
`debug_advance_clock <seconds>`), so they are strata_only; one memcached_only
test really sleeps to confirm the relative-expiry semantics on memcached.
"""

import time

import pytest

from harness import Server
from wirelib import (
    advance_clock,
    assert_missing,
    assert_value,
    expect,
    gets_cas,
    server_now,
    stats,
    stored,
)

THIRTY_DAYS = 2592000


@pytest.fixture(scope="module")
def clock_server():
    srv = Server(args=["--enable-debug-clock"])
    yield srv
    srv.stop()


@pytest.fixture
def cconn(clock_server):
    c = clock_server.connect(timeout=2.0)
    expect(c, b"flush_all\r\n", b"OK\r\n")
    yield c
    c.close()


# ---------------------------------------------------------------- no clock needed


def test_exptime_zero_never_expires(conn):
    stored(conn, "k", b"v", exptime=0)
    assert_value(conn, "k", b"v")


def test_negative_exptime_is_immediately_expired(conn):
    expect(conn, b"set k 0 -1 1\r\nv\r\n", b"STORED\r\n")
    assert_missing(conn, "k")
    expect(conn, b"gets k\r\n", b"END\r\n")


def test_negative_exptime_replaces_existing_value(conn):
    stored(conn, "k", b"old")
    expect(conn, b"set k 0 -1 1\r\nv\r\n", b"STORED\r\n")
    assert_missing(conn, "k")


def test_exptime_of_thirty_days_is_relative(conn):
    stored(conn, "k", b"v", exptime=THIRTY_DAYS)
    assert_value(conn, "k", b"v")


def test_exptime_over_thirty_days_is_absolute_time_in_1970(conn):
    stored(conn, "k", b"v", exptime=THIRTY_DAYS + 1)
    assert_missing(conn, "k")


def test_absolute_exptime_in_future_is_live(conn):
    stored(conn, "k", b"v", exptime=server_now(conn) + 100)
    assert_value(conn, "k", b"v")


def test_absolute_exptime_in_past_is_expired(conn):
    stored(conn, "k", b"v", exptime=server_now(conn) - 10)
    assert_missing(conn, "k")


@pytest.fixture
def expired(conn):
    expect(conn, b"set k 0 -1 1\r\n5\r\n", b"STORED\r\n")
    return conn


def test_add_on_expired_key_stores(expired):
    expect(expired, b"add k 0 0 1\r\nb\r\n", b"STORED\r\n")
    assert_value(expired, "k", b"b")


@pytest.mark.parametrize("cmd", [b"replace", b"append", b"prepend"])
def test_replace_append_prepend_on_expired_key_not_stored(expired, cmd):
    expect(expired, cmd + b" k 0 0 1\r\nb\r\n", b"NOT_STORED\r\n")
    assert_missing(expired, "k")


@pytest.mark.parametrize("cmd", [b"incr", b"decr"])
def test_incr_decr_on_expired_key_not_found(expired, cmd):
    expect(expired, cmd + b" k 1\r\n", b"NOT_FOUND\r\n")


def test_cas_on_expired_key_not_found(expired):
    expect(expired, b"cas k 0 0 1 1\r\nb\r\n", b"NOT_FOUND\r\n")


def test_touch_and_gat_on_expired_key_miss(expired):
    expect(expired, b"touch k 0\r\n", b"NOT_FOUND\r\n")
    expect(expired, b"gat 0 k\r\n", b"END\r\n")
    expect(expired, b"gats 0 k\r\n", b"END\r\n")


def test_delete_on_expired_key_not_found(expired):
    expect(expired, b"delete k\r\n", b"NOT_FOUND\r\n")


@pytest.mark.memcached_only
def test_relative_expiry_really_expires_after_sleeping(conn):
    stored(conn, "k", b"v", exptime=2)
    assert_value(conn, "k", b"v")
    time.sleep(3.1)
    assert_missing(conn, "k")


# ---------------------------------------------------------------- debug clock (strata)


@pytest.mark.strata_only
def test_debug_clock_moves_stats_time(cconn):
    before = server_now(cconn)
    advance_clock(cconn, 1000)
    assert server_now(cconn) - before in (1000, 1001)


@pytest.mark.strata_only
def test_relative_exptime_live_before_and_gone_after(cconn):
    stored(cconn, "k", b"v", exptime=10)
    advance_clock(cconn, 9)
    assert_value(cconn, "k", b"v")
    advance_clock(cconn, 2)
    assert_missing(cconn, "k")


@pytest.mark.strata_only
def test_relative_exptime_gone_after_eleven_seconds(cconn):
    stored(cconn, "k", b"v", exptime=10)
    advance_clock(cconn, 11)
    assert_missing(cconn, "k")
    expect(cconn, b"gets k\r\n", b"END\r\n")


@pytest.mark.strata_only
def test_absolute_exptime_expires_at_that_time(cconn):
    stored(cconn, "k", b"v", exptime=server_now(cconn) + 100)
    advance_clock(cconn, 98)
    assert_value(cconn, "k", b"v")
    advance_clock(cconn, 3)
    assert_missing(cconn, "k")


@pytest.mark.strata_only
def test_thirty_days_is_relative_with_clock(cconn):
    stored(cconn, "k", b"v", exptime=THIRTY_DAYS)
    advance_clock(cconn, THIRTY_DAYS - 2)
    assert_value(cconn, "k", b"v")
    advance_clock(cconn, 3)
    assert_missing(cconn, "k")


@pytest.mark.strata_only
def test_exptime_zero_survives_clock_advance(cconn):
    stored(cconn, "k", b"v", exptime=0)
    advance_clock(cconn, 10 * THIRTY_DAYS)
    assert_value(cconn, "k", b"v")


@pytest.mark.strata_only
def test_touch_extends_expiry(cconn):
    stored(cconn, "k", b"v", exptime=10)
    expect(cconn, b"touch k 100\r\n", b"TOUCHED\r\n")
    advance_clock(cconn, 50)
    assert_value(cconn, "k", b"v")
    advance_clock(cconn, 51)
    assert_missing(cconn, "k")


@pytest.mark.strata_only
def test_touch_shortens_expiry(cconn):
    stored(cconn, "k", b"v", exptime=0)
    expect(cconn, b"touch k 10\r\n", b"TOUCHED\r\n")
    advance_clock(cconn, 11)
    assert_missing(cconn, "k")


@pytest.mark.strata_only
def test_touch_zero_removes_expiry(cconn):
    stored(cconn, "k", b"v", exptime=10)
    expect(cconn, b"touch k 0\r\n", b"TOUCHED\r\n")
    advance_clock(cconn, 1000)
    assert_value(cconn, "k", b"v")


@pytest.mark.strata_only
@pytest.mark.parametrize("cmd", [b"gat", b"gats"])
def test_gat_sets_new_expiry(cconn, cmd):
    stored(cconn, "k", b"v", exptime=0)
    cconn.send(cmd + b" 10 k\r\n")
    assert cconn.read_until(b"END\r\n").startswith(b"VALUE k 0 1")
    advance_clock(cconn, 9)
    assert_value(cconn, "k", b"v")
    advance_clock(cconn, 2)
    assert_missing(cconn, "k")


@pytest.mark.strata_only
def test_gat_zero_removes_expiry(cconn):
    stored(cconn, "k", b"v", exptime=10)
    expect(cconn, b"gat 0 k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    advance_clock(cconn, 100)
    assert_value(cconn, "k", b"v")


@pytest.mark.strata_only
def test_append_and_incr_keep_expiry(cconn):
    stored(cconn, "a", b"x", exptime=10)
    stored(cconn, "n", b"1", exptime=10)
    expect(cconn, b"append a 0 0 1\r\ny\r\n", b"STORED\r\n")
    expect(cconn, b"incr n 1\r\n", b"2\r\n")
    advance_clock(cconn, 11)
    assert_missing(cconn, "a")
    assert_missing(cconn, "n")


@pytest.mark.strata_only
def test_set_replaces_expiry(cconn):
    stored(cconn, "k", b"v", exptime=10)
    stored(cconn, "k", b"w", exptime=0)
    advance_clock(cconn, 11)
    assert_value(cconn, "k", b"w")


@pytest.mark.strata_only
def test_cas_sets_new_expiry(cconn):
    stored(cconn, "k", b"v", exptime=0)
    cas = gets_cas(cconn, "k")
    expect(cconn, b"cas k 0 10 1 %d\r\nw\r\n" % cas, b"STORED\r\n")
    advance_clock(cconn, 11)
    assert_missing(cconn, "k")


@pytest.mark.strata_only
def test_operations_on_key_expired_by_clock(cconn):
    for k in (b"a", b"r", b"i", b"c", b"p", b"t"):
        stored(cconn, k, b"1", exptime=10)
    advance_clock(cconn, 11)
    expect(cconn, b"add a 0 0 1\r\n2\r\n", b"STORED\r\n")
    assert_value(cconn, "a", b"2")
    expect(cconn, b"replace r 0 0 1\r\n2\r\n", b"NOT_STORED\r\n")
    expect(cconn, b"incr i 1\r\n", b"NOT_FOUND\r\n")
    expect(cconn, b"cas c 0 0 1 1\r\n2\r\n", b"NOT_FOUND\r\n")
    expect(cconn, b"append p 0 0 1\r\n2\r\n", b"NOT_STORED\r\n")
    expect(cconn, b"touch t 0\r\n", b"NOT_FOUND\r\n")


@pytest.mark.strata_only
def test_expired_item_is_not_counted_as_hit(cconn):
    stored(cconn, "k", b"v", exptime=10)
    before = stats(cconn)
    advance_clock(cconn, 11)
    assert_missing(cconn, "k")
    after = stats(cconn)
    assert int(after["get_hits"]) - int(before["get_hits"]) == 0
    assert int(after["get_misses"]) - int(before["get_misses"]) == 1


@pytest.mark.strata_only
def test_debug_clock_command_is_unknown_without_flag(conn):
    expect(conn, b"debug_advance_clock 10\r\n", b"ERROR\r\n")
