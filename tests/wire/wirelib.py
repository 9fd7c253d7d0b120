"""Small helpers shared by the wire tests (kept out of conftest.py so that
`import wirelib` can never pick up another suite's conftest module)."""

import os
import re
import signal
import socket
import subprocess
import time

import harness
from harness import target

READ_TIMEOUT = 2.0


def server_binary():
    return harness.STRATA_BIN if target() == "strata" else harness.MEMCACHED_BIN


def run_binary(args, timeout=10):
    """Run the server binary directly (for flags that make it exit)."""
    cmd = [server_binary()] + list(args)
    if target() == "memcached" and os.geteuid() == 0:
        cmd += ["-u", "root"]
    return subprocess.run(cmd, capture_output=True, timeout=timeout)


def wait_for_tcp(host, port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return harness.Conn(socket.create_connection((host, port), timeout=READ_TIMEOUT))
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"nothing listening on {host}:{port} after {timeout}s")


def wait_for_unix(path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(READ_TIMEOUT)
            try:
                s.connect(path)
                return harness.Conn(s)
            except OSError:
                s.close()
        time.sleep(0.02)
    raise AssertionError(f"no unix socket at {path} after {timeout}s")


# ---------------------------------------------------------------- I/O helpers


def _recv_until(c, done, timeout):
    """Receive into c.buf until done(c.buf), a timeout, or EOF/reset."""
    deadline = time.monotonic() + timeout
    while not done(c.buf):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        c.sock.settimeout(left)
        try:
            chunk = c.sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return
        if not chunk:
            return
        c.buf += chunk


def read_n(c, n, timeout=READ_TIMEOUT):
    """Read up to n bytes; on timeout or EOF return what arrived (for a clear diff)."""
    _recv_until(c, lambda buf: len(buf) >= n, timeout)
    out, c.buf = c.buf[:n], c.buf[n:]
    return out


def exchange(c, request, expected_len):
    c.send(request)
    return read_n(c, expected_len)


def expect(c, request, expected):
    """Send request, assert the next len(expected) reply bytes are exactly expected."""
    got = exchange(c, request, len(expected))
    assert got == expected
    return got


def assert_in_sync(c):
    """The connection still answers, and no stray reply bytes were pending."""
    c.send(b"version\r\n")
    line = read_line_or_partial(c)
    assert line.startswith(b"VERSION ") and line.endswith(b"\r\n"), line


def read_line_or_partial(c, timeout=READ_TIMEOUT):
    _recv_until(c, lambda buf: b"\r\n" in buf, timeout)
    if b"\r\n" in c.buf:
        i = c.buf.index(b"\r\n") + 2
    else:
        i = len(c.buf)
    out, c.buf = c.buf[:i], c.buf[i:]
    return out


def read_until_end(c, terminator=b"END\r\n", timeout=READ_TIMEOUT):
    """Everything up to and including terminator (or what arrived before a timeout)."""
    _recv_until(c, lambda buf: terminator in buf, timeout)
    if terminator in c.buf:
        i = c.buf.index(terminator) + len(terminator)
    else:
        i = len(c.buf)
    out, c.buf = c.buf[:i], c.buf[i:]
    return out


# ---------------------------------------------------------------- protocol helpers


def read_reply(c):
    """One meta reply: its line, plus the data block after a VA line."""
    line = read_line_or_partial(c)
    if line.startswith(b"VA "):
        line += read_n(c, int(line.split()[1]) + 2)
    return line


def meta(c, request):
    """Sends a meta request and reads its one reply."""
    c.send(request)
    return read_reply(c)


def cas_of(c, key):
    """The item's CAS, read without marking it fetched (u)."""
    reply = meta(c, b"mg %s c u\r\n" % key)
    assert reply.startswith(b"HD c") and reply.endswith(b"\r\n"), reply
    return int(reply.split()[1][1:])


def set_cmd(key, value, flags=0, exptime=0, cmd=b"set", noreply=False):
    key = key.encode() if isinstance(key, str) else key
    line = b"%s %s %d %d %d" % (cmd, key, flags, exptime, len(value))
    if noreply:
        line += b" noreply"
    return line + b"\r\n" + value + b"\r\n"


def stored(c, key, value, flags=0, exptime=0, cmd=b"set"):
    """Store with `cmd` and assert STORED."""
    expect(c, set_cmd(key, value, flags, exptime, cmd), b"STORED\r\n")


def value_reply(key, value, flags=0, cas=None):
    key = key.encode() if isinstance(key, str) else key
    head = b"VALUE %s %d %d" % (key, flags, len(value))
    if cas is not None:
        head += b" %d" % cas
    return head + b"\r\n" + value + b"\r\n"


def get(c, keys, cmd=b"get"):
    """Raw reply of a retrieval command, up to END."""
    if isinstance(keys, (bytes, str)):
        keys = [keys]
    keys = [k.encode() if isinstance(k, str) else k for k in keys]
    c.send(cmd + b" " + b" ".join(keys) + b"\r\n")
    return read_until_end(c)


def value_or_none(c, key, timeout=10):
    """The value of one key, of any size, or None on a miss."""
    c.send(b"get " + key + b"\r\n")
    line = c.read_line()
    if line == b"END\r\n":
        return None
    m = re.fullmatch(rb"VALUE (\S+) \d+ (\d+)\r\n", line)
    assert m and m.group(1) == key, line
    body = read_n(c, int(m.group(2)) + 7, timeout=timeout)
    assert body.endswith(b"\r\nEND\r\n"), body[-20:]
    return body[:-7]


def held_items(c, check=lambda key, value: None, passes=20):
    """Every item the server holds: `lru_crawler metadump all`, then a get of
    each key listed; key to value (None: listed, then gone), with the
    `stats` after. strata's background reclaimer may go on evicting for a
    moment after a load (it frees segments ahead of the writers), so the
    result is that of the first pass no eviction ran through; `check(key,
    value)` sees every key of every pass."""
    for _ in range(passes):
        before = stats(c)
        c.send(b"lru_crawler metadump all\r\n")
        keys = re.findall(rb"^key=(\S+) ", read_until_end(c, timeout=30), re.M)
        items = {}
        for key in keys:
            items[key] = value_or_none(c, key)
            check(key, items[key])
        after = stats(c)
        if after["evictions"] == before["evictions"]:
            return items, after
    raise AssertionError(f"evictions went on through {passes} passes of an idle server")


def assert_value(c, key, value, flags=0):
    assert get(c, key) == value_reply(key, value, flags) + b"END\r\n"


def assert_missing(c, key):
    assert get(c, key) == b"END\r\n"


def gets_cas(c, key):
    reply = get(c, key, b"gets")
    head = reply.split(b"\r\n", 1)[0].split()
    assert head[0] == b"VALUE", reply
    return int(head[4])


def stats(c, group=None):
    c.send(b"stats\r\n" if group is None else b"stats " + group.encode() + b"\r\n")
    reply = read_until_end(c)
    assert reply.endswith(b"END\r\n"), reply
    out = {}
    for line in reply.split(b"\r\n")[:-2]:
        parts = line.split(b" ", 2)
        assert parts[0] == b"STAT" and len(parts) == 3, line
        out[parts[1].decode()] = parts[2].decode()
    return out


def assert_stats_shape(reply):
    """Zero or more `STAT <name> <value>` lines then END."""
    assert reply.endswith(b"END\r\n"), reply
    for line in reply.split(b"\r\n")[:-2]:
        parts = line.split(b" ", 2)
        assert parts[0] == b"STAT" and len(parts) == 3 and parts[1] and parts[2], line


def server_now(c):
    return int(stats(c)["time"])


def advance_clock(c, seconds):
    """strata only: move the server clock forward (needs --enable-debug-clock)."""
    expect(c, b"debug_advance_clock %d\r\n" % seconds, b"OK\r\n")


def stop_and_log(srv, timeout=10.0):
    """Stops the server (SIGTERM); returns its log (stderr) as lines."""
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(timeout)
    return srv.proc.stderr.read().decode(errors="replace").splitlines()


def wait_exit(srv, timeout=10.0):
    """Wait for the server process to exit by itself; return its exit code."""
    try:
        return srv.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


# The flags both test_cli (long forms) and test_stats (short forms) start a
# server with, and the `stats settings` they must produce.
FLAG_SETTINGS = {
    "maxbytes": str(100 * 1024 * 1024),
    "maxconns": "500",
    "num_threads": "2",
    "item_size_max": str(2 * 1024 * 1024),
    "cas_enabled": "no",
    "evictions": "off",
    "shutdown_command": "yes",
    "flush_enabled": "no",
    "reqs_per_event": "7",
    "tcp_backlog": "99",
}


def assert_flag_settings(c):
    """`stats settings` reflects the FLAG_SETTINGS flags; returns all settings."""
    s = stats(c, "settings")
    assert {k: s.get(k) for k in FLAG_SETTINGS} == FLAG_SETTINGS
    return s
