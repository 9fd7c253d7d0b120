//! `me <key> [b]`: an item's metadata in memcached's `key=value` form, and
//! `mn`: the pipeline barrier, always `MN`.

use super::decode_key;
use crate::ops::Key;
use crate::text::{done, error, ClientError, Command, Line, Parse};
use crate::KEY_MAX_LENGTH;

pub(crate) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if l.ntokens < 3 || l.tokens[1].len() > KEY_MAX_LENGTH {
        return error(ClientError::BadFormat, false, consumed);
    }
    let raw = l.tokens[1];
    let base64 = l.ntokens >= 4 && l.tokens[2] == b"b";
    let key = if base64 {
        match decode_key(raw) {
            Some(k) => k,
            // memcached's `me` words a bad base64 key as a format error.
            None => return error(ClientError::BadFormat, false, consumed),
        }
    } else {
        Key::Raw(raw)
    };
    done(Command::MetaDebug { key, base64 }, false, consumed)
}
