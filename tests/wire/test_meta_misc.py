"""mn, me, errors shared by the meta commands, and meta mixed with classic commands."""

import re

import pytest

from harness import Server
from wirelib import (
    advance_clock,
    assert_in_sync,
    assert_value,
    cas_of,
    expect,
    get,
    gets_cas,
    meta,
    value_reply,
)


ME = re.compile(rb"ME (\S+) exp=(-?\d+) la=(\d+) cas=(\d+) fetch=(yes|no) cls=\d+ size=\d+\r\n")


def me(c, request):
    """`me` reply as (key, exp, la, cas, fetch); cls and size are memcached internals."""
    line = meta(c, request)
    m = ME.fullmatch(line)
    assert m, line
    key, exp, la, cas, fetch = m.groups()
    return key, int(exp), int(la), int(cas), fetch


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


# ---------------------------------------------------------------- mn


def test_mn(conn):
    expect(conn, b"mn\r\n", b"MN\r\n")


def test_mn_ignores_arguments(conn):
    expect(conn, b"mn foo bar\r\n", b"MN\r\n")
    expect(conn, b"mn Pa Lb\r\n", b"MN\r\n")


def test_mn_bare_newline(conn):
    expect(conn, b"mn\n", b"MN\r\n")


def test_mn_ends_quiet_pipeline_of_all_commands(conn):
    expect(
        conn,
        b"ms a 1 q\r\n1\r\nmg zz q v\r\nma a q\r\nmd zz q\r\nmd a q\r\nmn\r\n",
        b"NF\r\nMN\r\n",
    )


# ---------------------------------------------------------------- me


def test_me_miss_is_en(conn):
    expect(conn, b"me nokey\r\n", b"EN\r\n")


def test_me_hit_format(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    key, exp, la, got_cas, fetch = me(conn, b"me k\r\n")
    assert (key, exp, got_cas, fetch) == (b"k", -1, cas, b"no")
    assert la in (0, 1)


def test_me_fetch_becomes_yes_after_read(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    assert me(conn, b"me k\r\n")[4] == b"no"
    expect(conn, b"mg k v\r\n", b"VA 2\r\nhi\r\n")
    assert me(conn, b"me k\r\n")[4] == b"yes"


def test_me_does_not_count_as_fetch(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    me(conn, b"me k\r\n")
    expect(conn, b"mg k h\r\n", b"HD h0\r\n")


def test_me_exp_with_ttl_is_negated_remaining_time(conn):
    # memcached 1.6.18 prints current_time - exptime: minus the remaining TTL.
    expect(conn, b"ms k 2 T100\r\nhi\r\n", b"HD\r\n")
    assert me(conn, b"me k\r\n")[1] in (-100, -99)


def test_me_extra_tokens_ignored(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    assert me(conn, b"me k x y\r\n")[0] == b"k"
    assert me(conn, b"me k q\r\n")[0] == b"k"


def test_me_base64_key_of_binary_item(conn):
    expect(conn, b"ms Zm9vYmFy 2 b\r\nhi\r\n", b"HD\r\n")
    assert me(conn, b"me Zm9vYmFy b\r\n")[0] == b"Zm9vYmFy"


def test_me_plain_key_of_binary_item_is_printed_base64(conn):
    expect(conn, b"ms Zm9vYmFy 2 b\r\nhi\r\n", b"HD\r\n")
    assert me(conn, b"me foobar\r\n")[0] == b"Zm9vYmFy"


def test_me_b_of_plain_item_prints_plain_key(conn):
    # The printed key follows how the item was stored, not the request.
    expect(conn, b"set foo 0 0 2\r\nhi\r\n", b"STORED\r\n")
    assert me(conn, b"me Zm9v b\r\n")[0] == b"foo"


def test_me_b_miss(conn):
    expect(conn, b"me Zm9v b\r\n", b"EN\r\n")


def test_me_errors(conn):
    expect(conn, b"me\r\n", b"CLIENT_ERROR bad command line format\r\n")
    expect(conn, b"me " + b"a" * 251 + b"\r\n", b"CLIENT_ERROR bad command line format\r\n")
    expect(conn, b"me !!!! b\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- errors common to all meta commands


COMMANDS = {
    # command: (request for key k with extra flags, bad-flag error)
    b"mg": (b"mg k%s\r\n", b"CLIENT_ERROR invalid flag\r\n"),
    b"ms": (b"ms k 1%s\r\nx\r\n", b"CLIENT_ERROR invalid flag\r\n"),
    b"md": (b"md k%s\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n"),
    b"ma": (b"ma k%s\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n"),
}


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_unknown_flag(conn, cmd):
    request, error = COMMANDS[cmd]
    expect(conn, request % b" z", error)
    assert_in_sync(conn)


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_unknown_flag_with_q_still_answered(conn, cmd):
    request, error = COMMANDS[cmd]
    expect(conn, request % b" q z", error)
    assert_in_sync(conn)


@pytest.mark.parametrize("cmd, error", [
    (b"mg", b"CLIENT_ERROR duplicate flag\r\n"),
    (b"ms", b"CLIENT_ERROR duplicate flag\r\n"),
    (b"md", b"CLIENT_ERROR invalid or duplicate flag\r\n"),
    (b"ma", b"CLIENT_ERROR invalid or duplicate flag\r\n"),
])
def test_duplicate_flag(conn, cmd, error):
    expect(conn, COMMANDS[cmd][0] % b" O1 O2", error)
    assert_in_sync(conn)


@pytest.mark.parametrize("req", [
    b"mg %s v\r\n", b"md %s\r\n", b"ma %s\r\n", b"me %s\r\n",
])
def test_key_too_long(conn, req):
    expect(conn, req % (b"a" * 251), b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_key_too_long_ms_data_line_read_as_command(conn):
    # The key is checked before the data length, so the data is not swallowed.
    expect(conn, b"ms " + b"a" * 251 + b" 1\r\nx\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_in_sync(conn)


def test_key_of_250_bytes(conn):
    key = b"a" * 250
    expect(conn, b"ms " + key + b" 1 k\r\nx\r\n", b"HD k" + key + b"\r\n")
    expect(conn, b"mg " + key + b" k v\r\n", b"VA 1 k" + key + b"\r\nx\r\n")
    expect(conn, b"ma " + key + b"\r\n", b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
    expect(conn, b"md " + key + b"\r\n", b"HD\r\n")


# 252 base64 characters decode to 189 bytes, but the limit applies to the token.
B64_LONG = b"AQEB" * 63


@pytest.mark.parametrize("req", [b"mg %s b v\r\n", b"md %s b\r\n", b"ma %s b\r\n"])
def test_base64_key_too_long(conn, req):
    expect(conn, req % B64_LONG, b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_base64_key_too_long_ms(conn):
    expect(conn, b"ms " + B64_LONG + b" 1 b\r\nx\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_in_sync(conn)


def test_base64_key_of_248_characters(conn):
    key = b"AQEB" * 62
    expect(conn, b"ms " + key + b" 1 b k\r\nx\r\n", b"HD k" + key + b" b\r\n")
    expect(conn, b"mg " + key + b" b v\r\n", b"VA 1\r\nx\r\n")


@pytest.mark.parametrize("req", [b"mg\r\n", b"ms\r\n", b"md\r\n", b"ma\r\n", b"mg \r\n"])
def test_missing_key_is_error(conn, req):
    expect(conn, req, b"ERROR\r\n")
    assert_in_sync(conn)


@pytest.mark.parametrize("req", [b"MG k v\r\n", b"Mg k\r\n", b"mgg k\r\n", b"mx k\r\n", b"m\r\n", b"MN\r\n"])
def test_unknown_meta_like_command(conn, req):
    expect(conn, req, b"ERROR\r\n")
    assert_in_sync(conn)


@pytest.mark.parametrize("req, error", [
    (b"mg k Nx\r\n", b"CLIENT_ERROR bad token in command line format\r\n"),
    (b"mg k Tx\r\n", b"CLIENT_ERROR bad token in command line format\r\n"),
    (b"mg k Rx\r\n", b"CLIENT_ERROR bad token in command line format\r\n"),
    (b"ms k 1 Tx\r\nx\r\n", b"CLIENT_ERROR bad token in command line format\r\n"),
    (b"ms k 1 Cx\r\nx\r\n", b"CLIENT_ERROR bad token in command line format\r\n"),
    (b"ms k 1 Fx\r\nx\r\n", b"CLIENT_ERROR bad command line format\r\n"),
    (b"ms k 1 MZ\r\nx\r\n", b"CLIENT_ERROR invalid mode for ms M token\r\n"),
    (b"md k Cx\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n"),
    (b"md k I Tx\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n"),
    (b"ma k Dx\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n"),
    (b"ma k N0 Jx\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n"),
    (b"ma k MZ\r\n", b"CLIENT_ERROR invalid mode for ma M token\r\n"),
])
def test_bad_tokens(conn, req, error):
    expect(conn, req, error)
    expect(conn, b"mg k\r\n", b"EN\r\n")


def flags(n):
    return b"".join(b" O%d" % i for i in range(n))


@pytest.mark.parametrize("cmd, most, error", [
    (b"mg", 17, b"CLIENT_ERROR options flags are too long\r\n"),
    (b"md", 17, b"CLIENT_ERROR options flags too long\r\n"),
    (b"ma", 17, b"CLIENT_ERROR options flags too long\r\n"),
])
def test_too_many_tokens(conn, cmd, most, error):
    # Up to `most` flags get as far as flag parsing (here: duplicate 'O').
    request = cmd + b" k%s\r\n"
    dup = b"CLIENT_ERROR duplicate flag\r\n" if cmd == b"mg" else b"CLIENT_ERROR invalid or duplicate flag\r\n"
    expect(conn, request % flags(most), dup)
    expect(conn, request % flags(most + 1), error)
    expect(conn, request % flags(most + 5), error)
    assert_in_sync(conn)


def test_too_many_tokens_ms(conn):
    # 16 flags are parsed (duplicate 'O', data swallowed); 17 are too many and
    # the data line is then read as a command.
    expect(conn, b"ms k 1%s\r\nx\r\n" % flags(16), b"CLIENT_ERROR duplicate flag\r\n")
    expect(conn, b"ms k 1%s\r\nx\r\n" % flags(17), b"CLIENT_ERROR options flags too long\r\nERROR\r\n")
    assert_in_sync(conn)


def test_seventeen_distinct_flags_accepted_by_mg(conn):
    expect(conn, b"ms k 1 F2\r\nx\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    reply = meta(conn, b"mg k c f h k O1 s t v u P L C1 I F1 D1 J1 MS\r\n")
    assert reply == b"VA 1 c%d f2 h0 kk O1 s1 t-1\r\nx\r\n" % cas


@pytest.mark.parametrize("req, reply", [
    (b"mg k Pfoo Lbar v\r\n", b"VA 1\r\nx\r\n"),
    (b"mg k P L v\r\n", b"VA 1\r\nx\r\n"),
    (b"ms k 1 P/x L/y\r\ny\r\n", b"HD\r\n"),
    (b"ma n Pa Lb v\r\n", b"VA 1\r\n6\r\n"),
    (b"md k Pa Lb\r\n", b"HD\r\n"),
    (b"mn Pa Lb\r\n", b"MN\r\n"),
])
def test_p_and_l_flags_ignored(conn, req, reply):
    expect(conn, b"ms k 1\r\nx\r\nms n 1\r\n5\r\n", b"HD\r\nHD\r\n")
    expect(conn, req, reply)


def test_p_and_l_flags_ignored_by_me(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    assert me(conn, b"me k Pa\r\n")[0] == b"k"


@pytest.mark.parametrize("req", [b"ma k O%s\r\n", b"md k O%s\r\n", b"ms k 1 O%s\r\nx\r\n"])
def test_opaque_too_long(conn, req):
    expect(conn, req % (b"o" * 32), b"CLIENT_ERROR opaque token too long\r\n")
    assert_in_sync(conn)


@pytest.mark.memcached_only
def test_opaque_too_long_ma_still_applies_increment_in_memcached(conn):
    # memcached checks the opaque length only after the update; strata
    # refuses first (docs/protocol.md, "Differences").
    expect(conn, b"ms n 1\r\n5\r\n", b"HD\r\n")
    expect(conn, b"ma n O" + b"o" * 32 + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    expect(conn, b"mg n v\r\n", b"VA 1\r\n6\r\n")


@pytest.mark.memcached_only
def test_opaque_too_long_mg_still_vivifies_and_touches_in_memcached(conn):
    # Same for mg: N creates the item (without handing out a win) and T touches.
    long = b"O" + b"o" * 32
    expect(conn, b"mg viv N30 " + long + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    expect(conn, b"mg viv v\r\n", b"VA 0\r\n\r\n")
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k T100 " + long + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    assert meta(conn, b"mg k t\r\n") in (b"HD t100\r\n", b"HD t99\r\n")


@pytest.mark.strata_only
def test_opaque_too_long_is_refused_before_any_change(conn):
    long = b"O" + b"o" * 32
    expect(conn, b"ms n 1\r\n5\r\n", b"HD\r\n")
    expect(conn, b"ma n " + long + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    expect(conn, b"mg n v\r\n", b"VA 1\r\n5\r\n")
    expect(conn, b"mg viv N30 " + long + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    expect(conn, b"mg viv v\r\n", b"EN\r\n")
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k T100 " + long + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    expect(conn, b"mg k t\r\n", b"HD t-1\r\n")


def test_opaque_too_long_md_does_not_delete(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k O" + b"o" * 32 + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nx\r\n")


# ---------------------------------------------------------------- meta and classic on one connection


def test_classic_set_read_by_mg(conn):
    expect(conn, b"set a 3 0 2\r\nhi\r\n", b"STORED\r\n")
    expect(conn, b"mg a v f s k\r\n", b"VA 2 f3 s2 ka\r\nhi\r\n")


def test_ms_read_by_classic_get(conn):
    expect(conn, b"ms b 2 F4 T0\r\nyo\r\n", b"HD\r\n")
    assert get(conn, "b") == value_reply("b", b"yo", flags=4) + b"END\r\n"


def test_gets_cas_accepted_by_ms(conn):
    expect(conn, b"set a 0 0 2\r\nhi\r\n", b"STORED\r\n")
    cas = gets_cas(conn, "a")
    expect(conn, b"mg a c\r\n", b"HD c%d\r\n" % cas)
    expect(conn, b"ms a 2 C%d\r\nho\r\n" % cas, b"HD\r\n")
    assert_value(conn, "a", b"ho")


def test_mg_cas_accepted_by_classic_cas(conn):
    expect(conn, b"ms a 2\r\nhi\r\n", b"HD\r\n")
    cas = cas_of(conn, b"a")
    expect(conn, b"cas a 5 0 2 %d\r\nho\r\n" % cas, b"STORED\r\n")
    expect(conn, b"cas a 5 0 2 %d\r\nhu\r\n" % cas, b"EXISTS\r\n")
    expect(conn, b"mg a v f\r\n", b"VA 2 f5\r\nho\r\n")


def test_ms_cas_returned_by_c_accepted_by_classic_cas(conn):
    reply = meta(conn, b"ms a 2 c\r\nhi\r\n")
    cas = int(reply.split()[1][1:])
    expect(conn, b"cas a 0 0 2 %d\r\nho\r\n" % cas, b"STORED\r\n")


def test_incr_and_ma_on_same_counter(conn):
    expect(conn, b"ms n 1\r\n1\r\n", b"HD\r\n")
    expect(conn, b"incr n 5\r\n", b"6\r\n")
    expect(conn, b"ma n v\r\n", b"VA 1\r\n7\r\n")
    expect(conn, b"decr n 2\r\n", b"5\r\n")
    assert get(conn, "n") == b"VALUE n 0 1\r\n5\r\nEND\r\n"


def test_classic_incr_on_ma_vivified_counter(conn):
    expect(conn, b"ma n N0 J10\r\n", b"HD\r\n")
    expect(conn, b"incr n 1\r\n", b"11\r\n")


def test_md_then_classic_delete(conn):
    expect(conn, b"set b 0 0 1\r\n1\r\n", b"STORED\r\n")
    expect(conn, b"md b\r\n", b"HD\r\n")
    expect(conn, b"delete b\r\n", b"NOT_FOUND\r\n")
    expect(conn, b"md b\r\n", b"NF\r\n")


def test_delete_then_mg(conn):
    expect(conn, b"ms b 1\r\n1\r\n", b"HD\r\n")
    expect(conn, b"delete b\r\n", b"DELETED\r\n")
    expect(conn, b"mg b v\r\n", b"EN\r\n")


def test_touch_seen_by_mg_t(conn):
    expect(conn, b"ms a 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"touch a 100\r\n", b"TOUCHED\r\n")
    assert meta(conn, b"mg a t\r\n") in (b"HD t100\r\n", b"HD t99\r\n")


def test_gat_zero_seen_by_mg_t(conn):
    expect(conn, b"ms e 1 T100\r\nx\r\n", b"HD\r\n")
    expect(conn, b"gat 0 e\r\n", b"VALUE e 0 1\r\nx\r\nEND\r\n")
    expect(conn, b"mg e t\r\n", b"HD t-1\r\n")


def test_append_classic_on_ms_item(conn):
    expect(conn, b"ms a 1 F6\r\nx\r\n", b"HD\r\n")
    expect(conn, b"append a 0 0 1\r\ny\r\n", b"STORED\r\n")
    expect(conn, b"mg a v f\r\n", b"VA 2 f6\r\nxy\r\n")


def test_meta_and_classic_pipelined(conn):
    expect(
        conn,
        b"set a 0 0 1\r\n1\r\nmg a v\r\nms b 1 T0\r\n2\r\nget a b\r\nmg c v q\r\nmd a\r\ndelete a\r\nmn\r\n",
        b"STORED\r\nVA 1\r\n1\r\nHD\r\nVALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nEND\r\nHD\r\nNOT_FOUND\r\nMN\r\n",
    )


def test_flush_all_clears_meta_items(conn):
    expect(conn, b"ms a 1\r\nx\r\nmg b N30\r\n", b"HD\r\nHD W\r\n")
    expect(conn, b"flush_all\r\n", b"OK\r\n")
    expect(conn, b"mg a\r\nmg b\r\n", b"EN\r\nEN\r\n")


# ---------------------------------------------------------------- time passing (strata debug clock)


@pytest.mark.strata_only
def test_me_la_and_exp_follow_clock(cconn):
    expect(cconn, b"ms k 2 T100\r\nhi\r\n", b"HD\r\n")
    advance_clock(cconn, 10)
    _, exp, la, _, _ = me(cconn, b"me k\r\n")
    assert exp in (-90, -89)
    assert la in (10, 11)
