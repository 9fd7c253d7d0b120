"""Read-modify-writes (incr here) racing the writes they must not undo.

strata's incr, append and a touch's relayout plan from the item under its
bucket lock, reserve room without it and commit under it again only if the
item is unchanged (crates/store/src/write.rs, `Worker::rewrite`). An item
can change without moving: a set written over it in place
(crates/store/src/overwrite.rs), a touch written into its expiry field.
Checking only that it had not moved, a commit planned from the item before
undid both, after they were acknowledged. Each test runs an incr loop on one
connection (the other worker, with -t 2) against writes and reads on
another: a read after an acknowledged write must show it. memcached passes
both (its incr runs under the item's lock)."""

import threading

from harness import target
from wirelib import READ_TIMEOUT, meta, stats, stored


def incrementing(srv, until):
    """Sends `incr k 1` on its own connection until `until` is set; returns
    the thread and a one-item list counting the incrs answered."""
    c = srv.connect(timeout=READ_TIMEOUT)
    count = [0]

    def run():
        while not until.is_set():
            c.send(b"incr k 1\r\n")
            c.read_line()
            count[0] += 1

    t = threading.Thread(target=run)
    t.start()
    return t, count


def race(srv, rounds, one_round):
    """Runs `one_round(i)` `rounds` times while another connection
    increments k; returns the rounds' failures and the incrs answered."""
    done = threading.Event()
    t, incrs = incrementing(srv, done)
    failed = []
    try:
        for i in range(rounds):
            bad = one_round(i)
            if bad:
                failed.append(bad)
    finally:
        done.set()
        t.join()
    return failed, incrs[0]


def test_an_incr_never_undoes_a_set_written_over_in_place(make_server):
    """Sets of 8-digit values whose first two digits change with each set,
    each read back at once; incr changes only the last six. Before the
    commit checked the CAS, 4 of 30,000 sets read back their predecessor
    plus one."""
    srv = make_server(["-t", "2"])
    c = srv.connect(timeout=READ_TIMEOUT)
    stored(c, "k", b"10000000")

    def one_round(i):
        v = b"%02d000000" % (10 + i % 80)
        c.send(b"set k 0 0 8\r\n%s\r\nget k\r\n" % v)
        assert c.read_line() == b"STORED\r\n"
        head = c.read_line()
        got = c.read_exact(int(head.split()[3]) + 2)[:-2]
        assert c.read_line() == b"END\r\n"
        return None if got[:2] == v[:2] else (v, got)

    undone, incrs = race(srv, 60_000, one_round)
    assert undone == [], "%d sets undone by an incr: %s" % (len(undone), undone[:5])
    assert incrs > 10_000, incrs
    if target() == "strata":
        # Same length and layout from the second set on: written in place.
        assert int(stats(c)["strata_overwritten_in_place"]) > 1_000
    c.close()


def test_an_incr_never_undoes_a_touch(make_server):
    """Touches alternating between two TTLs, each read back at once with
    `mg k t`. The item has an expiry field, so each touch is written into it
    in place. Before the commit compared the item's fields, an incr planned
    before a touch wrote the old expiry back (11-40 of 60,000 touches)."""
    srv = make_server(["-t", "2"])
    c = srv.connect(timeout=READ_TIMEOUT)
    c.send(b"set k 0 1000 2\r\n10\r\n")
    assert c.read_line() == b"STORED\r\n"

    def one_round(i):
        ttl = 1000 + 1000 * (i % 2)
        c.send(b"touch k %d\r\n" % ttl)
        assert c.read_line() == b"TOUCHED\r\n"
        got = int(meta(c, b"mg k t\r\n").split()[1][1:])
        # The clock may tick between the touch and the read.
        return None if ttl - 2 <= got <= ttl else (ttl, got)

    undone, incrs = race(srv, 60_000, one_round)
    assert undone == [], "%d touches undone by an incr: %s" % (len(undone), undone[:5])
    assert incrs > 10_000, incrs
    c.close()
