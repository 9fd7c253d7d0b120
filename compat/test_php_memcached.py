"""Compatibility with php-memcached (PECL memcached 3.2 over libmemcached).

Each test runs ``php compat/php/memcached_check.php PORT PROTOCOL CHECK``
against the module's server, over the text protocol and over the binary one
(``Memcached::OPT_BINARY_PROTOCOL``); the script makes its own assertions,
prints "ok"/"not ok" per check and exits non-zero if one failed. PHP and the
extension are Debian's packages php-cli and php-memcached (``make deps``).

``getAllKeys()`` is libmemcached's key dump: ``stats cachedump <class> 0``
for every slab class, over text only (over binary it answers
RES_NOT_SUPPORTED without asking the server).
"""

import os
import shutil
import subprocess

import pytest

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "compat", "php", "memcached_check.php")
PHP = shutil.which("php")

CHECKS = [
    "set-get",
    "types",
    "get-multi",
    "delete",
    "add-replace",
    "append-prepend",
    "increment-decrement",
    "cas",
    "touch",
    "get-all-keys",
    "large-values",
    "flush",
    "stats-version",
]


def php_has_memcached():
    if PHP is None:
        return False
    proc = subprocess.run([PHP, "-r", "exit(class_exists('Memcached') ? 0 : 1);"], capture_output=True)
    return proc.returncode == 0


pytestmark = pytest.mark.skipif(
    not php_has_memcached(), reason="php with the memcached extension is not installed (php-cli php-memcached)"
)


def run_checks(srv, protocol, *checks, **env):
    proc = subprocess.run(
        [PHP, SCRIPT, str(srv.port), protocol, *checks],
        cwd=ROOT,
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc


def test_the_script_lists_every_check():
    proc = subprocess.run([PHP, SCRIPT, "list"], capture_output=True, text=True, timeout=30)
    assert proc.stdout.split() == CHECKS


@pytest.mark.parametrize("protocol", ["text", "binary"])
@pytest.mark.parametrize("check", CHECKS)
def test_php_memcached(server, protocol, check):
    if check == "get-all-keys" and protocol == "text" and os.environ.get("STRATA_FLASH") and harness.target() == "strata":
        pytest.skip("over the flash tier: stats cachedump lists items in memory only")
    proc = run_checks(server, protocol, check, CHECK_EXPECT_PID=str(server.pid()))
    report = f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.splitlines()[0] == f"ok 1 - {check}", report
    assert proc.returncode == 0, report
    # No PHP warnings or notices.
    assert proc.stderr == "", report


def test_a_failing_check_fails_the_run(server):
    # The script's assertions bite: a wrong expected version is a failed check.
    proc = run_checks(server, "text", "stats-version", "flush", CHECK_EXPECT_VERSION="0.0.0-not-this")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("not ok 1 - stats-version: expected version: got "), proc.stdout
    assert lines[0].endswith(', want "0.0.0-not-this"'), proc.stdout
    assert lines[1] == "ok 2 - flush"
