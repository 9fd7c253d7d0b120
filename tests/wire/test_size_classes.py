"""Size classes as memcached's: an item is counted in `stats items` under
the class id memcached 1.6.18 gives the same key, value, flags and CAS
setting (issue 43; docs/protocol.md "Size classes").

memcached sizes an item as its 48-byte header, the key and a NUL, the
client flags when they are not zero, the value and its CRLF, and 8 bytes
of CAS unless `-C`; a TTL does not change it. The expected ids below are
what Debian's memcached 1.6.18 reported for each case
(WIRE_TARGET=memcached runs this file against it).
"""

import pytest

from wirelib import expect, stats, stored

# (key length, value length, flags, TTL) for every combination, then a
# long key and values near and past memcached's largest chunk (512 KiB:
# larger items are chunked and counted in the last class).
CASES = [(k, v, fl, t) for k in (8, 40) for v in (1, 30, 100, 500, 5000, 100000) for fl in (0, 7) for t in (0, 100)]
CASES += [(250, 1000, 0, 0), (10, 400000, 0, 0), (10, 524000, 0, 0), (10, 600000, 0, 0), (10, 1000000, 0, 0)]

EXPECTED = {
    (): "1 1 1 1 2 2 2 2 4 4 4 4 9 9 9 9 19 19 19 19 32 32 32 32 "
        "2 2 2 2 3 3 3 3 5 5 5 5 9 9 10 10 19 19 19 19 32 32 32 32 13 39 39 39 39",
    ("-C",): "1 1 1 1 1 1 1 1 4 4 4 4 9 9 9 9 19 19 19 19 32 32 32 32 "
             "1 1 1 1 3 3 3 3 4 4 5 5 9 9 9 9 19 19 19 19 32 32 32 32 13 39 39 39 39",
    ("-f", "1.5", "-n", "32"): "1 1 1 1 2 2 2 2 3 3 3 3 6 6 6 6 12 12 12 12 19 19 19 19 "
                               "2 2 2 2 3 3 3 3 4 4 4 4 6 6 6 6 12 12 12 12 19 19 19 19 8 22 22 22 22",
}


def classes_of(c):
    """The class ids that hold an item, from `stats items`."""
    return [k.split(":")[1] for k, v in stats(c, "items").items() if k.endswith(":number") and v != "0"]


@pytest.mark.not_over_flash("an item on flash is counted in the first class, as memcached's extstore header is")
@pytest.mark.parametrize("args", list(EXPECTED), ids=lambda a: " ".join(a) or "default")
def test_each_item_lands_in_memcacheds_class(make_server, args):
    c = make_server([*args, "-m", "64"]).connect()
    got = []
    for i, (klen, vlen, flags, ttl) in enumerate(CASES):
        key = (b"k%d_" % i).ljust(klen, b"x")
        stored(c, key.decode(), b"v" * vlen, flags=flags, exptime=ttl)
        held = classes_of(c)
        assert len(held) == 1, (klen, vlen, flags, ttl, held)
        got.append(held[0])
        expect(c, b"delete %s\r\n" % key, b"DELETED\r\n")
    assert " ".join(got) == EXPECTED[args]
