"""Meta set (ms): datalen, flags b c C F I k O q T, modes M E/A/P/R/S, outcomes, errors.

Newer flags (E, s, N in append mode) are strata_only, with expectations from
current memcached; memcached 1.6.18 does not have them.
"""

import pytest

from harness import Server
from wirelib import (
    assert_in_sync,
    assert_missing,
    assert_value,
    cas_of,
    expect,
    get,
    gets_cas,
    meta,
    value_reply,
)


def ticks(template, n):
    """template % n, or one clock tick later (n - 1)."""
    return (template % n, template % (n - 1))


# ---------------------------------------------------------------- basics / datalen


def test_ms_stores_value(conn):
    expect(conn, b"ms k 5\r\nhello\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 5\r\nhello\r\n")
    assert_value(conn, "k", b"hello")


def test_ms_overwrites_value(conn):
    expect(conn, b"ms k 3\r\nold\r\n", b"HD\r\n")
    expect(conn, b"ms k 4\r\nnewv\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 4\r\nnewv\r\n")


def test_ms_zero_length(conn):
    expect(conn, b"ms k 0\r\n\r\n", b"HD\r\n")
    expect(conn, b"mg k v s\r\n", b"VA 0 s0\r\n\r\n")


def test_ms_datalen_with_leading_zero(conn):
    expect(conn, b"ms k 01\r\na\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\na\r\n")


def test_ms_value_with_crlf_and_binary(conn):
    value = b"\x00\r\nHD\r\n\xff"
    expect(conn, b"ms k %d\r\n%s\r\n" % (len(value), value), b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA %d\r\n%s\r\n" % (len(value), value))


def test_ms_bare_newline_command_line(conn):
    expect(conn, b"ms k 1\na\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\na\r\n")


def test_ms_negative_datalen_is_client_error(conn):
    expect(conn, b"ms k -1\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_ms_non_numeric_datalen_data_line_read_as_command(conn):
    expect(conn, b"ms k abc\r\nxx\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    expect(conn, b"ms k 1x\r\na\r\n", b"CLIENT_ERROR bad command line format\r\nERROR\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


def test_ms_missing_datalen(conn):
    expect(conn, b"ms k\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_in_sync(conn)


def test_ms_missing_key(conn):
    expect(conn, b"ms\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- bad data chunk


def test_ms_bad_data_chunk_rest_is_read_as_command(conn):
    # memcached reads exactly datalen+2 bytes ("abc\r"), rejects them, and the
    # remaining "\n" is an empty command line.
    expect(conn, b"ms k 2\r\nabc\r\n", b"CLIENT_ERROR bad data chunk\r\nERROR\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


def test_ms_bad_data_chunk_keeps_old_value(conn):
    expect(conn, b"ms k 2\r\nab\r\n", b"HD\r\n")
    expect(conn, b"ms k 2\r\nabcd\r\n", b"CLIENT_ERROR bad data chunk\r\nERROR\r\n")
    expect(conn, b"mg k v\r\n", b"VA 2\r\nab\r\n")


def test_ms_bad_data_chunk_not_suppressed_by_q(conn):
    expect(conn, b"ms k 2 q\r\nabcd\r\n", b"CLIENT_ERROR bad data chunk\r\nERROR\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- too large


BIG = 600_000  # over -I 512k


@pytest.fixture(scope="module")
def small_item_server():
    srv = Server(args=["-I", "512k"])
    yield srv
    srv.stop()


@pytest.fixture
def sconn(small_item_server):
    c = small_item_server.connect(timeout=5.0)
    expect(c, b"flush_all\r\n", b"OK\r\n")
    yield c
    c.close()


def test_ms_too_large_is_server_error_and_data_swallowed(sconn):
    value = (b"mn\r\n" * (BIG // 4 + 1))[:BIG]  # data that looks like commands
    expect(sconn, b"ms k %d\r\n%s\r\n" % (BIG, value), b"SERVER_ERROR object too large for cache\r\n")
    expect(sconn, b"mg k\r\n", b"EN\r\n")
    assert_in_sync(sconn)


def test_ms_too_large_not_suppressed_by_q(sconn):
    expect(sconn, b"ms k %d q k O1\r\n%s\r\nmn\r\n" % (BIG, b"x" * BIG),
           b"SERVER_ERROR object too large for cache\r\nMN\r\n")


@pytest.mark.parametrize("mode", [b"", b" MS", b" ME", b" MR", b" MA", b" MP", b" C1"])
def test_ms_too_large_removes_existing_item_in_every_mode(sconn, mode):
    # memcached 1.6.18 unlinks the old item whatever the mode (classic
    # append/add/replace keep it).
    expect(sconn, b"ms k 3\r\nold\r\n", b"HD\r\n")
    expect(sconn, b"ms k %d%s\r\n%s\r\n" % (BIG, mode, b"x" * BIG),
           b"SERVER_ERROR object too large for cache\r\n")
    expect(sconn, b"mg k v\r\n", b"EN\r\n")


def test_ms_under_limit_is_stored(sconn):
    value = b"y" * 500_000
    expect(sconn, b"ms k 500000\r\n" + value + b"\r\n", b"HD\r\n")
    expect(sconn, b"mg k v\r\n", b"VA 500000\r\n" + value + b"\r\n")


# ---------------------------------------------------------------- F


def test_f_sets_client_flags(conn):
    expect(conn, b"ms k 1 F7\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k f\r\n", b"HD f7\r\n")
    assert get(conn, "k") == value_reply("k", b"x", flags=7) + b"END\r\n"


def test_f_omitted_resets_flags_to_zero(conn):
    expect(conn, b"ms k 1 F7\r\nx\r\n", b"HD\r\n")
    expect(conn, b"ms k 1\r\ny\r\n", b"HD\r\n")
    expect(conn, b"mg k f\r\n", b"HD f0\r\n")


def test_f_max_32_bit(conn):
    expect(conn, b"ms k 1 F4294967295\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k f\r\n", b"HD f4294967295\r\n")


def test_f_over_32_bit_wraps(conn):
    # memcached 1.6.18 parses into 64 bits and keeps the low 32 (classic set too).
    expect(conn, b"ms k 1 F4294967296\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k f\r\n", b"HD f0\r\n")
    expect(conn, b"ms k 1 F4294967297\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k f\r\n", b"HD f1\r\n")


@pytest.mark.parametrize("token", [b"F-1", b"Fx", b"F"])
def test_f_bad_token_is_client_error_and_data_swallowed(conn, token):
    expect(conn, b"ms k 1 " + token + b"\r\na\r\n", b"CLIENT_ERROR bad command line format\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


# ---------------------------------------------------------------- T


def test_t_sets_ttl(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    assert meta(conn, b"mg k t\r\n") in ticks(b"HD t%d\r\n", 100)


def test_t_zero_never_expires(conn):
    expect(conn, b"ms k 1 T0\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k t\r\n", b"HD t-1\r\n")


def test_no_t_never_expires_and_resets_old_ttl(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    expect(conn, b"ms k 1\r\ny\r\n", b"HD\r\n")
    expect(conn, b"mg k t\r\n", b"HD t-1\r\n")


def test_t_negative_stores_expired_item(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 T-1\r\ny\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"EN\r\n")


@pytest.mark.parametrize("token", [b"Tx", b"T"])
def test_t_bad_token_and_data_swallowed(conn, token):
    expect(conn, b"ms k 1 " + token + b"\r\na\r\n", b"CLIENT_ERROR bad token in command line format\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


# ---------------------------------------------------------------- c / k / O / b


def test_c_returns_new_cas(conn):
    reply = meta(conn, b"ms k 1 c\r\nx\r\n")
    assert reply.startswith(b"HD c"), reply
    cas = int(reply.split()[1][1:])
    assert cas == cas_of(conn, b"k") == gets_cas(conn, "k")


def test_c_differs_for_each_store(conn):
    first = meta(conn, b"ms k 1 c\r\nx\r\n")
    second = meta(conn, b"ms k 1 c\r\nx\r\n")
    assert int(second.split()[1][1:]) > int(first.split()[1][1:])


def test_c_is_zero_when_not_stored(conn):
    # memcached 1.6.18 answers c0 on NS / EX / NF (doc: "will return 0 on error").
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 c ME\r\na\r\n", b"NS c0\r\n")
    expect(conn, b"ms k 1 c C1\r\na\r\n", b"EX c0\r\n")
    expect(conn, b"ms z 1 c C5 k\r\na\r\n", b"NF c0 kz\r\n")


def test_k_returns_key(conn):
    expect(conn, b"ms mykey 1 k\r\nx\r\n", b"HD kmykey\r\n")


def test_o_returns_opaque(conn):
    expect(conn, b"ms k 1 O1234\r\nx\r\n", b"HD O1234\r\n")


def test_returned_flags_follow_request_order(conn):
    reply = meta(conn, b"ms k 1 k c O1 F5 T0\r\na\r\n")
    cas = cas_of(conn, b"k")
    assert reply == b"HD kk c%d O1\r\n" % cas
    reply = meta(conn, b"ms k 1 O1 c k\r\na\r\n")
    assert reply == b"HD O1 c%d kk\r\n" % cas_of(conn, b"k")


def test_k_and_o_on_not_stored(conn):
    expect(conn, b"ms z 1 MR k O1\r\na\r\n", b"NS kz O1\r\n")


def test_o_too_long_is_error_and_data_swallowed(conn):
    expect(conn, b"ms k 1 O" + b"o" * 32 + b"\r\na\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


def test_b_base64_key(conn):
    expect(conn, b"ms Zm9vYmFy 2 b k\r\nhi\r\n", b"HD kZm9vYmFy b\r\n")
    assert get(conn, "foobar") == value_reply("foobar", b"hi") + b"END\r\n"
    expect(conn, b"mg Zm9vYmFy b v\r\n", b"VA 2\r\nhi\r\n")


def test_b_binary_key_with_opaque(conn):
    expect(conn, b"ms AAEC 1 b k O1\r\nx\r\n", b"HD kAAEC b O1\r\n")


def test_b_invalid_base64_and_data_swallowed(conn):
    expect(conn, b"ms !!!! 1 b\r\nx\r\n", b"CLIENT_ERROR error decoding key\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- q


def test_q_suppresses_hd(conn):
    expect(conn, b"ms k 1 q\r\nx\r\nmn\r\n", b"MN\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nx\r\n")


def test_q_suppresses_hd_with_return_flags(conn):
    expect(conn, b"ms k 1 q k O5 c\r\nq\r\nmn\r\n", b"MN\r\n")


def test_q_does_not_suppress_ns(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 q ME\r\ny\r\nmn\r\n", b"NS\r\nMN\r\n")
    expect(conn, b"ms z 1 q MR\r\ny\r\nmn\r\n", b"NS\r\nMN\r\n")


def test_q_does_not_suppress_ex_or_nf(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 q C1\r\ny\r\nmn\r\n", b"EX\r\nMN\r\n")
    expect(conn, b"ms nf 1 q C1\r\ny\r\nmn\r\n", b"NF\r\nMN\r\n")


def test_q_pipeline_of_sets(conn):
    expect(conn, b"ms a 1 q\r\n1\r\nms b 1 q\r\n2\r\nms a 1 q ME\r\n3\r\nmn\r\n", b"NS\r\nMN\r\n")
    expect(conn, b"mg a v\r\nmg b v\r\n", b"VA 1\r\n1\r\nVA 1\r\n2\r\n")


# ---------------------------------------------------------------- C (compare and swap)


def test_c_compare_match_stores(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"ms k 1 C%d\r\nb\r\n" % cas, b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nb\r\n")


def test_c_compare_match_returns_new_cas(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    reply = meta(conn, b"ms k 1 C%d c\r\nb\r\n" % cas)
    new = int(reply.split()[1][1:])
    assert reply == b"HD c%d\r\n" % new and new > cas
    assert cas_of(conn, b"k") == new


def test_c_compare_twice_second_is_ex(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"ms k 1 C%d\r\nb\r\n" % cas, b"HD\r\n")
    expect(conn, b"ms k 1 C%d\r\nc\r\n" % cas, b"EX\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nb\r\n")


def test_c_compare_mismatch_is_ex(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"ms k 1 C%d\r\nb\r\n" % (cas + 1000), b"EX\r\n")
    expect(conn, b"ms k 1 C0\r\nb\r\n", b"EX\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\na\r\n")


def test_c_compare_on_missing_is_nf(conn):
    expect(conn, b"ms k 1 C5\r\nb\r\n", b"NF\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


@pytest.mark.parametrize("token", [b"Cx", b"C"])
def test_c_bad_token_and_data_swallowed(conn, token):
    expect(conn, b"ms k 1 " + token + b"\r\na\r\n", b"CLIENT_ERROR bad token in command line format\r\n")
    assert_in_sync(conn)


def test_classic_cas_value_from_gets_accepted(conn):
    expect(conn, b"set k 0 0 1\r\na\r\n", b"STORED\r\n")
    cas = gets_cas(conn, "k")
    expect(conn, b"ms k 1 C%d\r\nb\r\n" % cas, b"HD\r\n")
    assert_value(conn, "k", b"b")


# ---------------------------------------------------------------- I (invalidate)


def test_i_with_older_cas_stores_item_as_stale(conn):
    expect(conn, b"ms k 2\r\nv1\r\n", b"HD\r\n")
    old = cas_of(conn, b"k")
    expect(conn, b"ms k 2\r\nv2\r\n", b"HD\r\n")
    reply = meta(conn, b"ms k 2 I C%d c\r\nv0\r\n" % old)
    assert reply.startswith(b"HD c"), reply
    new = int(reply.split()[1][1:])
    expect(conn, b"mg k c v\r\n", b"VA 2 c%d X W\r\nv0\r\n" % new)
    expect(conn, b"mg k c v\r\n", b"VA 2 c%d Z X\r\nv0\r\n" % new)


def test_i_with_older_cas_keeps_ttl_stale_mark_and_sent_token(conn):
    """memcached replaces the value but keeps the item's TTL, its stale mark
    and a recache token already handed out: the next mg gets Z, not W."""
    expect(conn, b"ms k 2 T100\r\nv1\r\n", b"HD\r\n")
    old = cas_of(conn, b"k")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 2 X W\r\nv1\r\n")
    expect(conn, b"ms k 2 I C%d T500\r\nv0\r\n" % old, b"HD\r\n")
    reply = meta(conn, b"mg k v t\r\n")
    ttl = int(reply.split()[2][1:])
    assert 98 <= ttl <= 100, reply
    assert reply == b"VA 2 t%d Z X\r\nv0\r\n" % ttl, reply


def test_i_with_older_cas_keeps_the_ttl_of_a_fresh_item(conn):
    expect(conn, b"ms k 2\r\nv1\r\n", b"HD\r\n")
    old = cas_of(conn, b"k")
    expect(conn, b"ms k 2 T100\r\nv2\r\n", b"HD\r\n")
    expect(conn, b"ms k 2 I C%d\r\nv0\r\n" % old, b"HD\r\n")
    reply = meta(conn, b"mg k v t\r\n")
    ttl = int(reply.split()[2][1:])
    assert 98 <= ttl <= 100, reply
    assert reply == b"VA 2 t%d X W\r\nv0\r\n" % ttl, reply


def test_i_with_newer_cas_is_ex(conn):
    expect(conn, b"ms k 2\r\nv1\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"ms k 2 I C%d\r\nv9\r\n" % (cas + 1000), b"EX\r\n")
    expect(conn, b"mg k v\r\n", b"VA 2\r\nv1\r\n")


def test_i_with_equal_cas_stores_fresh_item(conn):
    expect(conn, b"ms k 2\r\nv1\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"ms k 2 I C%d\r\nv2\r\n" % cas, b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 2\r\nv2\r\n")


def test_i_without_c_is_plain_set(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 I\r\nb\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nb\r\n")


def test_i_on_missing_is_nf(conn):
    expect(conn, b"ms k 1 I C5\r\nb\r\n", b"NF\r\n")


def test_plain_set_over_stale_item_is_fresh(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"HD X W\r\n")
    expect(conn, b"ms k 1\r\nb\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nb\r\n")


def test_set_with_cas_of_stale_item_makes_it_fresh(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    cas = gets_cas(conn, "k")
    expect(conn, b"mg k c\r\n", b"HD c%d X W\r\n" % cas)
    expect(conn, b"ms k 1 C%d\r\nb\r\n" % cas, b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nb\r\n")


# ---------------------------------------------------------------- M modes


def test_mode_e_add_on_missing_stores(conn):
    expect(conn, b"ms k 1 ME F3\r\na\r\n", b"HD\r\n")
    expect(conn, b"mg k v f\r\n", b"VA 1 f3\r\na\r\n")


def test_mode_e_add_on_existing_is_ns(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 ME\r\nb\r\n", b"NS\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\na\r\n")


def test_mode_e_ignores_cas(conn):
    expect(conn, b"ms k 1 C5 ME\r\nb\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 C1 ME\r\nz\r\n", b"NS\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nb\r\n")


def test_mode_r_replace_on_missing_is_ns(conn):
    expect(conn, b"ms k 1 MR\r\na\r\n", b"NS\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_mode_r_replace_on_existing(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 MR F3\r\nr\r\n", b"HD\r\n")
    expect(conn, b"mg k v f\r\n", b"VA 1 f3\r\nr\r\n")


def test_mode_r_with_cas(conn):
    expect(conn, b"ms k 1 C5 MR\r\na\r\n", b"NF\r\n")
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 C1 MR\r\nz\r\n", b"EX\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"ms k 1 C%d MR\r\nz\r\n" % cas, b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nz\r\n")


def test_mode_a_append(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 2 MA\r\nbc\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 3\r\nabc\r\n")


def test_mode_p_prepend(conn):
    expect(conn, b"ms k 1\r\nc\r\n", b"HD\r\n")
    expect(conn, b"ms k 2 MP\r\nab\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 3\r\nabc\r\n")


@pytest.mark.parametrize("mode", [b"MA", b"MP"])
def test_mode_append_prepend_on_missing_is_ns(conn, mode):
    expect(conn, b"ms k 1 " + mode + b"\r\nx\r\n", b"NS\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_mode_append_prepend_keep_flags_and_ttl(conn):
    expect(conn, b"ms k 1 F3 T100\r\nb\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 MA F9 T5\r\nc\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 MP F7 T0\r\na\r\n", b"HD\r\n")
    assert meta(conn, b"mg k v f t\r\n") in ticks(b"VA 3 f3 t%d\r\nabc\r\n", 100)


def test_mode_append_with_cas(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 C1 MA\r\nz\r\n", b"EX\r\n")
    expect(conn, b"ms k 1 C1 MP\r\nz\r\n", b"EX\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"ms k 1 C%d MA\r\nz\r\n" % cas, b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 2\r\naz\r\n")
    assert cas_of(conn, b"k") > cas


def test_mode_append_on_missing_with_cas_is_ns(conn):
    expect(conn, b"ms k 1 C5 MA\r\nb\r\n", b"NS\r\n")


def test_mode_s_set(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 MS\r\ns\r\n", b"HD\r\n")
    expect(conn, b"ms n 1 MS\r\ns\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\nmg n v\r\n", b"VA 1\r\ns\r\nVA 1\r\ns\r\n")


@pytest.mark.parametrize("mode", [b"MX", b"Ms", b"Me", b"Ma", b"M1"])
def test_invalid_mode_is_error_and_data_swallowed(conn, mode):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 " + mode + b"\r\nx\r\n", b"CLIENT_ERROR invalid mode for ms M token\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\na\r\n")


@pytest.mark.parametrize("mode", [b"M", b"MEE"])
def test_mode_token_of_wrong_length(conn, mode):
    expect(conn, b"ms k 1 " + mode + b"\r\nx\r\n", b"CLIENT_ERROR incorrect length for M token\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- other flags / errors


def test_flags_of_other_commands_are_ignored(conn):
    # ('s' is left out: newer memcached returns the stored size for it.)
    expect(conn, b"ms k 1 v t f h l u N30 R30 D5 J5\r\na\r\n", b"HD\r\n")
    expect(conn, b"mg k v t\r\n", b"VA 1 t-1\r\na\r\n")


def test_unknown_flag_is_error_and_data_swallowed(conn):
    expect(conn, b"ms k 1 z\r\nx\r\n", b"CLIENT_ERROR invalid flag\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


def test_duplicate_flag_is_error_and_data_swallowed(conn):
    expect(conn, b"ms k 1 F1 F2\r\nx\r\n", b"CLIENT_ERROR duplicate flag\r\n")
    assert_missing(conn, "k")
    assert_in_sync(conn)


# ---------------------------------------------------------------- newer memcached (strata)


@pytest.mark.strata_only
def test_e_sets_cas_of_stored_item(conn):
    # ms E(token) is newer than 1.6.18 (invalid flag there); current protocol.txt:
    # "use token as new CAS value".
    expect(conn, b"ms k 2 E12345 c\r\nhi\r\n", b"HD c12345\r\n")
    expect(conn, b"mg k c v\r\n", b"VA 2 c12345\r\nhi\r\n")
    expect(conn, b"ms k 2 C12345 E777 c\r\nho\r\n", b"HD c777\r\n")


@pytest.mark.strata_only
def test_writes_after_an_e_beyond_the_counter_are_stored(conn):
    # A unique given with E may lie beyond any strata hands out. Each write
    # after it used to draw a new one above it, fail to, and draw again:
    # the first set of the same length answered SERVER_ERROR (cb5bc8c).
    expect(conn, b"ms k 5 E999999999999999\r\naaaaa\r\n", b"HD\r\n")
    for v in [b"bbbbb", b"ccccc", b"dddddd", b"eeeeee"]:
        expect(conn, b"ms k %d\r\n%s\r\n" % (len(v), v), b"HD\r\n")
    expect(conn, b"ma n N0 J5\r\n", b"HD\r\n")
    expect(conn, b"ms n 2 E999999999999999\r\n10\r\n", b"HD\r\n")
    expect(conn, b"incr n 1\r\n", b"11\r\n")
    expect(conn, b"append n 0 0 1\r\n0\r\n", b"STORED\r\n")
    expect(conn, b"mg k v\r\n", b"VA 6\r\neeeeee\r\n")
    expect(conn, b"mg n v\r\n", b"VA 3\r\n110\r\n")


@pytest.mark.strata_only
def test_s_returns_stored_size(conn):
    # Newer memcached: "s: return the size of the stored item on success (ie;
    # new size on append)". 1.6.18 accepts s but returns nothing.
    expect(conn, b"ms k 2 s\r\nhi\r\n", b"HD s2\r\n")
    expect(conn, b"ms k 3 MA s\r\nabc\r\n", b"HD s5\r\n")
    expect(conn, b"ms k 1 MP s\r\nz\r\n", b"HD s6\r\n")


@pytest.mark.strata_only
@pytest.mark.parametrize("mode, value", [(b"MA", b"hi"), (b"MP", b"hi")])
def test_append_mode_n_autovivifies_miss(conn, mode, value):
    # Newer memcached: N(token) in append/prepend mode creates the item on a
    # miss, with the TTL from N (1.6.18 answers NS).
    expect(conn, b"ms k 2 %s N30\r\n%s\r\n" % (mode, value), b"HD\r\n")
    assert meta(conn, b"mg k v t\r\n") in ticks(b"VA 2 t%d\r\nhi\r\n", 30)


@pytest.mark.strata_only
def test_append_mode_n_on_hit_appends_and_keeps_ttl(conn):
    expect(conn, b"ms k 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"ms k 1 MA N30\r\nb\r\n", b"HD\r\n")
    expect(conn, b"mg k v t\r\n", b"VA 2 t-1\r\nab\r\n")
