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
//!   segment's *died* list, under its bucket lock ([`Store::note_death`]);
//!   its bytes stay where they are, since a segment of `H` is not reused
//!   before it is copied (below), so the copy saves it as it was;
//! - nothing is linked into a segment of `H` after the cut
//!   ([`Store::frozen`], checked under the bucket lock where an item is
//!   linked or moved): writers, copy targets and the flash tier's copies
//!   move to a segment opened after the cut; and nothing in one is changed
//!   in place (a touch, a recache token): the change is made in a new
//!   version instead, as when the item has no field for it. So per key, every change made
//!   before the cut is ordered before every change after it (both take
//!   the key's bucket lock, and the cut is published before any segment
//!   opened after it is written), and `H` holds exactly one version of a
//!   key that was live at the cut: the live one, or the one noted dead.
//!
//! **A segment of `H` freed before it is copied** (eviction, the cleaner,
//! a dead segment reused) is copied by whoever frees it, after its items
//! were cleared and before it is reused ([`Store::hand_off`]): the copy
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::image::{Queue, Sealed, SegmentImage, StoreImage};
use crate::store::Store;

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
    active: AtomicU64,
    /// Generations handed out (one per snapshot).
    gens: AtomicU64,
    handoff: Mutex<Handoff>,
    /// Signalled when the snapshot takes an image from the hand-off queue,
    /// and when one is put there.
    handoff_cv: Condvar,
    /// Offsets in died lists now.
    died: AtomicUsize,
    /// Why the running snapshot cannot keep its promise, once it cannot.
    failed: Mutex<Option<String>>,
    /// Segments handed off by the threads that freed them (this snapshot).
    pub(crate) handed_off: AtomicU64,
    /// Threads waiting for room in the hand-off queue now.
    waiting: AtomicUsize,
    /// Nanoseconds threads waited for room (this snapshot).
    waited_ns: AtomicU64,
    /// [`HANDOFF_STALL`] unless a test set it (milliseconds; 0: the const).
    stall_ms: AtomicU64,
    /// The thread that began the cut (the snapshot's): it never waits for
    /// room in the hand-off queue, which only it drains.
    snapshot_thread: Mutex<Option<std::thread::ThreadId>>,
    /// With the flash tier: the log as it stood at the cut, and the flash
    /// records linked at the cut and unlinked since (`tier/`).
    pub(crate) flash: Mutex<Option<strata_flash::Checkpoint>>,
    pub(crate) flash_died: Mutex<Vec<u64>>,
}

#[derive(Default)]
struct Handoff {
    images: VecDeque<SegmentImage>,
    bytes: usize,
    /// Images taken by the snapshot so far: its progress, which a waiting
    /// thread watches.
    taken: u64,
}

/// Items of one segment of the cut unlinked after it: offsets, the first
/// `sorted` of them sorted (by the copy, which looks them up).
#[derive(Debug, Default)]
pub(crate) struct Died {
    offs: Vec<u32>,
    sorted: usize,
}

impl Died {
    fn contains(&self, off: u32) -> bool {
        self.offs[..self.sorted].binary_search(&off).is_ok() || self.offs[self.sorted..].contains(&off)
    }

    /// Sorts what is noted so far, for lookups while a copy runs.
    fn sort(&mut self) {
        self.offs.sort_unstable();
        self.offs.dedup();
        self.sorted = self.offs.len();
    }
}

/// What the running snapshot still has to copy ([`Store::cut_pending`]).
#[derive(Debug, Default)]
pub struct Pending {
    /// Sealed segments of the cut not yet copied, oldest epoch first.
    pub sealed: Vec<Sealed>,
    /// Segments of the cut not sealed yet: a worker still has them open,
    /// or a thread is freeing them (and will hand them off).
    pub unsealed: usize,
}

impl Store {
    /// The generation of the running snapshot's cut, 0 if none.
    #[inline]
    fn cut_gen(&self) -> u64 {
        self.cut().active.load(Acquire)
    }

    /// Whether a snapshot's cut holds.
    pub(crate) fn cut_active(&self) -> bool {
        self.cut_gen() != 0
    }

    /// Whether `seg` belongs to the running snapshot's cut and is not
    /// copied yet: nothing may be linked into it, and what dies in it is
    /// noted (see the module doc).
    #[inline]
    pub(crate) fn frozen(&self, seg: u32) -> bool {
        let g = self.cut_gen();
        g != 0 && self.seg(seg).snap.load(Relaxed) == g
    }

    /// Begins a snapshot's cut: marks every segment in use as part of it
    /// and publishes it. Returns the store's state at the cut (for the
    /// snapshot's header). Call [`Store::end_cut`] when the snapshot ends.
    pub fn begin_cut(&self) -> StoreImage {
        // With the flash tier, under its writer: nothing is written to
        // flash or repointed there while the cut is made, so each record is
        // from before the cut (its item's memory copy died before it) or
        // after it (its memory copy dies after, and is noted).
        let flash = self.flash_writer();
        *self.cut().flash.lock() = flash.as_ref().map(|w| w.checkpoint());
        self.cut().flash_died.lock().clear();
        let _g = self.cut().lock.lock();
        let gen = self.cut().gens.fetch_add(1, Relaxed) + 1;
        *self.cut().failed.lock() = None;
        *self.cut().snapshot_thread.lock() = Some(std::thread::current().id());
        self.cut().handed_off.store(0, Relaxed);
        self.cut().waited_ns.store(0, Relaxed);
        // Under the free lists' locks, which freeing a segment takes to
        // clear its mark: a segment is marked if and only if it is in use.
        self.budget().with_lists(|free, parked| {
            let mut in_use = vec![true; self.segs().len()];
            for &s in free.iter().chain(parked) {
                in_use[s as usize] = false;
            }
            for (m, used) in self.segs().iter().zip(in_use) {
                m.snap.store(if used { gen } else { 0 }, Relaxed);
            }
        });
        let image = self.store_image();
        self.cut().active.store(gen, Release);
        image
    }

    /// Ends the snapshot's cut (written, failed or abandoned): nothing is
    /// frozen any more, the died lists and any images not taken go.
    pub fn end_cut(&self) {
        self.cut().active.store(0, Release);
        for m in self.segs().iter() {
            m.snap.store(0, Relaxed);
            *m.died.lock() = Died::default();
        }
        self.cut().died.store(0, Relaxed);
        *self.cut().flash.lock() = None;
        self.cut().flash_died.lock().clear();
        let mut h = self.cut().handoff.lock();
        for img in h.images.drain(..) {
            self.release_dicts(img.dicts);
        }
        h.bytes = 0;
        self.cut().handoff_cv.notify_all();
    }

    /// Segments of the running (or last) snapshot's cut copied by the
    /// thread that freed them.
    pub fn handed_off(&self) -> u64 {
        self.cut().handed_off.load(Relaxed)
    }

    /// How long threads freeing segments of the running (or last)
    /// snapshot's cut waited for it to take their images.
    pub fn handoff_waited(&self) -> Duration {
        Duration::from_nanos(self.cut().waited_ns.load(Relaxed))
    }

    /// Whether a thread is waiting for the snapshot to take an image now:
    /// the snapshot is holding writers back.
    pub fn handoff_waiting(&self) -> bool {
        self.cut().waiting.load(Relaxed) > 0
    }

    /// Sets how long a thread waits for a snapshot that takes nothing
    /// before failing it (tests: [`HANDOFF_STALL`] otherwise).
    #[cfg(test)]
    pub(crate) fn set_handoff_stall(&self, d: Duration) {
        self.cut().stall_ms.store(d.as_millis().max(1) as u64, Relaxed);
    }

    fn handoff_stall(&self) -> Duration {
        match self.cut().stall_ms.load(Relaxed) {
            0 => HANDOFF_STALL,
            ms => Duration::from_millis(ms),
        }
    }

    /// Why the running snapshot failed, if it did (the hand-off queue or
    /// the died lists outgrew their bounds).
    pub fn cut_failed(&self) -> Option<String> {
        self.cut().failed.lock().clone()
    }

    /// Fails the running snapshot: it ends its cut, so that nothing more is
    /// noted or handed off, and the snapshot thread reports `why`.
    fn fail_cut(&self, why: String) {
        let mut f = self.cut().failed.lock();
        if f.is_none() {
            tracing::warn!("snapshot cannot keep up: {why}");
            *f = Some(why);
        }
        self.cut().active.store(0, Release);
        self.cut().handoff_cv.notify_all();
    }

    /// What the running snapshot has left to copy.
    pub fn cut_pending(&self) -> Pending {
        let g = self.cut_gen();
        let mut p = Pending::default();
        if g == 0 {
            return p;
        }
        let mut sealed = vec![false; self.segs().len()];
        for s in self.sealed_segments() {
            sealed[s.segment as usize] = true;
            if self.seg(s.segment).snap.load(Relaxed) == g {
                p.sealed.push(s);
            }
        }
        p.unsealed = self.segs().iter().zip(sealed).filter(|(m, sealed)| !sealed && m.snap.load(Relaxed) == g).count();
        p.sealed.sort_by_key(|s| s.epoch);
        p
    }

    /// The next image handed off by a thread that freed a segment of the
    /// cut, if any.
    pub fn take_handoff(&self) -> Option<SegmentImage> {
        let mut h = self.cut().handoff.lock();
        let img = h.images.pop_front()?;
        h.bytes -= image_bytes(&img);
        h.taken += 1;
        self.cut().handoff_cv.notify_all();
        Some(img)
    }

    /// Waits up to `d` for an image to be handed off (or the cut to fail).
    pub fn wait_handoff(&self, d: Duration) {
        let mut h = self.cut().handoff.lock();
        if h.images.is_empty() && self.cut_active() {
            self.cut().handoff_cv.wait_for(&mut h, d);
        }
    }

    /// Notes that the item at `off` of `seg`, linked until now, is being
    /// unlinked (under its bucket lock), if `seg` is frozen.
    #[inline]
    pub(crate) fn note_death(&self, seg: u32, off: usize) {
        if !self.frozen(seg) {
            return;
        }
        self.seg(seg).died.lock().offs.push(off as u32);
        let n = self.cut().died.fetch_add(1, Relaxed) + 1;
        if n * 4 > self.memory_limit() / DIED_MAX_DIV {
            self.fail_cut(format!(
                "{n} items of the snapshot's cut were overwritten or deleted before it copied them \
                 (more than a 1/{DIED_MAX_DIV} of the memory limit to remember)"
            ));
        }
    }

    /// Whether the item at `off` of frozen `seg` died after the cut (under
    /// its bucket lock).
    pub(crate) fn died_after_cut(&self, seg: u32, off: usize) -> bool {
        self.seg(seg).died.lock().contains(off as u32)
    }

    /// The offsets in `seg`'s died list, sorted (after [`Store::sort_died`]).
    pub(crate) fn died_list(&self, seg: u32) -> Vec<u32> {
        self.seg(seg).died.lock().offs.clone()
    }

    /// Sorts `seg`'s died list before a copy looks things up in it.
    pub(crate) fn sort_died(&self, seg: u32) {
        self.seg(seg).died.lock().sort();
    }

    /// `seg` is copied: it leaves the cut.
    pub(crate) fn copied(&self, seg: u32) {
        let m = self.seg(seg);
        m.snap.store(0, Relaxed);
        let d = std::mem::take(&mut *m.died.lock());
        self.cut().died.fetch_sub(d.offs.len(), Relaxed);
    }

    /// Called by the thread that cleared `seg` (taken off queue `q`), before
    /// it is reused: if it is frozen, its image (every item that died after
    /// the cut, which is every item live at it) goes to the snapshot.
    pub(crate) fn hand_off(&self, seg: u32, q: Queue) {
        if !self.frozen(seg) {
            return;
        }
        let mut img = SegmentImage::default();
        self.image_cleared(seg, q, &mut img);
        if img.live.is_empty() {
            self.release_dicts(img.dicts);
            self.copied(seg);
            return;
        }
        let need = image_bytes(&img);
        // A snapshot that writes while it copies (a test, the simulator)
        // would wait for itself.
        let own = *self.cut().snapshot_thread.lock() == Some(std::thread::current().id());
        let mut h = self.cut().handoff.lock();
        let room = own || self.wait_for_room(&mut h, need);
        if !room || !self.cut_active() {
            drop(h);
            self.release_dicts(img.dicts);
            return;
        }
        h.bytes += need;
        h.images.push_back(img);
        // Out of the cut only once queued: the snapshot ends when no
        // segment is left in the cut and the queue is empty, looked at in
        // that order.
        self.copied(seg);
        self.cut().handed_off.fetch_add(1, Relaxed);
        self.cut().handoff_cv.notify_all();
    }
}

impl Store {
    /// Waits until the hand-off queue has room for `need` more bytes (or
    /// the cut ends), for as long as the snapshot keeps taking images;
    /// fails the cut if it takes none for the stall bound. False if the
    /// cut is over (failed here or elsewhere).
    fn wait_for_room(&self, h: &mut MutexGuard<'_, Handoff>, need: usize) -> bool {
        let cap = (self.memory_limit() / HANDOFF_MAX_DIV).max(2 * self.arena().segment_size());
        if h.bytes == 0 || h.bytes + need <= cap {
            return self.cut_active();
        }
        let started = Instant::now();
        let stall = self.handoff_stall();
        let mut seen = h.taken;
        let mut deadline = started + stall;
        self.cut().waiting.fetch_add(1, Relaxed);
        while h.bytes > 0 && h.bytes + need > cap && self.cut_active() {
            let timed_out = self.cut().handoff_cv.wait_until(h, deadline).timed_out();
            if h.taken != seen {
                seen = h.taken;
                deadline = Instant::now() + stall;
            } else if timed_out {
                MutexGuard::unlocked(h, || {
                    self.fail_cut(format!(
                        "the snapshot took nothing from the {cap} bytes of segments freed before it copied \
                         them for {} ms",
                        stall.as_millis()
                    ))
                });
                break;
            }
        }
        self.cut().waiting.fetch_sub(1, Relaxed);
        self.cut().waited_ns.fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
        self.cut_active()
    }
}

/// The memory a handed-off image holds.
fn image_bytes(img: &SegmentImage) -> usize {
    img.bytes.len() + 4 * img.live.len() + 8 * img.write_times.len()
}
