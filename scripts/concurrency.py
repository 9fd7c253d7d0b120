#!/usr/bin/env python3
"""Concurrency check: many connections, mixed commands, every read verified.

64 connections (threads) hammer a small key space for --secs seconds on a
server started with ``-t 2`` and default memory.

Plain keys ``c:<i>`` hold self-checking values made of '|'-separated segments:
exactly one head ``H<gen>:<crc>``, any number of prepended ``P<gen>:<crc>``
segments before it and appended ``A<gen>:<crc>`` segments after it, where
crc = crc32(key + kind + gen). A write never mixes keys, so any value read
that does not parse, whose checksums do not match the key it was read
under, or whose flags are not the key's own (flags = crc32(key) & 0xffff,
kept by append/prepend), is a wrong read. Commands on them: set, get,
multi-get, gets + cas, append, prepend, delete, touch.

Counter keys ``n:<i>`` only see set-to-number, incr, get and delete: every
read must be a decimal number (trailing spaces allowed: memcached pads), and
per connection a counter must not go down between two of its reads unless a
set/delete of that key by anyone was in flight or happened in between.

Any reply that is not a valid reply for the command (SERVER_ERROR,
CLIENT_ERROR, ERROR, garbage, timeouts, closed connections) is an error.
At the end the server must still run and answer ``version``.

  scripts/concurrency.py [--target memcached] [--secs 20] [--conns 64]
                        [--server-arg=-o --server-arg=compression=on]
"""

import argparse
import os
import random
import re
import socket
import sys
import threading
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import harness  # noqa: E402

SEGMENT = re.compile(rb"([HPA])(\d+):([0-9a-f]{8})")
NUMBER = re.compile(rb"\d{1,20}")
MAX_VALUE = 1500  # past this length a writer replaces the value with a plain set


class Wrong(Exception):
    """A read whose content cannot be right."""


class Unexpected(Exception):
    """A reply that is not a valid reply to the command sent."""


def crc(key, kind, gen):
    return b"%08x" % (zlib.crc32(key + kind + gen) & 0xFFFFFFFF)


def segment(key, kind, gen):
    g = b"%d" % gen
    return kind + g + b":" + crc(key, kind, g)


def flags_of(key):
    return zlib.crc32(key) & 0xFFFF


def check_plain(key, flags, data):
    if flags != flags_of(key):
        raise Wrong(f"{key!r}: flags {flags} != {flags_of(key)}")
    segs = data.split(b"|")
    kinds = []
    for s in segs:
        m = SEGMENT.fullmatch(s)
        if not m:
            raise Wrong(f"{key!r}: bad segment {s[:60]!r} in {data[:200]!r}")
        kind, gen, c = m.groups()
        if crc(key, kind, gen) != c:
            raise Wrong(f"{key!r}: checksum mismatch on {s!r} (value {data[:200]!r})")
        kinds.append(kind)
    if kinds.count(b"H") != 1:
        raise Wrong(f"{key!r}: {kinds.count(b'H')} heads in {data[:200]!r}")
    h = kinds.index(b"H")
    if any(k != b"P" for k in kinds[:h]) or any(k != b"A" for k in kinds[h + 1:]):
        raise Wrong(f"{key!r}: segments out of order in {data[:200]!r}")


def parse_number(key, data):
    d = data.rstrip(b" ")
    if not NUMBER.fullmatch(d) or int(d) >= 2**64:
        raise Wrong(f"{key!r}: counter value is not a number: {data[:80]!r}")
    return int(d)


class CounterWatch:
    """Per counter key: set/delete calls begun and finished, by anyone."""

    def __init__(self, keys):
        self.lock = threading.Lock()
        self.started = {k: 0 for k in keys}
        self.done = {k: 0 for k in keys}

    def begin(self, key):
        with self.lock:
            self.started[key] += 1

    def end(self, key):
        with self.lock:
            self.done[key] += 1

    def snapshot(self, key):
        with self.lock:
            return self.started[key], self.done[key]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ops = 0
        self.wrong = 0
        self.errors = 0
        self.examples = []

    def add(self, ops=0, wrong=None, error=None):
        with self.lock:
            self.ops += ops
            if wrong is not None:
                self.wrong += 1
                if len(self.examples) < 10:
                    self.examples.append(f"WRONG: {wrong}")
            if error is not None:
                self.errors += 1
                if len(self.examples) < 10:
                    self.examples.append(f"ERROR: {error}")


class Worker(threading.Thread):
    def __init__(self, wid, port, deadline, plain, counters, watch, stats, seed):
        super().__init__(daemon=True)
        self.wid = wid
        self.port = port
        self.deadline = deadline
        self.plain = plain
        self.counters = counters
        self.watch = watch
        self.stats = stats
        self.rng = random.Random(seed * 1000 + wid)
        self.gen = wid * 10**12
        self.conn = None
        self.seen = {}  # counter key -> (value, started-at-read, done-at-read)
        self.ops = 0

    # -- plumbing ---------------------------------------------------------------
    def next_gen(self):
        self.gen += 1
        return self.gen

    def line(self):
        line = self.conn.read_line()[:-2]
        if line.startswith((b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")):
            raise Unexpected(line[:200].decode(errors="replace"))
        return line

    def expect(self, cmd, allowed):
        self.conn.send(cmd)
        reply = self.line()
        if reply not in allowed:
            raise Unexpected(f"{cmd[:60]!r} -> {reply[:100]!r}")
        return reply

    def read_values(self, cmd, keys, with_cas=False):
        """Send a get-type command; return {key: (flags, data, cas)}."""
        self.conn.send(cmd)
        out = {}
        while True:
            line = self.line()
            if line == b"END":
                return out
            parts = line.split(b" ")
            if parts[0] != b"VALUE" or len(parts) != (5 if with_cas else 4):
                raise Unexpected(f"{cmd[:60]!r} -> {line[:100]!r}")
            key = parts[1]
            if not (parts[2].isdigit() and parts[3].isdigit() and (not with_cas or parts[4].isdigit())):
                raise Unexpected(f"{cmd[:60]!r} -> {line[:100]!r}")
            data = self.conn.read_exact(int(parts[3]) + 2)
            if data[-2:] != b"\r\n":
                raise Unexpected(f"{cmd[:60]!r}: value not followed by CRLF")
            if key not in keys or key in out:
                raise Wrong(f"{cmd[:60]!r} returned key {key!r} unasked or twice")
            out[key] = (int(parts[2]), data[:-2], parts[4] if with_cas else None)

    def store(self, verb, key, data, extra=b"", allowed=(b"STORED", b"NOT_STORED")):
        cmd = b"%s %s %d 0 %d%s\r\n%s\r\n" % (verb, key, flags_of(key), len(data), extra, data)
        return self.expect(cmd, allowed)

    # -- plain keys ---------------------------------------------------------------
    def op_set(self):
        key = self.rng.choice(self.plain)
        self.store(b"set", key, segment(key, b"H", self.next_gen()), allowed=(b"STORED",))

    def op_get(self):
        key = self.rng.choice(self.plain)
        got = self.read_values(b"get " + key + b"\r\n", {key})
        for k, (flags, data, _) in got.items():
            check_plain(k, flags, data)
            if len(data) > MAX_VALUE:  # keep values small: start this key afresh
                self.store(b"set", k, segment(k, b"H", self.next_gen()), allowed=(b"STORED",))

    def op_mget(self):
        keys = self.rng.sample(self.plain, self.rng.randint(2, 8))
        verb = self.rng.choice((b"get", b"gets"))
        got = self.read_values(verb + b" " + b" ".join(keys) + b"\r\n", set(keys), with_cas=verb == b"gets")
        for k, (flags, data, _) in got.items():
            check_plain(k, flags, data)

    def op_append(self, verb=b"append", kind=b"A"):
        key = self.rng.choice(self.plain)
        self.store(verb, key, b"|" + segment(key, kind, self.next_gen()) if kind == b"A"
                   else segment(key, kind, self.next_gen()) + b"|")

    def op_prepend(self):
        self.op_append(b"prepend", b"P")

    def op_cas(self):
        key = self.rng.choice(self.plain)
        got = self.read_values(b"gets " + key + b"\r\n", {key}, with_cas=True)
        if key not in got:
            return
        flags, data, cas = got[key]
        check_plain(key, flags, data)
        new = segment(key, b"H", self.next_gen())
        if self.rng.random() < 0.5:
            new = data + b"|" + segment(key, b"A", self.next_gen()) if len(data) < MAX_VALUE else new
        self.store(b"cas", key, new, extra=b" " + cas, allowed=(b"STORED", b"EXISTS", b"NOT_FOUND"))

    def op_delete(self):
        key = self.rng.choice(self.plain)
        self.expect(b"delete " + key + b"\r\n", (b"DELETED", b"NOT_FOUND"))

    def op_touch(self):
        key = self.rng.choice(self.plain)
        self.expect(b"touch " + key + b" 3600\r\n", (b"TOUCHED", b"NOT_FOUND"))

    # -- counters -----------------------------------------------------------------
    def observe(self, key, value, snap_before):
        """A counter read `value`; snap_before = watch snapshot taken before the request."""
        started_now, done_now = self.watch.snapshot(key)
        prev = self.seen.get(key)
        if prev is not None and value is not None:
            pval, pstarted, pdone = prev
            # comparable only if nothing was in flight at the previous read and
            # no set/delete began since
            if pstarted == pdone and started_now == pstarted and value < pval:
                raise Wrong(f"{key!r}: counter went down {pval} -> {value} with no set/delete in between")
        if value is None:
            self.seen.pop(key, None)
        else:
            # conservative: the read is "clean" only if nothing was in flight when it was sent
            s0, d0 = snap_before
            if s0 == d0:
                self.seen[key] = (value, s0, d0)
            else:
                self.seen.pop(key, None)

    def op_incr(self):
        key = self.rng.choice(self.counters)
        snap = self.watch.snapshot(key)
        self.conn.send(b"incr %s %d\r\n" % (key, self.rng.randint(1, 1000)))
        reply = self.line()
        if reply == b"NOT_FOUND":
            self.observe(key, None, snap)
            return
        if not NUMBER.fullmatch(reply):
            raise Unexpected(f"incr {key!r} -> {reply[:80]!r}")
        self.observe(key, int(reply), snap)

    def op_cget(self):
        key = self.rng.choice(self.counters)
        snap = self.watch.snapshot(key)
        got = self.read_values(b"get " + key + b"\r\n", {key})
        if key in got:
            self.observe(key, parse_number(key, got[key][1]), snap)
        else:
            self.observe(key, None, snap)

    def op_cset(self):
        key = self.rng.choice(self.counters)
        self.watch.begin(key)
        try:
            cmd = b"set %s 0 0 %d\r\n%s\r\n"
            num = b"%d" % self.rng.randint(0, 10**6)
            self.expect(cmd % (key, len(num), num), (b"STORED",))
        finally:
            self.watch.end(key)
        self.seen.pop(key, None)

    def op_cdelete(self):
        key = self.rng.choice(self.counters)
        self.watch.begin(key)
        try:
            self.expect(b"delete " + key + b"\r\n", (b"DELETED", b"NOT_FOUND"))
        finally:
            self.watch.end(key)
        self.seen.pop(key, None)

    # -- loop -----------------------------------------------------------------------
    def run(self):
        table = [
            (self.op_set, 14), (self.op_get, 22), (self.op_mget, 8), (self.op_append, 8),
            (self.op_prepend, 4), (self.op_cas, 5), (self.op_delete, 4), (self.op_touch, 2),
            (self.op_incr, 18), (self.op_cget, 10), (self.op_cset, 3), (self.op_cdelete, 2),
        ]
        ops = [f for f, w in table for _ in range(w)]
        try:
            self.loop(ops)
        finally:
            if self.conn is not None:
                self.conn.close()
            self.stats.add(ops=self.ops)

    def loop(self, ops):
        failures_in_a_row = 0
        while time.monotonic() < self.deadline:
            if self.conn is None:
                try:
                    self.conn = harness.Conn(socket.create_connection(("127.0.0.1", self.port), timeout=10))
                except OSError as e:
                    self.stats.add(error=f"conn {self.wid}: connect failed: {e}")
                    failures_in_a_row += 1
                    if failures_in_a_row >= 3:
                        return
                    time.sleep(0.5)
                    continue
            op = self.rng.choice(ops)
            try:
                op()
                self.ops += 1
                failures_in_a_row = 0
            except Wrong as e:
                self.ops += 1
                self.stats.add(wrong=f"conn {self.wid} {op.__name__}: {e}")
            except (Unexpected, OSError, ConnectionError, ValueError) as e:
                # the stream may be out of step now: start a new connection
                self.stats.add(error=f"conn {self.wid} {op.__name__}: {type(e).__name__}: {e}")
                self.conn.close()
                self.conn = None
                self.seen.clear()
                failures_in_a_row += 1
                if failures_in_a_row >= 3:
                    return


def final_scan(port, plain, counters, stats):
    """Every key once more, from a fresh connection, after the load."""
    conn = harness.Conn(socket.create_connection(("127.0.0.1", port), timeout=10))
    conn.send(b"get " + b" ".join(plain + counters) + b"\r\n")
    n = 0
    while True:
        line = conn.read_line()[:-2]
        if line == b"END":
            break
        parts = line.split(b" ")
        if parts[0] != b"VALUE" or len(parts) != 4:
            stats.add(error=f"final scan: unexpected {line[:100]!r}")
            break
        data = conn.read_exact(int(parts[3]) + 2)[:-2]
        try:
            if parts[1].startswith(b"n:"):
                parse_number(parts[1], data)
            else:
                check_plain(parts[1], int(parts[2]), data)
        except Wrong as e:
            stats.add(wrong=f"final scan: {e}")
        n += 1
    conn.close()
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=harness.target(), choices=["strata", "memcached"])
    ap.add_argument("--secs", "--duration", dest="secs", type=float, default=20.0)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--keys", type=int, default=200, help="plain keys")
    ap.add_argument("--counters", type=int, default=40, help="counter keys")
    ap.add_argument("--threads", type=int, default=2, help="server -t")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra server argument (repeat), e.g. --server-arg=-o --server-arg=compression=on")
    ap.add_argument("--expect-compressed", action="store_true",
                    help="fail unless the server held values compressed and trained a dictionary")
    args = ap.parse_args()

    plain = [b"c:%d" % i for i in range(args.keys)]
    counters = [b"n:%d" % i for i in range(args.counters)]
    watch = CounterWatch(counters)
    stats = Stats()
    # The production build: no test hook is needed.
    srv = harness.Server(["-t", str(args.threads)] + args.server_arg, kind=args.target, production=True)
    alive = False
    scanned = 0
    try:
        deadline = time.monotonic() + args.secs
        workers = [Worker(i, srv.port, deadline, plain, counters, watch, stats, args.seed)
                   for i in range(args.conns)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(args.secs + 60)
            if w.is_alive():
                stats.add(error=f"conn {w.wid}: still running 60 s after the deadline (hung?)")
        alive = srv.proc.poll() is None
        if alive:
            try:
                scanned = final_scan(srv.port, plain, counters, stats)
                c = srv.connect(timeout=10)
                alive = c.call(b"version\r\n").startswith(b"VERSION ")
                if args.expect_compressed:
                    st = dict(
                        line.split(b" ")[1:3]
                        for line in c.call(b"stats\r\n", b"END\r\n").split(b"\r\n")
                        if line.startswith(b"STAT ")
                    )
                    held = int(st.get(b"strata_compressed_items", b"0"))
                    trainings = int(st.get(b"strata_compress_trainings", b"0"))
                    print(f"concurrency: compressed items {held}, trainings {trainings}, "
                          f"decompress errors {int(st.get(b'strata_decompress_errors', b'0'))}")
                    if held == 0 or trainings == 0 or st.get(b"strata_decompress_errors") != b"0":
                        stats.add(error="compression: nothing held compressed, no training, or decompress errors")
                c.close()
            except (OSError, ConnectionError) as e:
                stats.add(error=f"final check: {e}")
                alive = False
    finally:
        code = srv.stop()

    for ex in stats.examples:
        print(f"concurrency: {ex}")
    print(f"concurrency: seed={args.seed} final_scan_items={scanned} server_exit={code}")
    print(
        f"concurrency: target={args.target} conns={args.conns} secs={args.secs:g} ops={stats.ops} "
        f"wrong={stats.wrong} errors={stats.errors} alive={'yes' if alive else 'no'}"
    )
    ok = stats.wrong == 0 and stats.errors == 0 and alive and stats.ops > 0
    print("concurrency: PASS" if ok else "concurrency: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
