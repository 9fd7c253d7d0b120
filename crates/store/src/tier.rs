//! The flash tier, store side: evicted items go to flash instead of away,
//! their index slots repointed there, and come back into memory when a
//! request needs them.
//!
//! **Out.** Eviction (`evict.rs`) hands each live item of a victim that is
//! at least `ext_item_size` bytes to the worker's [`FlashBatch`], as a
//! checksummed record with its CAS made explicit. The batch is written
//! once it holds a write buffer's worth, and at the end of the victim, by
//! the log's one writer ([`strata_flash::Writer`]); then each item's slot
//! is repointed at its record, if the slot still points at the item (a
//! write since leaves the record dead). The victim is not reused before
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

use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use strata_flash::{record, Flash, ReadError, Reserve, Writer};

use crate::aio::Cached;

use crate::clock::Clock;
use crate::index::{flash, slot, Loc, Pos, Stripe};
use crate::item::{Fields, Header, Item};
use crate::segments::{ttl_class, Active, AGED_DONE};
use crate::store::{add, bump, Counters, Store};
use crate::types::{FlashStats, Flow, ItemView, Reading, Stop, StoreError, Ticket};
use crate::worker::Worker;
use crate::MAX_RETRIES;

/// Items of a victim on their way to flash: their records, and where each
/// came from.
#[derive(Debug, Default)]
pub(crate) struct FlashBatch {
    buf: Vec<u8>,
    items: Vec<Pending>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    loc: Loc,
    seg: u32,
    granule_off: u32,
    /// The segment's epoch when the item was batched: a segment the
    /// batching worker does not own (the `ext_item_age` pass) may be
    /// cleared and reused before the batch is written, and a slot that
    /// points at the same place then is another item's.
    epoch: u64,
    /// Sent by `ext_item_age`, not by eviction: if the write fails it
    /// stays in memory, where it still is.
    aged: bool,
    /// The record's offset in the batch.
    at: u32,
}

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

/// Whether `s` is a flash slot with `loc`'s 22 tag bits.
fn is_candidate(s: u64, loc: Loc) -> bool {
    slot::is_flash(s) && slot::tag(s) == loc.tag && flash::ext(s) == loc.ext
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

/// Logs a flash problem at most once a second (a failing disk fails every
/// request): the count of those left out is in `stats`.
pub(crate) fn warn_rate_limited(what: &str, err: &dyn std::fmt::Display) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let mut last = LAST.lock();
    if !last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
        *last = Some(Instant::now());
        tracing::warn!("flash tier: {what}: {err} (further errors this second are counted in stats, not logged)");
    }
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

    /// A flash slot in `loc`'s chain with the key's 22 tag bits, if any.
    pub(crate) fn flash_candidate(&self, st: &Stripe, loc: Loc) -> Option<(Pos, u64)> {
        self.config().flash.as_ref()?;
        st.find(loc.bucket, |s| is_candidate(s, loc))
    }

    /// Every such slot, into `out` (cleared first), under `loc`'s lock.
    fn flash_candidates(&self, loc: Loc, out: &mut Vec<u64>) {
        out.clear();
        self.index().lock(loc.stripe).for_each_in_chain(loc.bucket, |s| {
            if is_candidate(s, loc) {
                out.push(s);
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
        let flush_epoch = self.flush_epoch();
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
            Some(Reserve::At(at)) => w.write(at, &mut hot.buf, hot.items.len() as u64).ok().map(|()| at),
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
        for c in self.worker_counters().iter() {
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

/// Sealed segments one `ext_item_age` pass goes through before the
/// reclaimer gets back to freeing segments (it comes back for more).
const AGED_PER_PASS: usize = 4;

/// The read count the age pass leaves on a read item it keeps: still
/// "read" (`mg`'s `h`, `evicted_unfetched`), and below any count a read
/// since gives (reads add 2).
const READ_BEFORE_PASS: u8 = 2;

impl Store {
    /// `ext_item_age` (see the module doc, "Early, by age"): sends the
    /// items of up to [`AGED_PER_PASS`] sealed segments whose newest item
    /// was written at least `ext_item_age` seconds ago to flash, but for
    /// those read since written (or since the segment's last pass), too
    /// small for flash, compressed or expired. Run by the background reclaimer, into its own batch. True
    /// if there may be more such segments.
    pub(crate) fn age_to_flash(&self, active: &mut Active) -> bool {
        // Not while a snapshot is taken: it gains nothing from waiting a
        // second, and a snapshot's segment and flash images are simplest
        // to reason about with nothing moving between them but eviction.
        if self.config().flash.is_none() || self.cut_active() {
            return false;
        }
        let age = self.flash_item_age();
        let now = self.clock().now();
        let Some(cutoff) = now.checked_sub(age).filter(|_| age != crate::types::NO_ITEM_AGE) else { return false };
        for pass in 0..AGED_PER_PASS {
            let Some((seg, revisit)) = self.pick_aged(cutoff) else {
                if pass == 0 {
                    self.seal_idle_open(cutoff, active);
                }
                return false;
            };
            let kept = self.age_segment(seg, now, revisit, active);
            self.seg(seg).aged_at.store(if kept { now.max(1) } else { AGED_DONE }, Relaxed);
        }
        true
    }

    /// No sealed segment is old enough: the open ones that are (a worker,
    /// or the reclaimer, went quiet half-way through them) are sealed, for
    /// the next pass (`seal.rs`).
    fn seal_idle_open(&self, cutoff: u32, active: &mut Active) {
        active.seal_idle(self, cutoff);
        if self.idle_open(cutoff) {
            self.ask_seal_idle(cutoff);
        }
    }

    /// The first sealed segment whose items were all written at or before
    /// `cutoff` and that the age pass has not been through since then,
    /// pinned (under the eviction lock, so nobody takes it as a victim
    /// meanwhile). Returns it and whether this is a revisit.
    fn pick_aged(&self, cutoff: u32) -> Option<(u32, bool)> {
        let ev = self.lock_evict();
        let seg = ev.small.iter().chain(ev.main.iter()).copied().find(|&s| {
            let m = self.seg(s);
            let aged_at = m.aged_at.load(Relaxed);
            aged_at != AGED_DONE
                && aged_at <= cutoff
                && m.live_items.load(Relaxed) > 0
                && !self.is_pinned(s)
                && !self.frozen(s)
                && !self.is_flushed(s)
                && m.times.lock().latest().is_some_and(|t| t <= cutoff)
        })?;
        self.pin(seg);
        Some((seg, self.seg(seg).aged_at.load(Relaxed) != 0))
    }

    /// Batches the idle items of `seg` (pinned by [`Store::pick_aged`]) for
    /// flash, writing each batch as it fills. The pin keeps the segment's
    /// bytes from reuse while they are read; it is let go for each write
    /// (a pin is never held across I/O) and taken again only if the
    /// segment is still sealed and the same (its epoch). True if it kept
    /// read items, to go through again.
    fn age_segment(&self, seg: u32, now: u32, revisit: bool, active: &mut Active) -> bool {
        let m = self.seg(seg);
        let epoch = m.epoch.load(Relaxed);
        let end = m.write_off.load(Acquire) as usize;
        let mut scan = 0;
        let mut kept = false;
        loop {
            let mut full = false;
            while scan < end && !full {
                // SAFETY: the segment is sealed and pinned: every byte below
                // `end` was written before it was sealed and is not reused
                // while the pin holds; only expiry fields change, which
                // `header` does not read.
                let Some(h) = (unsafe { self.arena().header(seg, scan, end) }) else {
                    scan = end;
                    break;
                };
                // SAFETY: as above; key bytes are never rewritten.
                let key = unsafe { self.arena().bytes(seg, scan + h.header_len(), usize::from(h.klen)) };
                let loc = self.index().locate(key);
                full = self.age_item((seg, scan), loc, (now, revisit), active, &mut kept);
                scan += self.aligned(h.total_len());
            }
            self.unpin(seg);
            self.flush_flash(active);
            if scan >= end {
                return kept;
            }
            let ev = self.lock_evict();
            if m.epoch.load(Relaxed) != epoch || !(ev.small.contains(&seg) || ev.main.contains(&seg)) {
                return false;
            }
            self.pin(seg);
        }
    }

    /// Adds the item at `off` of `seg` to the batch if the index still
    /// links it there and it is idle: not read since written (or since
    /// copied forward, or, on a `revisit`, since the segment's last pass),
    /// alive, and eligible for flash. True when the batch is full.
    ///
    /// A read item stays, its read count set to [`READ_BEFORE_PASS`]
    /// (`kept`): a read since adds to it, so the next pass, an
    /// `ext_item_age` later, sends it only if nobody read it meanwhile.
    /// memcached sends an item once its last access is `ext_item_age`
    /// old; strata keeps no access time per item, and this is the CLOCK
    /// hand for it. A read count of 2 is also one read of a new item, so
    /// it means "read before the last pass" only on a revisit: an item the
    /// cleaner moved to a segment not yet gone through stays one period
    /// more. Before, a read item stayed in memory for good: an item
    /// read right after it was set (memcached's `t/binary-extstore.t` does)
    /// never went.
    fn age_item(
        &self,
        (seg, off): (u32, usize),
        loc: Loc,
        (now, revisit): (u32, bool),
        active: &mut Active,
        kept: &mut bool,
    ) -> bool {
        let granule_off = self.granules(off);
        let mut st = self.index().lock(loc.stripe);
        let Some((pos, s)) =
            st.find(loc.bucket, |s| !slot::is_flash(s) && slot::seg(s) == seg && slot::off(s) == granule_off)
        else {
            return false;
        };
        let Some(it) = self.item_at(s) else { return false };
        if Clock::is_expired(it.expiry(), now) || !self.flash_eligible(&it) {
            return false;
        }
        if slot::freq(s) > READ_BEFORE_PASS || (!revisit && slot::was_read(s)) {
            st.set(pos, slot::with_freq(s, READ_BEFORE_PASS));
            *kept = true;
            return false;
        }
        self.batch_for_flash(active, s, &it, loc, true)
    }
}

/// The flash tier's part of a snapshot: the log's state and, for every
/// flash slot, its record's address (in granules), sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlashImage {
    pub checkpoint: strata_flash::Checkpoint,
    pub entries: Vec<u64>,
}

/// What a restore of the flash tier brought back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlashRestored {
    pub items: u64,
    /// Entries not brought back: their region was reclaimed since, their
    /// record is unreadable or damaged, expired, flushed, or the key is in
    /// memory already.
    pub dropped: u64,
    /// The image is for another flash layout (size, regions): nothing
    /// was brought back.
    pub mismatch: bool,
}

const ENTRY_ADDR: u64 = (1 << strata_flash::ADDR_BITS) - 1;

impl Store {
    /// The flash tier's state for a snapshot, with it on. Outside a cut the
    /// log's writer is held meanwhile: nothing moves to flash or is
    /// reclaimed while the slots are collected (a pass over the index,
    /// under each stripe's lock in turn).
    ///
    /// While a snapshot's cut holds, the image is as of the cut: the log as
    /// it stood then, and the records linked then (those still linked, and
    /// those unlinked since, which the cut noted); regions holding them are
    /// not reclaimed meanwhile (`reserve_flash`).
    ///
    /// Within a cut the log's writer is not held while the index is walked
    /// (a pass over every stripe, which takes long on a large index):
    /// records written meanwhile are after the cut and left out, and the
    /// regions of those before it are not reclaimed. Holding the writer
    /// there held up every worker that evicted to flash for the whole walk
    /// (issue 41: a probe waited 1.66 s during a soak's snapshot).
    pub fn flash_image(&self) -> Option<FlashImage> {
        let log = self.flash_log()?;
        let cut = self.cut().flash.lock().clone().filter(|_| self.cut_active());
        let w = if cut.is_none() { Some(log.writer()) } else { None };
        let mut entries = Vec::new();
        for i in 0..self.index().stripes() {
            self.index().lock(i).for_each_item(|s| {
                if slot::is_flash(s) && cut.as_ref().is_none_or(|cp| flash_before(log, cp, flash::addr(s))) {
                    entries.push(flash::addr(s));
                }
            });
        }
        let checkpoint = match (cut, &w) {
            (Some(cp), _) => {
                entries.extend(self.cut().flash_died.lock().iter().copied());
                cp
            }
            (None, Some(w)) => w.checkpoint(),
            (None, None) => log.checkpoint(),
        };
        drop(w);
        entries.sort_unstable();
        entries.dedup();
        Some(FlashImage { checkpoint, entries })
    }

    /// The flash log's writer, with the flash tier on.
    pub(crate) fn flash_writer(&self) -> Option<Writer<'_>> {
        self.flash_log().map(|l| l.writer())
    }

    /// Notes that the flash record at slot address `addr`, linked until
    /// now, is being unlinked (under its bucket lock), if a snapshot's cut
    /// holds and the record is from before it.
    pub(crate) fn note_flash_death(&self, addr: u64) {
        if !self.cut_active() {
            return;
        }
        let Some(log) = self.flash_log() else { return };
        let before = self.cut().flash.lock().as_ref().is_some_and(|cp| flash_before(log, cp, addr));
        if before {
            self.cut().flash_died.lock().push(addr);
        }
    }

    /// Whether region `r` holds records a running snapshot's cut saves.
    fn flash_region_in_cut(&self, r: u32) -> bool {
        let Some(log) = self.flash_log().filter(|_| self.cut_active()) else { return false };
        let cut = self.cut().flash.lock();
        cut.as_ref()
            .and_then(|cp| cp.regions.get(r as usize))
            .is_some_and(|&(end, gen)| end > 0 && log.generation(r) == gen)
    }

    /// Makes every record written to flash so far durable (an fdatasync of
    /// each flash file); nothing to do without the flash tier. A snapshot
    /// calls it after [`Store::flash_image`] and before it is made durable
    /// itself, so that every record it references survives a power loss.
    pub fn sync_flash(&self) -> std::io::Result<()> {
        self.flash_log().map_or(Ok(()), |log| log.sync())
    }

    /// Brings a snapshot's flash items back, after its memory segments
    /// (a key in memory is newer than its flash record): the regions whose
    /// header still names the saved generation are read in order and each
    /// saved address found there is linked again.
    pub fn restore_flash(&self, img: &FlashImage) -> FlashRestored {
        let mut r = FlashRestored::default();
        let Some(log) = self.flash_log() else {
            r.dropped = img.entries.len() as u64;
            r.mismatch = true;
            return r;
        };
        let Some(kept) = log.restore(&img.checkpoint) else {
            r.dropped = img.entries.len() as u64;
            r.mismatch = true;
            return r;
        };
        let c = Counters::default();
        let now = self.clock().now();
        let flush_epoch = self.flush_epoch();
        let region_of = |e: &u64| log.region_of(log.from_slot(e & ENTRY_ADDR));
        let mut buf = Vec::new();
        let mut at = 0;
        while at < img.entries.len() {
            let region = region_of(&img.entries[at]);
            let n = img.entries[at..].iter().take_while(|e| region_of(e) == region).count();
            let wanted = &img.entries[at..at + n];
            at += n;
            if !kept.get(region as usize).copied().unwrap_or(false) {
                r.dropped += n as u64;
                continue;
            }
            let mut next = 0;
            let scanned = log.scan_region(region, &mut buf, |addr, rec| {
                let a = log.to_slot(addr);
                while next < wanted.len() && wanted[next] & ENTRY_ADDR < a {
                    next += 1;
                    r.dropped += 1;
                }
                if next == wanted.len() || wanted[next] & ENTRY_ADDR != a {
                    return;
                }
                next += 1;
                let Some(it) = parse_item(rec.item) else {
                    r.dropped += 1;
                    return;
                };
                // The record at a saved address of a region still in its
                // saved generation is the one the slot pointed at (the
                // hash, and so the slot's tags, differ in this process).
                let loc = self.index().locate(it.key());
                if rec.epoch <= flush_epoch || Clock::is_expired(it.expiry(), now) {
                    r.dropped += 1;
                    return;
                }
                let mut st = self.index().lock(loc.stripe);
                // A key in memory is the newer copy. (Two keys whose tags
                // match in this process both come back, as they can be
                // on flash together while serving.)
                if self.find(&st, loc, it.key()).is_some() {
                    r.dropped += 1;
                    return;
                }
                let s = flash::pack(loc.tag, loc.ext, loc.more(st.table_bits()), a);
                let before = st.footprint();
                st.insert(loc.bucket, s);
                self.account(&mut st, s);
                if st.wants_growth() {
                    self.grow(loc.stripe, &mut st, &c);
                }
                self.index().note_footprint(before, st.footprint());
                r.items += 1;
            });
            // Entries past the last record read (or all, if the region
            // could not be read) are not coming back.
            r.dropped += (wanted.len() - next) as u64;
            if let Err(e) = scanned {
                warn_rate_limited("could not read a region at restore", &e);
            }
        }
        r
    }
}

/// Whether the record at slot address `addr` was written before the
/// checkpoint `cp` was taken: its region is in the same generation, and it
/// lies below where the region was written to then.
fn flash_before(log: &Flash, cp: &strata_flash::Checkpoint, addr: u64) -> bool {
    let at = log.from_slot(addr & ENTRY_ADDR);
    let r = log.region_of(at);
    cp.regions.get(r as usize).is_some_and(|&(end, gen)| log.generation(r) == gen && at % log.region_size() < end)
}

/// A plain read served from flash without bringing the item back: the
/// reader's view but for its key and value, which are in the worker's
/// flash buffer (at `key` and `value`).
pub(crate) struct FlashHit {
    pub view: ItemView<'static>,
    pub key: std::ops::Range<usize>,
    pub value: std::ops::Range<usize>,
}

/// A record's epoch, write time and item length (what is kept of it
/// once the buffer holds only the item).
fn fields(r: record::Record<'_>) -> (u64, u32, usize) {
    (r.epoch, r.written, r.item.len())
}

/// What reading one flash slot back found.
enum Back {
    /// The record, verified: its item's key hashes to the slot's tags;
    /// `gen` is its region's generation when it was read.
    Record { epoch: u64, written: u32, gen: u64 },
    /// Nothing to bring back: damaged, unreadable, or another key's.
    Bad,
    /// The region was reclaimed during the read: look again.
    Moved,
    /// Asked of the I/O threads; the operation waits for it.
    Pending(Ticket),
}

impl Worker {
    /// With [`FlashTier::every_write`] (a test setting): `key`, just
    /// written by a storage command or incr/decr, goes to flash at once, so
    /// that the next request for it reads it from there (as if its segment
    /// had been evicted meanwhile). Only in builds with the `test-hooks`
    /// feature: production builds have no such check on the write path.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn flash_every_write(&mut self, key: &[u8]) {
        let store = self.store.clone();
        if !store.config().flash.as_ref().is_some_and(|t| t.every_write) {
            return;
        }
        let loc = store.index().locate(key);
        {
            let st = store.index().lock(loc.stripe);
            let Some((_, s)) = store.find(&st, loc, key) else { return };
            let Some(it) = store.item_at(s).filter(|it| store.flash_eligible(it)) else { return };
            store.batch_for_flash(&mut self.active, s, &it, loc, false);
        }
        store.flush_flash(&mut self.active);
    }

    /// Serves a read that changes nothing (no touch, no token to hand out)
    /// straight from flash, leaving the item there, as memcached's extstore
    /// does: `None` when it must be brought back first (a change to make,
    /// a dead or damaged record, a region reclaimed meanwhile), or on every
    /// `ext_recache_rate`th read, which brings hot items back to memory.
    pub(crate) fn read_flash(
        &mut self,
        key: &[u8],
        opts: &crate::types::ReadOpts,
        reading: Reading,
    ) -> Flow<Option<FlashHit>> {
        let store = self.store.clone();
        let Some(tier) = store.config().flash.as_ref() else { return Flow::Ready(None) };
        if opts.touch.is_some() {
            return Flow::Ready(None);
        }
        // Reading synchronously, a recache is decided before the read (it
        // reads the record itself); with the I/O threads, once the record
        // is in hand, so that a read that waited for it counts once and the
        // recache uses the bytes read.
        let rate = store.flash_recache_rate();
        if self.reads.is_none() && self.recache_due(rate) {
            return Flow::Ready(None);
        }
        let log = &tier.log;
        let loc = store.index().locate(key);
        let mut candidates = std::mem::take(&mut self.flash_candidates);
        store.flash_candidates(loc, &mut candidates);
        let mut buf = std::mem::take(&mut self.flash_buf);
        let mut hit = Flow::Ready(None);
        for &s in &candidates {
            let (epoch, written, gen) = match self.read_back(log, loc, s, &mut buf, reading) {
                Back::Record { epoch, written, gen } => (epoch, written, gen),
                Back::Pending(t) => {
                    hit = Flow::Wait(t);
                    break;
                }
                Back::Bad | Back::Moved => break,
            };
            let Some(it) = parse_item(&buf) else { break };
            if it.key() != key {
                // Another key's record with the same 22 tag bits.
                continue;
            }
            let now = store.clock().now();
            if epoch <= store.flush_epoch() || Clock::is_expired(it.expiry(), now) || crate::read::wins_token(opts, &it)
            {
                break;
            }
            if self.reads.is_some() && self.recache_due(rate) {
                // Settling reads this record again: from here.
                let addr = log.from_slot(flash::addr(s));
                if let Some(r) = self.reads.as_mut() {
                    r.keep(addr, gen, crate::aio::Rec { epoch, written, item: buf.clone() });
                }
                break;
            }
            let mut st = store.index().lock(loc.stripe);
            let Some((pos, x)) = same_slot(&st, loc.bucket, s) else { break };
            if opts.bump && !flash::read(x) {
                st.set(pos, flash::with_read(x));
            }
            drop(st);
            let state = it.state();
            let key_at = it.header.header_len();
            let value_at = key_at + it.key().len();
            let view = ItemView {
                key: &[],
                value: &[],
                flags: it.flags(),
                cas: if store.config().cas { it.explicit_cas().unwrap_or(0) } else { 0 },
                expiry_before: it.expiry(),
                expiry: it.expiry(),
                fetched: flash::read(x) || state & crate::item::state::FETCHED != 0,
                written: if opts.written { written } else { 0 },
                stale: state & crate::item::state::STALE != 0,
                token_sent: state & crate::item::state::TOKEN_SENT != 0,
                won: false,
                created: false,
                binary_key: state & crate::item::state::KEY_BINARY != 0,
            };
            hit = Flow::Ready(Some(FlashHit {
                view,
                key: key_at..value_at,
                value: value_at..value_at + it.value().len(),
            }));
            bump(&self.active.counters.flash_hits);
            break;
        }
        self.flash_buf = buf;
        self.flash_candidates = candidates;
        hit
    }

    /// Counts a read from flash: true on the `rate`th since the last
    /// recache, which brings its item back (a countdown).
    fn recache_due(&mut self, rate: u32) -> bool {
        if rate == 0 {
            return false;
        }
        self.flash_reads = self.flash_reads.saturating_sub(1);
        if self.flash_reads > 0 {
            return false;
        }
        self.flash_reads = rate;
        true
    }

    /// Runs `op` until it no longer stops at a flash slot, settling `key`
    /// in between (see the module doc), or until a read it needs must be
    /// waited for.
    pub(crate) fn with_flash<T>(
        &mut self,
        key: &[u8],
        reading: Reading,
        mut op: impl FnMut(&mut Worker) -> Result<Flow<T>, Stop>,
    ) -> Result<Flow<T>, StoreError> {
        for _ in 0..MAX_RETRIES {
            match op(self) {
                Ok(flow) => return Ok(flow),
                Err(Stop::Failed(e)) => return Err(e),
                Err(Stop::OnFlash) => {
                    if let Flow::Wait(t) = self.settle(key, reading)? {
                        return Ok(Flow::Wait(t));
                    }
                }
            }
        }
        Err(StoreError::Contended)
    }

    /// Brings every flash slot with `key`'s tags back into memory, or
    /// unlinks it if it is dead or damaged; stops at the first record that
    /// must be waited for.
    pub(crate) fn settle(&mut self, key: &[u8], reading: Reading) -> Result<Flow<()>, StoreError> {
        let store = self.store.clone();
        let Some(log) = store.flash_log() else { return Ok(Flow::Ready(())) };
        let loc = store.index().locate(key);
        let mut candidates = std::mem::take(&mut self.flash_candidates);
        store.flash_candidates(loc, &mut candidates);
        let mut buf = std::mem::take(&mut self.flash_buf);
        let mut r = Ok(Flow::Ready(()));
        for &s in &candidates {
            r = self.bring_back(log, loc, s, &mut buf, reading);
            if !matches!(r, Ok(Flow::Ready(()))) {
                break;
            }
        }
        self.flash_buf = buf;
        self.flash_candidates = candidates;
        r
    }

    /// Reads the record flash slot `s` points at, its item's bytes into
    /// `buf`: from the worker's ready records, from the I/O threads (the
    /// operation then waits: [`Back::Pending`]), or here and now.
    fn read_back(&mut self, log: &Flash, loc: Loc, s: u64, buf: &mut Vec<u8>, reading: Reading) -> Back {
        let addr = log.from_slot(flash::addr(s));
        let region = log.region_of(addr);
        let gen = log.generation(region);
        let inline = self.store.config().flash.as_ref().is_some_and(|t| t.read_cached_inline);
        // Synchronously (no I/O threads, or a read that must not wait), from
        // the records in hand, from the page cache, or by the I/O threads.
        let (epoch, written) = match self.reads.as_mut().map(|r| (r.lookup(addr, gen, buf), reading.synchronous(addr)))
        {
            Some((Cached::Record { epoch, written }, _)) => (epoch, written),
            Some((Cached::Bad, _)) => return Back::Bad,
            Some((Cached::Absent, false)) => {
                let read = if inline { log.read_cached(addr, buf).map(fields) } else { Err(ReadError::WouldBlock) };
                match self.record_read(log, read, region, gen, buf) {
                    Ok(r) => r,
                    Err(Some(back)) => return back,
                    Err(None) => {
                        let Some(r) = self.reads.as_mut() else { return Back::Bad };
                        let c = &self.active.counters;
                        bump(if r.request(addr, gen) { &c.flash_reads_async } else { &c.flash_reads_coalesced });
                        return Back::Pending(Ticket(addr));
                    }
                }
            }
            None | Some((Cached::Absent, true)) => {
                let read = log.read(addr, buf).map(fields);
                match self.record_read(log, read, region, gen, buf) {
                    Ok(r) => r,
                    Err(back) => return back.unwrap_or(Back::Bad),
                }
            }
        };
        if log.generation(region) != gen {
            return Back::Moved;
        }
        let Some(it) = parse_item(buf) else { return Back::Bad };
        let l = self.store.index().locate(it.key());
        if (l.stripe, l.tag, l.ext) != (loc.stripe, slot::tag(s), flash::ext(s)) {
            // Not what this slot was written for (a slot left behind by
            // a region that could not be read when it was reclaimed).
            return Back::Bad;
        }
        Back::Record { epoch, written, gen }
    }

    /// What a read of a record came to: its epoch and write time (the
    /// item's bytes left alone in `buf`), or what the read is instead
    /// (`None`: it would have to wait for the device).
    fn record_read(
        &self,
        log: &Flash,
        read: Result<(u64, u32, usize), ReadError>,
        region: u32,
        gen: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(u64, u32), Option<Back>> {
        let (epoch, written, len) = match read {
            Ok(f) => f,
            Err(ReadError::WouldBlock) => return Err(None),
            Err(e) => {
                warn_rate_limited("read failed, served as a miss", &e);
                return Err(Some(if log.generation(region) == gen { Back::Bad } else { Back::Moved }));
            }
        };
        // Keep the item bytes only (the record starts the buffer).
        buf.drain(..record::HEADER_LEN);
        buf.truncate(len);
        Ok((epoch, written))
    }

    /// Brings the flash slot `s` (in `loc`'s chain) back into memory.
    fn bring_back(
        &mut self,
        log: &Flash,
        loc: Loc,
        s: u64,
        buf: &mut Vec<u8>,
        reading: Reading,
    ) -> Result<Flow<()>, StoreError> {
        let store = self.store.clone();
        let c = self.active.counters.clone();
        let same = |st: &Stripe| same_slot(st, loc.bucket, s);
        let addr = log.from_slot(flash::addr(s));
        let read = self.read_back(log, loc, s, buf, reading);
        // Whatever happens next, nobody needs the record read for it again.
        if let (Some(r), false) = (self.reads.as_mut(), matches!(read, Back::Pending(_))) {
            r.forget(addr);
        }
        let done = Ok(Flow::Ready(()));
        let (epoch, written) = match read {
            Back::Pending(t) => return Ok(Flow::Wait(t)),
            Back::Moved => return done,
            Back::Bad => {
                let mut st = store.index().lock(loc.stripe);
                if let Some((pos, x)) = same(&st) {
                    store.unlink(&mut st, loc.bucket, pos, x);
                    bump(&c.flash_misses);
                }
                return done;
            }
            Back::Record { epoch, written, .. } => (epoch, written),
        };
        let Some(it) = parse_item(buf) else { return done };
        let now = store.clock().now();
        if epoch <= store.flush_epoch() || Clock::is_expired(it.expiry(), now) {
            let mut st = store.index().lock(loc.stripe);
            if let Some((pos, x)) = same(&st) {
                store.unlink(&mut st, loc.bucket, pos, x);
                bump(&c.flash_misses);
            }
            return done;
        }
        let len = it.header.total_len();
        let sizes = (len, store.class_len_of(&it, crate::store::sizes(&it).1));
        let (seg, off) = match self.active.reserve(&store, ttl_class(it.expiry(), now), sizes, written) {
            Ok(r) => r,
            Err(e) => {
                if e == StoreError::OutOfMemory {
                    bump(&c.flash_oom);
                }
                return Err(e);
            }
        };
        // SAFETY: freshly reserved by this worker in its active segment.
        let dst = unsafe { store.arena().bytes_mut(seg, off, len) };
        dst.copy_from_slice(it.bytes());
        store.note_expiry(seg, it.expiry());
        let mut st = store.index().lock(loc.stripe);
        let Some((pos, x)) = same(&st).filter(|_| !store.frozen(seg)) else {
            // Gone meanwhile, or a snapshot's cut froze the segment (nothing
            // goes into it any more, `cut.rs`): the operation runs again.
            drop(st);
            self.active.unreserve(&store, seg, off, len);
            return done;
        };
        // Unread: the read that asked for it counts itself (`mg`'s `h`
        // says whether it was read before).
        let back = slot::pack(slot::tag(x), 0, seg, store.granules(off));
        st.set(pos, back);
        store.unaccount(&mut st, x);
        store.account(&mut st, back);
        bump(&c.flash_hits);
        bump(&c.flash_recached);
        add(&c.bytes_copied, len as u64);
        done
    }
}

/// Asynchronous reads, for the server (see `aio.rs`).
impl Worker {
    /// Hands this worker's reads from flash to the I/O threads: an
    /// operation that needs a record not yet read returns [`Flow::Wait`]
    /// instead of waiting for the disk (with [`Reading::MayWait`]), and
    /// `wake` is called (from an I/O thread) when a read is done. False
    /// (reads stay synchronous) without the flash tier or its threads.
    pub fn enable_async_flash(&mut self, wake: Box<dyn Fn() + Send + Sync>) -> bool {
        let Some(pool) = self.store.aio() else { return false };
        self.reads = Some(crate::aio::Reads::new(pool, wake));
        true
    }

    /// Takes the reads finished since the last call; the tickets they
    /// were for into `out` (operations waiting for them can run again).
    pub fn flash_completions(&mut self, out: &mut Vec<Ticket>) {
        if let Some(r) = self.reads.as_mut() {
            r.completions(out);
        }
    }

    /// Asks for the flash records of those `keys` that are only on flash,
    /// so that the reads of a pipeline or a multi-get overlap rather than
    /// wait one after another. Only a hint: nothing waits for them.
    pub fn prefetch_flash(&mut self, keys: &[&[u8]]) {
        let store = self.store.clone();
        let (Some(log), Some(r)) = (store.flash_log(), self.reads.as_mut()) else { return };
        let c = &self.active.counters;
        let mut candidates = std::mem::take(&mut self.flash_candidates);
        for key in keys {
            let loc = store.index().locate(key);
            candidates.clear();
            {
                let st = store.index().lock(loc.stripe);
                if store.find(&st, loc, key).is_some() {
                    continue;
                }
                st.for_each_in_chain(loc.bucket, |s| {
                    if is_candidate(s, loc) {
                        candidates.push(s);
                    }
                });
            }
            for &s in &candidates {
                let addr = log.from_slot(flash::addr(s));
                if !r.known(addr) && r.request(addr, log.generation(log.region_of(addr))) {
                    bump(&c.flash_reads_async);
                }
            }
        }
        self.flash_candidates = candidates;
    }
}
