//! `set add replace append prepend cas <key> <flags> <exptime> <bytes> [<cas>] [noreply]`
//! followed by a data block of `<bytes>` bytes and `\r\n`.

use super::{done, error, single_key, ClientError, Command, Config, Line, Parse};
use crate::numbers::{parse_i32, parse_u32, parse_u64};
use crate::ops::{Key, Mode, Set};

/// Where a storage command's data block is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Body<'a> {
    /// After the line in the buffer (`buf` is the whole buffer).
    Inline(&'a [u8]),
    /// Received apart (into the segment it is stored in: the server's
    /// landings); the buffer holds the line and the `\r\n` after the data.
    Apart { data: &'a [u8], buf: &'a [u8] },
}

/// A storage command's line: what its data block is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head<'a> {
    pub mode: Mode,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i32,
    /// `cas`: the compare value.
    pub compare: Option<u64>,
    /// The data block's length.
    pub vlen: usize,
    /// The line's length, newline included.
    pub line_len: usize,
}

/// Why a line takes no data block into a request: an error (and whether
/// `noreply` suppresses it), or an item over `-I` whose data is swallowed.
#[derive(Clone, Copy)]
enum Refused<'a> {
    Error(ClientError, bool),
    TooLarge { key: &'a [u8], swallow: usize, noreply: bool },
}

/// The line, checked in memcached's order; also whether it said `noreply`.
fn head<'a>(
    l: &Line<'a>,
    mode: Mode,
    cas: bool,
    line_len: usize,
    config: &Config,
) -> Result<(Head<'a>, bool), Refused<'a>> {
    let counts = if cas { (7, 8) } else { (6, 7) };
    let (key, noreply) = single_key(l, counts).map_err(|(e, noreply)| Refused::Error(e, noreply))?;
    let bad = Refused::Error(ClientError::BadFormat, noreply);
    let (Some(flags), Some(exptime), Some(vlen)) =
        (parse_u32(l.tokens[2]), parse_i32(l.tokens[3]), parse_i32(l.tokens[4]))
    else {
        return Err(bad);
    };
    let compare = match cas {
        true => Some(parse_u64(l.tokens[5]).ok_or(bad)?),
        false => None,
    };
    // memcached refuses negative lengths and those that overflow `vlen + 2`.
    let vlen = usize::try_from(vlen).ok().filter(|&v| v <= i32::MAX as usize - 2).ok_or(bad)?;
    if key.len() + vlen + config.item_overhead > config.item_size_max {
        return Err(Refused::TooLarge { key, swallow: vlen + 2, noreply });
    }
    Ok((Head { mode, key, flags, exptime, compare, vlen, line_len }, noreply))
}

/// `cas`: the command is `cas`, a set with a compare value (one more token).
pub(super) fn parse<'a>(
    l: &Line<'a>,
    mode: Mode,
    cas: bool,
    body: Body<'a>,
    line_len: usize,
    config: &Config,
) -> Parse<'a> {
    let (h, noreply) = match head(l, mode, cas, line_len, config) {
        Ok(h) => h,
        Err(Refused::Error(e, noreply)) => return error(e, noreply, line_len),
        Err(Refused::TooLarge { key, swallow, noreply }) => {
            return done(Command::TooLarge { mode, cas, key, swallow }, noreply, line_len)
        }
    };
    let vlen = h.vlen;
    let (data, trailer, total) = match body {
        Body::Inline(buf) => {
            let total = line_len + vlen + 2;
            if buf.len() < total {
                return Parse::Incomplete { need: total };
            }
            (&buf[line_len..line_len + vlen], &buf[line_len + vlen..total], total)
        }
        Body::Apart { data, buf } => {
            let total = line_len + 2;
            if buf.len() < total {
                return Parse::Incomplete { need: total };
            }
            if data.len() != vlen {
                return error(ClientError::BadDataChunk, noreply, total);
            }
            (data, &buf[line_len..total], total)
        }
    };
    if trailer != b"\r\n" {
        return error(ClientError::BadDataChunk, noreply, total);
    }
    let set = Set { compare: h.compare, ..Set::plain(mode, Key::Raw(h.key), h.flags, h.exptime, data) };
    done(Command::Store(set), noreply, total)
}

/// The line of a `set`, `add`, `replace` or `cas` (`l`, `line_len` bytes)
/// that will take a data block, if it is one.
pub(super) fn line<'a>(l: &Line<'a>, line_len: usize, config: &Config) -> Option<Head<'a>> {
    let (mode, cas) = match l.tokens[0] {
        b"set" => (Mode::Set, false),
        b"add" => (Mode::Add, false),
        b"replace" => (Mode::Replace, false),
        b"cas" => (Mode::Set, true),
        _ => return None,
    };
    head(l, mode, cas, line_len, config).ok().map(|(h, _)| h)
}
