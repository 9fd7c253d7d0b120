//! Snapshots while serving (issue 16, `strata-persist`): the thread that
//! takes them (on the `snapshot` command, every `--snapshot-interval`,
//! and once more at shutdown), how workers are asked to seal their active
//! segments first, the epoch lease kept ahead by the clock thread, and
//! what `stats` reports.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_persist::Saver;

pub(crate) use crate::lifecycle::snapshots::Snapshots;
use crate::wake::Wake;
use crate::Shared;

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
        let _ = snaps.save(&shared.store, &mut saver);
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
