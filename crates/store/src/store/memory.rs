//! The store's side of the segment layer (`segments.rs`): opening a
//! segment, pins, what was written when, the segment budget under `-m`,
//! the free and parked lists, and the memory limit changed at run time.

use super::*;
use crate::segments::{NEVER, RESERVE_SEGMENTS, TTL_CLASSES};

/// All workers' open segments together are at most about this share of
/// the segment budget ([`Store::open_cap`]). At an eighth, `-m 64` let each
/// of two workers keep three open (one per TTL class in use): on workload
/// 14 (values to 1 MB, four TTL classes) 3.9 MB of room held open against
/// 3.1 MB at a sixteenth (one each), and 78.6-78.9% hits against
/// 79.1-79.5%; on a workload whose TTLs expire as it runs (half the keys
/// 3 s, half none, values 500-4000 B, `-m 64`) keeping classes apart
/// saved nothing: 71.1-73.2% hits (median 72.6) against 72.6-73.7% (72.8),
/// write amplification 1.16-1.21 both (five rounds each; history, "Issue
/// 42: where workload 14's idle memory is"). Budgets of 128 segments per
/// worker and more still keep one per class.
pub(crate) const OPEN_SHARE_DIV: usize = 16;

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
            m.epoch.store(self.epochs().next(), Relaxed);
            m.snap.store(0, Relaxed);
        }
        m.last_mark.store(0, Relaxed);
        m.bands.store(0, Relaxed);
        m.aged_at.store(0, Relaxed);
        m.rezipped.store(0, Relaxed);
        m.cold_gen.store(0, Relaxed);
        m.rewritten_at.store(0, Relaxed);
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

    /// When the item at slot `s` was written; the caller holds its bucket
    /// lock. One overwritten in place (`overwrite.rs`) was written at its
    /// segment's latest such write, which is no earlier.
    pub(crate) fn written_at(&self, s: u64) -> u32 {
        let m = self.seg(slot::seg(s));
        let placed = m.times.lock().time_at(self.byte_off(s) as u32).unwrap_or(0);
        match self.item_at(s) {
            Some(it) if it.state() & crate::item::state::IN_PLACE != 0 => placed.max(m.rewritten_at.load(Relaxed)),
            _ => placed,
        }
    }

    /// Whether `seg` was opened before the latest `flush_all` took effect:
    /// then everything in it is invalid (memcached's `oldest_live`, kept per
    /// segment instead of per item).
    pub(crate) fn is_flushed(&self, seg: u32) -> bool {
        self.seg(seg).epoch.load(Relaxed) <= self.epochs().flushed()
    }

    pub(crate) fn note_expiry(&self, seg: u32, expiry: u32) {
        let e = if expiry == 0 { NEVER } else { expiry };
        self.seg(seg).max_expire.fetch_max(e, Relaxed);
    }

    /// How many segments may be in use: the memory limit covers the index,
    /// eviction's sketch and ghost and compression's dictionaries and samples too,
    /// so that RSS stays near `-m` whatever the item size (memcached's `-m`
    /// leaves its hash table out).
    pub(crate) fn segment_budget(&self) -> u32 {
        let codec = self.codec().map_or(0, |c| c.memory());
        let b = self.budget();
        let policy = self.sketch().memory() + self.ghost().memory();
        let spare = b.memory_limit.load(Relaxed).saturating_sub(self.index().memory() + codec + policy);
        let segs = u32::try_from(spare / self.arena().segment_size()).unwrap_or(u32::MAX);
        segs.min(b.limit_segs.load(Relaxed)).max(2)
    }

    /// Whether [`Store::pop_free`] would give a writer a segment now.
    pub(crate) fn free_for_writer(&self) -> bool {
        if !self.within_budget(true) {
            return false;
        }
        let limit = self.budget().limit_segs.load(Relaxed);
        self.budget().free.lock().iter().any(|&s| s < limit)
    }

    /// Whether one more segment may be taken into use: within the budget,
    /// and for a `writer` beside the cleaner's reserve (one segment per
    /// worker), which it leaves alone.
    fn within_budget(&self, writer: bool) -> bool {
        let held_back = if writer { RESERVE_SEGMENTS } else { 0 };
        (self.budget().in_use.load(Relaxed) as usize + held_back) < self.segment_budget() as usize
    }

    /// A free segment within the current limit and budget; free segments
    /// above the limit are parked. A `writer` leaves the cleaner's reserve
    /// alone (`Store::within_budget`).
    pub(crate) fn pop_free(&self, writer: bool) -> Option<u32> {
        if !self.within_budget(writer) {
            return None;
        }
        let b = self.budget();
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
    /// segments are many, down to one under a small `-m` (all workers'
    /// together about a sixteenth of the budget, [`OPEN_SHARE_DIV`]). An
    /// open segment holds items in part and cannot be cleaned or evicted;
    /// eight per worker under `-m 16` left almost no segment sealed. Above
    /// one, a second is where smaller items fill the room a large one
    /// left; but two each for two workers are a quarter of `-m 16`'s
    /// fifteen segments, and with one workload 15 (values to 1 MB, four
    /// TTL classes) hit 72.9% against 71.3% (63.4 / 61.7% of bytes;
    /// medians of five), the room held open falling from 2.0-3.4 MB to
    /// 0.9-2.0.
    pub(crate) fn open_cap(&self) -> usize {
        let workers = self.roster().workers().max(1);
        (self.segment_budget() as usize / (OPEN_SHARE_DIV * workers)).clamp(1, TTL_CLASSES)
    }

    pub(crate) fn room(&self, seg: u32) -> usize {
        self.arena().segment_size() - self.seg(seg).write_off.load(Relaxed) as usize
    }
}
