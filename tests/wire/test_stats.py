"""stats and its groups; counters move with known operations."""

import os
import time

import pytest

from harness import target
from wirelib import advance_clock, assert_flag_settings, assert_in_sync, assert_stats_shape, expect, read_until_end, stats, stored

GENERAL_FIELDS = [
    "pid", "uptime", "time", "version", "pointer_size", "rusage_user", "rusage_system",
    "max_connections", "curr_connections", "total_connections", "rejected_connections",
    "connection_structures",
    "cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "cmd_meta",
    "get_hits", "get_misses", "get_expired", "get_flushed",
    "delete_misses", "delete_hits", "incr_misses", "incr_hits", "decr_misses", "decr_hits",
    "cas_misses", "cas_hits", "cas_badval", "touch_hits", "touch_misses",
    "bytes_read", "bytes_written", "limit_maxbytes", "accepting_conns", "threads",
    "bytes", "curr_items", "total_items", "evictions", "reclaimed",
    "conn_yields", "hash_is_expanding", "slab_global_page_pool", "expired_unfetched", "evicted_unfetched",
]

COUNTERS = [
    "cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "cmd_meta", "get_hits", "get_misses", "get_flushed",
    "delete_hits", "delete_misses", "incr_hits", "incr_misses", "decr_hits", "decr_misses",
    "cas_hits", "cas_misses", "cas_badval", "touch_hits", "touch_misses",
]


@pytest.fixture
def sconn(server):
    """A connection whose operations are the only ones on the server during the test."""
    c = server.connect(timeout=2.0)
    yield c
    c.close()


def default_threads():
    """memcached defaults to 4 worker threads; strata to one per core (DESIGN 7)."""
    return "4" if target() == "memcached" else str(os.cpu_count())


def delta(before, after, names=COUNTERS):
    return {n: int(after[n]) - int(before[n]) for n in names}


def do(c, line, terminator=b"\r\n"):
    c.send(line)
    return c.read_until(terminator)


def test_general_stats_has_standard_fields(sconn):
    s = stats(sconn)
    missing = [f for f in GENERAL_FIELDS if f not in s]
    assert missing == []


def test_general_stats_values_are_plausible(sconn, server):
    s = stats(sconn)
    assert int(s["pid"]) == server.pid()
    assert abs(int(s["time"]) - time.time()) < 5
    assert int(s["uptime"]) >= 0
    assert s["limit_maxbytes"] == str(64 * 1024 * 1024)
    assert s["threads"] == default_threads()
    assert s["max_connections"] == "1024"
    assert s["accepting_conns"] == "1"
    assert s["pointer_size"] == "64"


def test_stats_reply_shape(sconn):
    sconn.send(b"stats\r\n")
    assert_stats_shape(read_until_end(sconn))


def test_get_hits_and_misses(sconn):
    stored(sconn, "st_a", b"1")
    stored(sconn, "st_b", b"2")
    before = stats(sconn)
    do(sconn, b"get st_a\r\n", b"END\r\n")
    do(sconn, b"get st_b st_missing\r\n", b"END\r\n")
    d = delta(before, stats(sconn))
    assert d["cmd_get"] == 3
    assert d["get_hits"] == 2
    assert d["get_misses"] == 1


def test_gets_counts_like_get(sconn):
    stored(sconn, "st_a", b"1")
    before = stats(sconn)
    do(sconn, b"gets st_a st_missing\r\n", b"END\r\n")
    d = delta(before, stats(sconn))
    assert (d["cmd_get"], d["get_hits"], d["get_misses"]) == (2, 1, 1)


def test_set_family_counts_cmd_set(sconn):
    before = stats(sconn)
    stored(sconn, "st_s", b"1")
    do(sconn, b"add st_s 0 0 1\r\n1\r\n")
    do(sconn, b"replace st_s 0 0 1\r\n1\r\n")
    do(sconn, b"append st_s 0 0 1\r\n1\r\n")
    do(sconn, b"prepend st_s 0 0 1\r\n1\r\n")
    assert delta(before, stats(sconn))["cmd_set"] == 5


def test_delete_hits_and_misses(sconn):
    stored(sconn, "st_d", b"1")
    before = stats(sconn)
    do(sconn, b"delete st_d\r\n")
    do(sconn, b"delete st_d\r\n")
    d = delta(before, stats(sconn))
    assert (d["delete_hits"], d["delete_misses"]) == (1, 1)


def test_incr_decr_hits_and_misses(sconn):
    stored(sconn, "st_n", b"5")
    before = stats(sconn)
    do(sconn, b"incr st_n 1\r\n")
    do(sconn, b"incr st_n 1\r\n")
    do(sconn, b"incr st_nope 1\r\n")
    do(sconn, b"decr st_n 1\r\n")
    do(sconn, b"decr st_nope 1\r\n")
    do(sconn, b"decr st_nope 1\r\n")
    d = delta(before, stats(sconn))
    assert (d["incr_hits"], d["incr_misses"], d["decr_hits"], d["decr_misses"]) == (2, 1, 1, 2)


def test_cas_hits_misses_and_badval(sconn):
    stored(sconn, "st_c", b"1")
    reply = do(sconn, b"gets st_c\r\n", b"END\r\n")
    cas = int(reply.split(b"\r\n")[0].split()[4])
    before = stats(sconn)
    do(sconn, b"cas st_c 0 0 1 %d\r\n2\r\n" % cas)
    do(sconn, b"cas st_c 0 0 1 %d\r\n3\r\n" % cas)
    do(sconn, b"cas st_nope 0 0 1 1\r\n3\r\n")
    d = delta(before, stats(sconn))
    assert (d["cas_hits"], d["cas_badval"], d["cas_misses"]) == (1, 1, 1)
    assert d["cmd_set"] == 3


def test_touch_and_gat_count_as_touches_not_gets(sconn):
    stored(sconn, "st_t", b"1")
    before = stats(sconn)
    do(sconn, b"touch st_t 0\r\n")
    do(sconn, b"touch st_nope 0\r\n")
    do(sconn, b"gat 0 st_t st_nope\r\n", b"END\r\n")
    do(sconn, b"gats 0 st_t\r\n", b"END\r\n")
    d = delta(before, stats(sconn))
    assert (d["cmd_touch"], d["touch_hits"], d["touch_misses"]) == (5, 3, 2)
    assert (d["cmd_get"], d["get_hits"], d["get_misses"]) == (0, 0, 0)


def test_cmd_meta_counts_meta_debug_only(sconn):
    """memcached 1.6.18's cmd_meta: `me` only; the other meta commands
    count as gets, sets, deletes and incrs."""
    stored(sconn, "st_m", b"1")
    before = stats(sconn)
    sconn.send(b"mg st_m v\r\nms st_m 1\r\n2\r\nma st_m\r\nmn\r\n")
    assert read_until_end(sconn, terminator=b"MN\r\n") == b"VA 1\r\n1\r\nHD\r\nHD\r\nMN\r\n"
    sconn.send(b"me st_m\r\nme st_nope\r\n")
    assert read_until_end(sconn, terminator=b"EN\r\n").startswith(b"ME st_m ")
    d = delta(before, stats(sconn))
    assert (d["cmd_meta"], d["cmd_get"], d["cmd_set"]) == (2, 1, 1)


def test_flush_counts_cmd_flush(sconn):
    # (get_flushed is not checked: memcached's LRU maintainer may reap the
    # flushed item before the get sees it, so that count is not deterministic.)
    stored(sconn, "st_f", b"1")
    before = stats(sconn)
    do(sconn, b"flush_all\r\n")
    do(sconn, b"get st_f\r\n", b"END\r\n")
    d = delta(before, stats(sconn))
    assert (d["cmd_flush"], d["get_hits"], d["get_misses"]) == (1, 0, 1)


@pytest.mark.not_over_flash("bytes counts items in memory only")
def test_item_counts(make_server):
    c = make_server().connect(timeout=2.0)
    before = stats(c)
    assert (before["curr_items"], before["total_items"], before["bytes"]) == ("0", "0", "0")
    for k in (b"st_i1", b"st_i2", b"st_i3"):
        stored(c, k, b"xyz")
    stored(c, "st_i1", b"xyz")
    mid = stats(c)
    assert mid["curr_items"] == "3"
    assert mid["total_items"] == "4"
    assert int(mid["bytes"]) > 0
    do(c, b"delete st_i2\r\n")
    after = stats(c)
    assert after["curr_items"] == "2"
    assert 0 < int(after["bytes"]) < int(mid["bytes"])


def settled_curr_connections(c):
    """curr_connections once connections closed by earlier tests are gone."""
    last = None
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        now = stats(c)["curr_connections"]
        if now == last:
            return int(now)
        last = now
        time.sleep(0.1)
    return int(last)


def wait_curr_connections(c, want):
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        got = int(stats(c)["curr_connections"])
        if got == want:
            return got
        time.sleep(0.05)
    return got


def test_connection_counts(sconn, server):
    base = settled_curr_connections(sconn)
    total_before = int(stats(sconn)["total_connections"])
    extra = [server.connect(timeout=2.0) for _ in range(2)]
    for c in extra:
        assert_in_sync(c)
    assert wait_curr_connections(sconn, base + 2) == base + 2
    assert int(stats(sconn)["total_connections"]) - total_before == 2
    for c in extra:
        c.close()
    assert wait_curr_connections(sconn, base) == base


def test_stats_reset_zeroes_counters(sconn):
    stored(sconn, "st_r", b"1")
    do(sconn, b"get st_r st_nope\r\n", b"END\r\n")
    expect(sconn, b"stats reset\r\n", b"RESET\r\n")
    s = stats(sconn)
    for name in COUNTERS:
        assert s[name] == "0", name
    assert s["total_items"] == "0"
    # Gauges are not reset.
    assert int(s["curr_items"]) >= 1


def test_stats_reset_ignores_extra_arguments(sconn):
    expect(sconn, b"stats reset extra\r\n", b"RESET\r\n")


def test_unknown_stats_group_is_error(sconn):
    expect(sconn, b"stats foo\r\n", b"ERROR\r\n")
    expect(sconn, b"stats a b c\r\n", b"ERROR\r\n")
    expect(sconn, b"stats RESET\r\n", b"ERROR\r\n")
    assert_in_sync(sconn)


@pytest.mark.parametrize("group", ["items", "slabs", "conns"])
def test_stats_group_shape(sconn, group):
    stored(sconn, "st_g", b"1")
    sconn.send(b"stats " + group.encode() + b"\r\n")
    assert_stats_shape(read_until_end(sconn))


def test_stats_settings_shape(sconn):
    sconn.send(b"stats settings\r\n")
    assert_stats_shape(read_until_end(sconn))


def test_stats_settings_defaults(sconn, server):
    s = stats(sconn, "settings")
    assert s["maxbytes"] == str(64 * 1024 * 1024)
    assert s["maxconns"] == "1024"
    assert s["tcpport"] == str(server.port)
    assert s["udpport"] == "0"
    assert s["verbosity"] == "0"
    assert s["evictions"] == "on"
    assert s["domain_socket"] == "NULL"
    assert s["umask"] == "700"
    assert s["shutdown_command"] == "no"
    assert s["num_threads"] == default_threads()
    assert s["reqs_per_event"] == "20"
    assert s["cas_enabled"] == "yes"
    assert s["tcp_backlog"] == "1024"
    assert s["item_size_max"] == "1048576"
    assert s["flush_enabled"] == "yes"


def test_stats_settings_reflect_flags(make_server):
    srv = make_server(["-m", "100", "-c", "500", "-t", "2", "-I", "2m", "-C", "-M", "-A", "-F",
                       "-R", "7", "-b", "99", "-v"])
    c = srv.connect(timeout=2.0)
    s = assert_flag_settings(c)
    assert s["tcpport"] == str(srv.port)
    assert s["verbosity"] == "1"
    g = stats(c)
    assert g["limit_maxbytes"] == str(100 * 1024 * 1024)
    assert g["threads"] == "2"
    assert g["max_connections"] == "500"


def test_verbosity_command_shows_in_stats_settings(sconn):
    expect(sconn, b"verbosity 2\r\n", b"OK\r\n")
    assert stats(sconn, "settings")["verbosity"] == "2"
    expect(sconn, b"verbosity 0\r\n", b"OK\r\n")
    assert stats(sconn, "settings")["verbosity"] == "0"


@pytest.mark.not_over_flash("without extstore: the flash pass gives the server a flash file (test_stats_extstore.py)")
def test_sizes_and_extstore_groups_answer_as_memcached_without_them(sconn):
    """memcached without -o track_sizes and without extstore: monitoring
    that asks for these groups gets a reply, not ERROR."""
    expect(sconn, b"stats sizes\r\n", b"STAT sizes_status disabled\r\nEND\r\n")
    expect(sconn, b"stats extstore\r\n", b"END\r\n")
    assert_in_sync(sconn)


def test_total_malloced_stays_within_the_memory_limit(make_server):
    """Monitoring compares total_malloced with limit_maxbytes: strata used to
    count the reserve above -m as malloced (192 MiB of a 64 MiB limit)."""
    c = make_server(["-m", "64"]).connect()
    for i in range(200):
        stored(c, b"k%d" % i, b"v" * 1000)
    malloced = int(stats(c, "slabs")["total_malloced"])
    assert 0 < malloced <= int(stats(c)["limit_maxbytes"]) == 64 << 20


def class_sum(group, field):
    """A per-class field summed over the classes (memcached's slab classes,
    strata's size bands)."""
    return sum(int(v) for k, v in group.items() if k.split(":")[-1] == field)


def test_conn_yields_counts_turns_given_up_at_r(make_server):
    c = make_server(["-R", "2"]).connect()
    stored(c, "k", b"v")
    c.send(b"get k\r\n" * 40)
    assert read_until_end(c, terminator=b"END\r\n" * 40).count(b"VALUE") == 40
    assert int(stats(c)["conn_yields"]) >= 1


@pytest.mark.not_over_flash("items go to flash rather than being evicted")
def test_eviction_detail_in_stats_and_stats_items(make_server):
    c = make_server(["-m", "8"]).connect()
    value = b"x" * 10000
    # Every item has an expiry time and none is read: each eviction is of an
    # unfetched item with a non-zero expiry.
    c.send(b"".join(b"set k%d 0 1000 %d noreply\r\n%s\r\n" % (i, len(value), value) for i in range(3000)))
    assert_in_sync(c)
    g, items = stats(c), stats(c, "items")
    evicted = int(g["evictions"])
    assert evicted > 0
    assert int(g["evicted_unfetched"]) == evicted
    assert class_sum(items, "evicted") == evicted
    assert class_sum(items, "evicted_nonzero") == evicted
    assert class_sum(items, "evicted_unfetched") == evicted
    assert class_sum(items, "outofmemory") == 0
    assert class_sum(items, "mem_requested") > 0
    for field in ("age", "evicted_time", "expired_unfetched", "reclaimed", "number"):
        assert any(k.endswith(":" + field) for k in items), field


@pytest.mark.strata_only
@pytest.mark.not_over_flash("age is of the items in memory, and over flash every item is written out at once")
def test_items_age_is_the_oldest_items(make_server):
    c = make_server(["--enable-debug-clock"]).connect()
    stored(c, "old", b"v")
    advance_clock(c, 100)
    stored(c, "new", b"v")
    assert 100 <= int(stats(c, "items")["items:1:age"]) <= 101


@pytest.mark.memcached_only
def test_per_class_counters_in_stats_slabs(make_server):
    """memcached counts commands per slab class; strata counts them only in
    `stats` (docs/protocol.md: a size band is not where a request goes)."""
    c = make_server().connect()
    stored(c, "k", b"1")
    expect(c, b"get k\r\nincr k 1\r\ndecr k 1\r\ntouch k 0\r\ndelete k\r\n",
           b"VALUE k 0 1\r\n1\r\nEND\r\n2\r\n1\r\nTOUCHED\r\nDELETED\r\n")
    slabs = stats(c, "slabs")
    counts = {f: class_sum(slabs, f) for f in ("get_hits", "cmd_set", "incr_hits", "decr_hits", "touch_hits",
                                                "delete_hits", "cas_hits", "cas_badval")}
    assert counts == {"get_hits": 1, "cmd_set": 1, "incr_hits": 1, "decr_hits": 1, "touch_hits": 1,
                      "delete_hits": 1, "cas_hits": 0, "cas_badval": 0}


def test_x_refuses_the_key_dumps(make_server):
    c = make_server(["-X"]).connect()
    stored(c, "k", b"v")
    expect(c, b"stats cachedump 1 1\r\n", b"CLIENT_ERROR stats cachedump not allowed\r\n")
    expect(c, b"lru_crawler metadump all\r\n", b"ERROR metadump not allowed\r\n")
    assert stats(c, "settings")["dump_enabled"] == "no"
    assert_in_sync(c)


@pytest.mark.strata_only
def test_x_refuses_mgdump(make_server):
    c = make_server(["-X"]).connect()
    expect(c, b"lru_crawler mgdump all\r\n", b"ERROR key dump not allowed\r\n")


def test_settings_name_the_machinery(sconn):
    s = stats(sconn, "settings")
    assert (s["dump_enabled"], s["maxconns_fast"]) == ("yes", "yes")
    if target() == "strata":
        # The crawler exists (lru_crawler crawl); slab reassignment does not.
        assert (s["lru_crawler"], s["slab_reassign"], s["slab_automove"], s["track_sizes"]) == ("yes", "no", "0", "no")
        assert s["hash_algorithm"] == "ahash"


# memcached 1.6.18's `stats settings` keys, in its order (Debian's build,
# extstore and TLS compiled in; the ext_* keys print with no ext_path).
MEMCACHED_SETTINGS = [
    "maxbytes", "maxconns", "tcpport", "udpport", "inter", "verbosity", "oldest", "evictions",
    "domain_socket", "umask", "shutdown_command", "growth_factor", "chunk_size", "num_threads",
    "num_threads_per_udp", "stat_key_prefix", "detail_enabled", "reqs_per_event", "cas_enabled",
    "tcp_backlog", "binding_protocol", "auth_enabled_sasl", "auth_enabled_ascii", "item_size_max",
    "maxconns_fast", "hashpower_init", "slab_reassign", "slab_automove", "slab_automove_ratio",
    "slab_automove_window", "slab_chunk_max", "lru_crawler", "lru_crawler_sleep", "lru_crawler_tocrawl",
    "tail_repair_time", "flush_enabled", "dump_enabled", "hash_algorithm", "lru_maintainer_thread",
    "lru_segmented", "hot_lru_pct", "warm_lru_pct", "hot_max_factor", "warm_max_factor", "temp_lru",
    "temporary_ttl", "idle_timeout", "watcher_logbuf_size", "worker_logbuf_size", "read_buf_mem_limit",
    "track_sizes", "inline_ascii_response", "ext_item_size", "ext_item_age", "ext_low_ttl",
    "ext_recache_rate", "ext_wbuf_size", "ext_compact_under", "ext_drop_under", "ext_max_sleep",
    "ext_max_frag", "slab_automove_freeratio", "ext_drop_unread", "ssl_enabled", "ssl_chain_cert",
    "ssl_key", "ssl_verify_mode", "ssl_keyformat", "ssl_ciphers", "ssl_ca_cert", "ssl_wbuf_size",
    "ssl_session_cache", "ssl_kernel_tls", "ssl_min_version", "num_napi_ids", "memory_file",
]
# The ones strata leaves out (docs/compat.md, "Settings").
NOT_IN_STRATA = {"ssl_wbuf_size", "ssl_session_cache", "ssl_kernel_tls", "num_napi_ids", "memory_file"}


def test_settings_has_memcached_keys_in_memcached_order(sconn):
    keys = list(stats(sconn, "settings"))
    want = [k for k in MEMCACHED_SETTINGS if target() != "strata" or k not in NOT_IN_STRATA]
    assert [k for k in keys if k in MEMCACHED_SETTINGS] == want


@pytest.mark.not_over_flash("the flash tier's own values show there")
def test_settings_show_extstore_defaults_without_a_flash_tier(sconn):
    s = stats(sconn, "settings")
    assert {k: s[k] for k in MEMCACHED_SETTINGS if k.startswith("ext_") or k == "slab_automove_freeratio"} == {
        "ext_item_size": "512", "ext_item_age": "4294967295", "ext_low_ttl": "0", "ext_recache_rate": "2000",
        "ext_wbuf_size": "4194304", "ext_compact_under": "0", "ext_drop_under": "0", "ext_max_sleep": "1000000",
        "ext_max_frag": "0.80", "slab_automove_freeratio": "0.010", "ext_drop_unread": "no",
    }
    assert (s["inline_ascii_response"], s["tail_repair_time"], s["worker_logbuf_size"]) == ("no", "0", "65536")
    assert s["slab_chunk_max"] == "524288"


def test_settings_oldest_follows_flush_all(make_server):
    c = make_server().connect(timeout=2.0)
    assert stats(c, "settings")["oldest"] == "0"
    expect(c, b"flush_all 100\r\n", b"OK\r\n")
    later = int(stats(c, "settings")["oldest"])
    assert later > 0
    expect(c, b"flush_all\r\n", b"OK\r\n")
    assert 0 <= int(stats(c, "settings")["oldest"]) < later
