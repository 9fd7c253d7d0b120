"""Binary protocol INCREMENT / DECREMENT (and quiet forms): 64-bit unsigned
arithmetic, initial values, the 0xffffffff "do not create" exptime, CAS."""

import time

import pytest

from binlib import (
    DECREMENT,
    DECREMENTQ,
    DELTA_BADVAL,
    EINVAL,
    INCREMENT,
    INCREMENTQ,
    KEY_EEXISTS,
    KEY_ENOENT,
    SUCCESS,
    arith,
    arith_extras,
    assert_closed,
    assert_in_sync,
    call,
    error,
    expect,
    fresh_conn,
    get_value,
    parse,
    read_raw,
    request,
    response,
    set_ok,
    text_ttl,
    u64,
)

MAX = 2**64 - 1
NO_CREATE = 0xFFFFFFFF


@pytest.fixture
def bconn(server):
    yield from fresh_conn(server)


def arith_ok(c, opcode, key, delta, initial=0, exptime=0, cas=0, opaque=0):
    """Run INCREMENT/DECREMENT, assert the exact success reply; return (value, cas)."""
    c.send(arith(opcode, key, delta, initial, exptime, cas=cas, opaque=opaque))
    raw = read_raw(c)
    r = parse(raw)
    assert r.status == SUCCESS, r
    assert r.cas != 0, r
    assert raw == response(opcode, value=r.value, opaque=opaque, cas=r.cas)
    return int.from_bytes(r.value, "big"), r.cas


def test_incr_returns_new_value_as_8_byte_big_endian(bconn):
    set_ok(bconn, "n", b"10")
    bconn.send(arith(INCREMENT, "n", 5, opaque=0x1234))
    raw = read_raw(bconn)
    assert raw == response(INCREMENT, value=u64(15), opaque=0x1234, cas=parse(raw).cas)
    assert get_value(bconn, "n")[1] == b"15"


def test_decr_returns_new_value(bconn):
    set_ok(bconn, "n", b"10")
    assert arith_ok(bconn, DECREMENT, "n", 3)[0] == 7


def test_incr_cas_is_the_items_new_cas(bconn):
    old = set_ok(bconn, "n", b"1")
    _, cas = arith_ok(bconn, INCREMENT, "n", 1)
    assert cas != old
    assert get_value(bconn, "n") == (0, b"2", cas)


def test_incr_keeps_flags(bconn):
    set_ok(bconn, "n", b"10", flags=77)
    arith_ok(bconn, INCREMENT, "n", 1)
    assert get_value(bconn, "n")[:2] == (77, b"11")


def test_incr_missing_key_creates_initial_value(bconn):
    # The initial value is stored as is: the delta is not applied.
    assert arith_ok(bconn, INCREMENT, "n", 5, initial=100)[0] == 100
    assert get_value(bconn, "n")[:2] == (0, b"100")
    assert arith_ok(bconn, INCREMENT, "n", 5, initial=100)[0] == 105


def test_decr_missing_key_creates_initial_value(bconn):
    assert arith_ok(bconn, DECREMENT, "n", 5, initial=3)[0] == 3
    assert get_value(bconn, "n")[1] == b"3"


def test_incr_missing_key_with_initial_max(bconn):
    assert arith_ok(bconn, INCREMENT, "n", 1, initial=MAX)[0] == MAX
    assert get_value(bconn, "n")[1] == b"%d" % MAX


def test_incr_missing_key_with_no_create_exptime_is_not_found(bconn):
    expect(bconn, arith(INCREMENT, "n", 1, initial=5, exptime=NO_CREATE, opaque=4), error(INCREMENT, KEY_ENOENT, opaque=4))
    expect(bconn, arith(DECREMENT, "n", 1, initial=5, exptime=NO_CREATE, opaque=5), error(DECREMENT, KEY_ENOENT, opaque=5))
    assert get_value(bconn, "n") is None


def test_no_create_exptime_still_updates_existing_key(bconn):
    set_ok(bconn, "n", b"7")
    assert arith_ok(bconn, INCREMENT, "n", 1, exptime=NO_CREATE)[0] == 8


def test_created_item_gets_exptime(server, bconn):
    arith_ok(bconn, INCREMENT, "n", 1, initial=1, exptime=100)
    assert 98 <= text_ttl(server, "n") <= 100


def test_created_item_with_past_absolute_exptime_is_gone(bconn):
    arith_ok(bconn, INCREMENT, "n", 1, initial=1, exptime=int(time.time()) - 1000)
    assert get_value(bconn, "n") is None


def test_non_numeric_value_is_delta_badval(bconn):
    set_ok(bconn, "n", b"abc")
    expect(bconn, arith(INCREMENT, "n", 1, opaque=6), error(INCREMENT, DELTA_BADVAL, opaque=6))
    expect(bconn, arith(DECREMENT, "n", 1, opaque=7), error(DECREMENT, DELTA_BADVAL, opaque=7))
    assert get_value(bconn, "n")[1] == b"abc"


def test_delta_badval_message_text(bconn):
    set_ok(bconn, "n", b"1x")
    r = call(bconn, arith(INCREMENT, "n", 1))
    assert (r.status, r.value) == (6, b"Non-numeric server-side value for incr or decr")


def test_incr_wraps_at_2_pow_64(bconn):
    set_ok(bconn, "n", b"%d" % MAX)
    assert arith_ok(bconn, INCREMENT, "n", 2)[0] == 1
    # Rewritten in place: same length, right-padded with spaces.
    assert get_value(bconn, "n")[1] == b"1" + b" " * 19


def test_incr_to_max(bconn):
    set_ok(bconn, "n", b"%d" % (MAX - 1))
    assert arith_ok(bconn, INCREMENT, "n", 1)[0] == MAX


def test_incr_by_max_delta_wraps(bconn):
    set_ok(bconn, "n", b"99")
    assert arith_ok(bconn, INCREMENT, "n", MAX)[0] == 98


def test_decr_floors_at_zero(bconn):
    set_ok(bconn, "n", b"5")
    assert arith_ok(bconn, DECREMENT, "n", 6)[0] == 0
    assert arith_ok(bconn, DECREMENT, "n", 1)[0] == 0


def test_decr_that_shortens_number_pads_with_spaces(bconn):
    set_ok(bconn, "n", b"100")
    assert arith_ok(bconn, DECREMENT, "n", 1)[0] == 99
    assert get_value(bconn, "n")[1] == b"99 "


def test_incr_that_lengthens_number(bconn):
    set_ok(bconn, "n", b"99")
    assert arith_ok(bconn, INCREMENT, "n", 1)[0] == 100
    assert get_value(bconn, "n")[1] == b"100"


def test_incrq_success_is_silent(bconn):
    set_ok(bconn, "n", b"1")
    bconn.send(arith(INCREMENTQ, "n", 4) + arith(DECREMENTQ, "n", 2))
    assert_in_sync(bconn)
    assert get_value(bconn, "n")[1] == b"3"


def test_incrq_creating_is_silent(bconn):
    bconn.send(arith(INCREMENTQ, "n", 4, initial=50))
    assert_in_sync(bconn)
    assert get_value(bconn, "n")[1] == b"50"


def test_quiet_errors_are_answered(bconn):
    expect(bconn, arith(INCREMENTQ, "n", 1, exptime=NO_CREATE, opaque=1), error(INCREMENTQ, KEY_ENOENT, opaque=1))
    set_ok(bconn, "s", b"text")
    expect(bconn, arith(DECREMENTQ, "s", 1, opaque=2), error(DECREMENTQ, DELTA_BADVAL, opaque=2))
    assert_in_sync(bconn)


def test_incr_with_matching_cas(bconn):
    cas = set_ok(bconn, "n", b"1")
    assert arith_ok(bconn, INCREMENT, "n", 1, cas=cas)[0] == 2


def test_incr_with_stale_cas_is_exists(bconn):
    set_ok(bconn, "n", b"1")
    expect(bconn, arith(INCREMENT, "n", 1, cas=1, opaque=3), error(INCREMENT, KEY_EEXISTS, opaque=3))
    assert get_value(bconn, "n")[1] == b"1"


def test_incr_with_wrong_extras_length_is_invalid_and_closes(bconn):
    set_ok(bconn, "n", b"1")
    expect(bconn, request(INCREMENT, "n", extras=b"\0" * 8 + b"\0" * 4), error(INCREMENT, EINVAL))
    assert_closed(bconn)


def test_incr_with_a_value_is_invalid_and_closes(bconn):
    expect(bconn, request(INCREMENT, "n", b"5", extras=arith_extras(1)), error(INCREMENT, EINVAL))
    assert_closed(bconn)


def test_decr_without_key_is_invalid_and_closes(bconn):
    expect(bconn, request(DECREMENT, b"", extras=arith_extras(1)), error(DECREMENT, EINVAL))
    assert_closed(bconn)
