"""--durability always|interval: acknowledged writes survive kill -9.

Sixteen connections each change their own keys (sets, deletes, incr), one
request at a time, and remember every acknowledged reply; the server is
killed with SIGKILL mid-run and started again on the same directory. Under
`always` and `interval` every acknowledged change must be there (a change
in flight when the server died may or may not be; a power loss, not tried
here, may lose `interval`'s last second). strata only: memcached has no durable mode.
"""

import random
import signal
import socket
import threading
import time

import pytest

from harness import Server
from wirelib import expect, read_line_or_partial, read_n, stats

pytestmark = [pytest.mark.strata_only, pytest.mark.not_over_flash("--durability refuses -o ext_path")]

CONNS = 16
KEYS_PER_CONN = 8


def start(path, mode, *args):
    return Server(["--snapshot-dir", str(path), "--durability", mode, "-t", "2", *args])


class Client(threading.Thread):
    """One connection changing keys k<id>_<j>; records what was acknowledged."""

    def __init__(self, port, cid, stop, seed):
        super().__init__(daemon=True)
        self.port, self.cid, self.stop, self.rng = port, cid, stop, random.Random(seed)
        # key -> ("value", bytes) | ("gone",) | ("count", n), as acknowledged
        self.acked = {}
        # key -> the state it would have if the request in flight applied
        self.in_flight = None
        self.acked_at = {}
        self.error = None

    def key(self, j):
        return b"k%d_%d" % (self.cid, j)

    def run(self):
        # An assert here would end only this thread and pass the test: the
        # failure is kept for the main thread to raise.
        try:
            self.serve()
        except AssertionError as e:
            self.error = e

    def serve(self):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            return
        buf = b""
        n = 0
        while not self.stop.is_set():
            j = self.rng.randrange(KEYS_PER_CONN)
            k = self.key(j)
            n += 1
            op = self.rng.random()
            if op < 0.6:
                v = b"%d-%d-%d" % (self.cid, j, n)
                req, want, new = b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v), b"STORED\r\n", ("value", v)
            elif op < 0.8:
                req, want, new = b"delete %s\r\n" % k, None, ("gone",)
            else:
                cur = self.acked.get(k)
                if not cur or cur[0] != "count":
                    req, want, new = b"set %s 0 0 1\r\n0\r\n" % k, b"STORED\r\n", ("count", 0)
                else:
                    req, want, new = b"incr %s 1\r\n" % k, b"%d\r\n" % (cur[1] + 1), ("count", cur[1] + 1)
            self.in_flight = (k, new)
            try:
                s.sendall(req)
                while b"\r\n" not in buf:
                    chunk = s.recv(4096)
                    if not chunk:
                        return
                    buf += chunk
            except OSError:
                return
            line, buf = buf.split(b"\r\n", 1)
            line += b"\r\n"
            if want is None:
                assert line in (b"DELETED\r\n", b"NOT_FOUND\r\n"), line
            else:
                assert line == want, (req, line)
            self.acked[k] = new
            self.acked_at[k] = time.monotonic()
            self.in_flight = None


def read_state(c, key):
    c.send(b"get %s\r\n" % key)
    line = read_line_or_partial(c)
    if line == b"END\r\n":
        return ("gone",)
    n = int(line.split()[3])
    data = read_n(c, n + 2)[:-2]
    assert read_line_or_partial(c) == b"END\r\n"
    return data


def matches(state, got):
    if state[0] == "gone":
        return got == ("gone",)
    if state[0] == "count":
        return got != ("gone",) and got.strip() == b"%d" % state[1]
    return got == state[1]


def snapshot_often(port, stop):
    """Asks for a snapshot every 50 ms until stopped (issue 30: the
    durable mode lost acknowledged writes while snapshots ran)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return
    try:
        while not stop.is_set():
            s.sendall(b"snapshot\r\n")
            if not s.recv(4096):
                return
            time.sleep(0.05)
    except OSError:
        return


def run_trials(tmp_path, mode, trials, allowed_loss_secs, snapshots=False):
    srv = start(tmp_path, mode)
    rng = random.Random(16)
    lost_total = 0
    checked_total = 0
    for trial in range(trials):
        stop = threading.Event()
        clients = [Client(srv.port, cid, stop, seed=trial * 100 + cid) for cid in range(CONNS)]
        for c in clients:
            c.start()
        if snapshots:
            threading.Thread(target=snapshot_often, args=(srv.port, stop), daemon=True).start()
        time.sleep(rng.uniform(0.2, 0.6))
        killed_at = time.monotonic()
        srv.stop(signal.SIGKILL)
        stop.set()
        for c in clients:
            c.join(timeout=10)
            assert not c.is_alive(), "a client did not stop"
            assert c.error is None, c.error
        srv = start(tmp_path, mode)
        c = srv.connect()
        for cl in clients:
            for k, state in cl.acked.items():
                got = read_state(c, k)
                if matches(state, got):
                    checked_total += 1
                    continue
                if cl.in_flight and cl.in_flight[0] == k and matches(cl.in_flight[1], got):
                    checked_total += 1
                    continue
                recent = killed_at - cl.acked_at[k] <= allowed_loss_secs
                assert recent, (mode, trial, k, state, got)
                lost_total += 1
        # The next trial starts from what this one recovered.
        for cl in clients:
            cl.acked.clear()
        expect(c, b"flush_all\r\n", b"OK\r\n")
        c.close()
    srv.stop()
    return checked_total, lost_total


def test_always_loses_no_acknowledged_write_to_kill_9(tmp_path):
    checked, lost = run_trials(tmp_path, "always", 20, allowed_loss_secs=0)
    assert lost == 0
    assert checked > 20 * CONNS


def test_always_loses_nothing_to_kill_9_while_snapshots_run(tmp_path):
    checked, lost = run_trials(tmp_path, "always", 10, allowed_loss_secs=0, snapshots=True)
    assert lost == 0
    assert checked > 10 * CONNS


class FastWriters:
    """Four connections setting 300-byte values to fresh keys as fast as
    they can; `acked[i]` lists connection i's acknowledged keys in order.
    `stop()` ends them and raises what any of them met."""

    def __init__(self, port, prefix):
        self.port, self.prefix = port, prefix
        self.halt = threading.Event()
        self.acked = [[] for _ in range(4)]
        self.errors = []
        self.threads = [threading.Thread(target=self.write, args=(i,)) for i in range(4)]
        for t in self.threads:
            t.start()

    def write(self, cid):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            f = s.makefile("rb")
            n = 0
            while not self.halt.is_set():
                k = b"%s%d_%d" % (self.prefix, cid, n)
                s.sendall(b"set %s 0 0 300\r\n%s\r\n" % (k, b"x" * 300))
                line = f.readline()
                if line != b"STORED\r\n":
                    self.errors.append(line)
                    return
                self.acked[cid].append(k)
                n += 1
            s.close()
        except OSError as e:
            self.errors.append(e)

    def stop(self):
        self.halt.set()
        for t in self.threads:
            t.join(timeout=10)
        assert not self.errors, self.errors


def missing_keys(c, lists):
    """The keys of `lists` the server does not hold (meta gets, 100 a batch)."""
    missing = []
    for keys in lists:
        for i in range(0, len(keys), 100):
            batch = keys[i:i + 100]
            c.send(b"mg " + b" v\r\nmg ".join(batch) + b" v\r\nmn\r\n")
            for k in batch:
                line = read_line_or_partial(c)
                if line.startswith(b"VA "):
                    read_n(c, int(line.split()[1]) + 2)
                else:
                    assert line == b"EN\r\n", line
                    missing.append(k)
            assert read_line_or_partial(c) == b"MN\r\n"
    return missing


def test_always_keeps_what_was_acknowledged_before_the_snapshots_that_ran(tmp_path):
    """Issue 30's reproduction: writers as fast as they can with snapshots
    every 100 ms, writers stopped, the last snapshot finished, kill -9:
    every acknowledged key is back (11-705 were missing in most rounds)."""
    for rnd in range(3):
        d = tmp_path / str(rnd)
        d.mkdir()
        # Room for every write: an evicted key is missing for a good reason.
        srv = start(d, "always", "-m", "1024")
        w = FastWriters(srv.port, b"w")
        c = srv.connect()
        t0 = time.monotonic()
        # Two seconds, and on until a thousand writes were acknowledged (a
        # slow disk acknowledged 969 in two seconds once): the check below
        # must have something to check.
        while time.monotonic() - t0 < 2.0 or (sum(len(a) for a in w.acked) <= 1000 and time.monotonic() - t0 < 20):
            c.send(b"snapshot\r\n")
            line = read_line_or_partial(c)
            assert line in (b"OK\r\n", b"SERVER_ERROR snapshot already in progress\r\n"), line
            time.sleep(0.1)
        w.stop()
        deadline = time.monotonic() + 20
        while stats(c)["snapshot_in_progress"] != "0":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        srv.stop(signal.SIGKILL)
        srv = start(d, "always", "-m", "1024")
        missing = missing_keys(srv.connect(), w.acked)
        srv.stop()
        total = sum(len(a) for a in w.acked)
        assert total > 1000 and not missing, (rnd, total, len(missing), missing[:5])


def test_a_log_ending_inside_a_record_head_starts_and_loses_nothing(tmp_path):
    """Issue 30: bytes after the last whole record (a crash mid-append) made
    start panic (exit 101). Every cut inside a record head is tried in the
    Rust tests; here, the server itself, on the exact case reported."""
    srv = start(tmp_path, "always")
    c = srv.connect()
    expect(c, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
    srv.stop(signal.SIGKILL)
    logs = sorted(tmp_path.glob("strata.snapshot.log.*"))
    assert logs, list(tmp_path.iterdir())
    with open(logs[-1], "ab") as f:
        f.write(b"\x01\x00")
    srv = start(tmp_path, "always")
    try:
        expect(srv.connect(), b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    finally:
        srv.stop()


@pytest.mark.one_event_loop("the snapshot's cut; the log's acknowledgements have tests of their own")
def test_a_snapshot_holds_what_was_acknowledged_before_it_began(tmp_path):
    """Issue 30: with durability off, a snapshot taken during writes missed
    keys acknowledged before it started (590 of them, 33 ms before)."""
    for rnd in range(4):
        d = tmp_path / str(rnd)
        d.mkdir()
        # Room for every write: an evicted key is missing for a good reason.
        srv = Server(["--snapshot-dir", str(d), "-t", "2", "-m", "1024"])
        w = FastWriters(srv.port, b"o")
        c = srv.connect()
        # Snapshots every 100 ms while the writers run, as an operator's
        # timer would; the last one asked for is the one checked.
        for _ in range(12):
            time.sleep(0.1)
            c.send(b"snapshot\r\n")
            line = read_line_or_partial(c)
            assert line in (b"OK\r\n", b"SERVER_ERROR snapshot already in progress\r\n"), line
        while True:
            # Everything acknowledged before this request must be in the
            # snapshot it starts (it begins once the running one ends).
            s = stats(c)
            if s["snapshot_in_progress"] == "0":
                saves = int(s["snapshot_saves"]) + int(s["snapshot_save_errors"])
                before = [list(a) for a in w.acked]
                c.send(b"snapshot\r\n")
                if read_line_or_partial(c) == b"OK\r\n":
                    break
            time.sleep(0.01)
        # Writes go on while it copies, then stop (a snapshot thread that
        # only runs on idle cores would otherwise wait for them).
        time.sleep(0.5)
        w.stop()
        deadline = time.monotonic() + 60
        while True:
            s = stats(c)
            if int(s["snapshot_saves"]) + int(s["snapshot_save_errors"]) > saves and s["snapshot_in_progress"] == "0":
                assert s["snapshot_last_result"] == "ok", s
                break
            assert time.monotonic() < deadline, s
            time.sleep(0.01)
        srv.stop(signal.SIGKILL)
        srv = Server(["--snapshot-dir", str(d), "-t", "2", "-m", "1024"])
        missing = missing_keys(srv.connect(), before)
        srv.stop()
        total = sum(len(a) for a in before)
        assert total > 500 and not missing, (rnd, total, len(missing), missing[:5])


def test_interval_loses_no_acknowledged_write_to_kill_9(tmp_path):
    # Issue 41: replies under `interval` wait until the record is written
    # (a process crash keeps it); a power loss may still lose a second.
    checked, lost = run_trials(tmp_path, "interval", 5, allowed_loss_secs=0)
    assert checked > 5 * CONNS and lost == 0


def test_interval_loses_nothing_to_kill_9_while_snapshots_run(tmp_path):
    checked, lost = run_trials(tmp_path, "interval", 8, allowed_loss_secs=0, snapshots=True)
    assert checked > 8 * CONNS and lost == 0


def test_every_protocol_change_is_durable(tmp_path):
    srv = start(tmp_path, "always")
    c = srv.connect()
    expect(c, b"set a 5 0 3\r\nabc\r\n", b"STORED\r\n")
    expect(c, b"append a 0 0 2\r\nde\r\n", b"STORED\r\n")
    expect(c, b"set gone 0 0 1\r\nx\r\n", b"STORED\r\n")
    expect(c, b"delete gone\r\n", b"DELETED\r\n")
    expect(c, b"set t 0 0 1\r\ny\r\n", b"STORED\r\n")
    expect(c, b"touch t 1000\r\n", b"TOUCHED\r\n")
    expect(c, b"ms stale 2\r\nst\r\n", b"HD\r\n")
    expect(c, b"md stale I\r\n", b"HD\r\n")
    expect(c, b"set n 0 0 2\r\n10\r\n", b"STORED\r\n")
    expect(c, b"decr n 3\r\n", b"7\r\n")
    expect(c, b"set q 0 0 1 noreply\r\nq\r\n", b"")
    expect(c, b"mn\r\n", b"MN\r\n")
    c.send(b"gets a\r\n")
    line = read_line_or_partial(c)
    cas = int(line.split()[4])
    assert read_n(c, 12) == b"abcde\r\nEND\r\n"
    srv.stop(signal.SIGKILL)
    srv = start(tmp_path, "always")
    try:
        c = srv.connect()
        expect(c, b"gets a\r\n", b"VALUE a 5 5 %d\r\nabcde\r\nEND\r\n" % cas)
        expect(c, b"get gone q n\r\n", b"VALUE q 0 1\r\nq\r\nVALUE n 0 2\r\n7 \r\nEND\r\n")
        c.send(b"mg t t\r\n")
        ttl = int(read_line_or_partial(c).split()[1][1:])
        assert 995 <= ttl <= 1000
        expect(c, b"mg stale v\r\n", b"VA 2 X W\r\nst\r\n")
        s = stats(c)
        assert s["durability"] == "always"
        assert int(s["durability_replayed_records"]) >= 10
        # A flush_all is durable too.
        expect(c, b"flush_all\r\n", b"OK\r\n")
        expect(c, b"set after 0 0 1\r\nz\r\n", b"STORED\r\n")
        srv.stop(signal.SIGKILL)
        srv = start(tmp_path, "always")
        expect(srv.connect(), b"get a q after\r\n", b"VALUE after 0 1\r\nz\r\nEND\r\n")
    finally:
        srv.stop()


def test_durability_flags_are_checked(make_server, tmp_path):
    import subprocess

    from harness import STRATA_BIN

    for args, msg in [
        (["--durability", "always"], b"--durability needs --snapshot-dir"),
        (["--durability", "sometimes", "--snapshot-dir", str(tmp_path)], b"invalid durability"),
        (["--durability", "always", "--snapshot-dir", str(tmp_path), "-o", "compression=on"], b"compression"),
    ]:
        r = subprocess.run([STRATA_BIN, "-p", "0", *args], capture_output=True, timeout=10)
        assert r.returncode == 64 and msg in r.stderr, (args, r.stderr)


def test_a_full_disk_never_acknowledges_what_it_could_not_log(tmp_path):
    import subprocess

    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)]).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        srv = start(small, "always")
        c = srv.connect()
        expect(c, b"set first 0 0 1\r\na\r\n", b"STORED\r\n")
        value = b"v" * 4000
        acked = 0
        closed = False
        for i in range(1000):
            c.send(b"set big%d 0 0 %d\r\n%s\r\n" % (i, len(value), value))
            line = read_line_or_partial(c)
            if line != b"STORED\r\n":
                # Not acknowledged: the write that met the failure closes
                # its connection; one after it is refused.
                assert (line == b"" and c.is_closed(timeout=2.0)) or line == b"SERVER_ERROR durability log failed\r\n", line
                closed = True
                break
            acked += 1
        assert closed and 0 < acked < 200, acked
        c = srv.connect()
        s = stats(c)
        assert s["durability_failed"] == "1"
        # Every change now gets a prompt error (it used to wait forever),
        # and the connection stays usable.
        for req in [b"set later 0 0 1\r\nx\r\n", b"delete first\r\n", b"incr first 1\r\n", b"touch first 100\r\n",
                    b"gat 100 first\r\n", b"ms later 1\r\nx\r\n", b"md first\r\n", b"ma first\r\n"]:
            expect(c, req, b"SERVER_ERROR durability log failed\r\n")
        # Reads go on; the last acknowledged write is in the log.
        expect(c, b"get first\r\n", b"VALUE first 0 1\r\na\r\nEND\r\n")
        srv.stop(signal.SIGKILL)
        # A durable restart needs room for a new log file: it refuses.
        from harness import STRATA_BIN

        r = subprocess.run(
            [STRATA_BIN, "-p", "0", "--snapshot-dir", str(small), "--durability", "always"], capture_output=True, timeout=10
        )
        assert r.returncode == 73 and b"durability log" in r.stderr, r.stderr
        # Without durability it starts, replaying the log: every
        # acknowledged write is there.
        srv = Server(["--snapshot-dir", str(small)])
        c = srv.connect()
        expect(c, b"get big%d\r\n" % (acked - 1), b"VALUE big%d 0 4000\r\n%s\r\nEND\r\n" % (acked - 1, value))
        srv.stop(signal.SIGKILL)
    finally:
        # Lazily: a server a failed assertion left running must not keep
        # the mount after the test (test_snapshot's small_tmpfs does the same).
        subprocess.run(["umount", "-l", str(small)])


def test_writes_that_waited_for_memory_are_durable_once_acknowledged(tmp_path):
    """Sets that wait for memory off the event loop (`strata_memory_waits`,
    the reclaimer slowed by a test hook) are logged when they run again,
    before their reply: after kill -9 every key holds its last
    acknowledged value. Overwrites of 200 keys at -m 8: memory fills with
    dead versions (which the cleaner takes back), so nothing live is
    evicted and every key can be checked. Each round's values are another
    length than the last's: one of the same length would be written over
    the old in place, leaving nothing dead."""
    keys = 200

    def value(rnd, i):
        return (b"%d-%d:" % (rnd, i)) * (400 + rnd % 2)

    srv = start(tmp_path, "always", "-m", "8", "--debug-reclaim-delay", "200")
    c = srv.connect()
    rounds = 0
    for rnd in range(40):
        c.send(b"".join(b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(value(rnd, i)), value(rnd, i)) for i in range(keys)))
        assert read_n(c, 8 * keys) == b"STORED\r\n" * keys
        rounds = rnd + 1
        if rounds >= 12 and int(stats(c)["strata_memory_waits"]) > 0:
            break
    st = stats(c)
    assert int(st["strata_memory_waits"]) > 0, "no write waited for memory in %d rounds" % rounds
    assert int(st["evictions"]) == 0
    srv.stop(signal.SIGKILL)
    srv = start(tmp_path, "always")
    c = srv.connect()
    for i in range(keys):
        v = value(rounds - 1, i)
        want = b"VALUE k%d 0 %d\r\n%s\r\nEND\r\n" % (i, len(v), v)
        c.send(b"get k%d\r\n" % i)
        assert read_n(c, len(want)) == want, f"k{i}"
    srv.stop()
