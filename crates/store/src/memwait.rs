//! Writes that wait for memory off the event loop: a worker whose write
//! needs a fresh segment while none is free and the background reclaimer
//! is at work returns [`Flow::Wait`] with [`Ticket::MEMORY`], as a read
//! from flash does, instead of sleeping on its thread for the reclaimer
//! (up to 20 ms, `reclaimer.rs`) while its other connections wait too.
//!
//! ```text
//!  set (Reading::MayWait, or Resumed(MEMORY))
//!   open segments have room, or one is free  → written as before
//!   none, reclaimer running and not stuck    → listed in Shared::waiting,
//!                                              reclaimer kicked,
//!                                              Flow::Wait(Ticket::MEMORY)
//!  a segment freed (any thread), or a round of the reclaimer ends
//!                                            → every listed worker woken;
//!                                              its completions hand back
//!                                              Ticket::MEMORY
//! ```
//!
//! A write run again may find the segments freed taken by another worker
//! and wait again, [`MAX_REWAITS`] times in a row per worker at most:
//! then it takes a segment as before (the reclaimer's wait on its thread,
//! or reclaiming itself), so every run of waits ends in progress. A wait
//! changed and counted nothing but `memory_waits`. A large write whose
//! victim is cheap clears it instead of waiting (`Store::reclaim_cheap`).
//! Appends and prepends (whose size is known only once the old value is
//! read) and writes run again after a read from flash allocate as before.
//!
//! [`Flow::Wait`]: crate::Flow::Wait

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use crate::item::{encoded_len, Fields};
use crate::reclaim::MemoryWait;
use crate::store::{bump, Store};
use crate::types::{Reading, SetOp, Ticket, Write};
use crate::worker::Worker;

/// Waits in a row a worker's writes run again may make before one takes
/// memory on the worker's thread: a write that keeps losing the segments
/// freed to other workers is not put off for ever.
pub(crate) const MAX_REWAITS: u32 = 8;

impl Ticket {
    /// What a write waiting for a free segment waits for (no flash
    /// record's address is this).
    pub const MEMORY: Ticket = Ticket(u64::MAX);
}

impl Worker {
    /// Lets this worker's writes wait for memory without blocking its
    /// thread (see the module doc); `wake` is called from the thread that
    /// freed a segment. Without it a write waits on its thread as before.
    pub fn enable_memory_waits(&mut self, wake: Box<dyn Fn() + Send + Sync>) {
        self.memory =
            Some(Arc::new(MemoryWait { wake, listed: AtomicBool::new(false), freed: AtomicBool::new(false) }));
    }

    /// Whether `w`, run with `reading`, is to wait for memory (and this
    /// worker is listed to be woken): it needs a fresh segment, a writer
    /// may take none now (`Store::pop_free`), and the reclaimer is freeing
    /// one (see the module doc for which writes may).
    pub(crate) fn must_wait_for_memory(&mut self, w: &Write<'_>, reading: Reading) -> bool {
        let again = match reading {
            Reading::MayWait => false,
            Reading::Resumed(Ticket::MEMORY) => true,
            _ => return false,
        };
        if matches!(w.op, SetOp::Append | SetOp::Prepend) {
            return false;
        }
        let wait = self.memory_short(w);
        if again {
            self.memory_rewaits = if wait { self.memory_rewaits + 1 } else { 0 };
            if self.memory_rewaits > MAX_REWAITS {
                self.memory_rewaits = 0;
                return false;
            }
        }
        if wait {
            bump(&self.active.counters.memory_waits);
        }
        wait
    }

    /// Whether a write of `w` finds no room and no free segment while the
    /// reclaimer works; if so this worker is listed to be woken.
    fn memory_short(&mut self, w: &Write<'_>) -> bool {
        let Some(m) = &self.memory else { return false };
        let st = &*self.store;
        // The plain form's size: compressed, the value may still fit where
        // this does not; then the write waits once for nothing. Most writes
        // fit an open segment: that is looked at first.
        let f = Fields { flags: w.flags, expiry: w.expiry, cas: w.new_cas, state: 0, compressed: false };
        let len = encoded_len(w.key.len(), w.value.len(), &f);
        if self.active.has_room(st, len) || !st.reclaimer_working() || st.free_for_writer() {
            return false;
        }
        // A large write clears a cheap victim itself rather than wait for
        // the reclaimer to (`Store::reclaim_cheap`).
        if crate::active::large_item(st, st.aligned(len)) && st.reclaim_cheap(&self.active) {
            return false;
        }
        if !m.listed.swap(true, AcqRel) {
            st.reclaim_state().waiting.lock().push(m.clone());
        }
        st.want_segment(&mut self.active);
        // Listed before looking again: a segment freed before the list was
        // taken is seen here, one freed after it wakes this worker.
        !st.free_for_writer()
    }

    /// Hands back [`Ticket::MEMORY`] into `out` if this worker was woken
    /// since the last call.
    pub(crate) fn memory_completions(&mut self, out: &mut Vec<crate::Ticket>) {
        if self.memory.as_ref().is_some_and(|m| m.freed.swap(false, AcqRel)) {
            out.push(Ticket::MEMORY);
        }
    }
}

impl Store {
    /// A segment was freed, or the reclaimer ended a round (it may have
    /// given up): every worker with a write waiting for memory is woken.
    pub(crate) fn memory_freed(&self) {
        let mut list = self.reclaim_state().waiting.lock();
        for m in list.drain(..) {
            m.listed.store(false, Release);
            m.freed.store(true, Release);
            (m.wake)();
        }
    }

    /// The reclaimer runs and can free segments: a writer may wait for it.
    fn reclaimer_working(&self) -> bool {
        let r = self.reclaim_state();
        self.roster().reclaiming() && !r.stuck.load(Relaxed) && !r.stop.load(Relaxed)
    }
}
