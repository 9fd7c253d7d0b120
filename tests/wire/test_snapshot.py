"""Snapshots and warm restarts (--snapshot-dir, -e, the `snapshot` command).

A server is filled over every protocol, stopped, and started again on the
same directory: everything it held must come back exactly, and nothing
that had expired, been flushed or been damaged on disk may. memcached's own
warm restart (-e on tmpfs, SIGUSR1) is a different mechanism with other
flags, so these tests run against strata only.
"""

import contextlib
import os
import random
import re
import signal
import struct
import subprocess
import time

import pytest

import binlib as b
from harness import Server
from wirelib import advance_clock, assert_in_sync, expect, gets_cas, meta, read_line_or_partial, read_n, stats

pytestmark = [pytest.mark.strata_only, pytest.mark.not_over_flash("a restart gets a new flash file in that run")]


def start(path, *args, flag="--snapshot-dir"):
    return Server([flag, str(path), "--enable-debug-clock", "-A", *args])


def restart(srv, path, *args, sig=signal.SIGTERM, flag="--snapshot-dir"):
    code = srv.stop(sig)
    if sig == signal.SIGTERM:
        assert code == 0
    return start(path, *args, flag=flag)


def wait_saved(c, saves, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = stats(c)
        if int(s["snapshot_saves"]) + int(s["snapshot_save_errors"]) >= saves and s["snapshot_in_progress"] == "0":
            return s
        time.sleep(0.01)
    raise AssertionError("snapshot did not finish")


def test_every_protocol_round_trips_a_restart(tmp_path):
    srv = start(tmp_path)
    try:
        c = srv.connect()
        # Classic text: flags, a TTL, a counter, append.
        expect(c, b"set plain 42 0 5\r\nhello\r\n", b"STORED\r\n")
        expect(c, b"set ttl 7 100 3\r\nabc\r\n", b"STORED\r\n")
        expect(c, b"set short 0 30 1\r\nx\r\n", b"STORED\r\n")
        expect(c, b"set n 0 0 2\r\n10\r\n", b"STORED\r\n")
        expect(c, b"incr n 5\r\n", b"15\r\n")
        expect(c, b"append plain 0 0 6\r\n world\r\n", b"STORED\r\n")
        cas_plain = gets_cas(c, b"plain")
        # Meta: a stale item and a token handed out, a base64 key.
        expect(c, b"ms stale 4 F9\r\nold!\r\n", b"HD\r\n")
        expect(c, b"md stale I\r\n", b"HD\r\n")
        assert meta(c, b"mg stale v\r\n") == b"VA 4 X W\r\nold!\r\n"
        expect(c, b"ms " + b"YmluYXJ5" + b" 3 b\r\nbin\r\n", b"HD\r\n")
        # Binary (its own connection: the first byte picks the protocol).
        bc = srv.connect()
        bc.send(b.store(b.SET, b"binkey", b"binval", flags=0xDEADBEEF))
        assert b.read_packet(bc).status == b.SUCCESS
        bc.close()
        # Time passes: `short` expires before the snapshot, `ttl` has 50 s left.
        advance_clock(c, 50)
        ttl_before = meta(c, b"mg ttl t\r\n")
        c.close()

        srv = restart(srv, tmp_path)
        c = srv.connect()
        s = stats(c)
        assert s["snapshot_load_result"] == "ok"
        assert int(s["snapshot_loaded_items"]) == 6, "all but the expired one"
        expect(c, b"gets plain\r\n", b"VALUE plain 42 11 %d\r\nhello world\r\nEND\r\n" % cas_plain)
        expect(c, b"get short\r\n", b"END\r\n")
        ttl_after = meta(c, b"mg ttl t v f\r\n")
        left_before = int(re.search(rb"t(\d+)", ttl_before).group(1))
        left_after = int(re.search(rb"t(\d+)", ttl_after).group(1))
        assert 0 <= left_before - left_after <= 1, (ttl_before, ttl_after)
        assert ttl_after.endswith(b" f7\r\nabc\r\n")
        expect(c, b"incr n 1\r\n", b"16\r\n")
        # The stale mark and the token survive: the next reader gets Z, not W.
        assert meta(c, b"mg stale v\r\n") == b"VA 4 Z X\r\nold!\r\n"
        assert meta(c, b"mg YmluYXJ5 b k v\r\n") == b"VA 3 kYmluYXJ5 b\r\nbin\r\n"
        bc = srv.connect()
        bc.send(b.request(b.GET, key=b"binkey"))
        r = b.read_packet(bc)
        assert (r.status, r.value, r.extras) == (b.SUCCESS, b"binval", struct.pack(">I", 0xDEADBEEF))
        # CAS: the value a client held before still works; a new write
        # gets a CAS no client can hold from before.
        expect(c, b"cas plain 1 0 2 %d\r\nok\r\n" % cas_plain, b"STORED\r\n")
        assert gets_cas(c, b"plain") > cas_plain
        assert_in_sync(c)
    finally:
        srv.stop()


def test_flush_all_before_the_snapshot_stays_in_effect(tmp_path):
    srv = start(tmp_path)
    try:
        c = srv.connect()
        expect(c, b"set before 0 0 1\r\na\r\n", b"STORED\r\n")
        expect(c, b"flush_all\r\n", b"OK\r\n")
        expect(c, b"set after 0 0 1\r\nb\r\n", b"STORED\r\n")
        expect(c, b"flush_all 100\r\n", b"OK\r\n")
        c.close()
        srv = restart(srv, tmp_path)
        c = srv.connect()
        expect(c, b"get before after\r\n", b"VALUE after 0 1\r\nb\r\nEND\r\n")
        advance_clock(c, 101)
        expect(c, b"get after\r\n", b"END\r\n")
    finally:
        srv.stop()


def test_snapshot_command_and_stats(tmp_path, make_server):
    srv = start(tmp_path, "--snapshot-interval", "3600")
    try:
        c = srv.connect()
        s = stats(c)
        assert (s["snapshot_saves"], s["snapshot_last_result"], s["snapshot_load_result"]) == ("0", "none", "none")
        settings = stats(c, "settings")
        assert settings["snapshot_file"] == str(tmp_path / "strata.snapshot")
        assert (settings["snapshot_interval"], settings["snapshot_strict"]) == ("3600", "no")
        expect(c, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
        expect(c, b"snapshot\r\n", b"OK\r\n")
        s = wait_saved(c, 1)
        assert s["snapshot_last_result"] == "ok"
        assert int(s["snapshot_last_items"]) == 1
        assert int(s["snapshot_last_bytes"]) == os.path.getsize(tmp_path / "strata.snapshot")
        assert abs(int(s["snapshot_last_time"]) - int(s["time"])) <= 2
        expect(c, b"snapshot now\r\n", b"ERROR\r\n")
        assert_in_sync(c)
    finally:
        srv.stop()
    plain = make_server()
    c = plain.connect()
    expect(c, b"snapshot\r\n", b"SERVER_ERROR snapshots are off (start with --snapshot-dir)\r\n")
    assert "snapshot_saves" not in stats(c)


def test_memory_file_flag_names_the_snapshot_file(tmp_path):
    path = tmp_path / "memcached_file"
    srv = start(path, flag="-e")
    c = srv.connect()
    expect(c, b"set k 3 0 2\r\nhi\r\n", b"STORED\r\n")
    c.close()
    srv = restart(srv, path, flag="--memory-file")
    try:
        assert path.exists() and (tmp_path / "memcached_file.epoch").exists()
        expect(srv.connect(), b"get k\r\n", b"VALUE k 3 2\r\nhi\r\nEND\r\n")
    finally:
        srv.stop()


def test_two_servers_never_share_a_snapshot(tmp_path):
    srv = start(tmp_path)
    try:
        second = subprocess.run(
            [Server.__init__.__globals__["STRATA_BIN"], "-p", "0", "--snapshot-dir", str(tmp_path)],
            capture_output=True,
            timeout=20,
        )
        assert second.returncode == 73, second.stderr
        assert b"strata.snapshot.lock: another process holds it" in second.stderr
    finally:
        srv.stop()
    # The lock goes with the process.
    start(tmp_path).stop()


def test_interval_snapshots_while_serving(tmp_path):
    srv = start(tmp_path, "--snapshot-interval", "1")
    try:
        c = srv.connect()
        expect(c, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
        s = wait_saved(c, 1, timeout=5)
        assert s["snapshot_last_result"] == "ok"
    finally:
        srv.stop(signal.SIGKILL)
    srv = start(tmp_path)
    try:
        expect(srv.connect(), b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    finally:
        srv.stop()


# ---------------------------------------------------------------- crashes

KEYS = 3000
VALUE = 2000


def value_of(i, gen):
    head = b"%d:%d:" % (gen, i)
    return (head * (VALUE // len(head) + 1))[:VALUE]


def fill(c, gen):
    out = b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, VALUE, value_of(i, gen)) for i in range(KEYS))
    c.send(out)
    expect(c, b"mn\r\n", b"MN\r\n")


def generation(c):
    """The generation every key holds (all the same), or None if empty."""
    gens = set()
    c.send(b"get " + b" ".join(b"k%d" % i for i in range(KEYS)) + b"\r\n")
    found = 0
    while True:
        line = read_line_or_partial(c)
        if line == b"END\r\n":
            break
        _, key, _, n = line.split()
        data = read_n(c, int(n) + 2)[:-2]
        i = int(key[1:])
        gen = int(data.split(b":")[0])
        assert data == value_of(i, gen), key
        gens.add(gen)
        found += 1
    if found == 0:
        return None
    assert found == KEYS and len(gens) == 1, (found, gens)
    return gens.pop()


@pytest.mark.one_event_loop("the snapshot file's atomic replacement")
def test_kill_9_during_a_snapshot_loads_the_old_or_the_new_one_whole(tmp_path):
    rng = random.Random(1606)
    srv = start(tmp_path, "-m", "64")
    c = srv.connect()
    fill(c, 0)
    expect(c, b"snapshot\r\n", b"OK\r\n")
    wait_saved(c, 1)
    t0 = time.monotonic()
    fill(c, 1)
    expect(c, b"snapshot\r\n", b"OK\r\n")
    wait_saved(c, 2)
    took = max(time.monotonic() - t0, 0.005)
    loaded = 1
    outcomes = {"old": 0, "new": 0}
    for trial in range(2, 24):
        c = srv.connect()
        fill(c, trial)
        c.send(b"snapshot\r\n")
        time.sleep(rng.uniform(0, took * 1.5))
        srv.stop(signal.SIGKILL)
        srv = start(tmp_path, "-m", "64")
        c = srv.connect()
        gen = generation(c)
        assert gen in (loaded, trial), (trial, gen, loaded)
        outcomes["new" if gen == trial else "old"] += 1
        loaded = gen
    srv.stop()
    print("kill -9 outcomes", outcomes)
    # Kills landed both before a save was whole (the old one loaded) and
    # after: the test saw the seam it is about.
    assert outcomes["old"] > 0 and outcomes["new"] > 0, outcomes


def test_cas_after_a_crash_never_repeats_one_handed_out_before(tmp_path):
    srv = start(tmp_path)
    c = srv.connect()
    expect(c, b"set k 0 0 1\r\na\r\n", b"STORED\r\n")
    expect(c, b"snapshot\r\n", b"OK\r\n")
    wait_saved(c, 1)
    # Written after the snapshot, then lost with the crash.
    seen = set()
    for i in range(200):
        expect(c, b"set j%d 0 0 1\r\nb\r\n" % i, b"STORED\r\n")
        seen.add(gets_cas(c, b"j%d" % i))
    srv.stop(signal.SIGKILL)
    srv = start(tmp_path)
    try:
        c = srv.connect()
        for i in range(200):
            expect(c, b"set j%d 0 0 1\r\nc\r\n" % i, b"STORED\r\n")
            assert gets_cas(c, b"j%d" % i) not in seen
    finally:
        srv.stop()


# ---------------------------------------------------------------- damage


DAMAGE_KEYS = 4000
DAMAGE_LEN = 600


def damage_value(i):
    return (b"%d-" % i * DAMAGE_LEN)[:DAMAGE_LEN]


def saved_dir(tmp_path, n=DAMAGE_KEYS):
    """A snapshot of 2.4 MB: three segments."""
    srv = start(tmp_path)
    c = srv.connect()
    c.send(b"".join(b"set d%d 1 0 %d noreply\r\n%s\r\n" % (i, DAMAGE_LEN, damage_value(i)) for i in range(n)))
    expect(c, b"mn\r\n", b"MN\r\n")
    c.close()
    assert srv.stop() == 0
    return tmp_path / "strata.snapshot"


def check_values(c, n=DAMAGE_KEYS):
    """Every value served is the right one; returns how many are there."""
    found = 0
    for i in range(n):
        c.send(b"get d%d\r\n" % i)
        line = read_line_or_partial(c)
        if line == b"END\r\n":
            continue
        assert line == b"VALUE d%d 1 %d\r\n" % (i, DAMAGE_LEN)
        assert read_n(c, DAMAGE_LEN + 7) == damage_value(i) + b"\r\nEND\r\n"
        found += 1
    return found


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "version", "garbage"])
def test_a_damaged_snapshot_is_reported_and_never_served_wrong(tmp_path, damage):
    path = saved_dir(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        # Inside the first segment's bytes: that segment is dropped.
        data[5000] ^= 0x5A
    elif damage == "truncate":
        data = data[: len(data) * 2 // 3]
    elif damage == "empty":
        data = bytearray()
    elif damage == "version":
        data[8] = 99
    else:
        data = bytearray(os.urandom(5000))
    path.write_bytes(bytes(data))
    srv = start(tmp_path)
    try:
        c = srv.connect()
        s = stats(c)
        found = check_values(c)
        expected = {"flip": "damaged", "truncate": "damaged"}.get(damage, "refused")
        assert s["snapshot_load_result"] == expected
        if damage in ("flip", "truncate"):
            assert 0 < found < DAMAGE_KEYS
        else:
            assert found == 0
        expect(c, b"set new 0 0 1\r\nx\r\n", b"STORED\r\n")
    finally:
        srv.stop()
    # --snapshot-strict refuses to start instead.
    path.write_bytes(bytes(data))
    strict = subprocess.run(
        [Server.__init__.__globals__["STRATA_BIN"], "-p", "0", "--snapshot-dir", str(tmp_path), "--snapshot-strict"],
        capture_output=True,
        timeout=20,
    )
    assert strict.returncode == 65, strict.stderr
    assert b"--snapshot-strict" in strict.stderr


def test_a_smaller_memory_limit_loads_what_fits(tmp_path):
    srv = start(tmp_path, "-m", "64")
    c = srv.connect()
    c.send(b"".join(b"set m%d 0 0 1000 noreply\r\n%s\r\n" % (i, b"%06d" % i * 166 + b"xxxx") for i in range(20_000)))
    expect(c, b"mn\r\n", b"MN\r\n")
    c.close()
    srv = restart(srv, tmp_path, "-m", "8")
    try:
        c = srv.connect()
        s = stats(c)
        assert s["snapshot_load_result"] == "ok"
        # Restored whole while segments were free, the rest item by item,
        # the oldest evicted (issue 41: the loader keeps what was live).
        assert int(s["snapshot_load_item_segments"]) > 0
        assert int(s["snapshot_load_evicted"]) > 0
        assert s["snapshot_load_skipped_segments"] == "0"
        loaded = int(s["curr_items"])
        assert 0 < loaded < 20_000
        expect(c, b"get m19999\r\n", b"VALUE m19999 0 1000\r\n" + b"019999" * 166 + b"xxxx\r\nEND\r\n")
        expect(c, b"get m0\r\n", b"END\r\n")
    finally:
        srv.stop()


def test_a_missing_snapshot_dir_is_made_and_an_unusable_one_refuses_the_start(tmp_path):
    # Issue 30: a missing directory used to start, serve, and lose the whole
    # cache at SIGTERM. It is made now, as systemd's StateDirectory= would.
    path = tmp_path / "state" / "strata"
    srv = start(path)
    c = srv.connect()
    expect(c, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
    srv = restart(srv, path)
    try:
        expect(srv.connect(), b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    finally:
        srv.stop()
    # A "directory" that is a file: nothing can be created in it, so
    # nothing written could be kept: the server refuses to start.
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    from harness import STRATA_BIN

    r = subprocess.run([STRATA_BIN, "-p", "0", "--snapshot-dir", str(blocker / "sub")], capture_output=True, timeout=20)
    assert r.returncode == 73, r.stderr
    assert b"cannot create the snapshot directory" in r.stderr, r.stderr


@contextlib.contextmanager
def small_tmpfs(tmp_path):
    """A 256 KiB tmpfs: a disk that fills. Unmounted lazily at the end, so
    a server a failed assertion left running never outlives the test."""
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)]).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield small
    finally:
        subprocess.run(["umount", "-l", str(small)])


def test_a_failed_shutdown_save_exits_non_zero(tmp_path):
    # Issue 30: SIGTERM exited 0 when its save failed; a supervisor must see it.
    with small_tmpfs(tmp_path) as small:
        srv = start(small)
        try:
            c = srv.connect()
            c.send(b"".join(b"set big%d 0 0 1000 noreply\r\n%s\r\n" % (i, b"z" * 1000) for i in range(1000)))
            expect(c, b"mn\r\n", b"MN\r\n")
        finally:
            code = srv.stop(signal.SIGTERM)
        assert code == 71, code


def test_a_full_disk_fails_the_snapshot_not_the_server(tmp_path):
    with small_tmpfs(tmp_path) as small:
        srv = None
        try:
            srv = start(small)
            c = srv.connect()
            expect(c, b"set first 0 0 1\r\na\r\n", b"STORED\r\n")
            expect(c, b"snapshot\r\n", b"OK\r\n")
            assert wait_saved(c, 1)["snapshot_last_result"] == "ok"
            c.send(b"".join(b"set big%d 0 0 1000 noreply\r\n%s\r\n" % (i, b"z" * 1000) for i in range(1000)))
            expect(c, b"mn\r\n", b"MN\r\n")
            expect(c, b"snapshot\r\n", b"OK\r\n")
            s = wait_saved(c, 2)
            assert s["snapshot_last_result"] == "failed"
            assert not (small / "strata.snapshot.tmp").exists()
            expect(c, b"get big999\r\n", b"VALUE big999 0 1000\r\n" + b"z" * 1000 + b"\r\nEND\r\n")
            srv.stop(signal.SIGKILL)
            # The earlier snapshot is whole and loads.
            srv = start(small)
            expect(srv.connect(), b"get first big0\r\n", b"VALUE first 0 1\r\na\r\nEND\r\n")
        finally:
            if srv is not None:
                srv.stop(signal.SIGKILL)
