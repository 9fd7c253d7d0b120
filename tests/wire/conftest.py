"""Fixtures and markers for the black-box wire tests (helpers: wirelib.py).

Every expected byte string in this suite was checked by running the test
against Debian's memcached 1.6.18 (WIRE_TARGET=memcached).
"""

import os

import pytest

pytest.register_assert_rewrite("wirelib")

from harness import Server, target  # noqa: E402
from wirelib import READ_TIMEOUT  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "memcached_only: checks memcached itself (e.g. real sleeping); skipped for strata"
    )


def pytest_collection_modifyitems(config, items):
    skip_strata_only = pytest.mark.skip(reason="strata-only behaviour (WIRE_TARGET=memcached)")
    skip_memcached_only = pytest.mark.skip(reason="memcached-only check")
    for item in items:
        if "strata_only" in item.keywords and target() == "memcached":
            item.add_marker(skip_strata_only)
        if "memcached_only" in item.keywords and target() != "memcached":
            item.add_marker(skip_memcached_only)
        one_loop = item.get_closest_marker("one_event_loop")
        if one_loop and os.environ.get("STRATA_IO") == "epoll" and target() == "strata":
            item.add_marker(pytest.mark.skip(reason="run in the default event loop's pass: " + one_loop.args[0]))
        over_flash = item.get_closest_marker("not_over_flash")
        if over_flash and os.environ.get("STRATA_FLASH") and target() == "strata":
            item.add_marker(pytest.mark.skip(reason="over the flash tier: " + over_flash.args[0]))



# ---------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def server():
    """One default server per test file."""
    srv = Server()
    yield srv
    srv.stop()


@pytest.fixture
def conn(server):
    """A fresh connection to the module's server, with the cache emptied."""
    c = server.connect(timeout=READ_TIMEOUT)
    c.send(b"flush_all\r\n")
    assert c.read_line() == b"OK\r\n"
    yield c
    c.close()


@pytest.fixture
def make_server():
    """Start extra servers (with their own args) that are stopped after the test."""
    started = []

    def make(args=(), **kw):
        srv = Server(args=list(args), **kw)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()
