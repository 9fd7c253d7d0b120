//! memcached's binary protocol (`protocol_binary.h`, memcached 1.6 `proto_bin.c`).
//!
//! [`parse`] decodes one request packet from the front of a read buffer;
//! [`response`] composes reply packets. Like the text parser it does no I/O
//! and knows nothing of storage: the server runs the decoded request through
//! the same semantic core as text and meta commands.
//!
//! Every packet starts with a 24-byte header, big-endian throughout:
//!
//! ```text
//!  byte  0        1        2        3
//!      +--------+--------+--------+--------+
//!    0 | magic  | opcode |   key length    |   magic: 0x80 request, 0x81 response
//!      +--------+--------+--------+--------+
//!    4 | extlen | dtype  | vbucket/status  |   request: vbucket (ignored);
//!      +--------+--------+--------+--------+   response: status
//!    8 |        total body length          |   extras + key + value
//!      +--------+--------+--------+--------+
//!   12 |              opaque               |   echoed in the reply
//!      +--------+--------+--------+--------+
//!   16 |                CAS                |
//!   20 |                                   |
//!      +--------+--------+--------+--------+
//!   24   extras, then key, then value (body length in all)
//! ```
//!
//! As in memcached (`proto_bin.c`), a request is judged once its header,
//! extras and key have arrived (at most [`READ_WINDOW`] bytes; more, and the
//! connection is dropped): lengths that do not add up, a key over 250 bytes,
//! or extras of the wrong size for the opcode are refused before any value
//! byte is awaited, and a value over `-I` is refused from its header, so no
//! buffer is ever sized by a length the client sent. Only the bytes
//! memcached reads are consumed: a `TOUCH` whose body is longer than its
//! extras and key leaves the rest to be read as the next packet, as in
//! memcached.

pub mod response;
#[cfg(test)]
mod tests;

use crate::ops::{self, Key, Mode, Read};
use crate::text::Config;
use crate::KEY_MAX_LENGTH;

/// Length of a request or response header.
pub const HEADER_LEN: usize = 24;
/// First byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Longest SASL mechanism name (memcached's `MAX_SASL_MECH_LEN`).
pub const MAX_SASL_MECH_LEN: usize = 32;
/// The header, extras and key must fit in this many bytes: memcached reads
/// them into its 16 KB read buffer before judging a request, and drops the
/// connection when they cannot fit. (Keys over 250 bytes are refused, but
/// only once they have arrived, as memcached does.)
pub const READ_WINDOW: usize = 16 * 1024;

/// Request opcodes memcached 1.6 serves.
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    /// Defined by `protocol_binary.h` but not served by memcached 1.6: it
    /// answers `UNKNOWN_COMMAND`, and so does strata.
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    InvalidArguments = 0x04,
    NotStored = 0x05,
    DeltaBadValue = 0x06,
    AuthError = 0x20,
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
}

impl Status {
    /// The body memcached sends with an error status (`write_bin_error`).
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success | Status::AuthContinue => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::DeltaBadValue => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
        }
    }
}

/// A decoded request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub opcode: u8,
    pub keylen: u16,
    pub extlen: u8,
    pub bodylen: u32,
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Reads the 24 header bytes; `None` when the magic is not a request's.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Option<Header> {
        if b[0] != REQUEST_MAGIC {
            return None;
        }
        Some(Header {
            opcode: b[1],
            keylen: u16::from_be_bytes([b[2], b[3]]),
            extlen: b[4],
            bodylen: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            opaque: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            cas: u64::from_be_bytes([b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23]]),
        })
    }

    /// Whether the opcode is a quiet variant: its success (and a get's miss)
    /// gets no reply.
    pub fn quiet(&self) -> bool {
        use opcode::*;
        matches!(
            self.opcode,
            GETQ | GETKQ
                | SETQ
                | ADDQ
                | REPLACEQ
                | DELETEQ
                | INCREMENTQ
                | DECREMENTQ
                | QUITQ
                | FLUSHQ
                | APPENDQ
                | PREPENDQ
                | GATQ
                | GATKQ
        )
    }
}

/// What a request asks for; keys and values borrow the read buffer. The
/// data commands carry the same protocol-neutral requests ([`crate::ops`])
/// as the text and meta commands; only the reply (a packet for the
/// request's [`Header`]) is the binary protocol's own.
#[derive(Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// GET, GETK and their quiet forms; GAT and GATK (a read that touches).
    /// `with_key`: the reply carries the key.
    Get {
        get: ops::Get<'a>,
        with_key: bool,
    },
    /// TOUCH: a read that only sets a new exptime.
    Touch(ops::Get<'a>),
    /// SET ADD REPLACE APPEND PREPEND (and quiet forms). A non-zero CAS in
    /// the header is the compare value, and turns ADD and REPLACE into a
    /// compare-and-set (memcached runs them all as `NREAD_CAS`).
    Store(ops::Set<'a>),
    /// A store whose item exceeds `-I`: the reply goes out and the value's
    /// `swallow` bytes are discarded unread.
    TooLarge {
        mode: ops::Mode,
        key: &'a [u8],
        swallow: usize,
    },
    /// DELETE; the header's CAS, when non-zero, must match.
    Delete(ops::Delete<'a>),
    /// INCREMENT/DECREMENT; an exptime of 0xffffffff means "do not create".
    Arith(ops::Arith<'a>),
    Quit,
    Flush {
        delay: i32,
    },
    Noop,
    Version,
    /// STAT with its group (empty for the general stats).
    Stat {
        group: &'a [u8],
    },
    SaslListMechs,
    SaslAuth {
        mech: &'a [u8],
        data: &'a [u8],
    },
    SaslStep {
        mech: &'a [u8],
        data: &'a [u8],
    },
    /// An opcode memcached does not serve (VERBOSITY included: 1.6 no
    /// longer answers it): the reply goes out, and after the extras and key
    /// a further `swallow` bytes (the whole body length, as memcached
    /// counts it) are discarded; the connection stays.
    Unknown {
        swallow: usize,
    },
    /// A request refused with `status` whose remaining `swallow` body bytes
    /// are discarded; the connection stays (a SASL mechanism name over 32
    /// bytes, or SASL data larger than an item).
    Reject {
        status: Status,
        swallow: usize,
    },
    /// Key and extras lengths exceed the body length: memcached answers
    /// `UnknownCommand` and closes.
    Malformed,
    /// Lengths wrong for the opcode or a key over 250 bytes: memcached
    /// answers `InvalidArguments` and closes.
    Invalid,
}

/// A decoded request.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub header: Header,
    pub command: Command<'a>,
}

/// The outcome of looking at the front of the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parse<'a> {
    Done {
        request: Request<'a>,
        consumed: usize,
    },
    /// Not enough bytes yet; `need` is the buffer length that will do.
    Incomplete {
        need: usize,
    },
    /// Not a request packet: memcached closes the connection without a reply.
    Close,
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Binary exptimes are unsigned; beyond `i32::MAX` they are absolute times
/// past 2038, which the server's clock treats alike. The one place the
/// binary protocol's times become the requests' signed ones.
fn exptime(t: u32) -> i32 {
    i32::try_from(t).unwrap_or(i32::MAX)
}

/// The header's CAS as a compare value (0: none).
fn compare(cas: u64) -> Option<u64> {
    (cas != 0).then_some(cas)
}

fn be_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Decodes the request at the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], config: &Config) -> Parse<'a> {
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        return Parse::Incomplete { need: HEADER_LEN };
    };
    let Some(h) = Header::decode(head) else { return Parse::Close };
    let done = |command, consumed| Parse::Done { request: Request { header: h, command }, consumed };
    let (keylen, extlen, bodylen) = (usize::from(h.keylen), usize::from(h.extlen), h.bodylen as usize);
    // Bytes every command reads before it is judged: header, extras, key.
    let head_len = HEADER_LEN + extlen + keylen;
    if head_len > READ_WINDOW {
        return Parse::Close;
    }
    if buf.len() < head_len {
        return Parse::Incomplete { need: head_len };
    }
    if keylen + extlen > bodylen {
        return done(Command::Malformed, head_len);
    }
    if keylen > KEY_MAX_LENGTH {
        return done(Command::Invalid, head_len);
    }
    let with_body = |n: usize| match buf.len() >= n {
        true => Some(&buf[HEADER_LEN..n]),
        false => None,
    };
    use opcode::*;
    let valid = match h.opcode {
        GET | GETQ | GETK | GETKQ | DELETE | DELETEQ => extlen == 0 && keylen > 0 && bodylen == keylen,
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => extlen == 8 && keylen > 0,
        APPEND | APPENDQ | PREPEND | PREPENDQ => extlen == 0 && keylen > 0,
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => extlen == 20 && keylen > 0 && bodylen == keylen + extlen,
        QUIT | QUITQ | NOOP | VERSION | SASL_LIST_MECHS => bodylen == 0,
        FLUSH | FLUSHQ => keylen == 0 && bodylen == extlen && (extlen == 0 || extlen == 4),
        STAT => extlen == 0,
        TOUCH | GAT | GATQ | GATK | GATKQ => extlen == 4 && keylen > 0,
        SASL_AUTH | SASL_STEP => extlen == 0 && keylen > 0,
        _ => return done(Command::Unknown { swallow: bodylen }, head_len),
    };
    if !valid {
        return done(Command::Invalid, head_len);
    }
    match h.opcode {
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | APPEND | APPENDQ | PREPEND | PREPENDQ => {
            parse_store(h, buf, head_len, config)
        }
        SASL_AUTH | SASL_STEP => {
            let total = HEADER_LEN + bodylen;
            let swallow = bodylen - keylen;
            if keylen > MAX_SASL_MECH_LEN {
                return done(Command::Reject { status: Status::InvalidArguments, swallow }, head_len);
            }
            // memcached reads the data into an item: larger than one, it
            // answers "out of memory".
            if swallow > config.item_size_max {
                return done(Command::Reject { status: Status::OutOfMemory, swallow }, head_len);
            }
            let Some(body) = with_body(total) else { return Parse::Incomplete { need: total } };
            let (mech, data) = body.split_at(keylen);
            match h.opcode {
                SASL_AUTH => done(Command::SaslAuth { mech, data }, total),
                _ => done(Command::SaslStep { mech, data }, total),
            }
        }
        _ => {
            let Some(body) = with_body(head_len) else { return Parse::Incomplete { need: head_len } };
            let (extras, key) = body.split_at(extlen);
            let get = |read| ops::Get { key: Key::Raw(key), read };
            let command = match h.opcode {
                GET | GETQ => Command::Get { get: get(Read::GET), with_key: false },
                GETK | GETKQ => Command::Get { get: get(Read::GET), with_key: true },
                GAT | GATQ => Command::Get { get: get(Read::get_and_touch(exptime(be_u32(extras)))), with_key: false },
                GATK | GATKQ => Command::Get { get: get(Read::get_and_touch(exptime(be_u32(extras)))), with_key: true },
                TOUCH => Command::Touch(get(Read::touch(exptime(be_u32(extras))))),
                DELETE | DELETEQ => {
                    Command::Delete(ops::Delete { compare: compare(h.cas), ..ops::Delete::plain(Key::Raw(key)) })
                }
                INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
                    let expires = be_u32(&extras[16..]);
                    Command::Arith(ops::Arith {
                        compare: compare(h.cas),
                        // 0xffffffff: fail on a miss rather than create.
                        vivify: (expires != u32::MAX).then(|| exptime(expires)),
                        initial: be_u64(&extras[8..]),
                        ..ops::Arith::plain(Key::Raw(key), matches!(h.opcode, INCREMENT | INCREMENTQ), be_u64(extras))
                    })
                }
                QUIT | QUITQ => Command::Quit,
                FLUSH | FLUSHQ => Command::Flush { delay: if extlen == 4 { exptime(be_u32(extras)) } else { 0 } },
                NOOP => Command::Noop,
                VERSION => Command::Version,
                STAT => Command::Stat { group: key },
                _ => Command::SaslListMechs,
            };
            done(command, head_len)
        }
    }
}

/// A set, add, replace, append or prepend, whose header (valid for its
/// opcode), extras and key, `head_len` bytes, are in `buf`.
fn parse_store<'a>(h: Header, buf: &'a [u8], head_len: usize, config: &Config) -> Parse<'a> {
    use opcode::*;
    let done = |command, consumed| Parse::Done { request: Request { header: h, command }, consumed };
    let (keylen, extlen, bodylen) = (usize::from(h.keylen), usize::from(h.extlen), h.bodylen as usize);
    let mode = match h.opcode {
        SET | SETQ => Mode::Set,
        ADD | ADDQ => Mode::Add,
        REPLACE | REPLACEQ => Mode::Replace,
        APPEND | APPENDQ => Mode::Append,
        _ => Mode::Prepend,
    };
    let vlen = bodylen - extlen - keylen;
    if keylen + vlen + config.item_overhead > config.item_size_max {
        let Some(body) = buf.get(HEADER_LEN..head_len) else { return Parse::Incomplete { need: head_len } };
        let key = &body[extlen..];
        return done(Command::TooLarge { mode, key, swallow: vlen }, head_len);
    }
    let total = HEADER_LEN + bodylen;
    let Some(body) = buf.get(HEADER_LEN..total) else { return Parse::Incomplete { need: total } };
    let (flags, expires) = match extlen {
        8 => (be_u32(body), be_u32(&body[4..])),
        _ => (0, 0),
    };
    let key = &body[extlen..extlen + keylen];
    let value = &body[extlen + keylen..];
    // Any store with a CAS is a compare-and-swap, add and replace
    // included (memcached turns them all into NREAD_CAS).
    let mode = match (mode, compare(h.cas)) {
        (Mode::Add | Mode::Replace, Some(_)) => Mode::Set,
        (m, _) => m,
    };
    let set =
        ops::Set { compare: compare(h.cas), ..ops::Set::plain(mode, Key::Raw(key), flags, exptime(expires), value) };
    done(Command::Store(set), total)
}
