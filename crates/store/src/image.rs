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
//!
//! **Holds.** A snapshot lists the sealed segments and copies them one by
//! one; meanwhile the cleaner would move a listed segment's live items
//! into a copy target that is not sealed, and so in no image: the snapshot
//! would miss items that were live when it started (with a durability
//! log, items whose log records it then deletes). So from
//! [`Store::hold_for_snapshot`] to [`Store::release_snapshot`] every
//! sealed segment, and every segment sealed meanwhile, is *held* until it
//! is copied: the cleaner does not pick it, unless a write would otherwise
//! fail (with `-M`, where nothing is evicted). Eviction still may (memory
//! must be found, and an evicted item is gone from the cache anyway). The
//! items either copies forward out of a held segment are journaled again,
//! so the durability log keeps them.

use std::sync::atomic::Ordering::*;

use crate::clock::Clock;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentImage {
    pub segment: u32,
    /// The queue it was on, which a restored copy goes back to.
    pub queue: Queue,
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
    /// Compression dictionaries its values may name, one bit per id. The
    /// image holds a reference to each (taken while the segment held its
    /// own), for the caller to give back with [`Store::release_dicts`]
    /// once the dictionaries are saved: the segment may be evicted and a
    /// dictionary dropped (its id reused) before the snapshot is done.
    pub dicts: u64,
}

impl Default for SegmentImage {
    fn default() -> SegmentImage {
        SegmentImage {
            segment: 0,
            queue: Queue::Small,
            epoch: 0,
            bytes: Vec::new(),
            live: Vec::new(),
            max_expire: 0,
            write_times: Vec::new(),
            dicts: 0,
        }
    }
}

/// What [`Store::restore`] made of one segment image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Items linked (counting those that replaced an earlier image's copy).
    pub items: u64,
    /// Live items not brought back: expired, flushed, or naming a
    /// compression dictionary that is not loaded.
    pub dropped: u64,
    /// Live offsets that did not point at a well-formed item (never
    /// produced by [`Store::image`]; a damaged file that passed its
    /// checksum would be one).
    pub malformed: u64,
    /// Whether the image took a segment (false: nothing in it was live).
    pub used_segment: bool,
}

/// Why [`Store::restore`] refused an image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// No free segment within the memory limit.
    #[error("no free segment within the memory limit")]
    Full,
    /// More bytes than a segment holds.
    #[error("segment image of {0} bytes is larger than a segment")]
    TooLarge(usize),
    /// The caller's fill of the segment's bytes failed.
    #[error("segment bytes could not be read or failed their checksum")]
    Rejected,
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
            epoch: self.epoch(),
            flush_epoch: self.flush_epoch(),
            flush_at: self.flush_at(),
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
    /// not sealed any more (it was evicted or compacted meanwhile).
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
            // Under the eviction lock: a sealed segment is not being
            // cleared, and while pinned it will not be.
            self.pin(seg);
            let m = self.seg(seg);
            let times = m.times.lock().to_vec();
            out.dicts = self.retain_dicts(m.dicts.load(Relaxed));
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
            let Some(h) = (unsafe { self.arena().header(seg, scan, end) }) else { break };
            // SAFETY: as above.
            let key = unsafe { self.arena().bytes(seg, scan + h.header_len(), usize::from(h.klen)) };
            let loc = self.index().locate(key);
            let granule_off = self.granules(scan);
            {
                let st = self.index().lock(loc.stripe);
                let live = st.find(loc.bucket, |s| slot::seg(s) == seg && slot::off(s) == granule_off).is_some();
                // SAFETY: under the item's bucket lock, which every writer
                // of its expiry and state holds (rules 2, 4); a dead item
                // is written by nobody.
                let item = unsafe { self.arena().bytes(seg, scan, h.total_len()) };
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
        self.seg(seg).held.store(false, Relaxed);
        self.unpin(seg);
        true
    }

    /// A snapshot begins: holds every sealed segment, and every one sealed
    /// from now on, until it is copied ([`Store::image`]) or the snapshot
    /// ends (see "Holds" in the module doc).
    pub fn hold_for_snapshot(&self) {
        let ev = self.lock_evict();
        self.set_snapshotting(true);
        for &s in ev.small.iter().chain(ev.main.iter()) {
            self.seg(s).held.store(true, Relaxed);
        }
    }

    /// The snapshot ended (written or failed): nothing is held any more.
    pub fn release_snapshot(&self) {
        let _ev = self.lock_evict();
        self.set_snapshotting(false);
        for m in self.segs().iter() {
            m.held.store(false, Relaxed);
        }
    }

    /// Segments held for the running snapshot and not copied yet.
    pub fn held_segments(&self) -> usize {
        self.segs().iter().filter(|m| m.held.load(Relaxed)).count()
    }
}

impl Store {
    /// Continues a snapshot's store before its segments are restored:
    /// epochs start above `epoch` (every CAS derived from here on is above
    /// every CAS derived before), and a `flush_all` done or scheduled
    /// before the snapshot stays in effect. Call before any write.
    pub fn resume(&self, epoch: u64, flush_epoch: u64, flush_at: u32) {
        self.raise_epochs(epoch, flush_epoch);
        if flush_at == 0 {
            return;
        }
        if flush_at > self.clock().now() {
            self.set_flush_at(flush_at);
        } else {
            // It came due while the server was down: everything the
            // snapshot holds was written before it.
            self.flush_now();
        }
    }

    /// The segments the next `n` restores will take, in order (for
    /// [`Store::prefault`] on another thread, ahead of them).
    pub fn next_free_segments(&self, n: usize) -> Vec<u32> {
        self.budget().next_free(n)
    }

    /// Faults in segment `seg`'s pages ahead of a restore into it: a load
    /// of a large snapshot spends half its time in the kernel zeroing
    /// fresh pages, which another core can do meanwhile.
    pub fn prefault(&self, seg: u32) {
        if (seg as usize) < self.segs().len() {
            self.note_paged(seg);
            self.arena().populate(seg);
        }
    }

    /// Backs `segs` (the ones the next restores take, in order) with
    /// transparent huge pages for a bulk restore (`on`), and afterwards
    /// (`!on`) lets pages faulted later be ordinary again: half a large
    /// load's work is the kernel faulting the segments' pages in, and
    /// 2 MiB pages cut that by half (`Arena::advise_huge_range`).
    pub fn huge_pages_for_restore(&self, segs: &[u32], on: bool) {
        let (Some(&lo), Some(&hi)) = (segs.iter().min(), segs.iter().max()) else { return };
        self.arena().advise_huge_range(lo, hi, on);
    }

    /// Segments a restore can still fill: free ones within the memory
    /// budget, less the cleaner's reserve for `workers` workers.
    pub fn segments_available(&self, workers: usize) -> usize {
        let budget = self.segment_budget() as usize;
        budget.saturating_sub(self.budget().in_use() as usize + workers * crate::evict::RESERVE_SEGMENTS)
    }

    /// Brings a segment image back: its bytes into a free segment at the
    /// same offsets with the same epoch (so every derived CAS is what it
    /// was), and its live items linked into the index. An item already
    /// linked by an earlier image is replaced: images are restored in the
    /// order they were copied, and a key live in two of them was
    /// overwritten between the two copies. Expired and flushed items stay
    /// out. The segment goes back on its queue, sealed.
    ///
    /// For start-up, before workers write: the clock must be the one the
    /// image's times were taken on (`Clock::resumed`) and [`Store::resume`]
    /// called first.
    pub fn restore(&self, img: &SegmentImage) -> Result<Restored, RestoreError> {
        self.restore_with(img, img.bytes.len(), &mut |dst| {
            dst.copy_from_slice(&img.bytes);
            true
        })
    }

    /// [`Store::restore`] with the segment's `len` bytes written by `fill`
    /// straight into the segment (a loader reads them from its file there,
    /// without a copy in between); `img.bytes` is not used. If `fill`
    /// returns false (its read failed or the bytes fail their checksum),
    /// the segment is given back and nothing is linked:
    /// [`RestoreError::Rejected`].
    pub fn restore_with(
        &self,
        img: &SegmentImage,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> Result<Restored, RestoreError> {
        if len > self.arena().segment_size() {
            return Err(RestoreError::TooLarge(len));
        }
        let now = self.clock().now();
        let mut r = Restored::default();
        let whole_gone = img.epoch <= self.flush_epoch()
            || (img.max_expire != crate::segments::NEVER && Clock::is_expired(img.max_expire, now));
        if whole_gone || img.live.is_empty() {
            r.dropped = img.live.len() as u64;
            return Ok(r);
        }
        let seg = self.pop_free(false).ok_or(RestoreError::Full)?;
        self.note_paged(seg);
        let m = self.seg(seg);
        // SAFETY: just taken off the free list: no item links into it, no
        // reader has it pinned, and no writer holds it (rule 1).
        let filled = fill(unsafe { self.arena().bytes_mut(seg, 0, len) });
        if !filled {
            self.retire(seg);
            return Err(RestoreError::Rejected);
        }
        m.live_items.store(0, Relaxed);
        m.live_bytes.store(0, Relaxed);
        m.max_expire.store(img.max_expire, Relaxed);
        m.epoch.store(img.epoch, Relaxed);
        {
            let mut times = m.times.lock();
            times.clear();
            for &(off, t) in &img.write_times {
                times.note(off, t);
            }
            m.last_mark.store(img.write_times.last().map_or(0, |&(_, t)| t), Relaxed);
        }
        m.write_off.store(len as u32, Release);
        let granule = self.granule();
        let mut next_free = 0usize;
        // The items to link and where their keys hash to, a batch at a
        // time: each link waits on its index bucket, a cache miss, and
        // asking for a batch's buckets first overlaps those waits (as
        // `Worker::prefetch` does for a multi-get).
        const BATCH: usize = 16;
        let mut batch: Vec<(usize, crate::index::Loc)> = Vec::with_capacity(BATCH);
        let mut live = img.live.iter().peekable();
        while live.peek().is_some() {
            batch.clear();
            for &off in live.by_ref() {
                let off = off as usize;
                // SAFETY: the segment is this thread's alone until it is
                // sealed below, and its bytes below `len` were all written above.
                let header = (off >= next_free && off & (granule - 1) == 0)
                    .then(|| unsafe { self.arena().header(seg, off, len) });
                let Some(Some(h)) = header else {
                    r.malformed += 1;
                    continue;
                };
                next_free = off + h.total_len();
                // SAFETY: as above; `header` checked that the item ends by `len`.
                let Some(it) = (unsafe { self.arena().item(seg, off) }) else {
                    r.malformed += 1;
                    continue;
                };
                if it.key().is_empty() {
                    r.malformed += 1;
                    continue;
                }
                if Clock::is_expired(it.expiry(), now) || !self.hold_dict(seg, &it) {
                    r.dropped += 1;
                    continue;
                }
                let loc = self.index().locate(it.key());
                self.index().prefetch(loc);
                batch.push((off, loc));
                if batch.len() == BATCH {
                    break;
                }
            }
            for &(off, loc) in &batch {
                // SAFETY: as above; checked when it was batched.
                let Some(it) = (unsafe { self.arena().item(seg, off) }) else { continue };
                let new = slot::pack(loc.tag, 0, seg, self.granules(off));
                let mut st = self.index().lock(loc.stripe);
                match self.find(&st, loc, it.key()) {
                    Some((pos, old)) => {
                        st.set(pos, new);
                        self.unaccount(&mut st, old);
                    }
                    None => {
                        let before = st.footprint();
                        st.insert(loc.bucket, new);
                        if st.wants_growth() {
                            // Restored before the flash tier holds anything:
                            // every slot is a memory one.
                            self.index().grow(loc.stripe, &mut st, |s, _| {
                                Some((self.item_at(s).map_or(0, |it| self.index().locate(it.key()).bucket), s))
                            });
                        }
                        self.index().note_footprint(before, st.footprint());
                    }
                }
                self.account(&mut st, new);
                r.items += 1;
            }
        }
        if r.items == 0 {
            self.seg(seg).write_off.store(0, Relaxed);
            self.retire(seg);
        } else {
            r.used_segment = true;
            self.seal(seg, img.queue);
        }
        Ok(r)
    }

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

    /// Loads a snapshot's dictionaries before its segments; returns the
    /// ids loaded, each holding a reference for the caller to give back
    /// with [`Store::release_dicts`] after the segments are restored.
    /// Without compression nothing is loaded, and compressed items stay
    /// out (their values cannot be read).
    pub fn load_dicts(&self, dicts: &[strata_compress::SavedDict]) -> u64 {
        let Some(codec) = self.codec() else { return 0 };
        let mut held = 0;
        for d in dicts {
            if codec.import(d).is_ok() {
                held |= 1 << d.id;
            }
        }
        held
    }

    /// For a compressed item being restored into `seg`: makes the segment
    /// hold its dictionary. False if that dictionary is not loaded (the
    /// snapshot lacked it, or compression is off), so the item cannot be
    /// read and stays out.
    fn hold_dict(&self, seg: u32, it: &crate::item::Item<'_>) -> bool {
        if !it.compressed() {
            return true;
        }
        let Some(codec) = self.codec() else { return false };
        let id = strata_compress::dict_id(it.value());
        if !codec.retain(id) {
            return false;
        }
        self.attach_dict(seg, id);
        codec.release(id);
        true
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
