"""`stats extstore`: memcached's lines for each extstore page, a flash
region standing for a page here (issue 43, item 4). Against both servers:
the same names for every page, nothing without a flash file.
"""

import pytest

from wirelib import expect, stats, target

pytestmark = pytest.mark.not_over_flash("starts its own servers with and without a flash file")

FIELDS = ("version", "bytes", "bucket", "free_bucket")


def pages(c):
    """The pages listed, as {page: {field: int}}; asserts every page has
    all four lines and pages are numbered from 0 without a gap."""
    s = stats(c, "extstore")
    out = {}
    for k, v in s.items():
        page, field = k.split(":")
        out.setdefault(int(page), {})[field] = int(v)
    assert sorted(out) == list(range(len(out))), s
    assert all(set(p) == set(FIELDS) for p in out.values()), s
    return out


def test_without_a_flash_file_it_lists_no_page(make_server):
    c = make_server().connect()
    expect(c, b"stats extstore\r\n", b"END\r\n")


def test_with_a_flash_file_it_lists_every_page(make_server, tmp_path):
    path = tmp_path / "ext"
    srv = make_server(["-o", f"ext_path={path}:64m"])
    c = srv.connect()
    expect(c, b"set a 0 0 3\r\nabc\r\n", b"STORED\r\n")
    got = pages(c)
    assert got, "at least the page being written"
    assert all(p["bucket"] == 0 and p["free_bucket"] == 0 for p in got.values()), got
    if target() == "strata":
        # Every item goes to flash at once: its region has bytes, and a
        # generation once written to.
        srv2 = make_server(["-o", f"ext_path={path}2:64m,ext_item_size=0", "--debug-flash-writes"])
        c2 = srv2.connect()
        expect(c2, b"set b 0 0 3\r\nxyz\r\n", b"STORED\r\n")
        written = [p for p in pages(c2).values() if p["bytes"] > 0]
        assert written and all(p["version"] > 0 for p in written), pages(c2)
