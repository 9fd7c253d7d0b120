//! Recovery at start: the one path from what is on disk to a store ready
//! to serve, used by the server (`strata/warm.rs`) and the crash
//! simulator alike, so the simulator tests what runs.
//!
//! In order: make the snapshot's directory if it is missing (as systemd's
//! `StateDirectory=` would; one that cannot be made refuses the start,
//! rather than serve writes a shutdown then cannot keep); lock the
//! snapshot (two servers on one snapshot would
//! overwrite each other's and interleave logs); read the epoch lease and
//! the snapshot's header; build the store on the timeline the snapshot
//! continues; load it; replay every durability log file since it (a log
//! left by a durable run is replayed whatever this run's mode: it holds
//! acknowledged writes the snapshot may lack); with `--durability`, open
//! the next log file and journal into it.
//!
//! What a crash can leave never fails this: a torn log tail, a damaged or
//! half-written snapshot, a stale temporary file. What is whole loads;
//! what is not is reported ([`Loaded`]) and, with `strict`, refused.

use std::path::Path;
use std::sync::Arc;

use strata_store::{Clock, Config, ConfigError, Store};

use crate::backend::{Backend, Lock};
use crate::wal::{Recovery, Wal, WalJournal};
use crate::{Durability, EpochLease, LoadReport, SnapshotError};

/// How a recovery runs.
#[derive(Debug, Clone)]
pub struct RecoverOpts {
    /// Workers that will write (their reserve segments are left free).
    pub workers: usize,
    /// `--snapshot-strict`: any damage or mismatch refuses the start.
    pub strict: bool,
    pub durability: Durability,
    /// The wall clock's unix time now; `None`: the system's (a real clock).
    /// The simulator gives one, and gets a manual clock.
    pub unix_now: Option<i64>,
    /// Under `always`, bytes of zeros the log file is filled with ahead of
    /// its writer ([`crate::wal::PREALLOC`] for a server; the simulator's
    /// are a few KiB).
    pub prealloc: u64,
}

/// What the snapshot load did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Loaded {
    /// There was no snapshot.
    #[default]
    None,
    /// Loaded; [`LoadReport::damaged`] says whether all of it.
    Loaded(LoadReport),
    /// Not loaded (a settings mismatch, an unreadable header or clock):
    /// the store starts empty, the log replays over it.
    Refused(String),
}

/// A store ready to serve, and how it came to be.
pub struct Recovered {
    pub store: Arc<Store>,
    pub loaded: Loaded,
    pub replayed: Recovery,
    /// The log this run journals into (with `--durability interval|always`).
    pub wal: Option<Arc<Wal>>,
    /// Held for the life of the process.
    pub lock: Lock,
}

/// Why a recovery cannot start the server.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Only with `strict`.
    #[error("snapshot: {0}")]
    Strict(String),
    /// The durability log cannot be replayed, or (with `--durability`) no
    /// new log file can be made: this run could not keep its promise.
    #[error("durability log: {0}")]
    Log(SnapshotError),
    /// Another process holds the snapshot, or its lock file cannot be made.
    #[error("snapshot lock {0}")]
    Locked(String),
    /// The snapshot's directory does not exist and cannot be made.
    #[error("cannot create the snapshot directory {0}")]
    Dir(String),
}

/// Brings the snapshot `file` and its log back into a new store built from
/// `cfg` (see the module doc).
pub fn recover(
    backend: Arc<dyn Backend>,
    file: &Path,
    mut cfg: Config,
    o: &RecoverOpts,
) -> Result<Recovered, RecoverError> {
    let dir = crate::dir_of(file);
    backend.make_dir(&dir).map_err(|e| RecoverError::Dir(format!("{}: {e}", dir.display())))?;
    let lock_path = crate::with_suffix(file, ".lock");
    let lock = backend.lock(&lock_path).map_err(|e| {
        let why =
            if e.kind() == std::io::ErrorKind::WouldBlock { "another process holds it" } else { "cannot lock it" };
        RecoverError::Locked(format!("{}: {why} ({e})", lock_path.display()))
    })?;
    settle(&*backend, file)?;
    let mut loaded = Loaded::None;
    let refuse = |loaded: &mut Loaded, why: String| {
        if o.strict {
            return Err(RecoverError::Strict(why));
        }
        tracing::warn!("snapshot not loaded: {why}; starting empty");
        *loaded = Loaded::Refused(why);
        Ok(())
    };
    let floor = EpochLease::read(&*backend, file).unwrap_or(0);
    let header = match crate::read_header(&*backend, file) {
        Ok(h) => h,
        Err(e) => {
            refuse(&mut loaded, format!("{}: {e}", file.display()))?;
            None
        }
    };
    // The snapshot's timeline, or with none the log's: the times the
    // records hold are on it (the wal module doc, "Time").
    let timeline = header.map(|h| (h.process_started, h.now)).or_else(|| crate::wal::timeline(&*backend, file));
    let clock = timeline.and_then(|(started, now)| match o.unix_now {
        Some(unix) => Clock::resume_at(unix, started, now, false),
        None => Clock::resumed(started, now),
    });
    if header.is_none() && timeline.is_some() && clock.is_none() {
        tracing::warn!(
            "the durability log's clock starts more than 30 days ahead or more than a century ago: starting a new one"
        );
    }
    // An index sized for the snapshot's items up front (unless -o
    // hashpower says otherwise) loads them without rehashing as it fills.
    if let (Some(_), 0, Some(footer)) = (header, cfg.hash_power, crate::read_footer(&*backend, file)) {
        cfg.hash_power = strata_store::hash_power_for(footer.items);
    }
    if header.is_some() && clock.is_none() {
        refuse(&mut loaded, "its clock starts more than 30 days ahead or more than a century ago".into())?;
    }
    let fresh = || match o.unix_now {
        Some(now) => Clock::manual(now),
        None => Clock::system(),
    };
    let store = Store::new(cfg, Arc::new(clock.unwrap_or_else(fresh)))?;
    // CAS values stay unique across a crash even when nothing is loaded.
    store.resume(floor, 0, 0);
    let mut log_seq = 0;
    if let Some(h) = header.filter(|_| loaded == Loaded::None) {
        match crate::check_settings(&h, &store) {
            Err(e) => refuse(&mut loaded, e.to_string())?,
            Ok(()) => {
                tracing::info!(file = %file.display(), "loading snapshot");
                match crate::load(&store, &*backend, file, o.workers, floor, o.strict) {
                    Ok(r) => {
                        report_load(&store, &r);
                        log_seq = r.log_seq;
                        loaded = Loaded::Loaded(r);
                    }
                    // A failed load may have restored part of the snapshot;
                    // that part is correct (every segment is checked).
                    Err(e) if o.strict => return Err(RecoverError::Strict(e.to_string())),
                    Err(e) => {
                        tracing::warn!(error = %e, "snapshot not loaded");
                        loaded = Loaded::Refused(e.to_string());
                    }
                }
            }
        }
    } else if header.is_none() && loaded == Loaded::None {
        tracing::info!(file = %file.display(), "no snapshot to load");
    }
    let (replayed, wal) = replay_log(&backend, file, &store, log_seq, o)?;
    Ok(Recovered { store, loaded, replayed, wal, lock })
}

/// Replays the durability log's records written after the snapshot's
/// `log_seq` into `store`, and with durability on opens the log for this
/// run's writes: what the changes since the snapshot were, and the log.
fn replay_log(
    backend: &Arc<dyn Backend>,
    file: &Path,
    store: &Arc<Store>,
    log_seq: u64,
    o: &RecoverOpts,
) -> Result<(Recovery, Option<Arc<Wal>>), RecoverError> {
    let logs = !crate::wal::log_files(&**backend, file).is_empty();
    let mut replayed = Recovery::default();
    let mut wal = None;
    if o.durability != Durability::Off || logs {
        let mut w = store.worker();
        replayed = crate::wal::replay(&**backend, file, log_seq, &mut w).map_err(RecoverError::Log)?;
        drop(w);
        // Changes were made up to this time: the clock goes on from there.
        match replayed.time {
            Some((started, latest)) if started == store.clock().process_started() => store.clock().catch_up(latest),
            Some(_) => tracing::warn!(
                "the durability log is on another clock than the snapshot's; its times are kept as they are"
            ),
            None => {}
        }
        if replayed.files > 0 {
            tracing::info!(
                files = replayed.files,
                records = replayed.records,
                skipped = replayed.skipped,
                torn = replayed.torn,
                trimmed_bytes = replayed.trimmed,
                "durability log replayed"
            );
        }
        if o.durability != Durability::Off {
            // Without a log this run could not keep its promise: it
            // refuses to start rather than acknowledge writes it cannot
            // make durable.
            let opened = Arc::new(
                Wal::open(backend.clone(), file, replayed.last + 1, o.durability)
                    .map_err(RecoverError::Log)?
                    .timed(store.clock().clone()),
            );
            // Under `always` the log file is filled with zeros ahead of its
            // writer, now and then by the writer thread's helper
            // (`Wal::run`), so that commits carry no metadata. A fill that
            // fails is logged; the file grows as it is written. Under
            // `interval` (one fdatasync a second) the zeros would only
            // cost: the durable bench ran 81 k sets/s with them against
            // 88 k without (median of 3).
            if o.durability == Durability::Always {
                opened.set_prealloc(o.prealloc);
                opened.prefill();
            }
            store.set_journal(Arc::new(WalJournal(opened.clone())));
            wal = Some(opened);
        }
    }
    Ok((replayed, wal))
}

/// Makes durable what a process killed before it could left visible: a
/// snapshot renamed into place whose directory was not synced yet, log
/// records written and not yet synced. This start loads and replays them,
/// and then serves what they hold; were they not made durable first, a
/// power loss later could take the cache back past what this start served
/// (the crash simulator found a kill -9 mid-snapshot, a restart that loaded
/// the new snapshot, then a power loss that brought back the old one).
fn settle(backend: &dyn Backend, file: &Path) -> Result<(), RecoverError> {
    let dir = crate::dir_of(file);
    backend.sync_dir(&dir).map_err(|e| RecoverError::Dir(format!("{}: fsync: {e}", dir.display())))?;
    for (_, path) in crate::wal::log_files(backend, file) {
        let synced = backend.open(&path).and_then(|f| f.sync());
        synced.map_err(|e| RecoverError::Log(SnapshotError::io("fsync", &path, e)))?;
    }
    Ok(())
}

fn report_load(store: &Store, r: &LoadReport) {
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
    let t = &r.times;
    tracing::info!(
        walk_ms = t.walk.as_millis() as u64,
        read_wait_ms = t.read.as_millis() as u64,
        copy_ms = t.copy.as_millis() as u64,
        crc_ms = t.crc.as_millis() as u64,
        link_ms = t.link.as_millis() as u64,
        helper_fault_ms = t.fault.as_millis() as u64,
        segments_ms = t.segments.as_millis() as u64,
        loader_cpu_ms = t.loader_cpu.as_millis() as u64,
        helper_cpu_ms = t.helper_cpu.as_millis() as u64,
        linker_ms = t.linker.as_millis() as u64,
        "snapshot load time by stage"
    );
    if r.damaged() {
        tracing::warn!(
            damaged_segments = r.damaged_segments,
            truncated = r.truncated,
            "the snapshot was damaged: what was whole is loaded"
        );
    }
    if r.evicted > 0 {
        tracing::warn!(
            items = r.evicted,
            "the snapshot's live items do not fit the memory limit: the oldest were evicted"
        );
    }
    if r.skipped_segments > 0 {
        tracing::warn!(
            segments = r.skipped_segments,
            "the memory limit holds less than the snapshot and nothing may be evicted (-M): the rest was left out"
        );
    }
}
