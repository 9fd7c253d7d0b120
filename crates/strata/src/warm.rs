//! The warm start: with `--snapshot-dir` (or `-e`), the store is built on
//! the snapshot's timeline and filled from it before the port opens, as
//! memcached's warm restart does (a client that got misses from a
//! half-loaded cache would send them all to its database). The work is
//! `strata_persist::recover`'s, the same path the crash simulator tests;
//! this module reports what it did.

use std::sync::Arc;

use strata_persist::{Loaded, RecoverError, RecoverOpts};
use strata_server::SnapshotConfig;
use strata_store::{Clock, Config, ConfigError, Store};

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Only with `--snapshot-strict`.
    #[error("snapshot: {0}")]
    Snapshot(String),
    /// The durability log cannot be replayed or opened.
    #[error("durability log: {0}")]
    Durability(String),
    /// Another process uses the snapshot, or its lock file cannot be made.
    #[error("snapshot lock {0}")]
    Locked(String),
    /// The snapshot's directory does not exist and cannot be made.
    #[error("cannot create the snapshot directory {0}")]
    Dir(String),
}

/// Builds the store, and loads the snapshot into it if there is one.
/// Without `--snapshot-strict` a snapshot that cannot be used is reported
/// and the server starts empty (or with what was whole).
pub fn start(cfg: Config, snap: Option<&mut SnapshotConfig>, workers: usize) -> Result<Arc<Store>, StartError> {
    let Some(snap) = snap else { return Ok(Store::new(cfg, Arc::new(Clock::system()))?) };
    // Loading a large snapshot takes longer than a unit's start timeout:
    // systemd is asked for more time until the port opens.
    let _more_time = strata_server::ExtendTimeout::start("loading the snapshot");
    let opts = RecoverOpts {
        workers,
        strict: snap.strict,
        durability: snap.durability,
        unix_now: None,
        prealloc: strata_persist::wal::PREALLOC,
    };
    let r = strata_persist::recover(snap.backend.clone(), &snap.file, cfg, &opts).map_err(|e| match e {
        RecoverError::Config(e) => StartError::Config(e),
        RecoverError::Strict(why) => StartError::Snapshot(why),
        RecoverError::Log(e) => StartError::Durability(e.to_string()),
        RecoverError::Locked(why) => StartError::Locked(why),
        RecoverError::Dir(why) => StartError::Dir(why),
    })?;
    let l = &mut snap.loaded;
    match &r.loaded {
        Loaded::None => l.result = "none",
        Loaded::Refused(_) => l.result = "refused",
        Loaded::Loaded(rep) => {
            l.result = if rep.damaged() { "damaged" } else { "ok" };
            l.items = rep.items;
            l.flash_items = rep.flash_items;
            l.segments = rep.segments;
            l.damaged_segments = rep.damaged_segments;
            l.skipped_segments = rep.skipped_segments;
            l.loose_segments = rep.loose_segments;
            l.evicted = rep.evicted;
            l.duration = rep.duration;
        }
    }
    snap.recovered = r.replayed;
    snap.wal = r.wal;
    snap.lock = Some(Arc::new(r.lock));
    Ok(r.store)
}
