//! Server-wide commands: `flush_all [delay] [noreply]`, `verbosity <n>
//! [noreply]`, `cache_memlimit <mb> [noreply]`, `lru_crawler
//! metadump|mgdump <all|hash|ids>`, `shutdown [graceful]`, and strata's own `snapshot`
//! (no arguments, parsed in `mod.rs`) and test-only `debug_advance_clock
//! <seconds>`. (`version`, `quit` and `stats` need no
//! argument parsing here.)

use super::{done, error, ClientError, Command, Line, Parse};
use crate::numbers::{parse_i32, parse_u32};

pub(super) fn parse_flush_all<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if !(2..=4).contains(&l.ntokens) {
        return error(ClientError::Error, false, consumed);
    }
    let noreply = l.noreply();
    let mut delay = 0;
    if l.ntokens != if noreply { 3 } else { 2 } {
        match parse_i32(l.tokens[1]) {
            Some(d) => delay = d,
            None => return error(ClientError::InvalidExptime, noreply, consumed),
        }
    }
    done(Command::FlushAll { delay }, noreply, consumed)
}

pub(super) fn parse_verbosity<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if !l.count_is(3, 4) {
        return error(ClientError::Error, false, consumed);
    }
    let noreply = l.noreply();
    match parse_u32(l.tokens[1]) {
        Some(level) => done(Command::Verbosity { level }, noreply, consumed),
        None => error(ClientError::BadFormat, noreply, consumed),
    }
}

pub(super) fn parse_cache_memlimit<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if !l.count_is(3, 4) {
        return error(ClientError::Error, false, consumed);
    }
    let noreply = l.noreply();
    match parse_u32(l.tokens[1]) {
        Some(megabytes) => done(Command::CacheMemlimit { megabytes }, noreply, consumed),
        None => error(ClientError::Error, noreply, consumed),
    }
}

/// Highest slab class id memcached accepts (its `MAX_SLAB_CLASSES` - 1).
const MAX_CLASS: u32 = 63;

/// `lru_crawler metadump|mgdump <all|hash|id[,id…]>`. memcached's other
/// crawler subcommands tune its LRU crawler thread, which strata does not
/// have: they stay unknown (`ERROR`).
pub(super) fn parse_lru_crawler<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let mg = match (l.ntokens, l.tokens.get(1).copied()) {
        (4, Some(b"metadump")) => false,
        (4, Some(b"mgdump")) => true,
        _ => return error(ClientError::Error, false, consumed),
    };
    let classes = match l.tokens[2] {
        b"all" | b"hash" => u64::MAX,
        ids => {
            let mut bits = 0u64;
            for id in ids.split(|&b| b == b',') {
                match parse_u32(id).filter(|n| (1..=MAX_CLASS).contains(n)) {
                    Some(n) => bits |= 1 << n,
                    None => return error(ClientError::BadClass, false, consumed),
                }
            }
            bits
        }
    };
    done(Command::Metadump { classes, mg }, false, consumed)
}

pub(super) fn parse_shutdown<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let mode = match l.ntokens {
        2 => None,
        _ => Some(l.tokens[1]),
    };
    // Anything but a bare `shutdown` or `shutdown graceful` is an invalid mode.
    let mode = if l.ntokens > 3 { Some(&b""[..]) } else { mode };
    done(Command::Shutdown { mode }, false, consumed)
}

pub(super) fn parse_debug_clock<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if l.ntokens != 3 {
        return error(ClientError::Error, false, consumed);
    }
    match parse_u32(l.tokens[1]) {
        Some(seconds) => done(Command::DebugAdvanceClock { seconds }, false, consumed),
        None => error(ClientError::BadFormat, false, consumed),
    }
}
