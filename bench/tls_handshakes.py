#!/usr/bin/env python3
"""TLS handshake rate, strata and memcached side by side (issue 18).

Each server in turn is started with `-Z` and a certificate made for the run
(RSA 2048, signed by a throw-away CA, `openssl` command line), `-t 2`. For
`--duration` seconds, `--procs` client processes (Python's ssl, OpenSSL)
each open a connection, complete the handshake (TLS 1.3 by default;
`--tls12` for 1.2), send `version`, read the reply and close, over and
over; a handshake counts once its `version` is answered. Reported per
server: handshakes per second, and the server's CPU time per handshake
(user + system, from /proc), which is the figure that does not depend on
how many cores the clients took.

    .venv/bin/python bench/tls_handshakes.py [--duration 10] [--procs 2] [--rounds 3] [--tls12]
"""

import argparse
import json
import multiprocessing
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import harness  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def make_certs(d):
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=bench CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "server.ext")


def client(port, ca, until, tls12, out):
    ctx = ssl.create_default_context(cafile=ca)
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    n = 0
    while time.monotonic() < until:
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(b"version\r\n")
        if s.recv(100).startswith(b"VERSION "):
            n += 1
        s.close()
    out.put(n)


def measure(kind, d, args):
    tls = ["-Z", "-o", f"ssl_chain_cert={d}/server.crt,ssl_key={d}/server.key"]
    srv = harness.Server(["-t", "2", *tls], kind=kind, production=True)
    try:
        # Let start-up settle, then measure from a clean CPU reading.
        time.sleep(0.5)
        cpu0, t0 = cpu_seconds(srv.pid()), time.monotonic()
        until = t0 + args.duration
        out = multiprocessing.Queue()
        procs = [multiprocessing.Process(target=client, args=(srv.port, f"{d}/ca.crt", until, args.tls12, out))
                 for _ in range(args.procs)]
        for p in procs:
            p.start()
        total = sum(out.get() for _ in procs)
        for p in procs:
            p.join()
        elapsed, cpu = time.monotonic() - t0, cpu_seconds(srv.pid()) - cpu0
    finally:
        srv.stop()
    return {"handshakes": total, "per_sec": total / elapsed, "server_cpu_us_per_handshake": cpu * 1e6 / max(total, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tls12", action="store_true", help="TLS 1.2 handshakes instead of 1.3")
    ap.add_argument("--out", help="write the results here (JSON)")
    args = ap.parse_args()
    results = {"strata": [], "memcached": []}
    with tempfile.TemporaryDirectory() as d:
        make_certs(d)
        for r in range(args.rounds):
            # Alternate who goes first.
            for kind in (["strata", "memcached"] if r % 2 == 0 else ["memcached", "strata"]):
                m = measure(kind, d, args)
                results[kind].append(m)
                print(f"round {r + 1} {kind}: {m['per_sec']:.0f} handshakes/s, "
                      f"{m['server_cpu_us_per_handshake']:.0f} µs server CPU each", flush=True)
    summary = {
        k: {"median_per_sec": statistics.median(x["per_sec"] for x in v),
            "median_server_cpu_us": statistics.median(x["server_cpu_us_per_handshake"] for x in v)}
        for k, v in results.items()
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rounds": results, "summary": summary}, f, indent=2)


if __name__ == "__main__":
    main()
