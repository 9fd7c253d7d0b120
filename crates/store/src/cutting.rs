//! What a running snapshot's cut does (its state and the promise it keeps
//! are in `cut.rs`): beginning and ending the cut, noting items that die
//! after it, freezing its segments, and handing off a segment of the cut
//! freed before the snapshot copied it.

use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use crate::cut::{Died, Handoff, Pending, DIED_MAX_DIV, HANDOFF_MAX_DIV, HANDOFF_STALL};
use crate::image::{Queue, SegmentImage, StoreImage};
use crate::store::Store;

impl Store {
    /// The generation of the running snapshot's cut, 0 if none: looked at
    /// once where several decisions must agree ([`Store::frozen_in`]).
    #[inline]
    pub(crate) fn cut_gen(&self) -> u64 {
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
        self.frozen_in(self.cut_gen(), seg)
    }

    /// [`Store::frozen`] as of cut `g` (0: none), which the caller looked
    /// at once for several decisions that must agree.
    #[inline]
    pub(crate) fn frozen_in(&self, g: u64, seg: u32) -> bool {
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
            // Under each died lock (as `copied` and `end_cut` clear it): a
            // note for an earlier cut that never ended is dropped or refused.
            for (m, used) in self.segs().iter().zip(in_use) {
                let mut died = m.died.lock();
                *died = Died::default();
                m.snap.store(if used { gen } else { 0 }, Relaxed);
            }
            self.cut().died.store(0, Relaxed);
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
            // Under the died lock, as in `copied`.
            let mut died = m.died.lock();
            m.snap.store(0, Relaxed);
            *died = Died::default();
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
    /// unlinked (under its bucket lock), if `seg` is frozen in cut `g`
    /// ([`Store::cut_gen`], looked at after the unlink).
    #[inline]
    pub(crate) fn note_death(&self, g: u64, seg: u32, off: usize) {
        if !self.frozen_in(g, seg) {
            return;
        }
        #[cfg(test)]
        crate::cut::after_cut_look();
        let m = self.seg(seg);
        let mut died = m.died.lock();
        // Again under the lock, which the copy and the cut's end take to
        // clear the mark: a note made after them would stay in the list,
        // and the next cut would save an item that was dead at it.
        if m.snap.load(Relaxed) != g {
            return;
        }
        died.offs.push(off as u32);
        // Counted under the lock too, as `copied` uncounts it.
        let n = self.cut().died.fetch_add(1, Relaxed) + 1;
        drop(died);
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
        let mut died = m.died.lock();
        m.snap.store(0, Relaxed);
        let d = std::mem::take(&mut *died);
        // Under the lock: a cut's end or beginning, which resets the count,
        // takes it too, so the count never goes below what is listed.
        self.cut().died.fetch_sub(d.offs.len(), Relaxed);
        drop(died);
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
