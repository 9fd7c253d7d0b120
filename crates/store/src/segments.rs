//! Segments and the memory budget: the memory limit cut into fixed-size
//! segments, their metadata (kept apart from their data), the free and
//! parked lists, TTL classes, the epochs segments are opened in and
//! flushed by ([`Epochs`]), and a worker's state ([`Active`]: its open
//! segments, its copy targets in `copies.rs`, what it asked the reclaimer).
//!
//! Each worker appends items to its own active segment for the item's TTL
//! class, so items of similar expiry share segments and a whole segment can
//! be dropped once its last item has expired, without a scan; an item that
//! does not fit there goes to the worker's open segment where it fits best,
//! and a worker keeps at most `Store::open_cap` open. A full segment is
//! sealed onto an eviction queue (`evict/`). `-m` covers segments and
//! the index together: a segment is taken only while both fit.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::counters::Counters;
use crate::image::Queue;
use crate::timelog::TimeLog;

/// TTL classes: never, ≤1 min, ≤5 min, ≤30 min, ≤3 h, ≤1 day, ≤7 days, longer.
pub const TTL_CLASSES: usize = 8;

pub(crate) fn ttl_class(expiry: u32, now: u32) -> usize {
    if expiry == 0 {
        return 0;
    }
    match expiry.saturating_sub(now) {
        0..=60 => 1,
        61..=300 => 2,
        301..=1800 => 3,
        1801..=10_800 => 4,
        10_801..=86_400 => 5,
        86_401..=604_800 => 6,
        _ => 7,
    }
}

/// `max_expire` of a segment holding at least one item that never expires.
pub(crate) const NEVER: u32 = u32::MAX;

/// Segments writers leave free for the cleaner's copy targets: one, the
/// working space a clean needs when a target fills mid-way (the victim it
/// frees refills it). Two workers needing it at once is rare but for a
/// snapshot's cut (every target is in it); the one that misses out waits
/// for the other to give a segment back (`evict/`'s `Step::Wait`), and
/// only past its `STARVE_WAIT` evicts, or with `-M` fails its write.
pub(crate) const RESERVE_SEGMENTS: usize = 1;

/// Eviction order, after S3-FIFO (Yang et al., SOSP 2023) at segment
/// granularity: new writes are sealed into `small`, and an item there that
/// was not read by the time its segment is evicted goes at once, so the
/// one-hit keys a cache-aside miss stream writes cannot push out items that
/// are read. Items read since written are copied forward into a target,
/// which is sealed into `main`, a FIFO with reinsertion (CLOCK). Raised the
/// hit ratio on workload 5 from 76.4% to 81.0% (memcached: 76.5%;
/// `docs/benchmarks-history.md`, "What changed").
#[derive(Debug, Default)]
pub(crate) struct Evict {
    /// Sealed segments of new writes, oldest first.
    pub(crate) small: VecDeque<u32>,
    /// Sealed segments of items copied forward, oldest first.
    pub(crate) main: VecDeque<u32>,
}

impl Evict {
    pub(crate) fn queue(&mut self, q: Queue) -> &mut VecDeque<u32> {
        match q {
            Queue::Small => &mut self.small,
            Queue::Main => &mut self.main,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct SegMeta {
    pub(crate) write_off: AtomicU32,
    pub(crate) live_items: AtomicU32,
    pub(crate) live_bytes: AtomicU32,
    /// Latest expiry of any item written into it ([`NEVER`] if one never expires).
    pub(crate) max_expire: AtomicU32,
    pub(crate) epoch: AtomicU64,
    /// The latest second noted in `times`, checked without its lock.
    pub(crate) last_mark: AtomicU32,
    pub(crate) times: Mutex<TimeLog>,
    /// Readers copying from the segment without locks (a large value, a
    /// segment image): while non-zero the segment is not chosen for
    /// eviction or the cleaner, and one already being cleared is not reused
    /// until it drops to zero (arena rule 5).
    pub(crate) pins: AtomicU32,
    /// Compression dictionaries named by values written into it, one bit
    /// per id (0–63); each set bit holds a reference (`Store::attach_dict`).
    pub(crate) dicts: AtomicU64,
    /// Its pages may be resident: written since it was last released.
    pub(crate) paged: std::sync::atomic::AtomicBool,
    /// The generation of the running snapshot's cut while the segment is
    /// in it and not copied yet, else 0 (`cut.rs`): the cleaner leaves it
    /// alone, nothing is linked into it, and what dies in it is noted.
    pub(crate) snap: AtomicU64,
    /// Its items linked at the snapshot's cut and unlinked since (`cut.rs`).
    pub(crate) died: Mutex<crate::cut::Died>,
    /// The size bands of the items written into it since it was opened,
    /// one bit each (`bands.rs`).
    pub(crate) bands: AtomicU64,
    /// When the `ext_item_age` pass last went through it (`tier/`): 0
    /// never; [`AGED_DONE`] once it left nothing that may go later (what
    /// stays is too small for flash, compressed or expiring); otherwise it
    /// kept read items, and goes through again an `ext_item_age` later.
    pub(crate) aged_at: AtomicU32,
    /// The second of the dictionary change the recompression pass last
    /// looked at it for (`rezip.rs`), 0 never.
    pub(crate) rezipped: AtomicU32,
    /// The generation of the cold pass (`rezip.rs`) that last went through
    /// it, 0 never.
    pub(crate) cold_gen: AtomicU32,
    /// The latest second an overwrite was written in place over one of its
    /// items (`overwrite.rs`), 0 never: such an item's write time.
    pub(crate) rewritten_at: AtomicU32,
    /// Its items copied into a batch for flash and not yet repointed there
    /// (`tier/`): while any is, nothing in it is written over in place,
    /// which would leave the record stale and the repoint unaware.
    pub(crate) batched: AtomicU32,
}

/// [`SegMeta::aged_at`] of a segment the age pass is done with.
pub(crate) const AGED_DONE: u32 = u32::MAX;

/// The memory budget: the segments free to take, those parked above a
/// lowered limit, how many are in use and paged in, and the limit. The
/// store holds one (`Store::budget`); only `store/memory.rs` changes it.
#[derive(Debug)]
pub(crate) struct Budget {
    pub(crate) free: Mutex<Vec<u32>>,
    /// Segments beyond the current limit (see `Store::set_memory_limit`).
    pub(crate) parked: Mutex<Vec<u32>>,
    pub(crate) limit_segs: AtomicU32,
    /// Segments off the free and parked lists (written, sealed or target).
    pub(crate) in_use: AtomicU32,
    /// Segments whose pages may be resident (see `Store::over_paged`).
    pub(crate) paged: AtomicU32,
    pub(crate) memory_limit: AtomicUsize,
}

impl Budget {
    /// `nsegs` segments, the first `limit` free and the rest parked, under
    /// a limit of `memory_limit` bytes.
    pub(crate) fn new(limit: u32, nsegs: u32, memory_limit: usize) -> Budget {
        Budget {
            free: Mutex::new((0..limit).rev().collect()),
            parked: Mutex::new((limit..nsegs).collect()),
            limit_segs: AtomicU32::new(limit),
            in_use: AtomicU32::new(0),
            paged: AtomicU32::new(0),
            memory_limit: AtomicUsize::new(memory_limit),
        }
    }

    pub(crate) fn memory_limit(&self) -> usize {
        self.memory_limit.load(Relaxed)
    }

    /// Segments off the free and parked lists.
    pub(crate) fn in_use(&self) -> u32 {
        self.in_use.load(Relaxed)
    }

    /// Segments on the free list.
    pub(crate) fn free_len(&self) -> usize {
        self.free.lock().len()
    }

    /// Runs `f` on the free and parked lists, both locked (a snapshot's cut
    /// marks the segments in use meanwhile).
    pub(crate) fn with_lists<R>(&self, f: impl FnOnce(&[u32], &[u32]) -> R) -> R {
        let free = self.free.lock();
        let parked = self.parked.lock();
        f(&free, &parked)
    }

    /// The free segments within the limit the next `n` takers get, in order.
    pub(crate) fn next_free(&self, n: usize) -> Vec<u32> {
        let limit = self.limit_segs.load(Relaxed);
        self.free.lock().iter().rev().filter(|&&s| s < limit).take(n).copied().collect()
    }
}

/// Where a new item was written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    pub(crate) seg: u32,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

/// A worker's active segments (one per TTL class), copy targets and
/// counters, apart from the `Arc<Store>` so both can be borrowed at once
/// without touching the store's reference count on every write.
pub(crate) struct Active {
    pub(crate) segs: [Option<u32>; TTL_CLASSES],
    /// An open segment the last reservation left nearly full, in a slot
    /// of another TTL class: sealed at the next reservation, when the item
    /// written there is linked or given back ([`Active::reserve`]).
    pub(crate) filled: Option<u32>,
    pub(crate) counters: Arc<Counters>,
    /// Where the live items of the segments this worker cleans or evicts
    /// are copied, and what eviction may copy (`copies.rs`).
    pub(crate) copies: crate::copies::Copies,
    /// Items of the victim being evicted, on their way to flash.
    pub(crate) flash: crate::tier::batch::FlashBatch,
    /// This worker's reads and misses not yet added to the sketch's
    /// totals (`sketch.rs`).
    pub(crate) pending: crate::sketch::Pending,
    /// The store's requests to seal this worker last acted on (`seal.rs`).
    pub(crate) seen: crate::seal::Seen,
    /// The background reclaimer's: makes free segments, takes none.
    pub(crate) background: bool,
    /// Whether this writer asked the reclaimer for a segment and has not
    /// taken one since ([`Asked`]).
    pub(crate) asked: Asked,
    /// A load's [`Restorer`](crate::Restorer): the cleaner takes a segment
    /// however live, before anything is evicted (a load keeps what was live).
    pub(crate) restoring: bool,
    /// The epoch this worker hands out CAS values of for overwrites in
    /// place, and the next offset (`overwrite.rs`); epoch 0: none yet.
    pub(crate) cas_lease: (u64, u64),
}

/// Whether a writer asked the reclaimer for a segment and has not taken
/// one since: its share of the count of segments writers want
/// (`reclaim::Shared::wanted`), counted once however often it asks. Its
/// own to each writer (`Active`); only these methods touch it.
#[derive(Debug, Default)]
pub(crate) struct Asked(bool);

impl Asked {
    /// Asks for a segment (counted in `wanted` once until withdrawn).
    pub(crate) fn ask(&mut self, wanted: &AtomicUsize) {
        if !std::mem::replace(&mut self.0, true) {
            wanted.fetch_add(1, Relaxed);
        }
    }

    /// About to take a segment, or leaving: what was asked for is no
    /// longer wanted.
    pub(crate) fn withdraw(&mut self, wanted: &AtomicUsize) {
        if std::mem::take(&mut self.0) {
            wanted.fetch_sub(1, Relaxed);
        }
    }

    /// Segments the others asked for, of `wanted` in all.
    pub(crate) fn others(&self, wanted: &AtomicUsize) -> usize {
        wanted.load(Relaxed).saturating_sub(usize::from(self.0))
    }
}

/// The store's epochs: every segment opened takes the next one, a
/// `flush_all` marks every segment opened so far flushed, and a delayed
/// one waits for its time here. Epochs only go up, and a flush never
/// reaches past the epochs handed out.
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    /// Epochs handed out so far.
    opened: AtomicU64,
    /// Segments opened at or before this epoch hold only flushed items.
    flushed: AtomicU64,
    /// A delayed `flush_all`'s time (0: none scheduled).
    flush_at: AtomicU32,
}

impl Epochs {
    /// Epochs handed out so far.
    pub(crate) fn now(&self) -> u64 {
        self.opened.load(Relaxed)
    }

    /// A new epoch, for a segment opened for writing.
    pub(crate) fn next(&self) -> u64 {
        self.opened.fetch_add(1, Relaxed) + 1
    }

    /// Segments opened at or before this epoch hold only flushed items.
    #[inline]
    pub(crate) fn flushed(&self) -> u64 {
        self.flushed.load(Relaxed)
    }

    /// Every segment opened so far is flushed.
    pub(crate) fn flush_now(&self) {
        self.flushed.store(self.opened.load(Relaxed), Relaxed);
    }

    /// A delayed `flush_all`'s time (0: none scheduled).
    pub(crate) fn flush_at(&self) -> u32 {
        self.flush_at.load(Relaxed)
    }

    /// Schedules a delayed `flush_all` at `at` (0 cancels it).
    pub(crate) fn set_flush_at(&self, at: u32) {
        self.flush_at.store(at, Relaxed);
    }

    /// Raises the epochs to at least a snapshot's (a load).
    pub(crate) fn raise(&self, opened: u64, flushed: u64) {
        self.opened.fetch_max(opened, Relaxed);
        self.flushed.fetch_max(flushed, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_only_go_up_and_a_flush_reaches_the_epochs_handed_out() {
        let e = Epochs::default();
        assert_eq!((e.now(), e.flushed(), e.flush_at()), (0, 0, 0));
        assert_eq!((e.next(), e.next()), (1, 2));
        e.flush_now();
        assert_eq!(e.flushed(), 2, "every segment opened so far");
        assert_eq!(e.next(), 3, "a segment opened after the flush is not flushed");
        // A snapshot's epochs raise them, never lower them.
        e.raise(10, 1);
        assert_eq!((e.now(), e.flushed()), (10, 2));
        e.raise(4, 7);
        assert_eq!((e.now(), e.flushed()), (10, 7));
        e.set_flush_at(500);
        assert_eq!(e.flush_at(), 500);
        e.set_flush_at(0);
        assert_eq!(e.flush_at(), 0);
    }

    #[test]
    fn a_writer_is_counted_once_among_those_who_want_a_segment() {
        let wanted = AtomicUsize::new(0);
        let (mut a, mut b) = (Asked::default(), Asked::default());
        a.ask(&wanted);
        a.ask(&wanted);
        b.ask(&wanted);
        assert_eq!(wanted.load(Relaxed), 2, "a asked twice, counted once");
        assert_eq!((a.others(&wanted), Asked::default().others(&wanted)), (1, 2));
        a.withdraw(&wanted);
        a.withdraw(&wanted);
        assert_eq!(wanted.load(Relaxed), 1, "withdrawn once");
    }
}
