"""Malformed binary requests, one test per header fault, and framing: packets
split across TCP sends and many packets in one send.

What memcached 1.6.18 does (try_read_command_binary / dispatch_bin_command):
a bad magic byte closes the connection without a reply; body length shorter
than extras + key is answered UNKNOWN_COMMAND and closes; lengths wrong for
the opcode, or a key over 250 bytes, are answered EINVAL and close; an
unknown opcode is answered UNKNOWN_COMMAND and the connection stays.
"""

import socket
import struct
import time

import pytest

from binlib import (
    E2BIG,
    EINVAL,
    GET,
    GETK,
    GETKQ,
    KEY_ENOENT,
    NOOP,
    SET,
    SETQ,
    SUCCESS,
    UNKNOWN_COMMAND,
    assert_closed,
    assert_in_sync,
    error,
    expect,
    flags_extras,
    fresh_conn,
    get_value,
    header,
    parse,
    read_raw,
    request,
    response,
    set_ok,
    store,
    store_extras,
)
from wirelib import READ_TIMEOUT, read_n

ITEM_MAX = 1024 * 1024  # default -I


@pytest.fixture
def bconn(server):
    yield from fresh_conn(server)


def nothing_arrives(c, timeout=0.3):
    """No reply byte arrives within timeout and the connection is still open."""
    got = read_n(c, 1, timeout=timeout)
    return got == b""


# ---------------------------------------------------------------- magic


def test_response_magic_on_binary_only_server_closes_without_reply(make_server):
    c = make_server(["-B", "binary"]).connect(timeout=READ_TIMEOUT)
    c.send(request(NOOP, magic=0x81))
    assert_closed(c)


def test_zero_magic_after_a_valid_packet_closes_without_reply(bconn):
    set_ok(bconn, "k", b"v")
    bconn.send(request(NOOP, magic=0x00))
    assert_closed(bconn)


@pytest.mark.memcached_only
def test_bad_magic_after_a_get_hit_in_one_send_closes_without_reply(bconn):
    # A hit's reply is queued; the bad packet, arriving in the same read,
    # closes the connection before memcached flushes the queue (it does
    # flush error and NOOP replies: see below).
    set_ok(bconn, "k", b"v")
    bconn.send(request(GET, "k", opaque=1) + request(NOOP, magic=0x7F) + request(NOOP, opaque=3))
    assert_closed(bconn)


@pytest.mark.strata_only
def test_bad_magic_after_a_get_hit_flushes_the_hit_then_closes(bconn):
    # strata writes every reply queued before the bad packet, hits included
    # (docs/protocol.md, deliberate differences).
    cas = set_ok(bconn, "k", b"v")
    bconn.send(request(GET, "k", opaque=1) + request(NOOP, magic=0x7F) + request(NOOP, opaque=3))
    hit = response(GET, extras=flags_extras(0), value=b"v", opaque=1, cas=cas)
    assert read_n(bconn, len(hit)) == hit
    assert_closed(bconn)


def test_error_reply_is_flushed_before_a_bad_magic_closes(bconn):
    # memcached writes an error reply (write_bin_error) out before it reads
    # the next packet, so a miss is answered even though a bad packet follows.
    bconn.send(request(GET, "k", opaque=1) + request(NOOP, magic=0x7F) + request(NOOP, opaque=3))
    assert read_n(bconn, 33) == error(GET, KEY_ENOENT, opaque=1)
    assert_closed(bconn)


def test_noop_reply_is_flushed_before_a_bad_magic_closes(bconn):
    # NOOP forces memcached to flush its replies before reading on.
    bconn.send(request(NOOP, opaque=0x10) + request(NOOP, magic=0x00))
    assert read_n(bconn, 24) == response(NOOP, opaque=0x10)
    assert_closed(bconn)


# ---------------------------------------------------------------- unknown opcodes


@pytest.mark.parametrize("opcode", [0x1F, 0x25, 0x2E, 0x2F, 0x30, 0x3C, 0x40, 0x89, 0xFF])
def test_unknown_opcode_without_body_keeps_connection(bconn, opcode):
    expect(bconn, request(opcode, opaque=0x33), error(opcode, UNKNOWN_COMMAND, opaque=0x33))
    assert_in_sync(bconn)


def test_unknown_opcode_value_body_is_swallowed(bconn):
    noop = request(NOOP, opaque=0xBAD)
    expect(bconn, request(0x40, value=noop * 3, opaque=1), error(0x40, UNKNOWN_COMMAND, opaque=1))
    assert_in_sync(bconn)


def test_unknown_opcode_swallows_body_arriving_later(bconn):
    bconn.send(header(0x40, bodylen=100, opaque=1))
    time.sleep(0.05)
    expect(bconn, b"z" * 100 + request(NOOP, opaque=2), error(0x40, UNKNOWN_COMMAND, opaque=1) + response(NOOP, opaque=2))


@pytest.mark.memcached_only
def test_unknown_opcode_reply_waits_for_the_swallowed_body(bconn):
    # memcached answers only once the swallowed body has been read.
    bconn.send(header(0x40, bodylen=100, opaque=1) + b"z" * 50)
    assert nothing_arrives(bconn)
    expect(bconn, b"z" * 50 + request(NOOP, opaque=2), error(0x40, UNKNOWN_COMMAND, opaque=1) + response(NOOP, opaque=2))


@pytest.mark.strata_only
def test_unknown_opcode_is_answered_before_its_body_arrives(bconn):
    # strata answers at once (same bytes, earlier); the body is still skipped.
    bconn.send(header(0x40, bodylen=100, opaque=1) + b"z" * 50)
    assert read_n(bconn, 24 + len(b"Unknown command")) == error(0x40, UNKNOWN_COMMAND, opaque=1)
    expect(bconn, b"z" * 50 + request(NOOP, opaque=2), response(NOOP, opaque=2))


def test_unknown_opcode_with_key_and_extras_swallows_body_length_after_them(bconn):
    # memcached has already consumed extras and key when it sees the unknown
    # opcode, and then swallows the full body length on top: a further
    # len(extras) + len(key) bytes of whatever follows.
    packet = request(0x40, key=b"abcd", extras=b"\0" * 4, opaque=1)
    padding = b"\xee" * 8
    expect(bconn, packet + padding + request(NOOP, opaque=2), error(0x40, UNKNOWN_COMMAND, opaque=1) + response(NOOP, opaque=2))
    assert_in_sync(bconn)


# ---------------------------------------------------------------- lengths


def test_body_shorter_than_key_is_unknown_command_and_closes(bconn):
    bconn.send(header(GET, keylen=5, bodylen=2, opaque=4) + b"abcde")
    assert read_raw(bconn) == error(GET, UNKNOWN_COMMAND, opaque=4)
    assert_closed(bconn)


def test_body_shorter_than_extras_plus_key_is_unknown_command_and_closes(bconn):
    bconn.send(header(SET, keylen=1, extlen=8, bodylen=5) + store_extras() + b"k")
    assert read_raw(bconn) == error(SET, UNKNOWN_COMMAND)
    assert_closed(bconn)


@pytest.mark.parametrize(
    "hdr, rest, reply",
    [
        (header(GET, keylen=5, bodylen=2, opaque=4), b"abcde", error(GET, UNKNOWN_COMMAND, opaque=4)),
        (header(GET, keylen=251, bodylen=251, opaque=4), b"k" * 251, error(GET, EINVAL, opaque=4)),
        (header(GET, keylen=1, extlen=4, bodylen=5, opaque=4), b"\0\0\0\0k", error(GET, EINVAL, opaque=4)),
    ],
    ids=["short-body", "key-too-long", "get-with-extras"],
)
def test_header_faults_are_judged_once_extras_and_key_arrived(bconn, hdr, rest, reply):
    # memcached reads extras + key (as the header gives them) before it looks
    # at the lengths: until they are there it waits, without replying.
    bconn.send(hdr)
    assert nothing_arrives(bconn)
    bconn.send(rest)
    assert read_raw(bconn) == reply
    assert_closed(bconn)


def test_get_with_extras_is_invalid_and_closes(bconn):
    expect(bconn, request(GET, "k", extras=b"\0\0\0\0", opaque=5), error(GET, EINVAL, opaque=5))
    assert_closed(bconn)


def test_get_with_value_is_invalid_and_closes(bconn):
    expect(bconn, request(GET, "k", b"v"), error(GET, EINVAL))
    assert_closed(bconn)


def test_set_with_wrong_extras_length_is_invalid_and_closes(bconn):
    expect(bconn, request(SET, "k", b"v", extras=b"\0\0\0\0"), error(SET, EINVAL))
    assert_closed(bconn)


def test_key_too_long_is_invalid_and_closes(bconn):
    expect(bconn, request(GET, b"k" * 251, opaque=6), error(GET, EINVAL, opaque=6))
    assert_closed(bconn)


def test_key_of_16000_bytes_is_invalid_and_closes(bconn):
    expect(bconn, request(GETK, b"k" * 16000), error(GETK, EINVAL))
    assert_closed(bconn)


def test_key_beyond_the_read_buffer_closes_without_reply(bconn):
    # memcached must hold header + extras + key in its 16 KB read buffer
    # before it can judge the packet; a longer one closes the connection
    # without any reply.
    try:
        bconn.send(request(GETK, b"k" * 65535))
    except (BrokenPipeError, ConnectionResetError):
        return  # closed, without a reply, while we were still sending
    assert_closed(bconn)


def test_key_of_250_bytes_is_fine(bconn):
    expect(bconn, request(GET, b"k" * 250), error(GET, KEY_ENOENT))
    assert_in_sync(bconn)


def test_get_without_key_is_invalid_and_closes(bconn):
    expect(bconn, request(GET, b"", opaque=7), error(GET, EINVAL, opaque=7))
    assert_closed(bconn)


def test_error_reply_echoes_opaque_but_not_cas(bconn):
    expect(bconn, request(GET, b"", opaque=0xFFFFFFFF, cas=0x1122334455667788), error(GET, EINVAL, opaque=0xFFFFFFFF))


# ---------------------------------------------------------------- body over -I


def test_body_over_item_limit_is_e2big_and_swallowed(bconn):
    value = b"x" * (2 * ITEM_MAX)
    expect(bconn, store(SET, "big", value, opaque=1), error(SET, E2BIG, opaque=1))
    assert_in_sync(bconn)


@pytest.mark.memcached_only
def test_e2big_reply_waits_for_the_swallowed_value(bconn):
    # memcached answers only once the whole value has been swallowed.
    vlen = 2 * ITEM_MAX
    hdr = header(SET, keylen=3, extlen=8, bodylen=8 + 3 + vlen, opaque=1) + store_extras() + b"big"
    bconn.send(hdr + b"x" * (vlen // 2))
    assert nothing_arrives(bconn)
    expect(bconn, b"x" * (vlen // 2) + request(NOOP, opaque=2), error(SET, E2BIG, opaque=1) + response(NOOP, opaque=2))


@pytest.mark.strata_only
def test_e2big_is_answered_before_the_value_arrives(bconn):
    # strata answers at once (same bytes, earlier); the value is still skipped.
    vlen = 2 * ITEM_MAX
    hdr = header(SET, keylen=3, extlen=8, bodylen=8 + 3 + vlen, opaque=1) + store_extras() + b"big"
    bconn.send(hdr + b"x" * (vlen // 2))
    assert read_n(bconn, 24 + len(b"Too large.")) == error(SET, E2BIG, opaque=1)
    expect(bconn, b"x" * (vlen // 2) + request(NOOP, opaque=2), response(NOOP, opaque=2))


@pytest.mark.memcached_only
def test_body_length_of_2_gib_or_more_is_e2big_without_swallowing(bconn):
    # memcached computes the value length as a signed int: from 2 GiB on it is
    # negative, so nothing is swallowed and the next bytes are a new packet.
    hdr = header(SET, keylen=3, extlen=8, bodylen=0x80000010, opaque=1) + store_extras() + b"big"
    expect(bconn, hdr + request(NOOP, opaque=2), error(SET, E2BIG, opaque=1) + response(NOOP, opaque=2))


@pytest.mark.strata_only
def test_body_length_of_2_gib_or_more_is_e2big_and_swallowed(bconn):
    # strata takes the length as unsigned, as the protocol defines it: the
    # value is refused and its bytes would be skipped, never buffered.
    hdr = header(SET, keylen=3, extlen=8, bodylen=0x80000010, opaque=1) + store_extras() + b"big"
    bconn.send(hdr + request(NOOP, opaque=2))
    assert read_n(bconn, 24 + len(b"Too large.")) == error(SET, E2BIG, opaque=1)
    assert nothing_arrives(bconn)


def test_quiet_store_over_item_limit_is_answered(bconn):
    expect(bconn, store(SETQ, "big", b"x" * (ITEM_MAX + 10), opaque=3), error(SETQ, E2BIG, opaque=3))
    assert_in_sync(bconn)


# ---------------------------------------------------------------- framing


def test_request_split_byte_by_byte(bconn):
    cas = set_ok(bconn, "k", b"value")
    packet = request(GETK, "k", opaque=0x0102)
    bconn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(len(packet)):
        bconn.send(packet[i : i + 1])
        time.sleep(0.005)
    assert read_raw(bconn) == response(GETK, key=b"k", extras=flags_extras(0), value=b"value", opaque=0x0102, cas=cas)


def test_header_split_across_sends(bconn):
    packet = store(SET, "k", b"hello", flags=5, opaque=9)
    bconn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for chunk in (packet[:3], packet[3:11], packet[11:23], packet[23:30], packet[30:]):
        bconn.send(chunk)
        time.sleep(0.02)
    r = parse(read_raw(bconn))
    assert (r.opcode, r.status, r.opaque) == (SET, SUCCESS, 9)
    assert get_value(bconn, "k") == (5, b"hello", r.cas)


def test_value_split_across_sends(bconn):
    value = bytes(range(256)) * 400
    packet = store(SET, "k", value)
    bconn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(0, len(packet), 7001):
        bconn.send(packet[i : i + 7001])
        time.sleep(0.002)
    r = parse(read_raw(bconn))
    assert r.status == SUCCESS
    assert get_value(bconn, "k") == (0, value, r.cas)


def test_many_pipelined_sets_in_one_send_are_answered_in_order(bconn):
    n = 500
    bconn.send(b"".join(store(SET, "k%d" % i, b"v%d" % i, opaque=i) for i in range(n)))
    for i in range(n):
        r = parse(read_raw(bconn))
        assert (r.opcode, r.status, r.opaque) == (SET, SUCCESS, i)
    assert_in_sync(bconn)


def test_many_pipelined_gets_in_one_send(bconn):
    n = 300
    cas = {}
    bconn.send(b"".join(store(SETQ, "k%d" % i, b"%d" % i * 50) for i in range(n)) + request(NOOP))
    assert read_raw(bconn) == response(NOOP)
    for i in range(0, n, 2):
        cas[i] = get_value(bconn, "k%d" % i)[2]
    hits = b"".join(request(GETKQ, "k%d" % i, opaque=i) for i in range(0, n, 2))
    misses = b"".join(request(GETKQ, "miss%d" % i) for i in range(50))
    bconn.send(hits + misses + request(NOOP, opaque=0xEEEE))
    expected = b"".join(
        response(GETKQ, key=b"k%d" % i, extras=flags_extras(0), value=b"%d" % i * 50, opaque=i, cas=cas[i])
        for i in range(0, n, 2)
    ) + response(NOOP, opaque=0xEEEE)
    assert read_n(bconn, len(expected), timeout=5.0) == expected
    assert_in_sync(bconn)


def test_pipelined_replies_larger_than_socket_buffers(bconn):
    value = b"x" * 100_000
    cas = set_ok(bconn, "big", value)
    n = 60  # ~6 MB of replies
    bconn.send(request(GET, "big", opaque=1) * n)
    one = response(GET, extras=flags_extras(0), value=value, opaque=1, cas=cas)
    for _ in range(n):
        assert read_raw(bconn, timeout=5.0) == one
    assert_in_sync(bconn)


def test_packet_length_fields_are_big_endian(bconn):
    # keylen 0x0001 and bodylen 0x00000001, not little-endian 0x0100...
    packet = struct.pack(">BBHBBHIIQ", 0x80, GET, 1, 0, 0, 0, 1, 0, 0) + b"k"
    expect(bconn, packet, error(GET, KEY_ENOENT))
