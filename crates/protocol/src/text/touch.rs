//! `touch <key> <exptime> [noreply]`: change an item's expiry without fetching it.

use super::{done, error, ClientError, Command, Line, Parse};
use crate::numbers::parse_i32;
use crate::KEY_MAX_LENGTH;

pub(super) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if !l.count_is(4, 5) {
        return error(ClientError::Error, false, consumed);
    }
    let noreply = l.noreply();
    let key = l.tokens[1];
    if key.len() > KEY_MAX_LENGTH {
        return error(ClientError::BadFormat, noreply, consumed);
    }
    let Some(exptime) = parse_i32(l.tokens[2]) else {
        return error(ClientError::InvalidExptime, noreply, consumed);
    };
    done(Command::Touch { key, exptime }, noreply, consumed)
}
