"""Meta delete (md): HD/NF/EX, b C I k O q T, stale marking; E and x are strata_only."""

import pytest

from harness import Server
from wirelib import (
    advance_clock,
    assert_in_sync,
    assert_missing,
    assert_value,
    cas_of,
    expect,
    get,
    gets_cas,
    meta,
)


def ticks(template, n):
    """template % n, or one clock tick later (n - 1)."""
    return (template % n, template % (n - 1))


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


# ---------------------------------------------------------------- HD / NF


def test_md_hit_deletes(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md k\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")
    assert_missing(conn, "k")


def test_md_miss_is_nf(conn):
    expect(conn, b"md k\r\n", b"NF\r\n")


def test_md_twice_second_is_nf(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k\r\nmd k\r\n", b"HD\r\nNF\r\n")


def test_md_of_classic_item_and_classic_delete_after(conn):
    expect(conn, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n")
    expect(conn, b"md k\r\n", b"HD\r\n")
    expect(conn, b"delete k\r\n", b"NOT_FOUND\r\n")


def test_md_on_expired_item_is_nf(conn):
    expect(conn, b"ms k 1 T-1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k\r\n", b"NF\r\n")


# ---------------------------------------------------------------- k / O / b


def test_k_and_o_on_hit(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k k O2\r\n", b"HD kk O2\r\n")


def test_k_and_o_on_miss_in_request_order(conn):
    expect(conn, b"md miss k O1\r\n", b"NF kmiss O1\r\n")
    expect(conn, b"md miss O1 k\r\n", b"NF O1 kmiss\r\n")


def test_o_too_long_is_error_and_item_kept(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k O" + b"o" * 32 + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nx\r\n")


def test_b_base64_key(conn):
    expect(conn, b"ms AAEC 1 b\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md AAEC b k\r\n", b"HD kAAEC b\r\n")
    expect(conn, b"mg AAEC b v\r\n", b"EN\r\n")


def test_b_decoded_key_deletes_plain_item(conn):
    expect(conn, b"set foobar 0 0 1\r\nx\r\n", b"STORED\r\n")
    expect(conn, b"md Zm9vYmFy b\r\n", b"HD\r\n")
    assert_missing(conn, "foobar")


def test_b_miss_returns_base64_key(conn):
    expect(conn, b"md bWlzcw== b k\r\n", b"NF kbWlzcw== b\r\n")


def test_b_invalid_base64(conn):
    # md reports every flag parse error this way in 1.6.18.
    expect(conn, b"md !!!! b\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- q


def test_q_suppresses_hd(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k q\r\nmn\r\n", b"MN\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_q_suppresses_hd_with_k_and_o(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k q k O1\r\nmn\r\n", b"MN\r\n")


def test_q_does_not_suppress_nf(conn):
    expect(conn, b"md miss q\r\nmn\r\n", b"NF\r\nMN\r\n")


def test_q_does_not_suppress_ex(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"md k C%d q\r\nmn\r\n" % (cas + 5), b"EX\r\nMN\r\n")


def test_q_pipeline_then_classic_delete(conn):
    expect(conn, b"set b 0 0 1\r\n1\r\n", b"STORED\r\n")
    expect(conn, b"md b q\r\ndelete b\r\n", b"NOT_FOUND\r\n")


# ---------------------------------------------------------------- C


def test_c_match_deletes(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"md k C%d\r\n" % cas, b"HD\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_c_mismatch_is_ex_and_item_kept(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"md k C%d\r\n" % (cas + 5), b"EX\r\n")
    expect(conn, b"md k C0 k O3\r\n", b"EX kk O3\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nx\r\n")


def test_c_from_classic_gets(conn):
    expect(conn, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n")
    expect(conn, b"md k C%d\r\n" % gets_cas(conn, "k"), b"HD\r\n")


def test_c_on_miss_is_nf(conn):
    expect(conn, b"md k C5\r\n", b"NF\r\n")


@pytest.mark.parametrize("token", [b"Cx", b"C"])
def test_c_bad_token(conn, token):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k " + token + b"\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(conn, b"mg k\r\n", b"HD\r\n")


# ---------------------------------------------------------------- I / T


def test_i_marks_stale_and_keeps_value(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 2 X W\r\nhi\r\n")
    expect(conn, b"mg k v\r\n", b"VA 2 Z X\r\nhi\r\n")


def test_i_bumps_cas(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    before = cas_of(conn, b"k")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    after = gets_cas(conn, "k")
    assert after > before
    expect(conn, b"mg k c\r\n", b"HD c%d X W\r\n" % after)


def test_i_stale_item_still_served_by_classic_get(conn):
    expect(conn, b"set k 0 0 2\r\nhi\r\n", b"STORED\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    assert_value(conn, "k", b"hi")
    expect(conn, b"mg k v\r\n", b"VA 2 X W\r\nhi\r\n")


def test_i_again_resets_win_token(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"HD X W\r\n")
    expect(conn, b"mg k\r\n", b"HD Z X\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"HD X W\r\n")


def test_i_with_k_and_o(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k I k O3\r\n", b"HD kk O3\r\n")


def test_i_with_q_is_silent(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k I q\r\nmn\r\n", b"MN\r\n")
    expect(conn, b"mg k\r\n", b"HD X W\r\n")


def test_i_on_miss_is_nf(conn):
    expect(conn, b"md k I\r\n", b"NF\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_i_with_matching_cas(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"md k I C%d\r\n" % cas, b"HD\r\n")
    expect(conn, b"mg k\r\n", b"HD X W\r\n")


def test_i_with_mismatching_cas_is_ex_and_not_stale(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"md k I C%d\r\n" % (cas + 5), b"EX\r\n")
    expect(conn, b"mg k c\r\n", b"HD c%d\r\n" % cas)


def test_md_deletes_stale_item(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"md k\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_i_with_t_updates_ttl(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md k I T30\r\n", b"HD\r\n")
    assert meta(conn, b"mg k t v\r\n") in ticks(b"VA 2 t%d X W\r\nhi\r\n", 30)


def test_i_without_t_keeps_ttl(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"mg k t\r\n", b"HD t-1 X W\r\n")


def test_t_without_i_just_deletes(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md k T30\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


@pytest.mark.parametrize("token", [b"Tx", b"T"])
def test_t_bad_token(conn, token):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k I " + token + b"\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(conn, b"mg k\r\n", b"HD\r\n")


# ---------------------------------------------------------------- ignored / bad flags


def test_flags_of_other_commands_are_ignored(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k v s f h l u t c\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_n_r_d_j_m_f_flags_ignored_on_miss(conn):
    expect(conn, b"md k N30 R30 D1 J1 MI F3\r\n", b"NF\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_unknown_flag(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k z\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(conn, b"mg k\r\n", b"HD\r\n")


def test_duplicate_flag(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k q q\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(conn, b"mg k\r\n", b"HD\r\n")


def test_missing_key(conn):
    expect(conn, b"md\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- newer memcached (strata)


@pytest.mark.strata_only
def test_x_removes_value_but_keeps_item(conn):
    # md x is newer than 1.6.18 (invalid flag there). Current memcached replaces
    # the item with an empty-value item.
    expect(conn, b"ms k 5\r\nhello\r\n", b"HD\r\n")
    expect(conn, b"md k x\r\n", b"HD\r\n")
    expect(conn, b"mg k v s\r\n", b"VA 0 s0\r\n\r\n")
    assert get(conn, "k") == b"VALUE k 0 0\r\n\r\nEND\r\n"


@pytest.mark.strata_only
def test_x_resets_client_flags(conn):
    # The tombstone is allocated with the request's (absent => 0) client flags.
    expect(conn, b"ms k 5 F9\r\nhello\r\n", b"HD\r\n")
    expect(conn, b"md k x\r\n", b"HD\r\n")
    expect(conn, b"mg k f v\r\n", b"VA 0 f0\r\n\r\n")


@pytest.mark.strata_only
def test_x_on_miss_is_nf(conn):
    expect(conn, b"md k x\r\n", b"NF\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


@pytest.mark.strata_only
def test_x_with_i_leaves_stale_tombstone(conn):
    expect(conn, b"ms k 5\r\nhello\r\n", b"HD\r\n")
    expect(conn, b"md k x I\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 0 X W\r\n\r\n")


@pytest.mark.strata_only
def test_x_with_q_and_cas_mismatch(conn):
    expect(conn, b"ms k 5\r\nhello\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"md k x C%d\r\n" % (cas + 5), b"EX\r\n")
    expect(conn, b"md k x q\r\nmn\r\n", b"MN\r\n")
    expect(conn, b"mg k v\r\n", b"VA 0\r\n\r\n")


@pytest.mark.strata_only
def test_e_with_i_sets_new_cas(conn):
    # md E(token) is newer than 1.6.18: the CAS given to the invalidated item.
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k I E555\r\n", b"HD\r\n")
    expect(conn, b"mg k c\r\n", b"HD c555 X W\r\n")


@pytest.mark.strata_only
def test_e_without_i_just_deletes(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k E555\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


# ---------------------------------------------------------------- time passing (strata debug clock)


@pytest.mark.strata_only
def test_i_with_t_stale_item_expires(cconn):
    expect(cconn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(cconn, b"md k I T30\r\n", b"HD\r\n")
    advance_clock(cconn, 29)
    expect(cconn, b"mg k v\r\n", b"VA 2 X W\r\nhi\r\n")
    advance_clock(cconn, 2)
    expect(cconn, b"mg k v\r\n", b"EN\r\n")
