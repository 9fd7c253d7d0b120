"""The Debian package (scripts/build-deb.sh), installed for real.

Built from target/release/strata, checked (fields, stripped binary,
conffile), installed with dpkg -i, then run as systemd would run it: as
the user strata, with the installed configuration file (only the port
overridden), its pid file in /run/strata and its snapshot in the state
directory. A set and a get over TCP, a stop (SIGTERM saves the snapshot),
a reinstall over it as an upgrade does (the maintainer scripts' upgrade
path; an edited conffile kept), a start that loads the snapshot back, and
a purge that leaves nothing behind.

It changes the machine (a package, a system user), so it runs only where
asked: `make package` sets STRATA_PKG_TEST=1. It needs root, and refuses
to touch a machine where a strata package is already installed. What it
created it removes, the user too (a package's purge leaves its user).
"""

import grp
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time

import pytest

from harness import ROOT, free_port

pytestmark = [
    pytest.mark.skipif(not os.environ.get("STRATA_PKG_TEST"),
                       reason="installs a package on this machine: run by `make package` (STRATA_PKG_TEST=1)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="dpkg -i needs root"),
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="not a Debian system (no dpkg-deb)"),
]

CONF = "/etc/strata/strata.conf"
STATE = "/var/lib/strata"


def sh(*cmd, **kw):
    return subprocess.run(cmd, capture_output=True, check=True, timeout=120, **kw).stdout.decode()


def installed():
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "strata"], capture_output=True)
    return r.returncode == 0 and "installed" in r.stdout.decode() and "not-installed" not in r.stdout.decode()


def exists(db, name):
    try:
        db.getpwnam(name) if db is pwd else db.getgrnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="module")
def deb():
    out = sh(os.path.join(ROOT, "scripts", "build-deb.sh"), cwd=ROOT)
    path = out.split("build-deb: ", 1)[1].split(" ", 1)[0]
    return os.path.join(ROOT, path)


@pytest.fixture(scope="module")
def package(deb):
    if installed():
        pytest.skip("a strata package is installed here already: not replacing it (dpkg --purge strata to run this)")
    had_user, had_group = exists(pwd, "strata"), exists(grp, "strata")
    sh("dpkg", "-i", deb)
    try:
        yield deb
    finally:
        if installed() or os.path.exists(CONF):
            subprocess.run(["dpkg", "--purge", "strata"], capture_output=True, timeout=120)
        if not had_user and exists(pwd, "strata"):
            subprocess.run(["userdel", "strata"], capture_output=True, timeout=60)
        if not had_group and exists(grp, "strata"):
            subprocess.run(["groupdel", "strata"], capture_output=True, timeout=60)


def test_the_package_is_what_it_says(deb):
    field = lambda f: sh("dpkg-deb", "-f", deb, f).strip()  # noqa: E731
    assert field("Package") == "strata"
    assert field("Architecture") == sh("dpkg", "--print-architecture").strip()
    depends = field("Depends")
    assert "libc6 (>= " in depends and "libgcc-s1" in depends, depends
    assert not field("Conflicts")
    files = sh("dpkg-deb", "-c", deb)
    for path in ["./usr/bin/strata", "./lib/systemd/system/strata.service", "./etc/strata/strata.conf",
                 "./usr/share/doc/strata/copyright", "./usr/share/doc/strata/install.md"]:
        assert path in files, files
    # Every file root's, whoever built it (--root-owner-group).
    assert all(" root/root " in line for line in files.splitlines()), files
    conffiles = subprocess.run(["dpkg-deb", "--ctrl-tarfile", deb], capture_output=True, check=True).stdout
    assert b"./conffiles" in subprocess.run(["tar", "-t"], input=conffiles, capture_output=True).stdout


def test_the_packaged_binary_has_no_test_hooks(deb, tmp_path):
    # The production build: the test build's hidden flags are unknown to it
    # (docs/design.md, "Test hooks").
    sh("dpkg-deb", "-x", deb, str(tmp_path))
    r = subprocess.run([str(tmp_path / "usr" / "bin" / "strata"), "--debug-flash-writes", "--version"],
                       capture_output=True, timeout=10)
    assert r.returncode == 2 and b"unexpected argument '--debug-flash-writes'" in r.stderr, r.stderr


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf (binutils)")
def test_the_installed_binary_is_stripped_of_debug_info(package):
    sections = sh("readelf", "-S", "-W", "/usr/bin/strata")
    assert ".debug_line" not in sections and ".debug_info" not in sections
    # The symbol table stays: a backtrace names functions.
    assert ".symtab" in sections
    assert os.path.getsize("/usr/bin/strata") < 10 << 20


def test_installing_made_the_user_and_its_state_directory(package):
    assert "install ok installed" in sh("dpkg-query", "-W", "-f=${Status}", "strata")
    user = pwd.getpwnam("strata")
    assert user.pw_uid < 1000, "a system user"
    assert user.pw_shell == "/usr/sbin/nologin"
    st = os.stat(STATE)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (user.pw_uid, user.pw_gid, 0o750)
    assert subprocess.run(["dpkg-query", "-W", "-f=${Conffiles}", "strata"],
                          capture_output=True).stdout.decode().split()[0] == CONF


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_the_installed_unit_verifies(package):
    unit = open("/lib/systemd/system/strata.service").read()
    for line in ["Type=notify", "User=strata", "ExecStart=/usr/bin/strata --config /etc/strata/strata.conf",
                 "StateDirectory=strata", "Conflicts=memcached.service", "TimeoutStartSec=300"]:
        assert line in unit.splitlines(), line
    r = subprocess.run(["systemd-analyze", "verify", "/lib/systemd/system/strata.service"],
                       capture_output=True, timeout=60)
    out = (r.stdout + r.stderr).decode()
    assert r.returncode == 0, out
    assert "Unknown" not in out and "Invalid" not in out, out


class Installed:
    """/usr/bin/strata started as strata.service would start it, as the
    user strata; only the port differs (11211 may be memcached's)."""

    def __init__(self, port):
        # The unit's RuntimeDirectory=strata, for the packaged -P.
        os.makedirs("/run/strata", exist_ok=True)
        user = pwd.getpwnam("strata")
        os.chown("/run/strata", user.pw_uid, user.pw_gid)
        self.port = port
        self.proc = subprocess.Popen(
            ["/usr/bin/strata", "--config", CONF, "-p", str(port)],
            user="strata", group="strata", extra_groups=[], cwd="/",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"strata exited {self.proc.returncode}: {self.proc.stderr.read().decode()}")
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "the installed strata did not open its port"
                time.sleep(0.05)

    def ask(self, request, until):
        self.sock.sendall(request)
        got = b""
        while not got.endswith(until):
            chunk = self.sock.recv(65536)
            assert chunk, got
            got += chunk
        return got

    def stop(self):
        self.sock.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        err = self.proc.stderr.read().decode()
        self.proc.stdout.close()
        self.proc.stderr.close()
        assert rc == 0, err
        return err


def test_the_installed_server_serves_and_keeps_its_cache_across_an_upgrade(package):
    port = free_port()
    srv = Installed(port)
    try:
        assert srv.ask(b"set pkg:k 5 0 5\r\nhello\r\n", b"\r\n") == b"STORED\r\n"
        assert srv.ask(b"get pkg:k\r\n", b"END\r\n") == b"VALUE pkg:k 5 5\r\nhello\r\nEND\r\n"
        assert int(open("/run/strata/strata.pid").read()) == srv.proc.pid
    finally:
        log = srv.stop()
    # The stop saved the cache in the state directory, as strata's.
    snap = os.path.join(STATE, "strata.snapshot")
    assert os.stat(snap).st_uid == pwd.getpwnam("strata").pw_uid, log
    # An upgrade: the same package over it (postinst configure with the
    # old version), with the operator's edit to the conffile kept.
    with open(CONF, "a") as f:
        f.write("# edited here\n")
    sh("dpkg", "-i", "--force-confold", package)
    assert open(CONF).read().endswith("# edited here\n")
    srv = Installed(port)
    try:
        assert srv.ask(b"get pkg:k\r\n", b"END\r\n") == b"VALUE pkg:k 5 5\r\nhello\r\nEND\r\n"
    finally:
        log = srv.stop()
    assert "snapshot loaded" in log, log


def test_a_purge_leaves_nothing_behind(package):
    sh("dpkg", "--purge", "strata")
    assert not installed()
    for path in ["/usr/bin/strata", "/lib/systemd/system/strata.service", "/etc/strata", STATE, "/run/strata"]:
        assert not os.path.exists(path), path
