"""Binary protocol TOUCH, GAT, GATQ, GATK, GATKQ: new exptimes, replies and
quiet misses."""

import time

import pytest

from binlib import (
    EINVAL,
    GAT,
    GATK,
    GATKQ,
    GATQ,
    KEY_ENOENT,
    NOOP,
    TOUCH,
    assert_closed,
    assert_in_sync,
    error,
    expect,
    exptime_extras,
    flags_extras,
    fresh_conn,
    get_value,
    request,
    response,
    set_ok,
    text_ttl,
)


@pytest.fixture
def bconn(server):
    yield from fresh_conn(server)


def past():
    """An absolute exptime (over 30 days, so a unix time) already gone."""
    return int(time.time()) - 1000


# ---------------------------------------------------------------- TOUCH


def test_touch_hit_replies_flags_and_cas_without_value(bconn):
    cas = set_ok(bconn, "k", b"value", flags=0xABCD)
    expect(
        bconn,
        request(TOUCH, "k", extras=exptime_extras(100), opaque=5),
        response(TOUCH, extras=flags_extras(0xABCD), opaque=5, cas=cas),
    )


def test_touch_sets_new_exptime(server, bconn):
    cas = set_ok(bconn, "k", b"v", exptime=10)
    expect(bconn, request(TOUCH, "k", extras=exptime_extras(500)), response(TOUCH, extras=flags_extras(0), cas=cas))
    assert 498 <= text_ttl(server, "k") <= 500


def test_touch_zero_removes_exptime(server, bconn):
    cas = set_ok(bconn, "k", b"v", exptime=10)
    expect(bconn, request(TOUCH, "k", extras=exptime_extras(0)), response(TOUCH, extras=flags_extras(0), cas=cas))
    assert text_ttl(server, "k") == -1


def test_touch_does_not_change_value_or_cas(bconn):
    cas = set_ok(bconn, "k", b"v", flags=3)
    expect(bconn, request(TOUCH, "k", extras=exptime_extras(100)), response(TOUCH, extras=flags_extras(3), cas=cas))
    assert get_value(bconn, "k") == (3, b"v", cas)


def test_touch_miss_is_not_found(bconn):
    expect(bconn, request(TOUCH, "k", extras=exptime_extras(100), opaque=6), error(TOUCH, KEY_ENOENT, opaque=6))


def test_touch_with_past_exptime_expires_item(bconn):
    cas = set_ok(bconn, "k", b"v")
    expect(bconn, request(TOUCH, "k", extras=exptime_extras(past())), response(TOUCH, extras=flags_extras(0), cas=cas))
    assert get_value(bconn, "k") is None


def test_touch_without_extras_is_invalid_and_closes(bconn):
    set_ok(bconn, "k", b"v")
    expect(bconn, request(TOUCH, "k"), error(TOUCH, EINVAL))
    assert_closed(bconn)


def test_touch_without_key_is_invalid_and_closes(bconn):
    expect(bconn, request(TOUCH, b"", extras=exptime_extras(1)), error(TOUCH, EINVAL))
    assert_closed(bconn)


def test_touch_body_beyond_key_is_read_as_the_next_packet(bconn):
    # TOUCH consumes only extras and key; memcached does not check the body
    # length against them, so trailing body bytes are the next request.
    cas = set_ok(bconn, "k", b"v")
    noop = request(NOOP, opaque=0x77)
    packet = request(TOUCH, "k", extras=exptime_extras(0), bodylen=4 + 1 + len(noop)) + noop
    expect(bconn, packet, response(TOUCH, extras=flags_extras(0), cas=cas) + response(NOOP, opaque=0x77))
    assert_in_sync(bconn)


# ---------------------------------------------------------------- GAT / GATK


def test_gat_hit_returns_value_and_touches(server, bconn):
    cas = set_ok(bconn, "k", b"hello", flags=9, exptime=10)
    expect(
        bconn,
        request(GAT, "k", extras=exptime_extras(300), opaque=1),
        response(GAT, extras=flags_extras(9), value=b"hello", opaque=1, cas=cas),
    )
    assert 298 <= text_ttl(server, "k") <= 300


def test_gat_miss_is_not_found(bconn):
    expect(bconn, request(GAT, "k", extras=exptime_extras(300), opaque=2), error(GAT, KEY_ENOENT, opaque=2))


def test_gat_with_past_exptime_returns_value_then_it_is_gone(bconn):
    cas = set_ok(bconn, "k", b"v")
    expect(
        bconn,
        request(GAT, "k", extras=exptime_extras(past())),
        response(GAT, extras=flags_extras(0), value=b"v", cas=cas),
    )
    assert get_value(bconn, "k") is None


def test_gatk_hit_includes_key(bconn):
    cas = set_ok(bconn, "kk", b"v", flags=2)
    expect(
        bconn,
        request(GATK, "kk", extras=exptime_extras(100), opaque=3),
        response(GATK, key=b"kk", extras=flags_extras(2), value=b"v", opaque=3, cas=cas),
    )


def test_gatk_miss_names_the_key_without_a_message(bconn):
    expect(bconn, request(GATK, "kk", extras=exptime_extras(100), opaque=4), response(GATK, KEY_ENOENT, key=b"kk", opaque=4))


def test_gatq_miss_is_silent_and_hit_answered(server, bconn):
    bconn.send(request(GATQ, "k", extras=exptime_extras(100)))
    assert_in_sync(bconn)
    cas = set_ok(bconn, "k", b"v")
    expect(
        bconn,
        request(GATQ, "k", extras=exptime_extras(200), opaque=5),
        response(GATQ, extras=flags_extras(0), value=b"v", opaque=5, cas=cas),
    )
    assert 198 <= text_ttl(server, "k") <= 200


def test_gatkq_pipeline_omits_misses(bconn):
    cas = set_ok(bconn, "b", b"2")
    pipeline = (
        request(GATKQ, "a", extras=exptime_extras(50), opaque=1)
        + request(GATKQ, "b", extras=exptime_extras(50), opaque=2)
        + request(GATKQ, "c", extras=exptime_extras(50), opaque=3)
        + request(NOOP, opaque=4)
    )
    expect(
        bconn,
        pipeline,
        response(GATKQ, key=b"b", extras=flags_extras(0), value=b"2", opaque=2, cas=cas) + response(NOOP, opaque=4),
    )


@pytest.mark.parametrize("opcode", [GAT, GATQ, GATK, GATKQ])
def test_gat_without_extras_is_invalid_and_closes(bconn, opcode):
    expect(bconn, request(opcode, "k"), error(opcode, EINVAL))
    assert_closed(bconn)


def test_gat_with_8_byte_extras_is_invalid_and_closes(bconn):
    expect(bconn, request(GAT, "k", extras=b"\0" * 8), error(GAT, EINVAL))
    assert_closed(bconn)
