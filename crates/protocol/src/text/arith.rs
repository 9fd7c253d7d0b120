//! `incr|decr <key> <delta> [noreply]`: 64-bit unsigned arithmetic on a
//! decimal value; incr wraps, decr stops at zero (the store does the math).

use super::{done, error, single_key, ClientError, Command, Line, Parse};
use crate::numbers::parse_u64;
use crate::ops::{Arith, Key};

pub(super) fn parse<'a>(l: &Line<'a>, incr: bool, consumed: usize) -> Parse<'a> {
    let (key, noreply) = match single_key(l, (4, 5)) {
        Ok(k) => k,
        Err((e, noreply)) => return error(e, noreply, consumed),
    };
    let Some(delta) = parse_u64(l.tokens[2]) else {
        return error(ClientError::InvalidDelta, noreply, consumed);
    };
    done(Command::Arith(Arith::plain(Key::Raw(key), incr, delta)), noreply, consumed)
}
