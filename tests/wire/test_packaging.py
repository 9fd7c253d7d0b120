"""Packaging: the systemd units (dist/strata.service and the Debian
package's dist/debian/strata.service, checked with systemd-analyze), the
notifications they rely on (Type=notify: READY=1 once listening, more time
asked for while a snapshot loads, STOPPING=1 at the end), the example
configuration files (dist/memcached.conf, dist/debian/strata.conf), and
the Dockerfile (built only where a docker daemon runs; its entrypoint and
health check run without one). The package itself
is built, installed and run by tests/pkg (make package).
"""

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile

import pytest

from harness import ROOT, STRATA_PROD_BIN, free_port
from wirelib import expect, stats, wait_for_tcp

pytestmark = pytest.mark.strata_only

DIST = os.path.join(ROOT, "dist")


def test_systemd_is_told_when_strata_is_ready_and_when_it_stops(make_server, tmp_path):
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    # -d as in Debian's file: under systemd it is ignored (the process
    # systemd started must stay its main process).
    srv = make_server(["-d"], env={**os.environ, "NOTIFY_SOCKET": path})
    msg = sock.recv(1024).decode()
    assert msg == f"READY=1\nMAINPID={srv.pid()}"
    expect(srv.connect(), b"version\r\n", b"VERSION " + stats(srv.connect())["version"].encode() + b"\r\n")
    srv.stop()
    assert sock.recv(1024) == b"STOPPING=1"


def test_the_abstract_socket_namespace_works_too(make_server):
    name = f"strata-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(10)
    srv = make_server(env={**os.environ, "NOTIFY_SOCKET": "@" + name})
    assert sock.recv(1024).startswith(b"READY=1\n")
    srv.stop()


def test_systemd_gets_more_time_while_the_snapshot_loads(make_server, tmp_path):
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    srv = make_server(["--snapshot-dir", str(tmp_path / "snap")], env={**os.environ, "NOTIFY_SOCKET": path})
    # At once when the load starts (then every 10 s while it lasts), and
    # READY=1 once it is done.
    assert sock.recv(1024) == b"EXTEND_TIMEOUT_USEC=30000000"
    assert sock.recv(1024).startswith(b"READY=1\n")
    srv.stop()
    # The shutdown save asks too, after STOPPING=1.
    assert [sock.recv(1024), sock.recv(1024)] == [b"STOPPING=1", b"EXTEND_TIMEOUT_USEC=30000000"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("name", ["strata.service", "debian/strata.service"])
def test_the_unit_file_verifies(tmp_path, name):
    with open(os.path.join(DIST, name)) as f:
        unit = f.read()
    assert "Type=notify" in unit
    assert "Conflicts=memcached.service" in unit.splitlines()
    # systemd-analyze checks that ExecStart's binary exists: point it at
    # the production build just made, the one the package ships.
    unit = unit.replace("/usr/local/bin/strata", STRATA_PROD_BIN).replace("/usr/bin/strata", STRATA_PROD_BIN)
    (tmp_path / "strata.service").write_text(unit)
    r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "strata.service")],
                       capture_output=True, timeout=60)
    out = (r.stdout + r.stderr).decode()
    assert r.returncode == 0, out
    assert "Unknown" not in out and "Invalid" not in out, out


def test_the_example_configuration_file_starts_a_server(make_server, tmp_path):
    with open(os.path.join(DIST, "memcached.conf")) as f:
        conf = f.read()
    # Its user and pid file need root and /run/memcached; the rest as is.
    conf = conf.replace("-u memcache", "").replace("/run/memcached/memcached.pid", str(tmp_path / "pid"))
    (tmp_path / "memcached.conf").write_text(conf)
    port = free_port()
    make_server(["--config", str(tmp_path / "memcached.conf"), "-p", str(port)], port=port, listen=False)
    c = wait_for_tcp("127.0.0.1", port)
    s = stats(c)
    assert (s["limit_maxbytes"], s["max_connections"]) == (str(64 << 20), "1024")
    assert (tmp_path / "pid").exists()


def test_the_packaged_configuration_file_starts_a_server(make_server, tmp_path):
    with open(os.path.join(DIST, "debian", "strata.conf")) as f:
        conf = f.read()
    # Its pid file and state directory are the unit's: here, temporary ones.
    assert "--snapshot-dir /var/lib/strata" in conf.splitlines()
    conf = conf.replace("/run/strata/strata.pid", str(tmp_path / "pid")).replace(
        "--snapshot-dir /var/lib/strata", f"--snapshot-dir {tmp_path}")
    (tmp_path / "strata.conf").write_text(conf)
    port = free_port()
    make_server(["--config", str(tmp_path / "strata.conf"), "-p", str(port)], port=port, listen=False)
    c = wait_for_tcp("127.0.0.1", port)
    s = stats(c)
    assert (s["limit_maxbytes"], s["max_connections"]) == (str(64 << 20), "1024")
    assert (tmp_path / "pid").exists()


@functools.lru_cache(maxsize=1)
def docker_missing():
    """Why no image can be built here, or None."""
    if shutil.which("docker") is None:
        return "no docker command"
    r = subprocess.run(["docker", "info"], capture_output=True, timeout=30)
    if r.returncode != 0:
        return "the docker command finds no daemon (docker info failed)"
    return None


@pytest.mark.skipif(docker_missing() is not None, reason=str(docker_missing()))
def test_the_docker_image_builds_and_serves():
    tag = "strata-test:latest"
    subprocess.run(["docker", "build", "-t", tag, ROOT], check=True, timeout=1800)
    port = free_port()
    run = subprocess.run(["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:11211", tag],
                         capture_output=True, check=True, timeout=60)
    cid = run.stdout.decode().strip()
    try:
        c = wait_for_tcp("127.0.0.1", port, timeout=30)
        expect(c, b"set k 0 0 1\r\nv\r\nget k\r\n", b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n")
        status = subprocess.run(["docker", "exec", cid, "cat", "/proc/1/status"], capture_output=True, timeout=30)
        assert uid_of(status.stdout.decode()) != 0, "strata runs as a non-root user"
        conf = subprocess.run(["docker", "image", "inspect", "-f", "{{.Config.StopSignal}} {{json .Config.Volumes}}",
                               tag], capture_output=True, check=True, timeout=30).stdout.decode()
        assert conf.strip() == 'SIGTERM {"/var/lib/strata":{}}', conf
        health = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", cid], capture_output=True,
                                timeout=30).stdout.decode().strip()
        assert health in ("starting", "healthy"), health
    finally:
        subprocess.run(["docker", "stop", cid], capture_output=True, timeout=60)


ENTRYPOINT = os.path.join(DIST, "docker", "entrypoint.sh")


def uid_of(status):
    """The real uid in a /proc/<pid>/status text."""
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def healthcheck():
    """The Dockerfile's HEALTHCHECK command, as its exec form lists it."""
    text = open(os.path.join(ROOT, "Dockerfile")).read().replace("\\\n", " ")
    line = next(l for l in text.splitlines() if l.startswith("HEALTHCHECK"))
    return json.loads(line[line.index("CMD") + 3:].strip())


@contextlib.contextmanager
def root_only_dir():
    """A state directory as a bind mount of a host directory looks from
    inside (owned by root, mode 0700: docker makes a missing one so), under
    a directory anyone may enter (pytest's tmp_path is root's alone)."""
    top = tempfile.mkdtemp(prefix="strata-state-")
    try:
        os.chmod(top, 0o755)
        state = os.path.join(top, "state")
        os.mkdir(state, 0o700)
        yield state
    finally:
        shutil.rmtree(top)


def start_entrypoint(state, port, mport, user="nobody", extra=()):
    env = {**os.environ, "STRATA_BIN": STRATA_PROD_BIN, "STRATA_STATE": state, "STRATA_USER": user,
           "STRATA_LISTEN": "127.0.0.1", "STRATA_METRICS": f"127.0.0.1:{mport}"}
    return subprocess.Popen(["sh", ENTRYPOINT, "-p", str(port), "-U", "0", *extra], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.skipif(os.geteuid() != 0, reason="the entrypoint starts as root, as in the image")
def test_the_container_entrypoint_takes_a_bind_mount_only_root_could_write_and_drops_root():
    # Without a docker daemon: the image's entrypoint, run as the image
    # runs it (as root), on a root-only directory, with `nobody` for the
    # image's strata user.
    with root_only_dir() as state:
        port, mport = free_port(), free_port()
        p = start_entrypoint(state, port, mport)
        try:
            c = wait_for_tcp("127.0.0.1", port)
            expect(c, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
            with open(f"/proc/{p.pid}/status") as f:
                assert uid_of(f.read()) == 65534, "strata runs as the image's user, not root"
            assert os.stat(state).st_uid == 65534, "the directory is that user's now"
            m = wait_for_tcp("127.0.0.1", mport)
            m.sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            body = b""
            while chunk := m.sock.recv(65536):
                body += chunk
            assert body.startswith(b"HTTP/1.") and b"\nmemcached_up 1" in body, body[:300]
            # The image's health check, against it and against a port
            # nobody listens on.
            hc = healthcheck()
            ok = subprocess.run(hc, env={**os.environ, "STRATA_PORT": str(port)}, timeout=10)
            assert ok.returncode == 0
            bad = subprocess.run(hc, env={**os.environ, "STRATA_PORT": str(free_port())}, timeout=10,
                                 stderr=subprocess.DEVNULL)
            assert bad.returncode != 0
        finally:
            p.send_signal(signal.SIGTERM)
            err = p.communicate(timeout=60)[1].decode(errors="replace")
        assert p.returncode == 0, err
        snap = os.path.join(state, "strata.snapshot")
        assert os.stat(snap).st_uid == 65534, "saved by strata as its user"
        # The next container on the same directory loads it.
        p = start_entrypoint(state, port, mport)
        try:
            expect(wait_for_tcp("127.0.0.1", port), b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
        finally:
            p.send_signal(signal.SIGTERM)
            p.communicate(timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a user to run the entrypoint as")
def test_the_container_entrypoint_as_another_user_runs_strata_as_that_user():
    # docker run --user: no root to drop, the directory must already be
    # writable; strata refuses one that is not (exit 73, naming it).
    with root_only_dir() as state:
        port = free_port()
        as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        env = {**os.environ, "STRATA_BIN": STRATA_PROD_BIN, "STRATA_STATE": state, "STRATA_LISTEN": "127.0.0.1",
               "STRATA_METRICS": ""}
        r = subprocess.run([*as_nobody, "sh", ENTRYPOINT, "-p", str(port), "-U", "0"], env=env,
                           capture_output=True, timeout=30)
        assert r.returncode == 73, r
        assert state.encode() in r.stderr, r.stderr
        os.chown(state, 65534, 65534)
        p = subprocess.Popen([*as_nobody, "sh", ENTRYPOINT, "-p", str(port), "-U", "0"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            expect(wait_for_tcp("127.0.0.1", port), b"version\r\n", b"VERSION ")
        finally:
            p.send_signal(signal.SIGTERM)
            p.communicate(timeout=60)
        assert p.returncode == 0
