"""Command-line flags: each is checked through the server's behaviour or `stats settings`."""

import os
import socket
import stat
import tempfile
import threading
import time

import pytest

from harness import Conn, free_port, target
from wirelib import (
    assert_flag_settings,
    assert_in_sync,
    READ_TIMEOUT,
    expect,
    read_line_or_partial,
    run_binary,
    stats,
    stop_and_log,
    stored,
    value_reply,
    wait_for_tcp,
    wait_for_unix,
)


# ---------------------------------------------------------------- flags that exit


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flag_prints_version_and_exits_zero(flag):
    r = run_binary([flag])
    assert r.returncode == 0
    assert r.stdout.strip() != b""
    assert b"\n" in r.stdout


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_flag_prints_help_and_exits_zero(flag):
    r = run_binary([flag])
    assert r.returncode == 0
    assert b"-p" in r.stdout and b"--port" in r.stdout


@pytest.mark.parametrize("args", [["--no-such-flag"], ["-p"], ["-m", "lots"]], ids=["unknown", "missing-value", "bad-number"])
def test_bad_command_line_exits_nonzero_with_message(args):
    r = run_binary(args + ["-l", "127.0.0.1", "-p", str(free_port())] if args != ["-p"] else args)
    assert r.returncode != 0
    assert r.stderr.strip() != b""


def test_udp_port_zero_is_accepted(make_server):
    srv = make_server(["-U", "0"])
    c = srv.connect(timeout=READ_TIMEOUT)
    assert_in_sync(c)
    assert stats(c, "settings")["udpport"] == "0"


# ---------------------------------------------------------------- item size


@pytest.mark.parametrize("value,size", [("512k", 524288), ("2m", 2097152), ("1048576", 1048576), ("1m", 1048576)])
def test_max_item_size_forms(make_server, value, size):
    c = make_server(["-I", value]).connect(timeout=READ_TIMEOUT)
    assert stats(c, "settings")["item_size_max"] == str(size)


def test_max_item_size_2m_stores_1_5mb_value(make_server):
    c = make_server(["-I", "2m"]).connect(timeout=5.0)
    v = b"z" * 1_500_000
    stored(c, "big", v)
    expect(c, b"get big\r\n", value_reply("big", v) + b"END\r\n")


# ---------------------------------------------------------------- connections


def open_and_ask(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
    s.sendall(b"version\r\n")
    c = Conn(s)
    return c, read_line_or_partial(c)


def test_connection_limit_rejects_extra_connections(make_server):
    # memcached's -c counts its own reserved descriptors too, so fewer than 30
    # clients get in there; strata admits exactly 30 (see the strata_only test).
    srv = make_server(["-c", "30"])
    time.sleep(0.2)
    accepted, rejected = [], None
    for _ in range(31):
        c, reply = open_and_ask(srv.port)
        if reply.startswith(b"VERSION "):
            accepted.append(c)
            continue
        rejected = (c, reply)
        break
    assert 1 <= len(accepted) <= 30
    assert rejected is not None
    c, reply = rejected
    assert reply == b"ERROR Too many open connections\r\n"
    assert c.is_closed()
    # a slot frees up when a client leaves
    accepted.pop().close()
    deadline = time.monotonic() + 3
    while True:
        c, reply = open_and_ask(srv.port)
        if reply.startswith(b"VERSION ") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert reply.startswith(b"VERSION ")


@pytest.mark.strata_only
def test_connection_limit_of_two_is_exact(make_server):
    srv = make_server(["-c", "2"])
    time.sleep(0.2)
    c1, r1 = open_and_ask(srv.port)
    c2, r2 = open_and_ask(srv.port)
    c3, r3 = open_and_ask(srv.port)
    assert (r1[:8], r2[:8]) == (b"VERSION ", b"VERSION ")
    assert r3 == b"ERROR Too many open connections\r\n"
    assert c3.is_closed()
    assert stats(c1, "settings")["maxconns"] == "2"


@pytest.mark.strata_only
def test_a_connect_close_flood_under_the_limit_is_never_refused(make_server):
    """Nine clients connecting and closing in a loop never hold more than
    nine connections: none may be refused. strata counted a connection
    until its worker noticed the close, and accepts ran ahead of the
    workers on a busy machine (13,192 refusals in 4 s at -c 64). memcached
    refuses too at this -c (22,048 in 2 s here; none at its default 1024,
    where strata once refused 50,985)."""
    srv = make_server(["-c", "64"])
    stop = time.monotonic() + 2.0
    done, failures = [0], []

    def loop():
        while time.monotonic() < stop:
            try:
                socket.create_connection(("127.0.0.1", srv.port)).close()
                done[0] += 1
            except OSError as e:
                failures.append(e)

    threads = [threading.Thread(target=loop) for _ in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c, reply = open_and_ask(srv.port)
    assert reply.startswith(b"VERSION ")
    s = stats(c)
    assert done[0] > 1000 and failures == []
    assert s["rejected_connections"] == "0", (s["rejected_connections"], done[0])


# ---------------------------------------------------------------- listening


def test_listen_on_comma_separated_addresses(make_server):
    port = free_port()
    make_server(["-l", "127.0.0.1,127.0.0.2", "-p", str(port)], listen=False, port=port)
    for host in ("127.0.0.1", "127.0.0.2"):
        c = wait_for_tcp(host, port)
        assert_in_sync(c)
        c.close()


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_long_port_and_listen_options(make_server, form):
    port = free_port()
    if form == "separate":
        args = ["--listen", "127.0.0.1", "--port", str(port)]
    else:
        args = ["--listen=127.0.0.1", f"--port={port}"]
    make_server(args, listen=False, port=port)
    c = wait_for_tcp("127.0.0.1", port)
    assert_in_sync(c)
    assert stats(c, "settings")["tcpport"] == str(port)


@pytest.fixture
def sock_dir():
    d = tempfile.mkdtemp(prefix="strata-wire-")
    yield d
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


@pytest.mark.parametrize(
    "args,mode",
    [(["-s", "{p}", "-a", "700"], 0o700), (["-s", "{p}", "-a", "755"], 0o755),
     (["--unix-socket={p}", "--unix-mask=700"], 0o700)],
    ids=["short-700", "short-755", "long-700"],
)
def test_unix_socket_with_mask(make_server, sock_dir, args, mode):
    path = os.path.join(sock_dir, "s.sock")
    make_server([a.format(p=path) for a in args], listen=False)
    c = wait_for_unix(path)
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    expect(c, b"set k 0 0 1\r\nx\r\nget k\r\n", b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")
    assert stats(c, "settings")["domain_socket"] == path


def test_unix_socket_disables_tcp(make_server, sock_dir):
    path = os.path.join(sock_dir, "s.sock")
    port = free_port()
    make_server(["-s", path, "-p", str(port)], listen=False)
    wait_for_unix(path).close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()


# ---------------------------------------------------------------- tuning flags


def test_short_tuning_flags(make_server):
    c = make_server(["-t", "4", "-R", "5", "-b", "64", "-v"]).connect(timeout=READ_TIMEOUT)
    s = stats(c, "settings")
    assert (s["num_threads"], s["reqs_per_event"], s["tcp_backlog"], s["verbosity"]) == ("4", "5", "64", "1")
    assert stats(c)["threads"] == "4"
    expect(c, b"set k 0 0 1\r\nx\r\nget k\r\n", b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")


def test_very_verbose_flag(make_server):
    c = make_server(["-vv"]).connect(timeout=READ_TIMEOUT)
    assert stats(c, "settings")["verbosity"] == "2"
    expect(c, b"set k 0 0 1\r\nx\r\nget k\r\n", b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")


def test_long_option_forms(make_server):
    srv = make_server([
        "--memory-limit=100", "--conn-limit=500", "--threads=2", "--max-item-size=2m",
        "--disable-cas", "--disable-evictions", "--enable-shutdown", "--disable-flush-all",
        "--max-reqs-per-event=7", "--listen-backlog=99", "--udp-port=0",
    ])
    c = srv.connect(timeout=READ_TIMEOUT)
    s = assert_flag_settings(c)
    assert s["udpport"] == "0"
    expect(c, b"flush_all\r\n", b"CLIENT_ERROR flush_all not allowed\r\n")
    stored(c, "k", b"v")
    expect(c, b"gets k\r\n", b"VALUE k 0 1 0\r\nv\r\nEND\r\n")


def test_memory_limit_short_form(make_server):
    c = make_server(["-m", "10"]).connect(timeout=READ_TIMEOUT)
    assert stats(c, "settings")["maxbytes"] == str(10 * 1024 * 1024)
    assert stats(c)["limit_maxbytes"] == str(10 * 1024 * 1024)


# ---------------------------------------------------------------- memcached's tuning options

# Values memcached 1.6.18 refuses, and its words (strata names the flag
# after some: "... (-c)").
REFUSED = [
    ("-o hash_algorithm=crc32", b"Unknown hash_algorithm option (jenkins, murmur3, xxh3)"),
    ("-o slab_automove=3", b"slab_automove must be between 0 and 2"),
    ("-o hot_lru_pct=80", b"hot_lru_pct must be > 1 and < 80"),
    ("-o hot_lru_pct=79", b"hot_lru_pct + warm_lru_pct cannot be more than 80% combined"),
    ("-o tail_repair_time=5", b"Cannot set tail_repair_time to less than 10 seconds"),
    ("-o slab_automove_window=2", b"slab_automove_window must be > 2"),
    ("-o slab_automove_ratio=x", b"slab_automove_ratio must be > 0 and < 1"),
    ("-o hot_max_factor=0", b"hot_max_factor must be > 0"),
    ("-o slab_chunk_max=3000",
     b"-I (item_size_max: 1048576) must be evenly divisible by slab_chunk_max (bytes: 3000)"),
    ("-o slab_chunk_max=2097152",
     b"slab_chunk_max (bytes: 2097152) cannot be larger than -I (item_size_max 1048576)"),
    ("-o slab_sizes=200-100", b"slab size 100 cannot be lower than or equal to a previous class size"),
    ("-o worker_logbuf_size=x", b"could not parse argument to worker_logbuf_size"),
    ("-c -5", b"Maximum connections must be greater than 0"),
    ("-c 0", b"Maximum connections must be greater than 0"),
    ("-t -1", b"Number of threads must be greater than 0"),
    ("-R 0", b"Number of requests per event must be greater than 0"),
]


@pytest.mark.parametrize("flags,message", REFUSED, ids=[f for f, _ in REFUSED])
def test_values_memcached_refuses_are_refused_in_its_words(flags, message):
    r = run_binary(flags.split() + ["-l", "127.0.0.1", "-p", str(free_port())])
    assert r.returncode != 0 and message in r.stderr, r.stderr
    if target() == "strata":
        assert b"accepted for memcached compatibility" not in r.stderr, "refused, not also accepted"


# Accepted options for machinery strata does not have, and what `stats
# settings` shows for each (as memcached 1.6.18 shows them).
TUNED = {
    "slab_reassign": ("slab_reassign", "yes"),
    "slab_automove=2": ("slab_automove", "2"),
    "tail_repair_time=20": ("tail_repair_time", "20"),
    "worker_logbuf_size=64": ("worker_logbuf_size", "65536"),
    "slab_chunk_max=16384": ("slab_chunk_max", "16384"),
    "hot_lru_pct=30": ("hot_lru_pct", "30"),
    "temporary_ttl=5": ("temporary_ttl", "5"),
    "ext_low_ttl=7": ("ext_low_ttl", "7"),
    "ext_item_size=1024": ("ext_item_size", "1024"),
    "hash_algorithm=murmur3": ("hash_algorithm", "murmur3"),
}


@pytest.mark.not_over_flash("ext_item_size acts there")
def test_accepted_tuning_shows_as_given_and_logs_once_that_it_does_nothing(make_server):
    srv = make_server(["-o", ",".join(TUNED)] + ["-o", "slab_reassign,modern"])
    s = stats(srv.connect(timeout=READ_TIMEOUT), "settings")
    shown = {key: s[key] for key, _ in TUNED.values()}
    want = dict(TUNED.values())
    assert s["temp_lru"] == "yes", "temporary_ttl turns the temporary LRU on, as in memcached"
    if target() == "strata":
        # What runs, not what was asked: strata's key hash is its own.
        want["hash_algorithm"] = "ahash"
        assert sorted(s["no_effect"].split(",")) == sorted(key for key, _ in TUNED.values())
    assert shown == want
    if target() == "strata":
        log = stop_and_log(srv)
        for opt in list(TUNED) + ["modern"]:
            lines = [line for line in log if f"-o {opt}: " in line]
            assert len(lines) == 1 and "no effect here" in lines[0], (opt, log)


@pytest.mark.strata_only
def test_without_tuning_nothing_is_listed_as_without_effect(make_server):
    s = stats(make_server().connect(timeout=READ_TIMEOUT), "settings")
    assert (s["no_effect"], s["slab_reassign"], s["slab_automove"], s["hash_algorithm"]) == ("none", "no", "0", "ahash")
