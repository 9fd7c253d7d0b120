"""TLS (-Z, ssl_* options, notls:, refresh_certs) with real clients:
Python's ssl with pymemcache and raw sockets, and `openssl s_client`;
every test also runs against Debian's memcached started with -Z.

Certificates are made per module with the openssl command line: a CA, a
server certificate for 127.0.0.1, a second server certificate (for
refresh_certs) and a client certificate.
"""

import os
import shutil
import socket
import ssl
import subprocess
import time

import pytest
from pymemcache.client.base import Client

from harness import free_port, target
from wirelib import stats, wait_for_tcp


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue(d, name, cn, ca="ca"):
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={cn}", cwd=d)
    (d / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=strata test CA", cwd=d)
    issue(d, "server", "first")
    issue(d, "server2", "second")
    issue(d, "client", "client")
    return d


def tls_args(certs, chain="server", extra=""):
    opts = f"ssl_chain_cert={certs / (chain + '.crt')},ssl_key={certs / (chain + '.key')}"
    return ["-Z", "-o", opts + extra]


def context(certs, client_cert=False, max_version=None):
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if client_cert:
        ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    if max_version:
        ctx.maximum_version = max_version
    return ctx


def tls_conn(port, ctx):
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def ask(s, request, until=b"\r\n"):
    s.sendall(request)
    buf = b""
    while not buf.endswith(until):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def read_to_close(s):
    """Everything the server sends until it closes the connection."""
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ssl.SSLError, ConnectionResetError):
            return got
        if not chunk:
            return got
        got += chunk


def peer_cn(s):
    subject = dict(x[0] for x in s.getpeercert()["subject"])
    return subject["commonName"]


def tls_stats(port, ctx, group=b"stats"):
    s = tls_conn(port, ctx)
    reply = ask(s, group + b"\r\n", b"END\r\n")
    s.close()
    return dict(line.split(" ", 2)[1:] for line in reply.decode().split("\r\n") if line.startswith("STAT "))


def test_pymemcache_over_tls(make_server, certs):
    srv = make_server(tls_args(certs))
    c = Client(("127.0.0.1", srv.port), tls_context=context(certs))
    assert c.set("k", b"v") is True
    assert c.get("k") == b"v"
    big = os.urandom(500_000)
    assert c.set("big", big) is True
    assert c.get("big") == big
    many = {f"m{i}": os.urandom(20_000) for i in range(100)}
    assert c.set_many(many) == []
    assert c.get_many(list(many)) == many
    assert c.version().startswith(b"1.6.")
    c.close()


def test_openssl_s_client(make_server, certs):
    srv = make_server(tls_args(certs))
    r = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}", "-quiet", "-CAfile", str(certs / "ca.crt"),
         "-verify_return_error"],
        input=b"set a 0 0 2\r\nhi\r\nget a\r\nquit\r\n", capture_output=True, timeout=10,
    )
    assert r.stdout == b"STORED\r\nVALUE a 0 2\r\nhi\r\nEND\r\n", r.stderr


def test_a_plain_client_on_a_tls_port_gets_no_reply(make_server, certs):
    srv = make_server(tls_args(certs))
    ctx = context(certs)
    before = int(tls_stats(srv.port, ctx)["ssl_handshake_errors"])
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    s.sendall(b"version\r\n")
    got = b""
    try:
        while chunk := s.recv(4096):
            got += chunk
    except ConnectionResetError:
        pass
    assert b"VERSION" not in got
    # The server goes on, and counts the failed handshake (memcached's count
    # did not always move here).
    deadline = time.monotonic() + 3
    while target() == "strata" and int(tls_stats(srv.port, ctx)["ssl_handshake_errors"]) <= before:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert tls_stats(srv.port, ctx)["ssl_handshake_errors"].isdigit()


def test_notls_listener_beside_a_tls_one(make_server, certs):
    tls_port, plain_port = free_port(), free_port()
    make_server(["-p", str(tls_port), "-l", f"127.0.0.1:{tls_port},notls:127.0.0.1:{plain_port}", *tls_args(certs)],
                listen=False, port=tls_port)
    plain = wait_for_tcp("127.0.0.1", plain_port)
    plain.send(b"set k 0 0 1\r\nv\r\n")
    assert plain.read_line() == b"STORED\r\n"
    s = tls_conn(tls_port, context(certs))
    assert ask(s, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n"


@pytest.mark.parametrize("mode", [1, 2])
def test_client_certificates(make_server, certs, mode):
    srv = make_server(tls_args(certs, extra=f",ssl_verify_mode={mode},ssl_ca_cert={certs / 'ca.crt'}"))
    with_cert = tls_conn(srv.port, context(certs, client_cert=True))
    assert ask(with_cert, b"version\r\n").startswith(b"VERSION ")
    if mode == 1:
        # Asked for, not required.
        without = tls_conn(srv.port, context(certs))
        assert ask(without, b"version\r\n").startswith(b"VERSION ")
    else:
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            without = tls_conn(srv.port, context(certs))
            # TLS 1.3 reports a refused certificate on the first read.
            if not ask(without, b"version\r\n"):
                raise ConnectionResetError("closed")


def test_min_version_tls13(make_server, certs):
    srv = make_server(tls_args(certs, extra=",ssl_min_version=3"))
    with pytest.raises(ssl.SSLError):
        tls_conn(srv.port, context(certs, max_version=ssl.TLSVersion.TLSv1_2))
    s = tls_conn(srv.port, context(certs))
    assert s.version() == "TLSv1.3"
    assert tls_stats(srv.port, context(certs), b"stats settings")["ssl_min_version"] == "tlsv1.3"


def test_refresh_certs_serves_new_connections_the_new_certificate(make_server, certs, tmp_path):
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    shutil.copy(certs / "server.crt", chain)
    shutil.copy(certs / "server.key", key)
    srv = make_server(["-Z", "-o", f"ssl_chain_cert={chain},ssl_key={key}"])
    ctx = context(certs)
    old = tls_conn(srv.port, ctx)
    assert peer_cn(old) == "first"
    shutil.copy(certs / "server2.crt", chain)
    shutil.copy(certs / "server2.key", key)
    assert ask(old, b"refresh_certs\r\n") == b"OK\r\n"
    new = tls_conn(srv.port, ctx)
    assert peer_cn(new) == "second"
    # The open connection keeps its session, and works.
    assert ask(old, b"version\r\n").startswith(b"VERSION ")
    refreshed = int(tls_stats(srv.port, ctx)["time_since_server_cert_refresh"])
    assert 0 <= refreshed <= 5
    # A file that fails to load leaves the certificates as they were.
    chain.write_text("not a certificate\n")
    assert ask(new, b"refresh_certs\r\n").startswith(b"Error loading the certificate chain")
    assert peer_cn(tls_conn(srv.port, ctx)) == "second"


def test_refresh_certs_without_tls(make_server):
    c = make_server().connect()
    c.send(b"refresh_certs\r\n")
    assert c.read_line() == b"Error TLS not enabled\r\n"


def test_settings_and_stats_name_the_tls_setup(make_server, certs):
    srv = make_server(tls_args(certs))
    ctx = context(certs)
    settings = tls_stats(srv.port, ctx, b"stats settings")
    assert settings["ssl_enabled"] == "yes"
    assert settings["ssl_chain_cert"] == str(certs / "server.crt")
    assert settings["ssl_key"] == str(certs / "server.key")
    assert (settings["ssl_verify_mode"], settings["ssl_ca_cert"]) == ("0", "NULL")
    general = tls_stats(srv.port, ctx)
    assert "ssl_handshake_errors" in general and "time_since_server_cert_refresh" in general


def test_settings_without_tls(make_server):
    assert stats(make_server().connect(), "settings")["ssl_enabled"] == "no"


def test_a_slow_tls_reader_gets_every_byte(make_server, certs):
    """Replies larger than the socket and TLS buffers, read slowly: the
    write path's would-block and resume steps, end to end."""
    srv = make_server(tls_args(certs))
    ctx = context(certs)
    c = Client(("127.0.0.1", srv.port), tls_context=ctx)
    values = {f"s{i}": os.urandom(100_000) for i in range(30)}
    # Stored before another connection asks (pymemcache's default is noreply).
    assert c.set_many(values, noreply=False) == []
    s = tls_conn(srv.port, ctx)
    s.sendall(b"get " + b" ".join(k.encode() for k in values) + b"\r\n")
    time.sleep(0.5)  # let the server fill every buffer and stop
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = s.recv(8192)
        assert chunk
        buf += chunk
    expected = b"".join(b"VALUE %s 0 %d\r\n%s\r\n" % (k.encode(), len(v), v) for k, v in values.items()) + b"END\r\n"
    assert buf == expected


@pytest.mark.strata_only
def test_unusable_tls_settings_refuse_to_start(certs):
    from wirelib import run_binary

    r = run_binary(["-p", str(free_port()), "-Z"])
    assert r.returncode != 0 and b"ssl_chain_cert" in r.stderr
    r = run_binary(["-p", str(free_port()), *tls_args(certs, extra=",ssl_verify_mode=2")])
    assert r.returncode != 0 and b"ssl_ca_cert" in r.stderr
    r = run_binary(["-p", str(free_port()), *tls_args(certs, extra=",ssl_ciphers=RC4-MD5")])
    assert r.returncode != 0 and b"ssl_ciphers" in r.stderr


def test_replies_to_requests_before_a_half_close_arrive_then_the_connection_closes(make_server, certs):
    srv = make_server(tls_args(certs))
    s = tls_conn(srv.port, context(certs))
    assert ask(s, b"set k 0 0 5\r\nhello\r\n") == b"STORED\r\n"
    s.sendall(b"get k\r\n" * 50)
    # TCP's half-close, no close_notify (SSLSocket.shutdown would drop TLS).
    socket.socket.shutdown(s, socket.SHUT_WR)
    got = read_to_close(s)
    assert got == b"VALUE k 0 5\r\nhello\r\nEND\r\n" * 50


def test_quit_over_tls(make_server, certs):
    srv = make_server(tls_args(certs))
    s = tls_conn(srv.port, context(certs))
    s.sendall(b"set k 0 0 1\r\nv\r\nget k\r\nquit\r\n")
    got = read_to_close(s)
    assert got == b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
