//! A writer's allocation of a segment: the steps of the module doc of
//! `evict` in order, the waits, the last resort, and the spare segments
//! the reclaimer keeps free.

use super::*;

impl Store {
    /// A fresh segment for a writer (see the module doc). Every victim
    /// cleared goes back to the free list, still paged in, and the writer
    /// takes from there: so one allocation cleans every sealed segment that
    /// is at most a quarter live (up to [`STEPS_PER_ALLOC`]) before it
    /// takes memory, and a copy target that dipped into the reserve is
    /// refilled first.
    /// `len` is the item's that needs it (aligned).
    pub(crate) fn alloc_segment(&self, active: &mut Active, len: usize) -> Result<u32, StoreError> {
        // Credit banks up to a bound, applied here (once per segment) so
        // that a write only adds to it.
        active.copies.bound_credit(self.credit_cap());
        // Withdrawn before a free segment is taken, not after: else the
        // reclaimer, seeing the ask and none free in between, frees one
        // more than is wanted (it stays free, holding nothing).
        self.drop_want(active);
        if self.roster().reclaiming() {
            // The reclaimer keeps segments free ahead of the writers: take
            // one, and only reclaim here (counted) if it fell behind.
            self.give_credit(active);
            // A large write that leaves fewer free than the reclaimer keeps
            // ahead clears its next victim itself where that is cheap
            // (`Store::reclaim_cheap`); then there is nothing to wake it for.
            let cheap = crate::active::large_item(self, len)
                && self.spare_ahead() <= self.reclaim_ahead()
                && self.reclaim_cheap(active);
            // While memory is not tight, cleaning early (a mostly dead
            // segment, at most a quarter live) stays the writer's, as
            // without the reclaimer: done when a segment is needed it
            // copies least and reuses a segment still in cache. Handed to
            // the reclaimer it cost 6% more CPU per request and twice the
            // p99 on workload 1 (4 KB, 32 connections); kept by writers
            // when memory is tight, it put the p99 of workload 6 at 32
            // connections back over memcached's (1.28).
            let early = if self.spare_ahead() > self.reclaim_ahead() && self.writers_clean_early() {
                self.alloc_steps(active, Pass::Early)
            } else {
                self.pop_free(true).inspect(|&s| self.open_segment(s))
            };
            if let Some(s) = early {
                if !cheap && self.spare_ahead() < self.reclaim_ahead() {
                    self.kick_reclaimer();
                }
                return Ok(s);
            }
            if let Some(s) = self.take_reclaimed(active) {
                bump(&active.counters.reclaim_waited);
                self.open_segment(s);
                return Ok(s);
            }
            bump(&active.counters.reclaim_inline);
            // It evicts on its own time: with the credit writers handed over
            // (bounded when it next takes a segment, as a write's is).
            active.copies.bank_credit(self.reclaim_state().credit.swap(0, Relaxed), usize::MAX);
        }
        if let Some(s) = self.alloc_steps(active, Pass::Full) {
            return Ok(s);
        }
        // Every victim was copied forward whole (all its items read since
        // written: a scan that brought flash items back, say): with the
        // flash tier, one more victim goes to flash, read or not.
        if self.config().flash.is_some() && self.config().evictions {
            if let Some(s) = self.alloc_steps(active, Pass::ToFlash) {
                return Ok(s);
            }
        }
        // Only segments of a running snapshot's cut could be cleaned (with
        // -M, nothing is evicted): a write is not refused for a snapshot.
        // A segment of the cut is copied for the snapshot before it is
        // reused (`cut.rs`, the hand-off).
        if self.cut_active() {
            if let Some(s) = self.alloc_steps(active, Pass::Held) {
                return Ok(s);
            }
        }
        if self.config().evictions {
            return self.last_resort(active);
        }
        Err(StoreError::OutOfMemory)
    }

    /// With eviction allowed a write is never refused for memory (the
    /// module doc's "The last resort"): this worker seals what it writes,
    /// eviction copies nothing forward, the reserve may be taken, and the
    /// other workers are asked to seal theirs; pinned segments are waited
    /// for. Only if none of that frees a segment within [`STARVE_WAIT`]
    /// (a reader holding a pin that long, or every segment held by
    /// workers that never come back) is the write refused.
    fn last_resort(&self, active: &mut Active) -> Result<u32, StoreError> {
        bump(&active.counters.alloc_last_resort);
        active.seal_all(self);
        let pass = Pass::LastResort { held: self.cut_active() };
        let started = Instant::now();
        let mut asked = None;
        let got = loop {
            if let Some(s) = self.alloc_steps(active, pass) {
                break Some(s);
            }
            let waited = started.elapsed();
            if waited >= STARVE_WAIT {
                break None;
            }
            // Ask again now and then: a worker that sealed and wrote on
            // may have taken another segment since.
            if asked.is_none_or(|at| waited >= at + STARVE_WAIT / 16) {
                asked = Some(waited);
                active.seen.starved(self.seals().starve());
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        };
        got.ok_or(StoreError::OutOfMemory)
    }

    /// [`Store::alloc_segment`]'s steps, up to [`STEPS_PER_ALLOC`] victims.
    /// Told to wait ([`Step::Wait`]), it waits for a segment to be given
    /// back, up to [`STARVE_WAIT`] in all, then evicts after all.
    fn alloc_steps(&self, active: &mut Active, pass: Pass) -> Option<u32> {
        let mut waited: Option<Instant> = None;
        let mut victims = 0;
        while victims < STEPS_PER_ALLOC {
            let step = self.step(active, pass, waited.is_some_and(|t| t.elapsed() >= STARVE_WAIT));
            match step {
                Some(Step::Wait) => {
                    let since = *waited.get_or_insert_with(Instant::now);
                    if since.elapsed() < STARVE_WAIT {
                        bump(&active.counters.alloc_waited);
                        self.wait_for_freed(Duration::from_millis(1));
                    }
                    continue;
                }
                _ => victims += 1,
            }
            match step {
                Some(Step::Fresh(s)) => {
                    self.open_segment(s);
                    return Some(s);
                }
                Some(Step::Victim(s, how)) => {
                    if !self.free_victim(s, how, active) {
                        break;
                    }
                }
                Some(Step::Wait) | None => break,
            }
        }
        // The bound ran out with segments just freed: take one.
        let s = self.pop_free(!pass.last_resort())?;
        self.open_segment(s);
        Some(s)
    }

    /// Clears a victim taken off its queue and puts it on the free list;
    /// false (with `-M` only) if a live item had nowhere to go, and then
    /// it goes back on its queue.
    pub(crate) fn free_victim(&self, victim: u32, how: Clear, active: &mut Active) -> bool {
        let q = if let Clear::Clean(q) = how { q } else { Queue::Small };
        let freed = self.clear_segment(victim, how, active);
        active.copies.unclaim(self);
        if freed {
            // In a running snapshot's cut and not copied yet: copied now,
            // with every item that was live at the cut (`cut.rs`).
            self.hand_off(victim, q);
            self.give_back(victim);
        } else {
            self.seal(victim, q);
        }
        self.cleared(freed);
        freed
    }

    /// The copy-forward credit one worker (or the reclaimer) may bank: a
    /// quarter of the segments, at least [`COPY_CREDIT_SEGMENTS`].
    pub(crate) fn credit_cap(&self) -> usize {
        (self.segment_budget() as usize / 4).max(COPY_CREDIT_SEGMENTS) * self.arena().segment_size()
    }

    /// Free segments the reclaimer keeps ahead of the writers.
    pub(crate) fn reclaim_ahead(&self) -> usize {
        if self.ahead_on_demand() {
            RECLAIM_AHEAD.min(self.reclaim_state().wanted.load(Relaxed))
        } else {
            RECLAIM_AHEAD
        }
    }

    /// Whether the reclaimer frees segments only as writers ask for them
    /// (`Active::note_fill`): under a budget of fewer than
    /// [`AHEAD_FULL_BUDGET`] segments, where one kept free unasked is 2-6%
    /// of the memory.
    pub(crate) fn ahead_on_demand(&self) -> bool {
        self.roster().reclaiming() && self.segment_budget() < AHEAD_FULL_BUDGET
    }

    /// Whether a writer beside the reclaimer cleans early itself while
    /// memory is not tight: not under a budget of fewer than
    /// [`AHEAD_FULL_BUDGET`] segments, where cleaning stays the
    /// reclaimer's. A writer's copy targets stay open until it cleans
    /// again, each a segment holding items in part that nothing can evict:
    /// under `-m 16` (fifteen segments, values up to 1 MB) two workers'
    /// targets and open segments held 2.3-4.2 MB unwritten, and workload
    /// 15 went from 63.9% to 66.3% hits without them (medians of five;
    /// workload 11's sets at `-m 48`, p99 and CPU per set, no worse).
    pub(crate) fn writers_clean_early(&self) -> bool {
        self.segment_budget() >= AHEAD_FULL_BUDGET
    }

    /// Free segments a writer may take (beyond the cleaner's reserve).
    pub(crate) fn spare_ahead(&self) -> usize {
        self.spare().saturating_sub(RESERVE_SEGMENTS)
    }

    /// Bytes of memory new items may still take before eviction starts:
    /// the spare segments beyond those the cleaner and the reclaimer keep
    /// free (`stats slabs`' free chunks).
    pub fn room_before_eviction(&self) -> u64 {
        let room = self.spare().saturating_sub(RESERVE_SEGMENTS + self.reclaim_ahead());
        (room * self.arena().segment_size()) as u64
    }

    /// Segments that may still be taken into use: within the budget (the
    /// memory limit less the index) and on the free list.
    pub(crate) fn spare(&self) -> usize {
        let room = (self.segment_budget() as usize).saturating_sub(self.budget().in_use() as usize);
        room.min(self.budget().free_len())
    }
}
