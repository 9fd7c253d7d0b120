"""Snapshots of large values in four TTL classes at a `-m` the clients fill,
then kill -9 and a restart, four times on the same directory. Taken while
clients set and read: every item the restarted server holds is one a
client stored under that key, byte for byte, and `curr_items` counts
exactly what a dump lists and a get finds. Taken once the clients have
stopped: the restarted server holds every item the stopped one did, with
the same value, but for what the loader had to evict (counted).

The load is the one the snapshot's cut had no wire test for (stop 62):
eviction copies read items forward into the main queue's copy targets,
and with values this large a target an item does not fit stays open as a
spare (`Store::set_aside`), so the cut must carry what spares hold. The
model is the writers' record of what they stored: a value names its key
and version and is otherwise determined by them, so a foreign or torn
value cannot pass.
"""

import random
import re
import shutil
import signal
import threading
import time
import zlib

import pytest

from harness import Server
from wirelib import held_items, stats, value_or_none

pytestmark = [
    pytest.mark.strata_only,
    pytest.mark.not_over_flash("a restart gets a new flash file in that run"),
]

WRITERS = 2
# Keys of 100 B to 600 KB (69 KB on average): 27 MB of them, for -m 16.
KEYS_PER_WRITER = 200
TTLS = (0, 600, 3600, 86400)
HEAD = re.compile(rb"(w\d+k\d+):(\d+):")


def value_of(key, version):
    """The value stored as `version` of `key`: 100 B to 600 KB, its TTL class
    and size set by the two."""
    rng = random.Random(zlib.crc32(b"%s:%d" % (key, version)))
    size = int(100 * (6000 ** rng.random()))
    head = b"%s:%d:" % (key, version)
    return (head * (size // len(head) + 1))[:size], TTLS[version % len(TTLS)]


def check(key, value, stored):
    """`value`, read under `key`, is a version some writer stored there."""
    m = HEAD.match(value)
    assert m and m.group(1) == key, f"{key!r} holds {value[:40]!r}, which no writer stored there"
    version = int(m.group(2))
    assert version in stored.get(key, ()), f"{key!r} version {version} was never acknowledged"
    assert value == value_of(key, version)[0], f"{key!r} version {version} torn ({len(value)} bytes)"


class Writer(threading.Thread):
    """Sets (a new version each time) and reads its own keys, zipf-like,
    until told to stop; every acknowledged version goes into `stored`."""

    def __init__(self, srv, ident, stored, seed):
        super().__init__(daemon=True)
        self.c = srv.connect(timeout=10)
        self.writer = ident
        self.stored = stored
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.version = 0
        self.error = None

    def key(self):
        rank = min(int(self.rng.paretovariate(0.8)), KEYS_PER_WRITER) - 1
        return b"w%dk%d" % (self.writer, rank)

    def run(self):
        try:
            while not self.stop.is_set():
                key = self.key()
                self.version += 1
                value, ttl = value_of(key, self.version)
                self.c.send(b"set %s 0 %d %d\r\n%s\r\n" % (key, ttl, len(value), value))
                assert self.c.read_line() == b"STORED\r\n"
                self.stored.setdefault(key, set()).add(self.version)
                # A read, so that eviction copies items forward.
                key = self.key()
                got = value_or_none(self.c, key)
                if got is not None:
                    check(key, got, self.stored)
        except Exception as e:  # reported by the test's thread
            self.error = e
        finally:
            self.c.close()


def stop_all(writers):
    for w in writers:
        w.stop.set()
    for w in writers:
        w.join(timeout=60)
        assert w.error is None, w.error


def snapshot(c, deadline):
    """Takes a snapshot and waits for it; its stats."""
    before = int(stats(c)["snapshot_saves"])
    c.send(b"snapshot\r\n")
    assert c.read_line() == b"OK\r\n"
    while time.monotonic() < deadline:
        s = stats(c)
        if int(s["snapshot_saves"]) + int(s["snapshot_save_errors"]) > before and s["snapshot_in_progress"] == "0":
            assert s["snapshot_last_result"] == "ok", s["snapshot_last_result"]
            return s
        time.sleep(0.01)
    raise AssertionError("the snapshot did not finish")


def held(c, stored):
    """Every item the server holds, key to value, each checked against
    `stored`, and its evictions count (`wirelib.held_items`)."""
    items, after = held_items(c, lambda key, value: value is None or check(key, value, stored))
    assert None not in items.values() and len(items) == int(after["curr_items"]), (len(items), after["curr_items"])
    return items, int(after["evictions"])


def load_log(srv):
    """The snapshot lines of a server's log, which it is killed to read."""
    srv.proc.kill()
    err = srv.proc.stderr.read().decode(errors="replace")
    srv.proc.wait()
    return [line[line.find("INFO") :] for line in err.splitlines() if "snapshot" in line]


def load_and_snapshot(srv, stored, seed, quiet):
    """Writers fill memory; a snapshot is taken under them, or once they
    have stopped (`quiet`: then also what the server held, and its
    evictions count, just before). Returns the snapshot's stats and that."""
    writers = [Writer(srv, i, stored, seed * 10 + i) for i in range(WRITERS)]
    for w in writers:
        w.start()
    c = srv.connect(timeout=10)
    try:
        # Wait on the load, not on time: memory full and evicting.
        deadline = time.monotonic() + 120
        while int(stats(c)["evictions"]) < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        if quiet:
            stop_all(writers)
            before = held(c, stored)
            return snapshot(c, deadline), before
        s = snapshot(c, deadline)
        # More writes after the snapshot, which the restart must not show
        # (torn or otherwise: they are not in it).
        mark = int(s["cmd_set"])
        while int(stats(c)["cmd_set"]) < mark + 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        return s, None
    finally:
        stop_all(writers)
        c.close()


def test_snapshots_under_large_writes_restore_what_was_stored(tmp_path):
    args = ["--snapshot-dir", str(tmp_path), "-m", "16", "-t", "2"]
    srv = Server(args)
    stored = {}
    try:
        for round_, quiet in enumerate([False, True, False, True]):
            s, before = load_and_snapshot(srv, stored, round_, quiet)
            assert int(s["evictions"]) >= 100 and int(s["strata_items_reinserted"]) > 0, (
                "the load reached eviction's copy-forward",
                s["evictions"],
                s["strata_items_reinserted"],
            )
            saved = int(s["snapshot_last_items"])
            srv.stop(signal.SIGKILL)
            # The file the restart loads, kept for a post-mortem.
            shutil.copy(tmp_path / "strata.snapshot", tmp_path / f"round{round_}.snapshot")
            srv = Server(args)
            c = srv.connect(timeout=10)
            loaded = stats(c)
            assert loaded["snapshot_load_result"] == "ok", loaded["snapshot_load_result"]
            after, evicted_since = held(c, stored)
            # The snapshot's items, less what the loader and then the
            # reclaimer (freeing segments ahead) evicted.
            gone = int(loaded["snapshot_load_evicted"]) + evicted_since
            if not len(after) + gone >= saved > 0:
                missing = sorted(k for k in stored if k not in after)
                raise AssertionError(f"{saved} saved, {len(after)} back, {gone} evicted; keys stored, not back: "
                                     f"{missing[:10]}; the load's log: {load_log(srv)}")
            if before is not None:
                items, evictions = before
                # Evicted between the listing and the snapshot's cut.
                gone += int(s["evictions"]) - evictions
                lost = [k for k in items if k not in after]
                assert len(lost) <= gone, f"{len(lost)} of {len(items)} items lost, {gone} evicted: {lost[:5]}"
                changed = [k for k in items if k in after and after[k] != items[k]]
                assert not changed, changed[:5]
            print(f"round {round_} ({'quiet' if quiet else 'under writers'}): {saved} items saved, {len(after)} back, {gone} evicted")
            c.close()
    finally:
        srv.stop()
