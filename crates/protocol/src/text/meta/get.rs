//! `mg <key> <flag>*`: read an item, and optionally touch it, hand out the
//! recache token, or create it on a miss.

use super::{check_opaque, key, preparse, prologue, Reply};
use crate::ops::{Get, Read};
use crate::text::{done, error, ClientError, Command, Line, Parse};

pub(crate) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let flags = match prologue(l, ClientError::OptionsTooLong) {
        Ok(flags) => flags,
        Err(e) => return error(e, false, consumed),
    };
    let f = match preparse(flags) {
        Ok((_, Some(e))) | Err(e) => return error(e, false, consumed),
        Ok((f, None)) => f,
    };
    let key = match key(l, f.base64).and_then(|k| check_opaque(flags).map(|()| k)) {
        Ok(k) => k,
        Err(e) => return error(e, false, consumed),
    };
    let read = Read {
        bump: !f.no_update,
        touch: f.ttl,
        tokens: true,
        recache: f.recache,
        vivify: f.vivify,
        new_cas: f.new_cas,
        last_access: f.last_access,
        touch_miss_stats: false,
    };
    let get = Get { key, read };
    let reply = Reply { flags, quiet: f.quiet, base64: f.base64 };
    done(Command::MetaGet { get, reply, value: f.value }, false, consumed)
}
