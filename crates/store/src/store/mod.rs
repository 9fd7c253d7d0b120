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
//! (the operations), `worker.rs` (the per-thread handle). This one's
//! files: this (the struct, its construction and settings), `items.rs`
//! (finding, linking and unlinking items, CAS, in-place header changes),
//! `totals.rs` (`flush_all`, `stats`, their counters) and `parts.rs` (the
//! store's parts as the crate's other modules reach them).

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;
use strata_compress::{Codec, NO_DICT};

use crate::arena::Arena;
use crate::clock::Clock;
use crate::index::{flash, slot, Index, Loc, Pos, Stripe};
use crate::item::{Fields, Header, Item, MAX_HEADER_LEN};
use crate::segments::Evict;
use crate::segments::{Budget, Placed, SegMeta};
use crate::types::{Config, ConfigError, StoreError, StoreStats};

mod bands;
mod items;
mod memory;
mod parts;
mod totals;

pub(crate) use items::{sizes, Miss, SegTally};

pub(crate) use crate::counters::{add, bump, Counters};

/// The shared cache. Operations go through a per-thread [`Worker`](crate::Worker).
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
    /// Segments' epochs and the flushes (`segments.rs`).
    epochs: crate::segments::Epochs,
    flush_lock: Mutex<()>,
    /// Every worker's counters, and who works (`counters.rs`).
    roster: crate::counters::Roster,
    /// Compression's shared half (dictionaries), with compression on.
    codec: Option<Arc<Codec>>,
    /// With `--durability`: where client changes are reported.
    journal: std::sync::OnceLock<Arc<dyn crate::journal::Journal>>,
    /// With the flash tier and `ext_threads` > 0: the threads that read
    /// from flash for workers that ask ([`Worker::enable_async_flash`](crate::Worker::enable_async_flash)).
    aio: Option<crate::aio::Pool>,
    /// Seconds the item evicted last had been stored (memcached's
    /// `evicted_time`, which is since its last access: strata keeps no
    /// access time).
    evicted_age: AtomicU32,
    /// Items counted by size (`bands.rs`).
    bands: crate::bands::Bands,
    /// Reads of every key lately (`sketch.rs`), for eviction.
    sketch: crate::sketch::Sketch,
    /// Keys evicted unread lately (`ghost.rs`), for eviction.
    ghost: crate::ghost::Ghost,
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
        let hash_power = if cfg.hash_power != 0 { cfg.hash_power.clamp(4, 32) } else { crate::index::START_HASH_POWER };
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
            // The cold level's context is held to the same share.
            z.cold_memory_max = cap;
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
            epochs: Default::default(),
            flush_lock: Mutex::new(()),
            roster: Default::default(),
            evicted_age: AtomicU32::new(0),
            bands: crate::bands::Bands::new(cfg.size_classes, cfg.cas),
            sketch: crate::sketch::Sketch::new(cfg.memory_limit),
            ghost: crate::ghost::Ghost::new(cfg.memory_limit),
            climber: Default::default(),
            sizes: crate::sizes::Sizes::new(cfg.item_size_max),
            evict_hook: std::sync::OnceLock::new(),
            cut: Default::default(),
            seals: Default::default(),
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
}
