"""UDP (-U PORT): memcached's frame protocol, against both servers.

Each request datagram carries an 8-byte header (request id, sequence
number, datagram count, reserved) and whole requests; each reply datagram
carries the request's id, its own sequence number and the count. How a
reply is cut into datagrams differs (memcached starts a new datagram for
each key of a multi-get), so replies are compared reassembled, and the
framing rules are checked on their own.
"""

import socket
import struct
import time

import pytest

from harness import free_port, target
from wirelib import expect, stats


@pytest.fixture
def udp(make_server):
    port = free_port()
    srv = make_server(["-U", str(port)])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.5)
    sock.connect(("127.0.0.1", port))
    yield srv, sock
    sock.close()


def request(sock, payload, rid=7, seq=0, total=1, reserved=0):
    sock.send(struct.pack(">HHHH", rid, seq, total, reserved) + payload)


def datagrams(sock, until=None):
    """Every datagram that arrives (until `until(datagrams)` holds, or a
    quiet half second)."""
    out = []
    while until is None or not until(out):
        try:
            d = sock.recv(65536)
        except socket.timeout:
            break
        assert len(d) >= 8
        out.append((struct.unpack(">HHHH", d[:8]), d[8:]))
    return out


def reply(sock, payload, rid=7):
    """Sends one request datagram; returns the reassembled reply."""
    request(sock, payload, rid)
    got = datagrams(sock, until=lambda ds: ds and ds[-1][1].endswith((b"END\r\n", b"STORED\r\n", b"\r\n")) and
                    complete(ds))
    assert all(h[0] == rid and h[3] == 0 for h, _ in got), [h for h, _ in got]
    return b"".join(body for _, body in got)


def complete(ds):
    """Each run of datagrams numbered 0..total-1 is whole."""
    seqs, i = [h for h, _ in ds], 0
    while i < len(seqs):
        total = seqs[i][2]
        if [s[1] for s in seqs[i:i + total]] != list(range(total)):
            return False
        i += total
    return True


def test_set_get_and_errors(udp):
    _, sock = udp
    assert reply(sock, b"set k 5 0 3\r\nabc\r\n") == b"STORED\r\n"
    assert reply(sock, b"get k\r\n") == b"VALUE k 5 3\r\nabc\r\nEND\r\n"
    assert reply(sock, b"get nokey\r\n") == b"END\r\n"
    assert reply(sock, b"bogus\r\n") == b"ERROR\r\n"
    assert reply(sock, b"delete k\r\n", rid=65535) == b"DELETED\r\n"
    assert reply(sock, b"mn\r\n") == b"MN\r\n"


def test_stats_conns_lists_the_udp_sockets(udp):
    """memcached lists each UDP socket (one a worker thread there, one an
    address here) as a connection reading, marked UDP:
    `STAT <fd>:UDP UDP`, `STAT <fd>:addr udp:127.0.0.1:<port>`,
    `STAT <fd>:state conn_read`, `STAT <fd>:secs_since_last_cmd <n>`."""
    srv, sock = udp
    port = sock.getpeername()[1]
    assert reply(sock, b"mn\r\n") == b"MN\r\n"
    c = srv.connect()
    c.send(b"stats conns\r\n")
    lines = c.read_until(b"END\r\n").split(b"\r\n")[:-2]
    s = stats(c, "conns")
    fds = [k.split(":")[0] for k, v in s.items() if k.endswith(":UDP")]
    assert fds, s
    for fd in fds:
        mine = [line.decode() for line in lines if line.startswith(b"STAT %s:" % fd.encode())]
        assert mine[:3] == [f"STAT {fd}:UDP UDP", f"STAT {fd}:addr udp:127.0.0.1:{port}", f"STAT {fd}:state conn_read"]
        assert len(mine) == 4 and mine[3].startswith(f"STAT {fd}:secs_since_last_cmd "), mine
        assert int(mine[3].rsplit(" ", 1)[1]) >= 0
    # The TCP listener is still listed, as before.
    assert "conn_listening" in s.values()


def test_gets_and_multi_get_reassembled(udp):
    _, sock = udp
    assert reply(sock, b"set a 0 0 1\r\n1\r\n") == b"STORED\r\n"
    assert reply(sock, b"set b 0 0 1\r\n2\r\n") == b"STORED\r\n"
    request(sock, b"get a b nokey\r\n")
    got = datagrams(sock, until=lambda ds: b"".join(b for _, b in ds).endswith(b"END\r\n"))
    assert b"".join(b for _, b in got) == b"VALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nEND\r\n"
    request(sock, b"gets a\r\n")
    got = datagrams(sock, until=lambda ds: b"".join(b for _, b in ds).endswith(b"END\r\n"))
    body = b"".join(b for _, b in got)
    assert body.startswith(b"VALUE a 0 1 ") and body.endswith(b"\r\n1\r\nEND\r\n")


def test_a_large_value_comes_in_numbered_datagrams(udp):
    srv, sock = udp
    value = bytes(range(256)) * 20  # 5120 bytes
    c = srv.connect()
    expect(c, b"set big 0 0 %d\r\n%s\r\n" % (len(value), value), b"STORED\r\n")
    request(sock, b"get big\r\n", rid=300)
    got = datagrams(sock, until=lambda ds: ds and len(ds) == ds[0][0][2])
    total = got[0][0][2]
    assert total == 4 and [h for h, _ in got] == [(300, i, 4, 0) for i in range(4)]
    assert all(len(b) + 8 <= 1400 for _, b in got)
    assert b"".join(b for _, b in got) == b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(value), value)


def test_requests_over_several_datagrams_are_dropped(udp):
    _, sock = udp
    request(sock, b"get k\r\n", total=2)
    assert datagrams(sock) == []
    # A sequence number or reserved bytes do not matter.
    assert reply(sock, b"version\r\n", rid=9).startswith(b"VERSION ")
    request(sock, b"version\r\n", rid=10, seq=3, reserved=5)
    assert datagrams(sock, until=lambda ds: len(ds) == 1)[0][0][0] == 10


def test_a_short_datagram_is_ignored_and_the_server_goes_on(udp):
    srv, sock = udp
    sock.send(b"abc")
    assert datagrams(sock) == []
    assert reply(sock, b"version\r\n").startswith(b"VERSION ")
    assert stats(srv.connect(), "settings")["udpport"] != "0"


@pytest.mark.strata_only
def test_a_reply_over_64_datagrams_becomes_an_error(make_server):
    port = free_port()
    srv = make_server(["-U", str(port), "-I", "2m"])
    c = srv.connect()
    value = b"x" * 100000
    expect(c, b"set huge 0 0 %d\r\n%s\r\n" % (len(value), value), b"STORED\r\n")
    expect(c, b"set small 0 0 2\r\nok\r\n", b"STORED\r\n")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.5)
    sock.connect(("127.0.0.1", port))
    assert reply(sock, b"get huge\r\n") == b"SERVER_ERROR reply too large for UDP\r\n"
    assert reply(sock, b"get small\r\n") == b"VALUE small 0 2\r\nok\r\nEND\r\n"


@pytest.mark.strata_only
@pytest.mark.not_over_flash("the snapshot and the durability log are tested in memory")
def test_writes_over_udp_are_in_snapshots_and_wait_for_the_durability_log(make_server, tmp_path):
    """The UDP thread seals its segments when a snapshot asks, like a
    worker, so what it wrote is in the snapshot; with --durability always
    its replies to changes come once the log has them."""
    port = free_port()
    args = ["-U", str(port), "--snapshot-dir", str(tmp_path), "-A"]
    srv = make_server(args)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.5)
    sock.connect(("127.0.0.1", port))
    assert reply(sock, b"set viaudp 0 0 3\r\nabc\r\n") == b"STORED\r\n"
    c = srv.connect()
    expect(c, b"snapshot\r\n", b"OK\r\n")
    deadline = time.monotonic() + 10
    while stats(c)["snapshot_saves"] == "0":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    srv.proc.kill()
    srv.proc.wait()
    again = make_server(["--snapshot-dir", str(tmp_path)])
    expect(again.connect(), b"get viaudp\r\n", b"VALUE viaudp 0 3\r\nabc\r\nEND\r\n")
    again.stop()
    port = free_port()
    (tmp_path / "d").mkdir()
    make_server(["-U", str(port), "--snapshot-dir", str(tmp_path / "d"), "--durability", "always"])
    sock.close()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2)
    sock.connect(("127.0.0.1", port))
    assert reply(sock, b"set durable 0 0 1\r\nv\r\n") == b"STORED\r\n"
