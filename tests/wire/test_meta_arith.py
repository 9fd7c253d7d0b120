"""Meta arithmetic (ma): modes, D, J, N, C, T, q, t, c, v, k, O, b; HD/NF/EX; errors; E is strata_only."""

import pytest

from harness import Server
from wirelib import advance_clock, assert_in_sync, cas_of, expect, get, gets_cas, meta


def ticks(template, n):
    """template % n, or one clock tick later (n - 1)."""
    return (template % n, template % (n - 1))


MAX = 18446744073709551615


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


@pytest.fixture
def five(conn):
    expect(conn, b"ms n 1\r\n5\r\n", b"HD\r\n")
    return conn


# ---------------------------------------------------------------- HD / NF / VA


def test_miss_is_nf(conn):
    expect(conn, b"ma n\r\n", b"NF\r\n")
    expect(conn, b"ma n v\r\n", b"NF\r\n")


def test_default_increments_by_one(five):
    expect(five, b"ma n\r\n", b"HD\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n6\r\n")


def test_v_returns_new_value(five):
    expect(five, b"ma n v\r\n", b"VA 1\r\n6\r\n")
    expect(five, b"ma n v\r\n", b"VA 1\r\n7\r\n")


def test_result_visible_to_classic_get(five):
    expect(five, b"ma n D10\r\n", b"HD\r\n")
    assert get(five, "n") == b"VALUE n 0 2\r\n15\r\nEND\r\n"


def test_keeps_client_flags(conn):
    expect(conn, b"ms n 1 F9\r\n5\r\n", b"HD\r\n")
    expect(conn, b"ma n\r\n", b"HD\r\n")
    expect(conn, b"mg n f v\r\n", b"VA 1 f9\r\n6\r\n")


# ---------------------------------------------------------------- modes


@pytest.mark.parametrize("mode", [b"MI", b"M+"])
def test_increment_modes(five, mode):
    expect(five, b"ma n " + mode + b" v\r\n", b"VA 1\r\n6\r\n")


@pytest.mark.parametrize("mode", [b"MD", b"M-"])
def test_decrement_modes(five, mode):
    expect(five, b"ma n " + mode + b" v\r\n", b"VA 1\r\n4\r\n")


@pytest.mark.parametrize("mode", [b"Mx", b"Md", b"Mi", b"M*"])
def test_invalid_mode(five, mode):
    expect(five, b"ma n " + mode + b" v\r\n", b"CLIENT_ERROR invalid mode for ma M token\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n5\r\n")


@pytest.mark.parametrize("mode", [b"M", b"MII"])
def test_mode_token_of_wrong_length(five, mode):
    expect(five, b"ma n " + mode + b" v\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    assert_in_sync(five)


# ---------------------------------------------------------------- D


def test_d_delta_incr(five):
    expect(five, b"ma n D10 v\r\n", b"VA 2\r\n15\r\n")


def test_d_delta_decr(five):
    expect(five, b"ma n MD D3 v\r\n", b"VA 1\r\n2\r\n")


def test_d_zero(five):
    expect(five, b"ma n D0 v\r\n", b"VA 1\r\n5\r\n")
    expect(five, b"ma n MD D0 v\r\n", b"VA 1\r\n5\r\n")


def test_d_zero_still_changes_cas(five):
    cas = cas_of(five, b"n")
    expect(five, b"ma n D0\r\n", b"HD\r\n")
    assert cas_of(five, b"n") > cas


def test_d_max_u64(conn):
    expect(conn, b"ms n 1\r\n0\r\n", b"HD\r\n")
    expect(conn, b"ma n v D%d\r\n" % MAX, b"VA 20\r\n%d\r\n" % MAX)


@pytest.mark.parametrize("token", [b"Dabc", b"D-1", b"D", b"D18446744073709551616"])
def test_d_bad_token(five, token):
    expect(five, b"ma n " + token + b" v\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n5\r\n")


def test_decr_floors_at_zero(five):
    expect(five, b"ma n MD D1000 v\r\n", b"VA 1\r\n0\r\n")
    expect(five, b"ma n MD v\r\n", b"VA 1\r\n0\r\n")


def test_decr_that_shortens_number_pads_stored_value(conn):
    # Like classic decr, memcached rewrites in place: same length, space padded.
    expect(conn, b"ms n 3\r\n100\r\n", b"HD\r\n")
    expect(conn, b"ma n MD v\r\n", b"VA 2\r\n99\r\n")
    expect(conn, b"mg n v\r\n", b"VA 3\r\n99 \r\n")


def test_incr_grows_number(conn):
    expect(conn, b"ms n 2\r\n99\r\n", b"HD\r\n")
    expect(conn, b"ma n v\r\n", b"VA 3\r\n100\r\n")
    expect(conn, b"mg n v\r\n", b"VA 3\r\n100\r\n")


def test_incr_wraps_at_2_64(conn):
    expect(conn, b"ms n 20\r\n%d\r\n" % MAX, b"HD\r\n")
    expect(conn, b"ma n v\r\n", b"VA 1\r\n0\r\n")
    expect(conn, b"mg n v\r\n", b"VA 20\r\n0" + b" " * 19 + b"\r\n")
    expect(conn, b"ma n D2 v\r\n", b"VA 1\r\n2\r\n")


def test_incr_wraps_with_delta(conn):
    expect(conn, b"ms n 20\r\n%d\r\n" % (MAX - 1), b"HD\r\n")
    expect(conn, b"ma n D5 v\r\n", b"VA 1\r\n3\r\n")


# ---------------------------------------------------------------- N / J


def test_n_autovivifies_with_zero(conn):
    expect(conn, b"ma n N0 v\r\n", b"VA 1\r\n0\r\n")
    expect(conn, b"ma n N0 v\r\n", b"VA 1\r\n1\r\n")


def test_n_vivified_item_visible_to_get(conn):
    expect(conn, b"ma n N0\r\n", b"HD\r\n")
    assert get(conn, "n") == b"VALUE n 0 1\r\n0\r\nEND\r\n"


def test_j_initial_value(conn):
    expect(conn, b"ma m N0 J42 v\r\n", b"VA 2\r\n42\r\n")
    expect(conn, b"ma m N0 J42 v\r\n", b"VA 2\r\n43\r\n")


def test_j_without_n_is_nf(conn):
    expect(conn, b"ma j J7 v\r\n", b"NF\r\n")


def test_j_initial_value_is_not_decremented(conn):
    expect(conn, b"ma j N0 J7 MD v\r\n", b"VA 1\r\n7\r\n")


def test_j_initial_value_ignores_delta(conn):
    expect(conn, b"ma j N0 J7 D5 v\r\n", b"VA 1\r\n7\r\n")


def test_j_max_u64(conn):
    expect(conn, b"ma j N0 J%d v\r\n" % MAX, b"VA 20\r\n%d\r\n" % MAX)


def test_n_sets_ttl(conn):
    assert meta(conn, b"ma x N50 t v\r\n") in ticks(b"VA 1 t%d\r\n0\r\n", 50)


def test_n_ignored_on_hit(five):
    expect(five, b"ma n N50 t v\r\n", b"VA 1 t-1\r\n6\r\n")


@pytest.mark.parametrize("token", [b"J-1", b"Jx"])
def test_j_bad_token(conn, token):
    expect(conn, b"ma n N0 " + token + b" v\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(conn, b"mg n\r\n", b"EN\r\n")


@pytest.mark.parametrize("token", [b"N", b"Nx"])
def test_n_bad_token(conn, token):
    expect(conn, b"ma n " + token + b" v\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(conn, b"mg n\r\n", b"EN\r\n")


# ---------------------------------------------------------------- C / c


def test_c_returns_new_cas(five):
    reply = meta(five, b"ma n c\r\n")
    cas = cas_of(five, b"n")
    assert reply == b"HD c%d\r\n" % cas


def test_c_compare_match(five):
    cas = cas_of(five, b"n")
    reply = meta(five, b"ma n C%d v c\r\n" % cas)
    new = cas_of(five, b"n")
    assert new > cas
    assert reply == b"VA 1 c%d\r\n6\r\n" % new


def test_c_compare_mismatch_is_ex(five):
    cas = cas_of(five, b"n")
    expect(five, b"ma n C%d v c\r\n" % (cas + 100), b"EX\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n5\r\n")


def test_c_compare_reused_is_ex(five):
    cas = cas_of(five, b"n")
    expect(five, b"ma n C%d v\r\n" % cas, b"VA 1\r\n6\r\n")
    expect(five, b"ma n C%d v\r\n" % cas, b"EX\r\n")


def test_c_compare_with_classic_gets(conn):
    expect(conn, b"set n 0 0 1\r\n5\r\n", b"STORED\r\n")
    expect(conn, b"ma n C%d v\r\n" % gets_cas(conn, "n"), b"VA 1\r\n6\r\n")


def test_c_compare_on_miss_is_nf(conn):
    expect(conn, b"ma n C5 k O1\r\n", b"NF kn O1\r\n")


@pytest.mark.parametrize("token", [b"Cx", b"C"])
def test_c_bad_token(five, token):
    expect(five, b"ma n " + token + b"\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n5\r\n")


# ---------------------------------------------------------------- T / t


def test_t_is_minus_one_without_expiry(five):
    expect(five, b"ma n t v\r\n", b"VA 1 t-1\r\n6\r\n")


def test_t_reports_remaining_ttl(conn):
    expect(conn, b"ms n 1 T100\r\n5\r\n", b"HD\r\n")
    assert meta(conn, b"ma n t\r\n") in ticks(b"HD t%d\r\n", 100)


def test_big_t_updates_ttl(five):
    expect(five, b"ma n T100 t v\r\n", b"VA 1 t100\r\n6\r\n")
    assert meta(five, b"mg n t\r\n") in ticks(b"HD t%d\r\n", 100)


def test_t_before_big_t_reports_old_ttl(five):
    expect(five, b"ma n t T100\r\n", b"HD t-1\r\n")
    assert meta(five, b"mg n t\r\n") in ticks(b"HD t%d\r\n", 100)


def test_big_t_zero_removes_expiry(conn):
    expect(conn, b"ms n 1 T100\r\n5\r\n", b"HD\r\n")
    expect(conn, b"ma n T0\r\n", b"HD\r\n")
    expect(conn, b"mg n t v\r\n", b"VA 1 t-1\r\n6\r\n")


def test_big_t_not_applied_on_miss(conn):
    expect(conn, b"ma n T100\r\n", b"NF\r\n")


@pytest.mark.parametrize("token", [b"Tx", b"T"])
def test_big_t_bad_token(five, token):
    expect(five, b"ma n " + token + b"\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n5\r\n")


# ---------------------------------------------------------------- q


def test_q_suppresses_hd(five):
    expect(five, b"ma n q\r\nmn\r\n", b"MN\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n6\r\n")


def test_q_suppresses_va(five):
    expect(five, b"ma n q v\r\nmn\r\n", b"MN\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n6\r\n")


def test_q_does_not_suppress_nf(conn):
    expect(conn, b"ma n q\r\nmn\r\n", b"NF\r\nMN\r\n")


def test_q_does_not_suppress_ex(five):
    expect(five, b"ma n C1 q\r\nmn\r\n", b"EX\r\nMN\r\n")


def test_q_does_not_suppress_reply_of_autovivify(conn):
    # memcached 1.6.18 only hides the reply of an update of an existing item;
    # the HD / VA of an item ma N just created is still sent.
    expect(conn, b"ma n N0 q\r\nmn\r\n", b"HD\r\nMN\r\n")
    expect(conn, b"ma m N0 q v\r\nmn\r\n", b"VA 1\r\n0\r\nMN\r\n")
    expect(conn, b"ma n N0 q v\r\nmn\r\n", b"MN\r\n")
    expect(conn, b"mg n v\r\n", b"VA 1\r\n1\r\n")


# ---------------------------------------------------------------- k / O / b


def test_k_and_o_on_hit_in_request_order(five):
    expect(five, b"ma n O1 k\r\n", b"HD O1 kn\r\n")
    expect(five, b"ma n k O2\r\n", b"HD kn O2\r\n")


def test_k_and_o_on_miss(conn):
    expect(conn, b"ma miss O1 k\r\n", b"NF O1 kmiss\r\n")


def test_all_return_flags_with_value(five):
    reply = meta(five, b"ma n k O99 c t v\r\n")
    assert reply == b"VA 1 kn O99 c%d t-1\r\n6\r\n" % cas_of(five, b"n")


def test_o_too_long(five):
    expect(five, b"ma miss O" + b"o" * 32 + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    assert_in_sync(five)


def test_b_base64_key(conn):
    expect(conn, b"ma AAEC b N0 k v\r\n", b"VA 1 kAAEC b\r\n0\r\n")
    expect(conn, b"ma AAEC b k v\r\n", b"VA 1 kAAEC b\r\n1\r\n")


def test_b_key_same_as_plain_key(conn):
    expect(conn, b"ms foo 1\r\n5\r\n", b"HD\r\n")
    expect(conn, b"ma Zm9v b v\r\n", b"VA 1\r\n6\r\n")


def test_b_miss_returns_base64_key(conn):
    expect(conn, b"ma bWlzcw== b k\r\n", b"NF kbWlzcw== b\r\n")


def test_b_invalid_base64(conn):
    expect(conn, b"ma !!!! b\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- errors


def test_non_numeric_value(conn):
    expect(conn, b"ms s 3\r\nabc\r\n", b"HD\r\n")
    expect(conn, b"ma s v\r\n", b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
    expect(conn, b"mg s v\r\n", b"VA 3\r\nabc\r\n")


def test_non_numeric_value_not_suppressed_by_q(conn):
    expect(conn, b"ms s 3\r\nabc\r\n", b"HD\r\n")
    expect(conn, b"ma s q\r\nmn\r\n",
           b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\nMN\r\n")


def test_empty_value_is_non_numeric(conn):
    expect(conn, b"ms s 0\r\n\r\n", b"HD\r\n")
    expect(conn, b"ma s\r\n", b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")


def test_flags_of_other_commands_are_ignored(five):
    expect(five, b"ma n s f h l u Pa Lb\r\n", b"HD\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n6\r\n")


def test_unknown_flag(five):
    expect(five, b"ma n z\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n5\r\n")


def test_duplicate_flag(five):
    expect(five, b"ma n v v\r\n", b"CLIENT_ERROR invalid or duplicate flag\r\n")
    expect(five, b"mg n v\r\n", b"VA 1\r\n5\r\n")


def test_missing_key(conn):
    expect(conn, b"ma\r\n", b"ERROR\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- newer memcached (strata)


@pytest.mark.strata_only
def test_e_sets_cas_on_update(five):
    # ma E(token) is newer than 1.6.18 (invalid flag there).
    expect(five, b"ma n E999 c v\r\n", b"VA 1 c999\r\n6\r\n")
    expect(five, b"mg n c\r\n", b"HD c999\r\n")


@pytest.mark.strata_only
def test_e_sets_cas_on_vivify(conn):
    expect(conn, b"ma n N0 E4242 c\r\n", b"HD c4242\r\n")
    expect(conn, b"mg n c v\r\n", b"VA 1 c4242\r\n0\r\n")


# ---------------------------------------------------------------- time passing (strata debug clock)


@pytest.mark.strata_only
def test_n_vivified_counter_expires(cconn):
    expect(cconn, b"ma n N10 J5 v\r\n", b"VA 1\r\n5\r\n")
    advance_clock(cconn, 11)
    expect(cconn, b"ma n v\r\n", b"NF\r\n")


@pytest.mark.strata_only
def test_big_t_extends_life(cconn):
    expect(cconn, b"ms n 1 T10\r\n5\r\n", b"HD\r\n")
    expect(cconn, b"ma n T100\r\n", b"HD\r\n")
    advance_clock(cconn, 50)
    expect(cconn, b"ma n v\r\n", b"VA 1\r\n7\r\n")


@pytest.mark.strata_only
def test_t_counts_down(cconn):
    expect(cconn, b"ms n 1 T100\r\n5\r\n", b"HD\r\n")
    advance_clock(cconn, 30)
    assert meta(cconn, b"ma n t\r\n") in ticks(b"HD t%d\r\n", 70)
