//! The cut of a running snapshot: the moment the cache is saved as of,
//! whatever writers, the cleaner and eviction do while the segments are
//! copied (DESIGN §7: a snapshot "holds every key acknowledged before it
//! began ... whatever the writers do while it copies").
//!
//! **What is saved.** A snapshot copies the segments that were in use at
//! its cut (`H`: sealed, being written, or being cleared), and nothing
//! written after it; an item of `H` is saved if it was linked at the cut.
//! Segments are copied one at a time while the cache serves, so by the time
//! a segment is copied some of its items may have been overwritten, deleted
//! or moved. Liveness is therefore judged as of the cut, not by whether the
//! index still points at the item:
//!
//! - an item of `H` that is unlinked after the cut (overwritten, deleted,
//!   moved by the cleaner, eviction or the flash tier) is noted in its
//!   segment's *died* list, under its bucket lock (`Store::note_death` (`cutting.rs`));
//!   its bytes stay where they are, since a segment of `H` is not reused
//!   before it is copied (below), so the copy saves it as it was;
//! - nothing is linked into a segment of `H` after the cut
//!   (`Store::frozen` (`cutting.rs`), checked under the bucket lock where an item is
//!   linked or moved): writers, copy targets and the flash tier's copies
//!   move to a segment opened after the cut; and nothing in one is changed
//!   in place (a touch, a recache token): the change is made in a new
//!   version instead, as when the item has no field for it. So per key, every change made
//!   before the cut is ordered before every change after it (both take
//!   the key's bucket lock, and the cut is published before any segment
//!   opened after it is written), and `H` holds exactly one version of a
//!   key that was live at the cut: the live one, or the one noted dead.
//!   The cut is published without the bucket locks, so a writer or a copy
//!   that checked its segment just before may link into a segment of `H`
//!   just after: the version it replaces is then not noted
//!   (`Store::unaccount_replaced`), and the new one is saved instead; one
//!   look at the cut decides both. A death is noted under its segment's
//!   died lock, which the copy, the cut's end and the next cut's beginning
//!   take to change the mark: no note outlives its cut into the next.
//!
//! **A segment of `H` freed before it is copied** (eviction, the cleaner,
//! a dead segment reused) is copied by whoever frees it, after its items
//! were cleared and before it is reused (`Store::hand_off` (`cutting.rs`)): the copy
//! holds exactly its noted deaths, which are every item that was live at
//! the cut (eviction's and the cleaner's unlinks and moves are noted like
//! any other). The image goes into a queue the snapshot drains before its
//! own copies. The queue is bounded ([`HANDOFF_MAX_DIV`]); a freeing thread
//! that finds it full waits for the snapshot to drain it, as long as the
//! snapshot takes an image now and then: back-pressure, as a full disk
//! queue gives. The snapshot thread runs at idle priority, and on a
//! machine whose cores are all busy it may take an image only every
//! hundred milliseconds or so; a bound on the wait itself (50 ms once)
//! failed snapshots there that were merely slow. Only a snapshot that takes
//! nothing for [`HANDOFF_STALL`] (its disk hung) is failed, so memory
//! stays bounded, writers go on, and no snapshot is ever written without
//! what it promises. The died lists are bounded the same way
//! ([`DIED_MAX_DIV`]).
//!
//! **Why a lock for opening segments.** The cut marks every segment in use
//! and publishes itself under [`Cut::lock`], which opening a segment also
//! takes: a segment opened before the cut is in use when it is marked, one
//! opened after is opened (and so written) after the cut was published,
//! and its writer sees it. Opening a segment happens once per segment
//! filled, so the lock costs nothing on the request path.
//!
//! **Cost outside a snapshot**: one load of [`Cut::active`] per unlink.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::image::{Sealed, SegmentImage};

/// The hand-off queue holds at most a `1/HANDOFF_MAX_DIV` of the memory
/// limit (and at least two segments).
pub(crate) const HANDOFF_MAX_DIV: usize = 16;

/// How long a thread freeing a segment of the cut waits for room in the
/// hand-off queue while the snapshot takes nothing from it, before the
/// snapshot fails instead.
pub(crate) const HANDOFF_STALL: Duration = Duration::from_secs(5);

/// The died lists hold at most a `1/DIED_MAX_DIV` of the memory limit
/// (4 bytes per item noted).
pub(crate) const DIED_MAX_DIV: usize = 16;

/// A running snapshot's cut (see the module doc). The store holds one.
#[derive(Default)]
pub(crate) struct Cut {
    /// Taken to open a segment and to make the cut.
    pub(crate) lock: Mutex<()>,
    /// The running snapshot's generation while its cut holds, 0 otherwise.
    pub(crate) active: AtomicU64,
    /// Generations handed out (one per snapshot).
    pub(crate) gens: AtomicU64,
    pub(crate) handoff: Mutex<Handoff>,
    /// Signalled when the snapshot takes an image from the hand-off queue,
    /// and when one is put there.
    pub(crate) handoff_cv: Condvar,
    /// Offsets in died lists now.
    pub(crate) died: AtomicUsize,
    /// Why the running snapshot cannot keep its promise, once it cannot.
    pub(crate) failed: Mutex<Option<String>>,
    /// Segments handed off by the threads that freed them (this snapshot).
    pub(crate) handed_off: AtomicU64,
    /// Threads waiting for room in the hand-off queue now.
    pub(crate) waiting: AtomicUsize,
    /// Nanoseconds threads waited for room (this snapshot).
    pub(crate) waited_ns: AtomicU64,
    /// [`HANDOFF_STALL`] unless a test set it (milliseconds; 0: the const).
    pub(crate) stall_ms: AtomicU64,
    /// The thread that began the cut (the snapshot's): it never waits for
    /// room in the hand-off queue, which only it drains.
    pub(crate) snapshot_thread: Mutex<Option<std::thread::ThreadId>>,
    /// With the flash tier: the log as it stood at the cut, and the flash
    /// records linked at the cut and unlinked since (`tier/`).
    pub(crate) flash: Mutex<Option<strata_flash::Checkpoint>>,
    pub(crate) flash_died: Mutex<Vec<u64>>,
}

#[derive(Default)]
pub(crate) struct Handoff {
    pub(crate) images: VecDeque<SegmentImage>,
    pub(crate) bytes: usize,
    /// Images taken by the snapshot so far: its progress, which a waiting
    /// thread watches.
    pub(crate) taken: u64,
}

/// Items of one segment of the cut unlinked after it: offsets, the first
/// `sorted` of them sorted (by the copy, which looks them up).
#[derive(Debug, Default)]
pub(crate) struct Died {
    pub(crate) offs: Vec<u32>,
    pub(crate) sorted: usize,
}

impl Died {
    pub(crate) fn contains(&self, off: u32) -> bool {
        self.offs[..self.sorted].binary_search(&off).is_ok() || self.offs[self.sorted..].contains(&off)
    }

    /// Sorts what is noted so far, for lookups while a copy runs.
    pub(crate) fn sort(&mut self) {
        self.offs.sort_unstable();
        self.offs.dedup();
        self.sorted = self.offs.len();
    }
}

/// What the running snapshot still has to copy (`Store::cut_pending` (`cutting.rs`)).
#[derive(Debug, Default)]
pub struct Pending {
    /// Sealed segments of the cut not yet copied, oldest epoch first.
    pub sealed: Vec<Sealed>,
    /// Segments of the cut not sealed yet: a worker still has them open,
    /// or a thread is freeing them (and will hand them off).
    pub unsealed: usize,
}

#[cfg(test)]
thread_local! {
    /// Run once where a replacing unlink has looked at the cut (tests: a
    /// cut that begins there).
    pub(crate) static AFTER_CUT_LOOK: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
pub(crate) fn after_cut_look() {
    if let Some(f) = AFTER_CUT_LOOK.with(|h| h.borrow_mut().take()) {
        f();
    }
}
