//! [`Snapshots`]: the snapshot state every thread shares (the request
//! flag the `snapshot` command sets, what the last one did, the epoch
//! lease), and taking one snapshot of a store. The thread that takes them,
//! and how workers are asked to seal, are `snapshot.rs`'s.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use strata_persist::backend::Backend;
use strata_persist::{EpochLease, SaveReport, Saver};
use strata_store::Store;

use crate::config::SnapshotConfig;

/// The last snapshot written while this process ran.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Last {
    pub saves: u64,
    pub errors: u64,
    /// The last attempt succeeded.
    pub ok: bool,
    pub report: SaveReport,
}

/// The `snapshot` command came while one was pending or running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy;

/// Snapshot state every thread shares.
pub(crate) struct Snapshots {
    pub cfg: SnapshotConfig,
    pub(crate) backend: Arc<dyn Backend>,
    /// A snapshot was asked for and not yet begun.
    pub(crate) pending: Mutex<bool>,
    pub(crate) kick: Condvar,
    pub running: AtomicBool,
    pub last: Mutex<Last>,
    lease: Mutex<(EpochLease, bool)>,
    /// The log's size when the last snapshot began its new file: a log
    /// that grows by the memory limit since then asks for a snapshot.
    log_bytes_at_snapshot: std::sync::atomic::AtomicU64,
}

impl Snapshots {
    pub fn new(cfg: SnapshotConfig) -> Snapshots {
        let lease = EpochLease::new(&cfg.file);
        Snapshots {
            backend: cfg.backend.clone(),
            cfg,
            pending: Mutex::new(false),
            kick: Condvar::new(),
            running: AtomicBool::new(false),
            last: Mutex::new(Last::default()),
            lease: Mutex::new((lease, true)),
            log_bytes_at_snapshot: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Asks the snapshot thread for a snapshot now.
    pub fn request(&self) -> Result<(), Busy> {
        let mut p = self.pending.lock();
        if *p || self.running.load(Relaxed) {
            return Err(Busy);
        }
        *p = true;
        self.kick.notify_one();
        Ok(())
    }

    /// With a durability log: asks for a snapshot once the log has grown
    /// by `limit` bytes since the last one (recovery replays the log, so
    /// its length is the restart time; a snapshot trims it).
    pub fn snapshot_if_log_grew(&self, limit: u64) {
        let Some(wal) = &self.cfg.wal else { return };
        let grown = wal.bytes.load(Relaxed).saturating_sub(self.log_bytes_at_snapshot.load(Relaxed));
        if grown >= limit && !self.running.load(Relaxed) && self.request().is_ok() {
            tracing::info!(log_bytes = grown, "durability log grew by the memory limit: snapshot");
        }
    }

    /// Keeps the epoch lease ahead of the store (called by the clock
    /// thread). A failure is logged once until it works again: without a
    /// lease, CAS values after a crash are unique only above the last
    /// snapshot's epoch.
    pub fn keep_lease(&self, epoch: u64) {
        let mut g = self.lease.lock();
        let (lease, healthy) = &mut *g;
        match lease.keep_ahead(&*self.backend, epoch) {
            Ok(_) => *healthy = true,
            Err(e) if *healthy => {
                *healthy = false;
                tracing::warn!(error = %e, "cannot keep the epoch lease beside the snapshot");
            }
            Err(_) => {}
        }
    }

    /// Takes one snapshot; `saver` asks the workers to seal first. The
    /// error is logged and counted here; it is returned for the shutdown
    /// save, whose failure the process's exit reports.
    pub fn save(&self, store: &Store, saver: &mut dyn Saver) -> Result<(), strata_persist::SnapshotError> {
        self.running.store(true, Relaxed);
        tracing::info!(file = %self.cfg.file.display(), "snapshot started");
        let r = strata_persist::checkpoint(store, &*self.backend, &self.cfg.file, self.cfg.wal.as_deref(), saver);
        let mut last = self.last.lock();
        match r {
            Ok(report) => {
                if let Some(wal) = &self.cfg.wal {
                    self.log_bytes_at_snapshot.store(wal.bytes.load(Relaxed), Relaxed);
                }
                tracing::info!(
                    bytes = report.bytes,
                    items = report.items,
                    segments = report.segments,
                    passes = report.passes,
                    writers_waited_ms = report.writers_waited.as_millis() as u64,
                    ms = report.duration.as_millis() as u64,
                    "snapshot written"
                );
                last.saves += 1;
                last.ok = true;
                last.report = report;
            }
            Err(ref e) => {
                tracing::error!(error = %e, "snapshot failed; the previous one is kept");
                last.errors += 1;
                last.ok = false;
            }
        }
        drop(last);
        self.running.store(false, Relaxed);
        r.map(|_| ())
    }
}
