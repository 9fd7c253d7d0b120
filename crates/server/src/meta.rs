//! Meta replies: runs `mg ms md ma me` through the semantic core
//! ([`crate::core`]) and writes memcached's reply bytes.
//!
//! A reply is a two-letter code, then the return flags the request asked
//! for, in request order, each as a space, the flag letter and its value
//! (memcached's `META_CHAR`). `mg` adds `Z`, `X` and `W` after them. `q`
//! suppresses the nominal reply (`EN` for `mg`, `HD` for the others); errors
//! are always sent.

use strata_protocol::meta::{encode_key, Reply};
use strata_protocol::ops;
use strata_protocol::reply::text as r;
use strata_store::{ArithOutcome, DeleteOutcome, ItemView, StoreError, StoreOutcome};

use crate::dispatch::Ctx;

fn flag(out: &mut Vec<u8>, c: u8) {
    out.push(b' ');
    out.push(c);
}

fn num(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// ` k<key>`, base64 (and ` b`) when the request's key was.
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

/// The reply line's start, to drop it again when `q` suppresses it.
fn suppress(out: &mut Vec<u8>, start: usize, quiet: bool) {
    if quiet {
        out.truncate(start);
    }
}

fn store_error(out: &mut Vec<u8>, e: StoreError) {
    out.extend_from_slice(match e {
        StoreError::TooLarge => r::TOO_LARGE,
        _ => r::OUT_OF_MEMORY_STORING,
    });
}

pub(crate) fn get(ctx: &mut Ctx<'_>, op: &ops::Get<'_>, reply: &Reply<'_>, value: bool, out: &mut Vec<u8>) {
    let now = ctx.shared.store.clock().now();
    let k = op.key.as_bytes();
    let start = out.len();
    let hit = ctx.get(op, |it| hit(out, &it, reply, value, now));
    match hit {
        Ok(Some(())) => {}
        Ok(None) => {
            out.extend_from_slice(b"EN");
            echo_flags(out, reply, k);
            out.extend_from_slice(b"\r\n");
            suppress(out, start, reply.quiet);
        }
        Err(e) => store_error(out, e),
    }
}

fn hit(out: &mut Vec<u8>, it: &ItemView<'_>, reply: &Reply<'_>, value: bool, now: u32) {
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

pub(crate) fn set(ctx: &mut Ctx<'_>, op: &ops::Set<'_>, reply: &Reply<'_>, out: &mut Vec<u8>) {
    let stored = match ctx.set(op) {
        Ok(s) => s,
        Err(e) => return store_error(out, e),
    };
    let start = out.len();
    out.extend_from_slice(match stored.outcome {
        StoreOutcome::Stored => b"HD",
        StoreOutcome::NotStored => b"NS",
        StoreOutcome::Exists => b"EX",
        StoreOutcome::NotFound => b"NF",
    });
    for tok in reply.flags.iter() {
        match tok[0] {
            b'O' => opaque(out, tok),
            b'k' => key(out, op.key.as_bytes(), reply.base64),
            b'c' => {
                flag(out, b'c');
                num(out, stored.cas);
            }
            b's' if stored.outcome == StoreOutcome::Stored => {
                flag(out, b's');
                num(out, stored.size);
            }
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    suppress(out, start, reply.quiet && stored.outcome == StoreOutcome::Stored);
}

pub(crate) fn too_large(ctx: &mut Ctx<'_>, key: &[u8], out: &mut Vec<u8>) {
    ctx.refuse_too_large(key);
    out.extend_from_slice(r::TOO_LARGE);
}

pub(crate) fn delete(ctx: &mut Ctx<'_>, op: &ops::Delete<'_>, reply: &Reply<'_>, out: &mut Vec<u8>) {
    let outcome = match ctx.delete(op) {
        Ok(o) => o,
        Err(e) => return store_error(out, e),
    };
    let start = out.len();
    out.extend_from_slice(match outcome {
        DeleteOutcome::Deleted => b"HD",
        DeleteOutcome::NotFound => b"NF",
        DeleteOutcome::Exists => b"EX",
    });
    echo_flags(out, reply, op.key.as_bytes());
    out.extend_from_slice(b"\r\n");
    suppress(out, start, reply.quiet && outcome == DeleteOutcome::Deleted);
}

pub(crate) fn arith(ctx: &mut Ctx<'_>, op: &ops::Arith<'_>, reply: &Reply<'_>, value: bool, out: &mut Vec<u8>) {
    let now = ctx.shared.store.clock().now();
    let counted = match ctx.arith(op) {
        Ok(c) => c,
        Err(_) => return out.extend_from_slice(r::OUT_OF_MEMORY),
    };
    let k = op.key.as_bytes();
    let start = out.len();
    let n = match counted.outcome {
        ArithOutcome::Value(n) => n,
        ArithOutcome::NonNumeric => return out.extend_from_slice(r::NON_NUMERIC),
        other => {
            out.extend_from_slice(match other {
                ArithOutcome::NotFound => b"NF",
                ArithOutcome::Exists => b"EX",
                _ => b"NS",
            });
            echo_flags(out, reply, k);
            out.extend_from_slice(b"\r\n");
            return;
        }
    };
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n).as_bytes();
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
            b'N' if counted.created => touched = true,
            b'c' => {
                flag(out, b'c');
                num(out, counted.cas);
            }
            b't' => {
                flag(out, b't');
                ttl(out, if touched { counted.expiry } else { counted.expiry_before }, now);
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
    // As in memcached, q hides the reply to an update but not to a creation.
    suppress(out, start, reply.quiet && !counted.created);
}

/// `me`: `ME <key> exp=.. la=.. cas=.. fetch=.. cls=.. size=..`. strata has
/// no slab classes; `cls` is always 1 (see docs/protocol.md).
pub(crate) fn debug(ctx: &mut Ctx<'_>, k: &ops::Key<'_>, out: &mut Vec<u8>) {
    let now = ctx.shared.store.clock().now();
    let Some(i) = ctx.store.inspect(k.as_bytes()) else {
        out.extend_from_slice(b"EN\r\n");
        return;
    };
    out.extend_from_slice(b"ME ");
    if i.binary_key {
        encode_key(k.as_bytes(), out);
    } else {
        out.extend_from_slice(k.as_bytes());
    }
    // memcached prints now - exptime here: negative while the item lives.
    out.extend_from_slice(b" exp=");
    if i.expiry == 0 {
        out.extend_from_slice(b"-1");
    } else {
        num(out, i64::from(now) - i64::from(i.expiry));
    }
    out.extend_from_slice(b" la=");
    num(out, now.saturating_sub(i.written));
    out.extend_from_slice(b" cas=");
    num(out, i.cas);
    out.extend_from_slice(if i.fetched { b" fetch=yes" } else { b" fetch=no" });
    out.extend_from_slice(b" cls=1 size=");
    num(out, i.size);
    out.extend_from_slice(b"\r\n");
}
