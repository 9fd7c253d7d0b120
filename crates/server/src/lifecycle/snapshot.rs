//! Snapshots while serving (issue 16, `strata-persist`): the thread that
//! takes them (on the `snapshot` command, every `--snapshot-interval`,
//! and once more at shutdown), how workers are asked to seal their active
//! segments first, the epoch lease kept ahead by the clock thread, and
//! what `stats` reports.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use strata_persist::backend::Backend;
use strata_persist::{Durability, EpochLease, Recovery, SaveReport, Saver, Wal};

use crate::network::sched::Wake;
use crate::observability::stats::WorkerStats;
use crate::Shared;

/// `--snapshot-dir` / `-e` and friends.
#[derive(Debug, Clone)]
pub struct SnapshotConfig {
    /// The snapshot file (`DIR/strata.snapshot`, or `-e`'s path).
    pub file: PathBuf,
    /// `--snapshot-interval`: also snapshot this often while serving.
    pub interval: Option<Duration>,
    /// `--snapshot-strict`: refuse to start on a damaged or mismatched snapshot.
    pub strict: bool,
    /// What the load at start found, for `stats`.
    pub loaded: Loaded,
    /// `--durability`.
    pub durability: Durability,
    /// The durability log, opened at start after recovery (with
    /// `--durability interval|always`).
    pub wal: Option<Arc<Wal>>,
    /// What recovery replayed from the log at start.
    pub recovered: Recovery,
    /// The lock on `<file>.lock`, held while the process runs so that two
    /// servers never share a snapshot and its log.
    pub lock: Option<Arc<strata_persist::backend::Lock>>,
    /// Where the snapshot and its log are read and written (the files of
    /// the operating system; tests may give another).
    pub backend: Arc<dyn Backend>,
}

/// The outcome of the load at start.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// `none` (no snapshot), `ok`, `damaged` (loaded what was whole),
    /// `refused` (a mismatch or unreadable header: started empty).
    pub result: &'static str,
    pub items: u64,
    /// Flash items brought back (with `-o ext_path`).
    pub flash_items: u64,
    pub segments: u64,
    pub damaged_segments: u64,
    pub skipped_segments: u64,
    /// Segments restored item by item once no free segment was left.
    pub loose_segments: u64,
    /// Live items evicted during the load (they did not fit `-m`).
    pub evicted: u64,
    pub duration: Duration,
}

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
    backend: Arc<dyn Backend>,
    /// A snapshot was asked for and not yet begun.
    pending: Mutex<bool>,
    kick: Condvar,
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
    pub fn save(&self, shared: &Shared, saver: &mut dyn Saver) -> Result<(), strata_persist::SnapshotError> {
        self.running.store(true, Relaxed);
        tracing::info!(file = %self.cfg.file.display(), "snapshot started");
        let r =
            strata_persist::checkpoint(&shared.store, &*self.backend, &self.cfg.file, self.cfg.wal.as_deref(), saver);
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

/// The snapshot thread: waits for a request or the interval, then
/// snapshots, until the server stops.
pub(crate) fn run(shared: Arc<Shared>, snaps: Arc<Snapshots>, wakes: Vec<Arc<Wake>>) {
    background_priority();
    let mut next = snaps.cfg.interval.map(|i| Instant::now() + i);
    loop {
        {
            let mut p = snaps.pending.lock();
            while !*p && !shared.run.stopping() {
                match next {
                    Some(at) => {
                        if Instant::now() >= at {
                            break;
                        }
                        snaps.kick.wait_until(&mut p, at);
                    }
                    None => snaps.kick.wait(&mut p),
                }
            }
            if shared.run.stopping() {
                return;
            }
            *p = false;
        }
        let mut saver = Online { shared: &shared, wakes: &wakes, started: Instant::now(), idle: true, asked: None };
        // A failure is logged and in `stats`; the next one may succeed.
        let _ = snaps.save(&shared, &mut saver);
        if !saver.idle {
            background_priority();
        }
        next = snaps.cfg.interval.map(|i| Instant::now() + i);
    }
}

/// A snapshot taken while serving runs at this priority after this long
/// under `SCHED_IDLE` (see [`background_priority`]).
const STARVED_AFTER: Duration = Duration::from_secs(30);

/// A snapshot taken while serving: seals through the workers, and moves
/// from idle priority to merely low if it is starved or holds writers up.
struct Online<'a> {
    shared: &'a Shared,
    wakes: &'a [Arc<Wake>],
    started: Instant,
    idle: bool,
    /// When the workers were last asked to seal.
    asked: Option<Instant>,
}

impl Saver for Online<'_> {
    fn begin(&mut self) -> u64 {
        begin_log(self.shared)
    }

    fn seal(&mut self) {
        // Asked about once a millisecond while segments of the cut are
        // open: every 10 ms is enough to wake a worker that missed it.
        if self.asked.is_none_or(|t| t.elapsed() >= Duration::from_millis(10)) {
            self.asked = Some(Instant::now());
            seal_workers(self.shared, self.wakes);
        }
    }

    fn progress(&mut self, _bytes: u64) {
        if !self.idle {
            return;
        }
        // Writers waiting for it to take the segments they freed: the
        // snapshot holds requests up, idle priority would only make that
        // longer (a priority inversion).
        let why = if self.shared.store.handoff_waiting() {
            "writers wait for it"
        } else if self.started.elapsed() > STARVED_AFTER {
            "no idle CPU for 30 s"
        } else {
            return;
        };
        self.idle = false;
        tracing::info!("snapshot: {why}; continuing at low priority (nice 19)");
        set_priority(false);
    }
}

/// Puts this thread under `SCHED_IDLE`: it runs only on a core nothing
/// else wants, so a snapshot taken while serving costs requests neither
/// throughput nor latency beyond the memory bandwidth it shares. Measured
/// on workload 2 with snapshots back to back (docs/benchmarks.md): nice 0
/// kept 65% of the throughput at 6x the p99, nice 19 70% at 3.5x,
/// SCHED_IDLE 83% at 1.4x. A core that is never idle would starve it: see
/// [`STARVED_AFTER`] and [`Online::progress`]. Leaving `SCHED_IDLE` needs
/// `CAP_SYS_NICE` or an `RLIMIT_NICE` that allows nice 19 (the unit's
/// `LimitNICE=+19`); without either the snapshot stays at idle priority.
fn background_priority() {
    set_priority(true);
}

fn set_priority(idle: bool) {
    // SAFETY: gettid, setpriority and sched_setscheduler (pid 0: this
    // thread) read only the live `param`; a failure leaves the priority
    // as it was, which is only slower.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        let policy = if idle { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
        libc::sched_setscheduler(0, policy, &param);
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// Starts a new log file for a snapshot that is beginning; its number (0
/// without a log, or if the switch failed: then no file is trimmed).
pub(crate) fn begin_log(shared: &Shared) -> u64 {
    let Some(snaps) = shared.snapshots.as_ref() else { return 0 };
    let Some(wal) = snaps.cfg.wal.as_ref() else {
        // No log this run, but one replayed at start: a snapshot holds its
        // effect, so its files can go once the snapshot is written (else a
        // later durable run would replay them over newer data).
        let last = strata_persist::wal::log_files(&*snaps.backend, &snaps.cfg.file).last().map_or(0, |(n, _)| *n);
        return if last == 0 { 0 } else { last + 1 };
    };
    match wal.rotate() {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "cannot start a new durability log file");
            0
        }
    }
}

/// The snapshot at shutdown: the workers are gone (they sealed what they
/// wrote as they stopped); the reclaimer's targets are sealed here.
pub(crate) struct AtShutdown<'a>(pub &'a Shared);

impl Saver for AtShutdown<'_> {
    fn begin(&mut self) -> u64 {
        begin_log(self.0)
    }

    fn seal(&mut self) {
        self.0.store.seal_reclaimer();
    }
}

/// Wakes the snapshot thread to stop.
pub(crate) fn stop(snaps: &Snapshots) {
    let _p = snaps.pending.lock();
    snaps.kick.notify_all();
}

/// Asks every worker (and the reclaimer) to seal the segments it writes,
/// without waiting: each does it between two turns of its event loop, and
/// the snapshot waits for the store to say its cut is sealed, asking again
/// now and then (`strata_persist::save`).
fn seal_workers(shared: &Shared, wakes: &[Arc<Wake>]) {
    shared.store.seal_reclaimer();
    shared.seal_gen.fetch_add(1, Release);
    for w in wakes {
        w.wake();
    }
}

/// Called by a worker between turns: seals its segments if a snapshot
/// asked, or a writer found no segment to take (`Store::on_starved`).
#[inline]
pub(crate) fn seal_if_asked(shared: &Shared, stats: &WorkerStats, store: &mut strata_store::Worker) {
    let want = shared.seal_gen.load(Acquire);
    if stats.sealed.load(Relaxed) != want {
        store.seal_active();
        stats.sealed.store(want, Release);
    }
    store.seal_if_starved();
}
