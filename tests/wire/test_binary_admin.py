"""Binary protocol DELETE(Q), NOOP, VERSION, STAT, FLUSH(Q), QUIT(Q) and
VERBOSITY."""

import re

import pytest

from binlib import (
    AUTH_ERROR,
    DELETE,
    DELETEQ,
    EINVAL,
    FLUSH,
    FLUSHQ,
    GET,
    KEY_EEXISTS,
    KEY_ENOENT,
    NOOP,
    QUIT,
    QUITQ,
    RES_MAGIC,
    SET,
    STAT,
    SUCCESS,
    UNKNOWN_COMMAND,
    VERBOSITY,
    VERSION,
    assert_closed,
    assert_in_sync,
    call,
    error,
    expect,
    exptime_extras,
    flags_extras,
    fresh_conn,
    get_value,
    parse,
    read_raw,
    read_stats,
    request,
    response,
    set_ok,
    store,
)
from wirelib import READ_TIMEOUT, advance_clock


@pytest.fixture
def bconn(server):
    yield from fresh_conn(server)


# ---------------------------------------------------------------- DELETE


def test_delete_hit(bconn):
    set_ok(bconn, "k", b"v")
    expect(bconn, request(DELETE, "k", opaque=1), response(DELETE, opaque=1))
    assert get_value(bconn, "k") is None


def test_delete_miss_is_not_found(bconn):
    expect(bconn, request(DELETE, "k", opaque=2), error(DELETE, KEY_ENOENT, opaque=2))


def test_deleteq_hit_is_silent_miss_is_answered(bconn):
    set_ok(bconn, "k", b"v")
    bconn.send(request(DELETEQ, "k"))
    assert_in_sync(bconn)
    assert get_value(bconn, "k") is None
    expect(bconn, request(DELETEQ, "k", opaque=3), error(DELETEQ, KEY_ENOENT, opaque=3))


def test_delete_with_matching_cas(bconn):
    cas = set_ok(bconn, "k", b"v")
    expect(bconn, request(DELETE, "k", cas=cas), response(DELETE))
    assert get_value(bconn, "k") is None


def test_delete_with_stale_cas_is_exists_and_keeps_item(bconn):
    cas = set_ok(bconn, "k", b"v")
    expect(bconn, request(DELETE, "k", cas=cas + 1, opaque=4), error(DELETE, KEY_EEXISTS, opaque=4))
    assert get_value(bconn, "k") == (0, b"v", cas)


def test_deleteq_with_stale_cas_is_answered(bconn):
    set_ok(bconn, "k", b"v")
    expect(bconn, request(DELETEQ, "k", cas=1), error(DELETEQ, KEY_EEXISTS))


def test_delete_with_cas_on_missing_key_is_not_found(bconn):
    expect(bconn, request(DELETE, "k", cas=5), error(DELETE, KEY_ENOENT))


@pytest.mark.parametrize(
    "packet",
    [
        request(DELETE, "k", extras=b"\0\0\0\0"),
        request(DELETE, "k", b"value"),
        request(DELETE, b""),
    ],
    ids=["extras", "value", "no-key"],
)
def test_malformed_delete_is_invalid_and_closes(bconn, packet):
    expect(bconn, packet, error(DELETE, EINVAL))
    assert_closed(bconn)


# ---------------------------------------------------------------- NOOP / VERSION


def test_noop(bconn):
    expect(bconn, request(NOOP, opaque=0xA1B2C3D4), response(NOOP, opaque=0xA1B2C3D4))


def test_noop_with_body_is_invalid_and_closes(bconn):
    expect(bconn, request(NOOP, value=b"x"), error(NOOP, EINVAL))
    assert_closed(bconn)


def test_version_shape(bconn):
    # Only the shape: strata and memcached report different versions.
    r = call(bconn, request(VERSION, opaque=42))
    assert (r.magic, r.opcode, r.status, r.opaque, r.cas) == (RES_MAGIC, VERSION, SUCCESS, 42, 0)
    assert (r.keylen, r.extraslen, r.bodylen) == (0, 0, len(r.value))
    assert re.fullmatch(rb"\d+\.\d+\.\d+[-.\w]*", r.value), r.value


def test_version_matches_text_version(server, bconn):
    r = call(bconn, request(VERSION))
    text = server.connect(timeout=READ_TIMEOUT)
    text.send(b"version\r\n")
    assert text.read_line() == b"VERSION " + r.value + b"\r\n"
    text.close()


def test_version_with_body_is_invalid_and_closes(bconn):
    expect(bconn, request(VERSION, value=b"x"), error(VERSION, EINVAL))
    assert_closed(bconn)


# ---------------------------------------------------------------- STAT


def test_stat_general_is_key_value_packets_ending_with_empty_one(server, bconn):
    bconn.send(request(STAT, opaque=0x5151))
    packets = []
    while True:
        r = parse(read_raw(bconn))
        assert (r.magic, r.opcode, r.status, r.opaque, r.cas, r.extraslen) == (RES_MAGIC, STAT, SUCCESS, 0x5151, 0, 0), r
        if r.keylen == 0:
            assert r.bodylen == 0
            break
        packets.append((r.key.decode(), r.value.decode()))
    stats = dict(packets)
    assert len(stats) == len(packets), "duplicate stat names"
    for name in ("pid", "uptime", "time", "version", "curr_items", "total_items", "cmd_get", "get_hits", "curr_connections"):
        assert name in stats, name
    assert int(stats["pid"]) == server.pid()
    assert int(stats["curr_items"]) >= 0 and int(stats["uptime"]) >= 0
    assert_in_sync(bconn)


def test_stat_counts_binary_commands(bconn):
    before, _ = read_stats_after(bconn, request(STAT))
    set_ok(bconn, "k", b"v")
    call(bconn, request(GET, "k"))
    call(bconn, request(GET, "nokey"))
    after, _ = read_stats_after(bconn, request(STAT))
    assert int(after["cmd_get"]) - int(before["cmd_get"]) == 2
    assert int(after["get_hits"]) - int(before["get_hits"]) == 1
    assert int(after["get_misses"]) - int(before["get_misses"]) == 1
    assert int(after["cmd_set"]) - int(before["cmd_set"]) == 1


def read_stats_after(c, packet):
    c.send(packet)
    pairs, end = read_stats(c)
    return dict(pairs), end


def test_stat_settings(bconn):
    settings, end = read_stats_after(bconn, request(STAT, "settings", opaque=7))
    assert end == parse(response(STAT, opaque=7))
    assert settings["maxbytes"] == str(64 * 1024 * 1024)
    assert settings["item_size_max"] == str(1024 * 1024)
    assert settings["cas_enabled"] == "yes"
    assert "maxconns" in settings and "evictions" in settings


def test_stat_unknown_group_is_not_found(bconn):
    expect(bconn, request(STAT, "nosuchgroup", opaque=8), error(STAT, KEY_ENOENT, opaque=8))
    assert_in_sync(bconn)


def test_stat_reset_replies_only_the_terminator(bconn):
    expect(bconn, request(STAT, "reset", opaque=9), response(STAT, opaque=9))
    assert_in_sync(bconn)


def test_stat_with_extras_is_invalid_and_closes(bconn):
    expect(bconn, request(STAT, extras=b"\0\0\0\0"), error(STAT, EINVAL))
    assert_closed(bconn)


# ---------------------------------------------------------------- FLUSH


def test_flush_removes_items(bconn):
    set_ok(bconn, "a", b"1")
    set_ok(bconn, "b", b"2")
    expect(bconn, request(FLUSH, opaque=3), response(FLUSH, opaque=3))
    assert get_value(bconn, "a") is None and get_value(bconn, "b") is None


def test_flushq_is_silent(bconn):
    set_ok(bconn, "a", b"1")
    bconn.send(request(FLUSHQ))
    assert_in_sync(bconn)
    assert get_value(bconn, "a") is None


def test_flush_with_zero_delay_extras_flushes_now(bconn):
    set_ok(bconn, "a", b"1")
    expect(bconn, request(FLUSH, extras=exptime_extras(0)), response(FLUSH))
    assert get_value(bconn, "a") is None


def test_items_set_after_flush_are_visible(bconn):
    set_ok(bconn, "a", b"1")
    expect(bconn, request(FLUSH), response(FLUSH))
    cas = set_ok(bconn, "a", b"2")
    assert get_value(bconn, "a") == (0, b"2", cas)


def test_flush_with_delay_keeps_items_for_now(make_server):
    c = make_server().connect(timeout=READ_TIMEOUT)
    set_ok(c, "a", b"1")
    expect(c, request(FLUSH, extras=exptime_extras(100), opaque=5), response(FLUSH, opaque=5))
    assert get_value(c, "a")[1] == b"1"


@pytest.mark.strata_only
def test_flush_with_delay_takes_effect_later(make_server):
    srv = make_server(["--enable-debug-clock"])
    c = srv.connect(timeout=READ_TIMEOUT)
    text = srv.connect(timeout=READ_TIMEOUT)
    set_ok(c, "early", b"1")
    expect(c, request(FLUSHQ, extras=exptime_extras(10)) + request(NOOP), response(NOOP))
    advance_clock(text, 5)
    assert get_value(c, "early")[1] == b"1"
    advance_clock(text, 6)
    assert get_value(c, "early") is None


@pytest.mark.parametrize(
    "packet",
    [request(FLUSH, "k"), request(FLUSH, extras=b"\0" * 8), request(FLUSH, value=b"\0" * 4)],
    ids=["key", "8-byte-extras", "value"],
)
def test_malformed_flush_is_invalid_and_closes(bconn, packet):
    set_ok(bconn, "a", b"1")
    expect(bconn, packet, error(FLUSH, EINVAL))
    assert_closed(bconn)


def test_disabled_flush_is_auth_error_and_keeps_items(make_server):
    c = make_server(["-F"]).connect(timeout=READ_TIMEOUT)
    set_ok(c, "a", b"1")
    expect(c, request(FLUSH, opaque=1), error(FLUSH, AUTH_ERROR, opaque=1))
    expect(c, request(FLUSHQ, opaque=2), error(FLUSHQ, AUTH_ERROR, opaque=2))
    assert_in_sync(c)
    assert get_value(c, "a")[1] == b"1"


# ---------------------------------------------------------------- QUIT


def test_quit_replies_then_closes(bconn):
    bconn.send(request(QUIT, opaque=0x99))
    assert read_raw(bconn) == response(QUIT, opaque=0x99)
    assert_closed(bconn)


def test_quitq_closes_without_reply(bconn):
    bconn.send(request(QUITQ, opaque=0x99))
    assert_closed(bconn)


def test_quit_after_pipelined_requests_answers_them_first(bconn):
    set_ok(bconn, "k", b"v")
    cas = get_value(bconn, "k")[2]
    bconn.send(request(GET, "k", opaque=1) + request(QUIT, opaque=2) + request(NOOP, opaque=3))
    assert read_raw(bconn) == response(GET, extras=flags_extras(0), value=b"v", opaque=1, cas=cas)
    assert read_raw(bconn) == response(QUIT, opaque=2)
    assert_closed(bconn)


def test_quitq_after_set_delivers_the_set_reply(bconn):
    bconn.send(store(SET, "k", b"v", opaque=1) + request(QUITQ))
    r = parse(read_raw(bconn))
    assert (r.opcode, r.status, r.opaque) == (SET, SUCCESS, 1)
    assert_closed(bconn)


def test_quit_with_body_is_invalid_and_closes(bconn):
    expect(bconn, request(QUIT, value=b"x"), error(QUIT, EINVAL))
    assert_closed(bconn)


# ---------------------------------------------------------------- VERBOSITY


def test_verbosity_is_an_unknown_command(bconn):
    # memcached 1.6.18's binary protocol has no VERBOSITY (0x1b) handler.
    expect(bconn, request(VERBOSITY, opaque=6), error(VERBOSITY, UNKNOWN_COMMAND, opaque=6))
    assert_in_sync(bconn)


def test_verbosity_with_level_extras_is_an_unknown_command(bconn):
    # As for any unknown opcode, memcached consumes the extras and then
    # swallows body-length more bytes (here 4 bytes of padding) before it
    # answers: see test_binary_malformed.py.
    packet = request(VERBOSITY, extras=exptime_extras(1), opaque=7) + b"\0" * 4 + request(NOOP, opaque=8)
    expect(bconn, packet, error(VERBOSITY, UNKNOWN_COMMAND, opaque=7) + response(NOOP, opaque=8))
