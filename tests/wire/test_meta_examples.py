"""The examples in the meta sections of memcached 1.6.18's protocol.txt, replayed."""

import re

from wirelib import assert_in_sync, cas_of, expect, meta


# ---------------------------------------------------------------- "Meta Commands"


def test_syntax_cm_key_datalen_flags_and_rc_datalen_flags(conn):
    # <cm> <key> <datalen*> <flag1> <flag2> ... / <RC> <datalen*> <flag1> ...
    expect(conn, b"ms foo 2 T90 F1\r\nhi\r\n", b"HD\r\n")
    assert meta(conn, b"mg foo t f v\r\n") in (b"VA 2 t90 f1\r\nhi\r\n", b"VA 2 t89 f1\r\nhi\r\n")


def test_t_flag_returns_t20_for_twenty_seconds_left(conn):
    # "Sending an 't' flag with a get for an item with 20 seconds of TTL
    # remaining, would return 't20' in the response."
    expect(conn, b"ms foo 2 T20\r\nhi\r\n", b"HD\r\n")
    assert meta(conn, b"mg foo t\r\n") in (b"HD t20\r\n", b"HD t19\r\n")


def test_oopaque_token_is_copied_back(conn):
    # "Flags may contain token arguments ... ie 'Oopaque'"
    expect(conn, b"ms foo 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg foo Oopaque\r\n", b"HD Oopaque\r\n")


def test_kuserkey_token_example_is_not_a_flag_in_1_6_18(conn):
    # 'Kuserkey' only illustrates token syntax: K is not a meta flag.
    expect(conn, b"ms foo 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg foo Kuserkey\r\n", b"CLIENT_ERROR invalid flag\r\n")
    assert_in_sync(conn)


def test_path_in_key(conn):
    # "a client may prepend a "path" in the key itself: "mg /path/foo v""
    expect(conn, b"ms /path/foo 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg /path/foo v\r\n", b"VA 2\r\nhi\r\n")


def test_l_proxy_token_is_ignored(conn):
    # "or in a proxy token: "mg foo Lpath/ v""
    expect(conn, b"ms foo 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg foo Lpath/ v\r\n", b"VA 2\r\nhi\r\n")


def test_p_and_l_tokens_are_ignored_by_all_commands(conn):
    expect(conn, b"ms foo 1 Pp Ll\r\n5\r\n", b"HD\r\n")
    expect(conn, b"mg foo Pp Ll v\r\n", b"VA 1\r\n5\r\n")
    expect(conn, b"ma foo Pp Ll v\r\n", b"VA 1\r\n6\r\n")
    expect(conn, b"md foo Pp Ll\r\n", b"HD\r\n")
    expect(conn, b"mn Pp Ll\r\n", b"MN\r\n")


# ---------------------------------------------------------------- "Meta Debug"


def test_me_hit_and_miss(conn):
    # me <key> <flag> -> ME <key> <k>=<v>* ; a miss is EN
    expect(conn, b"ms foo 2\r\nhi\r\n", b"HD\r\n")
    cas = cas_of(conn, b"foo")
    line = meta(conn, b"me foo\r\n")
    m = re.fullmatch(rb"ME foo exp=-1 la=(\d+) cas=(\d+) fetch=no cls=\d+ size=\d+\r\n", line)
    assert m, line
    assert int(m.group(2)) == cas
    expect(conn, b"me nope\r\n", b"EN\r\n")


def test_me_base64_key(conn):
    # "if <flag> is 'b', then <key> is a base64 encoded binary value. the
    # response key will also be base64 encoded." (true for items stored with b)
    expect(conn, b"ms Zm9v 2 b\r\nhi\r\n", b"HD\r\n")
    assert meta(conn, b"me Zm9v b\r\n").startswith(b"ME Zm9v exp=-1 ")


# ---------------------------------------------------------------- "Meta Get"


def test_mg_va_with_flags_and_data_block(conn):
    # VA <size> <flags>*\r\n<data block>\r\n
    expect(conn, b"ms foo 2 F1\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg foo s f v\r\n", b"VA 2 s2 f1\r\nhi\r\n")


def test_mg_hd_without_v(conn):
    # HD <flags>*\r\n
    expect(conn, b"ms foo 2 F1\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg foo s f\r\n", b"HD s2 f1\r\n")


def test_mg_miss_en(conn):
    expect(conn, b"mg foo v\r\n", b"EN\r\n")


def test_mg_replaces_get_gets_touch_gat_gats(conn):
    expect(conn, b"ms foo 2 F3\r\nhi\r\n", b"HD\r\n")
    cas = cas_of(conn, b"foo")
    expect(conn, b"mg foo f v\r\n", b"VA 2 f3\r\nhi\r\n")  # get
    expect(conn, b"mg foo f c v\r\n", b"VA 2 f3 c%d\r\nhi\r\n" % cas)  # gets
    expect(conn, b"mg foo T30\r\n", b"HD\r\n")  # touch
    expect(conn, b"mg foo T0 f v\r\n", b"VA 2 f3\r\nhi\r\n")  # gat
    expect(conn, b"mg foo T0 f c v\r\n", b"VA 2 f3 c%d\r\nhi\r\n" % cas)  # gats


def test_mg_three_pipelined_gets_with_opaques_1_2_3(conn):
    # "you can supply an "O" flag for each mg with tokens of "1" "2" and "3""
    expect(conn, b"ms a 1\r\nA\r\nms c 1\r\nC\r\n", b"HD\r\nHD\r\n")
    expect(conn, b"mg a O1 v\r\nmg b O2 v\r\nmg c O3 v\r\n", b"VA 1 O1\r\nA\r\nEN O2\r\nVA 1 O3\r\nC\r\n")


def test_mg_q_pipeline_then_mn(conn):
    # "With noreply enabled, the "EN\r\n" marker is suppressed."
    expect(conn, b"ms a 1\r\nA\r\n", b"HD\r\n")
    expect(conn, b"mg a q v\r\nmg b q v\r\nmg c q v\r\nmn\r\n", b"VA 1\r\nA\r\nMN\r\n")


def test_mg_n_vivify_then_z(conn):
    # N: stub item with 0 bytes of data, W to the winner, Z to later requests.
    expect(conn, b"mg foo N30 v\r\n", b"VA 0 W\r\n\r\n")
    expect(conn, b"mg foo N30 v\r\n", b"VA 0 Z\r\n\r\n")


def test_mg_r_recache(conn):
    # R: win when remaining TTL is below the token.
    expect(conn, b"ms foo 2 T30\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg foo R60 v\r\n", b"VA 2 W\r\nhi\r\n")
    expect(conn, b"mg foo R60 v\r\n", b"VA 2 Z\r\nhi\r\n")


def test_mg_stale_x_after_md_i(conn):
    # "Items can be marked as stale by the metadelete command."
    expect(conn, b"ms foo 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"md foo I\r\n", b"HD\r\n")
    expect(conn, b"mg foo v\r\n", b"VA 2 X W\r\nhi\r\n")
    expect(conn, b"mg foo v\r\n", b"VA 2 Z X\r\nhi\r\n")


def test_mg_h_and_l_before_command(conn):
    expect(conn, b"ms foo 2\r\nhi\r\n", b"HD\r\n")
    assert meta(conn, b"mg foo h l\r\n") in (b"HD h0 l0\r\n", b"HD h0 l1\r\n")
    assert meta(conn, b"mg foo h l\r\n") in (b"HD h1 l0\r\n", b"HD h1 l1\r\n")


def test_mg_base64_key_with_k_returns_b(conn):
    # "If 'b' flag is sent in the response, and a key is returned via 'k', this
    # signals to the client that the key is base64 encoded binary."
    expect(conn, b"ms AAEC 2 b\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"mg AAEC b k v\r\n", b"VA 2 kAAEC b\r\nhi\r\n")


# ---------------------------------------------------------------- "Meta Set"


def test_ms_outcomes_hd_ns_ex_nf(conn):
    expect(conn, b"ms foo 2\r\nhi\r\n", b"HD\r\n")
    expect(conn, b"ms foo 2 ME\r\nhi\r\n", b"NS\r\n")
    expect(conn, b"ms foo 2 C1\r\nhi\r\n", b"EX\r\n")
    expect(conn, b"ms bar 2 C1\r\nhi\r\n", b"NF\r\n")


def test_ms_modes(conn):
    expect(conn, b"ms foo 1 ME\r\nb\r\n", b"HD\r\n")  # add
    expect(conn, b"ms foo 1 MA\r\nc\r\n", b"HD\r\n")  # append
    expect(conn, b"ms foo 1 MP\r\na\r\n", b"HD\r\n")  # prepend
    expect(conn, b"mg foo v\r\n", b"VA 3\r\nabc\r\n")
    expect(conn, b"ms foo 1 MR\r\nr\r\n", b"HD\r\n")  # replace
    expect(conn, b"ms bar 1 MR\r\nr\r\n", b"NS\r\n")
    expect(conn, b"ms foo 1 MS\r\ns\r\n", b"HD\r\n")  # set
    expect(conn, b"mg foo v\r\n", b"VA 1\r\ns\r\n")


def test_ms_c_replaces_cas_command_and_append_respects_cas(conn):
    expect(conn, b"ms foo 1\r\na\r\n", b"HD\r\n")
    cas = cas_of(conn, b"foo")
    expect(conn, b"ms foo 1 MA C%d\r\nb\r\n" % (cas + 1), b"EX\r\n")
    expect(conn, b"ms foo 1 MA C%d\r\nb\r\n" % cas, b"HD\r\n")
    expect(conn, b"mg foo v\r\n", b"VA 2\r\nab\r\n")


def test_ms_c_returns_cas_and_zero_on_failure(conn):
    reply = meta(conn, b"ms foo 1 c\r\na\r\n")
    assert reply == b"HD c%d\r\n" % cas_of(conn, b"foo")
    expect(conn, b"ms foo 1 c ME\r\na\r\n", b"NS c0\r\n")


def test_ms_f_defaults_to_zero(conn):
    # "Sets flags to 0 if not supplied."
    expect(conn, b"ms foo 1 F5\r\na\r\nms foo 1\r\na\r\n", b"HD\r\nHD\r\n")
    expect(conn, b"mg foo f\r\n", b"HD f0\r\n")


def test_ms_i_with_lower_cas_marks_stale(conn):
    # "a CAS value that is _lower_ than the current value may be accepted, but
    # the item will be marked as "stale", returning the X flag with mget"
    expect(conn, b"ms foo 1\r\na\r\n", b"HD\r\n")
    old = cas_of(conn, b"foo")
    expect(conn, b"ms foo 1\r\nb\r\n", b"HD\r\n")
    expect(conn, b"ms foo 1 I C%d\r\nc\r\n" % old, b"HD\r\n")
    expect(conn, b"mg foo v\r\n", b"VA 1 X W\r\nc\r\n")


def test_ms_q_hides_hd_but_not_ex(conn):
    expect(conn, b"ms foo 1 q\r\na\r\nms foo 1 q C1\r\nb\r\nmn\r\n", b"EX\r\nMN\r\n")


# ---------------------------------------------------------------- "Meta Delete"


def test_md_outcomes_hd_nf_ex(conn):
    expect(conn, b"ms foo 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"md foo C1\r\n", b"EX\r\n")
    expect(conn, b"md foo\r\n", b"HD\r\n")
    expect(conn, b"md foo\r\n", b"NF\r\n")


def test_md_i_t_marks_stale_bumps_cas_and_limits_ttl(conn):
    expect(conn, b"ms foo 1\r\na\r\n", b"HD\r\n")
    cas = cas_of(conn, b"foo")
    expect(conn, b"md foo I T30\r\n", b"HD\r\n")
    reply = meta(conn, b"mg foo c t v\r\n")
    m = re.fullmatch(rb"VA 1 c(\d+) t(30|29) X W\r\na\r\n", reply)
    assert m and int(m.group(1)) > cas, reply


def test_md_q_hides_success(conn):
    expect(conn, b"ms foo 1\r\na\r\n", b"HD\r\n")
    expect(conn, b"md foo q\r\nmd foo q\r\nmn\r\n", b"NF\r\nMN\r\n")


# ---------------------------------------------------------------- "Meta Arithmetic"


def test_ma_va_number_format(conn):
    # VA <size> <flags>*\r\n<number>\r\n
    expect(conn, b"ma foo N0 J41 v\r\n", b"VA 2\r\n41\r\n")
    expect(conn, b"ma foo v t\r\n", b"VA 2 t-1\r\n42\r\n")


def test_ma_outcomes_hd_nf_ex(conn):
    expect(conn, b"ma foo\r\n", b"NF\r\n")
    expect(conn, b"ma foo N0\r\n", b"HD\r\n")
    expect(conn, b"ma foo C1\r\n", b"EX\r\n")


def test_ma_decrement_reaches_zero_increment_overflows(conn):
    expect(conn, b"ma foo N0 J1 MD D5 v\r\n", b"VA 1\r\n1\r\n")
    expect(conn, b"ma foo MD D5 v\r\n", b"VA 1\r\n0\r\n")
    expect(conn, b"ms big 20\r\n18446744073709551615\r\n", b"HD\r\n")
    expect(conn, b"ma big M+ v\r\n", b"VA 1\r\n0\r\n")


def test_ma_modes_and_aliases(conn):
    expect(conn, b"ma foo N0 J10 v\r\n", b"VA 2\r\n10\r\n")
    expect(conn, b"ma foo MI v\r\nma foo M+ v\r\nma foo MD v\r\nma foo M- v\r\n",
           b"VA 2\r\n11\r\nVA 2\r\n12\r\nVA 2\r\n11\r\nVA 2\r\n10\r\n")


def test_ma_c_returns_new_cas(conn):
    expect(conn, b"ma foo N0\r\n", b"HD\r\n")
    cas = cas_of(conn, b"foo")
    reply = meta(conn, b"ma foo C%d c\r\n" % cas)
    assert reply == b"HD c%d\r\n" % cas_of(conn, b"foo")


# ---------------------------------------------------------------- "Meta No-Op"


def test_mn_returns_mn(conn):
    expect(conn, b"mn\r\n", b"MN\r\n")


def test_mn_tagged_after_quiet_mg_chain(conn):
    # "an "mn\r\n" command can be tagged to the end of the chain, which will
    # return an "MN\r\n", signalling ... all previous commands have been processed."
    expect(conn, b"mg a q v\r\nmg b q v\r\nmn\r\n", b"MN\r\n")
