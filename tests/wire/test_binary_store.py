"""Binary protocol SET, ADD, REPLACE, APPEND, PREPEND and their quiet forms:
success replies, CAS compare-and-swap, exptime, too-large values and bad
extras."""

import time

import pytest

from binlib import (
    ADD,
    ADDQ,
    APPEND,
    APPENDQ,
    E2BIG,
    EINVAL,
    GET,
    KEY_EEXISTS,
    KEY_ENOENT,
    NOOP,
    NOT_STORED,
    PREPEND,
    PREPENDQ,
    REPLACE,
    REPLACEQ,
    SET,
    SETQ,
    SUCCESS,
    assert_closed,
    assert_in_sync,
    call,
    error,
    expect,
    flags_extras,
    fresh_conn,
    get_value,
    parse,
    read_raw,
    request,
    response,
    set_ok,
    store,
    store_extras,
    text_ttl,
)

TOO_BIG = 1024 * 1024 + 10  # over the default -I 1m, item overhead aside


@pytest.fixture
def bconn(server):
    yield from fresh_conn(server)


# ---------------------------------------------------------------- SET


def test_set_reply_is_empty_success_with_new_cas(bconn):
    bconn.send(store(SET, "k", b"v", opaque=0x11223344))
    raw = read_raw(bconn)
    cas = parse(raw).cas
    assert cas != 0
    assert raw == response(SET, opaque=0x11223344, cas=cas)


def test_set_stores_value_and_flags(bconn):
    cas = set_ok(bconn, "k", b"value", flags=0xFFFFFFFF)
    assert get_value(bconn, "k") == (0xFFFFFFFF, b"value", cas)


def test_set_overwrites(bconn):
    set_ok(bconn, "k", b"old", flags=1)
    cas = set_ok(bconn, "k", b"new", flags=2)
    assert get_value(bconn, "k") == (2, b"new", cas)


def test_setq_success_is_silent(bconn):
    bconn.send(store(SETQ, "k", b"v", flags=4))
    assert_in_sync(bconn)
    assert get_value(bconn, "k")[:2] == (4, b"v")


def test_setq_pipeline_only_noop_answers(bconn):
    bconn.send(b"".join(store(SETQ, "k%d" % i, b"v%d" % i, opaque=i) for i in range(100)) + request(NOOP, opaque=1))
    assert read_raw(bconn) == response(NOOP, opaque=1)
    for i in (0, 57, 99):
        assert get_value(bconn, "k%d" % i)[1] == b"v%d" % i


def test_set_empty_value(bconn):
    set_ok(bconn, "k", b"")
    assert get_value(bconn, "k")[:2] == (0, b"")


# ---------------------------------------------------------------- ADD / REPLACE


def test_add_new_key_succeeds(bconn):
    r = call(bconn, store(ADD, "k", b"v", opaque=5))
    assert (r.status, r.bodylen, r.opaque) == (SUCCESS, 0, 5) and r.cas != 0
    assert get_value(bconn, "k") == (0, b"v", r.cas)


def test_add_existing_key_is_exists(bconn):
    set_ok(bconn, "k", b"v")
    expect(bconn, store(ADD, "k", b"other", opaque=6), error(ADD, KEY_EEXISTS, opaque=6))
    assert get_value(bconn, "k")[1] == b"v"


def test_addq_error_is_still_answered(bconn):
    set_ok(bconn, "k", b"v")
    expect(bconn, store(ADDQ, "k", b"other", opaque=6), error(ADDQ, KEY_EEXISTS, opaque=6))
    assert_in_sync(bconn)


def test_addq_success_is_silent(bconn):
    bconn.send(store(ADDQ, "k", b"v"))
    assert_in_sync(bconn)
    assert get_value(bconn, "k")[1] == b"v"


def test_replace_missing_key_is_not_found(bconn):
    expect(bconn, store(REPLACE, "k", b"v", opaque=7), error(REPLACE, KEY_ENOENT, opaque=7))
    assert get_value(bconn, "k") is None


def test_replace_existing_key(bconn):
    set_ok(bconn, "k", b"v", flags=1)
    r = call(bconn, store(REPLACE, "k", b"new", flags=9))
    assert (r.status, r.bodylen) == (SUCCESS, 0)
    assert get_value(bconn, "k") == (9, b"new", r.cas)


def test_replaceq_error_is_answered_and_success_is_silent(bconn):
    expect(bconn, store(REPLACEQ, "k", b"v", opaque=8), error(REPLACEQ, KEY_ENOENT, opaque=8))
    set_ok(bconn, "k", b"v")
    bconn.send(store(REPLACEQ, "k", b"w"))
    assert_in_sync(bconn)
    assert get_value(bconn, "k")[1] == b"w"


# ---------------------------------------------------------------- APPEND / PREPEND


def test_append_and_prepend_keep_flags(bconn):
    set_ok(bconn, "k", b"mid", flags=33)
    r = call(bconn, request(APPEND, "k", b"-end", opaque=1))
    assert (r.status, r.bodylen, r.opaque) == (SUCCESS, 0, 1) and r.cas != 0
    r = call(bconn, request(PREPEND, "k", b"start-", opaque=2))
    assert (r.status, r.bodylen, r.opaque) == (SUCCESS, 0, 2) and r.cas != 0
    assert get_value(bconn, "k") == (33, b"start-mid-end", r.cas)


def test_append_missing_key_is_not_stored(bconn):
    expect(bconn, request(APPEND, "k", b"x", opaque=3), error(APPEND, NOT_STORED, opaque=3))
    expect(bconn, request(PREPEND, "k", b"x", opaque=4), error(PREPEND, NOT_STORED, opaque=4))
    assert get_value(bconn, "k") is None


def test_appendq_prependq_success_is_silent_error_answered(bconn):
    expect(bconn, request(APPENDQ, "k", b"x", opaque=3), error(APPENDQ, NOT_STORED, opaque=3))
    expect(bconn, request(PREPENDQ, "k", b"x", opaque=4), error(PREPENDQ, NOT_STORED, opaque=4))
    set_ok(bconn, "k", b"b")
    bconn.send(request(APPENDQ, "k", b"c") + request(PREPENDQ, "k", b"a"))
    assert_in_sync(bconn)
    assert get_value(bconn, "k")[1] == b"abc"


def test_append_with_extras_is_invalid_and_closes(bconn):
    set_ok(bconn, "k", b"v")
    expect(bconn, request(APPEND, "k", b"x", extras=store_extras()), error(APPEND, EINVAL))
    assert_closed(bconn)


# ---------------------------------------------------------------- CAS


def test_set_with_matching_cas_succeeds(bconn):
    cas = set_ok(bconn, "k", b"v1")
    r = call(bconn, store(SET, "k", b"v2", cas=cas))
    assert (r.status, r.bodylen) == (SUCCESS, 0)
    assert r.cas not in (0, cas)
    assert get_value(bconn, "k") == (0, b"v2", r.cas)


def test_set_with_stale_cas_is_exists(bconn):
    cas = set_ok(bconn, "k", b"v1")
    set_ok(bconn, "k", b"v2")
    expect(bconn, store(SET, "k", b"v3", cas=cas, opaque=2), error(SET, KEY_EEXISTS, opaque=2))
    assert get_value(bconn, "k")[1] == b"v2"


def test_set_with_cas_on_missing_key_is_not_found(bconn):
    expect(bconn, store(SET, "k", b"v", cas=12345, opaque=3), error(SET, KEY_ENOENT, opaque=3))
    assert get_value(bconn, "k") is None


def test_setq_cas_mismatch_is_answered(bconn):
    set_ok(bconn, "k", b"v1")
    expect(bconn, store(SETQ, "k", b"v3", cas=1, opaque=2), error(SETQ, KEY_EEXISTS, opaque=2))


def test_add_with_matching_cas_replaces(bconn):
    # memcached turns any update with a CAS into a compare-and-swap, ADD too.
    cas = set_ok(bconn, "k", b"v1")
    r = call(bconn, store(ADD, "k", b"v2", cas=cas))
    assert (r.status, r.bodylen) == (SUCCESS, 0)
    assert get_value(bconn, "k")[1] == b"v2"


def test_add_with_cas_on_missing_key_is_not_found(bconn):
    expect(bconn, store(ADD, "k", b"v", cas=99), error(ADD, KEY_ENOENT))


def test_replace_with_stale_cas_is_exists(bconn):
    set_ok(bconn, "k", b"v1")
    expect(bconn, store(REPLACE, "k", b"v2", cas=1), error(REPLACE, KEY_EEXISTS))
    assert get_value(bconn, "k")[1] == b"v1"


def test_append_with_stale_cas_is_exists(bconn):
    set_ok(bconn, "k", b"v")
    expect(bconn, request(APPEND, "k", b"w", cas=1), error(APPEND, KEY_EEXISTS))
    assert get_value(bconn, "k")[1] == b"v"


def test_append_with_matching_cas(bconn):
    cas = set_ok(bconn, "k", b"v")
    r = call(bconn, request(APPEND, "k", b"w", cas=cas))
    assert (r.status, r.bodylen) == (SUCCESS, 0)
    assert get_value(bconn, "k")[1] == b"vw"


# ---------------------------------------------------------------- exptime


def test_set_with_relative_exptime(server, bconn):
    set_ok(bconn, "k", b"v", exptime=100)
    assert 98 <= text_ttl(server, "k") <= 100


def test_set_with_zero_exptime_never_expires(server, bconn):
    set_ok(bconn, "k", b"v", exptime=0)
    assert text_ttl(server, "k") == -1


def test_set_with_absolute_exptime_in_the_future(server, bconn):
    set_ok(bconn, "k", b"v", exptime=int(time.time()) + 1000)
    assert 990 <= text_ttl(server, "k") <= 1001


def test_set_with_absolute_exptime_in_the_past_is_gone(bconn):
    r = call(bconn, store(SET, "k", b"v", exptime=int(time.time()) - 1000))
    assert r.status == SUCCESS
    assert get_value(bconn, "k") is None


# ---------------------------------------------------------------- too large


def test_too_large_value_is_e2big_and_connection_stays(bconn):
    expect(bconn, store(SET, "big", b"x" * TOO_BIG, opaque=9), error(SET, E2BIG, opaque=9))
    assert_in_sync(bconn)
    assert get_value(bconn, "big") is None


def test_too_large_setq_is_answered(bconn):
    expect(bconn, store(SETQ, "big", b"x" * TOO_BIG, opaque=9), error(SETQ, E2BIG, opaque=9))
    assert_in_sync(bconn)


def test_too_large_value_that_looks_like_packets_is_swallowed(bconn):
    noop = request(NOOP, opaque=0xBAD)
    value = (noop * (TOO_BIG // len(noop) + 1))[:TOO_BIG]
    expect(bconn, store(SET, "big", value), error(SET, E2BIG))
    assert_in_sync(bconn)


def test_too_large_set_removes_existing_value(bconn):
    set_ok(bconn, "k", b"old")
    expect(bconn, store(SET, "k", b"x" * TOO_BIG), error(SET, E2BIG))
    assert get_value(bconn, "k") is None


def test_too_large_replace_and_append_keep_existing_value(bconn):
    set_ok(bconn, "k", b"old")
    expect(bconn, store(REPLACE, "k", b"x" * TOO_BIG), error(REPLACE, E2BIG))
    expect(bconn, request(APPEND, "k", b"x" * TOO_BIG), error(APPEND, E2BIG))
    assert get_value(bconn, "k")[1] == b"old"


def test_value_just_under_limit_is_stored(bconn):
    value = b"y" * (1024 * 1024 - 512)
    cas = set_ok(bconn, "k", value)
    expect(bconn, request(GET, "k"), response(GET, extras=flags_extras(0), value=value, cas=cas))


# ---------------------------------------------------------------- bad extras


@pytest.mark.parametrize("extras", [b"", b"\0" * 4, b"\0" * 12], ids=["none", "4", "12"])
def test_set_with_wrong_extras_length_is_invalid_and_closes(bconn, extras):
    expect(bconn, request(SET, "k", b"v", extras=extras, opaque=5), error(SET, EINVAL, opaque=5))
    assert_closed(bconn)


@pytest.mark.parametrize("opcode", [ADD, REPLACE, SETQ])
def test_other_stores_with_wrong_extras_are_invalid(bconn, opcode):
    expect(bconn, request(opcode, "k", b"v", extras=b"\0" * 4), error(opcode, EINVAL))
    assert_closed(bconn)


def test_set_without_key_is_invalid_and_closes(bconn):
    expect(bconn, request(SET, b"", b"v", extras=store_extras()), error(SET, EINVAL))
    assert_closed(bconn)


def test_set_key_too_long_is_invalid_and_closes(bconn):
    expect(bconn, store(SET, b"k" * 251, b"v"), error(SET, EINVAL))
    assert_closed(bconn)
