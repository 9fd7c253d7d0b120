//! The invariants the server relies on from the text parser (classic and
//! meta commands), checked on every request a byte stream decodes into:
//!
//! - parsing never panics; a request consumes at least one byte and never
//!   more than are buffered;
//! - `Incomplete` asks for 0 (a line without its newline yet) or for more
//!   than is buffered, never for more than one maximal request;
//! - a request decodes the same from exactly its own bytes, and every
//!   shorter prefix of it is `Incomplete` — or, for a prefix that holds no
//!   newline and is past memcached's 2048-byte line limit, `Close`, as
//!   memcached (which also sees only what has arrived) closes there;
//! - keys, values, flag tokens and stats arguments borrowed from the buffer
//!   lie inside the bytes the request consumed; raw keys are at most 250
//!   bytes and values at most the item size limit;
//! - `Close` only for a line without a newline past 2048 bytes (that is
//!   not a `get` within its own limit) or an HTTP request line;
//! - a stream of requests decodes request by request to its end.

use strata_protocol::ops::Key;
use strata_protocol::text::{parse, Command, Config, Parse, MAX_COMMAND_LINE};
use strata_protocol::KEY_MAX_LENGTH;

pub const ITEM_MAX: usize = 4096;
pub const GET_LINE_MAX: usize = 8192;

pub fn config() -> Config {
    Config { item_size_max: ITEM_MAX, item_overhead: 23, max_get_line: GET_LINE_MAX, debug_clock: true }
}

/// Whether `part` lies inside `buf[..consumed]` (empty slices always do).
fn within(buf: &[u8], consumed: usize, part: &[u8]) -> bool {
    let start = buf.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    part.is_empty() || (p >= start && p + part.len() <= start + consumed)
}

/// The slices a request borrows from the buffer, and its raw keys.
fn borrowed<'a>(c: &Command<'a>) -> (Vec<&'a [u8]>, Vec<&'a [u8]>) {
    let mut slices = Vec::new();
    let mut keys = Vec::new();
    let mut key = |k: &Key<'a>, slices: &mut Vec<&'a [u8]>| {
        if let Key::Raw(k) = k {
            slices.push(*k);
            keys.push(*k);
        }
    };
    match c {
        Command::Get { keys: ks, .. } => slices.push(ks.as_bytes()),
        Command::Store(s) => {
            key(&s.key, &mut slices);
            slices.push(s.data);
        }
        Command::TooLarge { key: k, .. } => slices.push(k),
        Command::Delete(d) => key(&d.key, &mut slices),
        Command::Arith(a) => key(&a.key, &mut slices),
        Command::Touch(g) => key(&g.key, &mut slices),
        Command::Shutdown { mode: Some(m) } => slices.push(m),
        Command::Stats { args } => slices.push(args.0),
        Command::MetaGet { get, reply, .. } => {
            key(&get.key, &mut slices);
            slices.push(reply.flags.0);
        }
        Command::MetaSet { set, reply } => {
            key(&set.key, &mut slices);
            slices.push(set.data);
            slices.push(reply.flags.0);
        }
        Command::MetaTooLarge { key: k, reply, .. } => {
            key(k, &mut slices);
            slices.push(reply.flags.0);
        }
        Command::MetaDelete { del, reply } => {
            key(&del.key, &mut slices);
            slices.push(reply.flags.0);
        }
        Command::MetaArith { arith, reply, .. } => {
            key(&arith.key, &mut slices);
            slices.push(reply.flags.0);
        }
        Command::MetaDebug { key: k, .. } => key(k, &mut slices),
        _ => {}
    }
    (slices, keys)
}

/// Whether closing on `buf` is one of memcached's reasons.
fn may_close(buf: &[u8]) -> bool {
    match memchr::memchr(b'\n', buf) {
        // A whole line closes only as an HTTP request.
        Some(nl) => buf[..nl].windows(5).any(|w| w == b"HTTP/"),
        None => buf.len() > MAX_COMMAND_LINE,
    }
}

/// Decodes `data` request by request, checking every invariant above.
pub fn check_stream(data: &[u8]) {
    let cfg = config();
    // One maximal request: the longest line plus the largest data block.
    let max_need = GET_LINE_MAX.max(MAX_COMMAND_LINE + ITEM_MAX + 2) + 64;
    let mut rest = data;
    while !rest.is_empty() {
        match parse(rest, &cfg) {
            Parse::Close => {
                assert!(may_close(rest), "closed on {:?}", String::from_utf8_lossy(&rest[..rest.len().min(80)]));
                break;
            }
            Parse::Incomplete { need } => {
                assert!(need == 0 || (need > rest.len() && need <= max_need), "need {need} of {}", rest.len());
                break;
            }
            Parse::Done { request, consumed } => {
                assert!(consumed > 0 && consumed <= rest.len(), "consumed {consumed} of {}", rest.len());
                let (slices, keys) = borrowed(&request.command);
                for s in &slices {
                    assert!(within(rest, consumed, s), "a borrowed slice outside the request");
                }
                for k in &keys {
                    assert!(k.len() <= KEY_MAX_LENGTH, "key of {} bytes", k.len());
                }
                if let Command::Store(s) | Command::MetaSet { set: s, .. } = &request.command {
                    assert!(s.data.len() <= ITEM_MAX);
                }
                let again = parse(&rest[..consumed], &cfg);
                assert!(
                    matches!(&again, Parse::Done { request: r, consumed: c } if *c == consumed && *r == request),
                    "a request decodes differently from its own bytes: {again:?}"
                );
                let line_end = memchr::memchr(b'\n', rest).map_or(consumed, |nl| nl + 1);
                for cut in [0, 1, line_end.saturating_sub(2), line_end - 1, line_end, consumed - 1] {
                    if cut >= consumed {
                        continue;
                    }
                    match parse(&rest[..cut], &cfg) {
                        Parse::Incomplete { need } => {
                            assert!(need == 0 || need == consumed, "prefix {cut} needs {need}, request is {consumed}")
                        }
                        Parse::Close => assert!(may_close(&rest[..cut]), "prefix {cut} closes"),
                        Parse::Done { consumed: c, .. } => panic!("prefix {cut} of a {consumed}-byte request is one of {c}"),
                    }
                }
                rest = &rest[consumed..];
            }
        }
    }
}
