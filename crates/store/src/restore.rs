//! Restoring a snapshot at start: segment images brought back into free
//! segments at the same offsets and epochs, their live items linked; and,
//! once no free segment is left, the remaining images' live items written
//! one by one through the write path ([`Restorer`]), so that the cleaner
//! wins back the dead bytes of the images restored whole before anything
//! live is evicted (DESIGN §7: "a load keeps every item that was live in
//! the snapshot while live items fit `-m`").

use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use crate::bulk_link::{LinkChunks, Links};
use crate::clock::Clock;
use crate::image::SegmentImage;
use crate::item::{encoded_len, write_head, Fields, Header, Item};
use crate::segments::{ttl_class, Active, Placed};
use crate::store::{Counters, SegTally, Store};
use crate::types::StoreError;

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

impl Store {
    /// Continues a snapshot's store before its segments are restored:
    /// epochs start above `epoch` (every CAS derived from here on is above
    /// every CAS derived before), and a `flush_all` done or scheduled
    /// before the snapshot stays in effect. Call before any write.
    pub fn resume(&self, epoch: u64, flush_epoch: u64, flush_at: u32) {
        self.epochs().raise(epoch, flush_epoch);
        if flush_at == 0 {
            return;
        }
        if flush_at > self.clock().now() {
            self.epochs().set_flush_at(flush_at);
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
        budget.saturating_sub(self.budget().in_use() as usize + workers * crate::segments::RESERVE_SEGMENTS)
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
        let mut bulk = self.bulk_restore();
        let r = bulk.restore_with(img, len, fill);
        bulk.finish();
        r
    }

    /// A [`BulkRestore`], for a load of many images.
    pub fn bulk_restore(&self) -> BulkRestore<'_> {
        // A chunk about as large as the index's main table: a flush's
        // sorted links then land about one per bucket, each table walked
        // once in address order. At most 2^20 (32 MiB of entries, as much
        // again while they are sorted), outside `-m` and only while a
        // load runs.
        self.bulk_restore_chunked(self.index().main_buckets().clamp(1 << 12, 1 << 20))
    }

    /// A [`BulkRestore`] that links every `chunk` items.
    pub(crate) fn bulk_restore_chunked(&self, chunk: usize) -> BulkRestore<'_> {
        BulkRestore { store: self, links: Links::new(chunk), tally: SegTally::default() }
    }

    /// Loads a snapshot's dictionaries before    /// Loads a snapshot's dictionaries before its segments; returns the
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

    /// A restored segment's counters, epoch and write times, as `img`
    /// says, its first `len` bytes written.
    fn restore_meta(&self, seg: u32, img: &SegmentImage, len: usize) {
        let m = self.seg(seg);
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
        // A dictionary the segment holds already is loaded, and stays so
        // while the segment does: the two atomics below were a sixth of a
        // compressed load's time.
        if self.seg(seg).dicts.load(Relaxed) & (1u64 << (id & strata_compress::MAX_DICT_ID)) != 0 {
            return true;
        }
        if !codec.retain(id) {
            return false;
        }
        self.attach_dict(seg, id);
        codec.release(id);
        true
    }
}

/// Restores segment images as [`Store::restore_with`] does, one after
/// another, but links their items into the index a chunk at a time, in
/// bucket order ([`Links`]): a load of millions of items spent most of
/// its time waiting on each link's buckets. Until [`BulkRestore::finish`]
/// (or the drop) the last images' items may not be linked yet: nothing
/// else may use the store meanwhile.
pub struct BulkRestore<'a> {
    store: &'a Store,
    links: Links,
    tally: SegTally,
}

impl BulkRestore<'_> {
    /// [`Store::restore_with`], the links put off.
    pub fn restore_with(
        &mut self,
        img: &SegmentImage,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> Result<Restored, RestoreError> {
        let st = self.store;
        if len > st.arena().segment_size() {
            return Err(RestoreError::TooLarge(len));
        }
        let now = st.clock().now();
        let mut r = Restored::default();
        let whole_gone = img.epoch <= st.epochs().flushed()
            || (img.max_expire != crate::segments::NEVER && Clock::is_expired(img.max_expire, now));
        if whole_gone || img.live.is_empty() {
            r.dropped = img.live.len() as u64;
            return Ok(r);
        }
        let seg = st.pop_free(false).ok_or(RestoreError::Full)?;
        st.note_paged(seg);
        // SAFETY: just taken off the free list: no item links into it, no
        // reader has it pinned, and no writer holds it (rule 1).
        let filled = fill(unsafe { st.arena().bytes_mut(seg, 0, len) });
        if !filled {
            st.retire(seg);
            return Err(RestoreError::Rejected);
        }
        st.restore_meta(seg, img, len);
        let granule = st.granule();
        let mut next_free = 0usize;
        self.tally.clear();
        for &off in &img.live {
            let off = off as usize;
            // SAFETY: the segment is this thread's alone until it is
            // sealed below, and its bytes below `len` were all written above.
            let item = (off >= next_free && off & (granule - 1) == 0)
                .then(|| unsafe { st.arena().item_within(seg, off, len) });
            let Some(Some(it)) = item else {
                r.malformed += 1;
                continue;
            };
            next_free = off + it.header.total_len();
            if it.key().is_empty() {
                r.malformed += 1;
                continue;
            }
            if Clock::is_expired(it.expiry(), now) || !st.hold_dict(seg, &it) {
                r.dropped += 1;
                continue;
            }
            let (len, class_len, plain, stored) = st.sizes_of(&it);
            st.count_size(class_len);
            self.tally.add(st.bands().band_of(class_len), len);
            self.links.push(st, seg, st.granules(off), st.index().locate(it.key()), (len, plain, stored));
            r.items += 1;
        }
        if r.items == 0 {
            st.seg(seg).write_off.store(0, Relaxed);
            st.retire(seg);
        } else {
            // Every item counted here is linked by the flush, as new or
            // over an earlier image's version (whose segment's counts the
            // link takes it out of then).
            st.account_segment(seg, &self.tally);
            r.used_segment = true;
            st.seal(seg, img.queue);
        }
        Ok(r)
    }

    /// From now on full chunks of links are made by whichever thread runs
    /// the returned [`LinkChunks`] (in order, one at a time), while this
    /// one restores the next images; [`BulkRestore::finish`] waits for it.
    pub fn link_elsewhere(&mut self) -> LinkChunks {
        self.links.hand_off()
    }

    /// Links every item restored so far.
    pub fn finish(&mut self) {
        self.links.flush(self.store);
    }
}

impl Drop for BulkRestore<'_> {
    /// A restore's items are linked whatever the caller does.
    fn drop(&mut self) {
        if !self.links.is_empty() {
            self.finish();
        }
    }
}

/// Restores segment images item by item, once no free segment is left to
/// restore them whole ([`Store::restore_with`] answers
/// [`RestoreError::Full`]): each live item is written with its CAS, flags,
/// expiry, state and write time into segments the restorer takes like a
/// writer, through the cleaner and eviction. So the dead bytes of the images
/// restored whole are won back before anything live is evicted, and only
/// when the live items do not fit the memory limit are the oldest evicted
/// (in eviction's order: images are restored oldest first). A key already
/// restored is replaced, as by [`Store::restore`].
pub struct Restorer<'a> {
    store: &'a Store,
    active: Active,
}

impl Store {
    /// A [`Restorer`] for the rest of a load.
    pub fn restorer(&self) -> Restorer<'_> {
        let counters = Arc::new(Counters::default());
        self.roster().joined(&counters);
        let mut active = Active::new(self, counters, false);
        active.restoring = true;
        Restorer { store: self, active }
    }
}

impl Restorer<'_> {
    /// Restores the live items of `img`, whose segment bytes are `bytes`
    /// (`img.bytes` is not used).
    pub fn restore(&mut self, img: &SegmentImage, bytes: &[u8]) -> Result<Restored, RestoreError> {
        let st = self.store;
        let now = st.clock().now();
        let mut r = Restored::default();
        if img.epoch <= st.epochs().flushed()
            || (img.max_expire != crate::segments::NEVER && Clock::is_expired(img.max_expire, now))
        {
            r.dropped = img.live.len() as u64;
            return Ok(r);
        }
        let mut next_free = 0usize;
        for &off in &img.live {
            let off = off as usize;
            let Some(it) = (off >= next_free).then(|| item_in(bytes, off)).flatten() else {
                r.malformed += 1;
                continue;
            };
            next_free = off + it.header.total_len();
            if Clock::is_expired(it.expiry(), now) {
                r.dropped += 1;
                continue;
            }
            let cas = it.explicit_cas().unwrap_or_else(|| st.cas_at(img.epoch, off));
            let written = img.write_times.iter().take_while(|&&(o, _)| o as usize <= off).last().map_or(0, |&(_, t)| t);
            match self.put(&it, cas, written) {
                Ok(true) => r.items += 1,
                Ok(false) => r.dropped += 1,
                Err(_) => return Err(RestoreError::Full),
            }
        }
        Ok(r)
    }

    /// Items the restorer's writes evicted (live data past the limit).
    pub fn evicted(&self) -> u64 {
        self.active.counters.evictions.load(Relaxed)
    }

    /// Writes one item; false if it names a dictionary that is not loaded.
    fn put(&mut self, it: &Item<'_>, cas: u64, written: u32) -> Result<bool, StoreError> {
        let st = self.store;
        let fields = Fields { cas: Some(cas), ..it.fields() };
        let len = encoded_len(it.key().len(), it.value().len(), &fields);
        let class_len = st.class_len_of(it, crate::store::sizes(it).1);
        let (seg, off) =
            self.active.reserve(st, ttl_class(fields.expiry, st.clock().now()), (len, class_len), written)?;
        // SAFETY: freshly reserved by this restorer in its active segment.
        let dst = unsafe { st.arena().bytes_mut(seg, off, len) };
        let v = write_head(dst, it.key(), it.value().len(), &fields);
        dst[v..].copy_from_slice(it.value());
        if !st.hold_dict(seg, it) {
            self.active.unreserve(st, seg, off, len);
            return Ok(false);
        }
        st.note_expiry(seg, fields.expiry);
        let loc = st.index().locate(it.key());
        let mut stripe = st.index().lock(loc.stripe);
        let found = st.find(&stripe, loc, it.key());
        st.link(&mut stripe, loc, found, Placed { seg, off, len }, 0, &self.active.counters);
        Ok(true)
    }
}

impl Drop for Restorer<'_> {
    fn drop(&mut self) {
        self.active.seal_all(self.store);
    }
}

/// The whole item at `off` of a segment's `bytes`, if one is there.
fn item_in(bytes: &[u8], off: usize) -> Option<Item<'_>> {
    let b = bytes.get(off..)?;
    let n = Header::lengths_len(*b.get(1)?);
    let h = Header::parse_lengths(b.get(..n)?);
    let whole = b.get(..h.total_len())?;
    let it = Item::new(h, whole);
    (!it.key().is_empty()).then_some(it)
}
