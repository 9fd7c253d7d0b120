"""Overwrites of the same length, which strata writes over the old version
in place (crates/store/src/overwrite.rs): every client-visible answer is
memcached's (a new unique per write, EXISTS for an older one, `mg l` and `h`
as for a new item), and nothing dead is left behind."""

import os
import random

import pytest

from harness import target
from wirelib import READ_TIMEOUT, advance_clock, expect, gets_cas, meta, read_until_end, stats, stored


def in_place(c):
    return int(stats(c)["strata_overwritten_in_place"])


OVER_FLASH = "every write goes to flash at once there (--debug-flash-writes): the next finds it on flash, not in memory"


def test_each_overwrite_has_a_new_unique_and_an_older_one_loses(conn):
    uniques = []
    for v in [b"aaaaa", b"bbbbb", b"ccccc", b"ddddd"]:
        stored(conn, "k", v)
        uniques.append(gets_cas(conn, "k"))
    assert len(set(uniques)) == 4, uniques
    expect(conn, b"cas k 0 0 5 %d\r\neeeee\r\n" % uniques[1], b"EXISTS\r\n")
    expect(conn, b"cas k 0 0 5 %d\r\nfffff\r\n" % uniques[3], b"STORED\r\n")
    latest = gets_cas(conn, "k")
    assert latest not in uniques
    expect(conn, b"cas k 0 0 5 %d\r\nggggg\r\n" % uniques[3], b"EXISTS\r\n")
    expect(conn, b"get k\r\n", b"VALUE k 0 5\r\nfffff\r\nEND\r\n")
    # Flags and expiry of the same layout are written too.
    expect(conn, b"set k 7 0 5\r\nhhhhh\r\n", b"STORED\r\n")
    expect(conn, b"set k 9 0 5\r\niiiii\r\n", b"STORED\r\n")
    expect(conn, b"get k\r\n", b"VALUE k 9 5\r\niiiii\r\nEND\r\n")
    if target() == "strata" and not os.environ.get("STRATA_FLASH"):  # OVER_FLASH
        assert in_place(conn) >= 3


@pytest.mark.strata_only
@pytest.mark.not_over_flash(OVER_FLASH)
def test_an_item_written_over_reads_as_new(make_server):
    c = make_server(["--enable-debug-clock"]).connect(timeout=READ_TIMEOUT)
    for v in [b"x1", b"x2"]:
        expect(c, b"ms k 2\r\n%s\r\n" % v, b"HD\r\n")
    expect(c, b"mg k v\r\n", b"VA 2\r\nx2\r\n")
    advance_clock(c, 100)
    before = in_place(c)
    expect(c, b"ms k 2\r\nx3\r\n", b"HD\r\n")
    assert in_place(c) == before + 1
    # Written now, not read since: as memcached answers for a new item.
    assert meta(c, b"mg k l h v\r\n") in (b"VA 2 l0 h0\r\nx3\r\n", b"VA 2 l1 h0\r\nx3\r\n")
    assert meta(c, b"mg k h\r\n") == b"HD h1\r\n"
    c.close()


@pytest.mark.strata_only
@pytest.mark.not_over_flash(OVER_FLASH)
def test_hot_overwrites_leave_nothing_dead_and_copy_nothing(make_server):
    c = make_server(["-m", "32", "-t", "2"]).connect(timeout=READ_TIMEOUT)
    keys, rounds, length = 2000, 10, 1000
    for r in range(rounds):
        batch = b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, length, b"%d" % r * length) for i in range(keys))
        c.send(batch)
        expect(c, b"mn\r\n", b"MN\r\n")
    st = stats(c)
    # The first overwrite of each key writes a new version laid out for
    # the rest; those go in place.
    assert int(st["strata_overwritten_in_place"]) == keys * (rounds - 2)
    # What is copied or dead is at most the first versions, once.
    assert int(st["strata_bytes_copied"]) <= keys * (length + 64)
    assert int(st["strata_dead_bytes"]) <= keys * (length + 64)
    assert st["curr_items"] == str(keys)
    c.send(b"get " + b" ".join(b"k%d" % i for i in range(0, keys, 7)) + b"\r\n")
    reply = read_until_end(c)
    assert reply.count(b"%d" % (rounds - 1) * length) == len(range(0, keys, 7))
    c.close()


@pytest.mark.strata_only
@pytest.mark.not_over_flash("gives its own ext_path")
def test_overwrites_while_items_go_to_flash_never_read_back_stale(make_server, tmp_path):
    """More keys than -m holds, over the flash tier: eviction batches items
    for flash while four connections overwrite them (the same length per
    key, so most writes go in place). A write in place must never be
    undone by a batch's repoint to the record it copied before the write:
    every key reads back the value it was last given, and a key goes
    missing only by eviction. (A set of a key not in memory drops the flash
    slots whose 28 hash bits match its own unread: once in 268 million
    slots another key's, which would fail this about once in 6,000 runs;
    on 22 bits it did about once in a hundred.)"""
    srv = make_server(["-m", "8", "-t", "2", "-o", f"ext_path={tmp_path}/flash:64M"])
    conns = [srv.connect(timeout=READ_TIMEOUT) for _ in range(4)]
    keys, rounds = 12_000, 16
    latest = [0] * keys
    rng = random.Random(7)

    def value(i):
        head = b"%d:%d:" % (i, latest[i])
        return head + b"." * (700 + i % 200 - len(head))

    for r in range(rounds):
        for j, c in enumerate(conns):
            # Each connection its own keys, so a key's writes stay in order;
            # the first round writes them all, the others mostly the hot ones.
            mine = range(j, keys, len(conns))
            picks = mine if r == 0 else [rng.choice(mine[: len(mine) // 10]) if rng.random() < 0.8 else rng.choice(mine) for _ in range(800)]
            batch = []
            for i in picks:
                latest[i] += 1
                v = value(i)
                batch.append(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
            c.send(b"".join(batch))
        for c in conns:
            expect(c, b"mn\r\n", b"MN\r\n")
    c = conns[0]
    st = stats(c)
    assert int(st["strata_overwritten_in_place"]) > 1000, st["strata_overwritten_in_place"]
    assert int(st["extstore_objects_written"]) > 1000, st["extstore_objects_written"]
    stale, missing = [], []
    for start in range(0, keys, 100):
        ks = range(start, min(start + 100, keys))
        c.send(b"get " + b" ".join(b"k%d" % i for i in ks) + b"\r\n")
        reply = read_until_end(c)
        for i in ks:
            if b"VALUE k%d " % i not in reply:
                missing.append(i)
            elif b"VALUE k%d 0 %d\r\n%s\r\n" % (i, len(value(i)), value(i)) not in reply:
                stale.append(i)
    st = stats(c)
    told = {k: v for k, v in st.items() if any(w in k for w in ("flash", "extstore", "memory", "oom", "alloc", "wait", "evict", "items", "cmd_set", "expired", "reclaimed", "copied", "in_place"))}
    assert stale == [], "%d keys read back an older value: %s (%s)" % (len(stale), stale[:10], told)
    gone = [(i, latest[i]) for i in missing[:10]]
    assert len(missing) <= int(st["evictions"]), "%d keys missing (key, writes): %s; %s" % (len(missing), gone, told)
