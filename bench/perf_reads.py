#!/usr/bin/env python3
"""Splits a `perf record --call-graph dwarf` profile of a strata server under
read load (pipelined GET, multi-get) into the categories of docs/benchmarks-history.md
("Reads: pipelined GET and 16-key multi-get"), as shares of all samples.

    perf record -e cpu-clock -F 999 --call-graph dwarf,8192 -p $PID -o /tmp/perf.data -- sleep 5
    bench/perf_reads.py /tmp/perf.data [CPU_US_PER_OP]

DWARF call graphs, not frame pointers: the release build keeps no frame
pointers, so a `-g` profile loses the caller of every libc `memcpy` and
`memcmp`, and the read path is mostly inlined into a few symbols
(`Conn::serve_buffered`, `dispatch::execute`, `Worker::prefetch_items`);
perf's inline frames say which part of them a sample fell in. Each user
sample goes to the first category that matches walking out from the
innermost (inlined) frame; kernel samples go by the entry point they are
under. With a CPU µs/op figure (strata-bench's server CPU per op of a run
without perf), it prints µs per op too.
"""
import collections
import re
import subprocess
import sys


def samples(data):
    out = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"], capture_output=True, text=True,
                         check=True).stdout
    every, cur = [], []
    for line in out.splitlines():
        if not line.strip():
            if cur:
                every.append(cur)
            cur = []
            continue
        parts = line.strip().split(None, 1)
        if len(parts) < 2:
            continue
        rest = parts[1]
        if rest.endswith(")") and " (" in rest:
            sym, dso = rest.rsplit(" (", 1)
            dso = dso[:-1].strip("[]")
        else:
            sym, dso = rest, ""
        cur.append((sym, dso, parts[0]))
    if cur:
        every.append(cur)
    return [innermost_first(s) for s in every]


def innermost_first(frames):
    # perf prints an address's containing symbol first and its inlined
    # frames after it, innermost first: put the containing symbol last.
    out, i = [], 0
    while i < len(frames):
        j = i + 1
        while j < len(frames) and frames[j][2] == frames[i][2]:
            j += 1
        group = frames[i:j]
        out += group[1:] + group[:1]
        i = j
    return out


def bare(sym):
    for _ in range(4):
        sym = re.sub(r"<[^<>]*>", "", sym)
    return sym


KERNEL = [("send (tcp_sendmsg, with the client's receive and wake-up on loopback)", "tcp_sendmsg"),
          ("receive (tcp_recvmsg)", "tcp_recvmsg"), ("sleeping and waking (schedule)", "schedule"),
          ("page faults", "asm_exc_page_fault")]
KERNEL_OTHER = "other kernel: system call entry, the ring's or epoll's bookkeeping"

PROBE = "index probe: bucket, tag, item header, key compare"
AHEAD = "index read-ahead: peek, prefetch buckets and items"


def has(n, *words):
    return any(w in n for w in words)


# (category, test of a frame name n given the frames outside it, ch)
USER = [
    ("copy: value into the reply buffer",
     lambda n, ch: has(n, "memcpy", "memmove") and any("reply::value" in c or c in ("value", "write_value") for c in ch)),
    ("copy: other (received bytes into the read buffer)", lambda n, ch: has(n, "memcpy", "memmove")),
    (PROBE, lambda n, ch: has(n, "memcmp", "bcmp")),
    ("hash", lambda n, ch: has(n, "hash_one", "locate", "ahash", "foldhash", "folded_multiply", "Hasher", "hash_bytes")),
    ("stripe lock", lambda n, ch: has(n, "lock_slow", "unlock", "RawMutex", "raw_mutex", "lock_api", "MutexGuard")
     or n.endswith("lock") or (n in ("drop", "drop_in_place") and any(c in ("prefetch_items", "find_once") for c in ch[:3]))),
    ("parse", lambda n, ch: has(n, "memchr", "find_raw", "protocol::text", "protocol::meta")
     or ("parse" in n and "parse_lengths" not in n)),
    (AHEAD, lambda n, ch: has(n, "prefetch", "peek", "look_ahead", "read_ahead", "text_keys")),
    (PROBE, lambda n, ch: has(n, "find", "lookup", "item_at", "header", "width_of", "parse_lengths", "Item", "Stripe",
                              "total_len", "dead", "is_expired", "is_flushed", "strata_store::index", "strata_store::read")),
    ("reply assembly (headers, itoa, END)",
     lambda n, ch: has(n, "reply::", "itoa", "Unsigned", "Replies", "append_elements", "extend_from_slice", "value")),
    ("stats", lambda n, ch: has(n, "Detail", "record_get", "bump", "stats", "Counters", "latency")),
    ("dispatch (execute, core::get)", lambda n, ch: has(n, "dispatch::", "execute", "core::", "get")),
    ("event loop, connection, system call wrappers",
     lambda n, ch: has(n, "strata_server", "io_uring", "syscall", "send", "recv", "serve", "step", "conn", "uring",
                       "epoll", "Conn", "Loop", "write", "read", "flush", "service")),
]


def classify(s):
    if s[0][1] == "kernel.kallsyms":
        names = [f[0] for f in s]
        return "k", next((cat for cat, entry in KERNEL if entry in names), KERNEL_OTHER)
    names = [bare(f[0]) for f in s if f[1] != "kernel.kallsyms"]
    for i, n in enumerate(names[:12]):
        for cat, test in USER:
            if test(n, names[i + 1:]):
                return "u", cat
    return "u", "other user"


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "perf.data"
    per_op = float(sys.argv[2]) if len(sys.argv) > 2 else None
    every = samples(data)
    cats = collections.Counter(classify(s) for s in every)
    total = sum(cats.values())
    for side, title in (("k", "kernel"), ("u", "user")):
        share = sum(v for (k, _), v in cats.items() if k == side) / total
        extra = f"  {share * per_op:.3f} µs/op" if per_op else ""
        print(f"{title} {100 * share:.1f}%{extra}")
        for (k, cat), v in sorted(cats.items(), key=lambda x: -x[1]):
            if k == side:
                extra = f"  {v / total * per_op:.3f}" if per_op else ""
                print(f"  {100 * v / total:5.1f}%{extra}  {cat}")
    print(f"{total} samples")


if __name__ == "__main__":
    main()
