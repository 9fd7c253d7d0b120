"""Compatibility with memjs, Node's binary-protocol client (compat/node).

Each test starts a server through harness and runs ``node
compat/node/memjs_check.js`` against it; the script makes its own assertions
(node:assert), prints one "ok"/"not ok" line per check and exits non-zero if
any failed. memjs is installed by ``make deps`` (npm ci in compat/node).

SASL servers get their users as in test_bmemcached: a ``user:password`` file
in MEMCACHED_SASL_PWDB for strata, a sasldb plus SASL_CONF_PATH for Debian's
memcached.
"""

import os
import shutil
import subprocess

import pytest

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_DIR = os.path.join(ROOT, "compat", "node")
SCRIPT = os.path.join(NODE_DIR, "memjs_check.js")
NODE = shutil.which("node")
USERS = {"alice": "secret", "bob": "hunter2"}
AUTH_FAILED = "Memcached server authentication failed!"

# The checks memjs_check.js runs in each mode, in order.
OK_CHECKS = [
    "set-get",
    "binary-values-and-keys",
    "large-values",
    "key-too-long",
    "multi-get",
    "add",
    "replace",
    "delete",
    "increment-decrement",
    "append-prepend",
    "expiry-and-touch",
    "flush",
    "stats",
    "reset-stats",
    "version",
    "quit-and-reconnect",
]
AUTH_FAILURE_CHECKS = ["get-refused", "set-refused", "increment-refused", "delete-refused", "flush-refused"]

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian package nodejs)")


@pytest.fixture(scope="module", autouse=True)
def memjs_installed():
    if not os.path.isfile(os.path.join(NODE_DIR, "node_modules", "memjs", "package.json")):
        pytest.fail("memjs is not installed: run `make deps` (npm ci --prefix compat/node)")


def sasl_env(directory, kind, users=USERS):
    """Environment giving a server started with -S the users."""
    pwdb = directory / "pwdb"
    pwdb.write_text("".join(f"{u}:{p}\n" for u, p in users.items()))
    env = dict(os.environ, MEMCACHED_SASL_PWDB=str(pwdb))
    if kind == "memcached":
        saslpasswd2 = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"
        if not os.path.exists(saslpasswd2):
            pytest.skip("memcached's SASL needs saslpasswd2 (Debian package sasl2-bin)")
        sasldb = directory / "sasldb2"
        for user, password in users.items():
            subprocess.run(
                [saslpasswd2, "-p", "-c", "-a", "memcached", "-f", str(sasldb), user],
                input=password.encode(),
                check=True,
                capture_output=True,
            )
        (directory / "memcached.conf").write_text(f"mech_list: plain\nsasldb_path: {sasldb}\n")
        env["SASL_CONF_PATH"] = str(directory)
    return env


def run_memjs(srv, user=None, password=None, expect="ok", checks=None, **extra_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMJS_", "MEMCACHE"))}
    env.update(MEMJS_SERVER=f"127.0.0.1:{srv.port}", MEMJS_EXPECT=expect, MEMJS_TIME_LIMIT="20")
    if user is not None:
        env.update(MEMJS_USER=user, MEMJS_PASS=password)
    if checks:
        env["MEMJS_CHECKS"] = ",".join(checks)
    env.update(extra_env)
    proc = subprocess.run(
        [NODE, SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    return proc


def assert_all_ok(proc, names):
    report = f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert lines == [f"ok {i} - {name}" for i, name in enumerate(names, 1)], report
    assert proc.returncode == 0, report
    assert proc.stdout.splitlines()[-1].startswith(f"# {len(names)}/{len(names)} checks passed"), report


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory):
    srv = harness.Server(args=["-S"], env=sasl_env(tmp_path_factory.mktemp("sasl"), harness.target()))
    yield srv
    alive = srv.proc.poll() is None
    srv.stop()
    assert alive, f"SASL server exited during the tests with code {srv.proc.returncode}"


def test_memjs_commands(server):
    proc = run_memjs(server, MEMJS_EXPECT_PID=str(server.pid()))
    assert_all_ok(proc, OK_CHECKS)


def test_memjs_failing_check_fails_the_run(server):
    # The script's assertions bite: a wrong expected version is a failed check
    # and a non-zero exit.
    proc = run_memjs(server, checks=["version"], MEMJS_EXPECT_VERSION="0.0.0-not-this")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].startswith("not ok 1 - version: "), proc.stdout
    assert "0.0.0-not-this" in proc.stdout


def test_memjs_sasl_correct_credentials(sasl_server):
    proc = run_memjs(sasl_server, "alice", "secret", MEMJS_EXPECT_PID=str(sasl_server.pid()))
    assert_all_ok(proc, OK_CHECKS)


def test_memjs_sasl_second_user(sasl_server):
    checks = ["set-get", "multi-get", "increment-decrement", "flush", "version"]
    assert_all_ok(run_memjs(sasl_server, "bob", "hunter2", checks=checks), checks)


@pytest.mark.parametrize(
    "user,password",
    [("alice", "wrong"), ("alice", "hunter2"), ("mallory", "secret")],
    ids=["wrong-password", "other-users-password", "unknown-user"],
)
def test_memjs_sasl_wrong_credentials(sasl_server, user, password):
    # SASL_AUTH is answered with AUTH_ERROR (0x20): memjs fails every command
    # with its "authentication failed" error; VERSION too, as memjs never gets
    # past SASL on the connection.
    proc = run_memjs(sasl_server, user, password, expect="auth-failure")
    assert_all_ok(proc, AUTH_FAILURE_CHECKS + ["version-refused"])


def test_memjs_sasl_wrong_password_fails_normal_checks(sasl_server):
    proc = run_memjs(sasl_server, "alice", "wrong", checks=["set-get", "stats"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    # The first request of each check is the flush the script starts it with.
    assert lines == [
        f"not ok 1 - set-get: {AUTH_FAILED!r}".replace("'", '"'),
        f"not ok 2 - stats: {AUTH_FAILED!r}".replace("'", '"'),
    ], proc.stdout


def test_memjs_sasl_no_credentials(sasl_server):
    # No SASL at all: each command is answered AUTH_ERROR (memjs reports the
    # same error); VERSION is served without authentication.
    proc = run_memjs(sasl_server, expect="auth-failure")
    assert_all_ok(proc, AUTH_FAILURE_CHECKS + ["version-allowed-unauthenticated"])


def test_memjs_credentials_against_server_without_sasl(server):
    # memjs starts with SASL_LIST_MECHS whenever it has credentials; a server
    # without -S answers UNKNOWN_COMMAND to it and to SASL_AUTH, and memjs
    # carries on unauthenticated.
    checks = ["set-get", "multi-get", "stats", "version"]
    assert_all_ok(run_memjs(server, "alice", "secret", checks=checks), checks)
