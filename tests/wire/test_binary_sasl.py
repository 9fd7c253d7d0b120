"""SASL authentication (-S) over the binary protocol: SASL_LIST_MECHS,
SASL_AUTH and SASL_STEP with PLAIN, what an unauthenticated connection may
do, and what -S does to the text protocol.

Users come from a `user:password` file in MEMCACHED_SASL_PWDB (strata). Debian's
memcached is built with Cyrus SASL but without its own pwdb support, so for
WIRE_TARGET=memcached the same users are put in a sasldb with saslpasswd2
(Debian package sasl2-bin) and SASL_CONF_PATH points at a memcached.conf
offering only PLAIN.
"""

import os
import shutil
import subprocess

import pytest

from binlib import (
    AUTH_CONTINUE,
    AUTH_ERROR,
    EINVAL,
    FLUSH,
    GET,
    NOOP,
    QUIT,
    RES_MAGIC,
    SASL_AUTH,
    SASL_LIST_MECHS,
    SASL_STEP,
    SET,
    STAT,
    SUCCESS,
    UNKNOWN_COMMAND,
    VERSION,
    assert_closed,
    assert_in_sync,
    call,
    error,
    expect,
    fresh_conn,
    get_value,
    header,
    read_stats,
    request,
    response,
    sasl_plain,
    set_ok,
    store,
)
from harness import Server, target
from wirelib import READ_TIMEOUT, server_binary

USERS = {"alice": "secret", "bob": "hunter2"}


@pytest.fixture(scope="module")
def sasl_env(tmp_path_factory):
    """Environment giving a server the USERS."""
    d = tmp_path_factory.mktemp("sasl")
    pwdb = d / "pwdb"
    pwdb.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    env = dict(os.environ, MEMCACHED_SASL_PWDB=str(pwdb))
    if target() == "memcached":
        saslpasswd2 = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"
        if not os.path.exists(saslpasswd2):
            pytest.skip("memcached's SASL needs saslpasswd2 (Debian package sasl2-bin)")
        sasldb = d / "sasldb2"
        for user, password in USERS.items():
            subprocess.run(
                [saslpasswd2, "-p", "-c", "-a", "memcached", "-f", str(sasldb), user],
                input=password.encode(),
                check=True,
                capture_output=True,
            )
        (d / "memcached.conf").write_text(f"mech_list: plain\nsasldb_path: {sasldb}\n")
        env["SASL_CONF_PATH"] = str(d)
    return env


@pytest.fixture(scope="module")
def sasl_server(sasl_env):
    srv = Server(args=["-S"], env=sasl_env)
    yield srv
    srv.stop()


@pytest.fixture
def sc(sasl_server):
    """A fresh, unauthenticated connection to the -S server."""
    c = sasl_server.connect(timeout=READ_TIMEOUT)
    yield c
    c.close()


def auth(user="alice", password=None, mech=b"PLAIN", opaque=0, authzid=b""):
    password = USERS[user] if password is None else password
    return request(SASL_AUTH, mech, sasl_plain(user, password, authzid), opaque=opaque)


AUTHENTICATED = b"Authenticated"


def login(c):
    expect(c, auth(opaque=0xA0), response(SASL_AUTH, value=AUTHENTICATED, opaque=0xA0))


def assert_unauthenticated(c):
    """The connection is (no longer) authenticated: a GET is refused and closes it."""
    expect(c, request(GET, "k", opaque=0xDD), error(GET, AUTH_ERROR, opaque=0xDD))
    assert_closed(c)


# ---------------------------------------------------------------- mechanisms and PLAIN


def test_list_mechs(sc):
    expect(sc, request(SASL_LIST_MECHS, opaque=0x31), response(SASL_LIST_MECHS, value=b"PLAIN", opaque=0x31))


def test_list_mechs_is_allowed_before_and_keeps_connection(sc):
    expect(sc, request(SASL_LIST_MECHS), response(SASL_LIST_MECHS, value=b"PLAIN"))
    login(sc)


def test_auth_plain_success_then_commands_work(sc):
    expect(sc, auth(opaque=0x42), response(SASL_AUTH, value=AUTHENTICATED, opaque=0x42))
    cas = set_ok(sc, "k", b"v", flags=3)
    assert get_value(sc, "k") == (3, b"v", cas)
    assert_in_sync(sc)


def test_second_user(sc):
    expect(sc, auth("bob"), response(SASL_AUTH, value=AUTHENTICATED))


def test_auth_wrong_password_is_auth_error_and_connection_stays(sc):
    expect(sc, auth(password="wrong", opaque=0x43), error(SASL_AUTH, AUTH_ERROR, opaque=0x43))
    login(sc)
    assert_in_sync(sc)


def test_auth_error_body_is_auth_failure(sc):
    r = call(sc, auth(password="nope"))
    assert (r.magic, r.opcode, r.status, r.value) == (RES_MAGIC, SASL_AUTH, 0x20, b"Auth failure.")


def test_auth_unknown_user_is_auth_error(sc):
    expect(sc, request(SASL_AUTH, "PLAIN", sasl_plain("mallory", "secret")), error(SASL_AUTH, AUTH_ERROR))


def test_auth_another_users_password_is_auth_error(sc):
    expect(sc, request(SASL_AUTH, "PLAIN", sasl_plain("alice", USERS["bob"])), error(SASL_AUTH, AUTH_ERROR))


def test_plain_message_without_nul_separators_is_auth_error(sc):
    expect(sc, request(SASL_AUTH, "PLAIN", b"alice secret"), error(SASL_AUTH, AUTH_ERROR))
    assert_in_sync_unauth(sc)


def assert_in_sync_unauth(c):
    """Still open and unauthenticated, nothing pending: VERSION is allowed."""
    r = call(c, request(VERSION, opaque=0x77))
    assert (r.opcode, r.status, r.opaque) == (VERSION, SUCCESS, 0x77)


def test_authzid_equal_to_user_is_accepted(sc):
    expect(sc, auth(authzid=b"alice"), response(SASL_AUTH, value=AUTHENTICATED))


def test_authzid_of_another_user_is_auth_error(sc):
    # PLAIN may not act as another identity (no proxy authorisation).
    expect(sc, auth(authzid=b"bob"), error(SASL_AUTH, AUTH_ERROR))
    assert_in_sync_unauth(sc)


def test_mechanism_name_is_case_insensitive(sc):
    expect(sc, auth(mech=b"plain"), response(SASL_AUTH, value=AUTHENTICATED))


def test_unoffered_mechanism_is_auth_error(sc):
    expect(sc, request(SASL_AUTH, "CRAM-MD5", b""), error(SASL_AUTH, AUTH_ERROR))
    assert_in_sync_unauth(sc)


def test_mechanism_name_over_32_bytes_is_invalid_and_data_swallowed(sc):
    packet = request(SASL_AUTH, b"P" * 33, request(NOOP, opaque=0xBAD), opaque=5)
    expect(sc, packet, error(SASL_AUTH, EINVAL, opaque=5))
    assert_in_sync_unauth(sc)


def test_plain_with_empty_data_asks_to_continue_then_step_authenticates(sc):
    # An empty initial response: the server answers AUTH_CONTINUE with an
    # empty challenge, and the client sends its PLAIN message in SASL_STEP.
    expect(sc, request(SASL_AUTH, "PLAIN", b"", opaque=1), response(SASL_AUTH, AUTH_CONTINUE, opaque=1))
    expect(
        sc,
        request(SASL_STEP, "PLAIN", sasl_plain("alice", "secret"), opaque=2),
        response(SASL_STEP, value=AUTHENTICATED, opaque=2),
    )
    assert get_value(sc, "nokey") is None


def test_step_without_auth_is_auth_error_and_connection_stays(sc):
    expect(sc, request(SASL_STEP, "PLAIN", sasl_plain("alice", "secret"), opaque=3), error(SASL_STEP, AUTH_ERROR, opaque=3))
    login(sc)


def test_auth_without_mechanism_is_invalid_and_closes(sc):
    expect(sc, request(SASL_AUTH, b"", sasl_plain("alice", "secret")), error(SASL_AUTH, EINVAL))
    assert_closed(sc)


def test_pipelined_auth_and_get(sc):
    expect(
        sc,
        auth(opaque=1) + request(GET, "pipelined-nokey", opaque=2),
        response(SASL_AUTH, value=AUTHENTICATED, opaque=1) + error(GET, 0x01, opaque=2),
    )


def test_authentication_is_per_connection(sasl_server, sc):
    login(sc)
    other = sasl_server.connect(timeout=READ_TIMEOUT)
    assert_unauthenticated(other)
    assert_in_sync(sc)


# ---------------------------------------------------------------- re-authentication


def test_second_auth_on_an_authenticated_connection_fails_and_deauthenticates(sc):
    # memcached restarts the connection's SASL state on every SASL_AUTH, and
    # Cyrus refuses to start PLAIN again on a connection that completed it.
    login(sc)
    expect(sc, auth(opaque=7), error(SASL_AUTH, AUTH_ERROR, opaque=7))
    assert_unauthenticated(sc)


def test_failed_reauth_deauthenticates(sc):
    login(sc)
    expect(sc, auth(password="wrong"), error(SASL_AUTH, AUTH_ERROR))
    assert_unauthenticated(sc)


def test_step_after_authentication_fails_and_deauthenticates(sc):
    login(sc)
    expect(sc, request(SASL_STEP, "PLAIN", b"x"), error(SASL_STEP, AUTH_ERROR))
    assert_unauthenticated(sc)


def test_list_mechs_after_authentication_deauthenticates(sc):
    # Listing mechanisms resets the connection's SASL state in memcached.
    login(sc)
    expect(sc, request(SASL_LIST_MECHS), response(SASL_LIST_MECHS, value=b"PLAIN"))
    assert_unauthenticated(sc)


# ---------------------------------------------------------------- unauthenticated


@pytest.mark.parametrize(
    "packet",
    [
        request(GET, "k", opaque=9),
        store(SET, "k", b"v", opaque=9),
        request(NOOP, opaque=9),
        request(STAT, opaque=9),
        request(FLUSH, opaque=9),
        request(QUIT, opaque=9),
        request(0x40, opaque=9),
        request(GET, b"k" * 251, opaque=9),
    ],
    ids=["get", "set", "noop", "stat", "flush", "quit", "unknown-opcode", "key-too-long"],
)
def test_unauthenticated_command_is_auth_error_and_closes(sc, packet):
    expect(sc, packet, error(packet[1], AUTH_ERROR, opaque=9))
    assert_closed(sc)


def test_unauthenticated_version_is_allowed(sc):
    r = call(sc, request(VERSION, opaque=4))
    assert (r.opcode, r.status, r.opaque, r.keylen, r.extraslen) == (VERSION, SUCCESS, 4, 0, 0)
    assert r.value[:1].isdigit()
    login(sc)


def test_short_body_fault_is_answered_before_the_auth_check(sc):
    sc.send(header(GET, keylen=5, bodylen=2, opaque=4) + b"abcde")
    expect(sc, b"", error(GET, UNKNOWN_COMMAND, opaque=4))
    assert_closed(sc)


def test_unauthenticated_data_was_not_stored(sasl_server, sc):
    sc.send(store(SET, "sneaky", b"v"))
    other = sasl_server.connect(timeout=READ_TIMEOUT)
    login(other)
    assert get_value(other, "sneaky") is None


def test_text_command_on_sasl_server_closes_without_reply(sc):
    # -S makes memcached binary-only: the first byte is not a request magic.
    sc.send(b"get aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")
    assert_closed(sc)


def test_text_version_on_sasl_server_closes_without_reply(sc):
    sc.send(b"version\r\n" + b"stats\r\n" * 3)
    assert_closed(sc)


def test_settings_report_sasl_and_binary_protocol(sc):
    login(sc)
    sc.send(request(STAT, "settings"))
    settings = dict(read_stats(sc)[0])
    assert settings["auth_enabled_sasl"] == "yes"
    assert settings["binding_protocol"] == "binary"


# ---------------------------------------------------------------- SASL payload size


def test_large_plain_message_is_just_an_auth_failure(sc):
    # memcached reads a SASL payload of any size up to an item (-I) before
    # the credentials are rejected; strata does the same.
    expect(sc, auth(password="x" * 2000), error(SASL_AUTH, AUTH_ERROR))
    assert_in_sync_unauth(sc)


# ---------------------------------------------------------------- without -S


@pytest.fixture
def plain_conn(server):
    yield from fresh_conn(server)


@pytest.mark.parametrize(
    "packet",
    [
        request(SASL_LIST_MECHS, opaque=2),
        request(SASL_AUTH, "PLAIN", sasl_plain("alice", "secret") + request(NOOP, opaque=0xBAD), opaque=2),
        request(SASL_STEP, "PLAIN", request(NOOP, opaque=0xBAD), opaque=2),
    ],
    ids=["list-mechs", "auth", "step"],
)
def test_sasl_opcodes_without_sasl_are_unknown_commands(plain_conn, packet):
    expect(plain_conn, packet, error(packet[1], UNKNOWN_COMMAND, opaque=2))
    assert_in_sync(plain_conn)


def test_no_authentication_needed_without_sasl(plain_conn):
    set_ok(plain_conn, "k", b"v")


# ---------------------------------------------------------------- flags


def run_exits(args, env):
    """Run the server binary with args that must make it exit; (code, stderr)."""
    cmd = [server_binary(), "-p", "0"] + list(args)
    if target() == "memcached" and os.geteuid() == 0:
        cmd += ["-u", "root"]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=2, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cmd} did not exit")
    return p.returncode, p.stderr.decode(errors="replace")


@pytest.mark.parametrize("protocol", ["ascii", "auto"])
def test_sasl_with_text_protocol_is_refused_at_startup(sasl_env, protocol):
    code, err = run_exits(["-S", "-B", protocol], sasl_env)
    assert code == 64, err
    assert "cannot allow the ascii protocol while using sasl" in err.lower(), err


def test_sasl_with_binary_protocol_is_accepted(sasl_env):
    srv = Server(args=["-S", "-B", "binary"], env=sasl_env)
    try:
        c = srv.connect(timeout=READ_TIMEOUT)
        login(c)
        c.close()
    finally:
        srv.stop()
