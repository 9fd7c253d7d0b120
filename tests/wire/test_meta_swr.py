"""Stale-while-revalidate and vivify races: many connections, exactly one W."""

import re
import threading

import pytest

from wirelib import READ_TIMEOUT, cas_of, expect, meta, read_reply

CLIENTS = 16
ROUNDS = 4


@pytest.fixture
def clients(server):
    conns = [server.connect(timeout=READ_TIMEOUT) for _ in range(CLIENTS)]
    yield conns
    for c in conns:
        c.close()


def race(conns, request):
    """Send request on every connection at once; return the replies in connection order."""
    barrier = threading.Barrier(len(conns))
    replies = [None] * len(conns)
    errors = []

    def run(i):
        try:
            barrier.wait()
            replies[i] = meta(conns[i], request)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(conns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors, errors
    return replies


def split(replies, winner_re, loser_re):
    winners = [r for r in replies if re.fullmatch(winner_re, r)]
    losers = [r for r in replies if re.fullmatch(loser_re, r)]
    assert len(winners) == 1, replies
    assert len(losers) == len(replies) - 1, replies
    return winners[0], losers


def cas_in(reply):
    return int(re.search(rb" c(\d+)", reply).group(1))


# ---------------------------------------------------------------- stale via md I


@pytest.mark.parametrize("round", range(ROUNDS))
def test_stale_after_md_i_exactly_one_winner(conn, clients, round):
    key = b"stale%d" % round
    expect(conn, b"ms %s 2\r\nhi\r\n" % key, b"HD\r\n")
    expect(conn, b"md %s I\r\n" % key, b"HD\r\n")
    replies = race(clients, b"mg %s v c\r\n" % key)
    winner, losers = split(replies, rb"VA 2 c\d+ X W\r\nhi\r\n", rb"VA 2 c\d+ Z X\r\nhi\r\n")
    cas = cas_in(winner)
    assert {cas_in(r) for r in losers} == {cas}
    expect(conn, b"ms %s 3 C%d\r\nnew\r\n" % (key, cas), b"HD\r\n")
    new = cas_of(conn, key)
    expect(conn, b"mg %s v c\r\n" % key, b"VA 3 c%d\r\nnew\r\n" % new)


@pytest.mark.parametrize("round", range(ROUNDS))
def test_stale_losers_cas_is_rejected_after_winner_stores(conn, clients, round):
    key = b"late%d" % round
    expect(conn, b"ms %s 2\r\nhi\r\n" % key, b"HD\r\n")
    expect(conn, b"md %s I\r\n" % key, b"HD\r\n")
    replies = race(clients, b"mg %s c\r\n" % key)
    winner, losers = split(replies, rb"HD c\d+ X W\r\n", rb"HD c\d+ Z X\r\n")
    cas = cas_in(winner)
    expect(clients[0], b"ms %s 3 C%d\r\nwin\r\n" % (key, cas), b"HD\r\n")
    expect(clients[1], b"ms %s 4 C%d\r\nlose\r\n" % (key, cas), b"EX\r\n")
    expect(conn, b"mg %s v\r\n" % key, b"VA 3\r\nwin\r\n")


# ---------------------------------------------------------------- stale via ms I with an older CAS


@pytest.mark.parametrize("round", range(ROUNDS))
def test_stale_after_ms_i_exactly_one_winner(conn, clients, round):
    key = b"msi%d" % round
    expect(conn, b"ms %s 2\r\nv1\r\n" % key, b"HD\r\n")
    old = cas_of(conn, key)
    expect(conn, b"ms %s 2\r\nv2\r\n" % key, b"HD\r\n")
    expect(conn, b"ms %s 2 I C%d\r\nv0\r\n" % (key, old), b"HD\r\n")
    replies = race(clients, b"mg %s v c N30 R30\r\n" % key)
    winner, _ = split(replies, rb"VA 2 c\d+ X W\r\nv0\r\n", rb"VA 2 c\d+ Z X\r\nv0\r\n")
    expect(conn, b"ms %s 2 C%d\r\nv3\r\n" % (key, cas_in(winner)), b"HD\r\n")
    expect(conn, b"mg %s v\r\n" % key, b"VA 2\r\nv3\r\n")


# ---------------------------------------------------------------- vivify on miss


@pytest.mark.parametrize("round", range(ROUNDS))
def test_vivify_on_miss_exactly_one_winner(conn, clients, round):
    key = b"viv%d" % round
    replies = race(clients, b"mg %s v c N30\r\n" % key)
    winner, losers = split(replies, rb"VA 0 c\d+ W\r\n\r\n", rb"VA 0 c\d+ Z\r\n\r\n")
    cas = cas_in(winner)
    assert {cas_in(r) for r in losers} == {cas}
    expect(conn, b"ms %s 5 C%d T60\r\nvalue\r\n" % (key, cas), b"HD\r\n")
    new = cas_of(conn, key)
    expect(conn, b"mg %s v c N30\r\n" % key, b"VA 5 c%d\r\nvalue\r\n" % new)


@pytest.mark.parametrize("round", range(ROUNDS))
def test_vivify_without_value_exactly_one_winner(conn, clients, round):
    key = b"vivhd%d" % round
    replies = race(clients, b"mg %s N30 k\r\n" % key)
    split(replies, rb"HD k%s W\r\n" % key, rb"HD k%s Z\r\n" % key)


# ---------------------------------------------------------------- recache (R) on a live item


@pytest.mark.parametrize("round", range(ROUNDS))
def test_recache_exactly_one_winner(conn, clients, round):
    key = b"rc%d" % round
    expect(conn, b"ms %s 2 T100\r\nhi\r\n" % key, b"HD\r\n")
    replies = race(clients, b"mg %s v c R200\r\n" % key)
    winner, _ = split(replies, rb"VA 2 c\d+ W\r\nhi\r\n", rb"VA 2 c\d+ Z\r\nhi\r\n")
    expect(conn, b"ms %s 2 C%d T100\r\nho\r\n" % (key, cas_in(winner)), b"HD\r\n")
    expect(conn, b"mg %s v\r\n" % key, b"VA 2\r\nho\r\n")
    # the new item can be won again
    expect(conn, b"mg %s R200\r\n" % key, b"HD W\r\n")


# ---------------------------------------------------------------- stale again after recache


def test_invalidate_again_gives_a_new_single_winner(conn, clients):
    key = b"again"
    expect(conn, b"ms %s 2\r\nhi\r\n" % key, b"HD\r\n")
    for _ in range(ROUNDS):
        expect(conn, b"md %s I\r\n" % key, b"HD\r\n")
        replies = race(clients, b"mg %s v\r\n" % key)
        split(replies, rb"VA 2 X W\r\nhi\r\n", rb"VA 2 Z X\r\nhi\r\n")


def test_many_keys_in_parallel_each_have_one_winner(conn, clients):
    keys = [b"multi%d" % i for i in range(8)]
    for k in keys:
        expect(conn, b"ms %s 1\r\nx\r\n" % k, b"HD\r\n")
        expect(conn, b"md %s I\r\n" % k, b"HD\r\n")
    barrier = threading.Barrier(len(clients))
    results = [None] * len(clients)

    def run(i):
        barrier.wait()
        c = clients[i]
        c.send(b"".join(b"mg %s O%d\r\n" % (k, j) for j, k in enumerate(keys)))
        results[i] = [read_reply(c) for _ in keys]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for j in range(len(keys)):
        col = [r[j] for r in results]
        split(col, rb"HD O%d X W\r\n" % j, rb"HD O%d Z X\r\n" % j)
