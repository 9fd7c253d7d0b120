"""shutdown command (-A) and termination signals."""

import signal
import socket
import time

import pytest

from harness import Server
from wirelib import assert_in_sync, expect, wait_exit


def test_shutdown_without_enable_is_error(conn):
    expect(conn, b"shutdown\r\n", b"ERROR: shutdown not enabled\r\n")
    assert_in_sync(conn)


def test_shutdown_graceful_without_enable_is_error(conn):
    expect(conn, b"shutdown graceful\r\n", b"ERROR: shutdown not enabled\r\n")


def test_shutdown_with_enable_closes_connection_and_exits_zero(make_server):
    srv = make_server(["-A"])
    c = srv.connect(timeout=2.0)
    c.send(b"shutdown\r\n")
    assert c.is_closed(timeout=5.0)
    assert c.buf == b""
    assert wait_exit(srv) == 0


def test_shutdown_graceful_closes_connection_and_exits_zero(make_server):
    srv = make_server(["-A"])
    c = srv.connect(timeout=2.0)
    c.send(b"shutdown graceful\r\n")
    assert c.is_closed(timeout=5.0)
    assert c.buf == b""
    assert wait_exit(srv) == 0


@pytest.fixture(scope="module")
def enabled_server():
    srv = Server(args=["-A"])
    yield srv
    srv.stop()


@pytest.mark.parametrize("mode", [b"foo", b"noreply", b"graceful extra"])
def test_shutdown_with_invalid_mode_is_client_error(enabled_server, mode):
    c = enabled_server.connect(timeout=2.0)
    expect(c, b"shutdown " + mode + b"\r\n", b"CLIENT_ERROR invalid shutdown mode\r\n")
    assert_in_sync(c)
    assert enabled_server.proc.poll() is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_closes_connections_and_exits_zero(make_server, sig):
    srv = make_server()
    c = srv.connect(timeout=2.0)
    expect(c, b"set k 0 0 1\r\nx\r\n", b"STORED\r\n")
    srv.proc.send_signal(sig)
    assert c.is_closed(timeout=5.0)
    assert wait_exit(srv) == 0


@pytest.mark.strata_only
@pytest.mark.parametrize("how", ["command", "SIGUSR1"])
def test_a_graceful_stop_lets_clients_finish(make_server, how):
    """No new connections; idle ones close at once; one with a request
    under way gets to finish it and read its reply; then the server exits."""
    srv = make_server(["-A"])
    busy, idle, stats_conn = srv.connect(timeout=5.0), srv.connect(timeout=5.0), srv.connect(timeout=5.0)
    expect(busy, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
    assert_in_sync(idle)
    busy.send(b"set big 0 0 10\r\nabc")  # a value part way
    if how == "command":
        stats_conn.send(b"shutdown graceful\r\n")
        assert stats_conn.is_closed(timeout=5.0)
    else:
        srv.proc.send_signal(signal.SIGUSR1)
    assert idle.is_closed(timeout=5.0)
    deadline = time.monotonic() + 5
    while True:
        try:
            socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
        except OSError:
            break
        assert time.monotonic() < deadline, "still accepting"
        time.sleep(0.02)
    assert srv.proc.poll() is None, "waits for the request under way"
    expect(busy, b"defghij\r\nget big\r\n", b"STORED\r\nVALUE big 0 10\r\nabcdefghij\r\nEND\r\n")
    assert busy.is_closed(timeout=5.0)
    assert wait_exit(srv) == 0
