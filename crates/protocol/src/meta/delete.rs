//! `md <key> <flag>*`: delete, or with `I` mark stale, or with `x` empty.

use super::{check_opaque, prologue, strict_flags, Reply};
use crate::ops::Delete;
use crate::text::{done, error, ClientError, Command, Line, Parse};

pub(crate) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let flags = match prologue(l, ClientError::OptionsTooLongShort) {
        Ok(flags) => flags,
        Err(e) => return error(e, false, consumed),
    };
    let (f, key) = match strict_flags(l, flags) {
        Ok(fk) => fk,
        Err(e) => return error(e, false, consumed),
    };
    if let Err(e) = check_opaque(flags) {
        return error(e, false, consumed);
    }
    let del = Delete {
        key,
        compare: f.compare,
        new_cas: f.new_cas,
        invalidate: f.invalidate,
        touch: f.ttl,
        remove_value: f.remove_value,
        flags: f.client_flags,
    };
    let reply = Reply { flags, quiet: f.quiet, base64: f.base64 };
    done(Command::MetaDelete { del, reply }, false, consumed)
}
