"""Protocol selection (-B auto|ascii|binary).

auto (the default) decides per connection from its first byte: 0x80 (a
binary request's magic) makes it binary, anything else text, and it stays
so. -B ascii reads everything as text; -B binary closes a connection whose
packet does not start with 0x80, without a reply.
"""

import re

import pytest

from binlib import (
    GET,
    NOOP,
    RES_MAGIC,
    STAT,
    SUCCESS,
    VERSION,
    assert_closed,
    assert_in_sync,
    call,
    expect,
    flags_extras,
    read_stats,
    request,
    response,
    set_ok,
)
from harness import Server
from wirelib import READ_TIMEOUT, read_line_or_partial, read_n, read_until_end, run_binary, stats


@pytest.fixture(scope="module")
def ascii_server():
    srv = Server(args=["-B", "ascii"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def binary_server():
    srv = Server(args=["-B", "binary"])
    yield srv
    srv.stop()


def connect(srv):
    return srv.connect(timeout=READ_TIMEOUT)


def text_line(c, data):
    c.send(data)
    return read_line_or_partial(c)


def is_version_line(line):
    return re.fullmatch(rb"VERSION \d+\.\d+\.\d+[-.\w]*\r\n", line) is not None


# ---------------------------------------------------------------- auto


def test_auto_binary_first_byte_speaks_binary(server):
    c = connect(server)
    r = call(c, request(VERSION, opaque=1))
    assert (r.magic, r.opcode, r.status, r.opaque) == (RES_MAGIC, VERSION, SUCCESS, 1)
    c.close()


def test_auto_text_first_byte_speaks_text(server):
    c = connect(server)
    assert is_version_line(text_line(c, b"version\r\n"))
    c.close()


def test_auto_decides_per_connection(server):
    b = connect(server)
    t = connect(server)
    assert is_version_line(text_line(t, b"version\r\n"))
    cas = set_ok(b, "sel", b"shared", flags=4)
    t.send(b"get sel\r\n")
    assert read_until_end(t) == b"VALUE sel 4 6\r\nshared\r\nEND\r\n"
    assert text_line(t, b"set sel 5 0 4\r\ntext\r\n") == b"STORED\r\n"
    r = call(b, request(GET, "sel"))
    assert (r.status, r.extras, r.value) == (SUCCESS, flags_extras(5), b"text")
    assert r.cas != cas
    b.close()
    t.close()


def test_auto_text_connection_reads_a_later_binary_packet_as_text(server):
    c = connect(server)
    assert is_version_line(text_line(c, b"version\r\n"))
    # NOOP's opcode byte is '\n': the line "\x80\n" is an unknown command.
    assert text_line(c, request(NOOP)) == b"ERROR\r\n"
    c.close()


def test_auto_binary_connection_closes_on_a_later_text_command(server):
    c = connect(server)
    expect(c, request(NOOP, opaque=3), response(NOOP, opaque=3))
    c.send(b"get aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")
    assert_closed(c)


def test_auto_response_magic_first_is_text(server):
    c = connect(server)
    assert text_line(c, request(NOOP, magic=0x81)) == b"ERROR\r\n"
    c.close()


def test_auto_settings_binding_protocol(server):
    c = connect(server)
    assert stats(c, "settings")["binding_protocol"] == "auto-negotiate"
    c.close()


# ---------------------------------------------------------------- -B ascii


def test_ascii_reads_binary_packet_as_text(ascii_server):
    c = connect(ascii_server)
    assert text_line(c, request(GET, "k") + b"\r\n") == b"ERROR\r\n"
    assert is_version_line(text_line(c, b"version\r\n"))
    c.close()


def test_ascii_binary_noop_with_newlines_is_several_text_lines(ascii_server):
    c = connect(ascii_server)
    # opcode 0x0a and an opaque of four 0x0a bytes: five lines, five errors.
    c.send(request(NOOP, opaque=0x0A0A0A0A))
    assert read_n(c, 35) == b"ERROR\r\n" * 5
    c.close()


def test_ascii_text_works(ascii_server):
    c = connect(ascii_server)
    assert text_line(c, b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    c.send(b"get k\r\n")
    assert read_until_end(c) == b"VALUE k 0 1\r\nv\r\nEND\r\n"
    c.close()


def test_ascii_settings_binding_protocol(ascii_server):
    c = connect(ascii_server)
    assert stats(c, "settings")["binding_protocol"] == "ascii"
    c.close()


# ---------------------------------------------------------------- -B binary


def test_binary_serves_binary(binary_server):
    c = connect(binary_server)
    cas = set_ok(c, "k", b"v")
    expect(c, request(GET, "k", opaque=2), response(GET, extras=flags_extras(0), value=b"v", opaque=2, cas=cas))
    assert_in_sync(c)
    c.close()


def test_binary_closes_text_command_without_reply(binary_server):
    c = connect(binary_server)
    c.send(b"get aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")
    assert_closed(c)


def test_binary_waits_for_a_whole_header_before_refusing_text(binary_server):
    c = connect(binary_server)
    c.send(b"version\r\n")  # 9 bytes: not yet a 24-byte header
    assert read_n(c, 1, timeout=0.3) == b""
    c.send(b"stats\r\nstats\r\nstats\r\n")
    assert_closed(c)


def test_binary_settings_binding_protocol(binary_server):
    c = connect(binary_server)
    c.send(request(STAT, "settings"))
    assert dict(read_stats(c)[0])["binding_protocol"] == "binary"
    c.close()


# ---------------------------------------------------------------- flag values


@pytest.mark.parametrize("value", ["foo", "BINARY", ""])
def test_invalid_protocol_is_refused_at_startup(value):
    p = run_binary(["-p", "0", "-B", value], timeout=2)
    assert p.returncode == 64, p.stderr
