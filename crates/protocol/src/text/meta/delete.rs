//! `md <key> <flag>*`: delete, or with `I` mark stale, or with `x` empty.

use super::{check_opaque, strict_prologue, Reply};
use crate::ops::Delete;
use crate::text::{done, error, Command, Line, Parse};

pub(crate) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let (flags, f, key) = match strict_prologue(l) {
        Ok(parsed) => parsed,
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
