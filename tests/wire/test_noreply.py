"""noreply: the command runs, nothing is sent back; the next reply is the next command's."""

import pytest

from wirelib import assert_in_sync, expect, gets_cas, stored


def check(conn, request, then=b"get k\r\n", reply=b"END\r\n"):
    expect(conn, request + then, reply)


SUCCESSES = [
    ("set", None, b"set k 5 0 2 noreply\r\nhi\r\n", b"VALUE k 5 2\r\nhi\r\nEND\r\n"),
    ("add", None, b"add k 5 0 2 noreply\r\nhi\r\n", b"VALUE k 5 2\r\nhi\r\nEND\r\n"),
    ("replace", b"old", b"replace k 5 0 2 noreply\r\nhi\r\n", b"VALUE k 5 2\r\nhi\r\nEND\r\n"),
    ("append", b"old", b"append k 0 0 2 noreply\r\nhi\r\n", b"VALUE k 0 5\r\noldhi\r\nEND\r\n"),
    ("prepend", b"old", b"prepend k 0 0 2 noreply\r\nhi\r\n", b"VALUE k 0 5\r\nhiold\r\nEND\r\n"),
    ("delete", b"old", b"delete k noreply\r\n", b"END\r\n"),
    ("incr", b"10", b"incr k 5 noreply\r\n", b"VALUE k 0 2\r\n15\r\nEND\r\n"),
    ("decr", b"10", b"decr k 5 noreply\r\n", b"VALUE k 0 2\r\n5 \r\nEND\r\n"),
    ("touch", b"old", b"touch k 100 noreply\r\n", b"VALUE k 0 3\r\nold\r\nEND\r\n"),
    ("touch-expire", b"old", b"touch k -1 noreply\r\n", b"END\r\n"),
    ("flush_all", b"old", b"flush_all noreply\r\n", b"END\r\n"),
    ("flush_all-0", b"old", b"flush_all 0 noreply\r\n", b"END\r\n"),
    ("verbosity", b"old", b"verbosity 0 noreply\r\n", b"VALUE k 0 3\r\nold\r\nEND\r\n"),
]


@pytest.mark.parametrize("initial,request_,reply", [s[1:] for s in SUCCESSES], ids=[s[0] for s in SUCCESSES])
def test_noreply_success_is_silent(conn, initial, request_, reply):
    if initial is not None:
        stored(conn, "k", initial)
    check(conn, request_, reply=reply)


def test_cas_noreply_success_is_silent(conn):
    stored(conn, "k", b"old")
    cas = gets_cas(conn, "k")
    check(conn, b"cas k 0 0 2 %d noreply\r\nhi\r\n" % cas, reply=b"VALUE k 0 2\r\nhi\r\nEND\r\n")


FAILURES = [
    ("add-not-stored", b"add k 0 0 2 noreply\r\nhi\r\n"),
    ("replace-not-stored", b"replace nokey 0 0 2 noreply\r\nhi\r\n"),
    ("append-not-stored", b"append nokey 0 0 2 noreply\r\nhi\r\n"),
    ("prepend-not-stored", b"prepend nokey 0 0 2 noreply\r\nhi\r\n"),
    ("cas-exists", b"cas k 0 0 2 999999 noreply\r\nhi\r\n"),
    ("cas-not-found", b"cas nokey 0 0 2 1 noreply\r\nhi\r\n"),
    ("delete-not-found", b"delete nokey noreply\r\n"),
    ("incr-not-found", b"incr nokey 1 noreply\r\n"),
    ("decr-not-found", b"decr nokey 1 noreply\r\n"),
    ("touch-not-found", b"touch nokey 1 noreply\r\n"),
    ("incr-non-numeric", b"incr k 1 noreply\r\n"),
    ("incr-bad-delta", b"incr k abc noreply\r\n"),
    ("decr-bad-delta", b"decr k -1 noreply\r\n"),
    ("touch-bad-exptime", b"touch k abc noreply\r\n"),
    ("delete-bad-time", b"delete k 5 noreply\r\n"),
    ("flush_all-bad-delay", b"flush_all abc noreply\r\n"),
    ("verbosity-bad-level", b"verbosity abc noreply\r\n"),
]


@pytest.mark.parametrize("request_", [f[1] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_noreply_failure_is_silent_and_changes_nothing(conn, request_):
    stored(conn, "k", b"old")
    check(conn, request_, reply=b"VALUE k 0 3\r\nold\r\nEND\r\n")


def test_noreply_bad_length_is_silent(conn):
    conn.send(b"set k 0 0 -1 noreply\r\n")
    assert_in_sync(conn)


def test_noreply_bad_data_chunk_is_silent_but_leftover_is_a_command(conn):
    # the bad chunk reply is suppressed; the leftover "\n" is still an (empty) command.
    expect(conn, b"set k 0 0 1 noreply\r\nab\r\nget k\r\n", b"ERROR\r\nEND\r\n")


def test_noreply_is_not_a_key_for_get(conn):
    expect(conn, b"get k noreply\r\n", b"END\r\n")
    stored(conn, "noreply", b"x")
    expect(conn, b"get noreply\r\n", b"VALUE noreply 0 1\r\nx\r\nEND\r\n")


def test_many_noreply_commands_then_one_reply(conn):
    batch = b"".join(b"set k%d 0 0 1 noreply\r\n%d\r\n" % (i, i % 10) for i in range(200))
    batch += b"".join(b"incr k%d 1 noreply\r\n" % i for i in range(200))
    batch += b"delete k0 noreply\r\n"
    expect(conn, batch + b"get k0 k1 k199\r\n", b"VALUE k1 0 1\r\n2\r\nVALUE k199 0 2\r\n10\r\nEND\r\n")
    assert_in_sync(conn)
