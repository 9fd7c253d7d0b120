//! `ms <key> <datalen> <flag>*` followed by a data block of `<datalen>`
//! bytes and `\r\n`.
//!
//! Errors found after `<datalen>` is known swallow the data block, as
//! memcached does, so the connection stays in step.

use super::{check_opaque, flag_tokens, key, preparse, Reply, MAX_TOKENS};
use crate::numbers::parse_i32;
use crate::ops::{Mode, Set};
use crate::text::{done, error, ClientError, Command, Config, Line, Parse};
use crate::KEY_MAX_LENGTH;

pub(crate) fn parse<'a>(l: &Line<'a>, buf: &'a [u8], consumed: usize, config: &Config) -> Parse<'a> {
    // Until the data length is known nothing can be swallowed: the data
    // block is then read as a command, as memcached does.
    if l.ntokens < 3 {
        return error(ClientError::Error, false, consumed);
    }
    if l.tokens[1].len() > KEY_MAX_LENGTH || l.ntokens < 4 {
        return error(ClientError::BadFormat, false, consumed);
    }
    if l.ntokens > MAX_TOKENS {
        return error(ClientError::OptionsTooLongShort, false, consumed);
    }
    let vlen = match parse_i32(l.tokens[2]).map(usize::try_from) {
        Some(Ok(v)) if v <= i32::MAX as usize - 2 => v,
        _ => return error(ClientError::BadFormat, false, consumed),
    };
    let swallow = vlen + 2;
    let refuse = |e| done(Command::Swallow { error: e, swallow }, false, consumed);
    let flags = flag_tokens(l, 3);
    let f = match preparse(flags) {
        Ok((_, Some(e))) | Err(e) => return refuse(e),
        Ok((f, None)) => f,
    };
    let key = match key(l, f.base64).and_then(|k| check_opaque(flags).map(|()| k)) {
        Ok(k) => k,
        Err(e) => return refuse(e),
    };
    let mode = match f.mode {
        None | Some(b'S') => Mode::Set,
        Some(b'E') => Mode::Add,
        Some(b'A') => Mode::Append,
        Some(b'P') => Mode::Prepend,
        Some(b'R') => Mode::Replace,
        Some(_) => return refuse(ClientError::InvalidSetMode),
    };
    let reply = Reply { flags, quiet: f.quiet, base64: f.base64 };
    if key.as_bytes().len() + vlen + config.item_overhead > config.item_size_max {
        return done(Command::MetaTooLarge { key, reply, swallow }, false, consumed);
    }
    let total = consumed + vlen + 2;
    if buf.len() < total {
        return Parse::Incomplete { need: total };
    }
    if &buf[consumed + vlen..total] != b"\r\n" {
        return error(ClientError::BadDataChunk, false, total);
    }
    // memcached runs set and replace with a compare value as `cas` (a
    // missing item is NF); add, append and prepend keep their mode.
    let mode = match (mode, f.compare) {
        (Mode::Replace, Some(_)) => Mode::Set,
        (m, _) => m,
    };
    let vivify = if matches!(mode, Mode::Append | Mode::Prepend) { f.vivify } else { None };
    let set = Set {
        mode,
        key,
        flags: f.client_flags,
        exptime: f.ttl.unwrap_or(0),
        data: &buf[consumed..consumed + vlen],
        compare: f.compare,
        invalidate: f.invalidate && f.compare.is_some(),
        new_cas: f.new_cas,
        vivify,
        binary_key: f.base64,
    };
    done(Command::MetaSet { set, reply }, false, total)
}
