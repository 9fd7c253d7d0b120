"""Large values received straight into the segment they are stored in
(`crates/server/src/network/conn/landing.rs`): a `set`, `add`, `replace`
or `cas` whose value still has 128 KiB or more to come when its line is
read. What a client sees must be exactly what memcached shows for the same
bytes, however the value arrives: in one write, dribbled over many event
loop turns, with a bad trailer, refused, or never finished. The strata-only
tests check that the values did land (`strata_values_landed`), that a
landing a client gives up frees its segment, that a snapshot neither
waits for nor saves a value still arriving, and that many landings at the
smallest `-m` all complete.
"""

import threading
import time

import pytest

from harness import Server
from wirelib import READ_TIMEOUT, assert_in_sync, expect, gets_cas, read_line_or_partial, stats, value_reply

BIG = 600_000
IOS = ["uring", "epoll"]


def big(n, seed=0):
    return bytes((i * 31 + seed) % 251 for i in range(n))


def dribble(c, data, pieces=8, pause=0.01):
    """Sends `data` in `pieces` writes, pausing between them: the value
    arrives over several event-loop turns."""
    step = len(data) // pieces + 1
    for i in range(0, len(data), step):
        c.send(data[i : i + step])
        time.sleep(pause)


def landed(c):
    return int(stats(c)["strata_values_landed"])


@pytest.mark.parametrize("how", ["whole", "dribbled"])
def test_sets_of_every_kind_read_back_exactly(conn, how):
    send = conn.send if how == "whole" else lambda b: dribble(conn, b)
    v1, v2, v3 = big(BIG, 1), big(BIG + 7, 2), big(300_000, 3)
    send(b"set k 5 0 %d\r\n%s\r\n" % (len(v1), v1))
    assert read_line_or_partial(conn) == b"STORED\r\n"
    expect(conn, b"get k\r\n", value_reply("k", v1, flags=5) + b"END\r\n")
    send(b"add k 0 0 %d\r\n%s\r\n" % (len(v2), v2))
    assert read_line_or_partial(conn) == b"NOT_STORED\r\n"
    send(b"replace k 6 0 %d\r\n%s\r\n" % (len(v2), v2))
    assert read_line_or_partial(conn) == b"STORED\r\n"
    cas = gets_cas(conn, "k")
    send(b"cas k 7 0 %d %d\r\n%s\r\n" % (len(v3), cas + 1, v3))
    assert read_line_or_partial(conn) == b"EXISTS\r\n"
    send(b"cas k 7 0 %d %d\r\n%s\r\n" % (len(v3), cas, v3))
    assert read_line_or_partial(conn) == b"STORED\r\n"
    send(b"cas nope 7 0 %d 1\r\n%s\r\n" % (len(v3), v3))
    assert read_line_or_partial(conn) == b"NOT_FOUND\r\n"
    send(b"replace nope 0 0 %d\r\n%s\r\n" % (len(v3), v3))
    assert read_line_or_partial(conn) == b"NOT_STORED\r\n"
    expect(conn, b"get k nope\r\n", value_reply("k", v3, flags=7) + b"END\r\n")


def test_a_bad_trailer_is_a_bad_data_chunk_and_stores_nothing(conn):
    v = big(BIG, 4)
    dribble(conn, b"set bad 0 0 %d\r\n%sXY" % (len(v), v))
    assert read_line_or_partial(conn) == b"CLIENT_ERROR bad data chunk\r\n"
    expect(conn, b"get bad\r\n", b"END\r\n")
    assert_in_sync(conn)


def test_noreply_and_pipelined_requests_after_a_landed_value(conn):
    v = big(BIG, 5)
    conn.send(b"set q 1 0 %d noreply\r\n%s\r\nget q\r\nset small 0 0 1\r\nx\r\n" % (len(v), v))
    expect(conn, b"", value_reply("q", v, flags=1) + b"END\r\nSTORED\r\n")


def test_a_set_finished_after_flush_all_is_kept(server, conn):
    v = big(BIG, 6)
    conn.send(b"set f 0 0 %d\r\n%s" % (len(v), v[:100_000]))
    other = server.connect(timeout=READ_TIMEOUT)
    other.send(b"flush_all\r\n")
    assert other.read_line() == b"OK\r\n"
    dribble(conn, v[100_000:] + b"\r\n")
    assert read_line_or_partial(conn) == b"STORED\r\n"
    expect(conn, b"get f\r\n", value_reply("f", v) + b"END\r\n")


@pytest.mark.strata_only
@pytest.mark.parametrize("io", IOS)
def test_values_land_on_both_event_loops(make_server, io):
    srv = make_server(["-m", "64", "-o", "io=" + io])
    c = srv.connect(timeout=READ_TIMEOUT)
    for i, size in enumerate([200_000, 500_000, 1_000_000 - 100]):
        v = big(size, i)
        dribble(c, b"set k%d 0 0 %d\r\n%s\r\n" % (i, size, v))
        assert read_line_or_partial(c) == b"STORED\r\n"
        expect(c, b"get k%d\r\n" % i, value_reply("k%d" % i, v) + b"END\r\n")
    assert landed(c) == 3
    # Under the threshold (the rest shorter than 128 KiB): the read buffer.
    c.send(b"set small 0 0 1000\r\n" + b"s" * 1000 + b"\r\n")
    assert read_line_or_partial(c) == b"STORED\r\n"
    assert landed(c) == 3


@pytest.mark.strata_only
@pytest.mark.parametrize("io", IOS)
def test_a_value_given_up_frees_its_segment(make_server, io):
    srv = make_server(["-m", "64", "-o", "io=" + io])
    c = srv.connect(timeout=READ_TIMEOUT)
    free = int(stats(c)["strata_segments_free"])
    quitter = srv.connect(timeout=READ_TIMEOUT)
    quitter.send(b"set gone 0 0 900000\r\n" + big(300_000))
    deadline = time.monotonic() + 10
    while int(stats(c)["strata_segments_free"]) != free - 1:
        assert time.monotonic() < deadline, "the landing took no segment"
        time.sleep(0.005)
    quitter.sock.close()
    while int(stats(c)["strata_segments_free"]) != free:
        assert time.monotonic() < deadline, "the segment of a value given up was not freed"
        time.sleep(0.005)
    expect(c, b"get gone\r\n", b"END\r\n")
    assert stats(c)["curr_items"] == "0"


@pytest.mark.strata_only
@pytest.mark.not_over_flash("a restart gets a new flash file in that run")
def test_a_snapshot_neither_waits_for_nor_saves_a_value_still_arriving(tmp_path):
    srv = Server(args=["-m", "64", "--snapshot-dir", str(tmp_path)])
    try:
        c = srv.connect(timeout=READ_TIMEOUT)
        before = big(BIG, 7)
        c.send(b"set k 0 0 %d\r\n%s\r\n" % (len(before), before))
        assert c.read_line() == b"STORED\r\n"
        slow = srv.connect(timeout=READ_TIMEOUT)
        after = big(BIG, 8)
        slow.send(b"set k 0 0 %d\r\n%s" % (len(after), after[:200_000]))
        c.send(b"snapshot\r\n")
        assert c.read_line() == b"OK\r\n"
        # Written while the value is still arriving: it does not wait.
        deadline = time.monotonic() + 10
        while (s := stats(c))["snapshot_saves"] != "1":
            assert time.monotonic() < deadline, "the snapshot waited for the client"
            time.sleep(0.005)
        assert (s["snapshot_last_result"], s["snapshot_last_items"]) == ("ok", "1")
        slow.send(after[200_000:] + b"\r\n")
        assert slow.read_line() == b"STORED\r\n"
        expect(c, b"get k\r\n", value_reply("k", after) + b"END\r\n")
        assert landed(c) == 2
    finally:
        srv.stop(sig=9)
    srv = Server(args=["-m", "64", "--snapshot-dir", str(tmp_path)])
    try:
        c = srv.connect(timeout=READ_TIMEOUT)
        expect(c, b"get k\r\n", value_reply("k", before) + b"END\r\n")
    finally:
        srv.stop()


@pytest.mark.strata_only
@pytest.mark.parametrize("io", IOS)
def test_many_landings_at_the_smallest_memory_all_complete(make_server, io):
    """Eight clients start 900 KB values at once at `-m 8` (eight 1 MiB
    segments): landings take what segments there are, the rest go through
    the read buffer; every set is answered and reads back, or was evicted."""
    srv = make_server(["-m", "8", "-o", "io=" + io])
    values = {i: big(900_000, i) for i in range(8)}
    conns = {i: srv.connect(timeout=READ_TIMEOUT) for i in values}
    for i, c in conns.items():
        c.send(b"set m%d 0 0 900000\r\n%s" % (i, values[i][:300_000]))
    replies = {}

    def finish(i):
        conns[i].send(values[i][300_000:] + b"\r\n")
        replies[i] = read_line_or_partial(conns[i])

    threads = [threading.Thread(target=finish, args=(i,)) for i in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert replies == {i: b"STORED\r\n" for i in values}
    c = srv.connect(timeout=READ_TIMEOUT)
    for i, v in values.items():
        c.send(b"get m%d\r\n" % i)
        reply = c.read_until(b"END\r\n")
        assert reply in (value_reply("m%d" % i, v) + b"END\r\n", b"END\r\n"), reply[:60]
    assert landed(c) >= 1
    assert_in_sync(c)
