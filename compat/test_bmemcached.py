"""Compatibility with python-binary-memcached (``bmemcached``), a binary-protocol client.

Every public method of ``bmemcached.Client`` (an alias of ReplicatingClient)
is exercised with real results: add, cas, decr, delete, delete_multi,
disconnect_all, enable_retry_delay, flush_all, get, get_multi, gets, incr,
replace, servers, set, set_multi, set_multi_cas, set_servers, stats; so are
DistributedClient (the same methods, keys spread over servers), the value
serialisation (str, bytes, int, pickled objects, zlib or another compression
module, custom picklers, raw_data mode), and SASL PLAIN authentication.
``Protocol.authenticate`` and ``Protocol.noop``, reached through
``Client.servers``, are covered too.

Not covered: ``tls_context`` (neither strata nor Debian's memcached here serves
TLS). bmemcached 0.33.0 has no append, prepend, touch, gat or version methods,
so there is nothing of the library to test for those; storing ``None`` is not
tested because ``get`` cannot tell a stored None from a miss.

Where the library reads the cache's bytes and flags differently from another
client, the raw item is checked over the text protocol (``raw_get``) on the
plain server, so a test sees what bmemcached actually stored.

Against a server started with ``-S``, users come from a ``user:password`` file
in MEMCACHED_SASL_PWDB (strata). Debian's memcached is built with Cyrus SASL
but without its own pwdb support, so for WIRE_TARGET=memcached the same users
go in a sasldb made with saslpasswd2 (Debian package sasl2-bin), and
SASL_CONF_PATH points at a memcached.conf offering only PLAIN.
"""

import bz2
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import time
import warnings
import zlib

import bmemcached
import pytest
from bmemcached.exceptions import InvalidCredentials, MemcachedException

import harness

USERS = {"alice": "secret", "bob": "hunter2"}

# Status codes of the binary protocol, as MemcachedException.code carries them.
E2BIG = 0x03
EINVAL = 0x04
NON_NUMERIC = 0x06
AUTH_ERROR = 0x20

# bmemcached's flag bits (Protocol.FLAGS).
F_OBJECT, F_INTEGER, F_COMPRESSED, F_BINARY = 1, 2, 8, 16


def address(srv):
    return f"127.0.0.1:{srv.port}"


def make_bm(srv_or_addresses, **kw):
    kw.setdefault("socket_timeout", 5)
    if isinstance(srv_or_addresses, harness.Server):
        srv_or_addresses = [address(srv_or_addresses)]
    return bmemcached.Client(srv_or_addresses, **kw)


@pytest.fixture
def bm(server):
    """A bmemcached Client on the module's server, cache flushed."""
    c = make_bm(server)
    assert c.flush_all() is True
    yield c
    c.disconnect_all()


def raw_get(srv, key):
    """(flags, data, cas) of an item read over the text protocol, or None."""
    conn = srv.connect()
    try:
        k = key.encode() if isinstance(key, str) else key
        conn.send(b"gets " + k + b"\r\n")
        line = conn.read_line()
        if line == b"END\r\n":
            return None
        m = re.fullmatch(rb"VALUE (\S+) (\d+) (\d+) (\d+)\r\n", line)
        assert m, line
        data = conn.read_exact(int(m.group(3)) + 2)[:-2]
        assert conn.read_line() == b"END\r\n"
        return int(m.group(2)), data, int(m.group(4))
    finally:
        conn.close()


def raw_set(srv, key, data, flags=0):
    conn = srv.connect()
    try:
        reply = conn.call(b"set %s %d 0 %d\r\n%s\r\n" % (key.encode(), flags, len(data), data))
        assert reply == b"STORED\r\n"
    finally:
        conn.close()


def stats_of(client):
    """The single server's stats dict (bytes values)."""
    (st,) = client.stats().values()
    return st


def sasl_env(directory, kind, users=USERS):
    """Environment giving a server started with -S the users."""
    pwdb = directory / "pwdb"
    pwdb.write_text("".join(f"{u}:{p}\n" for u, p in users.items()))
    env = dict(os.environ, MEMCACHED_SASL_PWDB=str(pwdb))
    if kind == "memcached":
        saslpasswd2 = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"
        if not os.path.exists(saslpasswd2):
            pytest.skip("memcached's SASL needs saslpasswd2 (Debian package sasl2-bin)")
        sasldb = directory / "sasldb2"
        for user, password in users.items():
            subprocess.run(
                [saslpasswd2, "-p", "-c", "-a", "memcached", "-f", str(sasldb), user],
                input=password.encode(),
                check=True,
                capture_output=True,
            )
        (directory / "memcached.conf").write_text(f"mech_list: plain\nsasldb_path: {sasldb}\n")
        env["SASL_CONF_PATH"] = str(directory)
    return env


# --- values and their serialisation ---------------------------------------------


def test_str_values(bm, server):
    assert bm.set("k", "hello") is True
    assert bm.get("k") == "hello"
    assert raw_get(server, "k")[:2] == (0, b"hello")
    assert bm.set("k", "héllo €") is True
    assert bm.get("k") == "héllo €"
    assert raw_get(server, "k")[:2] == (0, "héllo €".encode())
    assert bm.set("empty", "") is True
    assert bm.get("empty") == ""


def test_bytes_values_are_flagged_binary(bm, server):
    every_byte = bytes(range(256))
    assert bm.set("b", every_byte, compress_level=0) is True
    assert bm.get("b") == every_byte
    assert raw_get(server, "b")[:2] == (F_BINARY, every_byte)
    assert bm.set("e", b"") is True
    assert bm.get("e") == b""


def test_int_values(bm, server):
    for value, text in [(42, b"42"), (-7, b"-7"), (0, b"0"), (2**70, b"1180591620717411303424")]:
        assert bm.set("i", value) is True
        got = bm.get("i")
        assert got == value and type(got) is int
        assert raw_get(server, "i")[:2] == (F_INTEGER, text)


def test_objects_are_pickled(bm, server):
    values = [
        {"a": 1, "b": [1, 2, 3]},
        [1, "two", 3.0],
        (1, 2),
        3.25,
        True,  # bool is not stored as an int
        {1, 2, 3},
    ]
    for value in values:
        assert bm.set("o", value, compress_level=0) is True
        got = bm.get("o")
        assert got == value and type(got) is type(value)
        assert raw_get(server, "o")[:2] == (F_OBJECT, pickle.dumps(value, 0))


def test_large_values_are_zlib_compressed(bm, server):
    text = "compress me " * 1000
    assert bm.set("z", text) is True
    flags, data, _ = raw_get(server, "z")
    assert flags == F_COMPRESSED
    assert len(data) < len(text) // 10
    assert zlib.decompress(data) == text.encode()
    assert bm.get("z") == text

    # compress_level=0: stored as is; a level: compressed with that level.
    assert bm.set("z0", text, compress_level=0) is True
    assert raw_get(server, "z0")[:2] == (0, text.encode())
    assert bm.set("z9", text, compress_level=9) is True
    assert raw_get(server, "z9")[:2] == (F_COMPRESSED, zlib.compress(text.encode(), 9))
    assert bm.get("z9") == text

    # Compressible bytes: binary | compressed.
    blob = b"\x00\x01" * 5000
    assert bm.set("zb", blob) is True
    assert raw_get(server, "zb")[0] == F_BINARY | F_COMPRESSED
    assert bm.get("zb") == blob

    # Up to 128 bytes, and anything that does not shrink, is stored as is.
    assert bm.set("short", "a" * 128) is True
    assert raw_get(server, "short")[:2] == (0, b"a" * 128)
    noise = os.urandom(4000)
    assert bm.set("noise", noise) is True
    assert raw_get(server, "noise")[:2] == (F_BINARY, noise)

    # Pickled and compressed
    obj = {"k": list(range(500))}
    assert bm.set("zo", obj) is True
    flags, data, _ = raw_get(server, "zo")
    assert flags == F_OBJECT | F_COMPRESSED
    assert pickle.loads(zlib.decompress(data)) == obj
    assert bm.get("zo") == obj


def test_other_compression_module(server):
    c = make_bm(server, compression=bz2)
    text = "bz2 please " * 500
    assert c.set("bz", text) is True
    flags, data, _ = raw_get(server, "bz")
    assert flags == F_COMPRESSED
    assert bz2.decompress(data) == text.encode()
    assert c.get("bz") == text
    c.disconnect_all()


class JsonPickler:
    """A pickler replacement: Pickler(file, protocol).dump(obj)."""

    def __init__(self, file, protocol):
        self.file = file

    def dump(self, obj):
        self.file.write(json.dumps(obj).encode())


class JsonUnpickler:
    def __init__(self, file):
        self.file = file

    def load(self):
        return json.loads(self.file.read())


def test_pickle_protocol_and_custom_pickler(server):
    c = make_bm(server, pickle_protocol=4)
    assert c.set("p4", {"x": 1}, compress_level=0) is True
    flags, data, _ = raw_get(server, "p4")
    assert flags == F_OBJECT and data == pickle.dumps({"x": 1}, 4) and data.startswith(b"\x80\x04")
    assert c.get("p4") == {"x": 1}
    c.disconnect_all()

    c = make_bm(server, pickler=JsonPickler, unpickler=JsonUnpickler)
    assert c.set("js", {"x": [1, 2]}) is True
    assert raw_get(server, "js")[:2] == (F_OBJECT, b'{"x": [1, 2]}')
    assert c.get("js") == {"x": [1, 2]}
    c.disconnect_all()


def test_raw_data_mode(server):
    c = make_bm(server, raw_data=True)
    assert c.set("raw", b"\xffbytes") is True
    assert raw_get(server, "raw")[:2] == (0, b"\xffbytes")
    assert c.get("raw") == b"\xffbytes"
    # Flags written by another application are left alone and not interpreted.
    raw_set(server, "foreign", b"123", flags=0xDEADBEEF)
    assert c.get("foreign") == b"123"
    assert c.get_multi(["foreign", "raw"]) == {"foreign": b"123", "raw": b"\xffbytes"}
    with pytest.raises(TypeError):
        c.set("raw", "text")
    with pytest.raises(MemcachedException, match="raw data mode"):
        c.set("raw", b"x" * 1000, compress_level=1)
    assert c.get("raw") == b"\xffbytes"
    c.disconnect_all()


def test_str_and_bytes_keys_are_the_same_item(bm):
    assert bm.set(b"bk", "by bytes") is True
    assert bm.get("bk") == "by bytes"
    assert bm.set("ключ", "utf-8 key") is True
    assert bm.get("ключ".encode()) == "utf-8 key"
    long_key = "x" * 250
    assert bm.set(long_key, "longest") is True
    assert bm.get(long_key) == "longest"


# --- retrieval --------------------------------------------------------------------


def test_get_default_and_get_cas(bm, server):
    assert bm.get("missing") is None
    assert bm.get("missing", default="dflt") == "dflt"
    assert bm.get("missing", get_cas=True) == (None, None)
    assert bm.get("missing", default="dflt", get_cas=True) == ("dflt", None)
    assert bm.set("k", "v") is True
    value, cas = bm.get("k", get_cas=True)
    assert value == "v"
    assert isinstance(cas, int) and cas > 0
    # The binary CAS is the item's CAS, as the text protocol's gets shows it.
    assert raw_get(server, "k")[2] == cas
    assert bm.get("k", default="dflt") == "v"


def test_gets(bm, server):
    assert bm.gets("missing") == (None, None)
    assert bm.set("k", 10) is True
    value, cas1 = bm.gets("k")
    assert value == 10 and cas1 == raw_get(server, "k")[2]
    assert bm.gets("k") == (10, cas1)
    assert bm.set("k", 11) is True
    value, cas2 = bm.gets("k")
    assert value == 11 and cas2 != cas1


def test_get_multi(bm, server):
    values = {f"key{i}": f"value-{i}" for i in range(50)}
    values["int"] = 5
    values["obj"] = ["list"]
    values["bytes"] = b"\x00raw"
    for k, v in values.items():
        assert bm.set(k, v) is True
    keys = list(values) + ["nope1", "nope2"]
    assert bm.get_multi(keys) == values
    assert bm.get_multi([]) == {}
    assert bm.get_multi(["nope"]) == {}
    # One key only: a single GETK, no GETKQ.
    assert bm.get_multi(["key7"]) == {"key7": "value-7"}
    # Missing keys last, so the final non-quiet GETK is a miss.
    assert bm.get_multi(["key1", "key2", "nope3"]) == {"key1": "value-1", "key2": "value-2"}
    # bytes keys come back as bytes, str keys as str
    assert bm.get_multi([b"key3", "key4"]) == {b"key3": "value-3", "key4": "value-4"}

    with_cas = bm.get_multi(["key1", "int", "nope"], get_cas=True)
    assert set(with_cas) == {"key1", "int"}
    assert with_cas["key1"] == ("value-1", raw_get(server, "key1")[2])
    assert with_cas["int"] == (5, raw_get(server, "int")[2])


# --- storage ----------------------------------------------------------------------


def test_set_returns_cas_when_asked(bm, server):
    ok, cas = bm.set("k", "v", get_cas=True)
    assert ok is True and cas == raw_get(server, "k")[2]
    ok, cas2 = bm.set("k", "w", get_cas=True)
    assert ok is True and cas2 == raw_get(server, "k")[2] and cas2 != cas


def test_add(bm, server):
    assert bm.add("a", "1") is True
    assert bm.add("a", "2") is False
    assert bm.get("a") == "1"
    assert bm.add("a", "3", get_cas=True) == (False, None)
    ok, cas = bm.add("b", "1", get_cas=True)
    assert ok is True and cas == raw_get(server, "b")[2]


def test_replace(bm, server):
    assert bm.replace("r", "x") is False
    assert bm.get("r") is None
    assert bm.replace("r", "x", get_cas=True) == (False, None)
    assert bm.set("r", "x") is True
    assert bm.replace("r", "y") is True
    assert bm.get("r") == "y"
    ok, cas = bm.replace("r", 99, get_cas=True)
    assert ok is True and cas == raw_get(server, "r")[2]
    assert bm.get("r") == 99


def test_cas(bm, server):
    assert bm.set("c", "v1") is True
    _, cas = bm.gets("c")
    assert bm.cas("c", "v2", cas) is True
    assert bm.get("c") == "v2"
    # The CAS changed with the write: the old one no longer matches.
    assert bm.cas("c", "v3", cas) is False
    assert bm.get("c") == "v2"
    _, cas = bm.gets("c")
    ok, new_cas = bm.cas("c", "v4", cas, get_cas=True)
    assert ok is True and new_cas == raw_get(server, "c")[2] and new_cas != cas
    assert bm.cas("c", "v5", cas, get_cas=True) == (False, None)
    # A CAS on a missing key fails (NOT_FOUND).
    assert bm.cas("gone", "x", 12345) is False
    assert bm.get("gone") is None
    # cas=None means "compare against nonexistent": an add.
    assert bm.cas("new", "n1", None) is True
    assert bm.cas("new", "n2", None) is False
    assert bm.get("new") == "n1"
    # 0 would mean "no CAS" on the wire: the library refuses it.
    with pytest.raises(ValueError):
        bm.cas("c", "x", 0)
    assert bm.get("c") == "v4"


def test_set_multi(bm):
    values = {f"m{i}": i for i in range(30)}
    values["s"] = "text"
    assert bm.set_multi(values) == []
    assert bm.get_multi(list(values)) == values
    assert bm.set_multi({}) == []

    _, cas = bm.gets("s")
    failed = bm.set_multi(
        {
            ("s", cas): "cas ok",  # matching CAS: stored
            ("m1", 12345): "bad",  # wrong CAS: fails, reported with the reply's CAS (0)
            ("m2", 0): "add",  # CAS 0 means add: m2 exists, fails
            ("fresh", 0): "added",  # add of a new key
            "plain": "set",
        }
    )
    assert sorted(failed) == [("m1", 0), ("m2", 0)]
    assert bm.get_multi(["s", "m1", "m2", "fresh", "plain"]) == {
        "s": "cas ok",
        "m1": 1,
        "m2": 2,
        "fresh": "added",
        "plain": "set",
    }


def test_set_multi_cas(bm, server):
    assert bm.set("exists", "x") is True
    result = bm.set_multi_cas({"a": 1, "b": "two", ("exists", 0): "add fails", ("c", 0): 3})
    assert set(result) == {"a", "b", "exists", "c"}
    assert result["exists"] is None
    for key in ("a", "b", "c"):
        assert result[key] == raw_get(server, key)[2]
    assert bm.get_multi(["a", "b", "c", "exists"]) == {"a": 1, "b": "two", "c": 3, "exists": "x"}

    result = bm.set_multi_cas({("a", result["a"]): 10, ("b", 999999): "stale"})
    assert result["a"] == raw_get(server, "a")[2]
    assert result["b"] is None
    assert bm.get_multi(["a", "b"]) == {"a": 10, "b": "two"}
    assert bm.set_multi_cas({}) == {}


# --- delete -----------------------------------------------------------------------


def test_delete(bm):
    assert bm.set("d", "x") is True
    assert bm.delete("d") is True
    assert bm.get("d") is None
    # The library reports a missing key as deleted too (only KEY_EXISTS is False).
    assert bm.delete("d") is True
    assert bm.set("d", "x") is True
    _, cas = bm.gets("d")
    assert bm.delete("d", cas=cas + 1000) is False
    assert bm.get("d") == "x"
    assert bm.delete("d", cas=cas) is True
    assert bm.get("d") is None


def test_delete_multi(bm):
    assert bm.set_multi({"d1": 1, "d2": 2, "d3": 3}) == []
    assert bm.delete_multi(["d1", "d2"]) is True
    assert bm.get_multi(["d1", "d2", "d3"]) == {"d3": 3}
    # Any missing key makes the result False; the others are still deleted.
    assert bm.set("d4", 4) is True
    assert bm.delete_multi(["d3", "nope", "d4"]) is False
    assert bm.get_multi(["d3", "d4"]) == {}
    assert bm.delete_multi([]) is True


# --- incr / decr ------------------------------------------------------------------


def test_incr_decr(bm, server):
    # A missing key is created with `default` (the delta is not added).
    assert bm.incr("n", 1, default=10) == 10
    assert bm.get("n") == "10"  # created by the server: flags 0, read as text
    assert raw_get(server, "n")[:2] == (0, b"10")
    assert bm.incr("n", 5) == 15
    assert bm.decr("n", 3) == 12
    assert bm.decr("n", 100) == 0  # decr stops at 0
    # The server shortened "12" to "0" in place, padded with a space.
    assert bm.get("n") == "0 "
    assert bm.decr("fresh", 1, default=7) == 7
    assert bm.incr("zero", 3) == 0  # default default: 0

    # An int stored by the library keeps its flags through incr.
    assert bm.set("i", 41) is True
    assert bm.incr("i", 1) == 42
    assert bm.get("i") == 42

    # 64-bit unsigned wrap-around on incr
    assert bm.set("max", str(2**64 - 1)) is True
    assert bm.incr("max", 1) == 0
    assert bm.incr("big", 2**63, default=2**63) == 2**63
    assert bm.incr("big", 2**62) == 2**63 + 2**62

    assert bm.set("word", "abc") is True
    for op in (bm.incr, bm.decr):
        with pytest.raises(MemcachedException) as exc:
            op("word", 1)
        assert exc.value.code == NON_NUMERIC
    assert bm.get("word") == "abc"


# --- expiry, flush ----------------------------------------------------------------


def test_expiry_times_and_delayed_flush(bm, server):
    other = harness.Server()
    try:
        oc = make_bm(other)
        assert oc.set("before", "x") is True
        assert oc.flush_all(time=2) is True
        assert oc.get("before") == "x"  # the flush has not happened yet

        assert bm.set("set1", "x", time=1) is True
        assert bm.add("add1", "x", time=1) is True
        assert bm.set("rep1", "x") is True
        assert bm.replace("rep1", "y", time=1) is True
        assert bm.set("cas1", "x") is True
        assert bm.cas("cas1", "y", bm.gets("cas1")[1], time=1) is True
        assert bm.set_multi({"multi1": "x", "multi2": "y"}, time=1) == []
        assert bm.incr("incr1", 1, default=5, time=1) == 5
        assert bm.set("forever", "x", time=0) is True
        # A negative time is sent as 0xFFFFFFFE, an absolute time in 2106.
        assert bm.set("neg", "x", time=-1) is True
        assert bm.set("long", "x", time=3600) is True
        short = ["set1", "add1", "rep1", "cas1", "multi1", "multi2", "incr1"]
        assert set(bm.get_multi(short)) == set(short)

        time.sleep(2.5)

        assert bm.get_multi(short) == {}
        assert bm.get_multi(["forever", "neg", "long"]) == {"forever": "x", "neg": "x", "long": "x"}
        assert oc.get("before") is None
        assert oc.set("after", "y") is True
        assert oc.get("after") == "y"
        oc.disconnect_all()
    finally:
        other.stop()


def test_flush_all(bm):
    assert bm.set_multi({"f1": 1, "f2": 2}) == []
    assert bm.flush_all() is True
    assert bm.get_multi(["f1", "f2"]) == {}
    assert bm.add("f1", "again") is True


# --- stats ------------------------------------------------------------------------


def test_stats(bm, server):
    all_stats = bm.stats()
    assert list(all_stats) == [address(server)]
    before = all_stats[address(server)]
    assert before["pid"] == str(server.pid()).encode()
    assert re.fullmatch(rb"\d+\.\d+\.\d+.*", before["version"])
    for name in ("uptime", "curr_items", "total_items", "bytes", "curr_connections", "cmd_get", "cmd_set"):
        assert re.fullmatch(rb"\d+", before[name]), name

    assert bm.set("s", "v") is True
    assert bm.get("s") == "v"
    assert bm.get("nope") is None
    after = stats_of(bm)

    def delta(name):
        return int(after[name]) - int(before[name])

    assert (delta("cmd_set"), delta("cmd_get"), delta("get_hits"), delta("get_misses")) == (1, 2, 1, 1)

    settings = bm.stats("settings")[address(server)]
    assert settings["maxbytes"] == str(64 * 1024 * 1024).encode()
    assert settings["item_size_max"] == str(1024 * 1024).encode()
    assert settings["tcpport"] == str(server.port).encode()
    assert settings["cas_enabled"] == b"yes"

    # Per-class item counts add up to curr_items. (memcached's LRU crawler may
    # reclaim flushed items between the two reads: take a settled pair.)
    for _ in range(20):
        items = bm.stats("items")[address(server)]
        numbers = [int(v) for k, v in items.items() if re.fullmatch(r"items:\d+:number", k)]
        curr_items = int(stats_of(bm)["curr_items"])
        if sum(numbers) == curr_items:
            break
        time.sleep(0.05)
    assert numbers and sum(numbers) == curr_items >= 1

    slabs = bm.stats("slabs")[address(server)]
    assert int(slabs["active_slabs"]) >= 1
    assert int(slabs["total_malloced"]) > 0
    assert any(re.fullmatch(r"\d+:chunk_size", k) for k in slabs)


def test_stats_reset(bm):
    assert bm.get("nope") is None
    assert int(stats_of(bm)["get_misses"]) >= 1
    assert bm.stats("reset") == {next(iter(bm.stats())): {}}
    after = stats_of(bm)
    assert (after["get_misses"], after["get_hits"], after["cmd_get"]) == (b"0", b"0", b"0")


def test_stats_unknown_group(server):
    # The server answers KEY_NOT_FOUND "Not found"; the library files that body
    # under an empty name and then waits for an end-of-stats packet that never
    # comes, until its socket timeout drops the connection.
    c = make_bm(server, socket_timeout=0.5)
    assert c.stats("bogus") == {address(server): {"": b"Not found"}}
    assert c.set("k", "still works") is True
    assert c.get("k") == "still works"
    c.disconnect_all()


# --- errors the server reports ----------------------------------------------------


def test_key_too_long(bm):
    with pytest.raises(MemcachedException) as exc:
        bm.set("k" * 251, "x")
    assert exc.value.code == EINVAL
    # The server closed the connection after the error: the next request finds
    # it closed (bmemcached reports a miss), the one after reconnects.
    assert bm.get("k") is None
    assert bm.set("k", "x") is True
    assert bm.get("k") == "x"
    with pytest.raises(MemcachedException) as exc:
        bm.get("g" * 251)
    assert exc.value.code == EINVAL


def test_value_too_large(bm):
    assert bm.set("big", "small") is True
    huge = os.urandom(1024 * 1024 + 100)
    with pytest.raises(MemcachedException) as exc:
        bm.set("big", huge)
    assert exc.value.code == E2BIG
    assert exc.value.message == "Code: 3 Message: b'Too large.'"
    # A SET that fails for size removes the old value (no stale data).
    assert bm.get("big") is None
    # The connection is still in step.
    assert bm.set("after", "x") is True
    assert bm.get("after") == "x"
    with pytest.raises(MemcachedException) as exc:
        bm.add("big2", huge)
    assert exc.value.code == E2BIG
    near = os.urandom(1024 * 1024 - 4096)
    assert bm.set("near", near) is True
    assert bm.get("near") == near


# --- connections and client configurations ----------------------------------------


def test_noop_and_servers(bm, server):
    (proto,) = list(bm.servers)
    assert proto.server == address(server)
    assert proto.noop() == 0


def test_disconnect_all_reconnects(bm):
    assert bm.set("k", "v") is True
    before = stats_of(bm)
    bm.disconnect_all()
    assert bm.get("k") == "v"
    after = stats_of(bm)
    assert int(after["total_connections"]) == int(before["total_connections"]) + 1
    # The old connection is counted until the server has seen it close,
    # which may come just after the new one's first reply.
    deadline = time.monotonic() + 3
    while after["curr_connections"] != before["curr_connections"] and time.monotonic() < deadline:
        time.sleep(0.02)
        after = stats_of(bm)
    assert after["curr_connections"] == before["curr_connections"]


def test_set_servers(bm, server):
    other = harness.Server()
    try:
        assert bm.set("where", "first") is True
        bm.set_servers([address(other)])
        assert [p.server for p in bm.servers] == [address(other)]
        assert bm.get("where") is None
        assert bm.set("where", "second") is True
        bm.set_servers(address(server))  # a single string is accepted
        assert bm.get("where") == "first"
        with pytest.raises(ValueError):
            bm.set_servers([])
        assert raw_get(other, "where")[1] == b"second"
    finally:
        other.stop()


def test_unreachable_server_and_retry_delay():
    port = harness.free_port()
    c = make_bm([f"127.0.0.1:{port}"])
    c.enable_retry_delay(False)
    # Nothing listens: every command reports a miss or failure, none raises.
    assert c.get("k") is None
    assert c.gets("k") == (None, None)
    assert c.set("k", "v") is False
    assert c.get_multi(["a", "b"]) == {}
    assert c.incr("n", 1) == 0
    assert c.delete("k") is False
    assert c.stats() == {f"127.0.0.1:{port}": {}}
    srv = harness.Server(port=port)
    try:
        # Without a retry delay the next command connects at once.
        assert c.set("k", "v") is True
        assert c.get("k") == "v"
        c.disconnect_all()
    finally:
        srv.stop()

    # With the delay (the default for TCP), a failed connect holds off
    # reconnecting for 5 s even once the server is back.
    port = harness.free_port()
    c = make_bm([f"127.0.0.1:{port}"])
    c.enable_retry_delay(True)
    assert c.set("k", "v") is False
    srv = harness.Server(port=port)
    try:
        assert c.set("k", "v") is False
        assert c.get("k") is None
        assert raw_get(srv, "k") is None
    finally:
        srv.stop()


def test_unix_socket(tmp_path):
    path = str(tmp_path / "s.sock")
    srv = harness.Server(args=["-s", path], listen=False)
    try:
        deadline = time.monotonic() + 10
        c = make_bm([path])
        # The socket's file is there from its bind, before the server
        # listens (over the flash tier, after its file is made): a set in
        # between fails (once in `make test`). Wait for a connection.
        while True:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
                break
            except OSError:
                assert time.monotonic() < deadline, f"nothing listens on {path}"
                time.sleep(0.02)
            finally:
                probe.close()
        assert c.set("u", "over unix") is True
        assert c.get("u") == "over unix"
        assert c.get_multi(["u", "v"]) == {"u": "over unix"}
        assert c.incr("n", 2, default=1) == 1
        c.disconnect_all()
    finally:
        srv.stop()


@pytest.fixture
def two_servers(server):
    other = harness.Server()
    for srv in (server, other):
        assert make_bm(srv).flush_all() is True
    yield server, other
    other.stop()


def test_distributed_client(two_servers):
    a, b = two_servers
    c = bmemcached.DistributedClient([address(a), address(b)], socket_timeout=5)
    values = {f"dk{i}": i for i in range(40)}
    for k, v in values.items():
        assert c.set(k, v) is True
    on_a = {k for k in values if raw_get(a, k) is not None}
    on_b = {k for k in values if raw_get(b, k) is not None}
    # Every key on exactly one server, both servers used.
    assert on_a and on_b and not on_a & on_b and on_a | on_b == set(values)
    assert c.get_multi(list(values) + ["missing"]) == values
    assert c.get("dk3") == 3 and c.get("missing") is None

    assert c.set_multi({f"sm{i}": f"v{i}" for i in range(10)}) == []
    assert c.get_multi([f"sm{i}" for i in range(10)]) == {f"sm{i}": f"v{i}" for i in range(10)}
    assert set(c.set_multi_cas({"x1": 1, "x2": 2}).values()) != {None}
    assert c.add("dk1", "no") is False and c.add("new", "yes") is True
    assert c.replace("dk1", "yes") is True and c.replace("nope", "x") is False
    value, cas = c.gets("dk2")
    assert value == 2 and c.cas("dk2", 20, cas) is True and c.cas("dk2", 21, cas) is False
    assert c.get("dk2", get_cas=True)[0] == 20
    assert c.incr("ctr", 1, default=100) == 100 and c.incr("ctr", 1) == 101 and c.decr("ctr", 2) == 99
    assert c.delete("dk0") is True and c.get("dk0") is None
    assert c.delete_multi([f"dk{i}" for i in range(1, 40)]) is True
    assert c.get_multi(list(values)) == {}
    stats = c.stats()
    assert set(stats) == {address(a), address(b)}
    assert stats[address(a)]["pid"] != stats[address(b)]["pid"]
    assert c.flush_all() is True
    assert c.get_multi(["new", "sm1", "ctr"]) == {}
    c.disconnect_all()


def test_replicating_client(two_servers):
    a, b = two_servers
    c = bmemcached.Client([address(a), address(b)], socket_timeout=5)
    assert c.set("r", "both") is True
    assert raw_get(a, "r")[1] == b"both" and raw_get(b, "r")[1] == b"both"
    assert c.set_multi({"m1": 1, "m2": 2}) == []
    assert raw_get(a, "m1") is not None and raw_get(b, "m2") is not None

    # Reads fall back to the next replica when the first misses.
    make_bm(a).delete("r")
    assert c.get("r") == "both"
    make_bm(a).delete("m2")
    assert c.get_multi(["m1", "m2", "none"]) == {"m1": 1, "m2": 2}

    assert c.add("r", "x") is True  # added on a, exists on b: any() is True
    assert raw_get(a, "r")[1] == b"x" and raw_get(b, "r")[1] == b"both"
    assert c.incr("n", 1, default=3) == 3
    assert raw_get(a, "n")[1] == raw_get(b, "n")[1] == b"3"
    assert c.delete_multi(["m1"]) is True

    # CAS does not mix with replication: refused, or warned about.
    with pytest.raises(NotImplementedError):
        c.set("r", "v", get_cas=True)
    with pytest.raises(NotImplementedError):
        c.set_multi_cas({"k": "v"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, cas = c.gets("r")
        assert c.cas("r", "new", cas) is True  # matches on one replica only
    assert [w.category for w in caught] == [UserWarning, UserWarning]
    assert sorted([raw_get(a, "r")[1], raw_get(b, "r")[1]]) in (
        sorted([b"new", b"x"]),
        sorted([b"new", b"both"]),
    )
    assert c.flush_all() is True
    assert raw_get(a, "n") is None and raw_get(b, "n") is None
    c.disconnect_all()


# --- SASL -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory):
    srv = harness.Server(args=["-S"], env=sasl_env(tmp_path_factory.mktemp("sasl"), harness.target()))
    yield srv
    alive = srv.proc.poll() is None
    srv.stop()
    assert alive, f"SASL server exited during the tests with code {srv.proc.returncode}"


def auth_error(exc_info):
    """The exception bmemcached raises when the server answers AUTH_ERROR (0x20).

    bmemcached's STATUS table has auth_error = 0x08, so the server's real
    status 0x20 is not recognised as InvalidCredentials: it surfaces as a plain
    MemcachedException carrying the server's message.
    """
    exc = exc_info.value
    assert type(exc) is MemcachedException and not isinstance(exc, InvalidCredentials)
    assert exc.code == AUTH_ERROR
    assert "b'Auth failure.'" in exc.message
    return exc


def test_sasl_correct_credentials(sasl_server):
    c = make_bm(sasl_server, username="alice", password="secret")
    assert c.set("sk", "alice's") is True
    assert c.get("sk") == "alice's"
    assert list(c.servers)[0].authenticated is True
    assert c.incr("n", 1, default=1) == 1
    assert c.get_multi(["sk", "n"]) == {"sk": "alice's", "n": "1"}
    assert stats_of(c)["pid"] == str(sasl_server.pid()).encode()
    settings = c.stats("settings")[address(sasl_server)]
    assert (settings["auth_enabled_sasl"], settings["binding_protocol"]) == (b"yes", b"binary")
    # Another user sees the same cache.
    other = make_bm(sasl_server, username="bob", password="hunter2")
    assert other.get("sk") == "alice's"
    assert other.delete("sk") is True
    assert c.get("sk") is None
    assert c.flush_all() is True
    c.disconnect_all()
    other.disconnect_all()


@pytest.mark.parametrize(
    "username,password",
    [("alice", "wrong"), ("alice", "hunter2"), ("mallory", "secret")],
    ids=["wrong-password", "other-users-password", "unknown-user"],
)
def test_sasl_wrong_credentials(sasl_server, username, password):
    c = make_bm(sasl_server, username=username, password=password)
    # Connecting authenticates first: SASL_AUTH fails and the command raises.
    with pytest.raises(MemcachedException) as exc:
        c.set("k", "v")
    auth_error(exc)
    assert list(c.servers)[0].authenticated is False
    # The connection stays open but unauthenticated: the server refuses the
    # GET with AUTH_ERROR and closes the connection ...
    with pytest.raises(MemcachedException) as exc:
        c.get("k")
    auth_error(exc)
    # ... which the next command finds closed (reported as a miss) ...
    assert c.get("k") is None
    # ... and the one after reconnects and fails to authenticate again.
    with pytest.raises(MemcachedException) as exc:
        c.set("k", "v")
    auth_error(exc)
    c.disconnect_all()
    # Nothing was stored.
    good = make_bm(sasl_server, username="alice", password="secret")
    assert good.get("k") is None
    good.disconnect_all()


def test_sasl_no_credentials(sasl_server):
    c = make_bm(sasl_server)
    # No SASL at all: the server refuses the first command and closes.
    with pytest.raises(MemcachedException) as exc:
        c.set("k", "v")
    auth_error(exc)
    assert c.get("k") is None  # the closed connection
    with pytest.raises(MemcachedException) as exc:
        c.get("k")
    auth_error(exc)
    assert c.set("k", "v") is False  # the closed connection again
    with pytest.raises(MemcachedException) as exc:
        c.flush_all()
    assert exc.value.code == AUTH_ERROR
    assert c.incr("n", 1) == 0  # closed connection: the library reports 0
    assert c.stats() == {address(sasl_server): {"": b"Auth failure."}}
    c.disconnect_all()


def test_sasl_authenticate_method(sasl_server):
    c = make_bm(sasl_server, username="alice", password="wrong")
    (proto,) = list(c.servers)
    # Protocol.authenticate reconnects with new credentials.
    assert proto.authenticate("bob", "hunter2") is True
    assert c.set("auth", "by bob") is True
    assert c.get("auth") == "by bob"
    with pytest.raises(MemcachedException) as exc:
        proto.authenticate("bob", "nope")
    auth_error(exc)
    assert proto.authenticated is False
    assert proto.authenticate("alice", "secret") is True
    assert c.get("auth") == "by bob"
    c.disconnect_all()


def test_credentials_against_server_without_sasl(server):
    # The server answers SASL_LIST_MECHS with UNKNOWN_COMMAND; the library
    # takes that as "no authentication needed".
    c = make_bm(server, username="alice", password="secret")
    assert c.set("k", "v") is True
    assert list(c.servers)[0].authenticated is True
    assert c.get("k") == "v"
    c.disconnect_all()
