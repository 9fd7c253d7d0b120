//! `ma <key> <flag>*`: increment or decrement, optionally creating the item.

use super::{check_opaque, flag_tokens, key, preparse, Reply, MAX_TOKENS};
use crate::ops::Arith;
use crate::text::{done, error, ClientError, Command, Line, Parse};
use crate::KEY_MAX_LENGTH;

pub(crate) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if l.ntokens < 3 {
        return error(ClientError::Error, false, consumed);
    }
    if l.tokens[1].len() > KEY_MAX_LENGTH {
        return error(ClientError::BadFormat, false, consumed);
    }
    if l.ntokens > MAX_TOKENS {
        return error(ClientError::OptionsTooLongShort, false, consumed);
    }
    let flags = flag_tokens(l, 2);
    // memcached's md and ma report any trouble in the flag pass (the key's
    // base64 included) with one message.
    let bad_flags = error(ClientError::InvalidOrDuplicateFlag, false, consumed);
    let Ok((f, None)) = preparse(flags) else { return bad_flags };
    let Ok(key) = key(l, f.base64) else { return bad_flags };
    let incr = match f.mode {
        None | Some(b'I' | b'+') => true,
        Some(b'D' | b'-') => false,
        Some(_) => return error(ClientError::InvalidArithMode, false, consumed),
    };
    if let Err(e) = check_opaque(flags) {
        return error(e, false, consumed);
    }
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
