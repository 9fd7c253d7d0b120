//! The warm start: with `--snapshot-dir` (or `-e`), the store is built on
//! the snapshot's timeline and filled from it before the port opens, as
//! memcached's warm restart does (a client that got misses from a
//! half-loaded cache would send them all to its database).

use std::sync::Arc;

use strata_persist::backend::Backend;
use strata_persist::{Durability, EpochLease, OsBackend, Wal, WalJournal};
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
    // A missing directory is made, as systemd's StateDirectory= would; one
    // that cannot be made (or written: the lock file) refuses the start,
    // rather than serving writes a shutdown then cannot keep.
    if let Some(dir) = snap.file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| StartError::Dir(format!("{}: {e}", dir.display())))?;
    }
    snap.lock = Some(Arc::new(lock(&snap.file)?));
    let (store, log_seq) = load_snapshot(cfg, snap, workers)?;
    // A log left by a durable run is replayed whatever this run's mode:
    // it holds acknowledged writes the snapshot may lack.
    let logs = !strata_persist::wal::log_files(&OsBackend, &snap.file).is_empty();
    if snap.durability != Durability::Off || logs {
        recover(&store, snap, log_seq)?;
    }
    Ok(store)
}

/// Locks `<file>.lock` for this process: a second server on the same
/// snapshot would overwrite the first's snapshot and interleave logs. A
/// place where no lock file can be made cannot hold a snapshot either: the
/// start is refused.
fn lock(file: &std::path::Path) -> Result<std::fs::File, StartError> {
    use std::os::fd::AsRawFd;
    let path = strata_persist::with_suffix(file, ".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StartError::Locked(format!("{}: cannot create it: {e}", path.display())))?;
    // SAFETY: flock takes the descriptor of a file this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(StartError::Locked(format!("{}: another process holds it ({e})", path.display())));
    }
    Ok(f)
}

/// Replays the log written since the snapshot (all of it without one),
/// then, with `--durability`, opens the next log file for this run.
fn recover(store: &Arc<Store>, snap: &mut SnapshotConfig, log_seq: u64) -> Result<(), StartError> {
    let backend: Arc<dyn Backend> = Arc::new(OsBackend);
    let mut w = store.worker();
    let r = strata_persist::wal::replay(&*backend, &snap.file, log_seq, &mut w)
        .map_err(|e| StartError::Durability(e.to_string()))?;
    drop(w);
    if r.files > 0 {
        tracing::info!(
            files = r.files,
            records = r.records,
            skipped = r.skipped,
            torn = r.torn,
            "durability log replayed"
        );
    }
    snap.recovered = r;
    if snap.durability == Durability::Off {
        return Ok(());
    }
    // Without a log this run could not keep its promise: it refuses to
    // start rather than acknowledge writes it cannot make durable.
    let wal = Wal::open(backend, &snap.file, r.last + 1, snap.durability)
        .map_err(|e| StartError::Durability(e.to_string()))?;
    let wal = Arc::new(wal);
    store.set_journal(Arc::new(WalJournal(wal.clone())));
    snap.wal = Some(wal);
    Ok(())
}

/// Builds the store on the snapshot's timeline and loads it; the first log
/// file to replay over it (0: from the first there is).
fn load_snapshot(mut cfg: Config, snap: &mut SnapshotConfig, workers: usize) -> Result<(Arc<Store>, u64), StartError> {
    let refuse = |snap: &mut SnapshotConfig, why: String| {
        snap.loaded.result = "refused";
        if snap.strict {
            return Err(StartError::Snapshot(why));
        }
        tracing::warn!("snapshot not loaded: {why}; starting empty");
        Ok(())
    };
    let floor = EpochLease::read(&OsBackend, &snap.file).unwrap_or(0);
    let header = match strata_persist::read_header(&OsBackend, &snap.file) {
        Ok(h) => h,
        Err(e) => {
            refuse(snap, format!("{}: {e}", snap.file.display()))?;
            None
        }
    };
    let clock = header.and_then(|h| Clock::resumed(h.process_started, h.now));
    // An index sized for the snapshot's items up front (unless -o hashpower
    // says otherwise) loads them without rehashing as it fills.
    if let (Some(_), 0, Some(footer)) = (header, cfg.hash_power, strata_persist::read_footer(&OsBackend, &snap.file)) {
        cfg.hash_power = strata_store::hash_power_for(footer.items);
    }
    if header.is_some() && clock.is_none() {
        refuse(snap, "its clock is in the future or more than a century old".into())?;
    }
    let store = Store::new(cfg, Arc::new(clock.unwrap_or_else(Clock::system)))?;
    // CAS values stay unique across a crash even when nothing is loaded.
    store.resume(floor, 0, 0);
    let Some(h) = header.filter(|_| snap.loaded.result != "refused") else {
        if header.is_none() && snap.loaded.result.is_empty() {
            snap.loaded.result = "none";
            tracing::info!(file = %snap.file.display(), "no snapshot to load");
        }
        return Ok((store, 0));
    };
    if let Err(e) = strata_persist::check_settings(&h, &store) {
        refuse(snap, e.to_string())?;
        return Ok((store, 0));
    }
    tracing::info!(file = %snap.file.display(), "loading snapshot");
    match strata_persist::load(&store, &OsBackend, &snap.file, workers, floor, snap.strict) {
        Ok(r) => {
            let l = &mut snap.loaded;
            l.result = if r.damaged() { "damaged" } else { "ok" };
            l.items = r.items;
            l.flash_items = r.flash_items;
            l.segments = r.segments;
            l.damaged_segments = r.damaged_segments;
            l.skipped_segments = r.skipped_segments;
            l.duration = r.duration;
            let age = store.clock().unix_now() - r.snapshot_unix;
            tracing::info!(
                items = r.items,
                segments = r.segments,
                dropped_items = r.dropped_items,
                flash_items = r.flash_items,
                flash_dropped = r.flash_dropped,
                ms = r.duration.as_millis() as u64,
                age_s = age,
                "snapshot loaded"
            );
            if r.damaged() {
                tracing::warn!(
                    damaged_segments = r.damaged_segments,
                    truncated = r.truncated,
                    "the snapshot was damaged: what was whole is loaded"
                );
            }
            if r.skipped_segments > 0 {
                tracing::warn!(
                    segments = r.skipped_segments,
                    "the memory limit holds less than the snapshot: the oldest segments were left out"
                );
            }
            Ok((store, r.log_seq))
        }
        Err(e) => {
            // A failed load may have restored part of the snapshot; that
            // part is correct (every segment is checked), so it stays.
            snap.loaded.result = "refused";
            if snap.strict {
                return Err(StartError::Snapshot(e.to_string()));
            }
            tracing::warn!(error = %e, "snapshot not loaded");
            Ok((store, 0))
        }
    }
}
