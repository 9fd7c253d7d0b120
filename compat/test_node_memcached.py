"""Compatibility with the npm package ``memcached`` (3rd-Eden's Node client, text protocol).

Each test runs ``node compat/node/memcached_check.js PORT CHECK`` against the
module's server; the script makes its own assertions (node:assert), prints
"ok"/"not ok" per check and exits non-zero if one failed. The package is
installed by ``make deps`` (npm ci in compat/node, pinned in
package-lock.json). The "version" check reads the server's version through
the library's ``version()``, which parses ``VERSION x.y.z`` into major,
minor and bugfix: 1.6.x for both servers.
"""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_DIR = os.path.join(ROOT, "compat", "node")
SCRIPT = os.path.join(NODE_DIR, "memcached_check.js")
NODE = shutil.which("node")

CHECKS = [
    "set-get",
    "types",
    "get-multi",
    "add-replace",
    "append-prepend",
    "incr-decr",
    "gets-cas",
    "touch",
    "delete",
    "flush",
    "large-values",
    "stats-settings",
    "version",
]

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian package nodejs)")


@pytest.fixture(scope="module", autouse=True)
def memcached_package_installed():
    if not os.path.isfile(os.path.join(NODE_DIR, "node_modules", "memcached", "package.json")):
        pytest.fail("the npm package memcached is not installed: run `make deps` (npm ci --prefix compat/node)")


def run_checks(srv, *checks, **env):
    return subprocess.run(
        [NODE, SCRIPT, str(srv.port), *checks],
        cwd=ROOT,
        env=dict(os.environ, CHECK_TIME_LIMIT="20", **env),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_script_lists_every_check():
    proc = subprocess.run([NODE, SCRIPT, "list"], capture_output=True, text=True, timeout=30)
    assert proc.stdout.split() == CHECKS


@pytest.mark.parametrize("check", CHECKS)
def test_node_memcached(server, check):
    proc = run_checks(server, check, CHECK_EXPECT_PID=str(server.pid()))
    report = f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.splitlines()[0] == f"ok 1 - {check}", report
    assert proc.returncode == 0, report


def test_a_failing_check_fails_the_run(server):
    # The script's assertions bite: a wrong expected version is a failed check.
    proc = run_checks(server, "version", "flush", CHECK_EXPECT_VERSION="1.6.0-not-this")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert lines[0].startswith("not ok 1 - version: "), proc.stdout
    assert "1.6.0-not-this" in proc.stdout
    assert lines[1] == "ok 2 - flush"
