"""Values of 64 KiB and more: strata reads them in two phases (its store
settles the read under the key's bucket lock, then the value is copied
without it), which must look exactly like any other read on every wire:
text get/gets/gat/touch, meta mg with flags and touch, binary GET/GETK/GAT/
TOUCH, and multi-gets mixing large and small values in request order."""

import pytest

from binlib import GAT, GET, GETK, GETKQ, NOOP, TOUCH, exptime_extras, flags_extras, read_packet, request
from harness import Server
from wirelib import READ_TIMEOUT, expect, gets_cas, read_line_or_partial, set_cmd, stored, value_reply

SIZES = [64 << 10, 300_000, 1000_000]


@pytest.fixture(scope="module")
def server():
    srv = Server(args=["-m", "64"])
    yield srv
    srv.stop()


def big(n, seed=0):
    return bytes((i * 7 + seed) % 251 for i in range(n))


@pytest.mark.parametrize("size", SIZES)
def test_get_gets_gat_and_touch(conn, size):
    value = big(size)
    stored(conn, "big", value, flags=5)
    expect(conn, b"get big\r\n", value_reply("big", value, flags=5) + b"END\r\n")
    cas = gets_cas(conn, "big")
    expect(conn, b"gets big\r\n", value_reply("big", value, flags=5, cas=cas) + b"END\r\n")
    expect(conn, b"gat 100 big\r\n", value_reply("big", value, flags=5) + b"END\r\n")
    expect(conn, b"touch big 200\r\n", b"TOUCHED\r\n")
    expect(conn, b"gets big\r\n", value_reply("big", value, flags=5, cas=cas) + b"END\r\n")


def test_multi_get_mixes_large_and_small_in_request_order(conn):
    values = {"a": b"small-a", "b": big(200_000, 1), "c": b"small-c", "d": big(70_000, 2)}
    for k, v in values.items():
        stored(conn, k, v)
    # zz is missing: a miss writes nothing in a multi-get.
    want = b"".join(value_reply(k, values[k]) for k in ["d", "a", "b", "c", "b"]) + b"END\r\n"
    expect(conn, b"get d a b zz c b\r\n", want)


def test_meta_get_with_flags_and_touch(conn):
    value = big(100_000, 3)
    conn.send(b"ms big %d F9 T0\r\n%s\r\n" % (len(value), value))
    assert read_line_or_partial(conn) == b"HD\r\n"
    expect(conn, b"mg big s v f t k Oab\r\n", b"VA %d s%d f9 t-1 kbig Oab\r\n%s\r\n" % (len(value), len(value), value))
    expect(conn, b"mg big v T30 t\r\n", b"VA %d t30\r\n%s\r\n" % (len(value), value))
    expect(conn, b"mg big s q\r\nmn\r\n", b"HD s%d\r\nMN\r\n" % len(value))


def test_pipelined_sets_and_gets_of_large_values(conn):
    values = [big(80_000 + i, i) for i in range(5)]
    request_bytes = b"".join(set_cmd("p%d" % i, v) for i, v in enumerate(values))
    request_bytes += b"".join(b"get p%d\r\n" % i for i in range(5))
    want = b"STORED\r\n" * 5 + b"".join(value_reply("p%d" % i, v) + b"END\r\n" for i, v in enumerate(values))
    expect(conn, request_bytes, want)


def test_binary_get_getk_gat_touch(server, conn):
    value = big(150_000, 4)
    stored(conn, "bin", value, flags=3)
    cas = gets_cas(conn, "bin")
    # A connection's first byte picks its protocol: binary needs its own.
    conn = server.connect(timeout=READ_TIMEOUT)
    conn.send(request(GET, "bin") + request(GETK, "bin") + request(GAT, "bin", extras=exptime_extras(100)))
    for opcode, key in [(GET, b""), (GETK, b"bin"), (GAT, b"")]:
        r = read_packet(conn)
        assert (r.opcode, r.status, r.key, r.extras, r.value, r.cas) == (opcode, 0, key, flags_extras(3), value, cas)
    conn.send(request(TOUCH, "bin", extras=exptime_extras(0)))
    r = read_packet(conn)
    assert (r.status, r.extras, r.cas) == (0, flags_extras(3), cas)


def test_binary_quiet_multi_get_with_large_values(server, conn):
    values = {"q1": big(90_000, 5), "q2": b"tiny", "q3": big(65_536, 6)}
    for k, v in values.items():
        stored(conn, k, v)
    conn = server.connect(timeout=READ_TIMEOUT)
    conn.send(b"".join(request(GETKQ, k) for k in ["q1", "missing", "q2", "q3"]) + request(NOOP))
    for k in ["q1", "q2", "q3"]:
        r = read_packet(conn)
        assert (r.opcode, r.key, r.value) == (GETKQ, k.encode(), values[k])
    assert read_packet(conn).opcode == NOOP
