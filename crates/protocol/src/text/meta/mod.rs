//! The meta commands: `mg ms md ma mn me` (memcached `doc/protocol.txt`,
//! "Meta Commands").
//!
//! A meta command is `<cm> <key> [<datalen>] <flag>*`. Flags are one letter,
//! some followed by a token (`T30`, `Oabc`). Parsing follows memcached's
//! `proto_text.c`: the command's own checks first (token count, key length),
//! then one pass over the flags (`_meta_flag_preparse`) that stops at an
//! unknown or repeated flag and otherwise reports the last bad token. Every
//! meta command accepts every flag letter memcached knows and ignores those
//! that do not apply to it, as memcached does.
//!
//! Requests parse into the protocol-neutral [`crate::ops`] types plus a
//! [`Reply`] that keeps the flag tokens in request order, because the reply
//! echoes return flags (`k`, `O`, `c`, `t`...) in that order.
//!
//! One file per command: [`get`], [`set`], [`delete`], [`arith`], [`debug`]
//! (`me` and `mn`); [`reply`] writes the replies.

pub mod arith;
pub mod debug;
pub mod delete;
pub mod get;
pub mod reply;
pub mod set;

use base64::Engine;

use crate::numbers::{parse_i32, parse_u64};
use crate::ops::Key;
use crate::text::{ClientError, Line, Tokens};

/// memcached's `MFLAG_MAX_OPT_LENGTH`: more tokens than this (command and
/// key included, plus the terminal one) is an error.
pub const MAX_TOKENS: usize = 20;

/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`: the whole token, `O` included.
pub const MAX_OPAQUE: usize = 32;

/// What a meta reply needs from its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply<'a> {
    /// The flag tokens, in request order.
    pub flags: Tokens<'a>,
    /// `q`: suppress the nominal reply.
    pub quiet: bool,
    /// `b`: the key was sent in base64 and is returned that way.
    pub base64: bool,
}

/// The flags of one meta request (memcached's `struct _meta_flags`).
#[derive(Debug, Default)]
pub(crate) struct Flags {
    pub base64: bool,
    pub quiet: bool,
    pub value: bool,
    pub no_update: bool,
    pub last_access: bool,
    pub invalidate: bool,
    pub remove_value: bool,
    pub ttl: Option<i32>,
    pub vivify: Option<i32>,
    pub recache: Option<i32>,
    pub client_flags: u32,
    pub compare: Option<u64>,
    pub new_cas: Option<u64>,
    pub mode: Option<u8>,
    pub initial: u64,
    pub delta: Option<u64>,
}

/// The key token, decoded if `b` is among the flags.
pub(crate) fn decode_key(raw: &[u8]) -> Option<Key<'_>> {
    let mut buf = [0u8; 192];
    let engine = base64::engine::general_purpose::STANDARD;
    match engine.decode_slice(raw, &mut buf) {
        Ok(len) if len > 0 => Some(Key::Decoded(buf[..len].into())),
        _ => None,
    }
}

/// The base64 form of a key, for `k` and `me` replies on binary keys.
pub fn encode_key(key: &[u8], out: &mut Vec<u8>) {
    let engine = base64::engine::general_purpose::STANDARD;
    let start = out.len();
    out.resize(start + key.len().div_ceil(3) * 4, 0);
    // The buffer was sized for the encoding, so this cannot fail.
    let n = engine.encode_slice(key, &mut out[start..]).unwrap_or(0);
    out.truncate(start + n);
}

/// The flag pass: `Err` at an unknown or repeated flag, else the flags and
/// the last token error seen (memcached keeps going to learn what it can).
pub(crate) fn preparse(tokens: Tokens<'_>) -> Result<(Flags, Option<ClientError>), ClientError> {
    let mut f = Flags::default();
    let mut seen = [false; 128];
    let mut err = None;
    for tok in tokens.iter() {
        let o = tok[0];
        if o >= 127 || seen[usize::from(o)] {
            return Err(ClientError::DuplicateFlag);
        }
        seen[usize::from(o)] = true;
        let arg = &tok[1..];
        match o {
            b'b' => f.base64 = true,
            b'N' => match parse_i32(arg) {
                Some(t) => f.vivify = Some(t),
                None => err = Some(ClientError::BadToken),
            },
            b'T' => match parse_i32(arg) {
                Some(t) => f.ttl = Some(t),
                None => err = Some(ClientError::BadToken),
            },
            b'R' => match parse_i32(arg) {
                Some(t) => f.recache = Some(t),
                None => err = Some(ClientError::BadToken),
            },
            b'l' => f.last_access = true,
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'h' => {}
            b'v' => f.value = true,
            b'u' => f.no_update = true,
            b'q' => f.quiet = true,
            // memcached's safe_strtoul keeps the low 32 bits of a larger
            // number, and a bad one sets no message of its own.
            b'F' => match parse_u64(arg) {
                Some(v) => f.client_flags = v as u32,
                None => err = Some(err.unwrap_or(ClientError::BadFormat)),
            },
            b'C' => match parse_u64(arg) {
                Some(v) => f.compare = Some(v),
                None => err = Some(ClientError::BadToken),
            },
            b'E' => match parse_u64(arg) {
                Some(v) => f.new_cas = Some(v),
                None => err = Some(ClientError::BadToken),
            },
            b'M' => match arg {
                [m] => f.mode = Some(*m),
                _ => err = Some(ClientError::MTokenLength),
            },
            b'J' => match parse_u64(arg) {
                Some(v) => f.initial = v,
                None => err = Some(ClientError::BadToken),
            },
            b'D' => match parse_u64(arg) {
                Some(v) => f.delta = Some(v),
                None => err = Some(ClientError::BadToken),
            },
            b'I' => f.invalidate = true,
            b'x' => f.remove_value = true,
            _ => return Err(ClientError::InvalidFlag),
        }
    }
    Ok((f, err))
}

/// The checks after the flag pass: an opaque token (`O` included) longer
/// than [`MAX_OPAQUE`] is refused, on hits and misses alike.
pub(crate) fn check_opaque(tokens: Tokens<'_>) -> Result<(), ClientError> {
    match tokens.iter().any(|t| t[0] == b'O' && t.len() > MAX_OPAQUE) {
        true => Err(ClientError::OpaqueTooLong),
        false => Ok(()),
    }
}

/// The key of a meta request, decoded when the flags ask for base64.
pub(crate) fn key<'a>(l: &Line<'a>, base64: bool) -> Result<Key<'a>, ClientError> {
    let raw = l.tokens[1];
    if !base64 {
        return Ok(Key::Raw(raw));
    }
    decode_key(raw).ok_or(ClientError::KeyDecode)
}

/// The opening `mg`, `md` and `ma` share, in memcached's order: too few
/// tokens (`ERROR`), a key over 250 bytes (`CLIENT_ERROR bad command line
/// format`), then too many flags (`too_many`: each command's wording).
/// The flag tokens, or the error to answer with.
pub(crate) fn prologue<'a>(l: &Line<'a>, too_many: ClientError) -> Result<Tokens<'a>, ClientError> {
    if l.ntokens < 3 {
        return Err(ClientError::Error);
    }
    if l.tokens[1].len() > crate::KEY_MAX_LENGTH {
        return Err(ClientError::BadFormat);
    }
    if l.ntokens > MAX_TOKENS {
        return Err(too_many);
    }
    Ok(flag_tokens(l, 2))
}

/// `md` and `ma`'s opening: the [`prologue`], then a flag pass in which
/// memcached reports any trouble (the key's base64 included) as one error.
/// The flag tokens, the flags and the key.
pub(crate) fn strict_prologue<'a>(l: &Line<'a>) -> Result<(Tokens<'a>, Flags, Key<'a>), ClientError> {
    let flags = prologue(l, ClientError::OptionsTooLongShort)?;
    let Ok((f, None)) = preparse(flags) else { return Err(ClientError::InvalidOrDuplicateFlag) };
    let key = key(l, f.base64).map_err(|_| ClientError::InvalidOrDuplicateFlag)?;
    Ok((flags, f, key))
}

/// The flag tokens of a line, from token `first` on.
pub(crate) fn flag_tokens<'a>(l: &Line<'a>, first: usize) -> Tokens<'a> {
    Tokens(l.rest_from(first))
}

#[cfg(test)]
mod tests;
