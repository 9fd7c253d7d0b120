//! Server-wide commands: `flush_all [delay] [noreply]`, `verbosity <n>
//! [noreply]`, `cache_memlimit <mb> [noreply]`, `lru_crawler
//! metadump|mgdump <all|hash|ids>`, `shutdown [graceful]`, memcached's
//! tuning commands (`slabs`, `lru`, `lru_crawler crawl|sleep|tocrawl|
//! enable|disable`, `extstore`: a [`Tune`]), and strata's own `snapshot`
//! (no arguments, parsed in `mod.rs`) and test-only `debug_advance_clock
//! <seconds>` (with the `test-hooks` feature). (`version`, `quit` and `stats` need no
//! argument parsing here.) Replies to what parses are the server's: it
//! knows the classes and the settings.

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

/// A class list: `all` (or `hash`, for the dumps), or ids `1,2,…` as a
/// bitmap; `None` for anything else (memcached's `BADCLASS`).
fn parse_classes(arg: &[u8]) -> Option<u64> {
    if arg == b"all" || arg == b"hash" {
        return Some(u64::MAX);
    }
    let mut bits = 0u64;
    for id in arg.split(|&b| b == b',') {
        bits |= 1 << parse_u32(id).filter(|n| (1..=MAX_CLASS).contains(n))?;
    }
    Some(bits)
}

/// `lru_crawler metadump|mgdump <all|hash|id[,id…]>`, and the crawler's
/// own subcommands: `crawl <all|ids>`, `sleep <µs>`, `tocrawl <n>`,
/// `enable`, `disable` (memcached's replies for what does not parse).
pub(super) fn parse_lru_crawler<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let sub = l.tokens.get(1).copied().unwrap_or_default();
    let tune = match (l.ntokens, sub) {
        (4, b"metadump" | b"mgdump") => {
            let Some(classes) = parse_classes(l.tokens[2]) else {
                return error(ClientError::BadClass, false, consumed);
            };
            return done(Command::Metadump { classes, mg: sub == b"mgdump" }, false, consumed);
        }
        (4, b"crawl") => match parse_classes(l.tokens[2]) {
            Some(classes) => Tune::Crawl { classes },
            None => return error(ClientError::BadClass, false, consumed),
        },
        (4, b"tocrawl") => match parse_u32(l.tokens[2]) {
            Some(n) => Tune::CrawlerToCrawl(n),
            None => return error(ClientError::BadFormat, false, consumed),
        },
        (4, b"sleep") => match parse_u32(l.tokens[2]) {
            Some(us) if us > 1_000_000 => return error(ClientError::SleepTooLong, false, consumed),
            Some(us) => Tune::CrawlerSleep(us),
            None => return error(ClientError::BadFormat, false, consumed),
        },
        (3, b"enable") => Tune::CrawlerEnable(true),
        (3, b"disable") => Tune::CrawlerEnable(false),
        _ => return error(ClientError::Error, false, consumed),
    };
    done(Command::Tune(tune), false, consumed)
}

/// memcached's run-time tuning commands, parsed. What each does in strata
/// (often: recorded and reported, because strata has no such machinery)
/// is the server's; docs/protocol.md lists them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tune {
    /// `slabs automove <0|1|2>`.
    SlabsAutomove(u32),
    /// `slabs automove ratio|freeratio|window <n>`.
    SlabsAutomoveParam(AutomoveParam, f64),
    /// `slabs reassign <src> <dst>` (the ids are not read: strata has no
    /// slab reassignment).
    /// `slabs reassign <src> <dst>`: the class ids, `None` if they are not
    /// numbers (memcached reads them only with reassignment on).
    SlabsReassign(Option<(i64, i64)>),
    /// `lru_crawler crawl <all|ids>`: a bitmap of class ids.
    Crawl { classes: u64 },
    /// `lru_crawler sleep <µs>` (at most a second).
    CrawlerSleep(u32),
    /// `lru_crawler tocrawl <n>`.
    CrawlerToCrawl(u32),
    /// `lru_crawler enable|disable`.
    CrawlerEnable(bool),
    /// `lru mode flat|segmented`.
    LruSegmented(bool),
    /// `lru temp_ttl <secs>` (negative: no temporary LRU).
    LruTempTtl(i32),
    /// `lru tune <hot pct> <warm pct> <hot factor> <warm factor>`.
    LruTune { hot_pct: u32, warm_pct: u32, hot_factor: f64, warm_factor: f64 },
    /// `extstore <setting> <value>` (memcached's names).
    Extstore(ExtSetting, f64),
}

// Every float in a `Tune` is finite (`parse_f64` refuses NaN and the
// infinities), so equality is total.
impl Eq for Tune {}

/// The `slabs automove` parameters besides the level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutomoveParam {
    Ratio,
    FreeRatio,
    Window,
}

/// The settings `extstore <name> <value>` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtSetting {
    ItemSize,
    ItemAge,
    LowTtl,
    RecacheRate,
    CompactUnder,
    DropUnder,
    MaxSleep,
    MaxFrag,
    DropUnread,
    /// Deprecated in memcached and ignored there too; kept for scripts.
    FreeMemchunks,
}

fn parse_f64(t: &[u8]) -> Option<f64> {
    std::str::from_utf8(t).ok()?.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// `slabs reassign <src> <dst>` and `slabs automove …`.
pub(super) fn parse_slabs<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let sub = l.tokens.get(1).copied().unwrap_or_default();
    if l.ntokens == 5 && sub == b"reassign" {
        // memcached checks that reassignment is on before it reads the
        // class ids: the server answers.
        let id = |t: &[u8]| std::str::from_utf8(t).ok()?.parse::<i64>().ok();
        let ids = id(l.tokens[2]).zip(id(l.tokens[3]));
        return done(Command::Tune(Tune::SlabsReassign(ids)), false, consumed);
    }
    if l.ntokens < 4 || sub != b"automove" {
        return error(ClientError::Error, false, consumed);
    }
    let noreply = l.noreply();
    let param = match l.tokens[2] {
        b"ratio" => Some(AutomoveParam::Ratio),
        b"freeratio" => Some(AutomoveParam::FreeRatio),
        b"window" => Some(AutomoveParam::Window),
        _ => None,
    };
    let tune = match param {
        Some(p) => match (l.ntokens >= 5).then(|| parse_f64(l.tokens[3])).flatten() {
            Some(v) => Tune::SlabsAutomoveParam(p, v),
            None => return error(ClientError::Error, noreply, consumed),
        },
        None => match parse_u32(l.tokens[2]) {
            Some(level @ 0..=2) => Tune::SlabsAutomove(level),
            Some(_) => return error(ClientError::Error, noreply, consumed),
            None => return error(ClientError::BadFormat, noreply, consumed),
        },
    };
    done(Command::Tune(tune), noreply, consumed)
}

/// `lru mode|temp_ttl|tune …`. memcached answers these only with its LRU
/// maintainer running; strata's reclaimer stands in for it (the server
/// checks).
pub(super) fn parse_lru<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let noreply = l.noreply();
    let sub = l.tokens.get(1).copied().unwrap_or_default();
    let tune = match sub {
        b"tune" if l.ntokens >= 7 => {
            let (Some(hot_pct), Some(warm_pct), Some(hot_factor), Some(warm_factor)) =
                (parse_u32(l.tokens[2]), parse_u32(l.tokens[3]), parse_f64(l.tokens[4]), parse_f64(l.tokens[5]))
            else {
                return error(ClientError::Error, noreply, consumed);
            };
            if u64::from(hot_pct) + u64::from(warm_pct) > 80 {
                return error(ClientError::LruPercents, noreply, consumed);
            }
            if hot_factor <= 0.0 || warm_factor <= 0.0 {
                return error(ClientError::LruFactors, noreply, consumed);
            }
            Tune::LruTune { hot_pct, warm_pct, hot_factor, warm_factor }
        }
        b"mode" if l.ntokens >= 4 => match l.tokens[2] {
            b"flat" => Tune::LruSegmented(false),
            b"segmented" => Tune::LruSegmented(true),
            _ => return error(ClientError::Error, noreply, consumed),
        },
        b"temp_ttl" if l.ntokens >= 4 => match parse_i32(l.tokens[2]) {
            Some(ttl) => Tune::LruTempTtl(ttl),
            None => return error(ClientError::Error, noreply, consumed),
        },
        _ => return error(ClientError::Error, noreply, consumed),
    };
    done(Command::Tune(tune), noreply, consumed)
}

/// `extstore <setting> <value>`: memcached's `OK`, or a bare `ERROR` for
/// an unknown setting or a value that does not parse.
pub(super) fn parse_extstore<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    let noreply = l.noreply();
    if l.ntokens < 4 {
        return error(ClientError::Error, noreply, consumed);
    }
    let setting = match l.tokens[1] {
        b"item_size" => ExtSetting::ItemSize,
        b"item_age" => ExtSetting::ItemAge,
        b"low_ttl" => ExtSetting::LowTtl,
        b"recache_rate" => ExtSetting::RecacheRate,
        b"compact_under" => ExtSetting::CompactUnder,
        b"drop_under" => ExtSetting::DropUnder,
        b"max_sleep" => ExtSetting::MaxSleep,
        b"max_frag" => ExtSetting::MaxFrag,
        b"drop_unread" => ExtSetting::DropUnread,
        b"free_memchunks" if l.ntokens > 4 => ExtSetting::FreeMemchunks,
        _ => return error(ClientError::Error, noreply, consumed),
    };
    let value = match setting {
        ExtSetting::MaxFrag => parse_f64(l.tokens[2]),
        ExtSetting::FreeMemchunks => parse_u32(l.tokens[2])
            .zip(parse_u32(l.tokens[3]))
            .filter(|(class, _)| *class < MAX_CLASS + 1)
            .map(|(class, _)| f64::from(class)),
        _ => parse_u32(l.tokens[2]).map(f64::from),
    };
    match value {
        Some(v) => done(Command::Tune(Tune::Extstore(setting, v)), noreply, consumed),
        None => error(ClientError::Error, noreply, consumed),
    }
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

#[cfg(feature = "test-hooks")]
pub(super) fn parse_debug_clock<'a>(l: &Line<'a>, consumed: usize) -> Parse<'a> {
    if l.ntokens != 3 {
        return error(ClientError::Error, false, consumed);
    }
    match parse_u32(l.tokens[1]) {
        Some(seconds) => done(Command::DebugAdvanceClock { seconds }, false, consumed),
        None => error(ClientError::BadFormat, false, consumed),
    }
}
