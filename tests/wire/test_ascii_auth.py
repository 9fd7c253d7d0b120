"""ASCII protocol authentication (-Y FILE, lines `user:password`).

An unauthenticated connection may only authenticate, with a `set` whose
data is `<user> <password>` (key, flags and exptime are ignored); every other
line is answered `CLIENT_ERROR unauthenticated`. -Y makes memcached
ASCII-only, so a binary packet is read as text.
"""

import os
import subprocess

import pytest

from binlib import GET, request
from harness import Server, target
from wirelib import READ_TIMEOUT, read_line_or_partial, read_n, read_until_end, server_binary, stats

UNAUTH = b"CLIENT_ERROR unauthenticated\r\n"
FAILURE = b"CLIENT_ERROR authentication failure\r\n"
BAD_FORMAT = b"CLIENT_ERROR bad authentication token format\r\n"


@pytest.fixture(scope="module")
def auth_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("auth") / "users"
    path.write_text("alice:secret\nbob:pa ss\ncarol:c:olon\n")
    return str(path)


@pytest.fixture(scope="module")
def auth_server(auth_file):
    srv = Server(args=["-Y", auth_file])
    yield srv
    srv.stop()


@pytest.fixture
def ac(auth_server):
    """A fresh, unauthenticated text connection."""
    c = auth_server.connect(timeout=READ_TIMEOUT)
    yield c
    c.close()


def line(c, data, timeout=READ_TIMEOUT):
    """Send data, return one reply line (or what arrived before timeout)."""
    c.send(data)
    return read_line_or_partial(c, timeout)


def auth_cmd(data, head=b"set auth 0 0"):
    return head + b" %d\r\n" % len(data) + data + b"\r\n"


def login(c):
    assert line(c, auth_cmd(b"alice secret")) == b"STORED\r\n"


# ---------------------------------------------------------------- unauthenticated


def test_unauthenticated_get_is_refused_and_connection_stays(ac):
    assert line(ac, b"get foo\r\n") == UNAUTH
    assert line(ac, b"get foo\r\n") == UNAUTH
    login(ac)


@pytest.mark.parametrize(
    "cmd",
    [
        b"version\r\n",
        b"stats\r\n",
        b"quit\r\n",
        b"mg foo v\r\n",
        b"ms foo 2\r\n",
        b"add foo 0 0 5\r\n",
        b"delete foo\r\n",
        b"incr foo 1\r\n",
        b"flush_all\r\n",
        b"bogus\r\n",
        b"\r\n",
        b"set x 0 0\r\n",
        b"setx x 0 0 12\r\n",
        b"set x 0 0 abc\r\n",
        b"set x 0 0 -1\r\n",
    ],
    ids=lambda c: c.strip().decode() or "empty",
)
def test_any_line_but_an_auth_set_is_refused_at_once(ac, cmd):
    # Storage commands other than `set` are refused from their command line
    # alone: no data block is waited for. `quit` does not close.
    assert line(ac, cmd) == UNAUTH
    login(ac)


def test_long_line_without_newline_closes(ac):
    ac.send(b"get " + b"a" * 3000)
    assert ac.is_closed(2.0) and ac.buf == b""


# ---------------------------------------------------------------- authenticating


def test_auth_set_is_stored_then_commands_work(ac):
    assert line(ac, auth_cmd(b"alice secret")) == b"STORED\r\n"
    assert line(ac, b"set k 3 0 1\r\nv\r\n") == b"STORED\r\n"
    ac.send(b"get k auth\r\n")
    assert read_until_end(ac) == b"VALUE k 3 1\r\nv\r\nEND\r\n"
    assert line(ac, b"version\r\n").startswith(b"VERSION ")


def test_auth_key_flags_and_exptime_are_ignored(ac):
    assert line(ac, auth_cmd(b"alice secret", head=b"set anything 5 100")) == b"STORED\r\n"
    ac.send(b"get anything\r\n")
    assert read_until_end(ac) == b"END\r\n"


def test_auth_set_with_noreply_is_still_answered(ac):
    assert line(ac, b"set x 0 0 12 noreply\r\nalice secret\r\n") == b"STORED\r\n"
    assert line(ac, b"version\r\n").startswith(b"VERSION ")


def test_auth_set_with_extra_tokens_on_its_line(ac):
    assert line(ac, b"set x 0 0 12 noreply extra\r\nalice secret\r\n") == b"STORED\r\n"


def test_auth_set_split_across_sends(ac):
    ac.send(b"set x 0 0 12\r\n")
    assert read_n(ac, 1, timeout=0.2) == b""
    ac.send(b"alice ")
    assert read_n(ac, 1, timeout=0.2) == b""
    assert line(ac, b"secret\r\n") == b"STORED\r\n"


def test_auth_and_a_command_in_one_send(ac):
    ac.send(auth_cmd(b"alice secret") + b"get nosuchkey\r\n")
    assert read_until_end(ac) == b"STORED\r\nEND\r\n"


def test_auth_line_may_end_with_lf_only(ac):
    assert line(ac, b"set x 0 0 12\nalice secret\r\n") == b"STORED\r\n"


def test_wrong_password_is_failure_and_connection_stays_unauthenticated(ac):
    assert line(ac, auth_cmd(b"alice wrong")) == FAILURE
    assert line(ac, b"get foo\r\n") == UNAUTH
    login(ac)


def test_unknown_user_is_failure(ac):
    assert line(ac, auth_cmd(b"mallory secret")) == FAILURE


def test_password_is_compared_exactly(ac):
    assert line(ac, auth_cmd(b"alice secre")) == FAILURE
    assert line(ac, auth_cmd(b"alice secret\n")) == FAILURE
    assert line(ac, auth_cmd(b"alice Secret")) == FAILURE


def test_password_after_first_colon_of_the_file_line(ac):
    assert line(ac, auth_cmd(b"carol c:olon")) == b"STORED\r\n"


@pytest.mark.parametrize(
    "data",
    [b"alice", b" secret", b"alice ", b"alice\tsecret", b""],
    ids=["no-space", "leading-space", "trailing-space", "tab", "empty"],
)
def test_data_that_is_not_two_tokens_is_bad_token_format(ac, data):
    assert line(ac, auth_cmd(data)) == BAD_FORMAT
    assert line(ac, b"get foo\r\n") == UNAUTH


def test_data_block_not_ending_in_crlf_is_bad_termination(ac):
    assert line(ac, b"set x 0 0 5\r\nalicexx") == b"CLIENT_ERROR bad command line termination\r\n"
    assert line(ac, b"get foo\r\n") == UNAUTH


def test_data_is_split_into_space_separated_tokens(ac):
    # memcached tokenizes the data: runs of spaces separate, and tokens after
    # the second are ignored.
    assert line(ac, auth_cmd(b"alice  secret")) == b"STORED\r\n"


def test_tokens_after_the_password_are_ignored(ac):
    assert line(ac, auth_cmd(b"alice secret extra")) == b"STORED\r\n"


def test_password_containing_a_space_cannot_authenticate(ac):
    # The file says bob:pa ss, but the data's second token is only "pa".
    assert line(ac, auth_cmd(b"bob pa ss")) == FAILURE
    assert line(ac, auth_cmd(b"bob pa")) == FAILURE


def test_auth_data_over_the_read_buffer_closes(ac):
    # memcached holds the whole auth set in its 16 KB read buffer; a data
    # block that cannot fit closes the connection.
    try:
        ac.send(auth_cmd(b"alice " + b"s" * 20000))
    except (BrokenPipeError, ConnectionResetError):
        return  # closed while we were still sending
    assert ac.is_closed(2.0) and ac.buf == b""


def test_authentication_is_per_connection(auth_server, ac):
    login(ac)
    other = auth_server.connect(timeout=READ_TIMEOUT)
    assert line(other, b"get foo\r\n") == UNAUTH
    other.close()


def test_settings_report_ascii_auth(auth_file, ac):
    login(ac)
    s = stats(ac, "settings")
    assert s["auth_enabled_ascii"] == auth_file
    assert s["auth_enabled_sasl"] == "no"
    assert s["binding_protocol"] == "ascii"


# ---------------------------------------------------------------- binary with -Y


def test_binary_packet_is_read_as_text_before_auth(ac):
    # -Y makes the server ASCII-only: a binary GET is not served unauthenticated.
    assert line(ac, request(GET, "k") + b"\r\n") == UNAUTH
    assert line(ac, b"get foo\r\n") == UNAUTH


def test_binary_packet_is_read_as_text_after_auth(ac):
    login(ac)
    assert line(ac, request(GET, "k") + b"\r\n") == b"ERROR\r\n"
    assert line(ac, b"version\r\n").startswith(b"VERSION ")


@pytest.mark.parametrize("protocol", ["binary", "auto"])
def test_ascii_auth_with_binary_protocol_is_refused_at_startup(auth_file, protocol):
    cmd = [server_binary(), "-p", "0", "-B", protocol, "-Y", auth_file]
    if target() == "memcached" and os.geteuid() == 0:
        cmd += ["-u", "root"]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=2)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cmd} did not exit")
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 64, err
    assert "cannot allow the binary protocol while using ascii authentication" in err.lower(), err


def test_ascii_auth_with_ascii_protocol_is_accepted(auth_file):
    srv = Server(args=["-B", "ascii", "-Y", auth_file])
    try:
        c = srv.connect(timeout=READ_TIMEOUT)
        login(c)
        c.close()
    finally:
        srv.stop()
