"""`stats sizes`, `stats sizes_enable`, `stats sizes_disable`: memcached's
item size histogram (issue 43). Replies as Debian's memcached 1.6.18 gives
them for the same requests: items counted only while tracking is on, by
memcached's size for them (48-byte header, key and NUL, flags when not
zero, value and CRLF, 8 bytes of CAS) rounded up to 32 bytes; the switch
answers one STAT line and no END.
"""

import pytest

from wirelib import expect, stats, stored


@pytest.mark.not_over_flash("items on flash are not counted by size")
def test_sizes_are_counted_while_tracking_is_on(make_server):
    c = make_server().connect()
    expect(c, b"stats sizes\r\n", b"STAT sizes_status disabled\r\nEND\r\n")
    stored(c, "a", b"hello")
    expect(c, b"stats sizes_enable\r\n", b"STAT sizes_status enabled\r\n")
    stored(c, "b", b"x" * 100)
    stored(c, "c", b"x" * 100, flags=5)
    # "a" was stored before: not counted. b: 48 + 2 + 102 + 8 = 160; c: 164.
    expect(c, b"stats sizes\r\n", b"STAT 160 1\r\nSTAT 192 1\r\nEND\r\n")
    expect(c, b"delete b\r\n", b"DELETED\r\n")
    expect(c, b"delete a\r\n", b"DELETED\r\n")
    expect(c, b"stats sizes\r\n", b"STAT 192 1\r\nEND\r\n")
    expect(c, b"stats sizes_disable\r\n", b"STAT sizes_status disabled\r\n")
    expect(c, b"stats sizes\r\n", b"STAT sizes_status disabled\r\nEND\r\n")
    # On again: from nothing.
    expect(c, b"stats sizes_enable\r\n", b"STAT sizes_status enabled\r\n")
    expect(c, b"stats sizes\r\n", b"END\r\n")
    expect(c, b"stats sizes_bogus\r\n", b"ERROR\r\n")


@pytest.mark.not_over_flash("items on flash are not counted by size")
def test_track_sizes_counts_from_the_start(make_server):
    c = make_server(["-o", "track_sizes"]).connect()
    assert stats(c, "settings")["track_sizes"] == "yes"
    stored(c, "b", b"x" * 100)
    expect(c, b"stats sizes\r\n", b"STAT 160 1\r\nEND\r\n")
