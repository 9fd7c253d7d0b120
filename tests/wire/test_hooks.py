"""The test hooks (the cargo feature test-hooks; docs/design.md, "Test
hooks") are only in the test build: the production build
(target/release/strata, what the package ships) refuses their hidden flags
as clap refuses any unknown flag, and answers their commands as unknown
ones; the build the suites run (STRATA_BIN, `make test-bin`) has them."""

import os
import subprocess

import pytest

from harness import STRATA_BIN, STRATA_PROD_BIN, Server
from wirelib import READ_TIMEOUT, assert_in_sync, expect

pytestmark = pytest.mark.strata_only

production = pytest.mark.skipif(
    not os.path.exists(STRATA_PROD_BIN), reason=f"no production build at {STRATA_PROD_BIN} (cargo build --release)"
)

HOOK_FLAGS = [
    ["--enable-debug-clock"],
    ["--debug-flash-writes"],
    ["--debug-flash-async"],
    ["--debug-flash-read-delay", "5"],
]


@production
@pytest.mark.parametrize("flags", HOOK_FLAGS, ids=lambda f: f[0])
def test_the_production_build_refuses_the_hook_flags(flags):
    r = subprocess.run([STRATA_PROD_BIN, "-p", "0", *flags], capture_output=True, timeout=10)
    assert r.returncode == 2, r.stderr
    assert f"unexpected argument '{flags[0]}'".encode() in r.stderr, r.stderr


@production
def test_the_production_build_has_no_debug_commands(monkeypatch):
    # Over the flash tier the harness would pass --debug-flash-writes, which
    # this build refuses: the server runs without flash.
    monkeypatch.delenv("STRATA_FLASH", raising=False)
    with Server(production=True) as srv:
        c = srv.connect(timeout=READ_TIMEOUT)
        expect(c, b"debug_panic\r\n", b"ERROR\r\n")
        expect(c, b"debug_advance_clock 5\r\n", b"ERROR\r\n")
        assert_in_sync(c)


@pytest.mark.parametrize("flags", HOOK_FLAGS, ids=lambda f: f[0])
def test_the_test_build_accepts_the_hook_flags(flags):
    # Parsed before --version exits (the flash ones need -o ext_path only
    # once the configuration is built).
    r = subprocess.run([STRATA_BIN, *flags, "--version"], capture_output=True, timeout=10)
    assert r.returncode == 0, r.stderr


def test_the_test_build_has_the_debug_commands_when_asked(make_server):
    c = make_server(["--enable-debug-clock"]).connect(timeout=READ_TIMEOUT)
    expect(c, b"debug_advance_clock 5\r\n", b"OK\r\n")
    assert_in_sync(c)
