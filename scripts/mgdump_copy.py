#!/usr/bin/env python3
"""Copy every item of one memcached-compatible server to another.

The key list comes from ``lru_crawler mgdump all`` (strata, memcached 1.6.28
and later): one ready-to-send ``mg <key>`` line per item, ``b`` appended for
a base64 key, ended by ``EN``. Each line gets the flags that return what a
copy needs (``k f t v``, ``q`` so a key gone since the dump answers nothing)
and goes to the source in batches; each ``VA`` reply becomes an ``ms`` with
the same client flags and remaining time to live on the destination. Keys
written to the source meanwhile may or may not be copied; none is copied
wrong.

    scripts/mgdump_copy.py SRC_HOST:PORT DST_HOST:PORT [--batch 500] [--quiet]

A copy of millions of keys takes minutes: about once a second (--every)
it prints to standard error how far it is (keys listed, then keys copied
of those listed and the rate); --quiet prints only the summary at the end.

Standard library only, so it runs where the servers run.
"""

import argparse
import socket
import sys
import time


def connect(addr):
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data


class Progress:
    """A line on standard error at most every ``every`` seconds (never with
    ``every=None``)."""

    def __init__(self, every):
        self.every, self.started = every, time.monotonic()
        self.last = self.started

    def due(self):
        if self.every is None:
            return False
        now = time.monotonic()
        if now - self.last < self.every:
            return False
        self.last = now
        return True

    def rate(self, n):
        return n / max(time.monotonic() - self.started, 1e-3)

    def say(self, msg):
        print(msg, file=sys.stderr, flush=True)


def dump_keys(addr, progress=None):
    """The mgdump lines (``mg <key>`` or ``mg <base64> b``), as sent."""
    progress = progress or Progress(None)
    sock = connect(addr)
    sock.sendall(b"lru_crawler mgdump all\r\n")
    r, lines = Reader(sock), []
    while (line := r.line()) != b"EN":
        if not line.startswith(b"mg "):
            raise RuntimeError(f"{addr}: mgdump answered {line!r}")
        lines.append(line)
        # Checked every thousand keys: the clock costs more than a line.
        if len(lines) % 1000 == 0 and progress.due():
            progress.say(f"listing keys: {len(lines)} so far")
    sock.close()
    return lines


def to_set(header, value):
    """``ms`` for a ``VA <len> k<key> [b] f<flags> t<ttl>`` reply."""
    tokens = header.split()
    key, flags, ttl, b64 = None, b"0", b"-1", False
    for t in tokens[2:]:
        if t[:1] == b"k":
            key = t[1:]
        elif t == b"b":
            b64 = True
        elif t[:1] == b"f":
            flags = t[1:]
        elif t[:1] == b"t":
            ttl = t[1:]
    # mg's t is -1 for "never expires"; ms's T0 says the same.
    exp = b"0" if ttl == b"-1" else ttl
    opts = b" b" if b64 else b""
    return b"ms %s %d%s F%s T%s q\r\n%s\r\n" % (key, len(value), opts, flags, exp, value)


def copy(src_addr, dst_addr, batch=500, every=None):
    keys = dump_keys(src_addr, Progress(every))
    progress = Progress(every)
    src, dst = connect(src_addr), connect(dst_addr)
    sr, dr = Reader(src), Reader(dst)
    copied = 0
    for start in range(0, len(keys), batch):
        part = keys[start : start + batch]
        src.sendall(b"".join(line + b" k f t v q\r\n" for line in part) + b"mn\r\n")
        sets = []
        while (header := sr.line()) != b"MN":
            if not header.startswith(b"VA "):
                raise RuntimeError(f"{src_addr}: mg answered {header!r}")
            sets.append(to_set(header, sr.exact(int(header.split()[1]))))
        dst.sendall(b"".join(sets) + b"mn\r\n")
        # ms with q answers only a failure; anything before MN is one.
        if (reply := dr.line()) != b"MN":
            raise RuntimeError(f"{dst_addr}: ms answered {reply!r}")
        copied += len(sets)
        if progress.due():
            done = start + len(part)
            progress.say(
                f"{done}/{len(keys)} keys copied ({100 * done // len(keys)}%), {progress.rate(done):.0f} keys/s"
            )
    return len(keys), copied


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--batch", type=int, default=500, help="keys per round trip")
    ap.add_argument("--every", type=float, default=1.0, help="seconds between progress lines")
    ap.add_argument("--quiet", action="store_true", help="no progress lines, only the summary")
    a = ap.parse_args()
    listed, copied = copy(a.src, a.dst, a.batch, None if a.quiet else a.every)
    print(f"{listed} keys listed, {copied} items copied", file=sys.stderr)


if __name__ == "__main__":
    main()
