"""Helpers for the binary-protocol wire tests (test_binary_*.py, SASL and
protocol selection).

This module owns the binary protocol's packet layout as the tests see it:
opcode and status constants, composing request packets (with every header
field overridable, so malformed packets can be built), reading exactly one
response packet and parsing it into a `Response`, building the exact bytes
of an expected response for byte-for-byte comparison, and checking that no
stray reply is pending (a NOOP's reply must be the very next packet).

Layout (memcached's protocol_binary.h), big-endian throughout:

    magic(1) opcode(1) keylen(2) extlen(1) datatype(1) vbucket|status(2)
    bodylen(4) opaque(4) cas(8)  then extras, key, value (bodylen in all)
"""

import collections
import struct

from wirelib import READ_TIMEOUT, _recv_until, read_n

HEADER = struct.Struct(">BBHBBHIIQ")
HEADER_LEN = HEADER.size  # 24

REQ_MAGIC = 0x80
RES_MAGIC = 0x81

# ---------------------------------------------------------------- opcodes

GET = 0x00
SET = 0x01
ADD = 0x02
REPLACE = 0x03
DELETE = 0x04
INCREMENT = 0x05
DECREMENT = 0x06
QUIT = 0x07
FLUSH = 0x08
GETQ = 0x09
NOOP = 0x0A
VERSION = 0x0B
GETK = 0x0C
GETKQ = 0x0D
APPEND = 0x0E
PREPEND = 0x0F
STAT = 0x10
SETQ = 0x11
ADDQ = 0x12
REPLACEQ = 0x13
DELETEQ = 0x14
INCREMENTQ = 0x15
DECREMENTQ = 0x16
QUITQ = 0x17
FLUSHQ = 0x18
APPENDQ = 0x19
PREPENDQ = 0x1A
VERBOSITY = 0x1B
TOUCH = 0x1C
GAT = 0x1D
GATQ = 0x1E
SASL_LIST_MECHS = 0x20
SASL_AUTH = 0x21
SASL_STEP = 0x22
GATK = 0x23
GATKQ = 0x24

# ---------------------------------------------------------------- statuses

SUCCESS = 0x00
KEY_ENOENT = 0x01
KEY_EEXISTS = 0x02
E2BIG = 0x03
EINVAL = 0x04
NOT_STORED = 0x05
DELTA_BADVAL = 0x06
AUTH_ERROR = 0x20
AUTH_CONTINUE = 0x21
UNKNOWN_COMMAND = 0x81
ENOMEM = 0x82

# The body memcached sends with each error status (write_bin_error).
MESSAGES = {
    KEY_ENOENT: b"Not found",
    KEY_EEXISTS: b"Data exists for key.",
    E2BIG: b"Too large.",
    EINVAL: b"Invalid arguments",
    NOT_STORED: b"Not stored.",
    DELTA_BADVAL: b"Non-numeric server-side value for incr or decr",
    AUTH_ERROR: b"Auth failure.",
    UNKNOWN_COMMAND: b"Unknown command",
    ENOMEM: b"Out of memory",
}

Response = collections.namedtuple(
    "Response",
    "magic opcode keylen extraslen datatype status bodylen opaque cas extras key value",
)

# ---------------------------------------------------------------- composing


def _b(x):
    return x.encode() if isinstance(x, str) else x


def header(opcode, keylen=0, extlen=0, bodylen=0, opaque=0, cas=0, vbucket=0, magic=REQ_MAGIC, datatype=0):
    """Just the 24 header bytes, every field given explicitly."""
    return HEADER.pack(magic, opcode, keylen, extlen, datatype, vbucket, bodylen, opaque, cas)


def request(
    opcode,
    key=b"",
    value=b"",
    extras=b"",
    opaque=0,
    cas=0,
    vbucket=0,
    magic=REQ_MAGIC,
    datatype=0,
    keylen=None,
    extlen=None,
    bodylen=None,
):
    """A whole request packet. keylen/extlen/bodylen default to the real
    lengths; pass them to build a header that lies about its body."""
    key, value, extras = _b(key), _b(value), _b(extras)
    hdr = header(
        opcode,
        keylen=len(key) if keylen is None else keylen,
        extlen=len(extras) if extlen is None else extlen,
        bodylen=len(extras) + len(key) + len(value) if bodylen is None else bodylen,
        opaque=opaque,
        cas=cas,
        vbucket=vbucket,
        magic=magic,
        datatype=datatype,
    )
    return hdr + extras + key + value


def response(opcode, status=SUCCESS, key=b"", value=b"", extras=b"", opaque=0, cas=0):
    """The exact bytes of an expected response packet."""
    key, value, extras = _b(key), _b(value), _b(extras)
    body = extras + key + value
    return HEADER.pack(RES_MAGIC, opcode, len(key), len(extras), 0, status, len(body), opaque, cas) + body


def error(opcode, status, opaque=0):
    """The exact bytes of an error response: status and memcached's message."""
    return response(opcode, status, value=MESSAGES[status], opaque=opaque)


def store_extras(flags=0, exptime=0):
    return struct.pack(">II", flags, exptime & 0xFFFFFFFF)


def arith_extras(delta, initial=0, exptime=0):
    return struct.pack(">QQI", delta, initial, exptime & 0xFFFFFFFF)


def exptime_extras(exptime):
    """Extras of TOUCH/GAT*, and of FLUSH with a delay."""
    return struct.pack(">I", exptime & 0xFFFFFFFF)


def flags_extras(flags):
    """The 4-byte extras of a get hit."""
    return struct.pack(">I", flags)


def u64(n):
    return struct.pack(">Q", n)


def store(opcode, key, value, flags=0, exptime=0, cas=0, opaque=0):
    """SET/ADD/REPLACE(Q) request (APPEND/PREPEND take no extras: use request)."""
    return request(opcode, key, value, extras=store_extras(flags, exptime), cas=cas, opaque=opaque)


def arith(opcode, key, delta, initial=0, exptime=0, cas=0, opaque=0):
    return request(opcode, key, extras=arith_extras(delta, initial, exptime), cas=cas, opaque=opaque)


def sasl_plain(user, password, authzid=b""):
    """A SASL PLAIN message (RFC 4616): authzid NUL authcid NUL passwd."""
    return _b(authzid) + b"\0" + _b(user) + b"\0" + _b(password)


# ---------------------------------------------------------------- reading


def read_raw(c, timeout=READ_TIMEOUT):
    """The raw bytes of exactly one response packet. On EOF or timeout,
    fails showing what did arrive."""
    _recv_until(c, lambda buf: len(buf) >= HEADER_LEN, timeout)
    if len(c.buf) < HEADER_LEN:
        got, c.buf = c.buf, b""
        raise AssertionError(f"expected a {HEADER_LEN}-byte response header, got {got!r}")
    bodylen = struct.unpack(">I", c.buf[8:12])[0]
    need = HEADER_LEN + bodylen
    _recv_until(c, lambda buf: len(buf) >= need, timeout)
    if len(c.buf) < need:
        got, c.buf = c.buf, b""
        raise AssertionError(f"expected a {need}-byte response packet, got {got!r}")
    out, c.buf = c.buf[:need], c.buf[need:]
    return out


def parse(raw):
    """Parse one response packet's bytes into a Response."""
    magic, opcode, keylen, extlen, datatype, status, bodylen, opaque, cas = HEADER.unpack(raw[:HEADER_LEN])
    body = raw[HEADER_LEN:]
    assert len(body) == bodylen, raw
    return Response(
        magic,
        opcode,
        keylen,
        extlen,
        datatype,
        status,
        bodylen,
        opaque,
        cas,
        body[:extlen],
        body[extlen : extlen + keylen],
        body[extlen + keylen :],
    )


def read_packet(c, timeout=READ_TIMEOUT):
    """Exactly one response packet, parsed."""
    return parse(read_raw(c, timeout))


def call(c, packet, timeout=READ_TIMEOUT):
    """Send one request and return the parsed reply."""
    c.send(packet)
    return read_packet(c, timeout)


def expect(c, packet, expected):
    """Send packet(s) and assert the next reply bytes are exactly expected
    (one or more concatenated packets)."""
    c.send(packet)
    got = read_n(c, len(expected))
    assert got == expected, f"\n got: {got!r}\nwant: {expected!r}"


def read_stats(c, timeout=READ_TIMEOUT):
    """Packets of a STAT reply up to and including the empty-key terminator;
    returns (list of (key, value) pairs, terminator Response)."""
    pairs = []
    while True:
        r = read_packet(c, timeout)
        assert r.magic == RES_MAGIC and r.opcode == STAT and r.status == SUCCESS, r
        if r.keylen == 0 and r.bodylen == 0:
            return pairs, r
        pairs.append((r.key.decode(), r.value.decode()))


def assert_in_sync(c, opaque=0x5EC0FFEE):
    """No reply bytes are pending: a NOOP's reply is the very next packet."""
    c.send(request(NOOP, opaque=opaque))
    got = read_raw(c)
    assert got == response(NOOP, opaque=opaque), f"stray reply before the NOOP's: {got!r}"


def assert_closed(c, timeout=2.0):
    """The server closed the connection without sending anything more."""
    closed = c.is_closed(timeout)
    assert closed, f"connection still open after {timeout}s; pending: {c.buf!r}"
    assert c.buf == b"", f"bytes before the close: {c.buf!r}"


def get_value(c, key):
    """GET key: (flags, value, cas), or None on a miss."""
    r = call(c, request(GET, key))
    if r.status == KEY_ENOENT:
        return None
    assert r.status == SUCCESS, r
    return struct.unpack(">I", r.extras)[0], r.value, r.cas


def set_ok(c, key, value, flags=0, exptime=0):
    """SET and assert success; returns the new CAS."""
    r = call(c, store(SET, key, value, flags, exptime))
    assert (r.status, r.bodylen) == (SUCCESS, 0), r
    assert r.cas != 0, r
    return r.cas


def text_ttl(server, key):
    """An item's remaining TTL as the text meta protocol reports it on a
    separate connection: -1 for none, None when the item is missing."""
    c = server.connect(timeout=READ_TIMEOUT)
    c.send(b"mg " + _b(key) + b" t\r\n")
    line = c.read_line()
    c.close()
    if line == b"EN\r\n":
        return None
    assert line.startswith(b"HD t"), line
    return int(line[4:-2])


def fresh_conn(server):
    """Generator for a fixture: a binary connection to server with the cache
    emptied by a binary FLUSH (so the connection is binary from its first
    byte, whatever -B auto picks)."""
    c = server.connect(timeout=READ_TIMEOUT)
    c.send(request(FLUSH, opaque=0xF1F1F1F1))
    assert read_raw(c) == response(FLUSH, opaque=0xF1F1F1F1)
    yield c
    c.close()
