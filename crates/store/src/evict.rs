//! Memory reclaim: which sealed segment gives up its memory when a writer
//! needs a segment, and what happens to the live items in it — the cleaner
//! (which copies live items forward and evicts nothing) and eviction (which
//! drops items, in S3-FIFO's order).
//!
//! A writer that needs a segment, in this order:
//!
//! 1. **Cleans early.** If a sealed segment is at most a quarter live, its
//!    live items are copied forward and it is reused: under overwrites memory
//!    then follows the live data instead of climbing to `-m`, and writers stop
//!    paying a page fault per 4 KiB of fresh memory.
//! 2. **Takes fresh memory** from the free list (keeping one segment in
//!    reserve as the cleaner's working space).
//! 3. **Reuses a dead segment**: no live items, every item expired, or opened
//!    before the last `flush_all`.
//! 4. **Cleans** while the sealed segments hold at least one segment's worth
//!    of dead bytes (overwritten or deleted items) and the best victim is at
//!    most [`CLEAN_MAX_LIVE_PERCENT`] live: a live item is not evicted while
//!    cleaning could make room for it at a bounded copying cost.
//! 5. **Evicts**, only when live data fills memory (no segment is cheap
//!    enough to clean; one that is, but has nowhere to copy to while
//!    another thread clears a victim, makes a writer wait for that victim
//!    first, [`Step::Wait`]): the oldest segment
//!    of S3-FIFO's small queue (new writes) or main queue (items copied
//!    forward); items read since written are copied forward, the rest go.
//!    With `-M` there is no eviction: the write fails with out-of-memory.
//! 6. **The last resort**, when none of that gave a segment (every victim
//!    was copied forward whole, the cleaner's reserve or the workers'
//!    half-filled segments hold what is left): the writer seals its own
//!    active segments and copy targets, evicts without copying anything
//!    forward, may take the reserve and a snapshot's held segments, and
//!    asks the other workers to seal theirs (they do before their next
//!    write, or between requests when woken: [`Store::on_starved`]),
//!    waiting for them and for readers' pins up to [`STARVE_WAIT`]. So
//!    with eviction allowed a write that fits `-I` is never refused for
//!    memory: `-I` is at most half of `-m`, so at least two segments exist
//!    and at most one is pinned by any one reader. Counted in
//!    `strata_alloc_last_resort`.
//!
//! **What eviction copies**: an item read since written is copied forward
//! when its segment is evicted (CLOCK's second chance), paid from its
//! worker's credit: a fifth of the bytes the worker writes, a quarter of
//! the segments at most banked. Past the credit read items are evicted
//! too. An item the sketch (`sketch.rs`) counts at least
//! [`ADMIT_ESTIMATE`] reads lately is copied as a read one, though not
//! read in this stay; and where the read items are more than a budget (a
//! share of the victims' bytes, tuned to the hit ratio: `climb.rs`), those
//! with the most reads per byte are kept (`density.rs`).
//!
//! Without the credit's bound a write-once fill whose items were each read
//! once copied every item forward (write amplification 1.5–1.9, and victims
//! whose items were all read freed nothing); with it eviction's copying
//! stays at or under 1.2 bytes written per byte stored.
//!
//! **Which segment to clean**: the best by cost and benefit, over every
//! sealed segment: the space a clean frees (its dead bytes) against what it
//! costs (walking the segment, copying its live bytes), `(1 - u) / (1 + u)`
//! for a segment `u` live, the older segment first among equals — LFS's rule
//! (Rosenblum and Ousterhout, 1992) with age as the tie-breaker, since a
//! cache's cold data is what eviction will want anyway. Segments young
//! enough to be still dying fast (hot keys overwritten) are mostly dead by
//! the time they are picked; old segments of live cold items never are.
//!
//! **Where copied items go**: into the worker's own copy targets, one per
//! queue, so cleaning keeps an item in the queue it was in (an unread item
//! cleaned out of the small queue is still "unread, goes first" if it must
//! go later) and eviction's copy-forward fills the main queue. A full target
//! is sealed onto its queue.
//!
//! **Cost and contention**: the eviction mutex is held only to choose and
//! take a victim off its queue (a scan of segment metadata, no item
//! touched); the victim is then cleared by the worker that took it, with no
//! global lock, item by item under bucket locks, into targets no other
//! worker writes. Work per allocation is bounded by [`STEPS_PER_ALLOC`]
//! victims. Lock order: eviction mutex and free list are never held while a
//! bucket lock is taken, and a bucket lock is released before either is.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::image::Queue;
use crate::index::{slot, Loc};
use crate::item::{encoded_len, state, write_head, Fields};
use crate::segments::{Active, COPY_CREDIT_SEGMENTS, NEVER};

/// The sketch's estimate from which an item not read in its stay is copied
/// forward as a read one. Under cache-aside a key's miss and set already
/// count one read: at 2, one more read made a key a candidate, and on
/// workload 5 (600,000 keys, 10x what fits) the copies of such keys spent
/// the credit that kept the read ones (77.5% hits against 81.2%); at 3,
/// 81.5%, and workload 10 gained nearly as much as at 2 (80.3% hits,
/// 80.7% at 2, 77.0% with neither).
const ADMIT_ESTIMATE: u8 = 3;
use crate::store::{add, bump, Counters, Store};
use crate::types::StoreError;

/// The share of sealed segments the queue of new writes may hold before
/// eviction turns to it (S3-FIFO's small queue; its paper's 10% was also the
/// best of 5, 10 and 20% on workload 5).
const SMALL_QUEUE_PERCENT: usize = 10;

/// A sealed segment at most this fraction live is cleaned before a writer
/// gets fresh memory (step 1): segments in use stay under about twice the
/// live data, and copying costs at most a third of a byte per byte won back.
const CLEAN_EARLY_DIV: usize = 4;

/// With eviction allowed, a segment more live than this (percent, by the
/// room its live items take when copied) is not cleaned at step 4: copying
/// it would cost more than 5.7 bytes per byte won back, and once live data
/// exceeds memory every segment holds a little dead space from overwrites,
/// so cleaning without this bound copied 7.5 bytes per byte stored on
/// workload 6 (-m 64, 2x the keys that fit) and held writers for
/// milliseconds. Evicting instead frees the oldest segment's dead bytes
/// along with its unread items. Measured on workload 6 (2x and 10x):
/// write amplification 7.5 → 3.3 and 5.2 → 2.5, server CPU per request
/// −30%, p99.9 12.7 → 4.8 ms, hit ratio within 0.2 points; bar 1's churn
/// (live data at 70% and 85% of memory) still keeps every key
/// (`docs/benchmarks.md`). With `-M` any segment is cleaned.
const CLEAN_MAX_LIVE_PERCENT: usize = 85;

/// Victims one allocation may clear before it gives up. A clean that fills
/// a copy target frees nothing net for the writer (its victim refills the
/// reserve instead), so an allocation may take a few; the bound keeps a
/// store whose dead bytes are spread thin from copying without end, at the
/// cost of an eviction there (`docs/design.md`).
const STEPS_PER_ALLOC: usize = 16;

/// How long a writer in the last resort waits for a segment (for pins to
/// drop and other workers to seal theirs) before it refuses the write.
const STARVE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Segments writers leave free for the cleaner's copy targets: one, the
/// working space a clean needs when a target fills mid-way (the victim it
/// frees refills it). Two workers needing it at once is rare but for a
/// snapshot's cut (every target is in it); the one that misses out waits
/// for the other to give a segment back ([`Step::Wait`]), and only past
/// [`STARVE_WAIT`] evicts, or with `-M` fails its write.
pub(crate) const RESERVE_SEGMENTS: usize = 1;

/// Free segments the background reclaimer keeps ahead of the writers
/// (`reclaim.rs`): one per worker of two, so that both may take one at
/// once without reclaiming on a request's time. Under a budget of fewer
/// than [`AHEAD_FULL_BUDGET`] segments, one: each segment kept free is
/// memory holding no item, 3% of `-m 64` but 13% of `-m 16`.
const RECLAIM_AHEAD: usize = 2;

/// The segment budget from which the reclaimer keeps [`RECLAIM_AHEAD`].
const AHEAD_FULL_BUDGET: u32 = 48;

/// Of those, how many it frees by eviction (the rest only by cleaning).
pub(crate) const EVICT_AHEAD: usize = 1;

/// Eviction order, after S3-FIFO (Yang et al., SOSP 2023) at segment
/// granularity: new writes are sealed into `small`, and an item there that
/// was not read by the time its segment is evicted goes at once, so the
/// one-hit keys a cache-aside miss stream writes cannot push out items that
/// are read. Items read since written are copied forward into a target,
/// which is sealed into `main`, a FIFO with reinsertion (CLOCK). Raised the
/// hit ratio on workload 5 from 76.4% to 81.0% (memcached: 76.5%;
/// `docs/benchmarks.md`).
#[derive(Debug, Default)]
pub(crate) struct Evict {
    /// Sealed segments of new writes, oldest first.
    pub(crate) small: VecDeque<u32>,
    /// Sealed segments of items copied forward, oldest first.
    pub(crate) main: VecDeque<u32>,
}

impl Evict {
    fn queue(&mut self, q: Queue) -> &mut VecDeque<u32> {
        match q {
            Queue::Small => &mut self.small,
            Queue::Main => &mut self.main,
        }
    }
}

/// What clearing a victim does with its live items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clear {
    /// Cleaning: every live item is copied forward, into the target of the
    /// queue the victim came from.
    Clean(Queue),
    /// Eviction: items read since written are copied into the main target,
    /// the rest are unlinked. (A dead segment is cleared this way too: it
    /// has nothing to copy.)
    Evict,
}

/// What one allocation step decided, under the eviction mutex.
pub(crate) enum Step {
    /// A segment from the free list.
    Fresh(u32),
    /// A victim, off its queue and owned by this worker, to clear.
    Victim(u32, Clear),
    /// Only eviction is left, though a clean is worth doing: what it
    /// lacks is a segment to copy into, and another thread is clearing a
    /// victim it will give back. Wait for that rather than evict.
    Wait,
}

/// The best segment to clean and the dead bytes of all sealed segments.
struct Survey {
    best: Option<(u32, Queue)>,
    /// Room the best one's live items take when copied.
    best_need: usize,
    dead: usize,
}

/// How a victim was cleared.
#[derive(Default)]
struct Cleared {
    bytes_copied: u64,
    evicted: bool,
    /// With `-M`, a live item could not be moved (no segment for a copy
    /// target): the victim still holds live items and cannot be reused.
    stuck: bool,
}

impl Store {
    /// Whether copy target `t` may take more items: not if it predates the
    /// last `flush_all`, nor while it is in a running snapshot's cut.
    fn open_for_copies(&self, t: u32) -> bool {
        !self.is_flushed(t) && !self.frozen(t)
    }

    /// Seals a worker's full segment onto a queue.
    pub(crate) fn seal(&self, seg: u32, q: Queue) {
        self.lock_evict().queue(q).push_back(seg);
    }

    /// Dead bytes in sealed segment `s`: written but no longer linked (all
    /// of it if it expired whole or predates a flush).
    fn dead_bytes_of(&self, s: u32, now: u32) -> usize {
        let m = self.seg(s);
        let written = m.write_off.load(Relaxed) as usize;
        if self.all_expired(s, now) {
            return written;
        }
        written.saturating_sub(m.live_bytes.load(Relaxed) as usize)
    }

    /// Looks at every sealed segment: which is best to clean, and how many
    /// dead bytes they hold. Pinned segments are skipped. With `tails` (at
    /// a load) the empty tail of a segment sealed part-filled counts as
    /// dead: a load keeps every live item that fits, and a snapshot of
    /// segments sealed early (each snapshot seals every worker's) may hold
    /// more of them than the limit, though their items fit in a few.
    fn survey(&self, ev: &Evict, take_held: bool, tails: bool) -> Survey {
        let now = self.clock().now();
        let seg_size = self.arena().segment_size();
        let mut survey = Survey { best: None, best_need: 0, dead: 0 };
        // Cost-benefit (1 - u) / (1 + u) falls as u rises, so the best is the
        // least live; what copying takes is compared in 1/64ths of a segment
        // so that among near equals the older (lower epoch) wins.
        let mut best_key = (usize::MAX, u64::MAX);
        for (q, queue) in [(Queue::Small, &ev.small), (Queue::Main, &ev.main)] {
            for &s in queue {
                let mut dead = self.dead_bytes_of(s, now);
                if tails {
                    dead += seg_size.saturating_sub(self.seg(s).write_off.load(Relaxed) as usize);
                }
                survey.dead += dead;
                if self.is_pinned(s) || (self.frozen(s) && !take_held) {
                    continue;
                }
                // A segment sealed part-filled (a snapshot or a starved
                // writer had it sealed) with nothing dead in it wins back
                // only its empty tail: copying its items for that would be
                // write amplification on a write-once workload (1.25 at
                // `-m 3`), and eviction takes it in its turn. With `-M`
                // the tail is worth having back.
                if dead == 0 && self.config().evictions {
                    continue;
                }
                let need = self.copy_need(s, now);
                let key = (need * 64 / seg_size, self.seg(s).epoch.load(Relaxed));
                if key < best_key {
                    best_key = key;
                    survey.best = Some((s, q));
                    survey.best_need = need;
                }
            }
        }
        survey
    }

    /// Room that copying `s`'s live items forward takes (each may gain an
    /// explicit CAS, a state byte and a granule of alignment); 0 if nothing
    /// in it is alive.
    fn copy_need(&self, s: u32, now: u32) -> usize {
        if self.all_expired(s, now) {
            return 0;
        }
        let m = self.seg(s);
        m.live_bytes.load(Relaxed) as usize + m.live_items.load(Relaxed) as usize * (9 + self.granule())
    }

    /// Step 4's test: a segment's worth of dead bytes in the sealed
    /// segments, and (when eviction is allowed) a best victim no more than
    /// [`CLEAN_MAX_LIVE_PERCENT`] live.
    fn worth_cleaning(&self, survey: &Survey) -> bool {
        let seg_size = self.arena().segment_size();
        survey.dead >= seg_size
            && (!self.config().evictions || survey.best_need * 100 <= seg_size * CLEAN_MAX_LIVE_PERCENT)
    }

    /// Takes `seg` off whichever queue holds it.
    fn take(ev: &mut Evict, seg: u32) -> bool {
        for q in [&mut ev.small, &mut ev.main] {
            if let Some(i) = q.iter().position(|&s| s == seg) {
                q.remove(i);
                return true;
            }
        }
        false
    }

    /// Takes this allocation step (see the module doc for the order),
    /// decided under the eviction mutex; with `evict_now`, a wait is an
    /// eviction instead. A victim returned is counted as being cleared
    /// until [`Store::free_victim`] is done with it, and one to clean comes
    /// with room for its live items in the worker's copy target, claimed
    /// now: if the segment that would give it is gone (another thread took
    /// it since), the victim goes back and the step is a wait. A clean
    /// that ran out of room half-way evicted the rest of its victim.
    pub(crate) fn step(&self, active: &mut Active, evict_now: bool) -> Option<Step> {
        let step = self.locked_step(|ev| match self.decide(ev, active) {
            Some(Step::Wait) if evict_now => self.evict_step(ev, active),
            step => step,
        });
        match step {
            Some(Step::Victim(s, Clear::Clean(q))) if !self.room_to_clean(s, q, active) => {
                self.put_back(s, q);
                self.cleared(false);
                if evict_now {
                    self.locked_step(|ev| self.evict_step(ev, active))
                } else {
                    Some(Step::Wait)
                }
            }
            step => step,
        }
    }

    /// `f`'s step under the eviction mutex, a victim counted as clearing.
    fn locked_step(&self, f: impl FnOnce(&mut Evict) -> Option<Step>) -> Option<Step> {
        let step = f(&mut self.lock_evict());
        if let Some(Step::Victim(..)) = step {
            self.reclaim_state().clearing.fetch_add(1, Relaxed);
        }
        step
    }

    /// Whether `active`'s copy target for `q` has room for `victim`'s live
    /// items, or a free segment is claimed for the rest (the victim's live
    /// items fit in one).
    fn room_to_clean(&self, victim: u32, q: Queue, active: &mut Active) -> bool {
        let need = self.copy_need(victim, self.clock().now());
        let room = active.targets[q as usize].filter(|&t| self.open_for_copies(t)).map_or(0, |t| self.room(t));
        if need <= room || active.claimed.is_some() {
            return true;
        }
        active.claimed = self.pop_free(false);
        active.claimed.is_some()
    }

    /// Puts a victim not cleared back on queue `q`, where its epoch puts it.
    fn put_back(&self, victim: u32, q: Queue) {
        let epoch = |s: u32| self.seg(s).epoch.load(Relaxed);
        let mut ev = self.lock_evict();
        let queue = ev.queue(q);
        let at = queue.iter().position(|&s| epoch(s) > epoch(victim)).unwrap_or(queue.len());
        queue.insert(at, victim);
    }

    fn decide(&self, ev: &mut Evict, active: &Active) -> Option<Step> {
        let seg_size = self.arena().segment_size();
        let survey = self.survey(ev, active.take_held, active.restoring);
        // Worth cleaning only if it frees something, and only if its items
        // have somewhere to go: the worker's target, or one more from the
        // free list (a victim's items fit in one segment).
        // The last resort cleans nothing: it makes room by evicting.
        let best = survey.best.filter(|_| !active.last_resort).filter(|&(_, q)| {
            let room = active.targets[q as usize].filter(|&t| self.open_for_copies(t)).map_or(0, |t| self.room(t));
            survey.best_need < seg_size && (survey.best_need <= room || self.spare() > 0)
        });
        // 1. A mostly dead segment before fresh memory.
        if let Some((s, q)) = best.filter(|_| survey.best_need <= seg_size / CLEAN_EARLY_DIV) {
            Self::take(ev, s);
            return Some(Step::Victim(s, Clear::Clean(q)));
        }
        // 2. Fresh memory (the reclaimer makes free segments, it takes none;
        // it goes on only while fewer than it keeps ahead are free).
        if active.background {
            if self.spare_ahead() >= self.reclaim_ahead() {
                return None;
            }
        } else if let Some(s) = self.pop_free(!active.last_resort) {
            return Some(Step::Fresh(s));
        } else if active.early_only {
            return None;
        }
        // 3. A dead segment.
        let now = self.clock().now();
        let dead =
            |s: &u32| (self.seg(*s).live_items.load(Relaxed) == 0 || self.all_expired(*s, now)) && !self.is_pinned(*s);
        for q in [&mut ev.small, &mut ev.main] {
            if let Some(i) = q.iter().position(dead) {
                return q.remove(i).map(|s| Step::Victim(s, Clear::Evict));
            }
        }
        // 4. Clean while there is a segment's worth of dead bytes (at a
        // load, however live the best segment is: nothing live that fits
        // is evicted then).
        let worth = self.worth_cleaning(&survey) || (active.restoring && survey.dead >= seg_size);
        if let Some((s, q)) = best.filter(|_| worth) {
            Self::take(ev, s);
            return Some(Step::Victim(s, Clear::Clean(q)));
        }
        // While a snapshot's cut holds, the segments it has not copied yet
        // are left to it, unless cleaning one keeps a live item from being
        // evicted: it is handed off first (`cut.rs`), which costs a copy,
        // and the segments of the cut hold the dead versions of the keys
        // overwritten since.
        let cut = self.cut_active() && !active.take_held && !active.last_resort;
        let all = if cut { self.survey(ev, true, active.restoring) } else { survey };
        if cut {
            let room =
                |q: Queue| active.targets[q as usize].filter(|&t| self.open_for_copies(t)).map_or(0, |t| self.room(t));
            let fits =
                |&(_, q): &(u32, Queue)| all.best_need < seg_size && (all.best_need <= room(q) || self.spare() > 0);
            if let Some((s, q)) = all.best.filter(fits).filter(|_| self.worth_cleaning(&all)) {
                Self::take(ev, s);
                return Some(Step::Victim(s, Clear::Clean(q)));
            }
        }
        // A clean worth doing lacks only a segment to copy into (the
        // reserve is some other thread's copy target: at a snapshot's cut
        // every cleaner needs a new one at once, and one handing a segment
        // of the cut off may wait for the snapshot). A writer waits for
        // the segment that thread gives back rather than evict live items
        // (`alloc_steps`); the reclaimer just ends its round.
        let clearing = self.reclaim_state().clearing.load(Relaxed) > 0;
        if clearing
            && !active.last_resort
            && all.best.is_some()
            && all.best_need < seg_size
            && self.worth_cleaning(&all)
        {
            return Some(Step::Wait);
        }
        self.evict_step(ev, active)
    }

    /// Step 5 of [`Store::step`]: a victim to evict, if eviction is allowed.
    fn evict_step(&self, ev: &mut Evict, active: &Active) -> Option<Step> {
        // The reclaimer evicts ahead for one segment only: each segment
        // kept free ahead is one less holding items, and the cleaner
        // (which loses nothing) may keep more free.
        if !self.config().evictions || (active.background && self.spare_ahead() >= EVICT_AHEAD) {
            return None;
        }
        let sealed = ev.small.len() + ev.main.len();
        let small_first = ev.small.len() * 100 > sealed * SMALL_QUEUE_PERCENT || ev.main.is_empty();
        let (first, second) = if small_first { (&mut ev.small, &mut ev.main) } else { (&mut ev.main, &mut ev.small) };
        for q in [first, second] {
            if let Some(i) = q.iter().position(|&s| !self.is_pinned(s)) {
                return q.remove(i).map(|s| Step::Victim(s, Clear::Evict));
            }
        }
        None
    }

    /// A fresh segment for a writer (see the module doc). Every victim
    /// cleared goes back to the free list, still paged in, and the writer
    /// takes from there: so one allocation cleans every sealed segment that
    /// is at most a quarter live (up to [`STEPS_PER_ALLOC`]) before it
    /// takes memory, and a copy target that dipped into the reserve is
    /// refilled first.
    pub(crate) fn alloc_segment(&self, active: &mut Active) -> Result<u32, StoreError> {
        // Credit banks up to a bound, applied here (once per segment) so
        // that a write only adds to it.
        active.copy_credit = active.copy_credit.min(self.credit_cap());
        if self.reclaiming() {
            // The reclaimer keeps segments free ahead of the writers: take
            // one, and only reclaim here (counted) if it fell behind.
            self.give_credit(active);
            // While memory is not tight, cleaning early (a mostly dead
            // segment, at most a quarter live) stays the writer's, as
            // without the reclaimer: done when a segment is needed it
            // copies least and reuses a segment still in cache. Handed to
            // the reclaimer it cost 6% more CPU per request and twice the
            // p99 on workload 1 (4 KB, 32 connections); kept by writers
            // when memory is tight, it put the p99 of workload 6 at 32
            // connections back over memcached's (1.28).
            let early = if self.spare_ahead() > self.reclaim_ahead() {
                active.early_only = true;
                let s = self.alloc_steps(active);
                active.early_only = false;
                s
            } else {
                self.pop_free(true).inspect(|&s| self.open_segment(s))
            };
            if let Some(s) = early {
                if self.spare_ahead() < self.reclaim_ahead() {
                    self.kick_reclaimer();
                }
                return Ok(s);
            }
            if let Some(s) = self.take_reclaimed() {
                bump(&active.counters.reclaim_waited);
                self.open_segment(s);
                return Ok(s);
            }
            bump(&active.counters.reclaim_inline);
            // It evicts on its own time: with the credit writers handed over.
            active.copy_credit += self.reclaim_state().credit.swap(0, Relaxed);
        }
        if let Some(s) = self.alloc_steps(active) {
            return Ok(s);
        }
        // Every victim was copied forward whole (all its items read since
        // written: a scan that brought flash items back, say): with the
        // flash tier, one more victim goes to flash, read or not.
        if self.config().flash.is_some() && self.config().evictions {
            active.force_out = true;
            let s = self.alloc_steps(active);
            active.force_out = false;
            if let Some(s) = s {
                return Ok(s);
            }
        }
        // Only segments of a running snapshot's cut could be cleaned (with
        // -M, nothing is evicted): a write is not refused for a snapshot.
        // A segment of the cut is copied for the snapshot before it is
        // reused (`cut.rs`, the hand-off).
        if self.cut_active() {
            active.take_held = true;
            let s = self.alloc_steps(active);
            active.take_held = false;
            if let Some(s) = s {
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
        active.last_resort = true;
        active.take_held = self.cut_active();
        let started = Instant::now();
        let mut asked = None;
        let got = loop {
            if let Some(s) = self.alloc_steps(active) {
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
                active.seen_starved(self.starve());
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        };
        active.last_resort = false;
        active.take_held = false;
        got.ok_or(StoreError::OutOfMemory)
    }

    /// [`Store::alloc_segment`]'s steps, up to [`STEPS_PER_ALLOC`] victims.
    /// Told to wait ([`Step::Wait`]), it waits for a segment to be given
    /// back, up to [`STARVE_WAIT`] in all, then evicts after all.
    fn alloc_steps(&self, active: &mut Active) -> Option<u32> {
        let mut waited: Option<Instant> = None;
        let mut victims = 0;
        while victims < STEPS_PER_ALLOC {
            let step = self.step(active, waited.is_some_and(|t| t.elapsed() >= STARVE_WAIT));
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
        let s = self.pop_free(!active.last_resort)?;
        self.open_segment(s);
        Some(s)
    }

    /// Clears a victim taken off its queue and puts it on the free list;
    /// false (with `-M` only) if a live item had nowhere to go, and then
    /// it goes back on its queue.
    pub(crate) fn free_victim(&self, victim: u32, how: Clear, active: &mut Active) -> bool {
        let q = if let Clear::Clean(q) = how { q } else { Queue::Small };
        let freed = self.clear_segment(victim, how, active);
        if let Some(c) = active.claimed.take() {
            self.unuse(c);
        }
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
        if self.segment_budget() >= AHEAD_FULL_BUDGET {
            RECLAIM_AHEAD
        } else {
            RECLAIM_AHEAD.min(EVICT_AHEAD)
        }
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

    /// Whether nothing in sealed segment `s` can be read any more: every
    /// item expired, or the segment predates the last `flush_all`.
    pub(crate) fn all_expired(&self, s: u32, now: u32) -> bool {
        let e = self.seg(s).max_expire.load(Relaxed);
        (e != NEVER && e <= now) || self.is_flushed(s)
    }

    /// Unlinks or moves every live item of `victim`, which the caller has
    /// taken off its queue and so owns, and waits until nobody copies from
    /// it: afterwards it can be reused. False (with `-M` only) if a live
    /// item could not be moved: then it cannot.
    pub(crate) fn clear_segment(&self, victim: u32, how: Clear, active: &mut Active) -> bool {
        let started = Instant::now();
        let c = active.counters.clone();
        let dead = self.dead_bytes_of(victim, self.clock().now());
        let cleared = if self.seg(victim).live_items.load(Acquire) == 0 {
            // Every item was overwritten or deleted: nothing links here.
            Cleared::default()
        } else {
            self.sweep(victim, how, active)
        };
        // Its items bound for flash are written and repointed before the
        // victim can be reused.
        self.flush_flash(active);
        add(&c.bytes_copied, cleared.bytes_copied);
        if cleared.stuck {
            return false;
        }
        if let Clear::Clean(_) = how {
            bump(&c.segments_cleaned);
            add(&c.dead_reclaimed, dead as u64);
            add(&c.cleaner_ns, started.elapsed().as_nanos() as u64);
        }
        bump(if cleared.evicted { &c.segments_evicted } else { &c.segments_reclaimed });
        // A reader that pinned the segment while one of its items was
        // linked may still be copying from it.
        self.wait_unpinned(victim);
        true
    }

    fn sweep(&self, victim: u32, how: Clear, active: &mut Active) -> Cleared {
        let end = self.seg(victim).write_off.load(Acquire) as usize;
        if how == Clear::Evict {
            let items = self.segs().iter().map(|m| u64::from(m.live_items.load(Relaxed))).sum();
            self.sketch().set_items(items);
            active.density.victim(end, self.arena().segment_size(), self.copy_divisor(items));
        }
        let now = self.clock().now();
        let mut cleared = Cleared::default();
        // Items are looked up in batches: the bucket of every item in a batch
        // is prefetched before the first is looked at, so that their cache
        // misses (one per item, live or dead) overlap.
        const BATCH: usize = 16;
        let mut batch = [(0usize, Loc::default()); BATCH];
        let mut scan = 0;
        let mut done = false;
        while !done && scan < end {
            let mut n = 0;
            while n < BATCH && scan < end {
                // SAFETY: the segment is sealed and owned by us: every byte
                // below `end` was written before it was sealed, and nothing
                // writes it now except expiry fields, which `header` does not
                // read.
                let Some(h) = (unsafe { self.arena().header(victim, scan, end) }) else {
                    done = true;
                    break;
                };
                // SAFETY: as above; the key bytes are never rewritten.
                let key = unsafe { self.arena().bytes(victim, scan + h.header_len(), usize::from(h.klen)) };
                let loc = self.index().locate(key);
                self.index().prefetch(loc);
                batch[n] = (scan, loc);
                n += 1;
                scan += self.aligned(h.total_len());
            }
            for &(off, loc) in &batch[..n] {
                self.clear_item(victim, off, loc, how, now, active, &mut cleared);
                if cleared.stuck {
                    return cleared;
                }
            }
        }
        cleared
    }

    /// Unlinks or copies forward the item at `off` of `victim`, if the index
    /// still points at it.
    #[allow(clippy::too_many_arguments)]
    fn clear_item(
        &self,
        victim: u32,
        off: usize,
        loc: Loc,
        how: Clear,
        now: u32,
        active: &mut Active,
        cleared: &mut Cleared,
    ) {
        let c = active.counters.clone();
        let granule_off = self.granules(off);
        let target_q = match how {
            Clear::Clean(q) => q,
            Clear::Evict => Queue::Main,
        };
        // At most two rounds: the second after making room in the target,
        // which takes the eviction and free-list locks, so not under the
        // bucket lock.
        for round in 0..2 {
            let mut st = self.index().lock(loc.stripe);
            let Some((pos, s)) = st.find(loc.bucket, |s| slot::seg(s) == victim && slot::off(s) == granule_off) else {
                // Overwritten or deleted since: nothing links here.
                return;
            };
            let Some(it) = self.item_at(s) else { return };
            let expired = self.is_flushed(victim) || Clock::is_expired(it.expiry(), now);
            // Cleaning moves an item within its queue, so its read count
            // moves with it (else a read item cleaned out of the small queue
            // would later be evicted as unread). Eviction's copy forward is
            // CLOCK's reinsertion: the count starts again, and the read mark
            // goes into the item's state.
            let freq = if how == Clear::Evict { 0 } else { slot::freq(s) };
            let fetched = if freq == 0 && slot::was_read(s) { state::FETCHED } else { 0 };
            let f = Fields { cas: Some(self.cas_of(s, &it)), state: it.state() | fetched, ..it.fields() };
            let len = encoded_len(it.key().len(), it.value().len(), &f);
            let evicting = how == Clear::Evict && self.config().evictions;
            // What eviction copies forward is paid from the worker's credit
            // (a fifth of what it writes): past it, read items go too.
            // Reads since written or copied, or of the key lately
            // (`sketch.rs`), whichever is more: a key asked for often, but
            // not in this stay, is kept as if read in it.
            let est = self.sketch().estimate(loc);
            let score = if est >= ADMIT_ESTIMATE { slot::freq(s).max(est) } else { slot::freq(s) };
            let keep = !expired
                && (!evicting
                    || (score >= 1
                        && !active.last_resort
                        && active.density.admits(score, self.aligned(len))
                        && active.copy_credit >= self.aligned(len)))
                && !(active.force_out && how == Clear::Evict && self.flash_eligible(&it));
            if keep {
                // A target in a snapshot's cut takes nothing more (`cut.rs`):
                // a new one is opened below.
                let room =
                    active.targets[target_q as usize].filter(|&t| self.open_for_copies(t)).map_or(0, |t| self.room(t));
                if self.aligned(len) <= room {
                    let Some(t) = active.targets[target_q as usize] else { return };
                    let new_off = self.seg(t).write_off.load(Relaxed) as usize;
                    // SAFETY: the target belongs to this worker, and this
                    // range is above its write offset, so nobody else can
                    // see it (rule 1).
                    let dst = unsafe { self.arena().bytes_mut(t, new_off, len) };
                    let v = write_head(dst, it.key(), it.value().len(), &f);
                    dst[v..].copy_from_slice(it.value());
                    if f.compressed {
                        // The victim still holds the dictionary's reference.
                        self.attach_dict(t, strata_compress::dict_id(it.value()));
                    }
                    self.seg(t).write_off.store((new_off + self.aligned(len)) as u32, Release);
                    self.note_written(t, new_off, self.written_at(s));
                    self.note_expiry(t, it.expiry());
                    let moved = slot::pack(slot::tag(s), freq, t, self.granules(new_off));
                    st.set(pos, moved);
                    self.unaccount(&mut st, s);
                    self.account(&mut st, moved);
                    bump(&c.reinserted);
                    cleared.bytes_copied += len as u64;
                    if evicting {
                        active.copy_credit = active.copy_credit.saturating_sub(self.aligned(len));
                    }
                    return;
                }
                drop(st);
                if round == 0 && self.new_target(active, target_q) {
                    continue;
                }
                // No segment for a target (or none it fits): the item
                // cannot move. With -M it stays, and so does its segment.
                if !self.config().evictions {
                    cleared.stuck = true;
                    return;
                }
                st = self.index().lock(loc.stripe);
                let Some((pos, s)) = st.find(loc.bucket, |s| slot::seg(s) == victim && slot::off(s) == granule_off)
                else {
                    return;
                };
                cleared.evicted = true;
                // With the flash tier, to flash rather than away.
                if let Some(it) = self.item_at(s).filter(|it| self.flash_eligible(it)) {
                    let full = self.batch_for_flash(active, s, &it, loc, false);
                    drop(st);
                    if full {
                        self.flush_flash(active);
                    }
                    return;
                }
                let gone = self.item_at(s).map(|it| {
                    self.tell_evicted(s, &it, now);
                    (it.state(), it.expiry(), it.header.total_len())
                });
                self.unlink(&mut st, loc.bucket, pos, s);
                self.note_evicted(&c, s, gone, now);
                return;
            }
            if !expired && how == Clear::Evict && self.flash_eligible(&it) {
                // To flash instead of away; written once the batch fills,
                // or at the end of the victim (`clear_segment`).
                let full = self.batch_for_flash(active, s, &it, loc, false);
                drop(st);
                if full {
                    self.flush_flash(active);
                }
                cleared.evicted = true;
                return;
            }
            let class_len = self.class_len_of(&it, crate::store::sizes(&it).1);
            let gone = Some((it.state(), it.expiry(), class_len));
            if !expired {
                self.tell_evicted(s, &it, now);
            }
            self.unlink(&mut st, loc.bucket, pos, s);
            if expired {
                bump(&c.expired_unlinked);
                let unfetched = !slot::was_read(s) && it.state() & state::FETCHED == 0;
                if unfetched {
                    bump(&c.expired_unfetched);
                }
                self.bands().expired(victim, class_len, unfetched);
            } else {
                self.note_evicted(&c, s, gone, now);
                cleared.evicted = true;
            }
            return;
        }
    }

    /// Tells the eviction hook (`watch evictions`), if there is one.
    fn tell_evicted(&self, s: u64, it: &crate::item::Item<'_>, now: u32) {
        let Some(hook) = self.eviction_watcher() else { return };
        let expiry = it.expiry();
        hook.evicted(&crate::store::Evicted {
            key: it.key(),
            fetched: slot::was_read(s) || it.state() & state::FETCHED != 0,
            ttl: if expiry == 0 { -1 } else { i64::from(expiry) - i64::from(now) },
            age: now.saturating_sub(self.written_at(s)),
            size: it.value().len(),
            class: self.bands().band_of(self.class_len_of(it, crate::store::sizes(it).1)) + 1,
        });
    }

    /// Counts an item evicted from memory, with memcached's detail.
    /// `gone` is its state bits, expiry time and memcached's size for it
    /// ([`crate::bands::Bands::class_len`]), read before unlinking.
    fn note_evicted(&self, c: &Counters, s: u64, gone: Option<(u8, u32, usize)>, now: u32) {
        bump(&c.evictions);
        let Some((bits, expiry, len)) = gone else { return };
        let unfetched = !slot::was_read(s) && bits & state::FETCHED == 0;
        if unfetched {
            bump(&c.evicted_unfetched);
        }
        if expiry != 0 {
            bump(&c.evicted_nonzero);
        }
        let age = now.saturating_sub(self.written_at(s));
        self.note_evicted_age(age);
        self.bands().evicted(slot::seg(s), len, unfetched, expiry != 0, age);
    }

    /// Seals the worker's target for `q` (if any) and takes a fresh one,
    /// from the reserve if need be; false if no segment is free.
    fn new_target(&self, active: &mut Active, q: Queue) -> bool {
        if let Some(t) = active.targets[q as usize].take() {
            self.seal(t, q);
        }
        let Some(t) = active.claimed.take().or_else(|| self.pop_free(false)) else { return false };
        self.open_segment(t);
        active.targets[q as usize] = Some(t);
        true
    }

    /// Bytes written to segments but no longer linked, over the sealed
    /// segments (what cleaning can win back before anything is evicted).
    pub(crate) fn dead_bytes(&self) -> usize {
        let ev = self.lock_evict();
        self.survey(&ev, false, false).dead
    }

    /// Dead bytes, and whether the next allocation would clean rather than
    /// evict (step 4's test), from one survey: for the property that
    /// nothing live is evicted while it would.
    #[cfg(test)]
    pub(crate) fn worth_cleaning_now(&self) -> (usize, bool) {
        let ev = self.lock_evict();
        let survey = self.survey(&ev, false, false);
        (survey.dead, self.worth_cleaning(&survey))
    }
}
