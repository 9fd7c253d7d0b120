#!/usr/bin/env python3
"""Splits a `perf record -g` profile of a server into the categories of
docs/benchmarks-history.md ("One profile, every category"), as shares of all samples.

    perf record -F 2999 -g -p $PID -o /tmp/perf.data -- sleep 6 &
    target/release/strata-bench run -q --addr 127.0.0.1:PORT --pid $PID ...
    bench/perf_breakdown.py /tmp/perf.data

Kernel categories are inclusive shares (`--children`) of the entry points;
user categories group self shares (`--no-children`) by symbol name.
Multiply a share by the run's server CPU µs/op for µs per op.
"""
import re
import subprocess
import sys


def report(data, children):
    args = ["perf", "report", "-i", data, "--sort", "dso,sym", "-g", "none", "--percent-limit", "0"]
    args.append("--children" if children else "--no-children")
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"\s*([\d.]+)%\s+(?:([\d.]+)%\s+)?(\S+)\s+\[(.)\]\s+(.*)$", line)
        if m:
            rows.append((float(m.group(1)), m.group(4), m.group(5).strip()))
    return rows


USER = [
    ("parsing", lambda s: "strata_protocol" in s or "memchr" in s),
    ("index (hash, lookup, read-ahead)", lambda s: any(x in s for x in ("lookup", "prefetch", "index::", "ahash"))),
    ("copies (memmove)", lambda s: "memmove" in s or "memcpy" in s),
    ("compaction", lambda s: any(x in s for x in ("clear_segment", "clear_item", "compact"))),
    ("writing the item", lambda s: "strata_store" in s),
    ("event loop, connection", lambda s: "strata_server" in s or s == "syscall"),
]


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "perf.data"
    inclusive = report(data, True)
    own = report(data, False)

    def child(sym):
        return max([pct for pct, _, s in inclusive if s == sym] or [0.0])

    kernel = sum(pct for pct, kind, _ in own if kind == "k")
    parts = {k: child(s) for k, s in [("send", "tcp_sendmsg"), ("receive", "tcp_recvmsg"),
                                        ("schedule", "schedule"), ("page faults", "asm_exc_page_fault")]}
    parts["other"] = kernel - sum(parts.values())
    user = {name: 0.0 for name, _ in USER}
    user["other"] = 0.0
    for pct, kind, sym in own:
        if kind == "k":
            continue
        name = next((n for n, match in USER if match(sym)), "other")
        user[name] += pct
    print(f"kernel {kernel:.1f}%: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    print(f"user {100 - kernel:.1f}%: " + ", ".join(f"{k} {v:.1f}" for k, v in user.items()))


if __name__ == "__main__":
    main()
