//! `ma <key> <flag>*`: increment or decrement, optionally creating the item.

use super::{flag_tokens, key, preparse, Reply, MAX_TOKENS};
use crate::ops::Arith;
use crate::text::{done, error, ClientError, Command, Line, Parse};
use crate::KEY_MAX_LENGTH;

pub(crate) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if l.ntokens < 3 || l.tokens[1].len() > KEY_MAX_LENGTH {
        return error(ClientError::BadFormat, false, consumed);
    }
    if l.ntokens > MAX_TOKENS {
        return error(ClientError::OptionsTooLong, false, consumed);
    }
    let flags = flag_tokens(l, 2);
    let f = match preparse(flags) {
        Ok((_, Some(e))) | Err(e) => return error(e, false, consumed),
        Ok((f, None)) => f,
    };
    let incr = match f.mode {
        None | Some(b'I' | b'i' | b'+') => true,
        Some(b'D' | b'd' | b'-') => false,
        Some(_) => return error(ClientError::InvalidArithMode, false, consumed),
    };
    let key = match key(l, f.base64) {
        Ok(k) => k,
        Err(e) => return error(e, false, consumed),
    };
    let arith = Arith {
        key,
        incr,
        delta: f.delta.unwrap_or(1),
        compare: f.compare,
        new_cas: f.new_cas,
        touch: f.ttl,
        vivify: f.vivify,
        initial: f.initial,
    };
    let reply = Reply { flags, quiet: f.quiet, base64: f.base64 };
    done(Command::MetaArith { arith, reply, value: f.value }, false, consumed)
}
