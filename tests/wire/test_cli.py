"""Command-line flags: each is checked through the server's behaviour or `stats settings`."""

import os
import socket
import stat
import tempfile
import threading
import time

import pytest

from harness import Conn, free_port
from wirelib import (
    assert_flag_settings,
    assert_in_sync,
    READ_TIMEOUT,
    expect,
    read_line_or_partial,
    run_binary,
    stats,
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
