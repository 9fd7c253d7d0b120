//! Segment images: sealed segments copied out as bytes, with what a
//! snapshot needs to bring them back (DESIGN §7): each segment's epoch,
//! write-time marks, latest expiry and which of its items were live, and
//! for the store as a whole the epoch counter, the flush epoch and the
//! clock.
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
//! moment. Items of different segments (or different items of one) are
//! copied at different moments: a key overwritten during the snapshot may
//! appear live in two images; the snapshot format decides which wins (its
//! issue: sealing every writer's segments when the snapshot starts makes
//! epoch order write order). Segments being written (a worker's active
//! segment, the eviction target) are not sealed and have no image.
//!
//! While pinned, a segment is skipped by eviction and the cleaner
//! (`evict.rs`), which take the next candidate instead; a copy costs a
//! bucket lock per item, as eviction does.

use std::sync::atomic::Ordering::*;

use crate::index::slot;
use crate::store::Store;

/// Which eviction queue a sealed segment is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// New writes (S3-FIFO's small queue).
    Small,
    /// Items copied forward (the main queue).
    Main,
}

/// A sealed segment, for [`Store::image`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    pub segment: u32,
    pub queue: Queue,
    /// When it was opened for writing (segments are sealed in this order
    /// per writer, and derived CAS values contain it).
    pub epoch: u64,
}

/// A copy of one sealed segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentImage {
    pub segment: u32,
    pub epoch: u64,
    /// The segment's bytes up to its write offset: items in the layout of
    /// `item.rs`, each at an offset aligned to the store's granule.
    pub bytes: Vec<u8>,
    /// Offsets in `bytes` of the items that were live when copied.
    pub live: Vec<u32>,
    /// Latest expiry of any item written into it (`u32::MAX`: one never
    /// expires), server-relative.
    pub max_expire: u32,
    /// Write-time marks `(offset, second)`: an item was written at the
    /// mark at or before its offset.
    pub write_times: Vec<(u32, u32)>,
}

/// What a snapshot needs of the store as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreImage {
    /// Epochs handed out so far: a restored store must start above it, so
    /// that no CAS derived later equals one derived before.
    pub epoch: u64,
    /// Segments opened at or before this epoch hold only flushed items.
    pub flush_epoch: u64,
    /// A `flush_all` scheduled for this server-relative time (0: none).
    pub flush_at: u32,
    /// The clock: server-relative now, and the unix time it stands for.
    pub now: u32,
    pub unix_now: i64,
    pub segment_size: usize,
    pub item_size_max: usize,
    pub cas: bool,
}

impl Store {
    /// The store-wide facts a snapshot records beside its segments.
    pub fn store_image(&self) -> StoreImage {
        StoreImage {
            epoch: self.epoch.load(Relaxed),
            flush_epoch: self.flush_epoch.load(Relaxed),
            flush_at: self.flush_at.load(Relaxed),
            now: self.clock.now(),
            unix_now: self.clock.unix_now(),
            segment_size: self.arena.segment_size(),
            item_size_max: self.cfg.item_size_max,
            cas: self.cfg.cas,
        }
    }

    /// The sealed segments now, each queue oldest first.
    pub fn sealed_segments(&self) -> Vec<Sealed> {
        let ev = self.evict.lock();
        let small = ev.small.iter().map(|&s| (s, Queue::Small));
        let main = ev.main.iter().map(|&s| (s, Queue::Main));
        small
            .chain(main)
            .map(|(segment, queue)| Sealed { segment, queue, epoch: self.segs[segment as usize].epoch.load(Relaxed) })
            .collect()
    }

    /// Copies sealed segment `seg` into `out` (see the module doc for what
    /// the copy guarantees). False, with `out` untouched, if the segment is
    /// not sealed any more (it was evicted or compacted meanwhile).
    pub fn image(&self, seg: u32, out: &mut SegmentImage) -> bool {
        let (epoch, end, max_expire, write_times) = {
            let ev = self.evict.lock();
            if !ev.small.contains(&seg) && !ev.main.contains(&seg) {
                return false;
            }
            // Under the eviction lock: a sealed segment is not being
            // cleared, and while pinned it will not be.
            self.pin(seg);
            let m = &self.segs[seg as usize];
            let times = m.times.lock().to_vec();
            (m.epoch.load(Relaxed), m.write_off.load(Acquire) as usize, m.max_expire.load(Relaxed), times)
        };
        out.segment = seg;
        out.epoch = epoch;
        out.max_expire = max_expire;
        out.write_times = write_times;
        out.bytes.clear();
        out.bytes.reserve(end);
        out.live.clear();
        let mut scan = 0;
        while scan < end {
            // SAFETY: sealed and pinned, so every byte below `end` was
            // written before it was sealed and is not reused; `header` and
            // the key read only bytes that never change (rule 4).
            let Some(h) = (unsafe { self.arena.header(seg, scan, end) }) else { break };
            // SAFETY: as above.
            let key = unsafe { self.arena.bytes(seg, scan + h.header_len(), usize::from(h.klen)) };
            let loc = self.index.locate(key);
            let granule_off = (scan >> self.granule_shift) as u32;
            {
                let st = self.index.lock(loc.stripe);
                let live = st.find(loc.bucket, |s| slot::seg(s) == seg && slot::off(s) == granule_off).is_some();
                // SAFETY: under the item's bucket lock, which every writer
                // of its expiry and state holds (rules 2, 4); a dead item
                // is written by nobody.
                let item = unsafe { self.arena.bytes(seg, scan, h.total_len()) };
                if live {
                    out.live.push(scan as u32);
                }
                out.bytes.extend_from_slice(item);
            }
            let next = (scan + self.aligned(h.total_len())).min(end);
            out.bytes.resize(next, 0);
            scan = next;
        }
        out.bytes.resize(end, 0);
        self.unpin(seg);
        true
    }
}
