//! memcached's ASCII authentication (`-Y`). Until a connection has
//! authenticated, its input goes through [`parse`] instead of the command
//! parser, as memcached's `try_read_command_asciiauth` does: the only thing
//! understood is `set <key> <flags> <exptime> <bytes>` (anything after the
//! fifth token ignored) whose data block is `<user> <password>`. Every
//! other line is refused on its own, without reading a data block after it.

use super::MAX_COMMAND_LINE;

/// Largest line plus data block an authenticating `set` may send: what fits
/// in memcached's 16 KB read buffer. More closes the connection.
pub const MAX_AUTH_REQUEST: usize = 16 * 1024;

/// What the front of an unauthenticated connection's buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthParse<'a> {
    /// More bytes are needed; `need` is the buffer length that will do.
    Incomplete { need: usize },
    /// Junk (no newline within 2048 bytes) or a data block too large to
    /// buffer: the connection is closed without a reply.
    Close,
    /// Not an authenticating `set`: `CLIENT_ERROR unauthenticated`. Only
    /// the line is consumed.
    Unauthenticated { consumed: usize },
    /// The data block does not end in `\r\n`.
    BadTermination { consumed: usize },
    /// The data block is not two space-separated tokens.
    BadFormat { consumed: usize },
    /// Credentials to check (the first two tokens of the data block).
    Credentials { user: &'a [u8], password: &'a [u8], consumed: usize },
}

/// Space-separated tokens, empty ones skipped (memcached's tokenizer).
fn tokens(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|t| !t.is_empty())
}

/// Parses the authentication attempt at the front of `buf`.
pub fn parse(buf: &[u8]) -> AuthParse<'_> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        if buf.len() > MAX_COMMAND_LINE {
            return AuthParse::Close;
        }
        return AuthParse::Incomplete { need: buf.len() + 1 };
    };
    let line_len = nl + 1;
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut t = tokens(line);
    let (cmd, size) = (t.next(), t.nth(3));
    let size = match (cmd, size.and_then(crate::numbers::parse_u32)) {
        (Some(b"set"), Some(size)) => size as usize,
        _ => return AuthParse::Unauthenticated { consumed: line_len },
    };
    let total = line_len + size + 2;
    if total > MAX_AUTH_REQUEST {
        return AuthParse::Close;
    }
    if buf.len() < total {
        return AuthParse::Incomplete { need: total };
    }
    let block = &buf[line_len..total];
    let Some(data) = block.strip_suffix(b"\r\n") else {
        return AuthParse::BadTermination { consumed: total };
    };
    let mut t = tokens(data);
    match (t.next(), t.next()) {
        (Some(user), Some(password)) => AuthParse::Credentials { user, password, consumed: total },
        _ => AuthParse::BadFormat { consumed: total },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_refusals() {
        let ok = b"set x 0 0 12 noreply extra\r\nalice secret\r\nget x\r\n";
        assert_eq!(parse(ok), AuthParse::Credentials { user: b"alice", password: b"secret", consumed: ok.len() - 7 });
        let spaced = b"set x 0 0 19\r\nalice  secret extra\r\n";
        assert!(matches!(parse(spaced), AuthParse::Credentials { user: b"alice", password: b"secret", .. }));
        assert_eq!(parse(b"get x\r\n"), AuthParse::Unauthenticated { consumed: 7 });
        assert_eq!(parse(b"ms foo 2\r\nhi\r\n"), AuthParse::Unauthenticated { consumed: 10 });
        assert_eq!(parse(b"set x 0 0\r\n"), AuthParse::Unauthenticated { consumed: 11 });
        assert_eq!(parse(b"set x 0 0 5\r\nalicexx"), AuthParse::BadTermination { consumed: 20 });
        assert_eq!(parse(b"set x 0 0 5\r\nalice\r\n"), AuthParse::BadFormat { consumed: 20 });
        assert_eq!(parse(b"set x 0 0 12\r\nalice\tsecret\r\n"), AuthParse::BadFormat { consumed: 28 });
        assert_eq!(parse(b"set x 0 0 5\r\nal"), AuthParse::Incomplete { need: 20 });
        assert_eq!(parse(b"set x 0 0 20000\r\n"), AuthParse::Close);
        assert_eq!(parse(&[b'a'; 2049]), AuthParse::Close);
        assert_eq!(parse(b"set"), AuthParse::Incomplete { need: 4 });
    }
}
