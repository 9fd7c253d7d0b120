"""Binary protocol GET, GETQ, GETK, GETKQ: hits, misses, flags, CAS, opaque,
and the GETKQ ... NOOP multi-get pipeline."""

import time

import pytest

from binlib import (
    GET,
    GETK,
    GETKQ,
    GETQ,
    KEY_ENOENT,
    NOOP,
    RES_MAGIC,
    SET,
    SUCCESS,
    assert_in_sync,
    call,
    error,
    expect,
    flags_extras,
    fresh_conn,
    read_raw,
    request,
    response,
    set_ok,
    store,
)
from wirelib import READ_TIMEOUT, read_until_end


@pytest.fixture
def bconn(server):
    yield from fresh_conn(server)


def test_get_miss_is_not_found_with_message(bconn):
    expect(bconn, request(GET, "nokey", opaque=0x01020304), error(GET, KEY_ENOENT, opaque=0x01020304))


def test_get_hit_returns_flags_value_and_cas(bconn):
    cas = set_ok(bconn, "k", b"hello", flags=0xDEADBEEF)
    expect(
        bconn,
        request(GET, "k", opaque=77),
        response(GET, extras=flags_extras(0xDEADBEEF), value=b"hello", opaque=77, cas=cas),
    )


def test_get_hit_header_fields(bconn):
    set_ok(bconn, "k", b"abc", flags=5)
    r = call(bconn, request(GET, "k", opaque=0xCAFEBABE))
    assert (r.magic, r.opcode, r.status, r.datatype) == (RES_MAGIC, GET, SUCCESS, 0)
    assert (r.keylen, r.extraslen, r.bodylen) == (0, 4, 7)
    assert (r.opaque, r.extras, r.key, r.value) == (0xCAFEBABE, flags_extras(5), b"", b"abc")


def test_getk_hit_includes_key(bconn):
    cas = set_ok(bconn, "thekey", b"v", flags=3)
    expect(
        bconn,
        request(GETK, "thekey", opaque=9),
        response(GETK, key=b"thekey", extras=flags_extras(3), value=b"v", opaque=9, cas=cas),
    )


def test_getk_miss_names_the_key_without_a_message(bconn):
    expect(bconn, request(GETK, "missing", opaque=4), response(GETK, KEY_ENOENT, key=b"missing", opaque=4))


def test_getq_miss_is_silent(bconn):
    bconn.send(request(GETQ, "nokey", opaque=1))
    assert_in_sync(bconn)


def test_getkq_miss_is_silent(bconn):
    bconn.send(request(GETKQ, "nokey", opaque=1))
    assert_in_sync(bconn)


def test_getq_hit_is_answered_without_key(bconn):
    cas = set_ok(bconn, "k", b"val", flags=1)
    expect(
        bconn,
        request(GETQ, "k", opaque=2),
        response(GETQ, extras=flags_extras(1), value=b"val", opaque=2, cas=cas),
    )


def test_getkq_hit_is_answered_with_key(bconn):
    cas = set_ok(bconn, "k", b"val", flags=1)
    expect(
        bconn,
        request(GETKQ, "k", opaque=2),
        response(GETKQ, key=b"k", extras=flags_extras(1), value=b"val", opaque=2, cas=cas),
    )


def test_getkq_multiget_pipeline_omits_misses(bconn):
    cas1 = set_ok(bconn, "a", b"1", flags=10)
    cas3 = set_ok(bconn, "c", b"333", flags=30)
    pipeline = (
        request(GETKQ, "a", opaque=1)
        + request(GETKQ, "b", opaque=2)
        + request(GETKQ, "c", opaque=3)
        + request(GETKQ, "d", opaque=4)
        + request(NOOP, opaque=5)
    )
    expect(
        bconn,
        pipeline,
        response(GETKQ, key=b"a", extras=flags_extras(10), value=b"1", opaque=1, cas=cas1)
        + response(GETKQ, key=b"c", extras=flags_extras(30), value=b"333", opaque=3, cas=cas3)
        + response(NOOP, opaque=5),
    )
    assert_in_sync(bconn)


def test_getq_pipeline_all_misses_only_noop_answers(bconn):
    bconn.send(b"".join(request(GETQ, "k%d" % i, opaque=i) for i in range(50)) + request(NOOP, opaque=99))
    assert read_raw(bconn) == response(NOOP, opaque=99)
    assert_in_sync(bconn)


def test_mixed_get_and_getk_pipeline_in_order(bconn):
    cas = set_ok(bconn, "k", b"v")
    expect(
        bconn,
        request(GET, "k", opaque=1) + request(GETK, "x", opaque=2) + request(GETK, "k", opaque=3),
        response(GET, extras=flags_extras(0), value=b"v", opaque=1, cas=cas)
        + response(GETK, KEY_ENOENT, key=b"x", opaque=2)
        + response(GETK, key=b"k", extras=flags_extras(0), value=b"v", opaque=3, cas=cas),
    )


def test_empty_value(bconn):
    cas = set_ok(bconn, "k", b"")
    expect(bconn, request(GET, "k"), response(GET, extras=flags_extras(0), cas=cas))


def test_value_with_binary_bytes_round_trips(bconn):
    value = bytes(range(256)) * 4 + b"\r\nEND\r\n\x00"
    cas = set_ok(bconn, "bin", value, flags=1)
    expect(bconn, request(GET, "bin"), response(GET, extras=flags_extras(1), value=value, cas=cas))


def test_large_value_round_trips(bconn):
    value = b"x" * 500_000
    cas = set_ok(bconn, "big", value)
    expect(bconn, request(GET, "big"), response(GET, extras=flags_extras(0), value=value, cas=cas))


def test_max_length_key(bconn):
    key = b"k" * 250
    cas = set_ok(bconn, key, b"v")
    expect(bconn, request(GETK, key), response(GETK, key=key, extras=flags_extras(0), value=b"v", cas=cas))


def test_key_with_binary_bytes(bconn):
    # Binary keys are length-delimited: spaces and control bytes are allowed.
    key = b"a b\r\n\x00\x01"
    cas = set_ok(bconn, key, b"v")
    expect(bconn, request(GETK, key), response(GETK, key=key, extras=flags_extras(0), value=b"v", cas=cas))


def test_cas_changes_on_each_store(bconn):
    cas1 = set_ok(bconn, "k", b"1")
    cas2 = set_ok(bconn, "k", b"2")
    assert cas2 != cas1
    assert call(bconn, request(GET, "k")).cas == cas2


def test_get_does_not_change_cas(bconn):
    cas = set_ok(bconn, "k", b"v")
    assert call(bconn, request(GET, "k")).cas == cas
    assert call(bconn, request(GETK, "k")).cas == cas


def test_request_cas_and_vbucket_are_ignored_by_get(bconn):
    cas = set_ok(bconn, "k", b"v")
    expect(
        bconn,
        request(GET, "k", cas=cas + 12345, vbucket=7, opaque=3),
        response(GET, extras=flags_extras(0), value=b"v", opaque=3, cas=cas),
    )


def test_request_datatype_is_ignored(bconn):
    cas = set_ok(bconn, "k", b"v")
    expect(
        bconn,
        request(GET, "k", datatype=1, opaque=3),
        response(GET, extras=flags_extras(0), value=b"v", opaque=3, cas=cas),
    )


def test_opaque_echoed_on_every_reply(bconn):
    set_ok(bconn, "k", b"v")
    for opaque in (0, 1, 0x7FFFFFFF, 0xFFFFFFFF):
        assert call(bconn, request(GET, "k", opaque=opaque)).opaque == opaque
        assert call(bconn, request(GET, "miss", opaque=opaque)).opaque == opaque


def test_value_stored_by_text_protocol_is_visible(server, bconn):
    text = server.connect(timeout=READ_TIMEOUT)
    text.send(b"set tk 42 0 5\r\nhello\r\n")
    assert text.read_line() == b"STORED\r\n"
    text.close()
    r = call(bconn, request(GET, "tk"))
    assert (r.status, r.extras, r.value) == (SUCCESS, flags_extras(42), b"hello")


def test_value_stored_by_binary_is_visible_to_text(server, bconn):
    set_ok(bconn, "bk", b"world", flags=7)
    text = server.connect(timeout=READ_TIMEOUT)
    text.send(b"get bk\r\n")
    assert read_until_end(text) == b"VALUE bk 7 5\r\nworld\r\nEND\r\n"
    text.close()


def test_expired_item_is_a_miss(bconn):
    # Absolute exptime (over 30 days) in the past: expired at once.
    r = call(bconn, store(SET, "k", b"v", exptime=int(time.time()) - 1000))
    assert r.status == SUCCESS
    expect(bconn, request(GET, "k"), error(GET, KEY_ENOENT))
