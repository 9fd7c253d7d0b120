//! The flash tier's age pass (`ext_item_age`): idle items to flash before
//! memory is full (the module doc of `tier`, "Early, by age").

use super::*;

/// Sealed segments one `ext_item_age` pass goes through before the
/// reclaimer gets back to freeing segments (it comes back for more).
const AGED_PER_PASS: usize = 4;

/// The read count the age pass leaves on a read item it keeps: still
/// "read" (`mg`'s `h`, `evicted_unfetched`), and below any count a read
/// since gives (reads add 2).
const READ_BEFORE_PASS: u8 = 2;

impl Store {
    /// `ext_item_age` (see the module doc, "Early, by age"): sends the
    /// items of up to [`AGED_PER_PASS`] sealed segments whose newest item
    /// was written at least `ext_item_age` seconds ago to flash, but for
    /// those read since written (or since the segment's last pass), too
    /// small for flash, compressed or expired. Run by the background reclaimer, into its own batch. True
    /// if there may be more such segments.
    pub(crate) fn age_to_flash(&self, active: &mut Active) -> bool {
        // Not while a snapshot is taken: it gains nothing from waiting a
        // second, and a snapshot's segment and flash images are simplest
        // to reason about with nothing moving between them but eviction.
        if self.config().flash.is_none() || self.cut_active() {
            return false;
        }
        let age = self.flash_item_age();
        let now = self.clock().now();
        let Some(cutoff) = now.checked_sub(age).filter(|_| age != crate::types::NO_ITEM_AGE) else { return false };
        for pass in 0..AGED_PER_PASS {
            let Some((seg, revisit)) = self.pick_aged(cutoff, now) else {
                if pass == 0 {
                    self.seal_idle_open(cutoff, active);
                }
                return false;
            };
            if !self.age_segment(seg, now, revisit, active) {
                // Done with it, unless it was cleared and opened again
                // meanwhile (its mark is then 0 again, not this pass's):
                // a mark stored blindly here once could land on the
                // segment's next contents, which would never go.
                let _ = self.seg(seg).aged_at.compare_exchange(now.max(1), AGED_DONE, Relaxed, Relaxed);
            }
        }
        true
    }

    /// No sealed segment is old enough: the open ones that are (a worker,
    /// or the reclaimer, went quiet half-way through them) are sealed, for
    /// the next pass (`seal.rs`).
    fn seal_idle_open(&self, cutoff: u32, active: &mut Active) {
        active.seal_idle(self, cutoff);
        if self.idle_open(cutoff) {
            self.seals().ask_idle(cutoff);
        }
    }

    /// Whether a segment no queue holds (one some worker has open) holds
    /// items written at or before `cutoff` that the age pass has not been
    /// through: then its worker is to seal it.
    fn idle_open(&self, cutoff: u32) -> bool {
        let in_use = self.in_use();
        let ev = self.lock_evict();
        let mut queued = vec![false; in_use.len()];
        for &s in ev.small.iter().chain(ev.main.iter()) {
            queued[s as usize] = true;
        }
        drop(ev);
        (0..in_use.len()).any(|s| in_use[s] && !queued[s] && self.idle_since(s as u32, cutoff))
    }

    /// `seg` holds items and was last written at or before `cutoff`.
    pub(crate) fn idle_since(&self, seg: u32, cutoff: u32) -> bool {
        let m = self.seg(seg);
        m.live_items.load(Relaxed) > 0 && m.times.lock().latest().is_some_and(|t| t <= cutoff)
    }

    /// The first sealed segment whose items were all written at or before
    /// `cutoff` and that the age pass has not been through since then,
    /// pinned (under the eviction lock, so nobody takes it as a victim
    /// meanwhile) and marked as gone through at `now`. Returns it and
    /// whether this is a revisit.
    fn pick_aged(&self, cutoff: u32, now: u32) -> Option<(u32, bool)> {
        let ev = self.lock_evict();
        let seg = ev.small.iter().chain(ev.main.iter()).copied().find(|&s| {
            let m = self.seg(s);
            let aged_at = m.aged_at.load(Relaxed);
            aged_at != AGED_DONE
                && aged_at <= cutoff
                && m.live_items.load(Relaxed) > 0
                && !self.is_pinned(s)
                && !self.frozen(s)
                && !self.is_flushed(s)
                && m.times.lock().latest().is_some_and(|t| t <= cutoff)
        })?;
        self.pin(seg);
        let revisit = self.seg(seg).aged_at.swap(now.max(1), Relaxed) != 0;
        Some((seg, revisit))
    }

    /// Batches the idle items of `seg` (pinned by [`Store::pick_aged`]) for
    /// flash, writing each batch as it fills. The pin keeps the segment's
    /// bytes from reuse while they are read; it is let go for each write
    /// (a pin is never held across I/O) and taken again only if the
    /// segment is still sealed and the same (its epoch). True if it kept
    /// read items, to go through again.
    fn age_segment(&self, seg: u32, now: u32, revisit: bool, active: &mut Active) -> bool {
        let m = self.seg(seg);
        let epoch = m.epoch.load(Relaxed);
        let end = m.write_off.load(Acquire) as usize;
        let mut scan = 0;
        let mut kept = false;
        loop {
            let mut full = false;
            while scan < end && !full {
                // SAFETY: the segment is sealed and pinned: every byte below
                // `end` was written before it was sealed and is not reused
                // while the pin holds; only expiry fields change, which
                // `header` does not read.
                let Some(h) = (unsafe { self.arena().header(seg, scan, end) }) else {
                    scan = end;
                    break;
                };
                // SAFETY: as above; key bytes are never rewritten.
                let key = unsafe { self.arena().bytes(seg, scan + h.header_len(), usize::from(h.klen)) };
                let loc = self.index().locate(key);
                full = self.age_item((seg, scan), loc, (now, revisit), active, &mut kept);
                scan += self.aligned(h.total_len());
            }
            self.unpin(seg);
            self.flush_flash(active);
            if scan >= end {
                return kept;
            }
            let ev = self.lock_evict();
            if m.epoch.load(Relaxed) != epoch || !(ev.small.contains(&seg) || ev.main.contains(&seg)) {
                return false;
            }
            self.pin(seg);
        }
    }

    /// Adds the item at `off` of `seg` to the batch if the index still
    /// links it there and it is idle: not read since written (or since
    /// copied forward, or, on a `revisit`, since the segment's last pass),
    /// alive, and eligible for flash. True when the batch is full.
    ///
    /// A read item stays, its read count set to [`READ_BEFORE_PASS`]
    /// (`kept`): a read since adds to it, so the next pass, an
    /// `ext_item_age` later, sends it only if nobody read it meanwhile.
    /// memcached sends an item once its last access is `ext_item_age`
    /// old; strata keeps no access time per item, and this is the CLOCK
    /// hand for it. A read count of 2 is also one read of a new item, so
    /// it means "read before the last pass" only on a revisit: an item the
    /// cleaner moved to a segment not yet gone through stays one period
    /// more. Before, a read item stayed in memory for good: an item
    /// read right after it was set (memcached's `t/binary-extstore.t` does)
    /// never went.
    fn age_item(
        &self,
        (seg, off): (u32, usize),
        loc: Loc,
        (now, revisit): (u32, bool),
        active: &mut Active,
        kept: &mut bool,
    ) -> bool {
        let granule_off = self.granules(off);
        let mut st = self.index().lock(loc.stripe);
        let Some((pos, s)) =
            st.find(loc.bucket, |s| !slot::is_flash(s) && slot::seg(s) == seg && slot::off(s) == granule_off)
        else {
            return false;
        };
        let Some(it) = self.item_at(s) else { return false };
        if Clock::is_expired(it.expiry(), now) || !self.flash_eligible(&it) {
            return false;
        }
        if slot::freq(s) > READ_BEFORE_PASS || (!revisit && slot::was_read(s)) {
            st.set(pos, slot::with_freq(s, READ_BEFORE_PASS));
            *kept = true;
            return false;
        }
        self.batch_for_flash(active, s, &it, loc, true)
    }
}
