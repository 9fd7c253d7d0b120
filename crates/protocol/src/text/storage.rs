//! `set add replace append prepend cas <key> <flags> <exptime> <bytes> [<cas>] [noreply]`
//! followed by a data block of `<bytes>` bytes and `\r\n`.

use super::{done, error, single_key, ClientError, Command, Config, Line, Parse};
use crate::numbers::{parse_i32, parse_u32, parse_u64};
use crate::ops::{Key, Mode, Set};

/// `cas`: the command is `cas`, a set with a compare value (one more token).
pub(super) fn parse<'a>(
    l: &Line<'a>,
    mode: Mode,
    cas: bool,
    buf: &'a [u8],
    line_len: usize,
    config: &Config,
) -> Parse<'a> {
    let counts = if cas { (7, 8) } else { (6, 7) };
    let (key, noreply) = match single_key(l, counts) {
        Ok(k) => k,
        Err((e, noreply)) => return error(e, noreply, line_len),
    };
    let (Some(flags), Some(exptime), Some(vlen)) =
        (parse_u32(l.tokens[2]), parse_i32(l.tokens[3]), parse_i32(l.tokens[4]))
    else {
        return error(ClientError::BadFormat, noreply, line_len);
    };
    let compare = match cas {
        true => match parse_u64(l.tokens[5]) {
            Some(unique) => Some(unique),
            None => return error(ClientError::BadFormat, noreply, line_len),
        },
        false => None,
    };
    // memcached refuses negative lengths and those that overflow `vlen + 2`.
    let Ok(vlen) = usize::try_from(vlen) else {
        return error(ClientError::BadFormat, noreply, line_len);
    };
    if vlen > i32::MAX as usize - 2 {
        return error(ClientError::BadFormat, noreply, line_len);
    }
    if key.len() + vlen + config.item_overhead > config.item_size_max {
        return done(Command::TooLarge { mode, cas, key, swallow: vlen + 2 }, noreply, line_len);
    }
    let total = line_len + vlen + 2;
    if buf.len() < total {
        return Parse::Incomplete { need: total };
    }
    if &buf[line_len + vlen..total] != b"\r\n" {
        return error(ClientError::BadDataChunk, noreply, total);
    }
    let data = &buf[line_len..line_len + vlen];
    let set = Set { compare, ..Set::plain(mode, Key::Raw(key), flags, exptime, data) };
    done(Command::Store(set), noreply, total)
}
