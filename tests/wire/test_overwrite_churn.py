"""Overwrite churn: live data at 70% of -m, rewritten again and again with
90% of the writes going to the hottest 10% of the keys, must all survive —
the dead versions of hot keys are reclaimed before any live item is evicted
(memcached reuses slab chunks and keeps them all; strata's cleaner copies
live items out of mostly dead segments). Then strata's cleaner stats must
say what happened."""

import random

import pytest

from harness import Server, target
from wirelib import READ_TIMEOUT, expect, read_until_end, stats

MEMORY_MB = 32
VALUE_LEN = 1000
# About 70% of -m in item bytes (key, value, header).
KEYS = int(MEMORY_MB * 1024 * 1024 * 0.70) // (VALUE_LEN + 40)
OVERWRITES = 10 * KEYS


@pytest.fixture(scope="module")
def server():
    srv = Server(args=["-m", str(MEMORY_MB), "-t", "2"])
    yield srv
    srv.stop()


def value(i, version):
    """A key's versions differ in length, so that strata writes each as a
    new version (one of the same length goes over the old in place:
    test_overwrite_in_place.py) and its cleaner has the dead ones to win
    back."""
    head = b"%d:%d:" % (i, version)
    return head + b"." * (VALUE_LEN - version % 3 - len(head))


def send_sets(c, writes):
    """Pipelined noreply sets, then a round trip to know they were applied."""
    batch = []
    for i, version in writes:
        v = value(i, version)
        batch.append(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
        if len(batch) == 256:
            c.send(b"".join(batch))
            batch = []
    c.send(b"".join(batch))
    expect(c, b"mn\r\n", b"MN\r\n")


@pytest.mark.not_over_flash("every write goes to a 64 MB flash file: its dead versions fill it and the oldest region's live items are dropped")
def test_skewed_overwrites_keep_every_live_key(server):
    c = server.connect(timeout=READ_TIMEOUT)
    latest = [0] * KEYS
    send_sets(c, [(i, 0) for i in range(KEYS)])
    rng = random.Random(20)
    hot = KEYS // 10
    writes = []
    for _ in range(OVERWRITES):
        i = rng.randrange(hot) if rng.random() < 0.9 else rng.randrange(hot, KEYS)
        latest[i] += 1
        writes.append((i, latest[i]))
    send_sets(c, writes)

    missing = []
    for start in range(0, KEYS, 100):
        keys = range(start, min(start + 100, KEYS))
        c.send(b"get " + b" ".join(b"k%d" % i for i in keys) + b"\r\n")
        reply = read_until_end(c)
        for i in keys:
            v = value(i, latest[i])
            want = b"VALUE k%d 0 %d\r\n%s\r\n" % (i, len(v), v)
            if want not in reply:
                missing.append(i)
    assert missing == [], "%d of %d keys lost or stale" % (len(missing), KEYS)

    st = stats(c)
    assert st["evictions"] == "0"
    assert int(st["curr_items"]) == KEYS
    if target() == "strata":
        assert int(st["strata_segments_cleaned"]) > 0
        stored_bytes, copied = int(st["strata_bytes_stored"]), int(st["strata_bytes_copied"])
        assert stored_bytes >= (KEYS + OVERWRITES) * (VALUE_LEN - 2)
        assert copied > 0
        assert st["strata_write_amplification"] == "%.2f" % ((stored_bytes + copied) / stored_bytes)
        assert int(st["strata_dead_bytes_reclaimed"]) > 0
        assert int(st["strata_dead_bytes"]) < MEMORY_MB << 20
    c.close()


@pytest.mark.strata_only
def test_cleaner_stats_start_at_zero(make_server):
    c = make_server(["-m", "16"]).connect(timeout=READ_TIMEOUT)
    st = stats(c)
    for name in ["strata_bytes_stored", "strata_bytes_copied", "strata_segments_cleaned",
                 "strata_dead_bytes_reclaimed", "strata_cleaner_us", "strata_dead_bytes"]:
        assert st[name] == "0", name
    assert st["strata_write_amplification"] == "1.00"
    # Nothing written: every segment -m allows (less the index's and the
    # read sketch's share) is idle.
    idle = int(st["strata_idle_bytes"])
    assert 15 << 20 <= idle <= 16 << 20, idle
    assert (st["strata_idle_free_bytes"], st["strata_idle_open_bytes"], st["strata_idle_sealed_bytes"]) == (str(idle), "0", "0")
    expect(c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n")
    st = stats(c)
    # Header, key and value: more than the value's one byte.
    assert int(st["strata_bytes_stored"]) > 1
    # The item took its own bytes of the segment it opened, no more; that
    # segment's rest is open room.
    assert 0 < idle - int(st["strata_idle_bytes"]) < 128
    seg = int(st["strata_segment_size"])
    assert seg - 128 < int(st["strata_idle_open_bytes"]) < seg
    assert int(st["strata_idle_free_bytes"]) == idle - seg
    assert st["strata_idle_sealed_bytes"] == "0"
    c.close()
