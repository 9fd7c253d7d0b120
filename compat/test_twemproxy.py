"""Scale-out behind twemproxy: Debian's nutcracker (0.5.0) with ketama in front of three servers.

Three servers (strata, or memcached with ``WIRE_TARGET=memcached``) behind one
nutcracker pool configured as in docs/scale-out.md; pymemcache talks to the
proxy, and each backend is also queried directly to see where keys landed.

What twemproxy forwards is its documented memcached ASCII subset
(notes/memcache.md in twemproxy's repository): storage commands with cas,
get/gets (a multi-get is split by server and the replies merged in request
order), delete, incr/decr, touch, version. Anything else (flush_all, stats,
verbosity, gat/gats, the meta commands, the binary protocol) fails to parse in
the proxy, which closes the client connection without a reply; the tests
assert exactly that, and that nothing reached the backends.

Where keys land is checked against libmemcached itself (loaded with ctypes;
Debian's libmemcached11, installed with libmemcached-tools): with the
MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED behaviour and the FNV1A_64 key hash it
must pick the same server for every key as twemproxy's ``distribution:
ketama`` with ``hash: fnv1a_64`` and unnamed ``host:port:weight`` servers;
and pylibmc with ``ketama_weighted`` (its hash set to fnv1a_64 afterwards)
writes every key to the server the proxy writes it to.

Keys end in a fixed suffix (``user:<n>:profile``): twemproxy's fnv1a_64 is
FNV-1a in 32 bits with the 64-bit constants truncated, so keys that differ
only in their last characters get nearby hashes and spread unevenly over the
ring (docs/scale-out.md); with the suffix the smallest of three servers'
shares of 3,000 keys stayed above 24% over thousands of simulated port
choices (the test asserts 20%).
"""

import ctypes
import ctypes.util
import os
import re
import shutil
import socket
import struct
import subprocess
import time

import pylibmc
import pytest

import harness
from compat_util import make_client
from pymemcache.exceptions import (
    MemcacheClientError,
    MemcacheServerError,
    MemcacheUnexpectedCloseError,
)

NUTCRACKER = shutil.which("nutcracker") or "/usr/sbin/nutcracker"
DOC = os.path.join(harness.ROOT, "docs", "scale-out.md")
NEAR_1MB = 1024 * 1024 - 4096  # as in test_pymemcache.py: fits memcached's default -I 1m
N_KEYS = 3000


def keys(n, prefix="user"):
    return [f"{prefix}:{i}:profile" for i in range(n)]


def pool_yaml(listen_port, backends):
    """The pool of docs/scale-out.md, on test ports."""
    servers = "".join(f"    - 127.0.0.1:{b.port}:1\n" for b in backends)
    return (
        "strata:\n"
        f"  listen: 127.0.0.1:{listen_port}\n"
        "  hash: fnv1a_64\n"
        "  distribution: ketama\n"
        "  auto_eject_hosts: false\n"
        "  timeout: 2000\n"
        "  servers:\n" + servers
    )


class Nutcracker:
    """A nutcracker process serving one config file on 127.0.0.1:<port>; stopped by PID."""

    def __init__(self, conf_path, port, timeout=5.0):
        if not os.path.exists(NUTCRACKER):
            raise RuntimeError("nutcracker is not installed (make deps installs Debian's package)")
        self.port = port
        self.log = f"{conf_path}.log"
        self.proc = subprocess.Popen(
            [NUTCRACKER, "-c", str(conf_path), "-o", self.log,
             "-a", "127.0.0.1", "-s", str(harness.free_port())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nutcracker exited with {self.proc.returncode}: {self.log_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"nutcracker did not listen within {timeout}s: {self.log_text()}")
                time.sleep(0.02)

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_proxy(directory, backends, port=None, name="nutcracker"):
    port = port or harness.free_port()
    conf = directory / f"{name}.yml"
    conf.write_text(pool_yaml(port, backends))
    return Nutcracker(conf, port)


# libmemcached's enums (libmemcached-1.0/types/behavior.h, hash.h)
MEMCACHED_BEHAVIOR_HASH = 2
MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED = 16
MEMCACHED_HASH_FNV1A_64 = 4


def libmemcached_placement(backends, key_list):
    """For each key, the index of the backend libmemcached picks with weighted ketama and FNV1A_64."""
    lib = ctypes.CDLL(ctypes.util.find_library("memcached") or "libmemcached.so.11")
    lib.memcached.restype = ctypes.c_void_p
    lib.memcached.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.memcached_behavior_set.restype = ctypes.c_int
    lib.memcached_behavior_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    lib.memcached_generate_hash.restype = ctypes.c_uint32
    lib.memcached_generate_hash.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.memcached_free.argtypes = [ctypes.c_void_p]
    config = " ".join(f"--SERVER=127.0.0.1:{b.port}" for b in backends).encode()
    mc = lib.memcached(config, len(config))
    assert mc, "libmemcached rejected the configuration"
    try:
        assert lib.memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1) == 0
        assert lib.memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_HASH, MEMCACHED_HASH_FNV1A_64) == 0
        return {k: lib.memcached_generate_hash(mc, k.encode(), len(k)) for k in key_list}
    finally:
        lib.memcached_free(mc)


def keys_on_each(backends, prefix, per_backend):
    """Keys chosen so that each backend holds per_backend of them (by libmemcached's ketama)."""
    candidates = keys(60 * per_backend, prefix=prefix)
    placed = libmemcached_placement(backends, candidates)
    chosen = []
    for i in range(len(backends)):
        mine = [k for k in candidates if placed[k] == i][:per_backend]
        assert len(mine) == per_backend
        chosen += mine
    return sorted(chosen, key=candidates.index)


def locate(direct_clients, key_list):
    """key -> indexes of the backends holding it, asking each backend directly."""
    where = {k: [] for k in key_list}
    for i, c in enumerate(direct_clients):
        for start in range(0, len(key_list), 500):
            for k in c.get_many(key_list[start:start + 500]):
                where[k].append(i)
    return where


def set_all(client, values):
    items = list(values.items())
    for start in range(0, len(items), 500):
        assert client.set_many(dict(items[start:start + 500])) == []


def call(port, request, terminator=b"\r\n"):
    """Send request on a new connection; the reply up to terminator."""
    conn = harness.Conn(socket.create_connection(("127.0.0.1", port), timeout=5))
    try:
        return conn.call(request, terminator=terminator)
    finally:
        conn.close()


def reply_until_closed(port, request):
    """Send request; return what came back before the proxy closed the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(request)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk
    finally:
        s.close()


@pytest.fixture(scope="module")
def backends():
    servers = [harness.Server() for _ in range(3)]
    yield servers
    alive = [s.proc.poll() is None for s in servers]
    for s in servers:
        s.stop()
    assert all(alive), f"a backend exited during the tests: {[s.proc.returncode for s in servers]}"


@pytest.fixture(scope="module")
def proxy(backends, tmp_path_factory):
    nc = start_proxy(tmp_path_factory.mktemp("nutcracker"), backends)
    yield nc
    alive = nc.proc.poll() is None
    log = nc.log_text()
    nc.stop()
    assert alive, f"nutcracker exited during the tests with {nc.proc.returncode}: {log}"


@pytest.fixture
def direct(backends):
    """A client on each backend, every backend flushed (twemproxy does not forward flush_all)."""
    clients = [make_client(("127.0.0.1", b.port)) for b in backends]
    for c in clients:
        assert c.flush_all() is True
    yield clients
    for c in clients:
        c.close()


@pytest.fixture
def mc(proxy, direct):
    c = make_client(("127.0.0.1", proxy.port))
    yield c
    c.close()


class FlagsSerde:
    """Bytes stored as they are; reads return (value, flags)."""

    def serialize(self, key, value):
        return value, 0

    def deserialize(self, key, value, flags):
        return value, flags


# --- commands twemproxy forwards ------------------------------------------------


def test_set_get_and_multi_get_over_many_keys(mc, direct):
    values = {k: f"value of {k}".encode() for k in keys(600)}
    some = list(values)[:60]
    for k in some:
        assert mc.set(k, values[k]) is True
    set_all(mc, {k: v for k, v in values.items() if k not in some})
    for k in list(values)[::50]:
        assert mc.get(k) == values[k]
    missing = ["user:missing:1", "user:missing:2"]
    assert mc.get_many(list(values) + missing) == values
    assert mc.get("user:missing:1") is None
    # the keys went to all three backends
    where = locate(direct, list(values))
    assert {len(v) for v in where.values()} == {1}
    assert {v[0] for v in where.values()} == {0, 1, 2}


def test_multi_get_reply_is_merged_in_request_order(proxy, mc, direct, backends):
    names = keys_on_each(backends, "order", 8)
    for i, k in enumerate(names):
        assert mc.set(k, f"v{i}".encode(), flags=i) is True
    where = locate(direct, names)
    assert sorted(v[0] for v in where.values()) == [0] * 8 + [1] * 8 + [2] * 8
    asked = names[::-1] + ["order:none"]
    reply = call(proxy.port, b"get " + " ".join(asked).encode() + b"\r\n", terminator=b"END\r\n")
    expected = b"".join(
        f"VALUE {k} {names.index(k)} {len(f'v{names.index(k)}')}\r\nv{names.index(k)}\r\n".encode()
        for k in names[::-1]
    ) + b"END\r\n"
    assert reply == expected


def test_keys_spread_over_the_backends_as_libmemcached_ketama_places_them(mc, direct, backends):
    key_list = keys(N_KEYS)
    set_all(mc, {k: b"x" for k in key_list})
    where = locate(direct, key_list)
    on_one = {k: v for k, v in where.items() if len(v) == 1}
    stray = [k for k in where if len(where[k]) != 1]
    assert len(on_one) == N_KEYS, f"keys on no or several backends: {stray[:5]}"
    placed = {k: v[0] for k, v in where.items()}
    expected = libmemcached_placement(backends, key_list)
    wrong = [k for k in key_list if placed[k] != expected[k]]
    assert wrong == [], f"{len(wrong)} keys not where libmemcached's ketama puts them, e.g. {wrong[:5]}"
    shares = [sum(1 for b in placed.values() if b == i) / N_KEYS for i in range(3)]
    assert min(shares) >= 0.20, shares


def test_pylibmc_weighted_ketama_places_keys_as_twemproxy_does(mc, direct, backends):
    """A client-side ring that agrees with the proxy: clients can move between them warm."""
    key_list = keys(N_KEYS, prefix="pyl")
    set_all(mc, {k: b"proxy" for k in key_list})
    via_proxy = {k: v[0] for k, v in locate(direct, key_list).items()}
    for c in direct:
        assert c.flush_all() is True
    servers = [f"127.0.0.1:{b.port}" for b in backends]
    # ketama_weighted resets the hash to md5, and a behaviors dict is applied hash first
    both = pylibmc.Client(servers, behaviors={"ketama_weighted": True, "hash": "fnv1a_64"})
    assert both.behaviors["hash"] == "md5"
    client = pylibmc.Client(servers, behaviors={"ketama_weighted": True})
    client.behaviors["hash"] = "fnv1a_64"
    try:
        for start in range(0, N_KEYS, 500):
            assert client.set_multi({k: b"pylibmc" for k in key_list[start:start + 500]}) == []
    finally:
        client.disconnect_all()
    where = locate(direct, key_list)
    assert all(len(v) == 1 for v in where.values())
    assert {k: v[0] for k, v in where.items()} == via_proxy


def test_delete(mc, direct):
    names = keys(40, prefix="del")
    set_all(mc, {k: b"1" for k in names})
    assert mc.delete(names[0]) is True
    assert mc.delete(names[0]) is False
    assert mc.get(names[0]) is None
    assert mc.delete_many(names[1:20]) is True
    assert mc.get_many(names) == {k: b"1" for k in names[20:]}
    where = locate(direct, names)
    assert all(where[k] == [] for k in names[:20])
    assert all(len(where[k]) == 1 for k in names[20:])


def test_incr_decr(mc, direct, backends):
    counters = keys_on_each(backends, "ctr", 4)
    for i, k in enumerate(counters):
        assert mc.set(k, str(i * 10).encode()) is True
    for i, k in enumerate(counters):
        assert mc.incr(k, 5) == i * 10 + 5
        assert mc.decr(k, 3) == i * 10 + 2
    assert sorted(v[0] for v in locate(direct, counters).values()) == [0] * 4 + [1] * 4 + [2] * 4
    assert mc.decr(counters[0], 100) == 0  # decr stops at 0
    assert mc.incr("ctr:missing", 1) is None
    assert mc.decr("ctr:missing", 1) is None
    assert mc.set("ctr:max", b"18446744073709551615") is True
    assert mc.incr("ctr:max", 1) == 0  # wraps at 2^64
    assert mc.set("ctr:text", b"abc") is True
    with pytest.raises(MemcacheClientError, match="cannot increment or decrement non-numeric value"):
        mc.incr("ctr:text", 1)
    assert mc.get("ctr:text") == b"abc"


def test_add_replace_append_prepend(mc):
    assert mc.add("ar:1:profile", b"first") is True
    assert mc.add("ar:1:profile", b"second") is False
    assert mc.get("ar:1:profile") == b"first"
    assert mc.replace("ar:1:profile", b"third") is True
    assert mc.replace("ar:2:profile", b"nothing") is False
    assert mc.get("ar:2:profile") is None
    assert mc.append("ar:1:profile", b">") is True
    assert mc.prepend("ar:1:profile", b"<") is True
    assert mc.get("ar:1:profile") == b"<third>"
    assert mc.append("ar:3:profile", b"x") is False
    assert mc.prepend("ar:3:profile", b"x") is False


def test_gets_and_cas(mc, direct, backends):
    names = keys_on_each(backends, "cas", 4)
    set_all(mc, {k: b"v0" for k in names})
    assert sorted(v[0] for v in locate(direct, names).values()) == [0] * 4 + [1] * 4 + [2] * 4
    tokens = mc.gets_many(names)
    assert set(tokens) == set(names)
    for k in names:
        value, token = tokens[k]
        assert value == b"v0"
        assert mc.cas(k, b"v1", token) is True  # each token works on its own backend
        assert mc.cas(k, b"v2", token) is False  # now stale: EXISTS
        assert mc.get(k) == b"v1"
    assert mc.cas("cas:missing", b"x", b"1") is None  # NOT_FOUND
    value, token = mc.gets(names[0])
    assert value == b"v1"
    assert mc.cas(names[0], b"v3", token) is True
    assert mc.gets(names[0])[0] == b"v3"


def test_touch(mc):
    assert mc.set("touch:1:profile", b"t", expire=100) is True
    assert mc.touch("touch:1:profile", 0) is True
    assert mc.touch("touch:missing", 10) is False
    assert mc.get("touch:1:profile") == b"t"


def test_flags_and_noreply(proxy, direct):
    c = make_client(("127.0.0.1", proxy.port), serde=FlagsSerde())
    try:
        names = keys(200, prefix="nr")
        for i, k in enumerate(names):
            assert c.set(k, f"n{i}".encode(), noreply=True, flags=i) is True
        got = c.get_many(names)
        assert got == {k: (f"n{i}".encode(), i) for i, k in enumerate(names)}
    finally:
        c.close()
    assert {v[0] for v in locate(direct, names).values()} == {0, 1, 2}


def test_large_values(mc, direct):
    # nutcracker's buffers are 16 KiB: these span 2 to 64 of them
    sizes = {"big:20k:profile": 20_000, "big:300k:profile": 300_000, "big:1m:profile": NEAR_1MB}
    values = {k: os.urandom(n) for k, n in sizes.items()}
    for k, v in values.items():
        assert mc.set(k, v) is True
    for k, v in values.items():
        assert mc.get(k) == v
    assert mc.get_many(list(values)) == values
    for k, where in locate(direct, list(values)).items():
        assert len(where) == 1
        assert direct[where[0]].get(k) == values[k]
    with pytest.raises(MemcacheServerError, match="object too large for cache"):
        mc.set("big:2m:profile", os.urandom(1024 * 1024 + 100))
    # the connection through the proxy is still in step
    assert mc.get("big:2m:profile") is None
    assert mc.get("big:20k:profile") == values["big:20k:profile"]


def test_version_comes_from_a_backend(mc, direct):
    assert mc.version() == direct[0].version()


# --- what twemproxy does not forward ----------------------------------------------


UNSUPPORTED = [
    b"flush_all\r\n",
    b"flush_all 0\r\n",
    b"stats\r\n",
    b"stats items\r\n",
    b"verbosity 1\r\n",
    b"gat 100 keep:1:profile\r\n",
    b"gats 100 keep:1:profile\r\n",
    b"mg keep:1:profile v\r\n",
    b"ms keep:1:profile 1\r\nx\r\n",
    b"md keep:1:profile\r\n",
    b"mn\r\n",
    b"cache_memlimit 100\r\n",
    b"delete keep:1:profile 0\r\n",  # the old time argument
    # the binary protocol: GET of "keep:1:profile"
    struct.pack(">BBHBBHIIQ", 0x80, 0x00, 14, 0, 0, 0, 14, 0, 0) + b"keep:1:profile",
]


@pytest.mark.parametrize("request_bytes", UNSUPPORTED, ids=lambda r: repr(r[:12]))
def test_unsupported_commands_close_the_connection_without_a_reply(proxy, mc, direct, request_bytes):
    assert mc.set("keep:1:profile", b"kept") is True
    assert reply_until_closed(proxy.port, request_bytes) == b""
    # nothing reached a backend: the item is there, unflushed, untouched
    assert [c.get("keep:1:profile") for c in direct].count(b"kept") == 1
    assert mc.get("keep:1:profile") == b"kept"


def test_pymemcache_sees_a_closed_connection_and_reconnects(mc):
    assert mc.set("keep:2:profile", b"kept") is True
    with pytest.raises(MemcacheUnexpectedCloseError):
        mc.flush_all()
    with pytest.raises(MemcacheUnexpectedCloseError):
        mc.stats()
    assert mc.get("keep:2:profile") == b"kept"  # a new connection, nothing flushed


# --- a backend down ------------------------------------------------------------------


def test_a_dead_backend_fails_its_keys_and_any_multi_get_touching_it(tmp_path):
    """auto_eject_hosts: false: nothing is remapped; the dead server's keys answer SERVER_ERROR."""
    servers = [harness.Server() for _ in range(3)]
    nc = None
    try:
        nc = start_proxy(tmp_path, servers)
        key_list = keys(60, prefix="dead")
        placed = libmemcached_placement(servers, key_list)
        c = make_client(("127.0.0.1", nc.port))
        set_all(c, {k: b"v" for k in key_list})
        servers[1].stop()
        on_dead = [k for k in key_list if placed[k] == 1]
        alive = [k for k in key_list if placed[k] != 1]
        assert on_dead and alive
        for k in on_dead[:3]:
            with pytest.raises(MemcacheServerError, match="Connection refused"):
                c.get(k)
            with pytest.raises(MemcacheServerError, match="Connection refused"):
                c.set(k, b"w")
        for k in alive[:3]:
            assert c.get(k) == b"v"
            assert c.set(k, b"w") is True
        assert c.get_many(alive) == {k: (b"w" if k in alive[:3] else b"v") for k in alive}
        # one dead fragment fails the whole multi-get: one error line, no values
        mixed = alive[:3] + on_dead[:1]
        request = ("get " + " ".join(mixed) + "\r\n").encode()
        assert call(nc.port, request) == b"SERVER_ERROR Connection refused\r\n"
        with pytest.raises(MemcacheServerError, match="Connection refused"):
            c.get_many(mixed)
        c.close()
    finally:
        if nc:
            nc.stop()
        for s in servers:
            s.stop()


# --- ketama: adding a server ------------------------------------------------------


def test_adding_a_fourth_server_moves_a_minority_of_keys_all_to_it(backends, direct, tmp_path_factory):
    directory = tmp_path_factory.mktemp("nutcracker-grow")
    key_list = keys(N_KEYS, prefix="grow")
    fourth = harness.Server()
    nc = start_proxy(directory, backends, name="three")
    try:
        c = make_client(("127.0.0.1", nc.port))
        set_all(c, {k: b"g" for k in key_list})
        c.close()
        before = locate(direct, key_list)
        assert all(len(v) == 1 for v in before.values())
        before = {k: v[0] for k, v in before.items()}

        # restart the proxy on the same port with the fourth server added
        assert nc.proc.poll() is None
        nc.stop()
        nc = start_proxy(directory, backends + [fourth], port=nc.port, name="four")
        c = make_client(("127.0.0.1", nc.port))
        # keys whose ring point is now the (empty) fourth server miss; the rest still hit
        hits = set()
        for start in range(0, N_KEYS, 500):
            hits |= set(c.get_many(key_list[start:start + 500]))
        moved = set(key_list) - hits
        assert 0.10 < len(moved) / N_KEYS < 0.40, f"{len(moved)} of {N_KEYS} keys moved"

        # write them again through the proxy: the moved ones, and only those, go to the fourth
        set_all(c, {k: b"g" for k in key_list})
        c.close()
        d4 = make_client(("127.0.0.1", fourth.port))
        on_fourth = set()
        for start in range(0, N_KEYS, 500):
            on_fourth |= set(d4.get_many(key_list[start:start + 500]))
        d4.close()
        assert on_fourth == moved
        after = libmemcached_placement(backends + [fourth], key_list)
        assert {k for k in key_list if after[k] == 3} == moved
        assert all(after[k] == before[k] for k in hits)
    finally:
        alive = fourth.proc.poll() is None
        nc.stop()
        fourth.stop()
    assert alive


# --- the guide's configuration ------------------------------------------------------


def test_the_guides_twemproxy_config_is_the_tested_one(tmp_path):
    with open(DOC) as f:
        doc = f.read()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    assert len(blocks) == 1, "docs/scale-out.md should hold one yaml block, the nutcracker pool"
    block = blocks[0]
    for line in pool_yaml(0, []).splitlines():
        if line.startswith("  listen:"):
            assert re.search(r"^  listen: \S+:\d+$", block, re.M)
        else:
            assert re.search("^" + re.escape(line) + "$", block, re.M), f"the guide lacks {line!r}"
    conf = tmp_path / "guide.yml"
    conf.write_text(block)
    out = subprocess.run([NUTCRACKER, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert "syntax is ok" in out.stderr
