//! Meta replies, byte for byte as memcached writes them.
//!
//! A reply is a two-letter status, then the return flags the request asked
//! for, in request order, each as a space, the flag letter and its value
//! (memcached's `META_CHAR`). `mg` adds `Z`, `X` and `W` after them. `q`
//! suppresses the nominal reply (`EN` for `mg`, `HD` for the others); errors
//! are always sent.
//!
//! The encoders take what the server learned from the store as plain facts
//! ([`ItemView`], a [`Status`], numbers), so this crate stays free of storage.

use super::{encode_key, Reply};
use crate::ItemView;

/// The two-letter status of a meta reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Success (`HD`).
    Stored,
    /// `NS`: not stored (add over an item, append to a missing one...).
    NotStored,
    /// `EX`: the compare value did not match.
    Exists,
    /// `NF`: no such item.
    NotFound,
}

impl Status {
    fn code(self) -> &'static [u8] {
        match self {
            Status::Stored => b"HD",
            Status::NotStored => b"NS",
            Status::Exists => b"EX",
            Status::NotFound => b"NF",
        }
    }
}

fn flag(out: &mut Vec<u8>, c: u8) {
    out.push(b' ');
    out.push(c);
}

fn num(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// ` k<key>`, base64 (and ` b`) when the key was.
fn key(out: &mut Vec<u8>, key: &[u8], base64: bool) {
    flag(out, b'k');
    if base64 {
        encode_key(key, out);
        flag(out, b'b');
    } else {
        out.extend_from_slice(key);
    }
}

/// ` O<opaque>`: the token as sent.
fn opaque(out: &mut Vec<u8>, tok: &[u8]) {
    out.push(b' ');
    out.extend_from_slice(tok);
}

/// The flags every reply echoes, also when there is no item: `O` and `k`.
fn echo_flags(out: &mut Vec<u8>, reply: &Reply<'_>, k: &[u8]) {
    for tok in reply.flags.iter() {
        match tok[0] {
            b'O' => opaque(out, tok),
            b'k' => key(out, k, reply.base64),
            _ => {}
        }
    }
}

/// Remaining TTL as memcached prints it: -1 for never, else seconds (as an
/// unsigned 32-bit difference, like memcached).
fn ttl(out: &mut Vec<u8>, expiry: u32, now: u32) {
    if expiry == 0 {
        out.extend_from_slice(b"-1");
    } else {
        num(out, expiry.wrapping_sub(now));
    }
}

/// Drops the reply line started at `start` when `q` suppresses it.
fn suppress(out: &mut Vec<u8>, start: usize, quiet: bool) {
    if quiet {
        out.truncate(start);
    }
}

/// A status and the echoed `O` and `k` flags (`md`, and the failures of
/// `ma`); `q` hides `HD`.
pub fn status(out: &mut Vec<u8>, status: Status, reply: &Reply<'_>, k: &[u8]) {
    let start = out.len();
    out.extend_from_slice(status.code());
    echo_flags(out, reply, k);
    out.extend_from_slice(b"\r\n");
    suppress(out, start, reply.quiet && status == Status::Stored);
}

/// `mg` miss: `EN` and the echoed flags; `q` hides it.
pub fn miss(out: &mut Vec<u8>, reply: &Reply<'_>, k: &[u8]) {
    let start = out.len();
    out.extend_from_slice(b"EN");
    echo_flags(out, reply, k);
    out.extend_from_slice(b"\r\n");
    suppress(out, start, reply.quiet);
}

/// `mg` hit: `VA <len>` with the value (`v`) or `HD`, the return flags in
/// request order, then `Z`, `X`, `W`.
pub fn hit(out: &mut Vec<u8>, it: &ItemView<'_>, reply: &Reply<'_>, value: bool, now: u32) {
    if value {
        out.extend_from_slice(b"VA ");
        num(out, it.value.len());
    } else {
        out.extend_from_slice(b"HD");
    }
    // `t` reports the TTL as of its place in the flags: after `T` (or `N`
    // on an item this read created, which starts without one) the new one.
    let mut touched = false;
    let before = if it.created { 0 } else { it.expiry_before };
    for tok in reply.flags.iter() {
        match tok[0] {
            b'T' => touched = true,
            b'N' if it.created => touched = true,
            b's' => {
                flag(out, b's');
                num(out, it.value.len());
            }
            b't' => {
                flag(out, b't');
                ttl(out, if touched { it.expiry } else { before }, now);
            }
            b'c' => {
                flag(out, b'c');
                num(out, it.cas);
            }
            b'f' => {
                flag(out, b'f');
                num(out, it.flags);
            }
            b'l' => {
                flag(out, b'l');
                num(out, now.saturating_sub(it.written));
            }
            b'h' => {
                flag(out, b'h');
                out.push(if it.fetched { b'1' } else { b'0' });
            }
            b'O' => opaque(out, tok),
            // A hit shows the key as it was stored (base64 after `ms b`).
            b'k' => key(out, it.key, it.binary_key),
            _ => {}
        }
    }
    if it.token_sent {
        flag(out, b'Z');
    }
    if it.stale {
        flag(out, b'X');
    }
    if it.won {
        flag(out, b'W');
    }
    out.extend_from_slice(b"\r\n");
    if value {
        out.extend_from_slice(it.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// `ms`: the status, then `O`, `k`, `c` (the stored item's CAS) and `s`
/// (its size, when stored); `q` hides `HD`.
pub fn set(out: &mut Vec<u8>, status: Status, cas: u64, size: usize, reply: &Reply<'_>, k: &[u8]) {
    let start = out.len();
    out.extend_from_slice(status.code());
    for tok in reply.flags.iter() {
        match tok[0] {
            b'O' => opaque(out, tok),
            b'k' => key(out, k, reply.base64),
            b'c' => {
                flag(out, b'c');
                num(out, cas);
            }
            b's' if status == Status::Stored => {
                flag(out, b's');
                num(out, size);
            }
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    suppress(out, start, reply.quiet && status == Status::Stored);
}

/// What `ma` did to a counter, as its reply needs it.
#[derive(Debug, Clone, Copy)]
pub struct Counted {
    pub value: u64,
    pub cas: u64,
    pub expiry_before: u32,
    pub expiry: u32,
    /// The item was created by this request (`N`).
    pub created: bool,
}

/// `ma` success: `VA <len>` with the number (`v`) or `HD`, then `c`, `t`,
/// `O`, `k` in request order. As in memcached, `q` hides the reply to an
/// update but not to a creation.
pub fn counted(out: &mut Vec<u8>, c: &Counted, reply: &Reply<'_>, k: &[u8], value: bool, now: u32) {
    let start = out.len();
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(c.value).as_bytes();
    if value {
        out.extend_from_slice(b"VA ");
        num(out, digits.len());
    } else {
        out.extend_from_slice(b"HD");
    }
    // `t` shows the TTL as of its place among the flags: after `T` (or `N`
    // on a created item) the new one.
    let mut touched = false;
    for tok in reply.flags.iter() {
        match tok[0] {
            b'T' => touched = true,
            b'N' if c.created => touched = true,
            b'c' => {
                flag(out, b'c');
                num(out, c.cas);
            }
            b't' => {
                flag(out, b't');
                ttl(out, if touched { c.expiry } else { c.expiry_before }, now);
            }
            b'O' => opaque(out, tok),
            b'k' => key(out, k, reply.base64),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    if value {
        out.extend_from_slice(digits);
        out.extend_from_slice(b"\r\n");
    }
    suppress(out, start, reply.quiet && !c.created);
}

/// Everything `me` reports about an item.
#[derive(Debug, Clone, Copy)]
pub struct Debug {
    pub expiry: u32,
    pub written: u32,
    pub cas: u64,
    pub fetched: bool,
    /// Bytes the item occupies.
    pub size: usize,
    pub binary_key: bool,
}

/// `me`: `ME <key> exp=.. la=.. cas=.. fetch=.. cls=.. size=..`. strata
/// has no slab classes; `cls` is always 1 (see docs/protocol.md).
pub fn debug(out: &mut Vec<u8>, k: &[u8], d: &Debug, now: u32) {
    out.extend_from_slice(b"ME ");
    if d.binary_key {
        encode_key(k, out);
    } else {
        out.extend_from_slice(k);
    }
    // memcached prints now - exptime here: negative while the item lives.
    out.extend_from_slice(b" exp=");
    if d.expiry == 0 {
        out.extend_from_slice(b"-1");
    } else {
        num(out, i64::from(now) - i64::from(d.expiry));
    }
    out.extend_from_slice(b" la=");
    num(out, now.saturating_sub(d.written));
    out.extend_from_slice(b" cas=");
    num(out, d.cas);
    out.extend_from_slice(if d.fetched { b" fetch=yes" } else { b" fetch=no" });
    out.extend_from_slice(b" cls=1 size=");
    num(out, d.size);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::Tokens;

    fn reply(flags: &[u8], quiet: bool) -> Reply<'_> {
        Reply { flags: Tokens(flags), quiet, base64: false }
    }

    fn found<'a>(key: &'a [u8], value: &'a [u8]) -> ItemView<'a> {
        ItemView {
            key,
            value,
            flags: 0,
            cas: 0,
            expiry_before: 0,
            expiry: 0,
            fetched: false,
            written: 0,
            stale: false,
            token_sent: false,
            won: false,
            created: false,
            binary_key: false,
        }
    }

    #[test]
    fn hits_echo_return_flags_in_request_order_then_zxw() {
        let mut out = Vec::new();
        let it = ItemView { cas: 9, flags: 3, expiry_before: 130, stale: true, won: true, ..found(b"k", b"val") };
        hit(&mut out, &it, &reply(b"t c Oab f s k", false), true, 100);
        assert_eq!(out, b"VA 3 t30 c9 Oab f3 s3 kk X W\r\nval\r\n");
        out.clear();
        let it = ItemView { expiry_before: 130, expiry: 0, token_sent: true, ..found(b"k", b"val") };
        hit(&mut out, &it, &reply(b"t T0 t", false), false, 100);
        assert_eq!(out, b"HD t30 t-1 Z\r\n", "t after T shows the new TTL");
    }

    #[test]
    fn quiet_hides_only_the_nominal_reply() {
        let mut out = Vec::new();
        miss(&mut out, &reply(b"Oz q", true), b"k");
        set(&mut out, Status::Stored, 5, 1, &reply(b"q", true), b"k");
        status(&mut out, Status::Stored, &reply(b"q", true), b"k");
        assert!(out.is_empty(), "{out:?}");
        set(&mut out, Status::NotStored, 0, 0, &reply(b"q c s", true), b"k");
        status(&mut out, Status::NotFound, &reply(b"q Oz k", true), b"key");
        assert_eq!(out, b"NS c0\r\nNF Oz kkey\r\n");
        out.clear();
        let c = Counted { value: 7, cas: 1, expiry_before: 0, expiry: 0, created: true };
        counted(&mut out, &c, &reply(b"q v", true), b"n", true, 0);
        assert_eq!(out, b"VA 1\r\n7\r\n", "a created counter is answered under q");
        out.clear();
        counted(&mut out, &Counted { created: false, ..c }, &reply(b"q v", true), b"n", true, 0);
        assert!(out.is_empty());
    }

    #[test]
    fn keys_sent_in_base64_come_back_in_base64() {
        let mut out = Vec::new();
        let r = Reply { flags: Tokens(b"k"), quiet: false, base64: true };
        status(&mut out, Status::NotFound, &r, b"\x00\x01");
        assert_eq!(out, b"NF kAAE= b\r\n");
        out.clear();
        let d = Debug { expiry: 0, written: 90, cas: 4, fetched: true, size: 40, binary_key: true };
        debug(&mut out, b"\x00\x01", &d, 100);
        assert_eq!(out, b"ME AAE= exp=-1 la=10 cas=4 fetch=yes cls=1 size=40\r\n");
    }
}
