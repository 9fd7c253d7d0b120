//! `incr|decr <key> <delta> [noreply]`: 64-bit unsigned arithmetic on a
//! decimal value; incr wraps, decr stops at zero (the store does the math).

use super::{done, error, ClientError, Command, Line, Parse};
use crate::numbers::parse_u64;
use crate::KEY_MAX_LENGTH;

pub(super) fn parse<'a>(l: &Line<'a>, incr: bool, consumed: usize) -> Parse<'a> {
    if !l.count_is(4, 5) {
        return error(ClientError::Error, false, consumed);
    }
    let noreply = l.noreply();
    let key = l.tokens[1];
    if key.len() > KEY_MAX_LENGTH {
        return error(ClientError::BadFormat, noreply, consumed);
    }
    let Some(delta) = parse_u64(l.tokens[2]) else {
        return error(ClientError::InvalidDelta, noreply, consumed);
    };
    done(Command::Arith { key, incr, delta }, noreply, consumed)
}
