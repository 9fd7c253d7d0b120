//! Which requests change the cache: one classification of every request
//! the text, meta and binary parsers produce, from the request alone. Once
//! the durability log has failed, the executors refuse what this calls a
//! change before running it (`SERVER_ERROR durability log failed`; binary
//! status 0x82) and serve the rest. Every `match` here names each variant
//! and every [`ops::Read`] field, with no wildcard, so a command or read
//! option added later does not compile until it is classified here.
//!
//! A change is anything the durability log records (`strata_store::Journal`):
//! an item written, deleted, touched or marked, and `flush_all`. Eviction,
//! expiry, the crawler and `cache_memlimit` change what the cache holds but
//! are not logged (a recovery may bring back what they removed), so they
//! are not changes here. One change depends on the item and not on the
//! request: an `mg` that would win a stale item's recache token; the store
//! refuses that read when it finds so (`Worker::find`).

use strata_protocol::binary;
use strata_protocol::ops::{self, Mode};
use strata_protocol::text::Command;

/// A read changes the item when it touches it (`touch`, `gat`, `mg T`,
/// binary TOUCH and GAT) or creates it on a miss (`mg N`; `E` only gives
/// the created item its CAS).
pub(crate) fn read(r: &ops::Read) -> bool {
    let ops::Read { bump: _, touch, tokens: _, recache: _, vivify, new_cas: _, last_access: _, touch_miss_stats: _ } =
        r;
    touch.is_some() || vivify.is_some()
}

/// A classic storage command refused for size drops the key's old value
/// (memcached's `drop_old`) only for `set`, not `cas`.
pub(crate) fn text_too_large_drops(mode: Mode, cas: bool) -> bool {
    mode == Mode::Set && !cas
}

/// An `ms` refused for size drops the old value whatever its mode.
pub(crate) const META_TOO_LARGE_DROPS: bool = true;

/// A binary store refused for size drops the old value for SET, with a
/// CAS or not.
pub(crate) fn binary_too_large_drops(mode: Mode) -> bool {
    mode == Mode::Set
}

/// Whether a text or meta request changes the cache.
pub(crate) fn text(cmd: &Command<'_>) -> bool {
    match cmd {
        Command::Get { read: r, keys: _, cas: _ } => read(r),
        Command::Touch(get) | Command::MetaGet { get, reply: _, value: _ } => read(&get.read),
        Command::Store(_) | Command::MetaSet { .. } => true,
        Command::Delete(_) | Command::MetaDelete { .. } => true,
        Command::Arith(_) | Command::MetaArith { .. } => true,
        Command::FlushAll { delay: _ } => true,
        Command::TooLarge { mode, cas, key: _, swallow: _ } => text_too_large_drops(*mode, *cas),
        Command::MetaTooLarge { .. } => META_TOO_LARGE_DROPS,
        // Reads of metadata, and what changes the server, not the cache.
        Command::MetaDebug { .. }
        | Command::MetaNoop
        | Command::Metadump { .. }
        | Command::Stats { .. }
        | Command::Version
        | Command::Verbosity { .. }
        | Command::Watch { .. }
        | Command::RefreshCerts
        | Command::Quit
        | Command::Shutdown { .. }
        | Command::Snapshot
        | Command::Error(_)
        | Command::Swallow { .. } => false,
        // Unlogged: what they remove, a recovery may bring back.
        Command::CacheMemlimit { .. } | Command::Tune(_) => false,
        // Test hooks: time passing is not logged (expiry is not).
        #[cfg(feature = "test-hooks")]
        Command::DebugAdvanceClock { .. } | Command::DebugPanic => false,
    }
}

/// Whether a binary request changes the cache.
pub(crate) fn binary(cmd: &binary::Command<'_>) -> bool {
    use binary::Command as B;
    match cmd {
        B::Get { get, with_key: _ } | B::Touch(get) => read(&get.read),
        B::Store(_) | B::Delete(_) | B::Arith(_) | B::Flush { delay: _ } => true,
        B::TooLarge { mode, key: _, swallow: _ } => binary_too_large_drops(*mode),
        B::Quit
        | B::Noop
        | B::Version
        | B::Stat { .. }
        | B::SaslListMechs
        | B::SaslAuth { .. }
        | B::SaslStep { .. }
        | B::Unknown { .. }
        | B::Reject { .. }
        | B::Malformed
        | B::Invalid => false,
    }
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;
