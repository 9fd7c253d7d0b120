"""The Rust `memcache` crate (0.19, pure Rust) over text and binary, one
test per behaviour: compat/rust/src/main.rs holds the checks, built by
`make build` into target/compat-rust. Runs against strata and, with
WIRE_TARGET=memcached, against Debian's memcached.

The crate's own quirks, the same against both servers, are in the checks'
comments: over ASCII it reports NOT_STORED as success and its `stats`
parser stops at the first line; over binary its INCR creates a missing
key at 0.
"""

import os
import subprocess

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BINARY = os.path.join(ROOT, "target", "compat-rust", "debug", "strata-compat-rust")

if not os.path.exists(BINARY):
    pytest.fail(f"{BINARY} is missing: `make build` builds it", pytrace=False)

CHECKS = subprocess.run([BINARY, "--list"], capture_output=True, check=True, text=True).stdout.split()


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("protocol", ["ascii", "binary"])
def test_memcache_crate(server, protocol, check):
    r = subprocess.run([BINARY, str(server.port), protocol, check], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, f"ok {check}\n"), r.stdout + r.stderr
