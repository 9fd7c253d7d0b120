//! Segments and the memory budget: the memory limit cut into fixed-size
//! segments, their metadata (kept apart from their data), the free and
//! parked lists, TTL classes, and a worker's reservations in its active
//! segments.
//!
//! Each worker appends items to its own active segment for the item's TTL
//! class, so items of similar expiry share segments and a whole segment can
//! be dropped once its last item has expired, without a scan; an item that
//! does not fit there goes to the worker's open segment where it fits best,
//! and a worker keeps at most `Store::open_cap` open. A full segment is
//! sealed onto an eviction queue (`evict/`). `-m` covers segments and
//! the index together: a segment is taken only while both fit.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::evict::RESERVE_SEGMENTS;
use crate::image::Queue;
use crate::index::slot;
use crate::store::{Counters, Store};
use crate::timelog::TimeLog;
use crate::types::{ConfigError, StoreError};

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
}

/// [`SegMeta::aged_at`] of a segment the age pass is done with.
pub(crate) const AGED_DONE: u32 = u32::MAX;

/// The memory budget: the segments free to take, those parked above a
/// lowered limit, how many are in use and paged in, and the limit. The
/// store holds one ([`Store::budget`]); only this module changes it.
#[derive(Debug)]
pub(crate) struct Budget {
    free: Mutex<Vec<u32>>,
    /// Segments beyond the current limit (see [`Store::set_memory_limit`]).
    parked: Mutex<Vec<u32>>,
    limit_segs: AtomicU32,
    /// Segments off the free and parked lists (written, sealed or target).
    in_use: AtomicU32,
    /// Segments whose pages may be resident (see `Store::over_paged`).
    paged: AtomicU32,
    memory_limit: AtomicUsize,
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

impl Store {
    pub(crate) fn aligned(&self, len: usize) -> usize {
        (len + self.granule() - 1) & !(self.granule() - 1)
    }

    pub(crate) fn open_segment(&self, seg: u32) {
        self.note_paged(seg);
        let m = self.seg(seg);
        m.write_off.store(0, Relaxed);
        m.live_items.store(0, Relaxed);
        m.live_bytes.store(0, Relaxed);
        m.max_expire.store(0, Relaxed);
        {
            // Under the cut's lock: opened before a snapshot's cut, the
            // segment is in it; opened after, it is not, and its writer
            // sees the cut (`cut.rs`).
            let _cut = self.cut().lock.lock();
            m.epoch.store(self.next_epoch(), Relaxed);
            m.snap.store(0, Relaxed);
        }
        m.last_mark.store(0, Relaxed);
        m.bands.store(0, Relaxed);
        m.aged_at.store(0, Relaxed);
        m.times.lock().clear();
    }

    /// Pins `seg` for a copy made without locks. Only a segment in which the
    /// caller found a linked item under its bucket lock, or a sealed one
    /// under the eviction lock, may be pinned: then whoever clears it for
    /// reuse sees the pin (through that lock, or through the item's
    /// unlinking, which releases `live_items`) and waits for it.
    pub(crate) fn pin(&self, seg: u32) {
        self.seg(seg).pins.fetch_add(1, Relaxed);
    }

    /// Ends a pin: the copy's reads happen before any later reuse.
    pub(crate) fn unpin(&self, seg: u32) {
        self.seg(seg).pins.fetch_sub(1, Release);
    }

    pub(crate) fn is_pinned(&self, seg: u32) -> bool {
        self.seg(seg).pins.load(Acquire) != 0
    }

    /// Waits until nobody copies from `seg`, before it is reused. Pins are
    /// held for a copy, never across a lock or I/O, so this is short.
    pub(crate) fn wait_unpinned(&self, seg: u32) {
        let mut spins = 0u32;
        while self.is_pinned(seg) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Notes that the item at `off` of `seg` was written at `time`; called
    /// by the segment's one writer.
    pub(crate) fn note_written(&self, seg: u32, off: usize, time: u32) {
        let m = self.seg(seg);
        if m.last_mark.load(Relaxed) != time {
            m.last_mark.store(time, Relaxed);
            m.times.lock().note(off as u32, time);
        }
    }

    /// When the item at slot `s` was written.
    /// Seconds since the earliest write in a segment still holding items
    /// (memcached's `age` of a class: its oldest item); 0 when empty.
    pub fn oldest_age(&self) -> u32 {
        let earliest = self
            .segs()
            .iter()
            .filter(|m| m.live_items.load(Relaxed) > 0)
            .filter_map(|m| m.times.lock().earliest())
            .min();
        earliest.map_or(0, |t| self.clock().now().saturating_sub(t))
    }

    pub(crate) fn written_at(&self, s: u64) -> u32 {
        let m = self.seg(slot::seg(s));
        m.times.lock().time_at(self.byte_off(s) as u32).unwrap_or(0)
    }

    /// Whether `seg` was opened before the latest `flush_all` took effect:
    /// then everything in it is invalid (memcached's `oldest_live`, kept per
    /// segment instead of per item).
    pub(crate) fn is_flushed(&self, seg: u32) -> bool {
        self.seg(seg).epoch.load(Relaxed) <= self.flush_epoch()
    }

    pub(crate) fn note_expiry(&self, seg: u32, expiry: u32) {
        let e = if expiry == 0 { NEVER } else { expiry };
        self.seg(seg).max_expire.fetch_max(e, Relaxed);
    }

    /// How many segments may be in use: the memory limit covers the index,
    /// eviction's sketch and compression's dictionaries and samples too,
    /// so that RSS stays near `-m` whatever the item size (memcached's `-m`
    /// leaves its hash table out).
    pub(crate) fn segment_budget(&self) -> u32 {
        let codec = self.codec().map_or(0, |c| c.memory());
        let b = self.budget();
        let policy = self.sketch().memory();
        let spare = b.memory_limit.load(Relaxed).saturating_sub(self.index().memory() + codec + policy);
        let segs = u32::try_from(spare / self.arena().segment_size()).unwrap_or(u32::MAX);
        segs.min(b.limit_segs.load(Relaxed)).max(2)
    }

    /// A free segment within the current limit and budget; free segments
    /// above the limit are parked. A `writer` leaves the cleaner's reserve
    /// (one segment per worker) alone.
    pub(crate) fn pop_free(&self, writer: bool) -> Option<u32> {
        let held_back = if writer { RESERVE_SEGMENTS } else { 0 };
        let b = self.budget();
        if b.in_use.load(Relaxed) as usize + held_back >= self.segment_budget() as usize {
            return None;
        }
        let limit = b.limit_segs.load(Relaxed);
        let mut free = b.free.lock();
        while let Some(s) = free.pop() {
            if s < limit {
                b.in_use.fetch_add(1, Relaxed);
                return Some(s);
            }
            b.parked.lock().push(s);
        }
        None
    }

    /// Takes an emptied victim out of use, onto the free list (or parked
    /// above a lowered limit). The caller cleared it as for
    /// [`Store::retire`].
    pub(crate) fn give_back(&self, seg: u32) {
        let b = self.budget();
        if seg >= b.limit_segs.load(Relaxed) {
            // Above a lowered limit: retire it instead of reusing it.
            self.retire_to(seg, &b.parked);
        } else if self.over_paged() {
            // The index has grown into the segments' share of the limit.
            self.retire_to(seg, &b.free);
        } else {
            self.unuse_to(seg, &b.free);
        }
    }

    /// Takes an emptied segment out of use and gives its memory back; it
    /// goes on the free list.
    pub(crate) fn retire(&self, seg: u32) {
        self.retire_to(seg, &self.budget().free);
    }

    fn retire_to(&self, seg: u32, to: &Mutex<Vec<u32>>) {
        // SAFETY: the caller took `seg` off its queue and cleared it: no item
        // links into it, no reader has it pinned (`clear_segment` waited for
        // the pins to drop) and no writer holds it.
        unsafe { self.arena().release(seg) };
        if self.seg(seg).paged.swap(false, Relaxed) {
            self.budget().paged.fetch_sub(1, Relaxed);
        }
        self.unuse_to(seg, to);
    }

    /// Notes that `seg`'s pages are about to be written (resident).
    pub(crate) fn note_paged(&self, seg: u32) {
        if !self.seg(seg).paged.swap(true, Relaxed) {
            self.budget().paged.fetch_add(1, Relaxed);
        }
    }

    /// Whether segments with resident pages (in use, or free but kept
    /// paged for the next writer) exceed the budget: then an emptied one
    /// gives its memory back. The index grows into the limit as items go
    /// to flash (its slots stay in RAM), after the segments it now crowds
    /// out were paged in.
    pub(crate) fn over_paged(&self) -> bool {
        let b = self.budget();
        b.in_use.load(Relaxed) > self.segment_budget()
            || b.paged.load(Relaxed) > self.segment_budget() + RESERVE_SEGMENTS as u32
    }

    /// Takes an emptied segment out of use, keeping its pages, so the next
    /// writer to take it does not fault them in again; it goes on the free
    /// list.
    pub(crate) fn unuse(&self, seg: u32) {
        self.unuse_to(seg, &self.budget().free);
    }

    fn unuse_to(&self, seg: u32, to: &Mutex<Vec<u32>>) {
        self.detach_dicts(seg);
        self.budget().in_use.fetch_sub(1, Relaxed);
        let mut list = to.lock();
        // Out of any snapshot's cut (handed off first if it was in it), under
        // the list's lock, which a cut marks segments under.
        self.seg(seg).snap.store(0, Relaxed);
        list.push(seg);
    }

    /// `cache_memlimit`: changes the memory limit at run time, within the
    /// address space reserved at start. Raising takes effect at once;
    /// lowering retires segments above the limit as they are freed or evicted.
    pub fn set_memory_limit(&self, bytes: usize) -> Result<(), ConfigError> {
        let seg = self.arena().segment_size();
        let new = bytes / seg;
        if new < 2 || new > self.segs().len() {
            return Err(ConfigError::Invalid("memory limit outside the reserved range"));
        }
        let new = new as u32;
        let b = self.budget();
        b.limit_segs.store(new, Relaxed);
        b.memory_limit.store(bytes, Relaxed);
        let mut parked = b.parked.lock();
        let (back, keep): (Vec<u32>, Vec<u32>) = parked.drain(..).partition(|&s| s < new);
        *parked = keep;
        drop(parked);
        b.free.lock().extend(back);
        Ok(())
    }

    /// Which segments are in use: neither free nor parked.
    pub(crate) fn in_use(&self) -> Vec<bool> {
        let mut in_use = vec![true; self.segs().len()];
        self.budget().with_lists(|free, parked| {
            for &s in free.iter().chain(parked) {
                in_use[s as usize] = false;
            }
        });
        in_use
    }

    /// Segments a worker keeps open for writes: one per TTL class when
    /// segments are many, down to two under a small `-m` (all workers'
    /// together about an eighth of the budget). An open segment holds
    /// items in part and cannot be cleaned or evicted; eight per worker
    /// under `-m 16` left almost no segment sealed. Two, not one: the
    /// second is where smaller items fill the room a large one left.
    pub(crate) fn open_cap(&self) -> usize {
        let workers = self.worker_count().max(1);
        (self.segment_budget() as usize / (8 * workers)).clamp(2, TTL_CLASSES)
    }

    pub(crate) fn room(&self, seg: u32) -> usize {
        self.arena().segment_size() - self.seg(seg).write_off.load(Relaxed) as usize
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
    /// Where the live items of the segments this worker cleans or evicts
    /// are copied, one per queue (indexed by [`Queue`]).
    pub(crate) targets: [Option<u32>; 2],
    /// A free segment taken for the victim being cleaned, for when its
    /// target fills half-way (`evict/`, `Store::step`); given back if
    /// unused once the victim is cleared.
    pub(crate) claimed: Option<u32>,
    /// An open segment the last reservation left nearly full, in a slot
    /// of another TTL class: sealed at the next reservation, when the item
    /// written there is linked or given back ([`Active::reserve`]).
    filled: Option<u32>,
    pub(crate) counters: Arc<Counters>,
    /// Items of the victim being evicted, on their way to flash.
    pub(crate) flash: crate::tier::FlashBatch,
    /// Eviction sends read items to flash too (see `alloc_segment`).
    pub(crate) force_out: bool,
    /// The cleaner may take segments of a running snapshot's cut not yet
    /// copied (handing them off): the last resort before a write fails (see
    /// `alloc_segment`).
    pub(crate) take_held: bool,
    /// The last resort before a write fails (`evict/`): eviction copies
    /// nothing forward, and the writer may take the cleaner's reserve.
    pub(crate) last_resort: bool,
    /// Bytes eviction may still copy forward: a fifth of what this worker
    /// writes, a quarter of the segments at most banked (`evict/`,
    /// "What eviction copies").
    pub(crate) copy_credit: usize,
    /// The read items this worker's evictions met, by reads per byte: which
    /// of them the credit goes to (`density.rs`).
    pub(crate) density: crate::density::Density,
    /// This worker's reads not yet added to the sketch's total
    /// (`sketch.rs`).
    pub(crate) sketch_pending: u32,
    /// Its misses not yet added to the sketch's total.
    pub(crate) misses_pending: u32,
    /// The store's requests to seal this worker last acted on (`seal.rs`).
    pub(crate) seen: crate::seal::Seen,
    /// The background reclaimer's: makes free segments, takes none.
    pub(crate) background: bool,
    /// A writer beside the reclaimer: cleans early and takes fresh memory,
    /// leaves the rest to the reclaimer.
    pub(crate) early_only: bool,
    /// A load's [`Restorer`](crate::Restorer): the cleaner takes a segment
    /// however live, before anything is evicted (a load keeps what was live).
    pub(crate) restoring: bool,
}

/// A segment a worker set aside stays open only while it has at least
/// this share of a segment's room (`Active::open`).
const KEEP_OPEN_DIV: usize = 8;

/// Copy-forward credit a worker may bank: a quarter of the segments, and
/// at least this many. Read items come in runs (a burst of reads, the
/// segments the cleaner filled with them), and a run evicted back to back
/// is kept whole if the writes before it paid for it; over a fill many
/// times memory the bound holds all the same.
pub(crate) const COPY_CREDIT_SEGMENTS: usize = 2;

/// Eviction copies forward at most one byte per this many bytes written:
/// write amplification from eviction stays at or under 1.2.
pub(crate) const COPY_CREDIT_DIV: usize = 5;

impl Active {
    /// A worker's (or, `background`, the reclaimer's): nothing open yet.
    pub(crate) fn new(st: &Store, counters: Arc<Counters>, background: bool) -> Active {
        Active {
            segs: [None; TTL_CLASSES],
            targets: [None; 2],
            claimed: None,
            filled: None,
            counters,
            flash: Default::default(),
            force_out: false,
            take_held: false,
            last_resort: false,
            copy_credit: 0,
            density: Default::default(),
            sketch_pending: 0,
            misses_pending: 0,
            seen: st.seals().now(),
            background,
            early_only: false,
            restoring: false,
        }
    }

    /// Reserves `len` bytes in the active segment of `class` for an item
    /// written at `time`, whose size in memcached would be `class_len`
    /// (the size band whose `outofmemory` counts a refusal).
    pub(crate) fn reserve(
        &mut self,
        st: &Store,
        class: usize,
        (len, class_len): (usize, usize),
        time: u32,
    ) -> Result<(u32, usize), StoreError> {
        let len = st.aligned(len);
        if len > st.arena().segment_size() {
            return Err(StoreError::TooLarge);
        }
        self.seal_if_starved(st);
        self.seal_filled(st);
        // Capped where segments are taken (`Store::alloc_segment`).
        self.copy_credit += len / COPY_CREDIT_DIV;
        // The class's own segment first, then any other open one with the
        // room: a TTL class is where an item prefers to go (so that
        // segments expire whole), not a wall that leaves a tail unused.
        if let Some(seg) = self.segs[class] {
            if let Some(off) = self.append(st, class, seg, len, time) {
                return Ok((seg, off));
            }
        }
        // Else the open segment where it fits best: items up to -I in
        // segments barely larger leave a tail unused in each, best fit
        // keeps those tails few and small (online bin packing).
        let best = (0..TTL_CLASSES)
            .filter(|&c| c != class)
            .filter_map(|c| self.segs[c].map(|s| (c, s, st.room(s))))
            .filter(|&(_, _, room)| room >= len)
            .min_by_key(|&(_, _, room)| room);
        if let Some((c, seg, _)) = best {
            if let Some(off) = self.append(st, c, seg, len, time) {
                // Nearly full now, but sealed only at the next write: once
                // sealed it may be taken as a victim, cleared and handed out
                // again, and this item is not written or linked yet.
                if st.room(seg) < st.arena().segment_size() / KEEP_OPEN_DIV {
                    self.filled = Some(seg);
                }
                return Ok((seg, off));
            }
        }
        let seg = st.alloc_segment(self).inspect_err(|e| {
            if *e == StoreError::OutOfMemory {
                st.bands().out_of_memory(class_len);
            }
        })?;
        self.open(st, class, seg);
        st.seg(seg).write_off.store(len as u32, Release);
        st.note_written(seg, 0, time);
        Ok((seg, 0))
    }

    /// Seals the segment the last reservation left nearly full, if it is
    /// still open here with under an eighth of a segment's room (the item
    /// may have been given back, or a seal request taken it already).
    fn seal_filled(&mut self, st: &Store) {
        let Some(seg) = self.filled.take() else { return };
        if st.room(seg) >= st.arena().segment_size() / KEEP_OPEN_DIV {
            return;
        }
        if let Some(slot) = self.segs.iter_mut().find(|s| **s == Some(seg)) {
            *slot = None;
            st.seal(seg, Queue::Small);
        }
    }

    /// `len` bytes at the end of `seg`, open in `class`'s slot, if they
    /// fit. A flushed segment, or one in a snapshot's cut, takes nothing
    /// more: it is sealed at once, so that a snapshot waiting for its
    /// cut to be sealed does not wait on it.
    fn append(&mut self, st: &Store, class: usize, seg: u32, len: usize, time: u32) -> Option<usize> {
        if st.is_flushed(seg) || st.frozen(seg) {
            self.segs[class] = None;
            st.seal(seg, Queue::Small);
            return None;
        }
        let m = st.seg(seg);
        let w = m.write_off.load(Relaxed) as usize;
        if w + len > st.arena().segment_size() {
            return None;
        }
        m.write_off.store((w + len) as u32, Release);
        st.note_written(seg, w, time);
        Some(w)
    }

    /// Makes `seg` the open segment of `class`. A worker keeps at most
    /// [`Store::open_cap`] segments open: an open segment is memory
    /// holding items in part, and under a small `-m` eight per worker
    /// would be most of it. Past the cap the fullest open segment is
    /// sealed; the class's old segment, if it has more room than that,
    /// stays open in a slot of its own.
    fn open(&mut self, st: &Store, class: usize, seg: u32) {
        let cap = st.open_cap();
        // One set aside that takes nothing more (flushed, or in a
        // snapshot's cut) is sealed now rather than when it is fullest.
        for slot in self.segs.iter_mut().filter(|s| s.is_some_and(|s| st.is_flushed(s) || st.frozen(s))) {
            if let Some(s) = slot.take() {
                st.seal(s, Queue::Small);
            }
        }
        // Kept open only with room for more than a few items: a segment
        // held open cannot be cleaned, and one nearly full would be held
        // for nothing (its overwritten items' bytes with it).
        let mut old = self.segs[class].take().filter(|&o| {
            let keep = st.room(o) >= st.arena().segment_size() / KEEP_OPEN_DIV;
            if !keep {
                st.seal(o, Queue::Small);
            }
            keep
        });
        while self.segs.iter().flatten().count() + usize::from(old.is_some()) >= cap {
            let fullest =
                (0..TTL_CLASSES).filter_map(|c| self.segs[c].map(|s| (c, s))).min_by_key(|&(_, s)| st.room(s));
            match (old, fullest) {
                (Some(o), Some((_, f))) if st.room(o) <= st.room(f) => {
                    old = None;
                    st.seal(o, Queue::Small);
                }
                (_, Some((c, f))) => {
                    self.segs[c] = None;
                    st.seal(f, Queue::Small);
                }
                (Some(o), None) => {
                    old = None;
                    st.seal(o, Queue::Small);
                }
                (None, None) => break,
            }
        }
        if let Some(o) = old {
            // Fewer than the cap are open, so a slot besides the class's
            // is free.
            match (0..TTL_CLASSES).find(|&c| c != class && self.segs[c].is_none()) {
                Some(c) => self.segs[c] = Some(o),
                None => st.seal(o, Queue::Small),
            }
        }
        self.segs[class] = Some(seg);
    }

    /// Puts every segment this worker writes on a queue.
    pub(crate) fn seal_all(&mut self, st: &Store) {
        for seg in self.segs.iter_mut().filter_map(Option::take) {
            st.seal(seg, Queue::Small);
        }
        let [small, main] = &mut self.targets;
        for (t, q) in [(small.take(), Queue::Small), (main.take(), Queue::Main)] {
            if let Some(t) = t {
                st.seal(t, q);
            }
        }
    }

    /// Seals what the store asked to since this worker last looked
    /// (`seal.rs`): every segment it holds if a writer starved, its idle
    /// ones if the age pass asked.
    pub(crate) fn seal_if_starved(&mut self, st: &Store) {
        match st.seals().asked(&mut self.seen) {
            crate::seal::Ask::Nothing => {}
            crate::seal::Ask::All => self.seal_all(st),
            crate::seal::Ask::IdleBefore(cutoff) => self.seal_idle(st, cutoff),
        }
    }

    /// Seals the segments this worker holds whose items were all written
    /// at or before `cutoff`.
    pub(crate) fn seal_idle(&mut self, st: &Store, cutoff: u32) {
        self.seal_where(st, |s| st.idle_since(s, cutoff));
    }

    /// Seals the segments this worker writes that are in a running
    /// snapshot's cut: nothing more goes into them, and the snapshot copies
    /// only sealed segments (`cut.rs`).
    pub(crate) fn seal_frozen(&mut self, st: &Store) {
        self.seal_where(st, |s| st.frozen(s));
    }

    /// Seals the segments this worker writes for which `pick` holds.
    pub(crate) fn seal_where(&mut self, st: &Store, pick: impl Fn(u32) -> bool) {
        for seg in self.segs.iter_mut().filter(|s| s.is_some_and(&pick)).filter_map(Option::take) {
            st.seal(seg, Queue::Small);
        }
        for (i, q) in [(0, Queue::Small), (1, Queue::Main)] {
            if let Some(t) = self.targets[i].filter(|&t| pick(t)) {
                self.targets[i] = None;
                st.seal(t, q);
            }
        }
    }

    /// Gives back the latest reservation (nothing was linked there).
    pub(crate) fn unreserve(&self, st: &Store, seg: u32, off: usize, len: usize) {
        let m = st.seg(seg);
        if m.write_off.load(Relaxed) as usize == off + st.aligned(len) {
            m.write_off.store(off as u32, Release);
        }
    }
}
