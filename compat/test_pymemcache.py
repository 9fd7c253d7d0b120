"""Compatibility with pymemcache: every command the library offers, with real results.

pymemcache 4.0.0 has no gat/gats/verbosity methods: those go through
``Client.raw_command``, which is how a pymemcache user reaches them.
"""

import re
import threading
import time

import pytest

import harness
from compat_util import make_client, server_args
from pymemcache import serde as pm_serde
from pymemcache.client.base import PooledClient
from pymemcache.client.hash import HashClient
from pymemcache.exceptions import (
    MemcacheClientError,
    MemcacheIllegalInputError,
    MemcacheServerError,
    MemcacheUnknownCommandError,
)

# Largest value used as "near 1 MB": memcached 1.6.18 with the default -I 1m
# takes values up to 1,048,476 bytes or so (the item header and key count too).
NEAR_1MB = 1024 * 1024 - 4096


class RecordingSerde:
    """Stores bytes as they are and hands back (value, flags) so tests see the flags."""

    def serialize(self, key, value):
        return value, 0

    def deserialize(self, key, value, flags):
        return value, flags


def flags_client(address):
    return make_client(address, serde=RecordingSerde())


# --- storage commands ----------------------------------------------------------


def test_set_and_get(client):
    assert client.set("k1", b"hello") is True
    assert client.get("k1") == b"hello"
    assert client.get("missing") is None
    assert client.get("missing", default=b"dflt") == b"dflt"
    # overwrite
    assert client.set("k1", b"world") is True
    assert client.get("k1") == b"world"
    # empty value
    assert client.set("empty", b"") is True
    assert client.get("empty") == b""


def test_str_and_int_values_are_sent_as_text(client):
    assert client.set("s", "text") is True
    assert client.get("s") == b"text"
    assert client.set("i", 12345) is True
    assert client.get("i") == b"12345"


def test_set_many_get_many(client):
    values = {f"key{i}": f"value-{i}".encode() for i in range(50)}
    assert client.set_many(values) == []
    got = client.get_many(list(values) + ["nope1", "nope2"])
    assert got == values
    assert client.get_many([]) == {}
    assert client.get_multi(["key1", "key2"]) == {"key1": b"value-1", "key2": b"value-2"}


def test_add(client):
    assert client.add("a", b"1") is True
    assert client.add("a", b"2") is False
    assert client.get("a") == b"1"


def test_replace(client):
    assert client.replace("r", b"1") is False
    assert client.get("r") is None
    client.set("r", b"1")
    assert client.replace("r", b"2") is True
    assert client.get("r") == b"2"


def test_append_prepend(client):
    assert client.append("ap", b"x") is False
    assert client.prepend("ap", b"x") is False
    assert client.get("ap") is None
    client.set("ap", b"mid")
    assert client.append("ap", b"-end") is True
    assert client.prepend("ap", b"start-") is True
    assert client.get("ap") == b"start-mid-end"


def test_append_prepend_keep_flags(server_address):
    c = flags_client(server_address)
    c.set("fl", b"v", flags=42)
    assert c.append("fl", b"a", flags=7) is True
    assert c.prepend("fl", b"p", flags=9) is True
    assert c.get("fl") == (b"pva", 42)
    c.close()


def test_flags_roundtrip(server_address):
    c = flags_client(server_address)
    for flags in (0, 1, 16, 65535, 65536, 2**32 - 1):
        assert c.set(f"f{flags}", b"data", flags=flags) is True
        assert c.get(f"f{flags}") == (b"data", flags)
    assert c.gets("f65535")[0] == (b"data", 65535)
    c.close()


def test_gets_and_cas(client):
    assert client.gets("nothing") == (None, None)
    assert client.gets("nothing", default=b"d", cas_default=b"c") == (b"d", b"c")
    client.set("c", b"v1")
    value, token = client.gets("c")
    assert value == b"v1"
    assert token.isdigit()
    assert client.cas("c", b"v2", token) is True
    assert client.get("c") == b"v2"
    # the old token is now stale
    assert client.cas("c", b"v3", token) is False
    assert client.get("c") == b"v2"
    # cas on a missing key: NOT_FOUND -> None
    assert client.cas("missing", b"v", token) is None
    # a fresh token works, given as int and as str
    value, token2 = client.gets("c")
    assert token2 != token
    assert client.cas("c", b"v4", int(token2)) is True
    value, token3 = client.gets("c")
    assert client.cas("c", b"v5", token3.decode()) is True
    assert client.get("c") == b"v5"


def test_cas_token_changes_on_every_write(client):
    client.set("t", b"1")
    tokens = {client.gets("t")[1]}
    client.set("t", b"2")
    tokens.add(client.gets("t")[1])
    client.append("t", b"3")
    tokens.add(client.gets("t")[1])
    client.set("n", b"1")
    t_n = client.gets("n")[1]
    client.incr("n", 1)
    assert client.gets("n")[1] != t_n
    assert len(tokens) == 3


def test_gets_many(client):
    client.set_many({"g1": b"a", "g2": b"b"})
    got = client.gets_many(["g1", "g2", "g3"])
    assert set(got) == {"g1", "g2"}
    assert got["g1"][0] == b"a" and got["g2"][0] == b"b"
    assert got["g1"][1].isdigit() and got["g2"][1].isdigit()
    assert got["g1"][1] != got["g2"][1]
    assert client.gets_many([]) == {}


def test_delete_and_delete_many(client):
    client.set_many({"d1": b"1", "d2": b"2", "d3": b"3", "d4": b"4"})
    assert client.delete("d1") is True
    assert client.delete("d1") is False
    assert client.get("d1") is None
    assert client.delete_many(["d2", "d3", "never"]) is True
    assert client.get_many(["d2", "d3", "d4"]) == {"d4": b"4"}
    assert client.delete_many([]) is True


def test_dict_interface(client):
    client["di"] = b"v"
    assert client["di"] == b"v"
    del client["di"]
    with pytest.raises(KeyError):
        client["di"]


# --- incr / decr ------------------------------------------------------------------


def test_incr_decr(client):
    assert client.incr("cnt", 1) is None
    assert client.decr("cnt", 1) is None
    client.set("cnt", b"10")
    assert client.incr("cnt", 5) == 15
    assert client.decr("cnt", 3) == 12
    assert client.get("cnt") == b"12"
    assert client.decr("cnt", 100) == 0  # decr floors at zero
    assert client.incr("cnt", 0) == 0
    # growing the length of the number
    client.set("grow", b"99")
    assert client.incr("grow", 1) == 100
    assert client.get("grow") == b"100"
    # shrinking: memcached pads the stored value with spaces, so compare numerically
    assert client.decr("grow", 1) == 99
    assert int(client.get("grow").strip()) == 99


def test_incr_wraps_at_64_bits(client):
    client.set("big", str(2**64 - 1))
    assert client.incr("big", 1) == 0
    client.set("big", str(2**64 - 2))
    assert client.incr("big", 1) == 2**64 - 1
    assert client.incr("big", 2**64 - 1) == 2**64 - 2


def test_incr_non_numeric_is_client_error(client):
    client.set("txt", b"abc")
    with pytest.raises(MemcacheClientError):
        client.incr("txt", 1)
    assert client.get("txt") == b"abc"
    with pytest.raises(MemcacheClientError):
        client.decr("txt", 1)


def test_incr_rejects_non_int_argument_client_side(client):
    with pytest.raises(MemcacheIllegalInputError):
        client.incr("x", "1")
    with pytest.raises(MemcacheIllegalInputError):
        client.set("x", b"v", expire="10")


def test_incr_bad_delta_is_client_error(client):
    client.set("n", b"1")
    with pytest.raises(MemcacheClientError):
        client.incr("n", 2**64)  # does not fit in 64 bits
    with pytest.raises(MemcacheClientError):
        client.incr("n", -1)
    assert client.get("n") == b"1"


# --- expiry: touch, gat, gats ----------------------------------------------------


def test_touch(client):
    assert client.touch("nokey", 10) is False
    client.set("tt", b"v")
    assert client.touch("tt", 100) is True
    assert client.get("tt") == b"v"
    # a negative exptime expires the item at once
    assert client.touch("tt", -1) is True
    assert client.get("tt") is None


def test_negative_expire_on_set(client):
    assert client.set("neg", b"v", expire=-1) is True
    assert client.get("neg") is None


def test_gat_gats_raw(client):
    client.set("ga", b"abc", flags=0)
    assert client.raw_command("gat 100 ga", end_tokens="END\r\n") == b"VALUE ga 0 3\r\nabc\r\n"
    reply = client.raw_command("gats 100 ga", end_tokens="END\r\n")
    m = re.fullmatch(rb"VALUE ga 0 3 (\d+)\r\nabc\r\n", reply)
    assert m, reply
    assert m.group(1) == client.gets("ga")[1]
    assert client.raw_command("gat 100 none1 none2", end_tokens="END\r\n") == b""
    # gat with a negative exptime returns the value, then the item is gone
    assert client.raw_command("gat -1 ga", end_tokens="END\r\n") == b"VALUE ga 0 3\r\nabc\r\n"
    assert client.get("ga") is None


def test_expiry_touch_and_gat_extend(client):
    client.set("e_plain", b"1", expire=1)
    client.set("e_touch", b"2", expire=1)
    client.set("e_gat", b"3", expire=1)
    client.set("e_long", b"4", expire=100)
    assert client.touch("e_touch", 100) is True
    assert client.raw_command("gat 100 e_gat", end_tokens="END\r\n") == b"VALUE e_gat 0 1\r\n3\r\n"
    time.sleep(2.5)
    assert client.get_many(["e_plain", "e_touch", "e_gat", "e_long"]) == {
        "e_touch": b"2",
        "e_gat": b"3",
        "e_long": b"4",
    }


# --- noreply ----------------------------------------------------------------------


def test_noreply_variants(server_address):
    c = make_client(server_address, default_noreply=True)
    assert c.set("nr", b"1") is True
    assert c.add("nr", b"2") is True  # noreply: always True, but must not store
    assert c.replace("nr_missing", b"x") is True
    assert c.append("nr", b"a") is True
    assert c.prepend("nr", b"p") is True
    assert c.set_many({"nr2": b"2", "nr3": b"3"}) == []
    assert c.set("num", b"5") is True
    assert c.incr("num", 10, noreply=True) is None
    assert c.decr("num", 3, noreply=True) is None
    assert c.touch("nr3", 100) is True
    assert c.delete("nr2") is True
    assert c.delete_many(["nr3"]) is True
    c.set("casme", b"1")
    token = c.gets("casme")[1]
    assert c.cas("casme", b"2", token, noreply=True) is True
    # a reply-awaiting command on the same connection sees all of the above
    assert c.get_many(["nr", "nr_missing", "nr2", "nr3", "num", "casme"]) == {
        "nr": b"p1a",
        "num": b"12",
        "casme": b"2",
    }
    assert c.flush_all(noreply=True) is True
    assert c.get("nr") is None
    c.close()


def test_noreply_errors_do_not_desync(server_address):
    c = make_client(server_address, default_noreply=True)
    c.set("txt", b"abc")
    c.incr("txt", 1, noreply=True)  # error reply is suppressed or swallowed
    assert c.get("txt") == b"abc"
    assert c.version()
    c.close()


# --- values: large, binary, unicode, serde ----------------------------------------


def test_large_value_near_1mb(client):
    value = bytes(range(256)) * (NEAR_1MB // 256) + b"tail"
    assert len(value) >= 1024 * 1000
    assert client.set("large", value) is True
    assert client.get("large") == value
    assert client.get_many(["large", "x"]) == {"large": value}


def test_value_over_1mb_is_server_error(client):
    with pytest.raises(MemcacheServerError):
        client.set("huge", b"x" * (1024 * 1024 + 1))
    # the connection is usable again afterwards (pymemcache reconnects)
    assert client.set("after", b"ok") is True
    assert client.get("after") == b"ok"
    assert client.get("huge") is None


def test_binary_values(client):
    value = bytes(range(256)) * 4 + b"\r\nEND\r\n\x00\r\n"
    assert client.set("bin", value) is True
    assert client.get("bin") == value
    assert client.append("bin", b"\r\n\x00") is True
    assert client.get("bin") == value + b"\r\n\x00"
    assert client.set("crlf", b"\r\n") is True
    assert client.get("crlf") == b"\r\n"


def test_unicode_keys(server_address):
    plain = make_client(server_address)
    with pytest.raises(MemcacheIllegalInputError):
        plain.set("ключ", b"v")
    with pytest.raises(MemcacheIllegalInputError):
        plain.get("ключ")
    uni = make_client(server_address, allow_unicode_keys=True)
    assert uni.set("ключ", b"value") is True
    assert uni.get("ключ") == b"value"
    assert uni.get_many(["ключ", "キー"]) == {"ключ": b"value"}
    # the server stores the UTF-8 bytes: a plain client sees the same item by bytes key
    assert plain.get("ключ".encode()) == b"value"
    # a 250-byte UTF-8 key is allowed, 251 bytes is not
    key = "é" * 125
    assert len(key.encode()) == 250
    assert uni.set(key, b"x") is True
    assert uni.get(key) == b"x"
    with pytest.raises(MemcacheIllegalInputError):
        uni.set(key + "a", b"x")
    plain.close()
    uni.close()


def test_unicode_values(server_address):
    plain = make_client(server_address)
    with pytest.raises(MemcacheIllegalInputError):
        plain.set("uv", "значение")
    utf8 = make_client(server_address, encoding="utf8")
    assert utf8.set("uv", "значение") is True
    assert utf8.get("uv") == "значение".encode()
    plain.close()
    utf8.close()


def test_pickle_serde(server_address):
    c = make_client(server_address, serde=pm_serde.pickle_serde)
    raw = flags_client(server_address)
    cases = {
        "sb": (b"raw bytes", pm_serde.FLAG_BYTES),
        "st": ("текст", pm_serde.FLAG_TEXT),
        "si": (123456789, pm_serde.FLAG_INTEGER),
        "sd": ({"a": [1, 2, 3], "b": (4, 5)}, pm_serde.FLAG_PICKLE),
        "sl": ([1, "two", 3.0, None], pm_serde.FLAG_PICKLE),
    }
    for key, (value, _) in cases.items():
        assert c.set(key, value) is True
    for key, (value, flags) in cases.items():
        assert c.get(key) == value
        assert raw.get(key)[1] == flags
    assert c.get_many(list(cases)) == {k: v for k, (v, _) in cases.items()}
    c.close()
    raw.close()


def test_compressed_serde(server_address):
    serde = pm_serde.CompressedSerde(min_compress_len=100)
    c = make_client(server_address, serde=serde)
    raw = flags_client(server_address)
    value = "compress me " * 1000
    assert c.set("z", value) is True
    assert c.get("z") == value
    stored, flags = raw.get("z")
    assert flags & pm_serde.FLAG_COMPRESSED
    assert len(stored) < len(value)
    c.close()
    raw.close()


def test_key_prefix(server_address):
    pre = make_client(server_address, key_prefix=b"ns:")
    plain = make_client(server_address)
    assert pre.set("k", b"v") is True
    assert plain.get("ns:k") == b"v"
    assert pre.get("k") == b"v"
    assert pre.get_many(["k"]) == {"k": b"v"}
    assert pre.delete("k") is True
    assert plain.get("ns:k") is None
    pre.close()
    plain.close()


# --- key validation and error paths -----------------------------------------------


def test_bad_keys_rejected_client_side(client):
    for bad in ("has space", "tab\there", "nl\nx", "nul\x00x", " lead", "trail "):
        with pytest.raises(MemcacheIllegalInputError):
            client.set(bad, b"v")
        with pytest.raises(MemcacheIllegalInputError):
            client.get(bad)
    assert issubclass(MemcacheIllegalInputError, MemcacheClientError)


def test_key_length_limit(client):
    k250 = "k" * 250
    assert client.set(k250, b"v") is True
    assert client.get(k250) == b"v"
    assert client.get_many([k250]) == {k250: b"v"}
    with pytest.raises(MemcacheIllegalInputError):
        client.set("k" * 251, b"v")
    # bypassing pymemcache's own check, the server refuses a 251-byte key itself
    with pytest.raises(MemcacheClientError):
        client.raw_command("get " + "k" * 251)
    assert client.get(k250) == b"v"


def test_bad_cas_rejected_client_side(client):
    client.set("c", b"v")
    with pytest.raises(MemcacheIllegalInputError):
        client.cas("c", b"v", "12a")
    with pytest.raises(MemcacheIllegalInputError):
        client.cas("c", b"v", -5)


def test_unknown_command(client):
    with pytest.raises(MemcacheUnknownCommandError):
        client.raw_command("bogus_command")
    assert client.version()


def test_value_too_large_small_item_limit():
    with harness.Server(server_args(item_size_max="1k")) as srv:
        c = make_client(("127.0.0.1", srv.port))
        assert c.set("small", b"s" * 500) is True
        assert c.get("small") == b"s" * 500
        with pytest.raises(MemcacheServerError) as exc:
            c.set("big", b"b" * 2000)
        assert b"too large" in exc.value.args[0]
        assert c.get("big") is None
        assert c.set_many({"ok": b"fine"}) == []
        assert c.get("ok") == b"fine"
        c.close()


# --- stats / admin -----------------------------------------------------------------


def test_version(client):
    v = client.version()
    assert isinstance(v, bytes) and v
    assert re.fullmatch(rb"[0-9A-Za-z.\-+_]+", v), v
    assert client.stats()[b"version"] == v


@pytest.fixture
def fresh():
    """A server of its own: item counts not blurred by other tests' (lazily) flushed items."""
    with harness.Server() as srv:
        c = make_client(("127.0.0.1", srv.port))
        yield srv, c
        c.close()


def test_stats_general(fresh):
    server, client = fresh
    before = client.stats()
    client.set("s1", b"x")
    client.get("s1")
    client.get("s-missing")
    after = client.stats()
    assert after[b"pid"] == server.pid()
    for name in (b"uptime", b"time", b"curr_connections", b"total_connections",
                 b"cmd_get", b"cmd_set", b"get_hits", b"get_misses",
                 b"curr_items", b"total_items", b"bytes", b"limit_maxbytes",
                 b"threads", b"evictions"):
        assert isinstance(after[name], int), name
    assert abs(after[b"time"] - time.time()) < 5
    assert after[b"cmd_set"] - before[b"cmd_set"] == 1
    assert after[b"cmd_get"] - before[b"cmd_get"] == 2
    assert after[b"get_hits"] - before[b"get_hits"] == 1
    assert after[b"get_misses"] - before[b"get_misses"] == 1
    assert after[b"curr_items"] == 1
    assert after[b"curr_connections"] >= 1
    assert after[b"limit_maxbytes"] == 64 * 1024 * 1024


def test_stats_settings(client):
    st = client.stats("settings")
    assert st[b"maxbytes"] == 64 * 1024 * 1024
    assert st[b"item_size_max"] == 1024 * 1024
    assert st[b"tcpport"] == client.server[1]
    assert isinstance(st[b"num_threads"], int)
    assert st[b"cas_enabled"] == b"yes"


def test_stats_items_and_slabs(fresh):
    _, client = fresh
    client.set_many({f"it{i}": b"v" * 10 for i in range(10)})
    client.set("it_large", b"v" * 5000)
    items = client.stats("items")
    assert items, "stats items returned nothing with 11 items stored"
    assert all(re.fullmatch(rb"items:\d+:\w+", k) for k in items), list(items)[:5]
    numbers = [v for k, v in items.items() if k.endswith(b":number")]
    assert sum(numbers) == 11
    slabs = client.stats("slabs")
    assert isinstance(slabs[b"active_slabs"], int) and slabs[b"active_slabs"] >= 1
    assert isinstance(slabs[b"total_malloced"], int)
    per_class = [k for k in slabs if re.fullmatch(rb"\d+:\w+", k)]
    assert per_class
    assert all(re.fullmatch(rb"\d+:\w+|active_slabs|total_malloced", k) for k in slabs)


def test_stats_unknown_group_is_error(client):
    with pytest.raises(MemcacheClientError):
        client.stats("no_such_group")
    assert client.version()


def test_verbosity_raw(client):
    assert client.raw_command("verbosity 1") == b"OK"
    assert client.raw_command("verbosity 0") == b"OK"
    # noreply form: nothing comes back; the next command still lines up
    client.sock.sendall(b"verbosity 0 noreply\r\n")
    assert client.version()


def test_cache_memlimit(client):
    assert client.cache_memlimit(100) is True
    assert client.stats()[b"limit_maxbytes"] == 100 * 1024 * 1024
    assert client.cache_memlimit(64) is True
    assert client.stats()[b"limit_maxbytes"] == 64 * 1024 * 1024


def test_flush_all(client):
    client.set_many({"f1": b"1", "f2": b"2"})
    assert client.flush_all() is True
    assert client.get_many(["f1", "f2"]) == {}
    client.set("f3", b"3")
    assert client.flush_all(noreply=True) is True
    assert client.get("f3") is None


def test_flush_all_with_delay():
    # own server: a pending delayed flush must not hit other tests' items
    with harness.Server() as srv:
        c = make_client(("127.0.0.1", srv.port))
        c.set("x", b"1")
        assert c.flush_all(delay=30) is True
        assert c.flush_all(delay=30, noreply=True) is True
        assert c.get("x") == b"1"  # not flushed yet
        c.close()


def test_quit_and_close_reconnect(client):
    client.set("q", b"v")
    assert client.sock is not None
    client.quit()
    assert client.sock is None
    assert client.get("q") == b"v"  # reconnects by itself
    client.close()
    assert client.sock is None
    assert client.get("q") == b"v"


def test_quit_closes_server_side(server):
    conn = server.connect()
    conn.send(b"quit\r\n")
    assert conn.is_closed()
    conn.close()


def test_shutdown_disabled_by_default(client, server):
    with pytest.raises(MemcacheUnknownCommandError):
        client.shutdown()
    assert server.proc.poll() is None
    assert client.version()


def test_shutdown_enabled_with_A():
    srv = harness.Server(["-A"])
    try:
        c = make_client(("127.0.0.1", srv.port))
        c.set("x", b"1")
        c.shutdown()
        srv.proc.wait(10)
    finally:
        srv.stop()


# --- other client classes ---------------------------------------------------------


def test_pooled_client(server_address):
    pc = PooledClient(server_address, max_pool_size=8, default_noreply=False,
                      connect_timeout=5, timeout=10)
    errors = []

    def worker(n):
        try:
            for i in range(50):
                key = f"p{n}_{i}"
                assert pc.set(key, f"{n}:{i}".encode()) is True
                assert pc.get(key) == f"{n}:{i}".encode()
            assert pc.incr(f"pc{n}", 1) is None
            pc.set(f"pc{n}", b"0")
            assert pc.incr(f"pc{n}", 5) == 5
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = pc.get_many([f"p{n}_{i}" for n in range(8) for i in range(50)])
    assert len(got) == 400
    assert pc.add("p0_0", b"x") is False
    assert pc.replace("p0_0", b"y") is True
    assert pc.append("p0_0", b"z") is True
    assert pc.prepend("p0_0", b"w") is True
    assert pc.get("p0_0") == b"wyz"
    v, token = pc.gets("p0_0")
    assert pc.cas("p0_0", b"c", token) is True
    assert pc.touch("p0_0", 100) is True
    assert pc.delete("p0_0") is True
    assert pc.delete_many(["p0_1", "p0_2"]) is True
    assert pc.get_many(["p0_0", "p0_1", "p0_2", "p0_3"]) == {"p0_3": b"0:3"}
    assert pc.version()
    assert isinstance(pc.stats()[b"curr_items"], int)
    assert pc.flush_all() is True
    assert pc.get("p0_3") is None
    pc.close()


def test_hash_client_two_servers():
    with harness.Server() as s1, harness.Server() as s2:
        hc = HashClient([("127.0.0.1", s1.port), ("127.0.0.1", s2.port)],
                        default_noreply=False, connect_timeout=5, timeout=10,
                        ignore_exc=False, retry_attempts=0)
        values = {f"hk{i}": f"v{i}".encode() for i in range(200)}
        assert hc.set_many(values) == []
        assert hc.get_many(list(values)) == values
        n1 = make_client(("127.0.0.1", s1.port)).stats()[b"curr_items"]
        n2 = make_client(("127.0.0.1", s2.port)).stats()[b"curr_items"]
        assert n1 > 0 and n2 > 0 and n1 + n2 == 200
        assert hc.add("hk0", b"x") is False
        hc.set("hcnt", b"1")
        assert hc.incr("hcnt", 2) == 3
        assert hc.decr("hcnt", 1) == 2
        assert hc.gets_many(["hk1", "hk2"])["hk1"][0] == b"v1"
        assert hc.delete_many([f"hk{i}" for i in range(100)]) is True
        assert len(hc.get_many(list(values))) == 100
        hc.flush_all()
        assert hc.get_many(list(values)) == {}
        hc.close()
