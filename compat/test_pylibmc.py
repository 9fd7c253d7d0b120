"""Compatibility with pylibmc, Python's client over libmemcached (C).

pylibmc 1.6.3 is built against Debian's libmemcached (1.1.4, package
libmemcached-dev). Each behaviour runs over the text protocol and over the
binary protocol (``binary=True``), on one server per module; a further test
spreads keys over three servers with ketama consistent hashing.

What the library stores is checked over the text protocol on a raw
connection (``raw_get``): pylibmc's flags (0 bytes, 1 pickle, 4 integer,
8 zlib, 16 text) and the bytes it wrote, so a test sees the item itself and
not only what the library makes of it.

Some results depend on the protocol but not on the server (they are the same
against Debian's memcached): a failed ``replace`` or ``cas`` of a missing key
is ``False`` over text and ``NotFound`` over binary, libmemcached sends
noreply requests as quiet opcodes over binary and with ``noreply`` over text,
and an ``incr`` of a non-numeric value fails with a different exception.
"""

import random

import pylibmc
import pytest

import harness

# libmemcached's exceptions for a non-numeric incr: text answers
# "CLIENT_ERROR cannot increment or decrement non-numeric value", binary
# status 0x06, which libmemcached 1.1.4 reports as an unknown read failure.
NON_NUMERIC = {"text": pylibmc.ClientError, "binary": pylibmc.UnknownReadFailure}
NEAR_1MB = 1024 * 1024 - 4096

# pylibmc's flag bits.
F_PICKLE, F_INTEGER, F_ZLIB, F_TEXT = 1, 4, 8, 16


def address(srv):
    return f"127.0.0.1:{srv.port}"


def make_client(servers, protocol, **behaviors):
    behaviors.setdefault("cas", True)
    # Timeouts in milliseconds: a server that stops answering fails the test.
    behaviors.setdefault("connect_timeout", 5000)
    behaviors.setdefault("send_timeout", 5_000_000)  # microseconds
    behaviors.setdefault("receive_timeout", 5_000_000)
    return pylibmc.Client([address(s) for s in servers], binary=protocol == "binary", behaviors=behaviors)


def raw_get(srv, key):
    """The item as the text protocol shows it: (flags, bytes), or None."""
    conn = srv.connect()
    try:
        reply = conn.call(f"get {key}\r\n".encode(), b"END\r\n")
    finally:
        conn.close()
    if reply == b"END\r\n":
        return None
    head, rest = reply.split(b"\r\n", 1)
    _, name, flags, length = head.split(b" ")
    assert name == key.encode()
    assert rest == rest[: int(length)] + b"\r\nEND\r\n", reply
    return int(flags), rest[: int(length)]


def raw_command(srv, line):
    conn = srv.connect()
    try:
        return conn.call(line)
    finally:
        conn.close()


@pytest.fixture(params=["text", "binary"])
def protocol(request):
    return request.param


@pytest.fixture
def mc(server, protocol):
    c = make_client([server], protocol)
    assert c.flush_all() is True
    yield c
    c.disconnect_all()


def test_set_get_and_missing_keys(mc, server):
    assert mc.set("k", b"hello") is True
    assert mc.get("k") == b"hello"
    assert mc.set("k", b"world") is True
    assert mc.get("k") == b"world"
    assert mc.get("missing") is None
    assert mc.set("empty", b"") is True
    assert mc.get("empty") == b""
    assert raw_get(server, "k") == (0, b"world")
    assert raw_get(server, "empty") == (0, b"")
    # A 250-byte key is the longest; every byte value but controls and space.
    long_key = "x" * 250
    assert mc.set(long_key, b"long") is True
    assert mc.get(long_key) == b"long"
    with pytest.raises(ValueError, match="key length 251 too long"):
        mc.set("x" * 251, b"v")
    all_bytes = bytes(range(256))
    assert mc.set("bin", all_bytes) is True
    assert mc.get("bin") == all_bytes


def test_values_are_serialised_with_flags(mc, server):
    assert mc.set("s", "str€") is True
    assert mc.set("i", 42) is True
    assert mc.set("big-int", 2**70) is True
    assert mc.set("obj", {"a": [1, 2]}) is True
    assert mc.get("s") == "str€"
    assert mc.get("i") == 42
    assert mc.get("big-int") == 2**70
    assert mc.get("obj") == {"a": [1, 2]}
    assert raw_get(server, "s") == (F_TEXT, "str€".encode())
    assert raw_get(server, "i") == (F_INTEGER, b"42")
    assert raw_get(server, "big-int") == (F_INTEGER, str(2**70).encode())
    flags, data = raw_get(server, "obj")
    assert flags == F_PICKLE and data.startswith(b"\x80")
    # min_compress_len: zlib over the threshold, flag 8 on top of the type's.
    text = "abc" * 2000
    assert mc.set("z", text, min_compress_len=100) is True
    assert mc.get("z") == text
    flags, data = raw_get(server, "z")
    assert flags == F_TEXT | F_ZLIB and len(data) < 100


def test_set_multi_get_multi(mc, server):
    values = {f"key{i}": f"value-{i}".encode() for i in range(100)}
    assert mc.set_multi(values) == []
    keys = list(values) + [f"nope{i}" for i in range(20)]
    random.Random(1).shuffle(keys)
    assert mc.get_multi(keys) == values
    assert mc.get_multi([]) == {}
    assert mc.get_multi(["nope1"]) == {}
    # key_prefix is prepended on the wire and stripped from the result.
    assert mc.set_multi({"a": b"1", "b": b"2"}, key_prefix="p:") == []
    assert mc.get_multi(["a", "b", "c"], key_prefix="p:") == {"a": b"1", "b": b"2"}
    assert raw_get(server, "p:a") == (0, b"1")
    assert raw_get(server, "a") is None


def test_delete_and_delete_multi(mc):
    assert mc.set_multi({"d1": b"1", "d2": b"2", "d3": b"3"}) == []
    assert mc.delete("d1") is True
    assert mc.delete("d1") is False
    assert mc.get("d1") is None
    # delete_multi is True only if every key was deleted.
    assert mc.delete_multi(["d2"]) is True
    assert mc.delete_multi(["d2", "d3"]) is False
    assert mc.get_multi(["d1", "d2", "d3"]) == {}


def test_add_and_add_multi(mc):
    assert mc.add("a", b"1") is True
    assert mc.add("a", b"2") is False
    assert mc.get("a") == b"1"
    # add_multi returns the keys that were not added.
    assert mc.add_multi({"a": b"x", "b": b"y"}) == ["a"]
    assert mc.get_multi(["a", "b"]) == {"a": b"1", "b": b"y"}


def test_replace(mc, protocol):
    if protocol == "text":
        assert mc.replace("r", b"x") is False
    else:
        with pytest.raises(pylibmc.NotFound):
            mc.replace("r", b"x")
    assert mc.get("r") is None
    assert mc.set("r", b"x") is True
    assert mc.replace("r", b"y") is True
    assert mc.get("r") == b"y"


def test_append_prepend(mc, server):
    assert mc.set("ap", b"mid", 5) is True
    assert mc.append("ap", b"-end") is True
    assert mc.prepend("ap", b"start-") is True
    assert mc.get("ap") == b"start-mid-end"
    # The flags of the item are kept.
    assert raw_get(server, "ap") == (0, b"start-mid-end")
    assert mc.append("nokey", b"x") is False
    assert mc.prepend("nokey", b"x") is False
    assert mc.get("nokey") is None


def test_incr_decr(mc, server):
    with pytest.raises(pylibmc.NotFound):
        mc.incr("n")
    with pytest.raises(pylibmc.NotFound):
        mc.decr("n")
    assert mc.set("n", 10) is True
    assert mc.incr("n") == 11
    assert mc.incr("n", 5) == 16
    assert mc.decr("n", 6) == 10
    # decr stops at 0; incr wraps at 2**64.
    assert mc.decr("n", 100) == 0
    assert mc.set("max", 2**64 - 1) is True
    assert mc.incr("max", 2) == 1
    assert mc.get("n") == 0
    # A decr that shortens the number pads it with spaces in place
    # (memcached's way): "10" becomes "0 ".
    assert raw_get(server, "n") == (F_INTEGER, b"0 ")
    # A length change in place: 99 -> 100 is one byte longer.
    assert mc.set("grow", b"99") is True
    assert mc.incr("grow") == 100
    assert raw_get(server, "grow") == (0, b"100")
    assert mc.set_multi({"i1": 1, "i2": 2}) == []
    assert mc.incr_multi(["i1", "i2"], delta=3) is None
    assert mc.get_multi(["i1", "i2"]) == {"i1": 4, "i2": 5}


def test_incr_non_numeric(server, protocol):
    # Its own client: over binary libmemcached takes the error status for a
    # failed read and marks the server failed for that client.
    c = make_client([server], protocol)
    assert c.set("word", b"abc") is True
    with pytest.raises(NON_NUMERIC[protocol]):
        c.incr("word")
    c.disconnect_all()
    assert raw_get(server, "word") == (0, b"abc")


def test_gets_and_cas(mc, protocol):
    assert mc.set("c", b"v1") is True
    value, token = mc.gets("c")
    assert value == b"v1" and isinstance(token, int) and token > 0
    assert mc.gets("c") == (b"v1", token)
    assert mc.cas("c", b"v2", token) is True
    assert mc.get("c") == b"v2"
    # The token changed with the write: the old one no longer matches.
    assert mc.cas("c", b"v3", token) is False
    value, token2 = mc.gets("c")
    assert value == b"v2" and token2 != token
    assert mc.set("c", b"v4") is True
    assert mc.cas("c", b"v5", token2) is False
    assert mc.get("c") == b"v4"
    assert mc.gets("missing") == (None, None)
    # cas of a missing key: NOT_FOUND, which libmemcached raises over both.
    with pytest.raises(pylibmc.NotFound):
        mc.cas("missing", b"x", token)
    assert mc.get("missing") is None


def test_cas_needs_the_cas_behaviour(server, protocol):
    c = make_client([server], protocol, cas=False)
    with pytest.raises(ValueError, match="gets without cas behavior"):
        c.gets("c")


def ttl(srv, key):
    """The item's remaining time to live as the meta protocol shows it (-1: none)."""
    reply = raw_command(srv, f"mg {key} t\r\n".encode())
    assert reply.startswith(b"HD t") and reply.endswith(b"\r\n"), reply
    return int(reply[4:-2])


def test_touch_and_expiry(server, protocol):
    # libmemcached 1.1.4 over binary reads on after a successful TOUCH's reply
    # (it has 4 bytes of extras, the flags, from memcached too) until its
    # poll timeout: a short one keeps the test quick; touch still answers
    # True.
    timeout = 300 if protocol == "binary" else 5000  # milliseconds
    mc = make_client([server], protocol, _poll_timeout=timeout)
    assert mc.set("t", b"v") is True
    assert ttl(server, "t") == -1
    assert mc.touch("t", 100) is True
    assert 90 <= ttl(server, "t") <= 100
    assert mc.touch("missing", 100) is False
    assert mc.get("missing") is None
    assert mc.set("ttl", b"v", time=200) is True
    assert 199 <= ttl(server, "ttl") <= 200
    # touch to 0: no expiry again.
    assert mc.touch("ttl", 0) is True
    assert ttl(server, "ttl") == -1
    assert mc.get_multi(["t", "ttl"]) == {"t": b"v", "ttl": b"v"}
    mc.disconnect_all()


def test_flush_all(mc):
    assert mc.set_multi({"f1": b"1", "f2": b"2"}) == []
    assert mc.flush_all() is True
    assert mc.get_multi(["f1", "f2"]) == {}
    assert mc.add("f1", b"again") is True
    assert mc.get("f1") == b"again"


def test_large_values(mc):
    big = random.Random(2).randbytes(NEAR_1MB)
    assert mc.set("big", big) is True
    assert mc.get("big") == big
    assert mc.get_multi(["big", "small"]) == {"big": big}
    # Over the item size limit (-I 1m): the server refuses and the connection
    # stays in step.
    with pytest.raises(pylibmc.TooBig):
        mc.set("huge", b"x" * (2 * 1024 * 1024))
    assert mc.get("huge") is None
    assert mc.set("after", b"ok") is True
    assert mc.get("after") == b"ok"


def test_noreply(server, protocol):
    # _noreply: text requests carry "noreply", binary ones are the quiet
    # opcodes (SETQ, DELETEQ, INCREMENTQ); every call returns at once.
    c = make_client([server], protocol, _noreply=True)
    assert c.flush_all() is True
    values = {f"nr{i}": f"v{i}".encode() for i in range(50)}
    for k, v in values.items():
        assert c.set(k, v) is True
    assert c.get_multi(list(values)) == values
    assert c.set("n", 7) is True
    c.incr("n", 5)
    assert c.get("n") == 12
    for i in range(25):
        assert c.delete(f"nr{i}") is True
    assert c.get_multi(list(values)) == {f"nr{i}": f"v{i}".encode() for i in range(25, 50)}
    assert c.append("nr30", b"+") is True
    assert c.get("nr30") == b"v30+"
    c.disconnect_all()


def test_stats(mc, server):
    ((name, before),) = mc.get_stats()
    assert name == f"127.0.0.1:{server.port} (0)".encode()
    assert int(before["pid"]) == server.pid()
    version = raw_command(server, b"version\r\n")
    assert version == b"VERSION " + before["version"] + b"\r\n"
    assert mc.set("s1", b"x") is True
    assert mc.get("s1") == b"x"
    assert mc.get("s-missing") is None
    ((_, after),) = mc.get_stats()
    delta = {k: int(after[k]) - int(before[k]) for k in ("cmd_set", "cmd_get", "get_hits", "get_misses")}
    assert delta == {"cmd_set": 1, "cmd_get": 2, "get_hits": 1, "get_misses": 1}
    assert after["limit_maxbytes"] == str(64 * 1024 * 1024).encode()


def test_clone_and_reconnect(mc):
    assert mc.set("k", b"v") is True
    other = mc.clone()
    assert other.get("k") == b"v"
    mc.disconnect_all()
    assert mc.get("k") == b"v"
    assert other.set("k", b"w") is True
    assert mc.get("k") == b"w"
    other.disconnect_all()


@pytest.fixture(scope="module")
def three_servers():
    servers = [harness.Server() for _ in range(3)]
    yield servers
    alive = [s.proc.poll() is None for s in servers]
    for s in servers:
        s.stop()
    assert all(alive), "a server exited during the tests"


def test_ketama_spreads_keys_over_three_servers(three_servers, protocol):
    c = make_client(three_servers, protocol, ketama=True)
    assert c.get_behaviors()["ketama"] == 1
    assert c.flush_all() is True
    values = {f"ketama-{i}": f"v{i}".encode() for i in range(90)}
    assert c.set_multi(values) == []
    # Each key is on exactly one server, and every server has some.
    placed = {}
    for key, value in values.items():
        holders = [i for i, s in enumerate(three_servers) if raw_get(s, key) is not None]
        assert len(holders) == 1, (key, holders)
        assert raw_get(three_servers[holders[0]], key) == (0, value)
        placed[key] = holders[0]
    # (The ports, and so the ring, differ from run to run: only "some".)
    counts = [list(placed.values()).count(i) for i in range(3)]
    assert all(n >= 1 for n in counts), counts
    # get_multi gathers them from the three servers.
    assert c.get_multi(list(values) + ["ketama-missing"]) == values
    # Consistent hashing: without the third server, keys of the other two
    # are still found where they are.
    two = make_client(three_servers[:2], protocol, ketama=True)
    on_two = {k: v for k, v in values.items() if placed[k] != 2}
    assert two.get_multi(list(on_two)) == on_two
    # Deletes and incr go to the key's server.
    assert c.delete_multi(list(values)[:30]) is True
    assert c.get_multi(list(values)[:30]) == {}
    assert c.set("ketama-n", 1) is True
    assert c.incr("ketama-n", 41) == 42
    holders = [s for s in three_servers if raw_get(s, "ketama-n") is not None]
    assert len(holders) == 1 and raw_get(holders[0], "ketama-n") == (F_INTEGER, b"42")
    two.disconnect_all()
    c.disconnect_all()
