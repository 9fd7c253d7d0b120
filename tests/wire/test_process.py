"""The process as an init system runs it: memcached's -P (pid file), -u
(switch user after binding), -d (daemonize), Debian's configuration file
(--config), -o idle_timeout, and a panic that costs only its connection.
The -P, -u and -d checks hold against memcached too (WIRE_TARGET=memcached).
"""

import os
import signal
import subprocess
import time

import pytest

from harness import Server, free_port
from wirelib import assert_in_sync, expect, run_binary, server_binary, stats, target, wait_for_tcp

NOBODY = 65534


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} not reached after {timeout}s")


def uid_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError("no Uid line")


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_pid_file_is_written_once_listening_and_removed_at_exit(make_server, tmp_path):
    pid_file = tmp_path / "server.pid"
    srv = make_server(["-P", str(pid_file)])
    # The harness sees the port listening as soon as it is bound; a reply
    # proves the server went on past writing the file.
    assert_in_sync(srv.connect())
    assert pid_file.read_text() == f"{srv.pid()}\n"
    assert srv.stop() == 0
    if target() == "strata":
        # memcached leaves it to the init system when it cannot; strata
        # (still root here) removes it.
        assert not pid_file.exists()


def test_an_unwritable_pid_file_is_logged_and_the_server_serves(make_server, tmp_path):
    """As memcached: the pid file is for the tools around the server, so
    one that cannot be written is logged, not fatal (under systemd's
    Restart=on-failure a fatal one would restart the server forever)."""
    pid_file = tmp_path / "missing" / "server.pid"
    srv = make_server(["-P", str(pid_file)])
    assert_in_sync(srv.connect())
    assert not pid_file.exists()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(10) == 0
    log = srv.proc.stderr.read().decode(errors="replace")
    # memcached: "Could not open the pid file <path>.tmp for writing: ...".
    lines = [line for line in log.splitlines() if str(pid_file) in line]
    assert len(lines) == 1 and "pid file" in lines[0] and "No such file or directory" in lines[0], log


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_u_switches_user_after_binding(make_server):
    srv = make_server(["-u", "nobody"])
    # Served first: the port listens (and the harness goes on) before the
    # switch, which comes after binding; a reply comes after it.
    c = srv.connect()
    expect(c, b"set k 0 0 1\r\nv\r\nget k\r\n", b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n")
    assert uid_of(srv.pid()) == NOBODY


@pytest.mark.strata_only
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_u_with_an_unknown_user_refuses_to_start():
    r = run_binary(["-p", "0", "-u", "no-such-user-strata"])
    assert r.returncode != 0 and b"can't find the user no-such-user-strata" in r.stderr


def test_d_runs_in_the_background(tmp_path):
    port = free_port()
    pid_file = tmp_path / "daemon.pid"
    cmd = [server_binary(), "-d", "-p", str(port), "-l", "127.0.0.1", "-P", str(pid_file)]
    if target() == "memcached":
        cmd += ["-U", "0", "-u", "root"]
    # The command returns once the daemon is detached.
    r = subprocess.run(cmd, capture_output=True, timeout=10)
    assert r.returncode == 0, r.stderr
    c = wait_for_tcp("127.0.0.1", port)
    wait_for(pid_file.exists, what="the pid file")
    pid = int(pid_file.read_text())
    try:
        assert pid != os.getpid()
        with open(f"/proc/{pid}/stat") as f:
            # Field 6: its session id, its own (setsid) and not ours.
            assert int(f.read().rsplit(")", 1)[1].split()[3]) == pid
        expect(c, b"set k 0 0 1\r\nv\r\nget k\r\n", b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n")
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not alive(pid), what="the daemon's exit")


@pytest.mark.strata_only
def test_debians_configuration_file(make_server, tmp_path):
    """The file Debian ships (trimmed), pointed at from the command line."""
    pid_file = tmp_path / "memcached.pid"
    log = tmp_path / "memcached.log"
    port = free_port()
    conf = tmp_path / "memcached.conf"
    conf.write_text(
        "# memcached default config file\n"
        "\n"
        f"logfile {log}\n"
        "# -v\n"
        "-m 48\n"
        f"-p {port}\n"
        "-l 127.0.0.1\n"
        "# -c 1024\n"
        "-c 77\n"
        f"-P {pid_file}\n"
        "-o idle_timeout=600\n"
    )
    srv = make_server(["--config", str(conf)], port=port, listen=False)
    c = wait_for_tcp("127.0.0.1", port)
    s = stats(c)
    assert (s["limit_maxbytes"], s["max_connections"]) == (str(48 << 20), "77")
    assert stats(c, "settings")["idle_timeout"] == "600"
    assert pid_file.read_text() == f"{srv.pid()}\n"
    wait_for(lambda: log.exists() and b"listening" in log.read_bytes(), what="the log in the logfile")
    # The command line comes after the file: its flags win.
    port2 = free_port()
    srv2 = make_server(["--config", str(conf), "-p", str(port2), "-m", "16", "-P", str(tmp_path / "2.pid")],
                       port=port2, listen=False)
    c2 = wait_for_tcp("127.0.0.1", port2)
    assert stats(c2)["limit_maxbytes"] == str(16 << 20)
    srv2.stop()
    r = run_binary(["--config", str(tmp_path / "missing.conf")])
    assert r.returncode == 64 and b"missing.conf" in r.stderr


@pytest.mark.strata_only
def test_a_tuned_memcached_conf_starts(make_server, tmp_path):
    """Every flag of memcached 1.6's -h in a configuration file, tuned
    values included (-f, -n, -r, -N and the -o options for machinery strata
    does not have): strata starts, and says what the tuning became."""
    port = free_port()
    conf = tmp_path / "memcached.conf"
    conf.write_text(
        f"-p {port}\n-l 127.0.0.1\n-m 64\n-c 512\n-t 2\n"
        "-f 1.5\n-n 32\n-r\n-N 2\n-R 20\n-b 512\n-B auto\n-I 2m\n-D :\n-L\n-k\n-C\n"
        "-o slab_reassign,slab_automove=1,lru_crawler,lru_maintainer,hash_algorithm=murmur3\n"
        "-o lru_crawler_sleep=50,lru_crawler_tocrawl=100,hot_lru_pct=20,warm_lru_pct=40,temporary_ttl=61\n"
        "-o modern,maxconns_fast,tail_repair_time=30,slab_chunk_max=524288,track_sizes,watcher_logbuf_size=256\n"
        "-o worker_logbuf_size=64,idle_timeout=0,read_buf_mem_limit=0,no_hashexpand,sock_cookie_id=1\n"
    )
    make_server(["--config", str(conf)], port=port, listen=False)
    c = wait_for_tcp("127.0.0.1", port)
    s = stats(c, "settings")
    assert (s["growth_factor"], s["chunk_size"], s["lru_crawler_sleep"], s["slab_automove"]) == ("1.50", "32", "50", "1")
    assert s["track_sizes"] == "yes"
    # -f and -n cut the size bands: the first one holds items up to 48 + 32 bytes.
    expect(c, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n")
    assert stats(c, "slabs")["1:chunk_size"] == "80"


@pytest.mark.strata_only
@pytest.mark.parametrize("line,message", [
    ("-x 5", b"unexpected argument '-x' found"),
    ("-f 1", b"Factor must be greater than 1 (-f)"),
    ("-m lots", b"invalid value 'lots'"),
])
def test_a_refused_flag_in_the_config_names_the_file_and_line(tmp_path, line, message):
    conf = tmp_path / "memcached.conf"
    conf.write_text(f"# tuned\n-m 64\n\n-p {free_port()}\n{line}\n-c 10\n")
    r = run_binary(["--config", str(conf)])
    assert r.returncode != 0
    assert f"strata: {conf}:5: ".encode() in r.stderr and message in r.stderr, r.stderr


@pytest.mark.strata_only
def test_idle_timeout_closes_idle_and_trickling_connections(make_server):
    srv = make_server(["-o", "idle_timeout=5", "--enable-debug-clock"])
    idle, trickling, busy = srv.connect(), srv.connect(), srv.connect()
    # A value that began to arrive and stopped.
    trickling.send(b"set k 0 0 10\r\nabc")
    # The harness's readiness probe connected and closed at once; on a
    # loaded machine the server may not have taken it in and seen it close
    # yet, and once the clock jumps it would be idle too (a third kick).
    # The three connections, and only they, are open before the jump.
    wait_for(lambda: (lambda s: (s["total_connections"], s["curr_connections"]) == ("4", "3"))(stats(busy)),
             what="the probe's close and the three connections")
    expect(busy, b"debug_advance_clock 6\r\n", b"OK\r\n")
    # The workers look once a second.
    for c in (idle, trickling):
        c.sock.settimeout(5)
        # The clock can move before the worker has read the trickled bytes
        # (another connection asks for it): closed with them unread, the
        # socket answers with a reset instead of an end of file. Closed
        # either way.
        try:
            got = c.sock.recv(100)
        except ConnectionResetError:
            got = b""
        assert got == b"", "closed"
    expect(busy, b"get k\r\n", b"END\r\n")
    assert stats(busy)["idle_kicks"] == "2"


@pytest.mark.strata_only
def test_verbosity_changes_the_log_level_while_serving(make_server):
    srv = make_server()
    expect(srv.connect(), b"mn\r\n", b"MN\r\n")
    c = srv.connect()
    expect(c, b"verbosity 2\r\n", b"OK\r\n")
    # Served before the level goes back, so it was accepted at level 2
    # (-vv: memcached's line for each connection).
    expect(srv.connect(), b"mn\r\n", b"MN\r\n")
    expect(c, b"verbosity 0\r\n", b"OK\r\n")
    srv.connect().sock.close()
    expect(c, b"version\r\n", b"VERSION " + stats(c)["version"].encode() + b"\r\n")
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(10)
    log = srv.proc.stderr.read()
    assert log.count(b"new auto-negotiating client connection") == 1, log


def test_memcached_tuning_options_start_unchanged(make_server):
    srv = make_server(["-o", "modern,maxconns_fast,slab_reassign,slab_automove=1,lru_crawler,lru_maintainer,"
                             "hash_algorithm=murmur3,no_inline_ascii_resp"])
    expect(srv.connect(), b"set k 0 0 1\r\nv\r\nget k\r\n", b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n")


def test_sighup_is_ignored_and_sigusr1_stops_gracefully(make_server):
    srv = make_server()
    c = srv.connect()
    expect(c, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
    os.kill(srv.pid(), signal.SIGHUP)
    expect(c, b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    assert srv.proc.poll() is None
    os.kill(srv.pid(), signal.SIGUSR1)
    assert srv.proc.wait(10) == 0


@pytest.mark.strata_only
def test_a_panic_closes_only_its_connection(make_server):
    srv = make_server(["--enable-debug-clock", "-t", "1"])
    other = srv.connect()
    expect(other, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
    victim = srv.connect()
    victim.send(b"debug_panic\r\n")
    victim.sock.settimeout(5)
    assert victim.sock.recv(100) == b"", "its connection is closed"
    # The same worker serves on, for old and new connections.
    expect(other, b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    expect(srv.connect(), b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    assert stats(other)["strata_worker_panics"] == "1"
    assert srv.proc.poll() is None
    # stats reset zeroes it, as every worker counter (it used to be left out).
    expect(other, b"stats reset\r\n", b"RESET\r\n")
    assert stats(other)["strata_worker_panics"] == "0"
