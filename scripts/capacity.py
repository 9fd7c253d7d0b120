#!/usr/bin/env python3
"""Capacity check: how many small items does the server keep within -m 64?

Writes N distinct 14-byte keys (k%013d) with 100-byte values derived from the
key, as pipelined ``set ... noreply`` over a few connections, ends each
connection with a ``version`` round-trip, then counts the retrievable keys
with multi-gets of 100 keys, checks every value returned, and reads the
server's VmRSS.

  scripts/capacity.py                    # strata: pass/fail
  scripts/capacity.py --target memcached # only prints (1.6.18 keeps ~349,000)

Exit 1 (any target) on a wrong value, an unexpected reply or a dead server;
for strata also when retrievable < --min-retrievable or RSS >= --max-rss-mib.
"""

import argparse
import hashlib
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import harness  # noqa: E402

VALUE_LEN = 100


def key_of(i):
    return b"k%013d" % i


def value_of(key):
    # 14-byte key + 86 hex digits of its hash = 100 bytes, different for every key
    return key + hashlib.blake2b(key, digest_size=43).hexdigest().encode()


class Drain(threading.Thread):
    """Reads everything a connection sends back during the noreply writes."""

    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock = sock
        self.buf = b""
        self.lines = []  # reply lines other than VERSION
        self.versions = 0
        self.cond = threading.Condition()
        self.closed = False

    def run(self):
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cond:
                    self.closed = True
                    self.cond.notify_all()
                return
            self.buf += chunk
            while b"\r\n" in self.buf:
                line, self.buf = self.buf.split(b"\r\n", 1)
                with self.cond:
                    if line.startswith(b"VERSION "):
                        self.versions += 1
                    else:
                        self.lines.append(line)
                    self.cond.notify_all()

    def wait_version(self, timeout):
        with self.cond:
            ok = self.cond.wait_for(lambda: self.versions > 0 or self.closed, timeout)
            return ok and self.versions > 0


def write_phase(port, nkeys, nconns, chunk):
    socks = [socket.create_connection(("127.0.0.1", port), timeout=120) for _ in range(nconns)]
    drains = [Drain(s) for s in socks]
    for d in drains:
        d.start()
    fmt = b"set %s 0 0 " + str(VALUE_LEN).encode() + b" noreply\r\n%s\r\n"
    ci = 0
    for start in range(0, nkeys, chunk):
        parts = []
        for i in range(start, min(start + chunk, nkeys)):
            k = key_of(i)
            parts.append(fmt % (k, value_of(k)))
        socks[ci % nconns].sendall(b"".join(parts))
        ci += 1
    for s in socks:
        s.sendall(b"version\r\n")
    ok = all(d.wait_version(300) for d in drains)
    unexpected = [line for d in drains for line in d.lines]
    for s in socks:
        s.close()
    return ok, unexpected


class Reader:
    """Buffered reply reader over a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.pos = 0

    def fill(self):
        if self.pos:
            self.buf = self.buf[self.pos:]
            self.pos = 0
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection during gets")
        self.buf += chunk


def read_phase(port, nkeys, batch, pipeline):
    """Returns (retrievable, wrong values, unexpected reply lines)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    r = Reader(sock)
    retrievable = 0
    wrong = []
    unexpected = []
    starts = list(range(0, nkeys, batch))
    for g in range(0, len(starts), pipeline):
        group = starts[g:g + pipeline]
        reqs = []
        wanted = set()
        for s in group:
            keys = [key_of(i) for i in range(s, min(s + batch, nkeys))]
            wanted.update(keys)
            reqs.append(b"get " + b" ".join(keys) + b"\r\n")
        sock.sendall(b"".join(reqs))
        ends = 0
        while ends < len(group):
            nl = r.buf.find(b"\r\n", r.pos)
            if nl < 0:
                r.fill()
                continue
            line = r.buf[r.pos:nl]
            if line == b"END":
                ends += 1
                r.pos = nl + 2
                continue
            parts = line.split()
            if len(parts) == 4 and parts[0] == b"VALUE" and parts[3].isdigit():
                key, nbytes = parts[1], int(parts[3])
                need = nl + 2 + nbytes + 2
                if len(r.buf) < need:
                    r.fill()
                    continue  # parse this line again once more bytes are in
                data = r.buf[nl + 2:nl + 2 + nbytes]
                if r.buf[nl + 2 + nbytes:need] != b"\r\n":
                    raise RuntimeError(f"value for {key!r} not followed by CRLF")
                r.pos = need
                if key not in wanted:
                    wrong.append((key, b"<not requested, or returned twice>"))
                elif parts[2] != b"0" or data != value_of(key):
                    wrong.append((key, parts[2] + b" " + data[:40]))
                else:
                    retrievable += 1
                    wanted.discard(key)
                continue
            unexpected.append(line[:100])
            r.pos = nl + 2
            if line.startswith((b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR")):
                ends += 1  # the error stands in for that batch's reply
    sock.close()
    return retrievable, wrong, unexpected


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=harness.target(), choices=["strata", "memcached"])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--memory", type=int, default=64, help="-m, MiB")
    ap.add_argument("--threads", type=int, default=2, help="-t")
    ap.add_argument("--conns", type=int, default=2, help="connections for the writes")
    ap.add_argument("--chunk", type=int, default=10_000, help="sets per send")
    ap.add_argument("--batch", type=int, default=100, help="keys per multi-get")
    ap.add_argument("--pipeline", type=int, default=20, help="multi-gets in flight")
    # -m covers the index too, so RSS stays near 64 MiB: ~498,000 items in ~70 MiB.
    ap.add_argument("--min-retrievable", type=int, default=480_000)
    ap.add_argument("--max-rss-mib", type=float, default=74.0)
    args = ap.parse_args()

    t0 = time.monotonic()
    # The production build: no test hook is needed, and its memory is what ships.
    srv = harness.Server(["-m", str(args.memory), "-t", str(args.threads)], kind=args.target, production=True)
    failures = []
    try:
        ok, set_replies = write_phase(srv.port, args.keys, args.conns, args.chunk)
        t_write = time.monotonic() - t0
        if not ok:
            failures.append("no VERSION reply after the writes")
        rss_after_write = srv.rss_bytes()
        retrievable, wrong, get_unexpected = read_phase(srv.port, args.keys, args.batch, args.pipeline)
        t_read = time.monotonic() - t0 - t_write
        rss_end = srv.rss_bytes()
        alive = srv.proc.poll() is None
        if alive:
            c = srv.connect()
            alive = c.call(b"version\r\n").startswith(b"VERSION ")
            c.close()
    finally:
        code = srv.stop()
    rss_mib = max(rss_after_write, rss_end) / (1024 * 1024)

    print(
        f"capacity: target={args.target} m={args.memory} written={args.keys} "
        f"retrievable={retrievable} rss_mib={rss_mib:.1f}"
    )
    print(
        f"capacity: rss_after_write_mib={rss_after_write / 1048576:.1f} rss_end_mib={rss_end / 1048576:.1f} "
        f"write_s={t_write:.1f} read_s={t_read:.1f} wrong={len(wrong)} "
        f"unexpected_replies={len(set_replies) + len(get_unexpected)} alive={'yes' if alive else 'no'}"
    )
    if wrong:
        failures.append(f"{len(wrong)} wrong values, e.g. {wrong[:3]}")
    if set_replies:
        failures.append(f"{len(set_replies)} replies to noreply sets, e.g. {set_replies[:3]}")
    if get_unexpected:
        failures.append(f"{len(get_unexpected)} unexpected reply lines to gets, e.g. {get_unexpected[:3]}")
    if not alive:
        failures.append(f"server not alive/answering at the end (exit code {code})")
    if args.target == "strata":
        if retrievable < args.min_retrievable:
            failures.append(f"retrievable {retrievable} < {args.min_retrievable}")
        if rss_mib >= args.max_rss_mib:
            failures.append(f"RSS {rss_mib:.1f} MiB >= {args.max_rss_mib} MiB")
    for f in failures:
        print(f"capacity: FAIL: {f}")
    if not failures:
        print("capacity: PASS" if args.target == "strata" else "capacity: ok (figures only for memcached)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
