"""Repeated failed authentication closes the connection (strata only).

memcached lets one connection try passwords without end (215,000 a second
were measured); strata answers the fifth failure in a row and then closes,
counts it in `strata_auth_closed`, and logs it at most once a second. A
success resets the count. Both ASCII auth (-Y) and binary SASL (-S).
"""

import os

import pytest

from binlib import AUTH_ERROR, SASL_AUTH, error, request, response, sasl_plain
from binlib import expect as bexpect
from harness import Server
from wirelib import READ_TIMEOUT, read_line_or_partial, stats

pytestmark = pytest.mark.strata_only

MAX_FAILURES = 5
FAILURE = b"CLIENT_ERROR authentication failure\r\n"


def auth_cmd(data):
    return b"set auth 0 0 %d\r\n" % len(data) + data + b"\r\n"


def line(c, data):
    c.send(data)
    return read_line_or_partial(c, READ_TIMEOUT)


@pytest.fixture(scope="module")
def ascii_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("auth") / "users"
    path.write_text("alice:secret\n")
    srv = Server(args=["-Y", str(path)])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory):
    pwdb = tmp_path_factory.mktemp("sasl") / "pwdb"
    pwdb.write_text("alice:secret\n")
    srv = Server(args=["-S"], env=dict(os.environ, MEMCACHED_SASL_PWDB=str(pwdb)))
    yield srv
    srv.stop()


def admin_stats(server):
    c = server.connect(timeout=READ_TIMEOUT)
    assert line(c, auth_cmd(b"alice secret")) == b"STORED\r\n"
    out = stats(c)
    c.close()
    return out


def test_ascii_fifth_failure_is_answered_then_the_connection_closes(ascii_server):
    before = admin_stats(ascii_server)
    c = ascii_server.connect(timeout=READ_TIMEOUT)
    for _ in range(MAX_FAILURES - 1):
        assert line(c, auth_cmd(b"alice wrong")) == FAILURE
    assert not c.is_closed(timeout=0.2)
    assert line(c, auth_cmd(b"alice wrong")) == FAILURE
    assert c.is_closed()
    after = admin_stats(ascii_server)
    assert int(after["auth_errors"]) - int(before["auth_errors"]) == MAX_FAILURES
    assert int(after["strata_auth_closed"]) - int(before["strata_auth_closed"]) == 1


def test_ascii_a_success_resets_the_count(ascii_server):
    c = ascii_server.connect(timeout=READ_TIMEOUT)
    for _ in range(MAX_FAILURES - 1):
        assert line(c, auth_cmd(b"alice wrong")) == FAILURE
    assert line(c, auth_cmd(b"alice secret")) == b"STORED\r\n"
    assert line(c, b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    assert not c.is_closed(timeout=0.2)


def test_ascii_malformed_tokens_do_not_count(ascii_server):
    c = ascii_server.connect(timeout=READ_TIMEOUT)
    for _ in range(MAX_FAILURES * 2):
        assert line(c, auth_cmd(b"no-space")) == b"CLIENT_ERROR bad authentication token format\r\n"
    assert line(c, auth_cmd(b"alice secret")) == b"STORED\r\n"


def sasl_auth(password, opaque=0):
    return request(SASL_AUTH, b"PLAIN", sasl_plain("alice", password, b""), opaque=opaque)


def test_sasl_fifth_failure_is_answered_then_the_connection_closes(sasl_server):
    c = sasl_server.connect(timeout=READ_TIMEOUT)
    for i in range(MAX_FAILURES - 1):
        bexpect(c, sasl_auth("wrong", opaque=i), error(SASL_AUTH, AUTH_ERROR, opaque=i))
    assert not c.is_closed(timeout=0.2)
    bexpect(c, sasl_auth("wrong", opaque=9), error(SASL_AUTH, AUTH_ERROR, opaque=9))
    assert c.is_closed()


def test_sasl_a_success_resets_the_count(sasl_server):
    c = sasl_server.connect(timeout=READ_TIMEOUT)
    for i in range(MAX_FAILURES - 1):
        bexpect(c, sasl_auth("wrong", opaque=i), error(SASL_AUTH, AUTH_ERROR, opaque=i))
    bexpect(c, sasl_auth("secret", opaque=7), response(SASL_AUTH, value=b"Authenticated", opaque=7))
    for i in range(MAX_FAILURES - 1):
        bexpect(c, sasl_auth("wrong", opaque=i), error(SASL_AUTH, AUTH_ERROR, opaque=i))
    assert not c.is_closed(timeout=0.2)
