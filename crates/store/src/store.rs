//! The shared cache: the [`Store`] that owns the arena, the segment
//! metadata, the index and the eviction state, and the helpers every
//! operation shares (finding, linking and unlinking items under their bucket
//! locks, CAS, flush, totals).
//!
//! **CAS.** A fresh item's CAS is derived from where it was written:
//! `epoch(segment) << offset_bits | offset`, where a segment gets a new epoch
//! from a global counter every time it is (re)opened for writing. That is
//! unique per write and costs no bytes per item. An item that is moved
//! (eviction copy-forward) or rewritten with unchanged contents (`touch` that
//! needs a new header) carries its previous CAS explicitly, so clients never
//! see a CAS change without a change of value.
//!
//! The job is split by module: `segments.rs` (segments and the memory
//! budget), `evict/` (the cleaner and eviction), `read.rs` and `write.rs`
//! (the operations), `worker.rs` (the per-thread handle).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;
use strata_compress::{Codec, NO_DICT};

use crate::arena::Arena;
use crate::clock::Clock;
use crate::evict::Evict;
use crate::index::{flash, slot, Index, Loc, Pos, Stripe};
use crate::item::{Fields, Header, Item, MAX_HEADER_LEN};
use crate::segments::{Active, Budget, Placed, SegMeta};
use crate::types::{Config, ConfigError, StoreError, StoreStats};
use crate::worker::{Worker, Zip};

/// Per-worker counters, written only by their worker, summed for `stats`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub total_items: AtomicU64,
    /// Bytes of items written by clients' requests (header, key, value).
    pub bytes_stored: AtomicU64,
    /// Bytes of items copied forward (cleaning, eviction's copy-forward).
    pub bytes_copied: AtomicU64,
    /// Segments cleaned (live items copied, none evicted) and the dead
    /// bytes that won back, and the time it took.
    pub segments_cleaned: AtomicU64,
    pub dead_reclaimed: AtomicU64,
    pub cleaner_ns: AtomicU64,
    pub get_expired: AtomicU64,
    pub get_flushed: AtomicU64,
    pub flushed_unlinked: AtomicU64,
    pub evictions: AtomicU64,
    /// memcached's eviction detail: evicted items never read, and those
    /// that had an expiry time; expired items reclaimed unread.
    pub evicted_unfetched: AtomicU64,
    pub evicted_nonzero: AtomicU64,
    pub expired_unfetched: AtomicU64,
    pub expired_unlinked: AtomicU64,
    pub reinserted: AtomicU64,
    /// Allocations that reached the last resort (`evict/`).
    pub alloc_last_resort: AtomicU64,
    /// Allocation steps that waited for a segment another thread was
    /// clearing rather than evict (`evict/`, [`crate::evict::Step::Wait`]).
    pub alloc_waited: AtomicU64,
    /// With the background reclaimer: allocations that found no free
    /// segment and reclaimed on the request's time.
    pub reclaim_inline: AtomicU64,
    /// With the background reclaimer: allocations that waited for it.
    pub reclaim_waited: AtomicU64,
    /// The reclaimer's: segments it freed.
    pub reclaim_background: AtomicU64,
    pub segments_evicted: AtomicU64,
    pub segments_reclaimed: AtomicU64,
    pub decompress_errors: AtomicU64,
    /// The flash tier's (see [`crate::types::FlashStats`]).
    pub flash_hits: AtomicU64,
    pub flash_recached: AtomicU64,
    pub flash_misses: AtomicU64,
    pub flash_moved: AtomicU64,
    pub flash_evicted: AtomicU64,
    pub flash_copied: AtomicU64,
    pub flash_dropped_write: AtomicU64,
    pub flash_dropped_growth: AtomicU64,
    pub flash_reads_async: AtomicU64,
    pub flash_reads_coalesced: AtomicU64,
    pub flash_evicted_bytes: AtomicU64,
    pub flash_aged: AtomicU64,
    pub flash_copy_lost: AtomicU64,
    pub flash_oom: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    add(c, 1);
}

/// Adds to a counter only its worker writes (no locked instruction).
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed) + n, Relaxed);
}

/// The shared cache. Operations go through a per-thread [`Worker`].
///
/// Its fields are private to this module: the crate's other modules use
/// the methods below ("The store's parts"), which say what they need.
pub struct Store {
    cfg: Config,
    arena: Arena,
    segs: Box<[SegMeta]>,
    index: Index,
    hash_power: u32,
    clock: Arc<Clock>,
    granule_shift: u32,
    /// Bits of a derived CAS taken by the offset.
    cas_off_bits: u32,
    /// The memory budget: free, parked and in-use segments, the limit
    /// (`segments.rs` owns it).
    budget: Budget,
    evict: Mutex<Evict>,
    epoch: AtomicU64,
    /// Segments opened at or before this epoch hold only flushed items.
    flush_epoch: AtomicU64,
    flush_at: AtomicU32,
    flush_lock: Mutex<()>,
    counters: Mutex<Vec<Arc<Counters>>>,
    /// Workers now (each keeps segments open: [`Store::open_cap`]).
    workers: AtomicUsize,
    /// Compression's shared half (dictionaries), with compression on.
    codec: Option<Arc<Codec>>,
    /// With `--durability`: where client changes are reported.
    journal: std::sync::OnceLock<Arc<dyn crate::journal::Journal>>,
    /// With the flash tier and `ext_threads` > 0: the threads that read
    /// from flash for workers that ask ([`Worker::enable_async_flash`]).
    aio: Option<crate::aio::Pool>,
    /// Seconds the item evicted last had been stored (memcached's
    /// `evicted_time`, which is since its last access: strata keeps no
    /// access time).
    evicted_age: AtomicU32,
    /// Items counted by size (`bands.rs`).
    bands: crate::bands::Bands,
    /// Reads of every key lately (`sketch.rs`), for eviction.
    sketch: crate::sketch::Sketch,
    /// How selective eviction's copy-forward is (`climb.rs`).
    climber: Mutex<crate::climb::Climber>,
    /// memcached's `stats sizes` histogram (off unless asked for).
    sizes: crate::sizes::Sizes,
    /// Told of items evicted from memory while it wants them (`watch
    /// evictions`).
    evict_hook: std::sync::OnceLock<Arc<dyn EvictionWatcher>>,
    /// The running snapshot's cut (`cut.rs`).
    cut: crate::cut::Cut,
    /// Requests that every worker seal its open segments (a writer
    /// starved, the age pass wants idle ones) and what wakes them
    /// (`seal.rs`).
    seals: crate::seal::Seals,
    /// A background reclaimer runs (`reclaim.rs`).
    reclaiming: std::sync::atomic::AtomicBool,
    reclaim: crate::reclaim::Shared,
    /// The flash tier's settings that change at run time (`extstore
    /// item_age`, `item_size`, `recache_rate`); their start values are in
    /// [`FlashTier`](crate::FlashTier).
    flash_tuning: FlashTuning,
}

/// See [`Store::flash_tuning`]. Atomics: read on every eviction and
/// flash read, set by an admin command on any worker.
#[derive(Debug, Default)]
pub(crate) struct FlashTuning {
    min_item: AtomicUsize,
    recache_rate: AtomicU32,
    item_age: AtomicU32,
}

/// Who is told of evictions ([`Store::on_evict`]).
pub trait EvictionWatcher: Send + Sync {
    /// Whether it wants them now: asked first, so an eviction costs one
    /// check while nobody watches.
    fn wanted(&self) -> bool;
    /// Called on the evicting worker, under the item's bucket lock: it
    /// must be quick and must not touch the store.
    fn evicted(&self, e: &Evicted<'_>);
}

/// An item evicted from memory to make room.
#[derive(Debug)]
pub struct Evicted<'a> {
    pub key: &'a [u8],
    /// It had been read.
    pub fetched: bool,
    /// Seconds it had left to live (-1: no expiry time).
    pub ttl: i64,
    /// Seconds since it was written (strata keeps no access time).
    pub age: u32,
    /// Bytes of its value as stored.
    pub size: usize,
    /// Its size band's class id (`bands.rs`), as `stats items` numbers it.
    pub class: usize,
}

impl Store {
    pub fn new(mut cfg: Config, clock: Arc<Clock>) -> Result<Arc<Store>, ConfigError> {
        if cfg.item_size_max < 1024 {
            return Err(ConfigError::Invalid("item size limit below 1 KiB"));
        }
        // 1 MiB, or the largest item if larger; under a small `-m`, small
        // enough that the limit holds at least two (every `-m` that `-I`
        // allows, `-I` at most half of it, runs).
        let seg_size = if cfg.segment_size == 0 {
            let fits = (cfg.memory_limit / 2).checked_next_power_of_two().map_or(1 << 20, |p| p / 2).max(1);
            cfg.item_size_max.max(fits.min(1 << 20))
        } else {
            cfg.segment_size
        };
        if seg_size < cfg.item_size_max || seg_size > u32::MAX as usize / 2 {
            return Err(ConfigError::Invalid("segment size must hold the largest item"));
        }
        cfg.segment_size = seg_size;
        cfg.memory_reserve = cfg.memory_reserve.max(cfg.memory_limit);
        let nsegs = (cfg.memory_reserve / seg_size).min(slot::MAX_RAM_SEGMENTS as usize - 1);
        let limit = (cfg.memory_limit / seg_size).min(nsegs);
        if limit < 2 {
            return Err(ConfigError::Invalid("memory limit must hold at least two segments"));
        }
        let seg_bits = usize::BITS - (seg_size - 1).leading_zeros();
        let granule_shift = seg_bits.saturating_sub(slot::OFF_BITS);
        let hash_power = if cfg.hash_power != 0 {
            cfg.hash_power.clamp(4, 32)
        } else {
            // The index grows with the items (see `index.rs`), so it starts
            // small: memcached's 2^16 buckets, fewer for a small `-m`.
            (usize::BITS - (cfg.memory_limit / 4096).max(16).leading_zeros() - 1).clamp(10, 16)
        };
        if let Some(z) = cfg.compression.as_mut() {
            // Samples and dictionaries count in the memory limit: under a
            // small `-m` a training's worth would crowd out the items
            // before it ever filled, so it is at most a sixteenth of the
            // limit, and the dictionary at most an eighth of that.
            let cap = cfg.memory_limit / 16;
            if z.train_bytes > cap {
                z.train_bytes = cap;
                z.dict_size = z.dict_size.min(cap / 8);
            }
        }
        let codec = match &cfg.compression {
            None => None,
            Some(c) => Some(Codec::new(c.clone()).map_err(|e| match e {
                strata_compress::CompressError::Config(m) => ConfigError::Invalid(m),
                _ => ConfigError::Invalid("compression could not be set up"),
            })?),
        };
        let arena = Arena::new(seg_size, nsegs as u32)?;
        let aio = cfg
            .flash
            .as_ref()
            .filter(|t| t.io_threads > 0)
            .and_then(|t| crate::aio::Pool::start(t.log.clone(), t.io_threads, t.read_delay));
        let segs: Box<[SegMeta]> = (0..nsegs).map(|_| SegMeta::default()).collect();
        let store = Store {
            arena,
            segs,
            index: Index::new(hash_power),
            hash_power,
            clock,
            granule_shift,
            cas_off_bits: seg_bits,
            budget: Budget::new(limit as u32, nsegs as u32, cfg.memory_limit),
            evict: Mutex::new(Evict::default()),
            epoch: AtomicU64::new(0),
            flush_epoch: AtomicU64::new(0),
            flush_at: AtomicU32::new(0),
            flush_lock: Mutex::new(()),
            counters: Mutex::new(Vec::new()),
            workers: AtomicUsize::new(0),
            evicted_age: AtomicU32::new(0),
            bands: crate::bands::Bands::new(cfg.size_classes, cfg.cas),
            sketch: crate::sketch::Sketch::new(cfg.memory_limit),
            climber: Default::default(),
            sizes: crate::sizes::Sizes::new(cfg.item_size_max),
            evict_hook: std::sync::OnceLock::new(),
            cut: Default::default(),
            seals: Default::default(),
            reclaiming: std::sync::atomic::AtomicBool::new(false),
            reclaim: Default::default(),
            codec,
            journal: std::sync::OnceLock::new(),
            aio,
            flash_tuning: FlashTuning {
                min_item: AtomicUsize::new(cfg.flash.as_ref().map_or(usize::MAX, |t| t.min_item)),
                recache_rate: AtomicU32::new(cfg.flash.as_ref().map_or(0, |t| t.recache_rate)),
                item_age: AtomicU32::new(cfg.flash.as_ref().map_or(crate::types::NO_ITEM_AGE, |t| t.item_age)),
            },
            cfg,
        };
        Ok(Arc::new(store))
    }

    /// A handle for one worker thread.
    pub fn worker(self: &Arc<Self>) -> Worker {
        let counters = Arc::new(Counters::default());
        self.worker_joined(&counters);
        self.workers.fetch_add(1, Relaxed);
        // Without a context (zstd could not allocate one) this worker
        // stores values plain and reads compressed ones as misses.
        let zip = self.codec.as_ref().and_then(|c| Zip::new(c.clone()).ok());
        let active = Active::new(self, counters, false);
        Worker {
            store: self.clone(),
            active,
            zip,
            journaled: 0,
            flash_buf: Vec::new(),
            flash_candidates: Vec::new(),
            flash_reads: 0,
            reads: None,
        }
    }

    /// Backs item memory with transparent huge pages where the kernel can
    /// (`-L`).
    pub fn advise_huge_pages(&self) -> std::io::Result<()> {
        self.arena.advise_huge_pages()
    }

    /// The compression codec, with compression on: the server starts its
    /// trainer thread and reports its stats.
    pub fn codec(&self) -> Option<&Arc<Codec>> {
        self.codec.as_ref()
    }

    #[inline]
    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    #[inline]
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Sets `ext_item_age` while running (`extstore item_age N`): items
    /// written at least `secs` ago and not read since go to flash before
    /// memory is full; [`NO_ITEM_AGE`](crate::NO_ITEM_AGE) turns that off.
    /// Nothing without the flash tier.
    pub fn set_flash_item_age(&self, secs: u32) {
        if self.cfg.flash.is_some() {
            self.flash_tuning.item_age.store(secs, Relaxed);
        }
    }

    /// Sets `ext_item_size` while running (`extstore item_size N`): items
    /// smaller than this are evicted rather than sent to flash. Nothing
    /// without the flash tier.
    pub fn set_flash_min_item(&self, bytes: usize) {
        if self.cfg.flash.is_some() {
            self.flash_tuning.min_item.store(bytes, Relaxed);
        }
    }

    /// Sets `ext_recache_rate` while running (`extstore recache_rate N`):
    /// one read from flash in `n` brings its item back (0: none). Nothing
    /// without the flash tier.
    pub fn set_flash_recache_rate(&self, n: u32) {
        if self.cfg.flash.is_some() {
            self.flash_tuning.recache_rate.store(n, Relaxed);
        }
    }

    /// The flash tier's `ext_item_age`, `ext_item_size` and
    /// `ext_recache_rate` now (for `stats settings`); `None` without it.
    pub fn flash_tuning(&self) -> Option<(u32, usize, u32)> {
        self.cfg.flash.as_ref()?;
        let t = &self.flash_tuning;
        Some((t.item_age.load(Relaxed), t.min_item.load(Relaxed), t.recache_rate.load(Relaxed)))
    }

    /// The memory limit now in force (`-m`, or the last `cache_memlimit`).
    pub fn memory_limit(&self) -> usize {
        self.budget.memory_limit()
    }

    /// log2 of the index's bucket count at start (`hashpower_init`).
    pub fn hash_power(&self) -> u32 {
        self.hash_power
    }

    /// Bytes of per-item overhead counted against `-I` (the worst-case header).
    pub const ITEM_OVERHEAD: usize = MAX_HEADER_LEN;

    pub(crate) fn derived_cas(&self, seg: u32, off: usize) -> u64 {
        self.cas_at(self.segs[seg as usize].epoch.load(Relaxed), off)
    }

    /// The CAS derived for an item at `off` of a segment opened at `epoch`.
    pub(crate) fn cas_at(&self, epoch: u64, off: usize) -> u64 {
        (epoch << self.cas_off_bits) | off as u64
    }

    pub(crate) fn cas_of(&self, s: u64, it: &Item<'_>) -> u64 {
        if !self.cfg.cas {
            return 0;
        }
        it.explicit_cas().unwrap_or_else(|| self.derived_cas(slot::seg(s), self.byte_off(s)))
    }

    /// The linked item a slot points at.
    ///
    /// Callers hold the slot's stripe lock, which is what keeps the item alive
    /// and its bytes visible (arena rules 2 and 3).
    pub(crate) fn item_at(&self, s: u64) -> Option<Item<'_>> {
        if slot::is_flash(s) {
            return None;
        }
        // SAFETY: the slot is linked and the caller holds its bucket lock.
        unsafe { self.arena.item(slot::seg(s), self.byte_off(s)) }
    }

    /// The slot of `key`, if linked (expired or not).
    pub(crate) fn find(&self, st: &Stripe, loc: Loc, key: &[u8]) -> Option<(Pos, u64)> {
        st.find(loc.bucket, |s| slot::tag(s) == loc.tag && self.item_at(s).is_some_and(|it| it.key() == key))
    }

    /// The slot of `key` if it is linked and alive; an expired or flushed
    /// item found on the way is unlinked, and the miss says which it was.
    pub(crate) fn lookup(
        &self,
        st: &mut Stripe,
        loc: Loc,
        key: &[u8],
        now: u32,
        c: &Counters,
    ) -> Result<(Pos, u64), Miss> {
        let Some((pos, s)) = self.find(st, loc, key) else {
            // The key in memory is its newest version; without one, a
            // flash slot with its tags may hold it.
            return Err(if self.flash_candidate(st, loc).is_some() { Miss::OnFlash } else { Miss::Absent });
        };
        let it = self.item_at(s).ok_or(Miss::Absent)?;
        let Some(miss) = self.dead(s, &it, now) else { return Ok((pos, s)) };
        let class_len = self.class_len_of(&it, sizes(&it).1);
        self.unlink(st, loc.bucket, pos, s);
        if miss == Miss::Flushed {
            bump(&c.flushed_unlinked);
        } else {
            bump(&c.expired_unlinked);
            if !slot::is_flash(s) {
                self.bands.expired(slot::seg(s), class_len, false);
            }
        }
        Err(miss)
    }

    /// Why the linked item at slot `s` no longer counts (flushed or
    /// expired), if it does not.
    pub(crate) fn dead(&self, s: u64, it: &Item<'_>, now: u32) -> Option<Miss> {
        if self.is_flushed(slot::seg(s)) {
            Some(Miss::Flushed)
        } else if Clock::is_expired(it.expiry(), now) {
            Some(Miss::Expired)
        } else {
            None
        }
    }

    pub(crate) fn unlink(&self, st: &mut Stripe, bucket: u32, pos: Pos, s: u64) {
        st.remove(bucket, pos);
        self.unaccount(st, s);
    }

    /// Takes the item at slot `s`, no longer linked, out of the totals.
    pub(crate) fn unaccount(&self, st: &mut Stripe, s: u64) {
        if slot::is_flash(s) {
            // Linked at a running snapshot's cut, it is still saved (`cut.rs`).
            self.note_flash_death(flash::addr(s));
            st.items -= 1;
            self.bands.flash_unlinked();
            if let Some(t) = &self.cfg.flash {
                t.log.unlink(t.log.region_of(t.log.from_slot(flash::addr(s))));
            }
            return;
        }
        let (len, class_len, plain, stored) = self.item_sizes(s);
        st.items -= 1;
        st.bytes -= len as u64;
        self.band_unlinked(s, len, class_len);
        self.sizes.unlinked(class_len);
        if stored != 0 {
            st.zitems -= 1;
            st.zplain -= plain;
            st.zstored -= stored;
        }
        // Linked at a running snapshot's cut, it is still saved (`cut.rs`).
        self.note_death(slot::seg(s), self.byte_off(s));
        let m = &self.segs[slot::seg(s) as usize];
        // Release: a pin taken on the segment before this item left is
        // seen by whoever finds the segment empty (`clear_segment`).
        m.live_items.fetch_sub(1, Release);
        m.live_bytes.fetch_sub(len as u32, Relaxed);
    }

    /// memcached's `stats sizes_enable` / `sizes_disable` (`-o
    /// track_sizes` at start): counts items linked from now on by size.
    pub fn track_sizes(&self, on: bool) {
        if on {
            self.sizes.enable();
        } else {
            self.sizes.disable();
        }
    }

    /// `stats sizes`: `(size, items)` per 32-byte bucket holding items,
    /// `None` while not tracking ([`Store::track_sizes`]).
    pub fn item_sizes_report(&self) -> Option<Vec<(usize, u64)>> {
        self.sizes.report()
    }

    /// The item at memory slot `s`: its stored bytes, memcached's size for
    /// it, and for a compressed value its original and stored lengths.
    fn item_sizes(&self, s: u64) -> (usize, usize, u64, u64) {
        self.item_at(s).map_or((0, 0, 0, 0), |it| {
            let (len, plain, stored) = sizes(&it);
            (len, self.class_len_of(&it, plain), plain, stored)
        })
    }

    /// Counts the item at slot `s`, just linked, in the totals.
    pub(crate) fn account(&self, st: &mut Stripe, s: u64) {
        if slot::is_flash(s) {
            st.items += 1;
            self.bands.flash_linked();
            if let Some(t) = &self.cfg.flash {
                t.log.link(t.log.region_of(t.log.from_slot(flash::addr(s))));
            }
            return;
        }
        let (len, class_len, plain, stored) = self.item_sizes(s);
        st.items += 1;
        st.bytes += len as u64;
        self.band_linked(s, len, class_len);
        self.sizes.linked(class_len);
        if stored != 0 {
            st.zitems += 1;
            st.zplain += plain;
            st.zstored += stored;
        }
        let m = &self.segs[slot::seg(s) as usize];
        m.live_items.fetch_add(1, Relaxed);
        m.live_bytes.fetch_add(len as u32, Relaxed);
    }

    /// Notes that `seg` holds a value compressed with dictionary `id`: the
    /// segment keeps a reference to the dictionary until it is emptied
    /// (`unuse`), so a dictionary outlives every value that names it
    /// without a count per item (and without visiting items when whole
    /// segments expire or are flushed). The caller holds a reference to
    /// the dictionary (its fresh stored form's, or the item it copies).
    pub(crate) fn attach_dict(&self, seg: u32, id: u8) {
        let Some(codec) = &self.codec else { return };
        if id == NO_DICT {
            return;
        }
        let (word, bit) = (&self.segs[seg as usize].dicts, 1u64 << (id & strata_compress::MAX_DICT_ID));
        // The bit is set once per segment and dictionary: the load keeps
        // later writers off the shared line's locked instruction.
        if word.load(Relaxed) & bit == 0 && word.fetch_or(bit, Relaxed) & bit == 0 {
            let held = codec.retain(id);
            debug_assert!(held, "a dictionary is attached only while referenced");
        }
    }

    /// Gives back the dictionary references of an emptied segment.
    pub(crate) fn detach_dicts(&self, seg: u32) {
        let Some(codec) = &self.codec else { return };
        let mut bits = self.segs[seg as usize].dicts.swap(0, Relaxed);
        while bits != 0 {
            let id = bits.trailing_zeros() as u8;
            bits &= bits - 1;
            codec.release(id);
        }
    }

    /// Links a new item written at `at` for `loc`, replacing `old` if given.
    /// `freq` carries the read count over when only the layout changed.
    /// Returns the journal position of the change (0 without a journal).
    pub(crate) fn link(
        &self,
        st: &mut Stripe,
        loc: Loc,
        old: Option<(Pos, u64)>,
        at: Placed,
        freq: u8,
        c: &Counters,
    ) -> u64 {
        let Placed { seg, off, len } = at;
        add(&c.bytes_stored, len as u64);
        let new = slot::pack(loc.tag, freq, seg, self.granules(off));
        match old {
            Some((pos, s)) => {
                st.set(pos, new);
                self.unaccount(st, s);
            }
            None => {
                let before = st.footprint();
                st.insert(loc.bucket, new);
                self.account(st, new);
                if st.wants_growth() {
                    self.grow(loc.stripe, st, c);
                }
                self.index.note_footprint(before, st.footprint());
                bump(&c.total_items);
                return self.journal_item(new);
            }
        }
        self.account(st, new);
        bump(&c.total_items);
        self.journal_item(new)
    }

    /// Doubles stripe `stripe`'s table: memory items are re-placed by
    /// their keys, flash items by the hash bits their slots carry.
    pub(crate) fn grow(&self, stripe: usize, st: &mut Stripe, c: &Counters) {
        let bits = st.table_bits();
        let dropped = self.index.grow(stripe, st, |s, b| {
            if slot::is_flash(s) {
                return crate::index::replace_flash(s, b, bits);
            }
            Some((self.item_at(s).map_or(0, |it| self.index.locate(it.key()).bucket), s))
        });
        for s in dropped {
            self.unaccount(st, s);
            bump(&c.flash_dropped_growth);
        }
    }

    /// `flush_all`: now if `at` is `None` or not in the future, else at `at`.
    /// Returns the journal position of the change (0 without a journal).
    /// Refused, with nothing changed, once the journal has failed: a flush
    /// the log does not hold would be undone by a crash
    /// ([`StoreError::NotLogged`]).
    pub fn flush_all(&self, at: Option<u32>) -> Result<u64, StoreError> {
        // Under the flush lock, so the journal's order is the flushes' order.
        let _g = self.flush_lock.lock();
        self.check_journal()?;
        Ok(match at {
            Some(t) if t > self.clock.now() => {
                self.flush_at.store(t, Relaxed);
                self.journal().map_or(0, |j| j.flush_at(t))
            }
            _ => {
                self.flush_at.store(0, Relaxed);
                self.flush_now();
                self.journal().map_or(0, |j| j.flush())
            }
        })
    }

    /// A delayed `flush_all` that has come due takes effect. It does so
    /// even after the journal failed: it was acknowledged while the log
    /// worked and is logged as "flush at", and recovery makes a "flush at"
    /// whose time has passed take effect on the first request, so the
    /// cache after a crash is what it is here (the `Flush` record written
    /// now only marks the moment for the records that follow, and none
    /// follow a failed log).
    pub(crate) fn maybe_flush(&self) {
        let at = self.flush_at.load(Relaxed);
        if at != 0 && self.clock.now() >= at {
            let _g = self.flush_lock.lock();
            if self.flush_at.load(Relaxed) == at {
                self.flush_now();
                self.flush_at.store(0, Relaxed);
                // The moment it took effect: writes journaled after this
                // record were made after the flush.
                if let Some(j) = self.journal() {
                    j.flush();
                }
            }
        }
    }

    /// Invalidates everything written so far in O(1): every segment opened
    /// up to now is flushed. Writers move off flushed segments before their
    /// next write, and lookups and eviction drop flushed items lazily.
    pub(crate) fn flush_now(&self) {
        self.flush_epoch.store(self.epoch.load(Relaxed), Relaxed);
    }

    pub fn stats(&self) -> StoreStats {
        let mut s = StoreStats {
            segments_total: self.segs.len() as u64,
            segments_free: self.budget.free_len() as u64,
            segments_in_use: u64::from(self.budget.in_use()),
            segment_size: self.arena.segment_size() as u64,
            memory_limit: self.memory_limit() as u64,
            index_bytes: self.index.memory() as u64,
            hash_power: usize::BITS - 1 - self.index.main_buckets().leading_zeros(),
            ..StoreStats::default()
        };
        for i in 0..self.index.stripes() {
            let st = self.index.lock(i);
            s.curr_items += st.items;
            s.bytes += st.bytes;
            s.compressed_items += st.zitems;
            s.compressed_plain_bytes += st.zplain;
            s.compressed_stored_bytes += st.zstored;
        }
        for c in self.counters.lock().iter() {
            s.total_items += c.total_items.load(Relaxed);
            s.get_expired += c.get_expired.load(Relaxed);
            s.get_flushed += c.get_flushed.load(Relaxed);
            s.evictions += c.evictions.load(Relaxed);
            s.evicted_unfetched += c.evicted_unfetched.load(Relaxed);
            s.evicted_nonzero += c.evicted_nonzero.load(Relaxed);
            s.expired_unfetched += c.expired_unfetched.load(Relaxed);
            s.expired_unlinked += c.expired_unlinked.load(Relaxed);
            s.reinserted += c.reinserted.load(Relaxed);
            s.alloc_last_resort += c.alloc_last_resort.load(Relaxed);
            s.alloc_waited += c.alloc_waited.load(Relaxed);
            s.reclaim_inline += c.reclaim_inline.load(Relaxed);
            s.reclaim_waited += c.reclaim_waited.load(Relaxed);
            s.reclaim_background += c.reclaim_background.load(Relaxed);
            s.segments_evicted += c.segments_evicted.load(Relaxed);
            s.segments_reclaimed += c.segments_reclaimed.load(Relaxed);
            s.bytes_stored += c.bytes_stored.load(Relaxed);
            s.bytes_copied += c.bytes_copied.load(Relaxed);
            s.segments_cleaned += c.segments_cleaned.load(Relaxed);
            s.dead_reclaimed += c.dead_reclaimed.load(Relaxed);
            s.cleaner_us += c.cleaner_ns.load(Relaxed) / 1000;
            s.decompress_errors += c.decompress_errors.load(Relaxed);
        }
        s.compression = self.codec.as_ref().map(|c| c.stats());
        s.flash = self.flash_stats();
        s.dead_bytes = self.dead_bytes() as u64;
        s.idle_bytes = self.idle_bytes() as u64;
        s.evicted_age = self.evicted_age.load(Relaxed);
        s
    }

    /// Live items evicted so far: `stats().evictions` without visiting
    /// every stripe.
    #[cfg(test)]
    pub(crate) fn evictions(&self) -> u64 {
        self.counters.lock().iter().map(|c| c.evictions.load(Relaxed)).sum()
    }

    /// Sets who is told of items evicted from memory (once; later calls
    /// are ignored).
    pub fn on_evict(&self, watcher: Arc<dyn EvictionWatcher>) {
        let _ = self.evict_hook.set(watcher);
    }

    /// Zeroes the counters `stats reset` resets.
    pub fn reset_stats(&self) {
        self.bands.reset();
        for c in self.counters.lock().iter() {
            let all = [
                &c.total_items,
                &c.get_expired,
                &c.get_flushed,
                &c.evictions,
                &c.evicted_unfetched,
                &c.evicted_nonzero,
                &c.expired_unfetched,
                &c.expired_unlinked,
                &c.reinserted,
                &c.alloc_last_resort,
                &c.alloc_waited,
                &c.reclaim_inline,
                &c.reclaim_waited,
                &c.reclaim_background,
                &c.bytes_stored,
                &c.bytes_copied,
                &c.segments_cleaned,
                &c.dead_reclaimed,
                &c.cleaner_ns,
                &c.flash_hits,
                &c.flash_recached,
                &c.flash_misses,
                &c.flash_moved,
                &c.flash_evicted,
                &c.flash_copied,
                &c.flash_reads_async,
                &c.flash_reads_coalesced,
                &c.flash_evicted_bytes,
                &c.flash_aged,
                &c.flash_copy_lost,
                &c.flash_oom,
            ];
            for a in all {
                a.store(0, Relaxed);
            }
        }
    }
}

/// The store's parts, for the crate's other modules: the shared
/// structures they work on (the index, the arena, segment metadata, size
/// bands, the memory budget, the eviction queues), and what they do with
/// the store-wide state (epochs, flush, snapshots, starvation, workers).
/// The hot ones are references, inlined to the same code as a field.
impl Store {
    #[inline]
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    #[inline]
    pub(crate) fn arena(&self) -> &Arena {
        &self.arena
    }

    /// Segment `seg`'s metadata.
    #[inline]
    pub(crate) fn seg(&self, seg: u32) -> &SegMeta {
        &self.segs[seg as usize]
    }

    /// Every segment's metadata, in segment order.
    #[inline]
    pub(crate) fn segs(&self) -> &[SegMeta] {
        &self.segs
    }

    #[inline]
    pub(crate) fn sketch(&self) -> &crate::sketch::Sketch {
        &self.sketch
    }

    #[cfg(test)]
    pub(crate) fn climber(&self) -> &Mutex<crate::climb::Climber> {
        &self.climber
    }

    /// The budget divisor for eviction's copy-forward (`climb.rs`), after a
    /// look at the reads and misses so far with `items` in memory.
    pub(crate) fn copy_divisor(&self, items: u64) -> u64 {
        let (reads, misses) = self.sketch.totals();
        let mut c = self.climber.lock();
        c.observe(reads, misses, 2 * items);
        c.divisor()
    }

    pub(crate) fn bands(&self) -> &crate::bands::Bands {
        &self.bands
    }

    #[inline]
    pub(crate) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The eviction queues, locked.
    pub(crate) fn lock_evict(&self) -> parking_lot::MutexGuard<'_, Evict> {
        self.evict.lock()
    }

    /// What the background reclaimer and the writers share (`reclaim.rs`).
    pub(crate) fn reclaim_state(&self) -> &crate::reclaim::Shared {
        &self.reclaim
    }

    /// A background reclaimer runs: writers leave reclaiming to it.
    pub(crate) fn reclaiming(&self) -> bool {
        self.reclaiming.load(Relaxed)
    }

    /// The I/O threads that read from flash, if any.
    pub(crate) fn aio(&self) -> Option<&crate::aio::Pool> {
        self.aio.as_ref()
    }

    /// A slot's offset in its segment, in bytes.
    #[inline]
    pub(crate) fn byte_off(&self, s: u64) -> usize {
        (slot::off(s) as usize) << self.granule_shift
    }

    /// A byte offset in a segment as a slot holds it (in granules).
    #[inline]
    pub(crate) fn granules(&self, off: usize) -> u32 {
        (off >> self.granule_shift) as u32
    }

    /// The unit items are aligned to in segments, in bytes.
    #[inline]
    pub(crate) fn granule(&self) -> usize {
        1 << self.granule_shift
    }

    /// Epochs handed out so far (the snapshot keeps a lease above it, see
    /// `strata-persist`).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Relaxed)
    }

    /// A new epoch, for a segment opened for writing.
    pub(crate) fn next_epoch(&self) -> u64 {
        self.epoch.fetch_add(1, Relaxed) + 1
    }

    /// Segments opened at or before this epoch hold only flushed items.
    #[inline]
    pub(crate) fn flush_epoch(&self) -> u64 {
        self.flush_epoch.load(Relaxed)
    }

    /// A delayed `flush_all`'s time (0: none scheduled).
    pub(crate) fn flush_at(&self) -> u32 {
        self.flush_at.load(Relaxed)
    }

    /// Schedules a delayed `flush_all` at `at` (0 cancels it), as a
    /// restart or the log's replay finds it.
    pub(crate) fn set_flush_at(&self, at: u32) {
        self.flush_at.store(at, Relaxed);
    }

    /// Raises the epochs to a snapshot's (see [`Store::resume`]).
    pub(crate) fn raise_epochs(&self, epoch: u64, flush_epoch: u64) {
        self.epoch.fetch_max(epoch, Relaxed);
        self.flush_epoch.fetch_max(flush_epoch, Relaxed);
    }

    /// The running snapshot's cut (`cut.rs`).
    pub(crate) fn cut(&self) -> &crate::cut::Cut {
        &self.cut
    }

    pub(crate) fn seals(&self) -> &crate::seal::Seals {
        &self.seals
    }

    /// Who wants to hear of evictions now, if anyone.
    pub(crate) fn eviction_watcher(&self) -> Option<&Arc<dyn EvictionWatcher>> {
        self.evict_hook.get().filter(|h| h.wanted())
    }

    /// Notes how long the item evicted last had been stored.
    pub(crate) fn note_evicted_age(&self, age: u32) {
        self.evicted_age.store(age, Relaxed);
    }

    /// A worker (or the reclaimer) starts: its counters join the totals.
    pub(crate) fn worker_joined(&self, counters: &Arc<Counters>) {
        self.counters.lock().push(counters.clone());
    }

    /// The background reclaimer starts: its counters join the totals and
    /// writers leave reclaiming to it.
    pub(crate) fn reclaimer_joined(&self, counters: &Arc<Counters>) {
        self.worker_joined(counters);
        self.reclaiming.store(true, Relaxed);
    }

    /// Workers now.
    pub(crate) fn worker_count(&self) -> usize {
        self.workers.load(Relaxed)
    }

    /// A worker ended (its counters stay in the totals).
    pub(crate) fn worker_left(&self) {
        self.workers.fetch_sub(1, Relaxed);
    }

    /// Every worker's counters, locked (for totals).
    pub(crate) fn worker_counters(&self) -> parking_lot::MutexGuard<'_, Vec<Arc<Counters>>> {
        self.counters.lock()
    }

    /// The flash tier's `ext_item_size` now.
    pub(crate) fn flash_min_item(&self) -> usize {
        self.flash_tuning.min_item.load(Relaxed)
    }

    /// The flash tier's `ext_item_age` now.
    pub(crate) fn flash_item_age(&self) -> u32 {
        self.flash_tuning.item_age.load(Relaxed)
    }

    /// The flash tier's `ext_recache_rate` now.
    pub(crate) fn flash_recache_rate(&self) -> u32 {
        self.flash_tuning.recache_rate.load(Relaxed)
    }

    /// Starts reporting changes to `journal` (once; before workers write).
    pub fn set_journal(&self, journal: Arc<dyn crate::journal::Journal>) {
        let _ = self.journal.set(journal);
    }

    pub(crate) fn journal(&self) -> Option<&dyn crate::journal::Journal> {
        self.journal.get().map(|j| &**j)
    }
}

/// An item's bytes, and for a compressed value its original and stored
/// value lengths ((0, 0) for a plain one).
pub(crate) fn sizes(it: &Item<'_>) -> (usize, u64, u64) {
    let len = it.header.total_len();
    if !it.compressed() {
        return (len, 0, 0);
    }
    let plain = strata_compress::original_len(it.value()).unwrap_or(0) as u64;
    (len, plain, it.value().len() as u64)
}

/// Why a lookup found nothing alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    Absent,
    Expired,
    Flushed,
    /// Not in memory, but a flash slot may hold it: bring it in first.
    OnFlash,
}

impl Store {
    /// The CAS an item written at `seg`/`off` with fields `f` reads back as.
    pub(crate) fn placed_cas(&self, seg: u32, off: usize, f: &Fields) -> u64 {
        if !self.cfg.cas {
            return 0;
        }
        f.cas.unwrap_or_else(|| self.derived_cas(seg, off))
    }

    /// Rewrites the state byte of a linked item in place. Takes the
    /// item's header, not a view of it: no view of the item's bytes may be
    /// alive across this write (arena rule 4), so callers read what they
    /// need first and take a new view after.
    pub(crate) fn set_state(&self, s: u64, header: Header, bits: u8) {
        if let Some(at) = header.state_at() {
            // SAFETY: the caller holds the item's bucket lock, the only way
            // anyone reads or writes a state byte (arena rule 4).
            let dst = unsafe { self.arena.bytes_mut(slot::seg(s), self.byte_off(s) + at, 1) };
            dst[0] = bits;
        }
    }

    /// Rewrites the expiry of a linked item in place; false if it has no
    /// expiry field to rewrite. As for [`Store::set_state`], no view of the
    /// item may be alive across this.
    pub(crate) fn set_expiry(&self, s: u64, header: Header, expiry: u32) -> bool {
        match header.expiry_at() {
            Some(at) => {
                // SAFETY: the caller holds the item's bucket lock, the only
                // way anyone reads or writes an expiry field (arena rule 4).
                let dst = unsafe { self.arena.bytes_mut(slot::seg(s), self.byte_off(s) + at, 4) };
                dst.copy_from_slice(&expiry.to_le_bytes());
                self.note_expiry(slot::seg(s), expiry);
                true
            }
            None => expiry == 0,
        }
    }
}
