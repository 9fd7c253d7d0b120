"""Fixtures for the client-library compatibility suites.

Servers are started through ``harness.Server`` (strata by default, Debian's
memcached with ``WIRE_TARGET=memcached``), one per test module unless a test
needs special options.
"""

import pytest

import harness
from compat_util import make_client


@pytest.fixture(scope="module")
def server():
    srv = harness.Server()
    yield srv
    alive = srv.proc.poll() is None
    srv.stop()
    assert alive, f"server exited during the tests with code {srv.proc.returncode}"


@pytest.fixture(scope="module")
def server_address(server):
    return ("127.0.0.1", server.port)


@pytest.fixture
def client(server, server_address):
    """A plain Client (replies awaited) on an empty cache."""
    c = make_client(server_address)
    assert c.flush_all() is True
    yield c
    c.close()
