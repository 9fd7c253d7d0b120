//! `touch <key> <exptime> [noreply]`: change an item's expiry without fetching it.

use super::{done, error, single_key, ClientError, Command, Line, Parse};
use crate::numbers::parse_i32;
use crate::ops::{Get, Key, Read};

pub(super) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let (key, noreply) = match single_key(l, (4, 5)) {
        Ok(k) => k,
        Err((e, noreply)) => return error(e, noreply, consumed),
    };
    let Some(exptime) = parse_i32(l.tokens[2]) else {
        return error(ClientError::InvalidExptime, noreply, consumed);
    };
    done(Command::Touch(Get { key: Key::Raw(key), read: Read::touch(exptime) }), noreply, consumed)
}
