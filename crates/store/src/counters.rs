//! Per-worker counters: each worker (and the reclaimer) writes its own,
//! with no locked instruction, and `stats` sums them over every worker
//! (`Store::stats`); and the roster of who writes them ([`Roster`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

/// Per-worker counters, written only by their worker, summed for `stats`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub total_items: AtomicU64,
    /// Bytes of items written by clients' requests (header, key, value).
    pub bytes_stored: AtomicU64,
    /// Bytes of items copied forward (cleaning, eviction's copy-forward).
    pub bytes_copied: AtomicU64,
    /// Segments cleaned (live items copied, none evicted) and the dead
    /// bytes that won back, and the time it took.
    pub segments_cleaned: AtomicU64,
    pub dead_reclaimed: AtomicU64,
    pub cleaner_ns: AtomicU64,
    pub get_expired: AtomicU64,
    pub get_flushed: AtomicU64,
    pub flushed_unlinked: AtomicU64,
    pub evictions: AtomicU64,
    /// memcached's eviction detail: evicted items never read, and those
    /// that had an expiry time; expired items reclaimed unread.
    pub evicted_unfetched: AtomicU64,
    pub evicted_nonzero: AtomicU64,
    pub expired_unfetched: AtomicU64,
    pub expired_unlinked: AtomicU64,
    pub reinserted: AtomicU64,
    /// Overwrites written over their old version (`overwrite.rs`).
    pub overwritten_in_place: AtomicU64,
    /// Allocations that reached the last resort (`evict/`).
    pub alloc_last_resort: AtomicU64,
    /// Allocation steps that waited for a segment another thread was
    /// clearing rather than evict (`evict/`, [`crate::evict::Step::Wait`]).
    pub alloc_waited: AtomicU64,
    /// With the background reclaimer: allocations that found no free
    /// segment and reclaimed on the request's time.
    pub reclaim_inline: AtomicU64,
    /// With the background reclaimer: allocations that waited for it.
    pub reclaim_waited: AtomicU64,
    /// Writes that waited for a free segment off the event loop
    /// (`memwait.rs`).
    pub memory_waits: AtomicU64,
    /// The reclaimer's: segments it freed.
    pub reclaim_background: AtomicU64,
    /// Victims a writer of a large item cleared in the reclaimer's stead
    /// (`Store::reclaim_cheap`).
    pub reclaim_cheap: AtomicU64,
    pub segments_evicted: AtomicU64,
    pub segments_reclaimed: AtomicU64,
    pub decompress_errors: AtomicU64,
    /// The flash tier's (see [`crate::types::FlashStats`]).
    pub flash_hits: AtomicU64,
    pub flash_recached: AtomicU64,
    pub flash_misses: AtomicU64,
    pub flash_moved: AtomicU64,
    pub flash_evicted: AtomicU64,
    pub flash_copied: AtomicU64,
    pub flash_dropped_write: AtomicU64,
    pub flash_dropped_growth: AtomicU64,
    pub flash_reads_async: AtomicU64,
    pub flash_reads_coalesced: AtomicU64,
    pub flash_evicted_bytes: AtomicU64,
    pub flash_aged: AtomicU64,
    pub flash_copy_lost: AtomicU64,
    pub flash_oom: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    add(c, 1);
}

/// Adds to a counter only its worker writes (no locked instruction).
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed) + n, Relaxed);
}

/// Who works on the store: every worker's and the reclaimer's counters
/// (kept in the totals after they leave), the workers there now, and
/// whether a background reclaimer runs.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    counters: Mutex<Vec<Arc<Counters>>>,
    /// Workers now (each keeps segments open: `Store::open_cap`).
    workers: AtomicUsize,
    reclaiming: AtomicBool,
}

impl Roster {
    /// A worker starts: its counters join the totals.
    pub(crate) fn worker_started(&self, counters: &Arc<Counters>) {
        self.joined(counters);
        self.workers.fetch_add(1, Relaxed);
    }

    /// A worker ended (its counters stay in the totals).
    pub(crate) fn worker_left(&self) {
        self.workers.fetch_sub(1, Relaxed);
    }

    /// The background reclaimer starts: its counters join the totals and
    /// writers leave reclaiming to it.
    pub(crate) fn reclaimer_started(&self, counters: &Arc<Counters>) {
        self.joined(counters);
        self.reclaiming.store(true, Relaxed);
    }

    /// Counters that are no worker's (a load's restorer) join the totals.
    pub(crate) fn joined(&self, counters: &Arc<Counters>) {
        self.counters.lock().push(counters.clone());
    }

    /// Workers now.
    pub(crate) fn workers(&self) -> usize {
        self.workers.load(Relaxed)
    }

    /// Whether a background reclaimer runs: writers leave reclaiming to it.
    pub(crate) fn reclaiming(&self) -> bool {
        self.reclaiming.load(Relaxed)
    }

    /// Every set of counters, locked (for totals).
    pub(crate) fn counters(&self) -> MutexGuard<'_, Vec<Arc<Counters>>> {
        self.counters.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roster_keeps_the_counters_of_whoever_left() {
        let r = Roster::default();
        let (a, b, reclaimer) = (Arc::new(Counters::default()), Arc::default(), Arc::default());
        r.worker_started(&a);
        r.worker_started(&b);
        assert_eq!((r.workers(), r.reclaiming()), (2, false));
        r.reclaimer_started(&reclaimer);
        assert_eq!((r.workers(), r.reclaiming()), (2, true), "the reclaimer is no worker");
        a.evictions.store(5, Relaxed);
        r.worker_left();
        assert_eq!(r.workers(), 1);
        let evictions: u64 = r.counters().iter().map(|c| c.evictions.load(Relaxed)).sum();
        assert_eq!((r.counters().len(), evictions), (3, 5), "a worker's counters stay in the totals");
    }
}
