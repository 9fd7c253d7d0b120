//! `ma <key> <flag>*`: increment or decrement, optionally creating the item.

use super::{check_opaque, strict_prologue, Reply};
use crate::ops::Arith;
use crate::text::{done, error, ClientError, Command, Line, Parse};

pub(crate) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let (flags, f, key) = match strict_prologue(l) {
        Ok(parsed) => parsed,
        Err(e) => return error(e, false, consumed),
    };
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
