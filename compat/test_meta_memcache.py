"""Compatibility with meta-memcache (RevenueCat's meta-protocol client): every
public method of ``CacheClient``, with real results.

meta-memcache speaks only the meta protocol (mg/ms/md/ma/mn). What its methods
put on the wire (meta-memcache 4.3.0 / meta-memcache-socket 0.3.1):

    get / get_typed / multi_get     mg <key> f v t l h [T<touch>] [R<recache>]
    get_cas / multi_get_cas         mg <key> f c v t l h ...
    get_or_lease[_cas]              mg <key> f c v t l h N<lease ttl> [R..] [T..]
    set / set_cas                   ms <key> <len> [c] [q] T<ttl> F<type> [C<cas>] [I] [M<E|A|P|R>]
    refill                          ms <key> <len> T<ttl> F<type> ME
    delete / invalidate             md <key> [q] [C<cas>] [I T<stale ttl>]
    touch                           mg <key> T<ttl>
    delta*                          ma <key> [v] [T<ttl>] [N<ttl> J<initial>] D<delta> [M-] [C<cas>]
    no_reply=True                   adds q and follows the command with "mn" (reads up to MN)
    keys with spaces / non-ASCII    sent base64 encoded with the b flag
    keys over 250 bytes             hashed, then base64 with b

Every high-level read asks for t (ttl), l (last access) and h (hit before),
so a server has to accept those flags on every mg.
"""

import os
from typing import NamedTuple

import pytest

import harness
from meta_memcache import (
    CacheClient,
    Conflict,
    Key,
    LeasePolicy,
    MemcacheServerError,
    Miss,
    NotStored,
    RecachePolicy,
    RequestFlags,
    ServerAddress,
    SetMode,
    StalePolicy,
    Success,
    Value,
    connection_pool_factory_builder,
    is_error_response,
)
from meta_memcache.protocol import MA_MODE_DEC, SET_MODE_APPEND
from meta_memcache.serializer import MixedSerializer

LEASE = LeasePolicy(ttl=30, miss_retries=3, miss_retry_wait=0.5)
STALE_ON_DELETE = StalePolicy(mark_stale_on_deletion_ttl=30)


class Point(NamedTuple):  # module level, so pickle can find it
    x: int
    y: int


def make_meta_client(port, factory=CacheClient.cache_client_from_servers, **kw):
    """A CacheClient for one server on 127.0.0.1:<port>; each call has its own pool."""
    kw.setdefault(
        "connection_pool_factory_fn",
        connection_pool_factory_builder(connection_timeout=5, recv_timeout=10),
    )
    return factory(servers=[ServerAddress("127.0.0.1", port)], **kw)


def no_wait(seconds):
    raise AssertionError(f"the client was not expected to wait ({seconds}s) for a lease")


class Raw:
    """A plain text-protocol connection, to see items from outside the client."""

    def __init__(self, server):
        self.conn = server.connect()

    def get(self, key):
        """(flags, data) as the text protocol's get sees the item, or None."""
        self.conn.send(b"get " + key + b"\r\n")
        line = self.conn.read_line()
        if line == b"END\r\n":
            return None
        _, _, flags, size = line.split()
        data = self.conn.read_exact(int(size) + 2)[:-2]
        assert self.conn.read_line() == b"END\r\n"
        return int(flags), data

    def call(self, line):
        self.conn.send(line + b"\r\n")
        return self.conn.read_line()

    def close(self):
        self.conn.close()


@pytest.fixture
def raw(server):
    r = Raw(server)
    yield r
    r.close()


@pytest.fixture
def mc(server, raw):
    """A meta-memcache client on the module's server (tests/harness.Server), cache emptied."""
    assert raw.call(b"flush_all") == b"OK\r\n"
    return make_meta_client(server.port)


@pytest.fixture
def mc2(server):
    """A second, independent client (own connection pool): another process, in effect."""
    return make_meta_client(server.port)


def ttl_of(client, key):
    r = client.meta_get(Key(key), RequestFlags(return_ttl=True))
    assert isinstance(r, Success), r
    return r.flags.ttl


# --- the whole public API is covered ------------------------------------------------

COVERED = {
    # constructors
    "cache_client_from_servers", "cache_client_with_gutter_from_servers",
    "ephemeral_cache_client_from_servers",
    # high level
    "get", "get_cas", "get_typed", "get_cas_typed", "multi_get", "multi_get_cas",
    "get_or_lease", "get_or_lease_cas", "set", "set_cas", "refill", "delete",
    "invalidate", "touch", "delta", "delta_and_get", "delta_initialize",
    "delta_initialize_and_get",
    # low level
    "meta_get", "meta_multiget", "meta_set", "meta_delete", "meta_arithmetic",
    # plumbing
    "on_write_failure", "get_counters",
}


def test_every_public_method_is_covered():
    public = {m for m in dir(CacheClient) if not m.startswith("_")}
    assert public == COVERED, "new/removed CacheClient methods: add tests for them"


# --- values and the MixedSerializer ---------------------------------------------


def test_set_get_bytes_str_int(mc, raw):
    assert mc.set("b", b"\x00bytes\r\nEND\r\n", ttl=0) is True
    assert mc.set("s", "текст", ttl=0) is True
    assert mc.set("i", 1234567890123, ttl=0) is True
    assert mc.set("neg", -5, ttl=0) is True
    assert mc.set("empty", b"", ttl=0) is True
    assert mc.get("b") == b"\x00bytes\r\nEND\r\n"
    assert mc.get("s") == "текст"
    assert mc.get("i") == 1234567890123 and isinstance(mc.get("i"), int)
    assert mc.get("neg") == -5
    assert mc.get("missing") is None
    # the type travels in the client flags (F): BINARY=16, STR=0, INT=2
    assert raw.get(b"b") == (MixedSerializer.BINARY, b"\x00bytes\r\nEND\r\n")
    assert raw.get(b"s") == (MixedSerializer.STR, "текст".encode())
    assert raw.get(b"i") == (MixedSerializer.INT, b"1234567890123")
    # overwrite
    assert mc.set("s", "second", ttl=0) is True
    assert mc.get("s") == "second"


def test_empty_bytes_value(mc, raw):
    # a zero-length value comes back as VA 0
    assert raw.get(b"empty") is None
    assert mc.set("empty", b"", ttl=0) is True
    assert raw.get(b"empty") == (MixedSerializer.BINARY, b"")
    r = mc.meta_get(Key("empty"), RequestFlags(return_value=True, return_client_flag=True))
    assert isinstance(r, Value) and r.size == 0 and r.flags.client_flag == MixedSerializer.BINARY
    assert mc.get("empty") == b""
    assert mc.multi_get(["empty"]) == {Key("empty"): b""}
    # the client skips deserializing empty data, so "" comes back as b"" too
    assert mc.set("empty_str", "", ttl=0) is True
    assert raw.get(b"empty_str") == (MixedSerializer.STR, b"")
    assert mc.get("empty_str") == b""


def test_pickled_objects(mc, raw):
    cases = {
        "dict": {"a": [1, 2, 3], "b": (4, 5), "c": None},
        "list": [1, "two", 3.0, None, b"five"],
        "tuple": (1, 2),
        "point": Point(3, 4),
        "bool": True,
        "float": 2.5,
    }
    for key, value in cases.items():
        assert mc.set(key, value, ttl=0) is True
    for key, value in cases.items():
        got = mc.get(key)
        assert got == value and type(got) is type(value), key
        assert raw.get(key.encode())[0] == MixedSerializer.PICKLE
    assert mc.multi_get(list(cases)) == {Key(k): v for k, v in cases.items()}


def test_compressed_and_large_values(mc, raw):
    text = "compress me " * 1000  # over 128 bytes: zlib, F = STR|ZLIB = 8
    assert mc.set("z", text, ttl=0) is True
    assert mc.get("z") == text
    flags, stored = raw.get(b"z")
    assert flags == MixedSerializer.STR | MixedSerializer.ZLIB_COMPRESSED
    assert len(stored) < len(text)
    # 10 KB that does not compress: more than the client's default 4 KiB read buffer
    blob = os.urandom(10 * 1024)
    assert mc.set("blob", blob, ttl=0) is True
    assert mc.get("blob") == blob
    assert mc.multi_get(["blob", "z", "nope"]) == {Key("blob"): blob, Key("z"): text, Key("nope"): None}


def test_value_near_1mb(server, mc):
    # With the default read_buffer_size (4 KiB), meta-memcache-socket 0.3.1 reads a value
    # of over ~12 KB in 8 KB steps ~200 ms apart (a recv(MSG_WAITALL) that hits EAGAIN,
    # then poll; 600 KB took 15 s against memcached 1.6.18), so this one uses a buffer
    # that holds the whole reply.
    big = make_meta_client(
        server.port,
        connection_pool_factory_fn=connection_pool_factory_builder(
            connection_timeout=5, recv_timeout=10, read_buffer_size=1024 * 1024
        ),
    )
    blob = os.urandom(1000 * 1024)  # zlib makes it a little larger still
    assert big.set("blob", blob, ttl=0) is True
    assert big.get("blob") == blob
    assert big.multi_get(["blob", "nope"]) == {Key("blob"): blob, Key("nope"): None}
    assert mc.set("blob2", blob[:600 * 1024], ttl=0) is True
    assert big.get("blob2") == blob[:600 * 1024]


def test_value_too_large_is_server_error_and_write_failure(mc):
    failed = []
    mc.on_write_failure += failed.append  # property getter, WriteFailureEvent.__iadd__, setter
    assert mc.set("ok", b"fine", ttl=0) is True
    assert failed == []
    with pytest.raises(MemcacheServerError):
        mc.set("huge", os.urandom(2 * 1024 * 1024), ttl=0)  # over the 1 MB item limit
    assert failed == [Key("huge")]
    # the bad connection was dropped; the next request opens a new one
    assert mc.get("ok") == b"fine"
    assert mc.get("huge") is None
    counters = list(mc.get_counters().values())[0]
    assert counters.total_errors == 1
    mc.on_write_failure -= failed.append
    with pytest.raises(MemcacheServerError):
        mc.set("huge", os.urandom(2 * 1024 * 1024), ttl=0)
    assert failed == [Key("huge")]


def test_value_too_large_without_raising(server):
    c = make_meta_client(server.port, raise_on_server_error=False)
    failed = []
    c.on_write_failure += failed.append
    r = c.meta_set(Key("huge"), os.urandom(2 * 1024 * 1024), RequestFlags(cache_ttl=0))
    assert isinstance(r, NotStored) and is_error_response(r)
    assert c.set("huge", os.urandom(2 * 1024 * 1024), ttl=0) is False
    assert failed == [Key("huge"), Key("huge")]
    assert c.set("small", b"x", ttl=0) is True
    r = c.meta_get(Key("small"), RequestFlags(return_value=True, return_client_flag=True))
    assert isinstance(r, Value) and r.value == b"x" and not is_error_response(r)
    r = c.meta_get(Key("nothing"), RequestFlags(return_value=True))
    assert isinstance(r, Miss) and not is_error_response(r)


# --- keys --------------------------------------------------------------------------


def test_unicode_and_spaced_keys_go_base64(mc, raw):
    for key in ("ключ", "🍺", "with space", "tab\tand\nnewline"):
        assert mc.set(Key(key), key, ttl=0) is True
        assert mc.get(Key(key)) == key
        assert mc.get(key) == key  # plain str keys get the same encoding
    assert mc.multi_get(["ключ", "🍺", "nope nope"]) == {
        Key("ключ"): "ключ", Key("🍺"): "🍺", Key("nope nope"): None
    }
    # the server stores the decoded bytes: a text-protocol get finds the UTF-8 key
    assert raw.get("ключ".encode()) == (MixedSerializer.STR, "ключ".encode())
    assert mc.delete("🍺") is True
    assert mc.get("🍺") is None


def test_long_keys_are_hashed(mc):
    long1, long2 = "k" * 400, "k" * 399 + "x"
    assert mc.set(long1, 1, ttl=0) is True
    assert mc.set(long2, 2, ttl=0) is True
    assert mc.get(long1) == 1
    assert mc.get(long2) == 2
    k250 = "a" * 250  # the longest key sent as it is
    assert mc.set(k250, "v", ttl=0) is True
    assert mc.get(k250) == "v"


def test_key_encoder_fn(server, raw, mc):
    c = make_meta_client(server.port, key_encoder_fn=lambda key: b"ns:" + key.key.encode())
    assert c.set("k", b"v", ttl=0) is True
    assert raw.get(b"ns:k") == (MixedSerializer.BINARY, b"v")
    assert mc.get("k") is None
    assert c.get("k") == b"v"
    assert c.multi_get(["k", "j"]) == {Key("k"): b"v", Key("j"): None}


def test_meta_and_text_protocol_share_items(mc, raw):
    assert mc.set("m2t", "from meta", ttl=0) is True
    assert raw.get(b"m2t") == (0, b"from meta")
    assert raw.call(b"set t2m 16 0 9\r\nfrom text") == b"STORED\r\n"
    assert mc.get("t2m") == b"from text"
    assert raw.call(b"set t2m_str 0 0 2\r\nhi") == b"STORED\r\n"
    assert mc.get("t2m_str") == "hi"  # flags 0 = STR for this client
    assert raw.call(b"set cnt 0 0 2\r\n41") == b"STORED\r\n"
    assert mc.delta_and_get("cnt", 1) == 42
    assert raw.call(b"incr cnt 8") == b"50\r\n"
    assert int(mc.get("cnt").strip()) == 50


# --- get / multi_get / typed / touch -------------------------------------------------


def test_multi_get_hits_and_misses(mc):
    values = {f"mk{i}": f"value-{i}" for i in range(30)}
    for k, v in values.items():
        assert mc.set(k, v, ttl=0) is True
    keys = list(values) + ["miss1", "miss2"]
    got = mc.multi_get(keys)
    assert list(got) == [Key(k) for k in keys]  # one entry per key, in order
    assert got == {**{Key(k): v for k, v in values.items()}, Key("miss1"): None, Key("miss2"): None}
    assert mc.multi_get([]) == {}
    assert mc.multi_get(["miss1"]) == {Key("miss1"): None}


def test_get_and_multi_get_touch_ttl(mc):
    mc.set("g1", 1, ttl=100)
    mc.set("g2", 2, ttl=100)
    assert 95 <= ttl_of(mc, "g1") <= 100
    assert mc.get("g1", touch_ttl=1000) == 1
    assert 995 <= ttl_of(mc, "g1") <= 1000
    assert mc.multi_get(["g1", "g2"], touch_ttl=2000) == {Key("g1"): 1, Key("g2"): 2}
    assert 1995 <= ttl_of(mc, "g1") <= 2000
    assert 1995 <= ttl_of(mc, "g2") <= 2000
    mc.set("forever", 1, ttl=0)
    assert ttl_of(mc, "forever") == -1


def test_get_typed(mc):
    mc.set("ti", 7, ttl=0)
    mc.set("ts", "seven", ttl=0)
    assert mc.get_typed("ti", int) == 7
    assert mc.get_typed("ti", str) is None
    with pytest.raises(ValueError):
        mc.get_typed("ti", str, error_on_type_mismatch=True)
    assert mc.get_typed("ts", str) == "seven"
    assert mc.get_typed("missing", str, error_on_type_mismatch=True) is None
    value, token = mc.get_cas_typed("ts", str)
    assert value == "seven" and isinstance(token, int)
    assert mc.get_cas_typed("ts", int) == (None, token)
    with pytest.raises(ValueError):
        mc.get_cas_typed("ts", int, error_on_type_mismatch=True)
    assert mc.get_cas_typed("missing", int) == (None, None)


def test_touch(mc):
    assert mc.touch("nokey", 100) is False
    mc.set("tt", b"v", ttl=100)
    assert mc.touch("tt", 500) is True
    assert 495 <= ttl_of(mc, "tt") <= 500
    assert mc.touch("tt", 0) is True  # 0: never expires
    assert ttl_of(mc, "tt") == -1
    assert mc.touch("tt", 60, no_reply=True) is True
    assert 55 <= ttl_of(mc, "tt") <= 60
    assert mc.get("tt") == b"v"


# --- set modes, cas ----------------------------------------------------------------


def test_set_modes(mc):
    assert mc.set("m", b"new", ttl=0, set_mode=SetMode.ADD) is True
    assert mc.set("m", b"again", ttl=0, set_mode=SetMode.ADD) is False
    assert mc.get("m") == b"new"
    assert mc.set("absent", b"x", ttl=0, set_mode=SetMode.REPLACE) is False
    assert mc.get("absent") is None
    assert mc.set("m", b"mid", ttl=0, set_mode=SetMode.REPLACE) is True
    assert mc.set("m", b"-end", ttl=0, set_mode=SetMode.APPEND) is True
    assert mc.set("m", b"start-", ttl=0, set_mode=SetMode.PREPEND) is True
    assert mc.get("m") == b"start-mid-end"
    assert mc.set("absent", b"x", ttl=0, set_mode=SetMode.APPEND) is False
    assert mc.set("absent", b"x", ttl=0, set_mode=SetMode.PREPEND) is False
    assert mc.get("absent") is None


def test_cas_guarded_set(mc, mc2):
    assert mc.get_cas("c") == (None, None)
    assert mc.set("c", "v1", ttl=0) is True
    value, token = mc.get_cas("c")
    assert value == "v1" and isinstance(token, int) and token > 0
    # someone else writes in between: the token is stale
    assert mc2.set("c", "other", ttl=0) is True
    assert mc.set("c", "v2", ttl=0, cas_token=token) is False
    assert mc.get("c") == "other"
    value, token = mc.get_cas("c")
    assert mc.set("c", "v2", ttl=0, cas_token=token) is True
    assert mc.get("c") == "v2"
    assert mc.set("c", "v3", ttl=0, cas_token=token) is False  # used up
    # cas against a missing key fails too
    assert mc.set("nokey", "x", ttl=0, cas_token=token) is False
    assert mc.get("nokey") is None


def test_set_cas_returns_token(mc):
    t1 = mc.set_cas("sc", "a", ttl=0)
    assert isinstance(t1, int)
    assert mc.get_cas("sc") == ("a", t1)
    t2 = mc.set_cas("sc", "b", ttl=0, cas_token=t1)
    assert isinstance(t2, int) and t2 != t1
    assert mc.get_cas("sc") == ("b", t2)
    assert mc.set_cas("sc", "c", ttl=0, cas_token=t1) is None
    assert mc.set_cas("sc", "c", ttl=0, set_mode=SetMode.ADD) is None
    assert mc.set_cas("sc2", "c", ttl=0, set_mode=SetMode.ADD) is not None
    assert mc.get("sc") == "b"


def test_multi_get_cas(mc):
    t1 = mc.set_cas("mc1", 1, ttl=0)
    t2 = mc.set_cas("mc2", 2, ttl=0)
    assert t1 != t2
    assert mc.multi_get_cas(["mc1", "mc2", "mc3"]) == {
        Key("mc1"): (1, t1), Key("mc2"): (2, t2), Key("mc3"): (None, None)
    }


def test_cas_mismatch_with_stale_policy_stores_stale(mc, mc2):
    """StalePolicy(mark_stale_on_cas_mismatch): ms ... C<old> I.

    The late write is kept but marked stale, so the next reader is told to recache
    (gets a miss), while others keep getting the stale value."""
    policy = StalePolicy(mark_stale_on_cas_mismatch=True)
    mc.set("sp", "v1", ttl=100)
    _, old = mc.get_cas("sp")
    mc2.set("sp", "v2", ttl=100)
    assert mc.set("sp", "late", ttl=100, cas_token=old, stale_policy=policy) is True
    assert mc.get("sp") is None  # won the recache
    assert mc2.get("sp") == "late"  # served stale
    r = mc2.meta_get(Key("sp"), RequestFlags(return_value=True))
    assert isinstance(r, Value) and r.flags.stale is True and r.flags.win is False
    # without the policy the same late write is refused
    _, current = mc.get_cas("sp")
    mc2.set("sp", "v3", ttl=100)
    assert mc.set("sp", "late2", ttl=100, cas_token=current) is False
    assert mc.get("sp") == "v3"


# --- delete / invalidate -------------------------------------------------------------


def test_delete(mc):
    mc.set("d", b"1", ttl=0)
    assert mc.delete("d") is True
    assert mc.get("d") is None
    assert mc.delete("d") is False
    assert mc.delete("never-was") is False
    # cas-guarded delete
    mc.set("d", b"2", ttl=0)
    _, token = mc.get_cas("d")
    assert mc.delete("d", cas_token=token + 1000) is False
    assert mc.get("d") == b"2"
    assert mc.delete("d", cas_token=token) is True
    assert mc.get("d") is None
    # no_reply: always True, still deletes
    mc.set("d", b"3", ttl=0)
    assert mc.delete("d", no_reply=True) is True
    assert mc.get("d") is None


def test_invalidate(mc):
    mc.set("inv", b"1", ttl=0)
    assert mc.invalidate("inv") is True
    assert mc.get("inv") is None
    assert mc.invalidate("inv") is True  # missing is fine for invalidate
    mc.set("inv", b"2", ttl=0)
    _, token = mc.get_cas("inv")
    assert mc.invalidate("inv", cas_token=token + 1000) is False  # EX
    assert mc.get("inv") == b"2"
    assert mc.invalidate("inv", cas_token=token) is True
    assert mc.get("inv") is None
    mc.set("inv", b"3", ttl=0)
    assert mc.invalidate("inv", no_reply=True) is True
    assert mc.get("inv") is None


# --- herd control: leases, stale-while-revalidate, early recache -------------------


def test_lease_first_caller_wins(mc, mc2):
    winner, loser = mc, mc2
    value, token = winner.get_or_lease_cas("lk", LEASE, lease_wait_fn=no_wait)
    assert value is None and isinstance(token, int)  # W: go and fill it
    waits = []
    # the loser (Z, empty placeholder) retries miss_retries times, then gives up
    assert loser.get_or_lease("lk", LEASE, lease_wait_fn=waits.append) is None
    assert waits == [0.5, pytest.approx(0.6)]
    assert loser.get_or_lease_cas("lk", LEASE, lease_wait_fn=waits.append) == (None, token)
    assert len(waits) == 4
    # the plain get also sees no value while the placeholder is there
    assert loser.get("lk") is None
    # the winner fills the key, guarded by the lease's cas token
    assert winner.set("lk", "filled", ttl=100, cas_token=token) is True
    assert loser.get_or_lease("lk", LEASE, lease_wait_fn=no_wait) == "filled"
    assert winner.get_or_lease_cas("lk", LEASE, lease_wait_fn=no_wait)[0] == "filled"
    assert loser.get("lk") == "filled"


def test_lease_loser_gets_value_filled_while_waiting(mc, mc2):
    winner, loser = mc, mc2
    assert winner.get_or_lease("lw", LEASE, lease_wait_fn=no_wait) is None
    _, token = winner.get_cas("lw")
    waits = []

    def winner_fills_meanwhile(seconds):
        waits.append(seconds)
        assert winner.set("lw", {"computed": True}, ttl=100, cas_token=token) is True

    assert loser.get_or_lease("lw", LEASE, lease_wait_fn=winner_fills_meanwhile) == {"computed": True}
    assert waits == [0.5]


def test_lease_on_existing_key_and_touch(mc):
    mc.set("le", "here", ttl=100)
    assert mc.get_or_lease("le", LEASE, touch_ttl=1000, lease_wait_fn=no_wait) == "here"
    assert 995 <= ttl_of(mc, "le") <= 1000
    with pytest.raises(ValueError):
        mc.get_or_lease("le", LeasePolicy(miss_retries=0))


def test_refill(mc):
    assert mc.refill("rf", "from db", ttl=100) is True
    assert mc.get("rf") == "from db"
    # refill is an add: it never overwrites
    assert mc.refill("rf", "older", ttl=100) is False
    assert mc.get("rf") == "from db"
    assert mc.refill("rf2", 5, ttl=100, no_reply=True) is True
    assert mc.get("rf2") == 5
    # a lease placeholder is an item too: refill (ms ME) cannot fill it;
    # the lease winner has to use set (with the lease's cas token)
    assert mc.get_or_lease("rf3", LEASE, lease_wait_fn=no_wait) is None
    assert mc.refill("rf3", "x", ttl=100) is False
    assert mc.get("rf3") is None


def test_stale_while_revalidate_after_delete(mc, mc2, server):
    """delete/invalidate with StalePolicy(mark_stale_on_deletion_ttl) send md <key> I T<ttl>:
    the item stays, marked stale; exactly one reader is told to recache (W) and gets
    a miss, every other reader is served the stale value (X Z) until it is refilled."""
    mc3 = make_meta_client(server.port)
    mc.set("sw", "v1", ttl=1000)
    assert mc.delete("sw", stale_policy=STALE_ON_DELETE) is True
    readers = [mc, mc2, mc3, mc2, mc3]
    results = [c.get_cas("sw") for c in readers]
    winners = [r for r in results if r[0] is None]
    assert len(winners) == 1 and results[0][0] is None  # the first reader wins
    assert [r[0] for r in results[1:]] == ["v1"] * 4
    token = results[0][1]
    assert all(r[1] == token for r in results)
    r = mc2.meta_get(Key("sw"), RequestFlags(return_value=True, return_ttl=True))
    assert isinstance(r, Value) and r.flags.stale is True and r.flags.win is False
    assert 0 < r.flags.ttl <= 30  # the stale TTL from the policy
    assert mc2.multi_get(["sw"]) == {Key("sw"): "v1"}
    # the winner refills; the item is fresh again
    assert mc.set("sw", "v2", ttl=1000, cas_token=token) is True
    r = mc2.meta_get(Key("sw"), RequestFlags(return_value=True, return_ttl=True))
    assert isinstance(r, Value) and r.flags.stale is False and r.flags.win is None
    assert r.flags.ttl > 900
    assert [c.get("sw") for c in readers] == ["v2"] * 5
    # the stale marks also come from invalidate(); deleting a missing key reports it
    assert mc.invalidate("sw", stale_policy=STALE_ON_DELETE) is True
    assert mc2.get("sw") is None and mc.get("sw") == "v2"
    assert mc.delete("nothing", stale_policy=STALE_ON_DELETE) is False
    assert mc.invalidate("nothing", stale_policy=STALE_ON_DELETE) is True
    assert mc.get("nothing") is None  # marking stale does not create items


def test_recache_policy(mc, mc2):
    """get(..., recache_policy) sends R<ttl>: when the remaining TTL drops below it,
    one reader wins the recache (gets a miss), the rest keep the value."""
    policy = RecachePolicy(ttl=30)
    mc.set("rc", "old", ttl=20)
    assert mc.get("rc", recache_policy=policy) is None  # winner
    assert mc2.get("rc", recache_policy=policy) == "old"
    assert mc.get("rc", recache_policy=policy) == "old"  # only once
    assert mc2.multi_get(["rc"], recache_policy=policy) == {Key("rc"): "old"}
    r = mc2.meta_get(Key("rc"), RequestFlags(return_value=True, recache_ttl=30))
    assert isinstance(r, Value) and r.flags.win is False and r.flags.stale is False
    assert mc.get("rc") == "old"  # without R nobody is told anything
    # refreshed with a long TTL: no more recache wins
    mc.set("rc", "new", ttl=1000)
    assert mc.get("rc", recache_policy=policy) == "new"
    assert mc2.get("rc", recache_policy=policy) == "new"
    # multi_get hands the win to exactly one key owner too
    mc.set("rc2", "x", ttl=20)
    assert mc.multi_get(["rc", "rc2"], recache_policy=policy) == {Key("rc"): "new", Key("rc2"): None}
    assert mc2.multi_get_cas(["rc2"], recache_policy=policy)[Key("rc2")][0] == "x"
    # and get_or_lease honours a recache policy as well
    mc.set("rc3", "y", ttl=20)
    assert mc.get_or_lease("rc3", LEASE, recache_policy=policy, lease_wait_fn=no_wait) is None
    assert mc2.get_or_lease("rc3", LEASE, recache_policy=policy, lease_wait_fn=no_wait) == "y"


# --- counters ----------------------------------------------------------------------


def test_delta_without_initial_value(mc):
    assert mc.delta("n", 1) is False  # NF
    assert mc.delta_and_get("n", 1) is None
    assert mc.get("n") is None
    mc.set("n", 10, ttl=0)
    assert mc.delta("n", 5) is True
    assert mc.delta_and_get("n", 5) == 20
    assert mc.delta_and_get("n", -3) == 17
    assert mc.delta("n", -7) is True
    assert mc.get("n") == 10
    assert mc.delta_and_get("n", -100) == 0  # decrement floors at zero
    # growing past the stored length
    mc.set("g", 99, ttl=0)
    assert mc.delta_and_get("g", 1) == 100
    assert mc.get("g") == 100
    # 64-bit wrap on increment
    mc.set("w", 2**64 - 1, ttl=0)
    assert mc.delta_and_get("w", 1) == 0
    assert mc.delta("n", 1, no_reply=True) is True
    assert mc.delta("nothing", 1, no_reply=True) is True
    assert int(mc.get("n")) == 1
    assert mc.get("nothing") is None


def test_delta_with_initial_value(mc):
    # on a miss the counter is created with the initial value (the delta is not applied)
    assert mc.delta_initialize_and_get("ni", 5, initial_value=10, initial_ttl=100) == 10
    assert mc.delta_initialize_and_get("ni", 5, initial_value=10, initial_ttl=100) == 15
    assert 95 <= ttl_of(mc, "ni") <= 100
    assert mc.delta_initialize("nd", -3, initial_value=7, initial_ttl=100) is True
    assert int(mc.get("nd")) == 7
    assert mc.delta_initialize("nd", -3, initial_value=7, initial_ttl=100) is True
    assert int(mc.get("nd")) == 4
    assert mc.delta_initialize_and_get("nd", -10, initial_value=7, initial_ttl=100) == 0
    assert mc.delta_initialize("nq", 1, initial_value=3, initial_ttl=100, no_reply=True) is True
    assert int(mc.get("nq")) == 3


def test_delta_refresh_ttl_and_cas(mc):
    mc.set("dc", 1, ttl=100)
    assert mc.delta("dc", 1, refresh_ttl=500) is True
    assert 495 <= ttl_of(mc, "dc") <= 500
    assert mc.delta_and_get("dc", 1, refresh_ttl=50) == 3
    assert 45 <= ttl_of(mc, "dc") <= 50
    _, token = mc.get_cas("dc")
    assert mc.delta_and_get("dc", 1, cas_token=token + 1000) is None  # EX
    assert mc.delta("dc", 1, cas_token=token + 1000) is False
    assert int(mc.get("dc")) == 3
    assert mc.delta_and_get("dc", 1, cas_token=token) == 4
    _, token = mc.get_cas("dc")
    assert mc.delta("dc", 2, cas_token=token) is True
    assert mc.delta_initialize_and_get(
        "dc", 1, initial_value=0, initial_ttl=10, cas_token=token
    ) is None  # token used up
    assert int(mc.get("dc")) == 6


def test_delta_on_non_numeric_value(mc):
    mc.set("txt", "abc", ttl=0)
    # CLIENT_ERROR is not a meta reply code: the client raises and drops the connection
    with pytest.raises(MemcacheServerError):
        mc.delta("txt", 1)
    assert mc.get("txt") == "abc"
    assert mc.delta_and_get("n2", 1) is None


# --- no_reply (q + mn) -------------------------------------------------------------


def test_no_reply_writes(mc):
    assert mc.set("q", b"v", ttl=0, no_reply=True) is True
    # an add that fails still reports True (nothing to read), and stores nothing
    assert mc.set("q", b"x", ttl=0, no_reply=True, set_mode=SetMode.ADD) is True
    assert mc.set("q", b"-a", ttl=0, no_reply=True, set_mode=SetMode.APPEND) is True
    assert mc.set("q2", b"x", ttl=0, no_reply=True, cas_token=12345) is True
    assert mc.get("q") == b"v-a"
    assert mc.get("q2") is None
    assert mc.delete("q", no_reply=True) is True
    assert mc.delete("q", no_reply=True) is True
    assert mc.get_cas("q") == (None, None)
    # the connection stays in step after a run of quiet commands
    for i in range(20):
        mc.set(f"qq{i}", i, ttl=0, no_reply=True)
    assert mc.multi_get([f"qq{i}" for i in range(20)]) == {Key(f"qq{i}"): i for i in range(20)}


# --- low-level meta commands --------------------------------------------------------


def test_meta_get_flags(mc):
    mc.set("mg", b"hello", ttl=100)
    # u (no LRU bump) is accepted; memcached does not count such a read as a fetch,
    # so only the fetched flag of the next, ordinary read is looked at below
    r = mc.meta_get(Key("mg"), RequestFlags(return_value=True, no_update_lru=True))
    # without f the client cannot tell the type and decodes the bytes as str
    assert isinstance(r, Value) and r.value == "hello" and r.flags.client_flag is None
    # first look: not fetched before (h0); k echoes the key, O the opaque, s the size
    r = mc.meta_get(Key("mg"), RequestFlags(
        return_value=True, return_size=True, return_key=True, opaque=b"abc123",
        return_client_flag=True, return_fetched=True,
        return_last_access=True, return_ttl=True, return_cas_token=True,
    ))
    assert isinstance(r, Value)
    assert r.value == b"hello" and r.size == 5
    f = r.flags
    assert f.size == 5 and f.opaque == b"abc123" and f.client_flag == MixedSerializer.BINARY
    assert f.fetched is False and f.last_access is not None and 0 <= f.last_access <= 2
    assert 95 <= f.ttl <= 100 and isinstance(f.cas_token, int)
    assert f.win is None and f.stale is False
    r = mc.meta_get(Key("mg"), RequestFlags(return_fetched=True))
    assert isinstance(r, Success) and not isinstance(r, Value) and r.flags.fetched is True
    # no v: HD with the asked-for flags only
    r = mc.meta_get(Key("mg"), RequestFlags(return_size=True))
    assert type(r) is Success and r.flags.size == 5 and r.flags.ttl is None
    # no flags at all
    assert type(mc.meta_get(Key("mg"))) is Success
    assert isinstance(mc.meta_get(Key("nokey"), RequestFlags(return_value=True)), Miss)
    assert isinstance(mc.meta_get(Key("nokey")), Miss)


def test_meta_multiget(mc):
    mc.set("a", b"1", ttl=0)
    mc.set("b", "2", ttl=0)
    got = mc.meta_multiget(
        [Key("a"), Key("b"), Key("c"), Key("ключ")],
        RequestFlags(return_value=True, return_client_flag=True, return_key=True, opaque=b"o1"),
    )
    assert list(got) == [Key("a"), Key("b"), Key("c"), Key("ключ")]
    assert isinstance(got[Key("a")], Value) and got[Key("a")].value == b"1"
    assert got[Key("b")].value == "2" and got[Key("b")].flags.client_flag == 0
    assert got[Key("a")].flags.opaque == b"o1"
    assert isinstance(got[Key("c")], Miss) and isinstance(got[Key("ключ")], Miss)
    assert mc.meta_multiget([]) == {}


def test_meta_set(mc):
    r = mc.meta_set(Key("ms"), b"hello", RequestFlags(cache_ttl=50, return_cas_token=True))
    assert type(r) is Success and isinstance(r.flags.cas_token, int)
    token = r.flags.cas_token
    assert mc.get_cas("ms") == (b"hello", token)
    assert 45 <= ttl_of(mc, "ms") <= 50
    r = mc.meta_set(Key("ms"), b"x", RequestFlags(cas_token=token + 1000))
    assert isinstance(r, Conflict)
    r = mc.meta_set(Key("nokey"), b"x", RequestFlags(cas_token=token))
    assert isinstance(r, Miss)  # NF
    r = mc.meta_set(Key("ms"), b" world", RequestFlags(mode=SET_MODE_APPEND, opaque=b"op"))
    assert type(r) is Success and r.flags.opaque == b"op"
    assert mc.get("ms") == b"hello world"
    r = mc.meta_set(Key("ms"), b"x", RequestFlags(mode=SetMode.ADD.value))
    assert isinstance(r, NotStored)
    # the serializer picks F (client flags) from the value type, overriding the caller's
    mc.meta_set(Key("typed"), 42, RequestFlags(client_flag=999))
    r = mc.meta_get(Key("typed"), RequestFlags(return_value=True, return_client_flag=True))
    assert r.value == 42 and r.flags.client_flag == MixedSerializer.INT
    # quiet set
    r = mc.meta_set(Key("quiet"), b"q", RequestFlags(no_reply=True))
    assert type(r) is Success
    assert mc.get("quiet") == b"q"


def test_meta_delete(mc):
    mc.set("md", b"1", ttl=0)
    _, token = mc.get_cas("md")
    assert isinstance(mc.meta_delete(Key("md"), RequestFlags(cas_token=token + 1)), Conflict)
    r = mc.meta_delete(Key("md"), RequestFlags(cas_token=token, opaque=b"x1"))
    assert type(r) is Success and r.flags.opaque == b"x1"
    assert isinstance(mc.meta_delete(Key("md")), Miss)
    # mark stale (I) with a new TTL (T)
    mc.set("md", b"2", ttl=0)
    assert type(mc.meta_delete(Key("md"), RequestFlags(mark_stale=True, cache_ttl=20))) is Success
    r = mc.meta_get(Key("md"), RequestFlags(return_value=True, return_ttl=True, return_client_flag=True))
    assert isinstance(r, Value) and r.value == b"2" and r.flags.stale is True
    assert r.flags.win is True and 0 < r.flags.ttl <= 20


def test_meta_arithmetic(mc):
    r = mc.meta_arithmetic(Key("ma"), RequestFlags(ma_delta_value=1))
    assert isinstance(r, Miss)
    r = mc.meta_arithmetic(Key("ma"), RequestFlags(
        ma_delta_value=1, ma_initial_value=100, vivify_on_miss_ttl=60, return_value=True,
        return_ttl=True, return_cas_token=True,
    ))
    assert isinstance(r, Value) and r.value == "100" and isinstance(r.flags.cas_token, int)
    # (memcached 1.6.18 reports t-1 in this auto-vivifying reply, so look afterwards)
    assert 55 <= ttl_of(mc, "ma") <= 60
    r = mc.meta_arithmetic(Key("ma"), RequestFlags(ma_delta_value=30, mode=MA_MODE_DEC, return_value=True))
    assert isinstance(r, Value) and r.value == "70"
    r = mc.meta_arithmetic(Key("ma"), RequestFlags(ma_delta_value=5, opaque=b"abc"))
    assert type(r) is Success and r.flags.opaque == b"abc"
    r = mc.meta_arithmetic(Key("ma"), RequestFlags(ma_delta_value=5, cas_token=1))
    assert isinstance(r, Conflict)
    assert int(mc.get("ma")) == 75
    # default delta is 1
    r = mc.meta_arithmetic(Key("ma"), RequestFlags(return_value=True))
    assert isinstance(r, Value) and r.value == "76"


# --- constructors, routing, pool ------------------------------------------------------


def test_two_servers_and_routing_keys():
    with harness.Server() as s1, harness.Server() as s2:
        c = CacheClient.cache_client_from_servers(
            servers=[ServerAddress("127.0.0.1", s1.port), ServerAddress("127.0.0.1", s2.port)],
            connection_pool_factory_fn=connection_pool_factory_builder(
                connection_timeout=5, recv_timeout=10
            ),
        )
        values = {f"hk{i}": i for i in range(100)}
        for k, v in values.items():
            assert c.set(k, v, ttl=0) is True
        assert c.multi_get(list(values) + ["none"]) == {
            **{Key(k): v for k, v in values.items()}, Key("none"): None
        }
        one, two = make_meta_client(s1.port), make_meta_client(s2.port)
        on1 = {k for k in values if one.get(k) is not None}
        on2 = {k for k in values if two.get(k) is not None}
        assert on1 and on2 and on1 | on2 == set(values) and not on1 & on2
        # keys sharing a routing key live on one server
        keys = [Key(f"user:7:{f}", routing_key="user:7") for f in ("name", "mail", "age", "x", "y")]
        for k in keys:
            assert c.set(k, k.key, ttl=0) is True
        assert c.multi_get(keys) == {k: k.key for k in keys}
        where = {(one.get(k.key) is not None, two.get(k.key) is not None) for k in keys}
        assert where in ({(True, False)}, {(False, True)})
        counters = c.get_counters()
        assert set(counters) == {ServerAddress("127.0.0.1", s1.port), ServerAddress("127.0.0.1", s2.port)}
        assert all(p.established >= 1 and p.total_errors == 0 for p in counters.values())


def test_gutter_client_falls_back_with_capped_ttl(server, mc):
    dead = harness.free_port()  # nothing listens there
    g = make_meta_client(
        dead,
        factory=lambda servers, **kw: CacheClient.cache_client_with_gutter_from_servers(
            servers=servers, gutter_servers=[ServerAddress("127.0.0.1", server.port)],
            gutter_ttl=40, **kw,
        ),
    )
    assert g.set("gk", "via gutter", ttl=0) is True
    assert g.get("gk") == "via gutter"
    assert mc.get("gk") == "via gutter"  # it landed on the gutter server
    assert 35 <= ttl_of(mc, "gk") <= 40  # with its TTL capped to gutter_ttl
    assert g.set("gk2", 1, ttl=1000) is True
    assert 35 <= ttl_of(mc, "gk2") <= 40
    assert g.multi_get(["gk", "gk2", "gk3"]) == {Key("gk"): "via gutter", Key("gk2"): 1, Key("gk3"): None}
    assert g.delta_and_get("gk2", 1) == 2
    assert g.delete("gk") is True
    assert mc.get("gk") is None


def test_ephemeral_client_caps_ttls(server, mc):
    e = make_meta_client(
        server.port,
        factory=lambda servers, **kw: CacheClient.ephemeral_cache_client_from_servers(
            servers=servers, max_ttl=50, **kw
        ),
    )
    assert e.set("e0", "a", ttl=0) is True
    assert e.set("e1", "b", ttl=1000) is True
    assert e.set("e2", "c", ttl=10) is True
    assert 45 <= ttl_of(mc, "e0") <= 50
    assert 45 <= ttl_of(mc, "e1") <= 50
    assert 5 <= ttl_of(mc, "e2") <= 10
    assert e.get("e2", touch_ttl=1000) == "c"
    assert 45 <= ttl_of(mc, "e2") <= 50
    assert e.touch("e2", 2000) is True
    assert 45 <= ttl_of(mc, "e2") <= 50
    assert e.delta_initialize_and_get("ec", 1, initial_value=5, initial_ttl=0) == 5
    assert 45 <= ttl_of(mc, "ec") <= 50


def test_get_counters_and_pool_reuse(server):
    c = make_meta_client(server.port)
    (address, counters), = c.get_counters().items()
    assert address == ServerAddress("127.0.0.1", server.port)
    assert counters.established == 1 and counters.available == 1 and counters.total_errors == 0
    for i in range(50):
        c.set(f"pr{i}", i, ttl=0)
        assert c.get(f"pr{i}") == i
    counters = c.get_counters()[address]
    assert counters.total_created == 1  # one connection, kept and reused
    assert counters.active == 0 and counters.total_errors == 0
