//! A worker's writes into its segments (`Active`, whose state is in
//! `segments.rs`): reserving room for an item in the open segment of its
//! TTL class or where it fits best, opening and sealing segments (at most
//! `Store::open_cap` open), and sealing what the store asks to be sealed
//! (a snapshot's cut, a starved writer, idle segments).

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use crate::copies::KEEP_OPEN_DIV;
use crate::counters::Counters;
use crate::image::Queue;
use crate::segments::{Active, TTL_CLASSES};
use crate::store::Store;
use crate::types::StoreError;

/// Under a small budget a writer asks for its next segment once its open
/// one is all but this share full (`Active::note_fill`): half. Asked at
/// three quarters, the reclaimer did not free one in time for 1000-byte
/// sets at `-m 16`: 6-10% fewer sets served in the soak, three rounds.
const WANT_AHEAD_DIV: usize = 2;

/// Only writes of items under this share of a segment ask ahead: a
/// segment of large items fills in a write or two, and asked ahead for it
/// the reclaimer keeps one free all along, as it did unasked.
const PRE_ASK_ITEM_DIV: usize = 16;

/// Whether an item of `len` bytes is large: a sixteenth of a segment or
/// more. A segment holds at most sixteen such: a writer of them does not
/// ask ahead (`Active::note_fill`), and clears the reclaimer's next victim
/// itself where that is cheap (`Store::reclaim_cheap`).
pub(crate) fn large_item(st: &Store, len: usize) -> bool {
    len >= st.arena().segment_size() / PRE_ASK_ITEM_DIV
}

impl Active {
    /// A worker's (or, `background`, the reclaimer's): nothing open yet.
    pub(crate) fn new(st: &Store, counters: Arc<Counters>, background: bool) -> Active {
        Active {
            segs: [None; TTL_CLASSES],
            filled: None,
            counters,
            copies: Default::default(),
            flash: Default::default(),
            pending: Default::default(),
            seen: st.seals().now(),
            background,
            asked: Default::default(),
            restoring: false,
            cas_lease: (0, 0),
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
        self.copies.earn(len);
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
        let seg = st.alloc_segment(self, len).inspect_err(|e| {
            if *e == StoreError::OutOfMemory {
                st.bands().out_of_memory(class_len);
            }
        })?;
        self.open(st, class, seg);
        st.seg(seg).write_off.store(len as u32, Release);
        st.note_written(seg, 0, time);
        // No ask ahead here: an item that fills half a fresh segment is
        // not one that asks (`Active::note_fill`).
        Ok((seg, 0))
    }

    /// A write filled an open segment from `from` to `to` bytes: past
    /// half, a writer asks for its next segment ahead, where the
    /// reclaimer keeps none free unasked (`Store::reclaim_ahead`).
    fn note_fill(&mut self, st: &Store, from: usize, to: usize) {
        let seg_size = st.arena().segment_size();
        let mark = seg_size - seg_size / WANT_AHEAD_DIV;
        if !large_item(st, to - from) && from < mark && to >= mark && !self.background && st.ahead_on_demand() {
            st.want_segment(self);
        }
    }

    /// Whether an item of `len` bytes fits in one of the open segments
    /// (as [`Active::reserve`] would put it there, without a new segment).
    pub(crate) fn has_room(&self, st: &Store, len: usize) -> bool {
        let len = st.aligned(len);
        self.segs.iter().flatten().any(|&s| !st.is_flushed(s) && !st.frozen(s) && st.room(s) >= len)
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
        self.note_fill(st, w, w + len);
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
        self.seal_where(st, |_| true);
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
        self.copies.seal_where(st, pick);
    }

    /// Gives back the latest reservation (nothing was linked there).
    pub(crate) fn unreserve(&self, st: &Store, seg: u32, off: usize, len: usize) {
        let m = st.seg(seg);
        if m.write_off.load(Relaxed) as usize == off + st.aligned(len) {
            m.write_off.store(off as u32, Release);
        }
    }
}
