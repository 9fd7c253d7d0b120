"""Meta get (mg): every flag, EN/HD/VA replies, q, flag order, W/X/Z, base64 keys.

memcached's clock ticks once a second, so TTL / last-access tokens accept the
value or its neighbour one second on.  Tests that need time to pass use
strata's debug clock and are strata_only.
"""

import pytest

from harness import Server
from wirelib import advance_clock, assert_in_sync, cas_of, expect, get, gets_cas, meta, value_reply


def ticks(template, n, later=-1):
    """template % n, or the value one clock tick later (n - 1 for a TTL, n + 1 for an age)."""
    return (template % n, template % (n + later))


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


# ---------------------------------------------------------------- EN / HD / VA


def test_hit_without_flags_is_hd(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"HD\r\n")


def test_miss_is_en(conn):
    expect(conn, b"mg nokey\r\n", b"EN\r\n")
    expect(conn, b"mg nokey v\r\n", b"EN\r\n")


def test_v_returns_value_block(conn):
    expect(conn, b"ms k 5\r\nhello\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 5\r\nhello\r\n")


def test_v_zero_length_value(conn):
    expect(conn, b"ms k 0\r\n\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 0\r\n\r\n")


def test_v_value_with_crlf_inside(conn):
    value = b"a\r\nb\r\nEN\r\n"
    expect(conn, b"ms k %d\r\n%s\r\n" % (len(value), value), b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA %d\r\n%s\r\n" % (len(value), value))


def test_v_binary_value(conn):
    value = bytes(range(256))
    expect(conn, b"ms k 256\r\n" + value + b"\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 256\r\n" + value + b"\r\n")


def test_key_with_leading_slash_path(conn):
    expect(conn, b"ms /path/foo 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg /path/foo v\r\n", b"VA 2\r\nhi\r\n")


def test_bare_newline_and_extra_spaces(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg k\n", b"HD\r\n")
    expect(conn, b"mg  k  v  s \r\n", b"VA 2 s2\r\nhi\r\n")


# ---------------------------------------------------------------- returned tokens


def test_s_returns_size(conn):
    expect(conn, b"ms k 5\r\nhello\r\n", b"HD\r\n")
    expect(conn, b"mg k s\r\n", b"HD s5\r\n")
    expect(conn, b"mg k s v\r\n", b"VA 5 s5\r\nhello\r\n")


def test_f_returns_client_flags(conn):
    expect(conn, b"ms k 1 F7\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k f\r\n", b"HD f7\r\n")


def test_f_defaults_to_zero(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k f\r\n", b"HD f0\r\n")


def test_f_max_32_bit(conn):
    expect(conn, b"set k 4294967295 0 1\r\nx\r\n", b"STORED\r\n")
    expect(conn, b"mg k f v\r\n", b"VA 1 f4294967295\r\nx\r\n")


def test_c_returns_same_cas_as_gets(conn):
    expect(conn, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n")
    cas = gets_cas(conn, "k")
    expect(conn, b"mg k c\r\n", b"HD c%d\r\n" % cas)


def test_c_changes_after_store(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    before = cas_of(conn, b"k")
    expect(conn, b"ms k 1\r\ny\r\n", b"HD\r\n")
    assert cas_of(conn, b"k") > before


def test_c_is_stable_across_reads(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    assert cas_of(conn, b"k") == cas_of(conn, b"k")


def test_k_returns_key(conn):
    expect(conn, b"ms mykey 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg mykey k\r\n", b"HD kmykey\r\n")
    expect(conn, b"mg mykey k v\r\n", b"VA 1 kmykey\r\nx\r\n")


def test_k_and_o_echoed_on_miss(conn):
    expect(conn, b"mg miss k O9\r\n", b"EN kmiss O9\r\n")
    expect(conn, b"mg miss O9 k\r\n", b"EN O9 kmiss\r\n")


def test_o_opaque_echoed_on_hit(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k Oopaque\r\n", b"HD Oopaque\r\n")
    expect(conn, b"mg k O123 v\r\n", b"VA 1 O123\r\nx\r\n")


def test_o_empty_opaque_is_echoed(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k O\r\n", b"HD O\r\n")


def test_o_opaque_of_31_characters_is_accepted(conn):
    # The limit (32) counts the token including its leading 'O'.
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    opaque = b"O" + b"o" * 31
    expect(conn, b"mg k " + opaque + b"\r\n", b"HD " + opaque + b"\r\n")


def test_o_opaque_of_32_characters_is_too_long(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    opaque = b"O" + b"o" * 32
    expect(conn, b"mg k " + opaque + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    expect(conn, b"mg miss " + opaque + b"\r\n", b"CLIENT_ERROR opaque token too long\r\n")
    assert_in_sync(conn)


def test_o_pipelined_opaques_match_replies(conn):
    expect(conn, b"ms a 1\r\n1\r\n", b"HD\r\n")
    expect(conn, b"ms c 1\r\n3\r\n", b"HD\r\n")
    expect(
        conn,
        b"mg a O1 v\r\nmg b O2 v\r\nmg c O3 v\r\n",
        b"VA 1 O1\r\n1\r\nEN O2\r\nVA 1 O3\r\n3\r\n",
    )


def test_t_is_minus_one_without_expiry(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k t\r\n", b"HD t-1\r\n")


def test_t_returns_remaining_ttl(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    assert meta(conn, b"mg k t\r\n") in ticks(b"HD t%d\r\n", 100)


def test_l_is_zero_right_after_store(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    assert meta(conn, b"mg k l\r\n") in ticks(b"HD l%d\r\n", 0, later=1)


def test_h_is_zero_then_one(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k h\r\n", b"HD h0\r\n")
    expect(conn, b"mg k h\r\n", b"HD h1\r\n")


def test_h_reports_state_before_this_fetch_with_value(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k h v\r\n", b"VA 1 h0\r\nx\r\n")
    expect(conn, b"mg k v h\r\n", b"VA 1 h1\r\nx\r\n")


def test_h_set_by_classic_get(conn):
    expect(conn, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n")
    expect(conn, b"get k\r\n", b"VALUE k 0 1\r\nx\r\nEND\r\n")
    expect(conn, b"mg k h\r\n", b"HD h1\r\n")


def test_h_stays_zero_over_overwrites_never_read(conn):
    # strata counts an overwrite as an access for eviction, never as a read.
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"set k 0 0 1\r\ny\r\n", b"STORED\r\n")
    expect(conn, b"append k 0 0 1\r\nz\r\n", b"STORED\r\n")
    expect(conn, b"mg k h\r\n", b"HD h0\r\n")
    expect(conn, b"mg k h\r\n", b"HD h1\r\n")


def test_h_reset_by_new_store(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nx\r\n")
    expect(conn, b"ms k 1\r\ny\r\n", b"HD\r\n")
    expect(conn, b"mg k h\r\n", b"HD h0\r\n")


def test_u_does_not_mark_item_fetched(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k u h\r\n", b"HD h0\r\n")
    expect(conn, b"mg k u h v\r\n", b"VA 1 h0\r\nx\r\n")
    expect(conn, b"mg k h\r\n", b"HD h0\r\n")
    expect(conn, b"mg k u h\r\n", b"HD h1\r\n")


def test_all_flags_in_request_order(conn):
    expect(conn, b"ms k 2 F3\r\nhi\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    got = meta(conn, b"mg k s v f t k O1 h c\r\n")
    assert got == b"VA 2 s2 f3 t-1 kk O1 h0 c%d\r\nhi\r\n" % cas


def test_all_flags_in_other_order(conn):
    expect(conn, b"ms k 2 F3\r\nhi\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    got = meta(conn, b"mg k c h t O1 k f v s\r\n")
    assert got == b"VA 2 c%d h0 t-1 O1 kk f3 s2\r\nhi\r\n" % cas


def test_non_token_flag_letters_after_first_are_ignored(conn):
    # Only the first character of a flag counts: "kk" is 'k', "vv" is 'v'.
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k kk\r\n", b"HD kk\r\n")
    expect(conn, b"mg k vv\r\n", b"VA 1\r\nx\r\n")


def test_flags_of_other_meta_commands_are_ignored(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k C5 I F5 MS D1 J1 v\r\n", b"VA 1\r\nx\r\n")


# ---------------------------------------------------------------- q


def test_q_suppresses_en_in_pipeline(conn):
    expect(conn, b"ms a 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"ms b 2\r\nyo\r\n", b"HD\r\n")
    expect(
        conn,
        b"mg a q v\r\nmg zz q v\r\nmg b q v k\r\nmg yy q k O1\r\nmn\r\n",
        b"VA 2\r\nhi\r\nVA 2 kb\r\nyo\r\nMN\r\n",
    )


def test_q_only_affects_its_own_command(conn):
    expect(conn, b"mg zz v q O1\r\nmg zz v O2\r\nmn\r\n", b"EN O2\r\nMN\r\n")


def test_q_does_not_suppress_hd_on_hit(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k q\r\n", b"HD\r\n")
    expect(conn, b"mg k q s\r\n", b"HD s1\r\n")


def test_q_errors_are_still_returned(conn):
    expect(conn, b"mg k q z\r\n", b"CLIENT_ERROR invalid flag\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- b (base64 keys)


def test_b_base64_key_in_request_and_returned_key(conn):
    expect(conn, b"ms Zm9vYmFy 2 b\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg Zm9vYmFy b k v s\r\n", b"VA 2 kZm9vYmFy b s2\r\nhi\r\n")


def test_b_binary_key_bytes(conn):
    expect(conn, b"ms AAEC 1 b\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg AAEC b k v\r\n", b"VA 1 kAAEC b\r\nx\r\n")
    expect(conn, b"mg AAEC k v b\r\n", b"VA 1 kAAEC b\r\nx\r\n")


def test_b_key_is_stored_under_decoded_name(conn):
    expect(conn, b"ms Zm9vYmFy 2 b\r\nhi\r\n", b"HD\r\n")
    assert get(conn, "foobar") == value_reply("foobar", b"hi") + b"END\r\n"


def test_b_item_returns_base64_key_even_without_b(conn):
    # The binary-key mark sticks to the item: a plain-key lookup of the same
    # bytes gets its key back base64-encoded, with the 'b' marker.
    expect(conn, b"ms Zm9vYmFy 2 b\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg foobar v k\r\n", b"VA 2 kZm9vYmFy b\r\nhi\r\n")


def test_b_lookup_of_plain_item_returns_plain_key(conn):
    # ... and an item stored with a plain key is returned with its plain key.
    expect(conn, b"set foo 0 0 2\r\nhi\r\n", b"STORED\r\n")
    expect(conn, b"mg Zm9v b k v\r\n", b"VA 2 kfoo\r\nhi\r\n")


def test_b_without_flag_key_is_literal(conn):
    expect(conn, b"ms Zm9vYmFy 2 b\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg Zm9vYmFy v k\r\n", b"EN kZm9vYmFy\r\n")


def test_b_miss_returns_base64_key(conn):
    expect(conn, b"mg bWlzcw== b k O5\r\n", b"EN kbWlzcw== b O5\r\n")


@pytest.mark.parametrize("key", [b"!!!!", b"Zm9vYmF", b"Zm9vYmE"])
def test_b_invalid_base64_is_client_error(conn, key):
    expect(conn, b"mg " + key + b" b v\r\n", b"CLIENT_ERROR error decoding key\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- N (vivify)


def test_n_vivifies_miss_and_wins(conn):
    assert meta(conn, b"mg k N30 s t v\r\n") in ticks(b"VA 0 s0 t%d W\r\n\r\n", 30)


def test_n_second_request_sees_z(conn):
    expect(conn, b"mg k N30 v\r\n", b"VA 0 W\r\n\r\n")
    expect(conn, b"mg k N30 v\r\n", b"VA 0 Z\r\n\r\n")
    expect(conn, b"mg k v\r\n", b"VA 0 Z\r\n\r\n")
    expect(conn, b"mg k s\r\n", b"HD s0 Z\r\n")


def test_n_without_v_is_hd_w(conn):
    expect(conn, b"mg k N30\r\n", b"HD W\r\n")
    expect(conn, b"mg k N30\r\n", b"HD Z\r\n")


def test_n_vivified_item_is_visible_to_get(conn):
    expect(conn, b"mg k N30\r\n", b"HD W\r\n")
    assert get(conn, "k") == value_reply("k", b"") + b"END\r\n"


def test_n_on_hit_does_not_win(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg k N30 v\r\n", b"VA 2\r\nhi\r\n")


def test_n_vivified_item_replaced_by_set_is_fresh(conn):
    expect(conn, b"mg k N30 v\r\n", b"VA 0 W\r\n\r\n")
    expect(conn, b"ms k 3 T60\r\nnew\r\n", b"HD\r\n")
    assert meta(conn, b"mg k N30 v t\r\n") in ticks(b"VA 3 t%d\r\nnew\r\n", 60)


def test_n_on_expired_item_vivifies(conn):
    expect(conn, b"ms k 1 T-1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k N30 v\r\n", b"VA 0 W\r\n\r\n")


def test_n_with_k_and_o(conn):
    expect(conn, b"mg k N30 k O1\r\n", b"HD kk O1 W\r\n")


@pytest.mark.parametrize("token", [b"N", b"Nabc"])
def test_n_bad_token(conn, token):
    expect(conn, b"mg k " + token + b"\r\n", b"CLIENT_ERROR bad token in command line format\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


# ---------------------------------------------------------------- R (recache)


def test_r_no_win_when_ttl_above_token(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k R30\r\n", b"HD\r\n")


def test_r_wins_when_ttl_below_token_then_z(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k R200 v\r\n", b"VA 1 W\r\nx\r\n")
    expect(conn, b"mg k R200 v\r\n", b"VA 1 Z\r\nx\r\n")
    expect(conn, b"mg k\r\n", b"HD Z\r\n")


def test_r_with_ttl_token(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    assert meta(conn, b"mg k R200 t\r\n") in ticks(b"HD t%d W\r\n", 100)


def test_r_never_wins_without_expiry(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k R200 t\r\n", b"HD t-1\r\n")


def test_r_on_miss_is_en(conn):
    expect(conn, b"mg k R30 v\r\n", b"EN\r\n")


def test_r_win_cleared_by_new_store(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k R200\r\n", b"HD W\r\n")
    expect(conn, b"ms k 1 T100\r\ny\r\n", b"HD\r\n")
    expect(conn, b"mg k R200\r\n", b"HD W\r\n")


@pytest.mark.parametrize("token", [b"R", b"Rx"])
def test_r_bad_token(conn, token):
    expect(conn, b"mg k " + token + b"\r\n", b"CLIENT_ERROR bad token in command line format\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- T (touch)


def test_t_flag_updates_ttl(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k T30 t\r\n", b"HD t30\r\n")
    assert meta(conn, b"mg k t\r\n") in ticks(b"HD t%d\r\n", 30)


def test_t_zero_removes_expiry(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k T0 t\r\n", b"HD t-1\r\n")
    expect(conn, b"mg k t\r\n", b"HD t-1\r\n")


def test_t_with_v_is_get_and_touch(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg k T30 v t\r\n", b"VA 2 t30\r\nhi\r\n")


def test_t_flag_order_matters_for_returned_ttl(conn):
    # 't' before 'T' reports the TTL before the touch.
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k t T30\r\n", b"HD t-1\r\n")
    assert meta(conn, b"mg k t\r\n") in ticks(b"HD t%d\r\n", 30)


def test_t_negative_expires_item(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k T-1\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"EN\r\n")


def test_t_on_miss_is_en(conn):
    expect(conn, b"mg k T30 v\r\n", b"EN\r\n")


@pytest.mark.parametrize("token", [b"T", b"Tx"])
def test_t_bad_token(conn, token):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k " + token + b"\r\n", b"CLIENT_ERROR bad token in command line format\r\n")
    expect(conn, b"mg k t\r\n", b"HD t-1\r\n")


# ---------------------------------------------------------------- stale: X / W / Z


def test_stale_item_returns_x_and_w_then_z(conn):
    expect(conn, b"ms k 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    cas = gets_cas(conn, "k")
    expect(conn, b"mg k c v\r\n", b"VA 2 c%d X W\r\nhi\r\n" % cas)
    expect(conn, b"mg k c v\r\n", b"VA 2 c%d Z X\r\nhi\r\n" % cas)


def test_stale_flags_come_after_requested_flags(conn):
    expect(conn, b"ms k 2 F1\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"mg k O1 s f k\r\n", b"HD O1 s2 f1 kk X W\r\n")
    expect(conn, b"mg k O1 s f k\r\n", b"HD O1 s2 f1 kk Z X\r\n")


def test_stale_item_with_n_and_r_is_z(conn):
    expect(conn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    expect(conn, b"md k I\r\n", b"HD\r\n")
    expect(conn, b"mg k\r\n", b"HD X W\r\n")
    expect(conn, b"mg k N30 R200\r\n", b"HD Z X\r\n")


# ---------------------------------------------------------------- errors


def test_unknown_flag(conn):
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(conn, b"mg k z\r\n", b"CLIENT_ERROR invalid flag\r\n")
    expect(conn, b"mg k 9\r\n", b"CLIENT_ERROR invalid flag\r\n")
    expect(conn, b"mg k v\r\n", b"VA 1\r\nx\r\n")


def test_duplicate_flag(conn):
    expect(conn, b"mg k v v\r\n", b"CLIENT_ERROR duplicate flag\r\n")
    expect(conn, b"mg k O1 O2\r\n", b"CLIENT_ERROR duplicate flag\r\n")
    assert_in_sync(conn)


def test_missing_key_is_error(conn):
    expect(conn, b"mg\r\n", b"ERROR\r\n")
    expect(conn, b"mg \r\n", b"ERROR\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- newer memcached (strata)


@pytest.mark.strata_only
def test_e_sets_cas_of_vivified_item(conn):
    # mg E(token) is newer than memcached 1.6.18 (which answers "invalid flag");
    # per current protocol.txt/proto_parser.c it sets the CAS of an item mg creates.
    expect(conn, b"mg k N30 E777 c\r\n", b"HD c777 W\r\n")
    expect(conn, b"mg k c\r\n", b"HD c777 Z\r\n")


@pytest.mark.strata_only
def test_e_does_not_change_cas_of_existing_item(conn):
    # Newer memcached: E only applies when mg modifies (creates) the item.
    expect(conn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    cas = cas_of(conn, b"k")
    expect(conn, b"mg k E5 c\r\n", b"HD c%d\r\n" % cas)


@pytest.mark.strata_only
def test_e_bad_token(conn):
    expect(conn, b"mg k Ex\r\n", b"CLIENT_ERROR bad token in command line format\r\n")
    assert_in_sync(conn)


# ---------------------------------------------------------------- time passing (strata debug clock)


@pytest.mark.strata_only
def test_t_token_counts_down(cconn):
    expect(cconn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    advance_clock(cconn, 40)
    assert meta(cconn, b"mg k t\r\n") in ticks(b"HD t%d\r\n", 60)


@pytest.mark.strata_only
def test_l_reports_seconds_since_last_access(cconn):
    expect(cconn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    advance_clock(cconn, 10)
    assert meta(cconn, b"mg k l\r\n") in ticks(b"HD l%d\r\n", 10, later=1)


@pytest.mark.strata_only
def test_l_with_u_reports_age_without_bumping(cconn):
    expect(cconn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    advance_clock(cconn, 10)
    assert meta(cconn, b"mg k u l\r\n") in ticks(b"HD l%d\r\n", 10, later=1)
    assert meta(cconn, b"mg k u l h\r\n") in (b"HD l10 h0\r\n", b"HD l11 h0\r\n")


@pytest.mark.strata_only
def test_n_vivified_item_expires_after_its_ttl(cconn):
    expect(cconn, b"mg k N30\r\n", b"HD W\r\n")
    advance_clock(cconn, 31)
    expect(cconn, b"mg k\r\n", b"EN\r\n")
    expect(cconn, b"mg k N30\r\n", b"HD W\r\n")


@pytest.mark.strata_only
def test_r_wins_once_ttl_drops_below_token(cconn):
    expect(cconn, b"ms k 1 T100\r\nx\r\n", b"HD\r\n")
    expect(cconn, b"mg k R30\r\n", b"HD\r\n")
    advance_clock(cconn, 80)
    expect(cconn, b"mg k R30\r\n", b"HD W\r\n")
    expect(cconn, b"mg k R30\r\n", b"HD Z\r\n")


@pytest.mark.strata_only
def test_t_touch_extends_life(cconn):
    expect(cconn, b"ms k 1 T10\r\nx\r\n", b"HD\r\n")
    expect(cconn, b"mg k T100\r\n", b"HD\r\n")
    advance_clock(cconn, 50)
    expect(cconn, b"mg k v\r\n", b"VA 1\r\nx\r\n")
    advance_clock(cconn, 51)
    expect(cconn, b"mg k v\r\n", b"EN\r\n")


@pytest.mark.strata_only
def test_t_touch_shortens_life(cconn):
    expect(cconn, b"ms k 1\r\nx\r\n", b"HD\r\n")
    expect(cconn, b"mg k T10\r\n", b"HD\r\n")
    advance_clock(cconn, 11)
    expect(cconn, b"mg k\r\n", b"EN\r\n")
