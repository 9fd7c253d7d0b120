"""Compatibility with the Java clients spymemcached 2.12.3 and xmemcached 2.4.8.

``make deps`` copies the jars from Maven Central into compat/java/lib
(``mvn dependency:copy-dependencies`` on compat/java/pom.xml). The module
compiles compat/java/SpymemcachedCheck.java and XmemcachedCheck.java once,
then runs each client once per protocol (text, binary) with every check, so
a JVM starts four times; each check's "ok"/"not ok" line is then one test.
The Java programs make their own assertions.
"""

import os
import shutil
import subprocess

import pytest

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAVA_DIR = os.path.join(ROOT, "compat", "java")
LIB = os.path.join(JAVA_DIR, "lib")
JAVA = shutil.which("java")
JAVAC = shutil.which("javac")

CHECKS = {
    "SpymemcachedCheck": [
        "set-get", "types", "get-bulk", "add-replace", "append-prepend", "incr-decr",
        "gets-cas", "touch", "delete", "large-values", "flush", "stats-version",
    ],
    "XmemcachedCheck": [
        "set-get", "types", "get-multi", "add-replace", "append-prepend", "incr-decr",
        "gets-cas", "touch", "delete", "large-values", "flush", "key-iterator", "stats-version",
    ],
}
PROTOCOLS = ["text", "binary"]

# Over strata's flash tier (STRATA_FLASH=1: every item goes to flash at once)
# "stats cachedump" lists only the items in memory, so xmemcached's key
# iterator finds nothing there.
OVER_FLASH = bool(os.environ.get("STRATA_FLASH")) and harness.target() == "strata"


def checks_for(main, protocol):
    return [c for c in CHECKS[main] if not (OVER_FLASH and c == "key-iterator" and protocol == "text")]

pytestmark = pytest.mark.skipif(
    JAVA is None or JAVAC is None, reason="no JDK (Debian package default-jdk-headless)"
)


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    jars = [f for f in os.listdir(LIB)] if os.path.isdir(LIB) else []
    if not any(j.startswith("spymemcached-") for j in jars) or not any(j.startswith("xmemcached-") for j in jars):
        pytest.fail("the Java clients are not in compat/java/lib: run `make deps`")
    out = tmp_path_factory.mktemp("java-classes")
    sources = [os.path.join(JAVA_DIR, f"{name}.java") for name in CHECKS]
    proc = subprocess.run(
        [JAVAC, "-nowarn", "-d", str(out), "-cp", os.path.join(LIB, "*"), *sources],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return str(out)


def run_java(classes, main, *args, **env):
    return subprocess.run(
        [JAVA, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", f"{classes}:{os.path.join(LIB, '*')}", main, *args],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def results(classes, server):
    """(client, protocol) -> (process, {check: its line}), each run once."""
    cache = {}

    def get(main, protocol):
        if (main, protocol) not in cache:
            proc = run_java(classes, main, str(server.port), protocol, *checks_for(main, protocol),
                            CHECK_EXPECT_PID=str(server.pid()))
            lines = {}
            for line in proc.stdout.splitlines():
                if line.startswith(("ok ", "not ok ")):
                    name = line.split(" - ", 1)[1].split(":", 1)[0]
                    lines[name] = line
            cache[main, protocol] = (proc, lines)
        return cache[main, protocol]

    return get


@pytest.mark.parametrize("main", list(CHECKS))
def test_the_program_lists_every_check(classes, main):
    proc = run_java(classes, main, "list")
    assert proc.stdout.split() == CHECKS[main]


@pytest.mark.parametrize(
    "main,protocol,check",
    [(m, p, c) for m in CHECKS for p in PROTOCOLS for c in CHECKS[m]],
)
def test_java_client(results, main, protocol, check):
    if check not in checks_for(main, protocol):
        pytest.skip("over the flash tier: stats cachedump lists items in memory only")
    proc, lines = results(main, protocol)
    report = f"exit {proc.returncode}\n{proc.stdout}{proc.stderr[-3000:]}"
    i = checks_for(main, protocol).index(check) + 1
    assert lines.get(check) == f"ok {i} - {check}", report


@pytest.mark.parametrize("main,protocol", [(m, p) for m in CHECKS for p in PROTOCOLS])
def test_java_client_run_passed(results, main, protocol):
    proc, lines = results(main, protocol)
    n = len(checks_for(main, protocol))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert f"# {n}/{n} checks passed" in proc.stdout


def test_a_failing_check_fails_the_run(classes, server):
    # The programs' assertions bite: a wrong pid is a failed check.
    proc = run_java(classes, "SpymemcachedCheck", str(server.port), "text", "stats-version", "flush",
                    CHECK_EXPECT_PID="1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert lines == [f'not ok 1 - stats-version: pid: got "{server.pid()}", want "1"', "ok 2 - flush"]
