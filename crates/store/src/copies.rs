//! A worker's copy-forward state ([`Copies`]): the segments the cleaner and
//! eviction copy live items into (a target per queue, spare main targets,
//! a segment claimed for the victim being cleaned) and what eviction may
//! copy (the credit, and the read items it met by density). Eviction
//! (`evict/`), the reclaimer and the recompression pass (`rezip.rs`) reach
//! it only through these methods; its fields are this module's. It sees
//! the store's segments only through [`TargetSegments`] (seven calls,
//! implemented by the store in `evict/`): it is state the store holds
//! (`Active`), below the store, as `segments.rs` is.

use crate::density::Density;
use crate::image::Queue;

/// Main-queue copy targets a worker keeps open beside its target
/// ([`Copies`]' spares). Eviction copies read items forward into the main
/// target; with one target, an item that did not fit sealed it, and items
/// up to `-I` in segments barely larger left a quarter of each segment
/// unwritten (next fit): on workload 14 (`-m 64`, values to 1 MB) the
/// sealed main segments' tails were 12.2 MB. With two spares, best fit over
/// three: 3.4 MB, and 72.4% -> 75.7% hits (`docs/benchmarks-history.md`,
/// "Issue 42, sixth step").
pub(crate) const SPARE_TARGETS: usize = 2;

/// Copy-forward credit a worker may bank: a quarter of the segments, and
/// at least this many. Read items come in runs (a burst of reads, the
/// segments the cleaner filled with them), and a run evicted back to back
/// is kept whole if the writes before it paid for it; over a fill many
/// times memory the bound holds all the same.
pub(crate) const COPY_CREDIT_SEGMENTS: usize = 2;

/// Eviction copies forward at most one byte per this many bytes written:
/// write amplification from eviction stays at or under 1.2.
pub(crate) const COPY_CREDIT_DIV: usize = 5;

/// A segment set aside stays open only while it has at least this share
/// of a segment's room (a worker's open segment, `Active::open`; a copy
/// target set aside as a spare, [`Copies::new_target`]).
pub(crate) const KEEP_OPEN_DIV: usize = 8;

/// Where one worker's copies go and what it may copy.
#[derive(Default)]
pub(crate) struct Copies {
    /// One per queue (indexed by [`Queue`]).
    targets: [Option<u32>; 2],
    /// Main-queue targets an item did not fit but that have room for
    /// more: copies go where they fit best among these and the target.
    spares: [Option<u32>; SPARE_TARGETS],
    /// A free segment taken for the victim being cleaned, for when its
    /// target fills half-way (`Store::step`); given back if unused once
    /// the victim is cleared.
    claimed: Option<u32>,
    /// Bytes eviction may still copy forward: a fifth of what this worker
    /// writes, `Store::credit_cap` at most banked (`evict/`, "What
    /// eviction copies").
    credit: usize,
    /// The read items this worker's evictions met, by reads per byte:
    /// which of them the credit goes to (`density.rs`).
    density: Density,
}

/// What copy targets need of the store's segments.
pub(crate) trait TargetSegments {
    /// A segment's size in bytes.
    fn segment_bytes(&self) -> usize;
    /// Unwritten bytes at the end of segment `t`.
    fn room_in(&self, t: u32) -> usize;
    /// Whether target `t` may take more items: not if it predates the last
    /// `flush_all`, nor while it is in a running snapshot's cut.
    fn takes_copies(&self, t: u32) -> bool;
    /// Puts target `t` on queue `q`: it takes no more items.
    fn seal_onto(&self, t: u32, q: Queue);
    /// A free segment for a target, the cleaner's reserve too.
    fn take_free(&self) -> Option<u32>;
    /// Opens free segment `t` for writing.
    fn open_target(&self, t: u32);
    /// Gives back a free segment taken and not written.
    fn give_back_unused(&self, t: u32);
}

impl Copies {
    /// Room in the target for `q`, if it takes copies (0 if none is open).
    pub(crate) fn room(&self, st: &impl TargetSegments, q: Queue) -> usize {
        self.targets[q as usize].filter(|&t| st.takes_copies(t)).map_or(0, |t| st.room_in(t))
    }

    /// Claims a free segment for the victim about to be cleaned: whether
    /// one is claimed now.
    pub(crate) fn claim(&mut self, st: &impl TargetSegments) -> bool {
        if self.claimed.is_none() {
            self.claimed = st.take_free();
        }
        self.claimed.is_some()
    }

    /// Gives back the segment claimed for a victim, once it is cleared.
    pub(crate) fn unclaim(&mut self, st: &impl TargetSegments) {
        if let Some(c) = self.claimed.take() {
            st.give_back_unused(c);
        }
    }

    /// The copy target for queue `q` where `aligned` bytes fit best: its
    /// target, or for the main queue also a spare (the fullest that has
    /// the room).
    pub(crate) fn target_for(&self, st: &impl TargetSegments, q: Queue, aligned: usize) -> Option<u32> {
        let spares = if q == Queue::Main { self.spares } else { [None; SPARE_TARGETS] };
        std::iter::once(self.targets[q as usize])
            .chain(spares)
            .flatten()
            .filter(|&t| st.takes_copies(t) && aligned <= st.room_in(t))
            .min_by_key(|&t| st.room_in(t))
    }

    /// Seals the target for `q` (if any) and takes a fresh one, the
    /// claimed segment first, else from the free list (the reserve if need
    /// be); false if no segment is free.
    pub(crate) fn new_target(&mut self, st: &impl TargetSegments, q: Queue) -> bool {
        if let Some(t) = self.targets[q as usize].take() {
            self.set_aside(st, q, t);
        }
        let Some(t) = self.claimed.take().or_else(|| st.take_free()) else { return false };
        st.open_target(t);
        self.targets[q as usize] = Some(t);
        true
    }

    /// A copy target for `q` that an item did not fit. A main one with
    /// room for more than a few items stays open as a spare
    /// ([`SPARE_TARGETS`]): eviction copies read items of any size up to
    /// `-I`, and sealing the target at the first that did not fit left
    /// tails a quarter of a segment long. Past the spares the fullest of
    /// them and `t` is sealed, and so is a spare nearly full by now or one
    /// that takes nothing more (flushed, in a snapshot's cut). Small-queue
    /// targets take what the cleaner moves within that queue, and their
    /// tails were small (0.6 MB of workload 14's 12.8): sealed as before.
    fn set_aside(&mut self, st: &impl TargetSegments, q: Queue, t: u32) {
        let worth = |s: u32| st.takes_copies(s) && st.room_in(s) >= st.segment_bytes() / KEEP_OPEN_DIV;
        if q == Queue::Small || !worth(t) {
            st.seal_onto(t, q);
            return;
        }
        for slot in &mut self.spares {
            if let Some(s) = slot.filter(|&s| !worth(s)) {
                *slot = None;
                st.seal_onto(s, q);
            }
        }
        // `keep` ends as the fullest of `t` and the spares, unless a slot
        // was free.
        let mut keep = t;
        for slot in &mut self.spares {
            match slot {
                None => {
                    *slot = Some(keep);
                    return;
                }
                Some(s) if st.room_in(*s) < st.room_in(keep) => std::mem::swap(s, &mut keep),
                Some(_) => {}
            }
        }
        st.seal_onto(keep, q);
    }

    /// Seals the targets and spares for which `pick` holds onto their
    /// queues (`Active::seal_where`).
    pub(crate) fn seal_where(&mut self, st: &impl TargetSegments, pick: impl Fn(u32) -> bool) {
        for t in self.spares.iter_mut().filter(|s| s.is_some_and(&pick)).filter_map(Option::take) {
            st.seal_onto(t, Queue::Main);
        }
        for (i, q) in [(0, Queue::Small), (1, Queue::Main)] {
            if let Some(t) = self.targets[i].filter(|&t| pick(t)) {
                self.targets[i] = None;
                st.seal_onto(t, q);
            }
        }
    }

    /// The segments held as targets and spares (for tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> impl Iterator<Item = u32> + '_ {
        self.targets.iter().chain(&self.spares).flatten().copied()
    }

    /// The spare main targets held (for tests).
    #[cfg(test)]
    pub(crate) fn spares(&self) -> impl Iterator<Item = u32> + '_ {
        self.spares.iter().flatten().copied()
    }

    /// The segment claimed for a victim (for tests).
    #[cfg(test)]
    pub(crate) fn claimed(&self) -> Option<u32> {
        self.claimed
    }

    /// A write of `len` bytes earns a fifth of them ([`COPY_CREDIT_DIV`]);
    /// the bound applies once per segment taken ([`Copies::bound_credit`]).
    pub(crate) fn earn(&mut self, len: usize) {
        self.credit += len / COPY_CREDIT_DIV;
    }

    /// Keeps the banked credit to at most `cap` bytes.
    pub(crate) fn bound_credit(&mut self, cap: usize) {
        self.credit = self.credit.min(cap);
    }

    /// Hands over all of the credit (to the reclaimer, which evicts for
    /// this writer).
    pub(crate) fn take_credit(&mut self) -> usize {
        std::mem::take(&mut self.credit)
    }

    /// Banks `credit` more, up to `cap`.
    pub(crate) fn bank_credit(&mut self, credit: usize, cap: usize) {
        self.credit = (self.credit + credit).min(cap);
    }

    /// Whether the credit pays for copying `aligned` bytes forward.
    pub(crate) fn can_pay(&self, aligned: usize) -> bool {
        self.credit >= aligned
    }

    /// Pays for copying `aligned` bytes forward.
    pub(crate) fn pay(&mut self, aligned: usize) {
        self.credit = self.credit.saturating_sub(aligned);
    }

    /// The read items met in victims, by density: what eviction keeps.
    pub(crate) fn density(&mut self) -> &mut Density {
        &mut self.density
    }
}

#[cfg(test)]
mod tests {
    //! The placement of copies, alone: its narrow view of the segments is
    //! small enough to be played by a table of rooms here.
    use std::cell::RefCell;

    use super::*;

    const SEG: usize = 1000;

    /// Segments as rooms, a free list, and what was sealed onto which queue.
    struct Table {
        room: RefCell<Vec<usize>>,
        free: RefCell<Vec<u32>>,
        sealed: RefCell<Vec<(u32, Queue)>>,
        frozen: Vec<u32>,
    }

    impl Table {
        fn new(free: &[u32]) -> Table {
            Table {
                room: RefCell::new(vec![SEG; 16]),
                free: RefCell::new(free.iter().rev().copied().collect()),
                sealed: RefCell::default(),
                frozen: vec![],
            }
        }

        fn fill(&self, t: u32, bytes: usize) {
            self.room.borrow_mut()[t as usize] -= bytes;
        }
    }

    impl TargetSegments for Table {
        fn segment_bytes(&self) -> usize {
            SEG
        }
        fn room_in(&self, t: u32) -> usize {
            self.room.borrow()[t as usize]
        }
        fn takes_copies(&self, t: u32) -> bool {
            !self.frozen.contains(&t)
        }
        fn seal_onto(&self, t: u32, q: Queue) {
            self.sealed.borrow_mut().push((t, q));
        }
        fn take_free(&self) -> Option<u32> {
            self.free.borrow_mut().pop()
        }
        fn open_target(&self, t: u32) {
            self.room.borrow_mut()[t as usize] = SEG;
        }
        fn give_back_unused(&self, t: u32) {
            self.free.borrow_mut().push(t);
        }
    }

    #[test]
    fn a_main_target_an_item_did_not_fit_is_kept_as_a_spare_and_copies_go_where_they_fit_best() {
        let st = Table::new(&[1, 2, 3, 4, 5, 6]);
        let mut c = Copies::default();
        assert_eq!(c.target_for(&st, Queue::Main, 10), None, "no target yet");
        assert!(c.new_target(&st, Queue::Main));
        st.fill(1, 700);
        // 300 bytes of room left: more than an eighth, kept as a spare.
        assert!(c.new_target(&st, Queue::Main));
        assert_eq!(c.spares().collect::<Vec<_>>(), [1]);
        assert_eq!(c.target_for(&st, Queue::Main, 200), Some(1), "the fullest that fits");
        assert_eq!(c.target_for(&st, Queue::Main, 400), Some(2));
        assert_eq!(c.target_for(&st, Queue::Small, 10), None, "spares are the main queue's");
        // Two spares at most: the fullest of the three is sealed.
        st.fill(2, 600);
        assert!(c.new_target(&st, Queue::Main));
        st.fill(3, 500);
        assert!(c.new_target(&st, Queue::Main));
        assert_eq!(*st.sealed.borrow(), [(1, Queue::Main)]);
        assert_eq!(c.spares().collect::<Vec<_>>(), [3, 2]);
        // A spare nearly full by now is sealed at the next set-aside.
        st.fill(2, 350);
        assert!(c.new_target(&st, Queue::Main));
        assert_eq!(*st.sealed.borrow(), [(1, Queue::Main), (2, Queue::Main)]);
        assert_eq!(c.spares().collect::<Vec<_>>(), [4, 3]);
        // A small-queue target is sealed when replaced, never kept.
        assert!(c.new_target(&st, Queue::Small));
        assert!(!c.new_target(&st, Queue::Small), "nothing free");
        assert_eq!(st.sealed.borrow().last(), Some(&(6, Queue::Small)));
        let mut held: Vec<u32> = c.held().collect();
        held.sort_unstable();
        assert_eq!(held, [3, 4, 5], "the main target and its spares");
    }

    #[test]
    fn a_claimed_segment_becomes_the_next_target_or_goes_back_unused() {
        let st = Table::new(&[7, 8]);
        let mut c = Copies::default();
        assert!(c.claim(&st) && c.claim(&st), "claimed once");
        assert_eq!(c.claimed(), Some(7));
        c.unclaim(&st);
        assert_eq!((c.claimed(), st.take_free()), (None, Some(7)), "given back");
        assert!(c.claim(&st));
        assert!(c.new_target(&st, Queue::Small));
        assert_eq!((c.claimed(), c.held().collect::<Vec<_>>()), (None, vec![8]), "the claimed one taken");
    }

    #[test]
    fn a_frozen_target_takes_no_copies_and_is_sealed_when_asked() {
        let mut st = Table::new(&[1, 2]);
        let mut c = Copies::default();
        assert!(c.new_target(&st, Queue::Main) && c.new_target(&st, Queue::Small));
        st.frozen.push(1);
        assert_eq!(c.room(&st, Queue::Main), 0);
        assert_eq!(c.target_for(&st, Queue::Main, 1), None);
        assert_eq!(c.room(&st, Queue::Small), SEG);
        c.seal_where(&st, |t| st.frozen.contains(&t));
        assert_eq!(*st.sealed.borrow(), [(1, Queue::Main)]);
        assert_eq!(c.held().collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn eviction_copies_a_fifth_of_what_is_written_and_banks_up_to_a_bound() {
        let mut c = Copies::default();
        c.earn(1000);
        assert!(c.can_pay(200) && !c.can_pay(201));
        c.pay(150);
        assert!(c.can_pay(50) && !c.can_pay(51));
        c.bank_credit(1000, 600);
        assert!(c.can_pay(600) && !c.can_pay(601), "banked to the bound");
        c.bound_credit(100);
        assert_eq!(c.take_credit(), 100);
        assert!(!c.can_pay(1), "all handed over");
    }
}
