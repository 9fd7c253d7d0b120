//! `get|gets <key>*`, `gat|gats <exptime> <key>*` (and the ancient `bget`).
//!
//! Keys are not split up front: [`Keys`] walks the rest of the line lazily so a
//! multi-get of thousands of keys costs no allocation. A key over 250 bytes
//! stops the walk; the server then replies `CLIENT_ERROR bad command line
//! format` as memcached does.

use super::{done, error, ClientError, Command, Line, Parse};
use crate::numbers::parse_i32;
use crate::ops::Read;
use crate::KEY_MAX_LENGTH;

/// The keys of a retrieval command, borrowed from the request line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys<'a>(&'a [u8]);

/// One step of walking [`Keys`].
#[derive(Debug, PartialEq, Eq)]
pub enum Key<'a> {
    Ok(&'a [u8]),
    /// Longer than memcached's 250-byte limit: stop here with an error.
    TooLong,
}

impl<'a> Keys<'a> {
    pub fn new(rest: &'a [u8]) -> Self {
        Keys(rest)
    }

    /// The unparsed key bytes (for resuming a multi-get part way through).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The next key at or after byte `pos`, and the position after it.
    pub fn next_from(&self, pos: usize) -> Option<(Key<'a>, usize)> {
        let rest = self.0.get(pos..)?;
        let start = pos + rest.iter().position(|&b| b != b' ')?;
        let len = self.0[start..].iter().position(|&b| b == b' ').unwrap_or(self.0.len() - start);
        let k = &self.0[start..start + len];
        let key = if k.len() > KEY_MAX_LENGTH { Key::TooLong } else { Key::Ok(k) };
        Some((key, start + len))
    }

    pub fn iter(&self) -> impl Iterator<Item = Key<'a>> + 'a {
        self.0.split(|&b| b == b' ').filter(|t| !t.is_empty()).map(|k| {
            if k.len() > KEY_MAX_LENGTH {
                Key::TooLong
            } else {
                Key::Ok(k)
            }
        })
    }
}

pub(super) fn parse<'a>(l: &Line<'a>, cas: bool, touch: bool, consumed: usize) -> Parse<'a> {
    if l.ntokens < 3 {
        return error(ClientError::Error, false, consumed);
    }
    if !touch {
        return done(Command::Get { keys: Keys(l.after_command), cas, read: Read::GET }, false, consumed);
    }
    let Some(exptime) = parse_i32(l.tokens[1]) else {
        return error(ClientError::InvalidExptime, false, consumed);
    };
    // The keys start after the exptime token.
    let rest = l.after_command;
    let skip = rest.iter().take_while(|&&b| b == b' ').count() + l.tokens[1].len();
    let keys = Keys(&rest[skip.min(rest.len())..]);
    done(Command::Get { keys, cas, read: Read::get_and_touch(exptime) }, false, consumed)
}
