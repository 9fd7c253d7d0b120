//! The flash tier, store side: evicted items go to flash instead of away,
//! their index slots repointed there, and come back into memory when a
//! request needs them.
//!
//! **Out.** Eviction (`evict/`) hands each live item of a victim that is
//! at least `ext_item_size` bytes to the worker's [`FlashBatch`], as a
//! checksummed record with its CAS made explicit. The batch is written
//! once it holds a write buffer's worth, and at the end of the victim, by
//! the log's one writer ([`strata_flash::Writer`]); then each item's slot
//! is repointed at its record, if the slot still points at the item (a
//! write since leaves the record dead). Nothing is written into a batched
//! item in place meanwhile (`SegMeta::batched`: a set, a touch, a recache
//! token each write a new version then), so an item the slot still points
//! at is what its record holds. The victim is not reused before
//! that, so a reader finds every item in memory or on flash, never
//! neither. A failed write evicts the batch's items, as without flash.
//!
//! **Early, by age.** With `ext_item_age` set, the background reclaimer
//! also sends items to flash before memory is full (`Store::age_to_flash`,
//! at most once a second): a sealed segment whose newest item was written
//! at least that long ago (its `TimeLog`) has its items batched for flash,
//! but for those read since written or copied forward (the slot's read
//! count), too small, compressed or expired, which stay. memcached counts
//! the age from the last access; strata keeps no access time per item, so
//! a pass is a CLOCK hand: a read item it keeps is marked (its read count
//! set to [`READ_BEFORE_PASS`]) and the segment is gone through again an
//! `ext_item_age` later, when an item not read meanwhile goes
//! (`SegMeta::aged_at`). An open segment is not gone through; when none
//! sealed is old enough but an open one is, its worker is asked to seal
//! it (`seal.rs`). The segment stays where it is, its live bytes fewer:
//! the cleaner takes it back like any mostly dead segment. It is pinned
//! while its bytes are read (not across the write), and each pending item
//! carries the segment's epoch, so an item whose segment was cleared and
//! reused meanwhile is not repointed. A failed write leaves the items in
//! memory.
//!
//! **The oldest region goes first.** When the ring of regions comes round
//! to one still holding records, its records are read back and every slot
//! that still points at one is unlinked, but for the items read since
//! they went to flash: those are written again at the head (the region
//! just freed) and stay (CLOCK's second chance, on flash).
//!
//! **In.** No key is kept in memory for a flash item, so a lookup that
//! finds no key in memory but a flash slot with the key's 22 tag bits
//! stops with [`Miss::OnFlash`](crate::store::Miss). A read that changes
//! nothing is served from the record itself ([`Worker::read_flash`]), the
//! item left on flash; one in `ext_recache_rate`, and every other
//! operation, first *settle* the key ([`Worker::settle`]): read each such
//! record (without any lock), verify its checksum and that its key hashes
//! to the slot's tags, and under the bucket lock, if the slot is unchanged
//! and its region was not reclaimed meanwhile, copy the item back into
//! memory (with its CAS, flags, expiry and write time) or unlink it if it
//! is dead or damaged. The operation then runs again and finds the key in
//! memory: every command that changes an item has one implementation for
//! memory and flash items. A plain `set` needs no read: it drops the slots
//! with the key's tags, since it replaces whatever they hold.
//!
//! Lock order: the log's writer, then bucket locks; nothing takes the
//! writer under a bucket lock.

//!
//! The parts, one file each: this one (the shared types, and **out**: the
//! batch, the log's head, a region's reclaim), `age.rs` (**early, by
//! age**), `image.rs` (the flash tier's part of a snapshot, and its
//! restore), `read.rs` (**in**: reads served from flash, settling a key,
//! asynchronous reads).
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

use strata_flash::{record, Flash, ReadError, Reserve, Writer};

pub(crate) use crate::aio::warn_rate_limited;
use crate::aio::{Cached, Failed};

use crate::clock::Clock;
use crate::index::{flash, slot, Loc, Pos, Stripe};
use crate::item::{Fields, Header, Item};
use crate::segments::{ttl_class, Active, AGED_DONE};
use crate::store::{add, bump, Counters, Store};
use crate::types::{FlashHit, FlashRead, FlashStats, Flow, ItemView, Reading, Stop, StoreError, Ticket};
use crate::worker::Worker;
use crate::MAX_RETRIES;

mod age;
pub(crate) mod batch;
mod image;
mod peek;
pub(crate) mod peeked;
mod read;

use batch::Pending;

pub use image::{FlashImage, FlashRestored};

/// A reclaimed region's records that are written again: their bytes, and
/// for each its key's location, its slot's location and its offset.
#[derive(Debug, Default)]
struct Hot {
    buf: Vec<u8>,
    items: Vec<(Loc, u64, u32)>,
}

impl Hot {
    fn clear(&mut self) {
        self.buf.clear();
        self.items.clear();
    }
}

/// The generation of the region flash slot `s` points into, now.
fn slot_generation(log: &Flash, s: u64) -> u64 {
    log.generation(log.region_of(log.from_slot(flash::addr(s))))
}

/// Whether `s` is a flash slot that may hold `loc`'s key, in a stripe whose
/// table has `2^table_bits` buckets: its 22 tag bits are the key's, and so
/// are the hash bits above the table it still carries for growth
/// ([`flash::more`]: six when it was placed at this size, one fewer per
/// doubling since). A plain set drops its key's candidates unread
/// (`drop_flash_candidates`): with the 22 bits alone another key's slot
/// matched once in 4 million, and lost that key without an eviction (a
/// wire test over flash did, about one run in a hundred); with the growth
/// bits too, once in 268 million where none was used up.
fn is_candidate(s: u64, loc: Loc, table_bits: u32) -> bool {
    slot::is_flash(s)
        && slot::tag(s) == loc.tag
        && flash::ext(s) == loc.ext
        && flash::more_matches(flash::more(s), loc.bucket.checked_shr(table_bits).unwrap_or(0))
}

/// The flash slot still pointing where `s` did (its `more` bits and read
/// mark may have changed since), in `bucket`'s chain.
fn same_slot(st: &Stripe, bucket: u32, s: u64) -> Option<(Pos, u64)> {
    st.find(bucket, |x| slot::is_flash(x) && flash::location(x) == flash::location(s))
}

/// The whole item in `b` (a record's item bytes), if it is one.
fn parse_item(b: &[u8]) -> Option<Item<'_>> {
    let bits = *b.get(1)?;
    let h = Header::parse_lengths(b.get(..Header::lengths_len(bits))?);
    (h.total_len() == b.len()).then(|| Item::new(h, b))
}

impl Store {
    fn flash_log(&self) -> Option<&Arc<Flash>> {
        self.config().flash.as_ref().map(|t| &t.log)
    }

    /// Starts writing what the flash tier wrote to the disk, off the
    /// request path ([`Flash::start_writeback`]).
    pub(crate) fn flash_writeback(&self) {
        if let Some(log) = self.flash_log() {
            log.start_writeback();
        }
    }

    /// A flash slot in `loc`'s chain that may hold the key (its 22 tag bits
    /// and the growth bits it still has match: `is_candidate`), if any.
    pub(crate) fn flash_candidate(&self, st: &Stripe, loc: Loc) -> Option<(Pos, u64)> {
        self.config().flash.as_ref()?;
        st.find(loc.bucket, |s| is_candidate(s, loc, st.table_bits()))
    }

    /// Every such slot, into `out` (cleared first), under `loc`'s lock,
    /// each with the generation its record's region has under that lock:
    /// a reclaim of the region unlinks or repoints the slot under it first,
    /// so a read checked against this generation tells a record reclaimed
    /// since from a damaged one ([`Flash::read`]).
    fn flash_candidates(&self, loc: Loc, out: &mut Vec<(u64, u64)>) {
        out.clear();
        let Some(log) = self.flash_log() else { return };
        let st = self.index().lock(loc.stripe);
        st.for_each_in_chain(loc.bucket, |s| {
            if is_candidate(s, loc, st.table_bits()) {
                out.push((s, slot_generation(log, s)));
            }
        });
    }

    /// Unlinks every flash slot with `loc`'s tags: a plain set replaces
    /// whatever they hold without reading it.
    pub(crate) fn drop_flash_candidates(&self, st: &mut Stripe, loc: Loc, c: &Counters) {
        while let Some((pos, s)) = self.flash_candidate(st, loc) {
            self.unlink(st, loc.bucket, pos, s);
            bump(&c.flash_dropped_write);
        }
    }

    /// Whether eviction sends this item to flash rather than away.
    pub(crate) fn flash_eligible(&self, it: &Item<'_>) -> bool {
        // A compressed value names a dictionary that lives only as long
        // as memory segments reference it: such items are evicted.
        self.config().flash.is_some() && it.header.total_len() >= self.flash_min_item() && !it.compressed()
    }

    /// Adds the linked item at slot `s` to the worker's batch (`aged`: for
    /// `ext_item_age`, not eviction); the caller holds its bucket lock.
    /// True when the batch holds a write buffer's worth: the caller writes
    /// it once it has let go of the lock.
    pub(crate) fn batch_for_flash(&self, active: &mut Active, s: u64, it: &Item<'_>, loc: Loc, aged: bool) -> bool {
        let Some(t) = &self.config().flash else { return false };
        let f = Fields { cas: Some(self.cas_of(s, it)), ..it.fields() };
        let len = crate::item::encoded_len(it.key().len(), it.value().len(), &f);
        let b = &mut active.flash;
        let at = b.buf.len() as u32;
        let epoch = self.seg(slot::seg(s)).epoch.load(Relaxed);
        record::encode(&mut b.buf, t.log.granule(), epoch, self.written_at(s), len, |dst| {
            let v = crate::item::write_head(dst, it.key(), it.value().len(), &f);
            dst[v..].copy_from_slice(it.value());
        });
        b.items.push(Pending { loc, seg: slot::seg(s), granule_off: slot::off(s), epoch, aged, at });
        // Under the item's bucket lock, as every write in place checks it.
        self.seg(slot::seg(s)).batched.fetch_add(1, Relaxed);
        b.buf.len() >= t.write_buffer
    }

    /// Writes the worker's batch to flash and repoints the slots of the
    /// items still linked where they were; items whose write failed are
    /// evicted. Called without bucket locks, before the batch's victim is
    /// reused.
    pub(crate) fn flush_flash(&self, active: &mut Active) {
        let Some(log) = self.flash_log() else { return };
        let mut batch = std::mem::take(&mut active.flash);
        if batch.items.is_empty() {
            active.flash = batch;
            return;
        }
        let c = active.counters.clone();
        let mut w = log.writer();
        let written = self.reserve_flash(&mut w, batch.buf.len(), &c).and_then(|at| {
            match w.write(at, &mut batch.buf, batch.items.len() as u64) {
                Ok(()) => Some(at),
                Err(e) => {
                    warn_rate_limited("write failed, items evicted instead", &e);
                    None
                }
            }
        });
        for p in &batch.items {
            let mut st = self.index().lock(p.loc.stripe);
            // Under the lock: a write in place of this item waits for the
            // repoint below.
            self.seg(p.seg).batched.fetch_sub(1, Relaxed);
            let Some((pos, s)) = st.find(p.loc.bucket, |s| slot::seg(s) == p.seg && slot::off(s) == p.granule_off)
            else {
                continue;
            };
            if slot::is_flash(s) || self.seg(p.seg).epoch.load(Relaxed) != p.epoch {
                continue;
            }
            match written {
                Some(at) => {
                    let addr = log.to_slot(at + u64::from(p.at));
                    let moved = flash::pack(slot::tag(s), p.loc.ext, p.loc.more(st.table_bits()), addr);
                    st.set(pos, moved);
                    self.unaccount(&mut st, s);
                    self.account(&mut st, moved);
                    bump(&c.flash_moved);
                    if p.aged {
                        bump(&c.flash_aged);
                    }
                }
                None if p.aged => {}
                None => {
                    self.unlink(&mut st, p.loc.bucket, pos, s);
                    bump(&c.evictions);
                }
            }
        }
        drop(w);
        batch.buf.clear();
        batch.items.clear();
        active.flash = batch;
    }

    /// Room for `len` bytes at the log's head, reclaiming the oldest
    /// region if need be; `None` if the batch is longer than a region
    /// takes (the write buffer is kept under half a region, so only for
    /// items near `-I` in a small region) or the ring would not move.
    fn reserve_flash(&self, w: &mut Writer<'_>, len: usize, c: &Counters) -> Option<u64> {
        let mut buf = Vec::new();
        let mut hot = Hot::default();
        for _ in 0..4 {
            match w.reserve(len)? {
                Reserve::At(at) => return Some(at),
                // A region holding records a running snapshot saves stays
                // until it ends: the write fails, its items are evicted
                // (their memory copies saved by the snapshot instead).
                Reserve::Reclaim(r) if self.flash_region_in_cut(r) => return None,
                Reserve::Reclaim(r) => {
                    hot.clear();
                    if let Err(e) = self.reclaim_region(w, r, &mut buf, &mut hot, c) {
                        // Its slots cannot be found without reading it:
                        // they stay, and read as misses once the region
                        // is rewritten (its generation changes).
                        warn_rate_limited("could not read a region to reclaim", &e);
                    }
                    w.recycle(r);
                    self.copy_forward(w, &mut hot, c);
                }
            }
        }
        None
    }

    /// Empties region `r` for reuse: every slot still pointing into it is
    /// unlinked, but for the items read since they went to flash (and
    /// still alive), whose records go into `hot` to be written again.
    fn reclaim_region(
        &self,
        w: &mut Writer<'_>,
        r: u32,
        buf: &mut Vec<u8>,
        hot: &mut Hot,
        c: &Counters,
    ) -> std::io::Result<()> {
        let Some(log) = self.flash_log() else { return Ok(()) };
        let now = self.clock().now();
        let flush_epoch = self.epochs().flushed();
        w.scan(r, buf, |addr, rec| {
            let Some(it) = parse_item(rec.item) else { return };
            let loc = self.index().locate(it.key());
            let want = log.to_slot(addr);
            let mut st = self.index().lock(loc.stripe);
            let Some((pos, s)) = st.find(loc.bucket, |s| slot::is_flash(s) && flash::addr(s) == want) else {
                return;
            };
            let alive = rec.epoch > flush_epoch && !Clock::is_expired(it.expiry(), now);
            if flash::read(s) && alive {
                let at = hot.buf.len() as u32;
                record::encode(&mut hot.buf, log.granule(), rec.epoch, rec.written, rec.item.len(), |d| {
                    d.copy_from_slice(rec.item)
                });
                hot.items.push((loc, flash::location(s), at));
                return;
            }
            self.unlink(&mut st, loc.bucket, pos, s);
            bump(&c.flash_evicted);
            add(&c.flash_evicted_bytes, record::padded_len(rec.item.len(), log.granule()) as u64);
        })
    }

    /// Writes a reclaimed region's read items at the head again (the
    /// region just freed) and repoints their slots, their read marks
    /// cleared: read again before the ring comes round, they stay again.
    /// If the write fails they are evicted.
    fn copy_forward(&self, w: &mut Writer<'_>, hot: &mut Hot, c: &Counters) {
        let Some(log) = self.flash_log() else { return };
        if hot.items.is_empty() {
            return;
        }
        let written = match w.reserve(hot.buf.len()) {
            Some(Reserve::At(at)) => {
                #[cfg(test)]
                race_read_before_write(log, at, hot);
                w.write(at, &mut hot.buf, hot.items.len() as u64).ok().map(|()| at)
            }
            _ => None,
        };
        for &(loc, old, off) in &hot.items {
            let mut st = self.index().lock(loc.stripe);
            let Some((pos, x)) = st.find(loc.bucket, |x| slot::is_flash(x) && flash::location(x) == old) else {
                continue;
            };
            match written {
                Some(at) => {
                    let moved =
                        flash::pack(slot::tag(x), flash::ext(x), flash::more(x), log.to_slot(at + u64::from(off)));
                    st.set(pos, moved);
                    self.unaccount(&mut st, x);
                    self.account(&mut st, moved);
                    bump(&c.flash_copied);
                }
                None => {
                    self.unlink(&mut st, loc.bucket, pos, x);
                    bump(&c.flash_copy_lost);
                }
            }
        }
    }

    /// The flash tier's regions as memcached's extstore pages (generation,
    /// bytes written); none without the tier.
    pub fn flash_pages(&self) -> Vec<(u64, u64)> {
        self.flash_log().map_or_else(Vec::new, |log| log.pages())
    }

    /// The tier's figures (with it on).
    pub(crate) fn flash_stats(&self) -> Option<FlashStats> {
        let log = self.flash_log()?;
        let f = &log.stats;
        let mut s = FlashStats {
            items: log.live(),
            objects_written: f.objects_written.load(Relaxed),
            bytes_written: f.bytes_written.load(Relaxed),
            write_errors: f.write_errors.load(Relaxed),
            bytes_used: log.bytes_used(),
            capacity: log.capacity(),
            regions: log.regions() as u64,
            region_size: log.region_size(),
            regions_reclaimed: f.regions_reclaimed.load(Relaxed),
            regions_evicted: f.regions_evicted.load(Relaxed),
            regions_opened: f.regions_opened.load(Relaxed),
            regions_used: log.regions_used(),
            reads: f.reads.load(Relaxed),
            bytes_read: f.bytes_read.load(Relaxed),
            read_errors: f.read_errors.load(Relaxed),
            checksum_errors: f.checksum_errors.load(Relaxed),
            ..FlashStats::default()
        };
        for c in self.roster().counters().iter() {
            s.hits += c.flash_hits.load(Relaxed);
            s.recached += c.flash_recached.load(Relaxed);
            s.misses += c.flash_misses.load(Relaxed);
            s.moved += c.flash_moved.load(Relaxed);
            s.evicted += c.flash_evicted.load(Relaxed);
            s.copied += c.flash_copied.load(Relaxed);
            s.dropped_by_write += c.flash_dropped_write.load(Relaxed);
            s.dropped_by_growth += c.flash_dropped_growth.load(Relaxed);
            s.reads_async += c.flash_reads_async.load(Relaxed);
            s.reads_coalesced += c.flash_reads_coalesced.load(Relaxed);
            s.evicted_bytes += c.flash_evicted_bytes.load(Relaxed);
            s.aged += c.flash_aged.load(Relaxed);
            s.copy_lost += c.flash_copy_lost.load(Relaxed);
            s.oom += c.flash_oom.load(Relaxed);
        }
        // A flash item's RAM is its slot: the index's bytes shared over
        // every item, memory and flash alike.
        let items = (0..self.index().stripes()).map(|i| self.index().lock(i).items).sum::<u64>().max(1);
        let index_share = self.index().memory() as u64 * s.items / items;
        s.ram_bytes = index_share + log.metadata_bytes() as u64;
        s.io_queue = self.aio().map_or(0, |p| p.depth() as u64);
        Some(s)
    }
}

/// Tests: a read to race the write of a reclaimed region's read records
/// back where they were (`tier_race_tests.rs`): handed, on the writer's
/// thread before that write, the key of one such record; it returns true
/// once that read has been made (then it is not called again), false if
/// the reader did not come in time (it is called again at the next one).
#[cfg(test)]
pub(crate) type RaceRead = Box<dyn FnMut(&[u8]) -> bool + Send>;

/// The race hook and the flash log it is for ([`race_id`]): the tests of
/// one binary run at once, and another test's store must neither call it
/// nor wait while it runs (in `make test` another tier test's writer once
/// handed this one a key of its own store).
#[cfg(test)]
pub(crate) static RACE_READ: parking_lot::Mutex<Option<(usize, RaceRead)>> = parking_lot::Mutex::new(None);

/// Which store's flash log a race hook is for.
#[cfg(test)]
pub(crate) fn race_id(log: &Flash) -> usize {
    std::ptr::from_ref(log) as usize
}

#[cfg(test)]
fn race_read_before_write(log: &Flash, at: u64, hot: &Hot) {
    let id = race_id(log);
    let mut read = {
        let mut race = RACE_READ.lock();
        match race.take() {
            Some((for_log, read)) if for_log == id => read,
            other => {
                *race = other;
                return;
            }
        }
    };
    let mut made = false;
    for &(_, old, off) in &hot.items {
        if log.to_slot(at + u64::from(off)) != flash::addr(old) {
            continue;
        }
        let r = &hot.buf[off as usize..];
        let item = record::claimed_len(r).and_then(|len| r.get(record::HEADER_LEN..len));
        if let Some(it) = item.and_then(parse_item) {
            made = read(it.key());
            break;
        }
    }
    if !made {
        *RACE_READ.lock() = Some((id, read));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::replace_flash;

    /// A flash slot placed for `loc` in a table of `2^bits` buckets.
    fn placed(loc: Loc, bits: u32) -> u64 {
        flash::pack(loc.tag, loc.ext, loc.more(bits), 77)
    }

    #[test]
    fn a_key_is_a_candidate_for_its_own_slot_through_every_doubling() {
        let key = Loc { stripe: 3, bucket: 0x2d5b_a9c7, tag: 0xabc, ext: 0x155 };
        let mut s = placed(key, 4);
        let mut b = key.bucket & 0xf;
        for bits in 4..10 {
            assert!(is_candidate(s, key, bits), "at 2^{bits}");
            (b, s) = replace_flash(s, b, bits).unwrap_or_else(|| panic!("a bit left at 2^{bits}"));
            assert_eq!(b, key.bucket & ((2 << bits) - 1), "re-placed where the key's hash says");
        }
        assert!(is_candidate(s, key, 10), "no bit left: any key with its tags");
    }

    #[test]
    fn another_key_with_the_same_22_tag_bits_is_told_apart_by_the_growth_bits() {
        let a = Loc { stripe: 3, bucket: 0x2d5b_a9c7, tag: 0xabc, ext: 0x155 };
        let s = placed(a, 4);
        // The same bucket in a table of 2^4, the same tags: a set of `b`
        // that took `a`'s slot for its own would drop it unread.
        for bit in 4..10 {
            let b = Loc { bucket: a.bucket ^ (1 << bit), ..a };
            assert!(!is_candidate(s, b, 4), "hash bit {bit} differs");
        }
        // Above the six growth bits, nothing tells them apart.
        let far = Loc { bucket: a.bucket ^ (1 << 10), ..a };
        assert!(is_candidate(s, far, 4));
        // One doubling later the slot has five bits left, and still tells
        // a key apart by the ones it has.
        let (_, grown) = replace_flash(s, a.bucket & 0xf, 4).unwrap_or_else(|| panic!("bits left"));
        assert!(is_candidate(grown, a, 5));
        assert!(!is_candidate(grown, Loc { bucket: a.bucket ^ (1 << 7), ..a }, 5));
        assert!(!is_candidate(s, Loc { tag: a.tag ^ 1, ..a }, 4));
        assert!(!is_candidate(s, Loc { ext: a.ext ^ 1, ..a }, 4));
    }
}
