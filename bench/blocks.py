#!/usr/bin/env python3
"""How much compressing neighbouring values together would hold (issue 46).

Reads back the values a strata-bench load stored (keys as `--key-size 14`
makes them: `k` and 13 digits, `0` to `--keys` - 1), trains a zstd
dictionary on the first half as strata does, and compresses the second
half one value at a time (what strata stores today) and in blocks of N
values in key order (what a cold segment recompressed as blocks would
hold), with and without their keys in the block. Prints the ratio, the
bytes per item, and what compressing one block costs here (Python's
zstd binding, a prepared dictionary). What a read of a cold item would
pay, decompressing its block, wants measuring in strata's own codec.

    strata -p 11400 -m 512 &
    strata-bench run --addr 127.0.0.1:11400 -q --mode load --ratio 1:0 --key-dist sequential \\
        --keys 200000 --ops 200000 --key-size 14 --value-size api:100-250
    .venv/bin/python bench/blocks.py --port 11400 --keys 200000 --level 3
"""

import argparse
import socket
import time

import zstandard as zstd


def fetch(port, n):
    """(key, value) of keys 0..n-1 that the server holds, in key order."""
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    out = []
    for lo in range(0, n, 100):
        keys = [b"k%013d" % i for i in range(lo, min(n, lo + 100))]
        s.sendall(b"get " + b" ".join(keys) + b"\r\n")
        while (line := f.readline()) != b"END\r\n":
            key, length = line.split()[1], int(line.split()[3])
            out.append((key, f.read(length)))
            f.read(2)
    s.close()
    return out


def per_call_us(fn, reps):
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--level", type=int, default=3, help="zstd level (strata's default: 3)")
    ap.add_argument("--dict-size", type=int, default=256 << 10, help="dictionary bytes (strata's default)")
    ap.add_argument("--blocks", default="1,2,4,8,16,32,64", help="values per block")
    a = ap.parse_args()
    items = fetch(a.port, a.keys)
    assert len(items) >= 1000, f"only {len(items)} of the keys are held"
    train, test = items[: len(items) // 2], items[len(items) // 2 :]
    d = zstd.train_dictionary(a.dict_size, [v for _, v in train[:50000]])
    d.precompute_compress(level=a.level)
    c = zstd.ZstdCompressor(
        level=a.level, dict_data=d, write_checksum=False, write_content_size=False, write_dict_id=False
    )
    raw = sum(len(v) for _, v in test)
    raw_keyed = sum(len(k) + len(v) for k, v in test)
    mean = raw / len(test)
    print(f"{len(test)} values of {mean:.0f} B on average, level {a.level}, dictionary {a.dict_size} B")
    print("| values per block | ratio | B per item | with keys: ratio | B per item | compress a block µs |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in [int(x) for x in a.blocks.split(",")]:
        blocks = [test[i : i + n] for i in range(0, len(test), n)]
        plain = [b"".join(v for _, v in b) for b in blocks]
        keyed = [b"".join(k + v for k, v in b) for b in blocks]
        size = sum(len(c.compress(p)) for p in plain)
        size_keyed = sum(len(c.compress(p)) for p in keyed)
        sample = plain[: min(len(plain), 200)]
        comp = per_call_us(lambda: [c.compress(p) for p in sample], 3) / len(sample)
        print(
            f"| {n} | {raw / size:.2f}× | {size / len(test):.1f} | {raw_keyed / size_keyed:.2f}× "
            f"| {size_keyed / len(test):.1f} | {comp:.1f} |"
        )


if __name__ == "__main__":
    main()
