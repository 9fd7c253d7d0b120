//! Taking segment images (`image.rs` says what one holds): sealed
//! segments copied out as bytes for a snapshot, and the compression
//! dictionaries their values name.
//!
//! **Consistency.** Sealed segments are not immutable: a live item's expiry
//! field and state byte change in place under its bucket lock (touch, gat,
//! recache tokens, `md I`), and items die (overwrite, delete) or move
//! (eviction, the cleaner) while a copy is made. So an image is taken item by
//! item: the segment is pinned first (under the eviction lock, so it cannot
//! be on its way to reuse), then each item's bytes are copied under its
//! bucket lock, where the index also says whether it is live. Every item of
//! an image is therefore exactly as it was at one moment during the copy,
//! with no torn field, and `live` lists the items that were linked at their
//! moment. Outside a snapshot's cut, items of different segments (or
//! different items of one) are copied at different moments; within it,
//! every item is as of the cut or later (below). Segments being written (a
//! worker's active segment, the eviction target) are not sealed and have no
//! image.
//!
//! While pinned, a segment is skipped by eviction and the cleaner
//! (`evict/`), which take the next candidate instead; a copy costs a
//! bucket lock per item, as eviction does.
//!
//! **Point in time.** While a snapshot's cut holds (`cut.rs`), liveness is
//! judged as of the cut: an item of a segment in the cut is copied if it
//! was linked at the cut, whether or not it still is; a segment of the cut
//! freed before its copy is copied by whoever frees it
//! ([`Store::image_cleared`], `cut.rs`'s hand-off). Restoring images is
//! `restore.rs`.

use std::sync::atomic::Ordering::*;

use crate::image::{Queue, Sealed, SegmentImage, StoreImage};
use crate::index::slot;
use crate::store::Store;

impl Store {
    /// The store-wide facts a snapshot records beside its segments.
    pub fn store_image(&self) -> StoreImage {
        StoreImage {
            epoch: self.epoch(),
            flush_epoch: self.epochs().flushed(),
            flush_at: self.epochs().flush_at(),
            now: self.clock().now(),
            unix_now: self.clock().unix_now(),
            segment_size: self.arena().segment_size(),
            item_size_max: self.config().item_size_max,
            cas: self.config().cas,
        }
    }

    /// The sealed segments now, each queue oldest first.
    pub fn sealed_segments(&self) -> Vec<Sealed> {
        let ev = self.lock_evict();
        let small = ev.small.iter().map(|&s| (s, Queue::Small));
        let main = ev.main.iter().map(|&s| (s, Queue::Main));
        small
            .chain(main)
            .map(|(segment, queue)| Sealed { segment, queue, epoch: self.seg(segment).epoch.load(Relaxed) })
            .collect()
    }

    /// Copies sealed segment `seg` into `out` (see the module doc for what
    /// the copy guarantees). False, with `out` untouched, if the segment is
    /// not sealed any more (it was evicted or compacted meanwhile), or if a
    /// snapshot's cut holds and `seg` is not in it (copied, or reused since).
    /// In a cut an item is live if it was linked at the cut (`cut.rs`), and
    /// the segment leaves the cut; outside one, if it is linked now.
    pub fn image(&self, seg: u32, out: &mut SegmentImage) -> bool {
        let (epoch, end, max_expire, write_times) = {
            let ev = self.lock_evict();
            out.queue = if ev.small.contains(&seg) {
                Queue::Small
            } else if ev.main.contains(&seg) {
                Queue::Main
            } else {
                return false;
            };
            // While a cut holds, only its segments: one freed since it was
            // listed may have been opened and sealed again after the cut.
            if self.cut_active() && !self.frozen(seg) {
                return false;
            }
            // Under the eviction lock: a sealed segment is not being
            // cleared, and while pinned it will not be.
            self.pin(seg);
            let m = self.seg(seg);
            let times = m.times.lock().to_vec();
            out.dicts = self.retain_dicts(m.dicts.load(Relaxed));
            (m.epoch.load(Relaxed), m.write_off.load(Acquire) as usize, m.max_expire.load(Relaxed), times)
        };
        let cut = self.frozen(seg);
        if cut {
            self.sort_died(seg);
        }
        out.segment = seg;
        out.epoch = epoch;
        out.max_expire = max_expire;
        out.write_times = write_times;
        out.bytes.clear();
        out.bytes.reserve(end);
        out.live.clear();
        let copy = |batch: &[(usize, usize, crate::index::Loc)]| {
            for &(at, len, loc) in batch {
                let granule_off = self.granules(at);
                let st = self.index().lock(loc.stripe);
                let linked = st.find(loc.bucket, |s| slot::seg(s) == seg && slot::off(s) == granule_off).is_some();
                // A death is noted under the item's bucket lock, held here.
                let live = linked || (cut && self.died_after_cut(seg, at));
                // SAFETY: under the item's bucket lock, which every writer
                // of its expiry and state holds (rules 2, 4); a dead item
                // is written by nobody.
                let item = unsafe { self.arena().bytes(seg, at, len) };
                if live {
                    out.live.push(at as u32);
                }
                out.bytes.resize(at, 0);
                out.bytes.extend_from_slice(item);
                drop(st);
            }
            true
        };
        // SAFETY: sealed and pinned, so every byte below `end` was written
        // before it was sealed and is not reused; headers and keys never
        // change (rule 4).
        unsafe { self.walk_prefetched(seg, end, copy) };
        out.bytes.resize(end, 0);
        if cut {
            self.copied(seg);
        }
        self.unpin(seg);
        true
    }

    /// Copies `seg`, which the caller took off queue `q` and cleared (no
    /// item links into it, so nobody writes its bytes), with the items
    /// that died after the cut as its live ones: those are the ones that
    /// were live at the cut (`cut.rs`, a segment freed before it is copied).
    pub(crate) fn image_cleared(&self, seg: u32, q: Queue, out: &mut SegmentImage) {
        let m = self.seg(seg);
        let end = m.write_off.load(Acquire) as usize;
        out.segment = seg;
        out.queue = q;
        out.epoch = m.epoch.load(Relaxed);
        out.max_expire = m.max_expire.load(Relaxed);
        out.write_times = m.times.lock().to_vec();
        out.dicts = self.retain_dicts(m.dicts.load(Relaxed));
        self.sort_died(seg);
        out.live.clear();
        out.live.extend(self.died_list(seg));
        out.bytes.clear();
        // SAFETY: owned by the caller and cleared: nothing links into it,
        // no reader has it pinned (`clear_segment` waited), and no writer
        // holds it; every byte below its write offset was written before
        // it was sealed (rule 1).
        out.bytes.extend_from_slice(unsafe { self.arena().bytes(seg, 0, end) });
    }
}

impl Store {
    /// One more reference to each dictionary in `bits` (the caller holds
    /// one through a pinned segment); the bits of those still loaded.
    fn retain_dicts(&self, bits: u64) -> u64 {
        let Some(codec) = self.codec() else { return 0 };
        let mut held = 0;
        for id in ids(bits) {
            if codec.retain(id) {
                held |= 1 << id;
            }
        }
        held
    }

    /// Gives back the dictionary references of images ([`SegmentImage::dicts`]).
    pub fn release_dicts(&self, bits: u64) {
        if let Some(codec) = self.codec() {
            ids(bits).for_each(|id| codec.release(id));
        }
    }

    /// The dictionaries in `bits` (held by the caller), and the current
    /// one, as a snapshot keeps them.
    pub fn saved_dicts(&self, bits: u64) -> Vec<strata_compress::SavedDict> {
        let Some(codec) = self.codec() else { return Vec::new() };
        codec.export().into_iter().filter(|d| d.current || bits & (1 << d.id) != 0).collect()
    }
}

/// The ids whose bits are set in `bits`.
fn ids(mut bits: u64) -> impl Iterator<Item = u8> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let id = bits.trailing_zeros() as u8;
            bits &= bits - 1;
            id
        })
    })
}
