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
//! queue, so cleaning keeps an unread item in the queue it was in (an
//! unread item cleaned out of the small queue is still "unread, goes first"
//! if it must go later), moves an item accessed in the small queue to the
//! main one as eviction would (`clear.rs`, `destination`), and eviction's
//! copy-forward fills the main queue. A full target is sealed onto its
//! queue.
//!
//! **Cost and contention**: the eviction mutex is held only to choose and
//! take a victim off its queue (a scan of segment metadata, no item
//! touched); the victim is then cleared by the worker that took it, with no
//! global lock, item by item under bucket locks, into targets no other
//! worker writes. Work per allocation is bounded by [`STEPS_PER_ALLOC`]
//! victims. Lock order: eviction mutex and free list are never held while a
//! bucket lock is taken, and a bucket lock is released before either is.

//!
//! The parts, one file each: this one (the queues, and the decision: which
//! victim, clean or evict, under the eviction mutex), `alloc.rs` (a
//! writer's allocation: the steps in order, the waits, the last resort,
//! the spare kept free) and `clear.rs` (clearing a victim item by item:
//! copy forward or unlink, and what is told of an eviction).

use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::copies::{TargetSegments, COPY_CREDIT_SEGMENTS};
use crate::image::Queue;
use crate::index::{slot, Loc};
use crate::item::{encoded_len, state, write_head, Fields};
use crate::segments::{Active, Evict, NEVER, RESERVE_SEGMENTS};
use crate::store::{add, bump, Counters, Store};
use crate::types::StoreError;

mod alloc;
mod clear;

/// The sketch's estimate from which an item not read in its stay is copied
/// forward as a read one. Under cache-aside a key's miss and set already
/// count one read: at 2, one more read made a key a candidate, and on
/// workload 5 (600,000 keys, 10x what fits) the copies of such keys spent
/// the credit that kept the read ones (77.5% hits against 81.2%); at 3,
/// 81.5%, and workload 10 gained nearly as much as at 2 (80.3% hits,
/// 80.7% at 2, 77.0% with neither). Since the ghost (`ghost.rs`) brings
/// back the keys asked for again soon after their eviction, 5: at 3 the
/// sketch's long memory kept keys the scan of workload 13 had pushed out
/// of favour (64.9% against 67.1% at 5, 67.2% at 4, 67.0% at 8; workload
/// 10 82.8/71.2% at 3, 82.7/71.1% at 5, 81.6/70.8% at 8).
const ADMIT_ESTIMATE: u8 = 5;

/// The share of sealed segments the queue of new writes may hold before
/// eviction turns to it (S3-FIFO's small queue). Its paper's 10% was the
/// best of 5, 10 and 20% on workload 5 until the ghost (`ghost.rs`) came;
/// since, keys that leave the small queue unread too soon come back
/// through the ghost, and 5% gave more hits on 5, 10, 13, 14 and 15, the
/// same on 6, fewer on 16 (one round each: 5 81.7% against 80.9%, 10 82.9/71.3% against 81.7/71.0%,
/// 13 68.8 against 68.5, 14 78.8 against 78.3, 15 71.2 against 70.9; 16
/// 72.0% against 72.2%, its byte hit ratio 70.3% against 70.9%; 3% and 7%
/// no better).
const SMALL_QUEUE_PERCENT: usize = 5;

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
/// cost of an eviction there (`docs/design/reclaim.md`).
const STEPS_PER_ALLOC: usize = 16;

/// How long a writer in the last resort waits for a segment (for pins to
/// drop and other workers to seal theirs) before it refuses the write.
const STARVE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Free segments the background reclaimer keeps ahead of the writers
/// (`reclaimer.rs`): one per worker of two, so that both may take one at
/// once without reclaiming on a request's time. Under a budget of fewer
/// than [`AHEAD_FULL_BUDGET`] segments, only as many as writers ask for
/// (`Store::ahead_on_demand`): each segment kept free is memory holding
/// no item, 3% of `-m 64` but 6% of `-m 16`. Kept one ahead unasked,
/// workload 15 (`-m 16`, values to 1 MB) had 72.2-72.4% hits against
/// 72.9-73.3% (medians of three), the free memory 1.9 MB on average
/// against 1.4.
const RECLAIM_AHEAD: usize = 2;

/// The segment budget from which the reclaimer keeps [`RECLAIM_AHEAD`].
const AHEAD_FULL_BUDGET: u32 = 48;

/// Of those, how many it frees by eviction (the rest only by cleaning).
pub(crate) const EVICT_AHEAD: usize = 1;

/// A victim with at most this many live items is cheaper cleared by the
/// writer that needs its segment than by the reclaimer ([`Pass::Cheap`]):
/// a few unlinks against two threads woken (the reclaimer, then the
/// writer's worker). Sixteen is a segment of items of a sixteenth of a
/// segment or more: the writes that do not ask ahead
/// (`Active::note_fill`) and so find nothing free and wait.
pub(crate) const CHEAP_ITEMS: u32 = 16;

/// What clearing a victim does with its live items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clear {
    /// Cleaning: every live item is copied forward, into the target of the
    /// queue the victim came from.
    Clean(Queue),
    /// Eviction from the given queue: what `Keep` says of the items read
    /// since written, the rest are unlinked. (A dead segment is cleared
    /// this way too: it has nothing to copy.)
    Evict(Queue, Keep),
}

impl Clear {
    /// The queue the victim was taken from.
    fn queue(self) -> Queue {
        match self {
            Clear::Clean(q) | Clear::Evict(q, _) => q,
        }
    }
}

/// What eviction keeps of a victim's items read since written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Copied forward into the main target, within the credit (CLOCK's
    /// second chance; `clear.rs`, `evicted_keeps`).
    Read,
    /// To flash where the tier takes them, else copied forward.
    ReadUnlessFlash,
    /// Nothing: the last resort makes room.
    Nothing,
}

/// The passes of a writer's allocation, in the order
/// [`Store::alloc_segment`] tries them, each a run of steps
/// ([`Store::step`]) that stops at the first segment it gets. The pass
/// is handed to every step by value: what a step may do is decided there
/// and nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Memory not tight, a writer beside the reclaimer: a mostly dead
    /// segment is cleaned or fresh memory taken, nothing more (the rest
    /// is the reclaimer's).
    Early,
    /// Every step in order: clean early, fresh memory, a dead segment,
    /// clean, wait, evict.
    Full,
    /// With the flash tier, after a full pass whose every victim was
    /// copied forward whole: eviction sends read items to flash too.
    ToFlash,
    /// While a snapshot's cut holds and nothing else was found: the
    /// segments of the cut not copied yet may be cleaned (handed off
    /// first, `cut.rs`).
    Held,
    /// The last resort (module doc): nothing is cleaned or copied
    /// forward, the cleaner's reserve may be taken, and with `held` the
    /// segments of a running snapshot's cut too.
    LastResort { held: bool },
    /// The reclaimer's own step, taken by a writer of a large item on the
    /// reclaimer's behalf (`Store::reclaim_cheap`): the same victim, the
    /// same clear, but only if that victim holds at most [`CHEAP_ITEMS`]
    /// live items; none else is taken instead, and nothing is waited for.
    /// One more segment is kept ahead: the writer's own.
    Cheap,
}

impl Pass {
    /// Whether segments of a running snapshot's cut may be taken.
    fn takes_held(self) -> bool {
        matches!(self, Pass::Held | Pass::LastResort { held: true })
    }

    fn last_resort(self) -> bool {
        matches!(self, Pass::LastResort { .. })
    }

    /// What eviction in this pass keeps of the items read.
    fn keep(self) -> Keep {
        match self {
            Pass::ToFlash => Keep::ReadUnlessFlash,
            Pass::LastResort { .. } => Keep::Nothing,
            Pass::Early | Pass::Full | Pass::Held | Pass::Cheap => Keep::Read,
        }
    }

    /// Segments freed beyond what the reclaimer keeps ahead: the one the
    /// writer taking a [`Pass::Cheap`] step takes next.
    fn beyond_ahead(self) -> usize {
        usize::from(self == Pass::Cheap)
    }
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

/// The store's segments as a worker's copy targets see them (`copies.rs`).
impl TargetSegments for Store {
    fn segment_bytes(&self) -> usize {
        self.arena().segment_size()
    }

    fn room_in(&self, t: u32) -> usize {
        self.room(t)
    }

    fn takes_copies(&self, t: u32) -> bool {
        !self.is_flushed(t) && !self.frozen(t)
    }

    fn seal_onto(&self, t: u32, q: Queue) {
        self.seal(t, q);
    }

    fn take_free(&self) -> Option<u32> {
        self.pop_free(false)
    }

    fn open_target(&self, t: u32) {
        self.open_segment(t);
    }

    fn give_back_unused(&self, t: u32) {
        self.unuse(t);
    }
}

impl Store {
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
    pub(crate) fn step(&self, active: &mut Active, pass: Pass, evict_now: bool) -> Option<Step> {
        let step = self.locked_step(|ev| match self.decide(ev, active, pass) {
            Some(Step::Wait) if evict_now => self.evict_step(ev, active, pass),
            Some(Step::Victim(s, how)) if pass == Pass::Cheap && !self.cheap(s) => {
                // Declined, not replaced: the reclaimer takes it.
                Self::put_back_in(ev, s, how.queue(), |s| self.seg(s).epoch.load(Relaxed));
                None
            }
            Some(Step::Wait) if pass == Pass::Cheap => None,
            step => step,
        });
        match step {
            Some(Step::Victim(s, Clear::Clean(q))) if !self.room_to_clean(s, q, active) => {
                self.put_back(s, q);
                self.cleared(false);
                if pass == Pass::Cheap {
                    return None;
                }
                if evict_now {
                    self.locked_step(|ev| self.evict_step(ev, active, pass))
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
        need <= active.copies.room(self, q) || active.copies.claim(self)
    }

    /// Puts a victim not cleared back on queue `q`, where its epoch puts it.
    fn put_back(&self, victim: u32, q: Queue) {
        Self::put_back_in(&mut self.lock_evict(), victim, q, |s| self.seg(s).epoch.load(Relaxed));
    }

    fn put_back_in(ev: &mut Evict, victim: u32, q: Queue, epoch: impl Fn(u32) -> u64) {
        let queue = ev.queue(q);
        let at = queue.iter().position(|&s| epoch(s) > epoch(victim)).unwrap_or(queue.len());
        queue.insert(at, victim);
    }

    /// Whether clearing `s` is a few unlinks ([`CHEAP_ITEMS`]) and nothing
    /// more: not in a snapshot's cut (its image would be handed to the
    /// snapshot, which may wait for room).
    fn cheap(&self, s: u32) -> bool {
        self.seg(s).live_items.load(Relaxed) <= CHEAP_ITEMS && !self.frozen(s)
    }

    fn decide(&self, ev: &mut Evict, active: &Active, pass: Pass) -> Option<Step> {
        let seg_size = self.arena().segment_size();
        let survey = self.survey(ev, pass.takes_held(), active.restoring);
        // Worth cleaning only if it frees something, and only if its items
        // have somewhere to go: the worker's target, or one more from the
        // free list (a victim's items fit in one segment).
        // The last resort cleans nothing: it makes room by evicting.
        let best = survey.best.filter(|_| !pass.last_resort()).filter(|&(_, q)| {
            let room = active.copies.room(self, q);
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
            if self.spare_ahead() >= self.reclaim_ahead() + pass.beyond_ahead() {
                return None;
            }
        } else if let Some(s) = self.pop_free(!pass.last_resort()) {
            return Some(Step::Fresh(s));
        } else if pass == Pass::Early {
            return None;
        }
        // 3. A dead segment.
        let now = self.clock().now();
        let dead =
            |s: &u32| (self.seg(*s).live_items.load(Relaxed) == 0 || self.all_expired(*s, now)) && !self.is_pinned(*s);
        for (name, q) in [(Queue::Small, &mut ev.small), (Queue::Main, &mut ev.main)] {
            if let Some(i) = q.iter().position(dead) {
                return q.remove(i).map(|s| Step::Victim(s, Clear::Evict(name, pass.keep())));
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
        let cut = self.cut_active() && !pass.takes_held() && !pass.last_resort();
        let all = if cut { self.survey(ev, true, active.restoring) } else { survey };
        if cut {
            let room = |q: Queue| active.copies.room(self, q);
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
            && !pass.last_resort()
            && all.best.is_some()
            && all.best_need < seg_size
            && self.worth_cleaning(&all)
        {
            return Some(Step::Wait);
        }
        self.evict_step(ev, active, pass)
    }

    /// Step 5 of [`Store::step`]: a victim to evict, if eviction is allowed.
    fn evict_step(&self, ev: &mut Evict, active: &Active, pass: Pass) -> Option<Step> {
        // The reclaimer evicts ahead for one segment only: each segment
        // kept free ahead is one less holding items, and the cleaner
        // (which loses nothing) may keep more free.
        if !self.config().evictions || (active.background && self.spare_ahead() >= EVICT_AHEAD + pass.beyond_ahead()) {
            return None;
        }
        let sealed = ev.small.len() + ev.main.len();
        let small_first = ev.small.len() * 100 > sealed * SMALL_QUEUE_PERCENT || ev.main.is_empty();
        let (small, main) = ((Queue::Small, &mut ev.small), (Queue::Main, &mut ev.main));
        let order = if small_first { [small, main] } else { [main, small] };
        for (name, q) in order {
            if let Some(i) = q.iter().position(|&s| !self.is_pinned(s)) {
                return q.remove(i).map(|s| Step::Victim(s, Clear::Evict(name, pass.keep())));
            }
        }
        None
    }
}
