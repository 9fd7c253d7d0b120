//! `md <key> <flag>*`: delete, or with `I` mark stale, or with `x` empty.

use super::{check_opaque, flag_tokens, key, preparse, Reply, MAX_TOKENS};
use crate::ops::Delete;
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
