"""Launch a memcached-protocol server under test and talk raw bytes to it.

Every suite (wire tests, client-library compatibility, capacity and stress
scripts) starts servers through this module so that the same test can run
against strata and, for checking that an expectation is really memcached's,
against Debian's memcached: set ``WIRE_TARGET=memcached``.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The binary the suites run: the release build with the test hooks (the
# hidden --enable-debug-clock and --debug-flash-* flags; `make test-bin`).
STRATA_BIN = os.environ.get("STRATA_BIN", os.path.join(ROOT, "target", "release", "strata-test"))
# The production build (`cargo build --release`), which has no test hooks:
# what the package ships and what load scripts and benchmarks measure.
STRATA_PROD_BIN = os.environ.get("STRATA_PROD_BIN", os.path.join(ROOT, "target", "release", "strata"))
MEMCACHED_BIN = os.environ.get("MEMCACHED_BIN", shutil.which("memcached") or "/usr/bin/memcached")


def target():
    """Which server the suites run against: 'strata' (default) or 'memcached'."""
    return os.environ.get("WIRE_TARGET", "strata")


# Ports below the kernel's ephemeral range (32768 up), so that no outgoing
# connection takes one between the check and the server's bind; each
# pytest-xdist worker ("gw0", "gw1", ...) draws from its own slice, so that
# two tests running at once never pick the same port (eight slices: a ninth
# worker would share the first's).
_PORT_LOW, _PORT_HIGH, _PORT_SLICE = 12000, 32000, 2500
_next_port = None


def free_port():
    global _next_port
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    low = _PORT_LOW + (index * _PORT_SLICE) % (_PORT_HIGH - _PORT_LOW)
    if _next_port is None:
        # Where the last run of this worker stopped is unknown: start at a
        # place that depends on the process, not at the slice's first port.
        _next_port = os.getpid() % _PORT_SLICE
    for _ in range(_PORT_SLICE):
        port = low + _next_port
        _next_port = (_next_port + 1) % _PORT_SLICE
        if _port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {low}..{low + _PORT_SLICE}")


def _port_is_free(port):
    """Free for TCP and UDP alike (servers bind both with -U)."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


class Server:
    """A server process on 127.0.0.1:<port>, stopped by PID when done.

    strata runs from STRATA_BIN, or from STRATA_PROD_BIN with `production`
    (a script that needs no test hook and measures what ships).
    """

    def __init__(self, args=(), kind=None, port=None, listen=True, env=None, production=False):
        self.kind = kind or target()
        self.port = port or free_port()
        if self.kind != "strata":
            binary = MEMCACHED_BIN
        else:
            binary = STRATA_PROD_BIN if production else STRATA_BIN
        if not os.path.exists(binary):
            hint = " (make test-bin builds it)" if binary == STRATA_BIN else ""
            raise RuntimeError(f"no server binary at {binary}{hint}")
        cmd = [binary]
        if listen:
            cmd += ["-l", "127.0.0.1", "-p", str(self.port)]
        if self.kind == "strata" and os.environ.get("STRATA_IO"):
            # Runs a suite over one I/O backend (-o io=uring|epoll).
            cmd += ["-o", "io=" + os.environ["STRATA_IO"]]
        self.flash_file = None
        if self.kind == "strata" and os.environ.get("STRATA_FLASH") and listen:
            # Runs a suite over the flash tier: every item written goes to
            # a flash file at once, so reads come from flash.
            fd, self.flash_file = tempfile.mkstemp(prefix="strata-flash-")
            os.close(fd)
            # Every read goes to the I/O threads (none is served from the
            # page cache at once), so the connections park for them.
            cmd += ["-o", f"ext_path={self.flash_file}:64M,ext_item_size=0", "--debug-flash-writes",
                    "--debug-flash-async"]
        if self.kind == "memcached":
            cmd += ["-U", "0"]
            if os.geteuid() == 0:
                cmd += ["-u", "root"]
        cmd += list(args)
        self.cmd = cmd
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        if listen:
            self._wait_ready()

    def _wait_ready(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                raise RuntimeError(
                    f"{self.cmd} exited with {self.proc.returncode}: {err.decode(errors='replace')}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"{self.cmd} did not start listening within {timeout}s")

    def connect(self, timeout=5.0):
        return Conn(socket.create_connection(("127.0.0.1", self.port), timeout=timeout))

    def pid(self):
        return self.proc.pid

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Signal the server and wait; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
        if self.flash_file and os.path.exists(self.flash_file):
            os.unlink(self.flash_file)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Conn:
    """A raw TCP connection: send bytes, read exact replies."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_line(self):
        """One reply line including its trailing \\r\\n."""
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n") + 2
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_until(self, terminator):
        """Everything up to and including the first occurrence of terminator."""
        while terminator not in self.buf:
            self._fill()
        i = self.buf.index(terminator) + len(terminator)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def call(self, data, terminator=b"\r\n"):
        """Send a request and return the reply up to terminator."""
        self.send(data)
        return self.read_until(terminator)

    def is_closed(self, timeout=2.0):
        """True once the server has closed the connection (EOF or reset)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()
