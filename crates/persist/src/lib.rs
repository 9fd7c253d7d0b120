//! Snapshots and warm restarts (DESIGN §7): the cache written to a file
//! while it serves, and brought back at start before the port opens.
//!
//! Owns the snapshot file format (`format`, drawn byte by byte there),
//! writing (`save`), reading (`load`), the
//! epoch lease that keeps CAS values unique across a crash (`lease`), and
//! the write-ahead log of `--durability` (`wal`). Every file goes through
//! a [`Backend`] (`strata-io`, re-exported as [`backend`]), so that tests
//! inject faults and cut the power. The
//! store supplies consistent segment images and restores them
//! (`strata_store::Store::image`, `Store::restore`); the server decides when
//! to snapshot.
//!
//! A snapshot is written to `<file>.tmp`, fsynced, renamed over `<file>`
//! (`strata.snapshot` in a `--snapshot-dir`) and the directory fsynced: a crash at any point
//! leaves the previous snapshot or the new one, whole.

pub mod format;
pub mod lease;
pub mod load;
pub mod recover;
pub mod save;
pub mod wal;

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use lease::EpochLease;
pub use load::{check_settings, load, read_footer, read_header, LoadReport, LoadTimes};
pub use recover::{recover, Loaded, RecoverError, RecoverOpts, Recovered};
pub use save::{checkpoint, save, SaveReport, Saver};
/// The file I/O layer every function here takes (`strata-io`).
pub use strata_io as backend;
pub use strata_io::{Backend, OsBackend};
pub use wal::{Durability, Recovery, Wal, WalJournal};

/// The snapshot's file name in a `--snapshot-dir`.
pub const SNAPSHOT_FILE: &str = "strata.snapshot";
/// Appended to a file's name while it is being written.
pub const TMP_SUFFIX: &str = ".tmp";

/// Why a snapshot could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{op} {path}: {source}")]
    Io { op: &'static str, path: PathBuf, source: io::Error },
    #[error(transparent)]
    Format(#[from] format::FormatError),
    #[error("snapshot was taken with {what} {snapshot}, this server has {server}")]
    Mismatch { what: &'static str, snapshot: u64, server: u64 },
    #[error("snapshot is damaged: {0}")]
    Damaged(String),
    #[error("a segment record would exceed 4 GiB")]
    TooLarge,
    /// The snapshot could not keep its point in time (see `save`).
    #[error("snapshot could not keep its point in time: {0}")]
    Cut(String),
}

/// `path` with `suffix` appended to its file name.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The directory a file is in (`.` for a bare name).
pub(crate) fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl SnapshotError {
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> SnapshotError {
        SnapshotError::Io { op, path: path.to_path_buf(), source }
    }
}

/// Logs a long save, load or log replay's progress about once a second:
/// bytes so far (and records, for a log), the share of the whole, rate and
/// time left.
pub(crate) struct Progress {
    what: &'static str,
    started: Instant,
    last: Instant,
    total: u64,
    /// How often a line is logged (a second; tests say at once).
    every: Duration,
}

impl Progress {
    pub(crate) fn new(what: &'static str) -> Progress {
        let now = Instant::now();
        Progress { what, started: now, last: now, total: 0, every: Duration::from_secs(1) }
    }

    /// About how many bytes the whole job is.
    pub(crate) fn set_total(&mut self, total: u64) {
        self.total = total;
    }

    pub(crate) fn at(&mut self, bytes: u64) {
        if let Some(line) = self.line(bytes, None) {
            tracing::info!("{line}");
        }
    }

    /// As [`Progress::at`], with the records done so far.
    pub(crate) fn at_records(&mut self, bytes: u64, records: u64) {
        if let Some(line) = self.line(bytes, Some(records)) {
            tracing::info!("{line}");
        }
    }

    /// The line to log, if a second has passed since the last.
    fn line(&mut self, bytes: u64, records: Option<u64>) -> Option<String> {
        if self.last.elapsed() < self.every {
            return None;
        }
        self.last = Instant::now();
        let secs = self.started.elapsed().as_secs_f64();
        let rate = bytes as f64 / secs.max(1e-3);
        let eta = self.total.saturating_sub(bytes) as f64 / rate.max(1.0);
        let records = records.map(|r| format!("{r} records, ")).unwrap_or_default();
        Some(format!(
            "{}: {records}{} MB of ~{} MB ({}%), {:.0} MB/s, ~{:.0} s left",
            self.what,
            bytes >> 20,
            self.total >> 20,
            percent(bytes, self.total),
            rate / 1e6,
            eta
        ))
    }

    /// Logs the rate of a job that took long enough for one to mean something.
    pub(crate) fn done(&self, bytes: u64) {
        let secs = self.started.elapsed().as_secs_f64();
        if secs < 1.0 {
            return;
        }
        tracing::info!(
            "{}: {} MB in {:.2} s ({:.0} MB/s)",
            self.what,
            bytes >> 20,
            secs,
            bytes as f64 / secs.max(1e-3) / 1e6
        );
    }
}

/// `done` as a whole percentage of `total` (100 when there is nothing to
/// do; at most 100: a total is an estimate).
fn percent(done: u64, total: u64) -> u64 {
    if total == 0 {
        return 100;
    }
    (u128::from(done) * 100 / u128::from(total)).min(100) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_tells_records_bytes_and_the_share_done() {
        let mut p = Progress::new("durability log replay");
        p.every = Duration::ZERO;
        p.set_total(200 << 20);
        let line = p.line(50 << 20, Some(1234)).unwrap_or_default();
        assert!(line.starts_with("durability log replay: 1234 records, 50 MB of ~200 MB (25%), "), "{line}");
        assert!(p.line(300 << 20, None).unwrap_or_default().contains("300 MB of ~200 MB (100%)"));
        assert_eq!(percent(0, 0), 100);
        // Once a second: not again at once.
        p.every = Duration::from_secs(1);
        assert_eq!(p.line(60 << 20, None), None);
    }
}
