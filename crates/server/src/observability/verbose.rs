//! memcached's `-vv` (or `verbosity 2`): a line in the log for each
//! connection event, request and reply, in memcached's words:
//!
//! ```text
//! <11 server listening (auto-negotiate)      a TCP listener at start-up
//! <12 server listening (udp)                 a UDP socket (-U)
//! <13 new auto-negotiating client connection (ascii: `<13 new ascii client connection.`)
//! 13: Client using the ascii protocol        its first request, with -B auto
//! <13 set foo 0 0 3                          each text command line
//! >13 STORED                                 its reply line
//! >13 NOREPLY STORED                         the reply noreply suppressed
//! >13 sending key foo                        each value of a get
//! >13 END
//! <13 Read binary protocol data:             a binary request's header,
//! <13    0x80 0x00 0x00 0x03                 four bytes a line
//! >13 Writing bin response:                  each response's header
//! >13   0x81 0x00 0x00 0x00
//! <13 connection closed.
//! ```
//!
//! Meta commands log their line and only the replies memcached logs for
//! them (`MN` and errors); `stats` and the other listings log none.
//! Everything goes through `tracing` at TRACE (which `-vv` enables); the
//! request path pays one relaxed load and a branch ([`on`]) while the
//! level is below 2.

use std::sync::atomic::Ordering::Relaxed;

use crate::config::Protocol;
use crate::Shared;

/// Whether requests and replies are logged now.
#[inline]
pub(crate) fn on(shared: &Shared) -> bool {
    shared.verbosity.load(Relaxed) > 1
}

fn line(args: std::fmt::Arguments<'_>) {
    tracing::trace!("{args}");
}

/// A listener at start-up; `None`: a UDP socket.
pub(crate) fn listening(fd: i32, protocol: Option<Protocol>) {
    let what = match protocol {
        None => "udp",
        Some(Protocol::Auto) => "auto-negotiate",
        Some(Protocol::Ascii) => "ascii",
        Some(Protocol::Binary) => "binary",
    };
    line(format_args!("<{fd} server listening ({what})"));
}

/// A connection accepted.
pub(crate) fn accepted(fd: i32, protocol: Protocol) {
    match protocol {
        Protocol::Auto => line(format_args!("<{fd} new auto-negotiating client connection")),
        Protocol::Ascii => line(format_args!("<{fd} new ascii client connection.")),
        Protocol::Binary => line(format_args!("<{fd} new binary client connection.")),
    }
}

/// Its protocol, told by its first byte (with `-B auto` only).
pub(crate) fn negotiated(fd: i32, binary: bool) {
    let name = if binary { "binary" } else { "ascii" };
    line(format_args!("{fd}: Client using the {name} protocol"));
}

pub(crate) fn closed(fd: i32) {
    line(format_args!("<{fd} connection closed."));
}

/// The command line at the front of `buf`, if its end is there; false
/// if not (it is logged once the line is complete).
pub(crate) fn command(fd: i32, buf: &[u8]) -> bool {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else { return false };
    let cmd = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
    line(format_args!("<{fd} {}", String::from_utf8_lossy(cmd)));
    true
}

/// What a text command's replies come to in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `get` and its kin: a `sending key` line per value, then the last
    /// line.
    Get,
    /// `mg`, `ms`, `md`, `ma`, `me`, `mn`: `MN` and error lines only.
    Meta,
    /// The rest: a reply of one line is logged; listings (`stats`,
    /// dumps) are not.
    Other,
}

impl Kind {
    /// The kind of the command line at the front of `buf`.
    pub fn of(buf: &[u8]) -> Kind {
        let end = buf.iter().position(|&b| b == b' ' || b == b'\r' || b == b'\n').unwrap_or(buf.len());
        match &buf[..end] {
            b"get" | b"gets" | b"gat" | b"gats" => Kind::Get,
            b"mg" | b"ms" | b"md" | b"ma" | b"me" | b"mn" => Kind::Meta,
            _ => Kind::Other,
        }
    }
}

/// Logs the replies of a text command, `out` being the bytes it added.
pub(crate) fn replies(fd: i32, kind: Kind, out: &[u8]) {
    if kind == Kind::Other {
        // One line, or nothing: a listing is not logged.
        if out.len() > 2 && out.iter().position(|&b| b == b'\n') == Some(out.len() - 1) {
            reply(fd, &out[..out.len() - 1]);
        }
        return;
    }
    let mut rest = out;
    while let Some(end) = rest.iter().position(|&b| b == b'\n') {
        let l = &rest[..end];
        rest = &rest[end + 1..];
        // A value's data follows its header line: skip over it.
        let head = if kind == Kind::Get { b"VALUE ".as_slice() } else { b"VA ".as_slice() };
        if let Some(fields) = l.strip_prefix(head) {
            let mut words = fields.split(|&b| b == b' ');
            // `VALUE <key> <flags> <bytes>`, `VA <bytes>`.
            let len = if kind == Kind::Get {
                let key = words.next().unwrap_or_default();
                line(format_args!(">{fd} sending key {}", String::from_utf8_lossy(key)));
                words.nth(1)
            } else {
                words.next()
            };
            let len =
                len.and_then(|n| std::str::from_utf8(n.strip_suffix(b"\r").unwrap_or(n)).ok()?.parse::<usize>().ok());
            if let Some(len) = len {
                rest = rest.get(len + 2..).unwrap_or_default();
            }
            continue;
        }
        let meta_logged = |l: &[u8]| {
            l.starts_with(b"MN")
                || l.starts_with(b"ERROR")
                || l.starts_with(b"CLIENT_ERROR")
                || l.starts_with(b"SERVER_ERROR")
        };
        if kind == Kind::Get || meta_logged(l) {
            reply(fd, l);
        }
    }
}

fn reply(fd: i32, l: &[u8]) {
    let l = l.strip_suffix(b"\r").unwrap_or(l);
    line(format_args!(">{fd} {}", String::from_utf8_lossy(l)));
}

/// A reply that `noreply` kept from the client.
pub(crate) fn noreply(fd: i32, reply: &[u8]) {
    let l = reply.strip_suffix(b"\r\n").unwrap_or(reply);
    line(format_args!(">{fd} NOREPLY {}", String::from_utf8_lossy(l)));
}

/// A binary request's 24-byte header, four bytes a line.
pub(crate) fn binary_request(fd: i32, header: &[u8]) {
    line(format_args!("<{fd} Read binary protocol data:"));
    for w in header.chunks(4) {
        line(format_args!("<{fd}    {}", hex(w)));
    }
}

/// The binary responses in `out`, each by its header.
pub(crate) fn binary_responses(fd: i32, mut out: &[u8]) {
    while out.len() >= 24 {
        line(format_args!(">{fd} Writing bin response:"));
        for w in out[..24].chunks(4) {
            line(format_args!(">{fd}   {}", hex(w)));
        }
        let body = u32::from_be_bytes([out[8], out[9], out[10], out[11]]) as usize;
        out = out.get(24 + body..).unwrap_or_default();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("0x{b:02x}")).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_commands() {
        assert_eq!(Kind::of(b"get a b\r\n"), Kind::Get);
        assert_eq!(Kind::of(b"gats 1 a\r\n"), Kind::Get);
        assert_eq!(Kind::of(b"mn\r\n"), Kind::Meta);
        assert_eq!(Kind::of(b"set a 0 0 1\r\nx\r\n"), Kind::Other);
        assert_eq!(Kind::of(b"getx"), Kind::Other);
    }

    #[test]
    fn hex_as_memcached_prints_it() {
        assert_eq!(hex(&[0x80, 0, 0x0a, 0xff]), "0x80 0x00 0x0a 0xff");
    }
}
