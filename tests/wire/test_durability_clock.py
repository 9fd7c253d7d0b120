"""Expiry times across a crash-restart that replays the durability log.

Found flaky in test_every_protocol_change_is_durable (a TTL of 1001 after
`touch t 1000` and a kill -9): a log holds expiry times on the timeline of
the process that wrote it, and a restart with no snapshot to resume that
timeline from started a new one, so every replayed expiry moved by the old
process's uptime (an item set with a TTL of 100 after 500 s up came back
with 600 left; one already expired came back alive). With a snapshot, the
clock resumed where the snapshot's header stood, not where the log's last
change was made. The debug clock stands in for uptime and for a wall clock
stepped back. strata only.
"""

import signal
import time

import pytest

from harness import Server
from wirelib import expect, read_line_or_partial, stats

pytestmark = [pytest.mark.strata_only, pytest.mark.not_over_flash("--durability refuses -o ext_path")]


def start(path):
    return Server(["--snapshot-dir", str(path), "--durability", "always", "-t", "2", "--enable-debug-clock"])


def ttl(c, key):
    c.send(b"mg %s t\r\n" % key)
    line = read_line_or_partial(c)
    assert line.startswith(b"HD t"), (key, line)
    return int(line.split()[1][1:])


def write_on_a_later_clock(c):
    """Writes, with the clock 500 s on, a key that lives 1000 s more and one
    that expires 100 s after it was set; then, 200 s later (the second
    expired), one more change."""
    expect(c, b"debug_advance_clock 500\r\n", b"OK\r\n")
    expect(c, b"set live 0 1000 1\r\nx\r\n", b"STORED\r\n")
    expect(c, b"set dead 0 100 1\r\ny\r\n", b"STORED\r\n")
    expect(c, b"debug_advance_clock 200\r\n", b"OK\r\n")
    expect(c, b"get dead\r\n", b"END\r\n")
    assert 795 <= ttl(c, b"live") <= 800
    # A change made then dates the log there (the debug clock moved where
    # the wall clock did not: the restart's wall clock stands as if it
    # had been stepped back 700 s).
    expect(c, b"set marker 0 0 1\r\nm\r\n", b"STORED\r\n")


def check_after_restart(srv):
    c = srv.connect()
    # No time has gone backwards from the last change logged: what had
    # expired then stays expired, and what lives has at most what it had
    # left.
    expect(c, b"get dead\r\n", b"END\r\n")
    left = ttl(c, b"live")
    assert 790 <= left <= 800, left
    return c


def test_a_log_without_a_snapshot_keeps_its_timeline(tmp_path):
    srv = start(tmp_path)
    write_on_a_later_clock(srv.connect())
    srv.stop(signal.SIGKILL)
    srv = start(tmp_path)
    try:
        c = check_after_restart(srv)
        assert stats(c)["durability_replayed_records"] == "3"
        # Restart after restart: the new run's log carries the timeline on.
        expect(c, b"set later 0 50 1\r\nz\r\n", b"STORED\r\n")
        srv.stop(signal.SIGKILL)
        srv = start(tmp_path)
        c = check_after_restart(srv)
        assert 45 <= ttl(c, b"later") <= 50
    finally:
        srv.stop()


def test_a_log_after_a_snapshot_resumes_from_its_last_change(tmp_path):
    srv = start(tmp_path)
    c = srv.connect()
    expect(c, b"set first 0 0 1\r\na\r\n", b"STORED\r\n")
    expect(c, b"snapshot\r\n", b"OK\r\n")
    deadline = time.monotonic() + 30
    while True:
        s = stats(c)
        if s["snapshot_saves"] == "1" and s["snapshot_in_progress"] == "0":
            break
        assert time.monotonic() < deadline, s
        time.sleep(0.01)
    write_on_a_later_clock(c)
    srv.stop(signal.SIGKILL)
    srv = start(tmp_path)
    try:
        c = check_after_restart(srv)
        expect(c, b"get first\r\n", b"VALUE first 0 1\r\na\r\nEND\r\n")
    finally:
        srv.stop()
