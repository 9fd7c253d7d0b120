//! `delete <key> [0] [noreply]`: the `0` is a relic of the removed hold time
//! and is the only value memcached still accepts there.

use super::{done, error, ClientError, Command, Line, Parse};
use crate::ops::{Delete, Key};
use crate::KEY_MAX_LENGTH;

pub(super) fn parse<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if !(3..=5).contains(&l.ntokens) {
        return error(ClientError::Error, false, consumed);
    }
    let mut noreply = false;
    if l.ntokens > 3 {
        let hold_is_zero = l.tokens[2] == b"0";
        noreply = l.noreply();
        let valid = (l.ntokens == 4 && (hold_is_zero || noreply)) || (l.ntokens == 5 && hold_is_zero && noreply);
        if !valid {
            return error(ClientError::DeleteUsage, noreply, consumed);
        }
    }
    let key = l.tokens[1];
    if key.len() > KEY_MAX_LENGTH {
        return error(ClientError::BadFormat, noreply, consumed);
    }
    done(Command::Delete(Delete::plain(Key::Raw(key))), noreply, consumed)
}
