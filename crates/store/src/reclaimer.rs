//! The background reclaimer: one thread that runs the cleaner and
//! eviction (`evict/`) ahead of the writers, so that a writer that fills
//! its segment takes a free one instead of evicting and copying on its
//! request's time (memcached's LRU maintainer thread, Segcache's
//! background eviction).
//!
//! It keeps ``Store::reclaim_ahead`` segments free beyond the cleaner's
//! reserve (under a small budget only as many as writers ask for: one
//! that waits, or one of small items whose segment is half full,
//! `Active::note_fill`), and cleans mostly dead segments (step 1)
//! whenever there are some. While more than that is free, writers still
//! clean early themselves when they need a segment (cheaper there:
//! `Store::alloc_segment`); once memory is tight every step is the
//! reclaimer's. A writer that finds nothing free wakes it and waits while
//! it works (on the server a first attempt waits off its event loop,
//! `memwait.rs`; else up to `WAIT_FOR_RECLAIMER`); only if it is stuck or
//! slower than that does the writer reclaim itself as before, counted in
//! `strata_reclaim_inline`. A writer whose take leaves fewer than
//! ``Store::reclaim_ahead`` free wakes it too. A writer of large items
//! takes the reclaimer's step itself instead, where its victim is a few
//! items (`Store::reclaim_cheap`). Nothing else changes: which
//! victim, what is copied forward and what is evicted are the same
//! decisions, made on another thread into its own copy targets.
//!
//! With `ext_item_age` it also sends idle items to flash before memory
//! is full (`tier/`, "Early, by age").
//!
//! Eviction's copy-forward is paid from credit writers earn (a fifth of
//! what they write): writers hand theirs over when they take a segment,
//! into `Shared::credit` (`reclaim.rs`), which the reclaimer draws on.

use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Duration;

use crate::evict::{Pass, Step};
use crate::segments::Active;
use crate::store::{bump, Counters, Store};

/// Victims one round may clear before it looks at the time again.
const STEPS_PER_ROUND: usize = 16;

/// Victims a writer may clear in the reclaimer's stead for one segment
/// (`Store::reclaim_cheap`): each is a few items, and one whose items were
/// all read frees nothing net (they are copied forward).
const CHEAP_STEPS: usize = 4;

/// How long a writer that finds no segment free waits for the reclaimer
/// before it reclaims itself: a few victims' clearing.
const WAIT_FOR_RECLAIMER: Duration = Duration::from_millis(20);

/// The reclaimer's handle; its thread calls [`Reclaimer::run`].
pub struct Reclaimer {
    store: Arc<Store>,
    /// The second of the last `ext_item_age` pass that found nothing more
    /// to send: the next waits for the clock to move on.
    aged_at: u32,
    /// Values stored before the current dictionary, stored again
    /// (`rezip.rs`); None without compression.
    rezip: Option<crate::rezip::Rezip>,
}

impl Store {
    /// Turns the background reclaimer on and returns its handle: from now
    /// on writers leave reclaiming to the thread that runs it (and still
    /// reclaim themselves if it falls behind). One per store.
    pub fn reclaimer(self: &Arc<Self>) -> Reclaimer {
        let counters = Arc::new(Counters::default());
        self.roster().reclaimer_started(&counters);
        let active = Active::new(self, counters, true);
        *self.reclaim_state().active.lock() = Some(active);
        Reclaimer { store: self.clone(), aged_at: 0, rezip: crate::rezip::Rezip::new(self) }
    }

    /// Seals the reclaimer's copy targets, as a snapshot has every
    /// worker seal its segments before it lists the sealed ones: items
    /// copied into a target before the snapshot began are in no image
    /// otherwise, and the log that held them is trimmed.
    ///
    /// Does not wait for a round in progress: the reclaimer is woken
    /// instead, and seals its targets in a snapshot's cut as its next round
    /// begins.
    pub fn seal_reclaimer(&self) {
        match self.reclaim_state().active.try_lock() {
            Some(mut g) => {
                if let Some(active) = g.as_mut() {
                    active.seal_all(self);
                }
            }
            None => self.kick_reclaimer(),
        }
    }

    /// Wakes the reclaimer (a writer took a segment and few are left).
    pub(crate) fn kick_reclaimer(&self) {
        let mut kicked = self.reclaim_state().kicked.lock();
        if !*kicked {
            *kicked = true;
            self.reclaim_state().wake.notify_one();
        }
    }

    /// A writer (`active`) will need a segment: the reclaimer frees one for
    /// it where it keeps none ahead unasked ([`Store::reclaim_ahead`]).
    pub(crate) fn want_segment(&self, active: &mut Active) {
        active.asked.ask(&self.reclaim_state().wanted);
        self.kick_reclaimer();
    }

    /// A writer is about to take a segment, or left: what it asked for is
    /// no longer wanted.
    pub(crate) fn drop_want(&self, active: &mut Active) {
        active.asked.withdraw(&self.reclaim_state().wanted);
    }

    /// Free segments beyond the cleaner's reserve that no writer asked
    /// for: what the reclaimer's own passes may take (`rezip.rs`; `active`
    /// is the reclaimer's, whose own ask does not count).
    pub(crate) fn spare_unasked(&self, active: &Active) -> usize {
        if !self.ahead_on_demand() {
            return self.spare_ahead();
        }
        self.spare_ahead().saturating_sub(self.writers_asked(active))
    }

    /// Whether a writer waits, or soon will, for a segment that is not
    /// free: the reclaimer's own passes yield to freeing one.
    pub(crate) fn writers_short(&self, active: &Active) -> bool {
        if !self.ahead_on_demand() {
            return self.spare_ahead() == 0;
        }
        self.spare_ahead() < self.writers_asked(active)
    }

    /// Segments writers asked for, the reclaimer's own ask (`active`) aside.
    fn writers_asked(&self, active: &Active) -> usize {
        active.asked.others(&self.reclaim_state().wanted)
    }

    /// Hands a writer's copy credit to the reclaimer, which evicts for it.
    pub(crate) fn give_credit(&self, active: &mut Active) {
        let most = self.credit_cap();
        let credit = active.copies.take_credit();
        let _ = self.reclaim_state().credit.fetch_update(Relaxed, Relaxed, |c| Some((c + credit).min(most)));
    }

    /// A segment freed by the reclaimer, waiting for one while it works
    /// (up to [`WAIT_FOR_RECLAIMER`]). None if it is stuck or slower than
    /// that: the writer then reclaims itself. A writer that cleaned beside
    /// it would compete for the one reserve segment both copy into, and
    /// the one that lost would evict what cleaning could have kept.
    pub(crate) fn take_reclaimed(&self, active: &mut Active) -> Option<u32> {
        let deadline = std::time::Instant::now() + WAIT_FOR_RECLAIMER;
        loop {
            self.drop_want(active);
            if let Some(s) = self.pop_free(true) {
                return Some(s);
            }
            self.want_segment(active);
            let mut g = self.reclaim_state().freed_lock.lock();
            if self.reclaim_state().stuck.load(Relaxed)
                || self.reclaim_state().stop.load(Relaxed)
                || std::time::Instant::now() >= deadline
            {
                // It reclaims itself now: nothing is wanted any more.
                drop(g);
                self.drop_want(active);
                return None;
            }
            self.reclaim_state().freed_cv.wait_for(&mut g, Duration::from_millis(1));
        }
    }

    /// A victim taken by [`Store::step`] is done with (`freed`: given back
    /// to the free list, else put back on its queue): a writer waiting for
    /// a segment to clean into looks again.
    pub(crate) fn cleared(&self, freed: bool) {
        self.reclaim_state().clearing.fetch_sub(1, Relaxed);
        if freed {
            {
                let _g = self.reclaim_state().freed_lock.lock();
                self.reclaim_state().freed_cv.notify_all();
            }
            self.memory_freed();
        }
    }

    /// Waits up to `d` for a segment to be freed (by the reclaimer or by a
    /// thread clearing a victim).
    pub(crate) fn wait_for_freed(&self, d: Duration) {
        let mut g = self.reclaim_state().freed_lock.lock();
        self.reclaim_state().freed_cv.wait_for(&mut g, d);
    }

    /// The reclaimer's state brought up to date before its steps (`active`
    /// is its own): a starved writer's or a snapshot's ask to seal answered,
    /// the credit writers handed over taken.
    fn before_steps(&self, active: &mut Active) {
        active.seal_if_starved(self);
        if self.cut_active() {
            active.seal_frozen(self);
        }
        let credit = self.reclaim_state().credit.swap(0, Relaxed);
        active.copies.bank_credit(credit, self.credit_cap());
    }

    /// One of the reclaimer's steps on its own `active`: whether it freed a
    /// segment.
    fn background_step(&self, active: &mut Active, pass: Pass) -> bool {
        match self.step(active, pass, false) {
            Some(Step::Victim(s, how)) => self.free_victim(s, how, active),
            // Background steps take no fresh memory.
            Some(Step::Fresh(s)) => {
                self.unuse(s);
                false
            }
            Some(Step::Wait) | None => false,
        }
    }

    /// A writer of a large item (`active::large_item`) that would wait for
    /// the reclaimer, or wake it, for the segment it takes next: if the
    /// reclaimer is idle and its next victim is cheap to clear
    /// ([`Pass::Cheap`]), the writer takes that step itself, with the
    /// reclaimer's copy targets and credit. Such writes take a segment
    /// each write or two, and a victim of a few items costs less to clear
    /// than the two threads woken to have it cleared (1 MB sets: one
    /// reclaimer round and a third of a wait per set). A victim whose
    /// items were read is copied forward and frees nothing net: up to
    /// [`CHEAP_STEPS`] victims, until one more than the reclaimer keeps
    /// ahead is free. Whether it freed any.
    ///
    /// Not with the flash tier (a victim's items go to flash: a write to
    /// the device on the event loop) nor while a snapshot's cut holds (a
    /// victim in it is handed to the snapshot, which may wait for it).
    pub(crate) fn reclaim_cheap(&self, writer: &Active) -> bool {
        if self.config().flash.is_some() || self.cut_active() {
            return false;
        }
        let Some(mut guard) = self.reclaim_state().active.try_lock() else { return false };
        let Some(active) = guard.as_mut() else { return false };
        self.before_steps(active);
        let mut freed = false;
        for _ in 0..CHEAP_STEPS {
            if self.spare_ahead() > self.reclaim_ahead() || !self.background_step(active, Pass::Cheap) {
                break;
            }
            bump(&writer.counters.reclaim_cheap);
            freed = true;
        }
        freed
    }

    /// Stops [`Reclaimer::run`] (at shutdown).
    pub fn stop_reclaimer(&self) {
        self.reclaim_state().stop.store(true, Relaxed);
        self.kick_reclaimer();
        self.reclaim_state().freed_cv.notify_all();
        self.memory_freed();
    }
}

impl Reclaimer {
    /// Reclaims until told to stop: whenever a writer wakes it, and every
    /// `tick` (expired segments come free with time alone).
    pub fn run(mut self, tick: Duration) {
        while !self.store.reclaim_state().stop.load(Relaxed) {
            while self.round() {}
            self.store.flash_writeback();
            let mut kicked = self.store.reclaim_state().kicked.lock();
            if !*kicked {
                self.store.reclaim_state().wake.wait_for(&mut kicked, tick);
            }
            *kicked = false;
        }
        // Its copy targets go on a queue like any worker's.
        if let Some(active) = self.store.reclaim_state().active.lock().as_mut() {
            active.seal_all(&self.store);
        }
    }

    /// One round: with `ext_item_age`, a pass that sends idle items to
    /// flash (once a second, `tier/`); then up to [`STEPS_PER_ROUND`]
    /// victims cleared, while fewer than ``Store::reclaim_ahead`` segments are free
    /// or a mostly dead segment is worth cleaning; then, with compression
    /// and as many segments free as it keeps, a few segments of values
    /// stored before the current dictionary stored again, or with a cold
    /// level, stored again at it (`rezip.rs`).
    /// True if it may have more to do.
    pub fn round(&mut self) -> bool {
        #[cfg(feature = "test-hooks")]
        if !self.store.config().reclaim_delay.is_zero() {
            std::thread::sleep(self.store.config().reclaim_delay);
        }
        let more = self.free_round();
        let st = &*self.store;
        let Some(rz) = self.rezip.as_mut() else { return more };
        if st.spare_ahead() < st.reclaim_ahead() {
            return more;
        }
        let mut guard = st.reclaim_state().active.lock();
        let Some(active) = guard.as_mut() else { return more };
        st.rezip(rz, active) || more
    }

    fn free_round(&mut self) -> bool {
        let st = &*self.store;
        let mut guard = st.reclaim_state().active.lock();
        let Some(active) = guard.as_mut() else { return false };
        st.before_steps(active);
        let now = st.clock().now();
        let mut aging = false;
        if now != self.aged_at {
            aging = st.age_to_flash(active);
            if !aging {
                self.aged_at = now;
            }
        }
        for _ in 0..STEPS_PER_ROUND {
            if !st.background_step(active, Pass::Full) {
                // Stuck only if it had to free one: a round with nothing
                // asked for would otherwise send writers to reclaim inline.
                let keeps = st.reclaim_ahead() > 0;
                st.reclaim_state().stuck.store(keeps && st.spare_ahead() == 0, Relaxed);
                st.reclaim_state().freed_cv.notify_all();
                // Writes waiting off their event loop run again: they take
                // what is free or reclaim themselves (`memwait.rs`).
                st.memory_freed();
                return aging;
            }
            st.reclaim_state().stuck.store(false, Relaxed);
            bump(&active.counters.reclaim_background);
            st.reclaim_state().freed_cv.notify_all();
        }
        st.memory_freed();
        true
    }
}
