"""stats detail on|off|dump and -D: per-prefix get/hit/set/del counts.

What counts, as memcached 1.6.18 counts it: classic get/gets/gat/gats
(gets, and hits), set/add/replace/append/prepend/cas and refused too-large
stores (sets), delete (deletes); binary GET, TOUCH and GAT (gets), stores
and DELETE. Meta commands, text touch and incr/decr do not count, nor keys
without the delimiter. memcached lists prefixes in its hash table's order,
strata sorted: the tests compare the lines as sets, END last.
"""

import binlib as b
from wirelib import expect, read_line_or_partial, read_until_end, stats


def dump(c):
    c.send(b"stats detail dump\r\n")
    reply = read_until_end(c)
    lines = reply.split(b"\r\n")
    assert lines[-2:] == [b"END", b""], reply
    return sorted(lines[:-2])


def test_usage_errors(make_server):
    c = make_server().connect()
    for bad in (b"stats detail", b"stats detail bogus", b"stats detail ON"):
        expect(c, bad + b"\r\n", b"CLIENT_ERROR usage: stats detail on|off|dump\r\n")
    # Off by default, and nothing counted yet.
    assert dump(c) == []
    st = stats(c, "settings")
    assert (st["detail_enabled"], st["stat_key_prefix"]) == ("no", ":")


def test_text_commands_counted_by_prefix(make_server):
    c = make_server().connect()
    expect(c, b"stats detail on\r\n", b"OK\r\n")
    assert stats(c, "settings")["detail_enabled"] == "yes"
    expect(c, b"set a:1 0 0 1\r\nx\r\n", b"STORED\r\n")
    expect(c, b"get a:1 a:2 nodelim\r\n", b"VALUE a:1 0 1\r\nx\r\nEND\r\n")
    c.send(b"gets a:1\r\n")
    assert read_until_end(c).startswith(b"VALUE a:1 0 1 ")
    expect(c, b"gat 0 a:1\r\n", b"VALUE a:1 0 1\r\nx\r\nEND\r\n")
    # Not counted: text touch, meta commands, incr.
    expect(c, b"touch a:1 0\r\n", b"TOUCHED\r\n")
    expect(c, b"mg a:1 v\r\nmg a:9 v\r\n", b"VA 1\r\nx\r\nEN\r\n")
    expect(c, b"ms m:1 1\r\ny\r\nmd m:1\r\n", b"HD\r\nHD\r\n")
    expect(c, b"incr c:1 1\r\n", b"NOT_FOUND\r\n")
    expect(c, b"delete a:1\r\ndelete a:1\r\n", b"DELETED\r\nNOT_FOUND\r\n")
    expect(c, b"add a:1 0 0 1\r\nz\r\nappend a:1 0 0 1\r\nz\r\n", b"STORED\r\nSTORED\r\n")
    # A refused too-large store counts as a set.
    big = b"x" * (2 << 20)
    c.send(b"set a:big 0 0 %d\r\n%s\r\n" % (len(big), big))
    assert read_line_or_partial(c) == b"SERVER_ERROR object too large for cache\r\n"
    # An empty prefix is a prefix.
    expect(c, b"set :x 0 0 1\r\nx\r\nget :x\r\n", b"STORED\r\nVALUE :x 0 1\r\nx\r\nEND\r\n")
    assert dump(c) == [b"PREFIX  get 1 hit 1 set 1 del 0", b"PREFIX a get 4 hit 3 set 4 del 2"]
    # Off: the counts stay, nothing more is counted.
    expect(c, b"stats detail off\r\nget a:1\r\n", b"OK\r\nVALUE a:1 0 2\r\nzz\r\nEND\r\n")
    assert dump(c) == [b"PREFIX  get 1 hit 1 set 1 del 0", b"PREFIX a get 4 hit 3 set 4 del 2"]
    # stats reset clears them.
    expect(c, b"stats reset\r\n", b"RESET\r\n")
    assert dump(c) == []


def test_binary_commands_and_binary_stats_detail(make_server):
    srv = make_server()
    bc = srv.connect()
    b.expect(bc, b.request(b.STAT, b"detail on"), b.response(b.STAT))
    b.set_ok(bc, b"b:1", b"v")
    assert b.get_value(bc, b"b:1") is not None
    assert b.get_value(bc, b"b:2") is None
    assert b.call(bc, b.request(b.TOUCH, b"b:1", extras=b.exptime_extras(0))).status == b.SUCCESS
    assert b.call(bc, b.request(b.GAT, b"b:1", extras=b.exptime_extras(0))).status == b.SUCCESS
    assert b.call(bc, b.request(b.APPEND, b"b:1", b"z")).status == b.SUCCESS
    assert b.call(bc, b.request(b.DELETE, b"b:1")).status == b.SUCCESS
    assert b.call(bc, b.arith(b.INCREMENT, b"b:n", 1)).status == b.SUCCESS
    bc.send(b.request(b.STAT, b"detail dump"))
    r = b.read_packet(bc)
    assert (r.status, r.key) == (b.SUCCESS, b"detailed"), r
    assert r.value == b"PREFIX b get 4 hit 3 set 2 del 1\r\nEND\r\n"
    end = b.read_packet(bc)
    assert (end.status, end.keylen, end.bodylen) == (b.SUCCESS, 0, 0)
    b.expect(bc, b.request(b.STAT, b"detail off"), b.response(b.STAT))
    b.expect(bc, b.request(b.STAT, b"detail bogus"), b.error(b.STAT, b.KEY_ENOENT))


def test_delimiter_option_turns_detail_on(make_server):
    c = make_server(["-D", "/"]).connect()
    st = stats(c, "settings")
    assert (st["detail_enabled"], st["stat_key_prefix"]) == ("yes", "/")
    expect(c, b"set b/1 0 0 1\r\nx\r\nset a:1 0 0 1\r\nx\r\n", b"STORED\r\nSTORED\r\n")
    assert dump(c) == [b"PREFIX b get 0 hit 0 set 1 del 0"]
