"""Large values in several TTL classes from several clients at a small -m
(scenario 15's load, by strata-bench): afterwards every item a dump lists
is one a client stored and reads back, and `curr_items` counts exactly
those. Before the fix, an item written into another TTL class's open
segment sealed that segment before the item was linked: the reclaimer or
the other worker could evict and reuse it meanwhile, so the item's index
slot pointed at someone else's bytes: dumps listed keys made of value
bytes, and `curr_items` counted items no get found (two such keys at the
end of every run). Run against memcached too (WIRE_TARGET=memcached).

The reclaimer may go on evicting for a moment after the load (it keeps
segments free ahead of the writers): the counts are compared on a pass
that no eviction ran through. Before that, one run in six or so failed
here on a key listed and evicted before its get (k0, 683 KB, read; three
evictions between the dump and the get, `strata_reclaim_background` up
two, the free segments from 2 to 3)."""

import os
import re
import subprocess

import pytest

from harness import ROOT
from wirelib import READ_TIMEOUT, held_items, value_or_none

pytestmark = pytest.mark.not_over_flash("the dump lists items in memory only")

BENCH = os.environ.get("STRATA_BENCH_BIN", os.path.join(ROOT, "target", "release", "strata-bench"))
KEYS = 100
# strata-bench's keys: "k" and the key's number in thirteen digits.
KEY = re.compile(rb"k(\d{13})")


def test_every_item_listed_is_one_stored_and_counted(make_server):
    srv = make_server(["-m", "16", "-t", "2"])
    load = [BENCH, "run", "-q", "--addr", f"127.0.0.1:{srv.port}", "--mode", "hit-ratio",
            "--key-dist", "zipf:0.9", "--keys", str(KEYS), "--value-size", "100-1000000",
            "--ttls", "0,600,3600,86400", "--connections", "8", "--threads", "2", "--pipeline", "2",
            "--warmup-ops", "5000", "--ops", "15000"]
    done = subprocess.run(load, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    c = srv.connect(timeout=READ_TIMEOUT)

    def listed(key, value):
        m = KEY.fullmatch(key)
        assert m and int(m.group(1)) < KEYS, f"the dump lists {key[:40]!r}, which no client stored"
        assert value is None or value == value_or_none(c, key), f"{key!r} reads back two values"

    values, st = held_items(c, listed)
    assert values, "the dump lists nothing"
    keys = list(values)
    assert all(v is not None for v in values.values()), [k for k, v in values.items() if v is None]
    assert int(st["curr_items"]) == len(keys), (st["curr_items"], len(keys))
    # The load reached what the test is about: memory full, evicting.
    assert int(st["evictions"]) > 1000, st["evictions"]
    c.close()
