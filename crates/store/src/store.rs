//! Segments' life cycle and the cache operations.
//!
//! **Segments.** The memory limit is cut into fixed-size segments. Each worker
//! appends items to its own active segment for the item's TTL class, so items
//! of similar expiry share segments and a whole segment can be dropped once
//! its last item has expired, without a scan. A full segment is sealed onto
//! an eviction queue; its metadata (write offset, live items and bytes,
//! latest expiry, epoch) is kept apart from its data.
//!
//! **CAS.** A fresh item's CAS is derived from where it was written:
//! `epoch(segment) << offset_bits | offset`, where a segment gets a new epoch
//! from a global counter every time it is (re)opened for writing. That is
//! unique per write and costs no bytes per item. An item that is moved
//! (eviction copy-forward) or rewritten with unchanged contents (`touch` that
//! needs a new header) carries its previous CAS explicitly, so clients never
//! see a CAS change without a change of value.
//!
//! **Eviction.** When no free segment is left, a worker takes a victim: first
//! a sealed segment with no live items or whose items have all expired, else
//! (evictions on) the oldest segment of new writes while they hold more than
//! a tenth of the sealed segments, or the oldest segment of copied items
//! (S3-FIFO's small and main queues, see [`Evict`]). Each live item of the
//! victim is, under its bucket lock, either copied forward into the eviction
//! target segment (when it was read since written) or unlinked. With `-M` (no
//! evictions), only empty or expired segments are reclaimed, plus compaction
//! of the sparsest segment when all its live items fit in the target;
//! otherwise the write fails with out-of-memory.
//! Eviction runs under one mutex, taken once per segment allocated (not per
//! request); lock order is eviction mutex → bucket lock, never the reverse.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::arena::Arena;
use crate::clock::Clock;
use crate::index::{slot, Index, Loc, Pos, Stripe};
use crate::item::{encoded_len, state, write_head, Fields, Header, Item, MAX_HEADER_LEN};
use crate::timelog::TimeLog;

/// Errors of the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("out of memory")]
    OutOfMemory,
    #[error("object too large for cache")]
    TooLarge,
    #[error("the item kept changing under concurrent writers")]
    Contended,
    #[error("invalid store configuration: {0}")]
    BadConfig(&'static str),
}

/// Store settings, from the server's flags.
#[derive(Debug, Clone)]
pub struct Config {
    /// `-m`: bytes of item memory.
    pub memory_limit: usize,
    /// Address space reserved for segments, so `cache_memlimit` can raise the
    /// limit up to it at run time; untouched pages cost no RAM. 0: `memory_limit`.
    pub memory_reserve: usize,
    /// `-I`: the largest item (header, key and value).
    pub item_size_max: usize,
    /// Segment size; 0 picks max(1 MiB, `item_size_max`).
    pub segment_size: usize,
    /// `-M` turns this off.
    pub evictions: bool,
    /// `-C` turns this off: CAS values read as 0 and `cas` never matches
    /// (EXISTS), as in memcached.
    pub cas: bool,
    /// log2 of the number of index buckets at start (the index grows with
    /// the items); 0 picks 2^16, or fewer for a small memory limit.
    pub hash_power: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            memory_limit: 64 << 20,
            memory_reserve: 0,
            item_size_max: 1 << 20,
            segment_size: 0,
            evictions: true,
            cas: true,
            hash_power: 0,
        }
    }
}

/// Storage modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// The classic `cas` command: `Set` with a compare value.
    Cas(u64),
}

/// Result of a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    Stored,
    NotStored,
    Exists,
    NotFound,
}

/// A storage request with every option the protocols can ask for.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub op: SetOp,
    pub key: &'a [u8],
    pub flags: u32,
    /// Server-relative expiry (see [`Clock::expiry`]), 0 for never.
    pub expiry: u32,
    pub value: &'a [u8],
    /// Store only if the item's CAS is this (`ms C`); with `Set`, a missing
    /// item is `NotFound`, as for `cas`.
    pub compare: Option<u64>,
    /// With `compare`: a compare value older than the item's CAS still stores,
    /// but the new item is stale (`ms I`).
    pub invalidate: bool,
    /// The stored item's CAS, instead of a fresh one (`ms E`).
    pub new_cas: Option<u64>,
    /// Append/prepend to a missing item creates it with this expiry (`ms N`).
    pub vivify: Option<u32>,
    /// The key came in base64 (`ms b`): the item remembers, for replies.
    pub binary_key: bool,
}

impl<'a> Write<'a> {
    pub fn new(op: SetOp, key: &'a [u8], flags: u32, expiry: u32, value: &'a [u8]) -> Write<'a> {
        Write {
            op,
            key,
            flags,
            expiry,
            value,
            compare: None,
            invalidate: false,
            new_cas: None,
            vivify: None,
            binary_key: false,
        }
    }
}

/// What a storage request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub outcome: StoreOutcome,
    /// The CAS of the item written (0 if nothing was written).
    pub cas: u64,
    /// Value length of the item written (after append/prepend).
    pub size: usize,
}

/// How a read treats the item it finds.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOpts {
    /// Count the read toward keeping the item (memcached's LRU bump;
    /// `mg u` turns it off).
    pub bump: bool,
    /// Set this expiry on a hit (`touch`, `gat`, `mg T`).
    pub touch: Option<u32>,
    /// Hand out the recache token of a stale item (`mg`; classic reads
    /// return stale items without taking part).
    pub tokens: bool,
    /// Hand out the recache token if the item expires before this
    /// server-relative time (`mg R`).
    pub recache_before: Option<u32>,
    /// On a miss, create an empty item with this expiry and hand out its
    /// recache token (`mg N`).
    pub vivify: Option<u32>,
    /// CAS of an item the read creates (`mg E`).
    pub new_cas: Option<u64>,
    /// Look up when the item was written (`mg l`; it takes a lock, so
    /// only on request).
    pub written: bool,
}

impl ReadOpts {
    /// A plain `get`.
    pub const GET: ReadOpts = ReadOpts {
        bump: true,
        touch: None,
        tokens: false,
        recache_before: None,
        vivify: None,
        new_cas: None,
        written: false,
    };
}

/// An item as handed to a reader, valid only inside the reader's closure.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    /// Expiry before the read (server-relative, 0 for never).
    pub expiry_before: u32,
    /// Expiry after the read (differs when it touched the item).
    pub expiry: u32,
    /// Read before this read.
    pub fetched: bool,
    /// When the item was written (server-relative seconds), if asked for
    /// ([`ReadOpts::written`]); else 0.
    pub written: u32,
    /// Marked stale (`X`).
    pub stale: bool,
    /// Someone else already holds the recache token (`Z`).
    pub token_sent: bool,
    /// This read took the recache token (`W`).
    pub won: bool,
    /// This read created the item (`mg N` on a miss).
    pub created: bool,
    /// Stored under a base64 key (`ms b`).
    pub binary_key: bool,
}

/// Result of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    Value(u64),
    NotFound,
    NonNumeric,
    /// The compare value did not match (`ma C`).
    Exists,
    /// A created item could not be stored (`ma N` losing a race it retries
    /// too often).
    NotStored,
}

/// An incr/decr request with the meta protocol's options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arith {
    pub incr: bool,
    pub delta: u64,
    pub compare: Option<u64>,
    pub new_cas: Option<u64>,
    /// New expiry on success (`ma T`).
    pub touch: Option<u32>,
    /// On a miss, create the item holding `initial` with this expiry (`ma N`, `J`).
    pub vivify: Option<u32>,
    pub initial: u64,
}

/// What incr/decr did, and the item after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub outcome: ArithOutcome,
    pub cas: u64,
    /// Expiry before the request changed it (0 for a created item).
    pub expiry_before: u32,
    pub expiry: u32,
    /// The item did not exist and `vivify` created it.
    pub created: bool,
}

/// A delete request with the meta protocol's options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delete {
    pub compare: Option<u64>,
    pub new_cas: Option<u64>,
    /// Keep the item, marked stale, with a new CAS (`md I`).
    pub invalidate: bool,
    /// New expiry of an item kept by `invalidate` (else unchanged) or
    /// emptied by `remove_value` (else never).
    pub touch: Option<u32>,
    /// Keep the item with an empty value, client flags `flags` and the same
    /// CAS (`md x`; with `invalidate` it then gets a new one).
    pub remove_value: bool,
    pub flags: u32,
}

/// Result of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    Exists,
}

/// Everything known about an item, for `me`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspect {
    pub expiry: u32,
    pub written: u32,
    pub cas: u64,
    pub fetched: bool,
    /// Bytes the item occupies (header, key and value).
    pub size: usize,
    pub binary_key: bool,
}

/// TTL classes: never, ≤1 min, ≤5 min, ≤30 min, ≤3 h, ≤1 day, ≤7 days, longer.
pub const TTL_CLASSES: usize = 8;

fn ttl_class(expiry: u32, now: u32) -> usize {
    if expiry == 0 {
        return 0;
    }
    match expiry.saturating_sub(now) {
        0..=60 => 1,
        61..=300 => 2,
        301..=1800 => 3,
        1801..=10_800 => 4,
        10_801..=86_400 => 5,
        86_401..=604_800 => 6,
        _ => 7,
    }
}

/// `max_expire` of a segment holding at least one item that never expires.
const NEVER: u32 = u32::MAX;

#[derive(Debug, Default)]
struct SegMeta {
    write_off: AtomicU32,
    live_items: AtomicU32,
    live_bytes: AtomicU32,
    /// Latest expiry of any item written into it ([`NEVER`] if one never expires).
    max_expire: AtomicU32,
    epoch: AtomicU64,
    /// The latest second noted in `times`, checked without its lock.
    last_mark: AtomicU32,
    times: Mutex<TimeLog>,
}

/// The share of sealed segments the queue of new writes may hold before
/// eviction turns to it (S3-FIFO's small queue; its paper's 10% was also the
/// best of 5, 10 and 20% on workload 5).
const SMALL_QUEUE_PERCENT: usize = 10;

/// A sealed segment whose live items fill at most this fraction of it is
/// compacted (its live items copied forward, none evicted) before a writer
/// gets a never-used segment, so under overwrites memory follows the live
/// data instead of climbing to `-m`, and writers stop paying a page fault per
/// 4 KiB written. Measured: segments in use stay under twice the live data
/// (store test; 197 MB RSS for 101 MB of live 1000-byte items), at ~0.3
/// items copied per item written; copying is at most a third of a byte per
/// byte won back.
const COMPACT_BELOW_DIV: usize = 4;

/// How many of the oldest segments of each queue are looked at for
/// compaction: the oldest have had the longest to be overwritten, and a
/// bounded look keeps a huge `-m` from costing a long scan per segment.
const COMPACT_SCAN: usize = 64;

/// Eviction order, after S3-FIFO (Yang et al., SOSP 2023) at segment
/// granularity: new writes are sealed into `small`, and an item there that
/// was not read by the time its segment is evicted goes at once, so the
/// one-hit keys a cache-aside miss stream writes cannot push out items that
/// are read. Items read since written are copied forward into the target,
/// which is sealed into `main`, a FIFO with reinsertion (CLOCK). Raised the
/// hit ratio on workload 5 from 76.4% to 81.0% (memcached: 76.5%;
/// `docs/benchmarks.md`).
#[derive(Debug, Default)]
struct Evict {
    /// Sealed segments of new writes, oldest first.
    small: VecDeque<u32>,
    /// Sealed segments of items copied forward, oldest first.
    main: VecDeque<u32>,
    /// Where copied-forward items go.
    target: Option<u32>,
}

/// Per-worker counters, written only by their worker, summed for `stats`.
#[derive(Debug, Default)]
pub struct Counters {
    pub total_items: AtomicU64,
    pub get_expired: AtomicU64,
    pub get_flushed: AtomicU64,
    pub flushed_unlinked: AtomicU64,
    pub evictions: AtomicU64,
    pub expired_unlinked: AtomicU64,
    pub reinserted: AtomicU64,
    pub segments_evicted: AtomicU64,
    pub segments_reclaimed: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed) + 1, Relaxed);
}

/// Totals for `stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub curr_items: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
    pub bytes: u64,
    pub total_items: u64,
    pub evictions: u64,
    pub expired_unlinked: u64,
    pub reinserted: u64,
    pub segments_evicted: u64,
    pub segments_reclaimed: u64,
    pub segments_total: u64,
    pub segments_free: u64,
    pub segment_size: u64,
    pub memory_limit: u64,
    pub index_bytes: u64,
    /// log2 of the index's main buckets now (rounded down: stripes grow
    /// one at a time).
    pub hash_power: u32,
}

/// The shared cache. Operations go through a per-thread [`Worker`].
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
    free: Mutex<Vec<u32>>,
    /// Segments beyond the current limit (see [`Store::set_memory_limit`]).
    parked: Mutex<Vec<u32>>,
    limit_segs: AtomicU32,
    /// Segments off the free and parked lists (written, sealed or target).
    in_use: AtomicU32,
    memory_limit: AtomicUsize,
    evict: Mutex<Evict>,
    epoch: AtomicU64,
    /// Segments opened at or before this epoch hold only flushed items.
    flush_epoch: AtomicU64,
    flush_at: AtomicU32,
    flush_lock: Mutex<()>,
    counters: Mutex<Vec<Arc<Counters>>>,
}

impl Store {
    pub fn new(mut cfg: Config, clock: Arc<Clock>) -> Result<Arc<Store>, StoreError> {
        if cfg.item_size_max < 1024 {
            return Err(StoreError::BadConfig("item size limit below 1 KiB"));
        }
        let seg_size = if cfg.segment_size == 0 { cfg.item_size_max.max(1 << 20) } else { cfg.segment_size };
        if seg_size < cfg.item_size_max || seg_size > u32::MAX as usize / 2 {
            return Err(StoreError::BadConfig("segment size must hold the largest item"));
        }
        cfg.segment_size = seg_size;
        cfg.memory_reserve = cfg.memory_reserve.max(cfg.memory_limit);
        let nsegs = (cfg.memory_reserve / seg_size).min(slot::MAX_SEGMENTS as usize - 1);
        let limit = (cfg.memory_limit / seg_size).min(nsegs);
        if limit < 2 {
            return Err(StoreError::BadConfig("memory limit must hold at least two segments"));
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
        let arena = Arena::new(seg_size, nsegs as u32)?;
        let segs: Box<[SegMeta]> = (0..nsegs).map(|_| SegMeta::default()).collect();
        let store = Store {
            arena,
            segs,
            index: Index::new(hash_power),
            hash_power,
            clock,
            granule_shift,
            cas_off_bits: seg_bits,
            free: Mutex::new((1..limit as u32).rev().collect()),
            parked: Mutex::new((limit as u32..nsegs as u32).collect()),
            limit_segs: AtomicU32::new(limit as u32),
            in_use: AtomicU32::new(1),
            memory_limit: AtomicUsize::new(cfg.memory_limit),
            evict: Mutex::new(Evict::default()),
            epoch: AtomicU64::new(0),
            flush_epoch: AtomicU64::new(0),
            flush_at: AtomicU32::new(0),
            flush_lock: Mutex::new(()),
            counters: Mutex::new(Vec::new()),
            cfg,
        };
        // Segment 0 starts as the eviction target, so copy-forward and -M
        // compaction always have somewhere to go.
        store.open_segment(0);
        store.evict.lock().target = Some(0);
        Ok(Arc::new(store))
    }

    /// A handle for one worker thread.
    pub fn worker(self: &Arc<Self>) -> Worker {
        let counters = Arc::new(Counters::default());
        self.counters.lock().push(counters.clone());
        Worker { store: self.clone(), active: Active { segs: [None; TTL_CLASSES], counters } }
    }

    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The memory limit now in force (`-m`, or the last `cache_memlimit`).
    pub fn memory_limit(&self) -> usize {
        self.memory_limit.load(Relaxed)
    }

    /// log2 of the index's bucket count at start (`hashpower_init`).
    pub fn hash_power(&self) -> u32 {
        self.hash_power
    }

    /// Bytes of per-item overhead counted against `-I` (the worst-case header).
    pub const ITEM_OVERHEAD: usize = MAX_HEADER_LEN;

    fn granule(&self) -> usize {
        1 << self.granule_shift
    }

    fn aligned(&self, len: usize) -> usize {
        (len + self.granule() - 1) & !(self.granule() - 1)
    }

    fn byte_off(&self, s: u64) -> usize {
        (slot::off(s) as usize) << self.granule_shift
    }

    fn open_segment(&self, seg: u32) {
        let m = &self.segs[seg as usize];
        m.write_off.store(0, Relaxed);
        m.live_items.store(0, Relaxed);
        m.live_bytes.store(0, Relaxed);
        m.max_expire.store(0, Relaxed);
        m.epoch.store(self.epoch.fetch_add(1, Relaxed) + 1, Relaxed);
        m.last_mark.store(0, Relaxed);
        m.times.lock().clear();
    }

    /// Notes that the item at `off` of `seg` was written at `time`; called
    /// by the segment's one writer.
    fn note_written(&self, seg: u32, off: usize, time: u32) {
        let m = &self.segs[seg as usize];
        if m.last_mark.load(Relaxed) != time {
            m.last_mark.store(time, Relaxed);
            m.times.lock().note(off as u32, time);
        }
    }

    /// When the item at slot `s` was written.
    fn written_at(&self, s: u64) -> u32 {
        let m = &self.segs[slot::seg(s) as usize];
        m.times.lock().time_at(self.byte_off(s) as u32).unwrap_or(0)
    }

    /// Whether `seg` was opened before the latest `flush_all` took effect:
    /// then everything in it is invalid (memcached's `oldest_live`, kept per
    /// segment instead of per item).
    fn is_flushed(&self, seg: u32) -> bool {
        self.segs[seg as usize].epoch.load(Relaxed) <= self.flush_epoch.load(Relaxed)
    }

    fn note_expiry(&self, seg: u32, expiry: u32) {
        let e = if expiry == 0 { NEVER } else { expiry };
        self.segs[seg as usize].max_expire.fetch_max(e, Relaxed);
    }

    fn derived_cas(&self, seg: u32, off: usize) -> u64 {
        (self.segs[seg as usize].epoch.load(Relaxed) << self.cas_off_bits) | off as u64
    }

    fn cas_of(&self, s: u64, it: &Item<'_>) -> u64 {
        if !self.cfg.cas {
            return 0;
        }
        it.explicit_cas().unwrap_or_else(|| self.derived_cas(slot::seg(s), self.byte_off(s)))
    }

    /// The linked item a slot points at.
    ///
    /// Callers hold the slot's stripe lock, which is what keeps the item alive
    /// and its bytes visible (arena rules 2 and 3).
    fn item_at(&self, s: u64) -> Option<Item<'_>> {
        // SAFETY: the slot is linked and the caller holds its bucket lock.
        unsafe { self.arena.item(slot::seg(s), self.byte_off(s)) }
    }

    /// The slot of `key`, if linked (expired or not).
    fn find(&self, st: &Stripe, loc: Loc, key: &[u8]) -> Option<(Pos, u64)> {
        st.find(loc.bucket, |s| slot::tag(s) == loc.tag && self.item_at(s).is_some_and(|it| it.key() == key))
    }

    /// The slot of `key` if it is linked and alive; an expired or flushed
    /// item found on the way is unlinked, and the miss says which it was.
    fn lookup(&self, st: &mut Stripe, loc: Loc, key: &[u8], now: u32, c: &Counters) -> Result<(Pos, u64), Miss> {
        let (pos, s) = self.find(st, loc, key).ok_or(Miss::Absent)?;
        let it = self.item_at(s).ok_or(Miss::Absent)?;
        if self.is_flushed(slot::seg(s)) {
            self.unlink(st, loc.bucket, pos, s);
            bump(&c.flushed_unlinked);
            return Err(Miss::Flushed);
        }
        if Clock::is_expired(it.expiry(), now) {
            self.unlink(st, loc.bucket, pos, s);
            bump(&c.expired_unlinked);
            return Err(Miss::Expired);
        }
        Ok((pos, s))
    }

    fn unlink(&self, st: &mut Stripe, bucket: u32, pos: Pos, s: u64) {
        let len = self.item_at(s).map_or(0, |it| it.header.total_len());
        st.remove(bucket, pos);
        self.unaccount(st, s, len);
    }

    fn unaccount(&self, st: &mut Stripe, s: u64, len: usize) {
        st.items -= 1;
        st.bytes -= len as u64;
        let m = &self.segs[slot::seg(s) as usize];
        m.live_items.fetch_sub(1, Relaxed);
        m.live_bytes.fetch_sub(len as u32, Relaxed);
    }

    fn account(&self, st: &mut Stripe, seg: u32, len: usize) {
        st.items += 1;
        st.bytes += len as u64;
        let m = &self.segs[seg as usize];
        m.live_items.fetch_add(1, Relaxed);
        m.live_bytes.fetch_add(len as u32, Relaxed);
    }

    /// Links a new item written at `at` for `loc`, replacing `old` if given.
    /// `freq` carries the read count over when only the layout changed.
    fn link(&self, st: &mut Stripe, loc: Loc, old: Option<(Pos, u64)>, at: Placed, freq: u8, c: &Counters) {
        let Placed { seg, off, len } = at;
        let new = slot::pack(loc.tag, freq, seg, (off >> self.granule_shift) as u32);
        match old {
            Some((pos, s)) => {
                let old_len = self.item_at(s).map_or(0, |it| it.header.total_len());
                st.set(pos, new);
                self.unaccount(st, s, old_len);
            }
            None => {
                let before = st.footprint();
                st.insert(loc.bucket, new);
                self.account(st, seg, len);
                if st.wants_growth() {
                    self.index
                        .grow(loc.stripe, st, |s| self.item_at(s).map_or(0, |it| self.index.locate(it.key()).bucket));
                }
                self.index.note_footprint(before, st.footprint());
                bump(&c.total_items);
                return;
            }
        }
        self.account(st, seg, len);
        bump(&c.total_items);
    }

    fn seal(&self, seg: u32) {
        self.evict.lock().small.push_back(seg);
    }

    /// A fresh segment for a writer: a mostly dead one compacted, else from
    /// the free list, else by eviction.
    fn alloc_segment(&self, c: &Counters) -> Result<u32, StoreError> {
        let mut ev = self.evict.lock();
        if let Some(s) = self.compact_sparsest(&mut ev, c) {
            self.open_segment(s);
            return Ok(s);
        }
        for _ in 0..16 {
            if let Some(s) = self.pop_free() {
                self.open_segment(s);
                return Ok(s);
            }
            let Some(victim) = self.pick_victim(&mut ev) else { break };
            self.clear_segment(victim, &mut ev, c, false);
            if victim >= self.limit_segs.load(Relaxed) {
                // Above a lowered limit: retire it instead of reusing it.
                self.retire(victim, &self.parked);
                continue;
            }
            if self.in_use.load(Relaxed) > self.segment_budget() {
                // The index has grown into the segments' share of the limit.
                self.retire(victim, &self.free);
                continue;
            }
            let room = ev.target.filter(|&t| !self.is_flushed(t)).map_or(0, |t| self.room(t));
            if room < self.arena.segment_size() / 8 {
                // The target is (nearly) full: seal it and let the victim
                // become the new target, then find another for the writer.
                if let Some(t) = ev.target.take() {
                    ev.main.push_back(t);
                }
                self.open_segment(victim);
                ev.target = Some(victim);
                continue;
            }
            self.open_segment(victim);
            return Ok(victim);
        }
        Err(StoreError::OutOfMemory)
    }

    /// Empties the sparsest of the oldest sealed segments, if its live items
    /// fill at most `1/COMPACT_BELOW_DIV` of it, by copying them into the
    /// eviction target, and returns it. When the target is too full, a free
    /// segment becomes the target and a second sparse segment is emptied
    /// into it and handed back to the free list (still paged in), so
    /// compaction never takes more segments than it frees.
    fn compact_sparsest(&self, ev: &mut Evict, c: &Counters) -> Option<u32> {
        let most = self.arena.segment_size() / COMPACT_BELOW_DIV;
        let room = ev.target.filter(|&t| !self.is_flushed(t)).map_or(0, |t| self.room(t));
        let (victim, need) = self.sparsest(ev, most, COMPACT_SCAN)?;
        if need <= room {
            self.take_and_clear(ev, victim, c);
            return Some(victim);
        }
        let t = self.pop_free()?;
        self.open_segment(t);
        if let Some(old) = ev.target.replace(t) {
            ev.main.push_back(old);
        }
        self.take_and_clear(ev, victim, c);
        if let Some((second, _)) = self.sparsest(ev, most.min(self.room(t)), COMPACT_SCAN) {
            self.take_and_clear(ev, second, c);
            self.unuse(second, &self.free);
        }
        Some(victim)
    }

    /// Whether nothing in sealed segment `s` can be read any more: every
    /// item expired, or the segment predates the last `flush_all`.
    fn all_expired(&self, s: u32, now: u32) -> bool {
        let e = self.segs[s as usize].max_expire.load(Relaxed);
        (e != NEVER && e <= now) || self.is_flushed(s)
    }

    /// Room that copying `s`'s live items forward takes (each may gain an
    /// explicit CAS and a granule of alignment); 0 if nothing in it is alive.
    fn copy_need(&self, s: u32, now: u32) -> usize {
        if self.all_expired(s, now) {
            return 0;
        }
        let m = &self.segs[s as usize];
        m.live_bytes.load(Relaxed) as usize + m.live_items.load(Relaxed) as usize * (8 + self.granule())
    }

    /// The sealed segment, among the `scan` oldest of each queue, whose live
    /// items need the least room to be copied, and that room, if it is at
    /// most `most`.
    fn sparsest(&self, ev: &Evict, most: usize, scan: usize) -> Option<(u32, usize)> {
        let now = self.clock.now();
        let oldest = ev.small.iter().take(scan).chain(ev.main.iter().take(scan));
        oldest.map(|&s| (s, self.copy_need(s, now))).min_by_key(|&(_, n)| n).filter(|&(_, n)| n <= most)
    }

    /// Takes `seg` off whichever queue holds it.
    fn take(ev: &mut Evict, seg: u32) -> Option<u32> {
        let (small, main) = (&mut ev.small, &mut ev.main);
        [small, main].into_iter().find_map(|q| q.iter().position(|&s| s == seg).and_then(|i| q.remove(i)))
    }

    /// Takes `seg` off its queue and moves all its live items to the target.
    fn take_and_clear(&self, ev: &mut Evict, seg: u32, c: &Counters) {
        Self::take(ev, seg);
        self.clear_segment(seg, ev, c, true);
    }

    /// How many segments may be in use: the memory limit covers the index
    /// too, so that RSS stays near `-m` whatever the item size (memcached's
    /// `-m` leaves its hash table out).
    fn segment_budget(&self) -> u32 {
        let spare = self.memory_limit.load(Relaxed).saturating_sub(self.index.memory());
        let segs = u32::try_from(spare / self.arena.segment_size()).unwrap_or(u32::MAX);
        segs.min(self.limit_segs.load(Relaxed)).max(2)
    }

    /// A free segment within the current limit and budget; free segments
    /// above the limit are parked.
    fn pop_free(&self) -> Option<u32> {
        if self.in_use.load(Relaxed) >= self.segment_budget() {
            return None;
        }
        let limit = self.limit_segs.load(Relaxed);
        let mut free = self.free.lock();
        while let Some(s) = free.pop() {
            if s < limit {
                self.in_use.fetch_add(1, Relaxed);
                return Some(s);
            }
            self.parked.lock().push(s);
        }
        None
    }

    /// Takes an emptied segment out of use and gives its memory back.
    fn retire(&self, seg: u32, to: &Mutex<Vec<u32>>) {
        // SAFETY: `seg` was cleared by the caller under the eviction lock: no
        // item links into it and no writer holds it.
        unsafe { self.arena.release(seg) };
        self.unuse(seg, to);
    }

    /// Takes an emptied segment out of use, keeping its pages, so the next
    /// writer to take it does not fault them in again.
    fn unuse(&self, seg: u32, to: &Mutex<Vec<u32>>) {
        self.in_use.fetch_sub(1, Relaxed);
        to.lock().push(seg);
    }

    /// `cache_memlimit`: changes the memory limit at run time, within the
    /// address space reserved at start. Raising takes effect at once;
    /// lowering retires segments above the limit as they are freed or evicted.
    pub fn set_memory_limit(&self, bytes: usize) -> Result<(), StoreError> {
        let seg = self.arena.segment_size();
        let new = bytes / seg;
        if new < 2 || new > self.segs.len() {
            return Err(StoreError::BadConfig("memory limit outside the reserved range"));
        }
        let new = new as u32;
        self.limit_segs.store(new, Relaxed);
        self.memory_limit.store(bytes, Relaxed);
        let mut parked = self.parked.lock();
        let (back, keep): (Vec<u32>, Vec<u32>) = parked.drain(..).partition(|&s| s < new);
        *parked = keep;
        drop(parked);
        self.free.lock().extend(back);
        Ok(())
    }

    fn room(&self, seg: u32) -> usize {
        self.arena.segment_size() - self.segs[seg as usize].write_off.load(Relaxed) as usize
    }

    fn pick_victim(&self, ev: &mut Evict) -> Option<u32> {
        let now = self.clock.now();
        let dead = |s: &u32| self.segs[*s as usize].live_items.load(Relaxed) == 0 || self.all_expired(*s, now);
        for q in [&mut ev.small, &mut ev.main] {
            if let Some(i) = q.iter().position(dead) {
                return q.remove(i);
            }
        }
        if self.cfg.evictions {
            let sealed = ev.small.len() + ev.main.len();
            let small_first = ev.small.len() * 100 > sealed * SMALL_QUEUE_PERCENT || ev.main.is_empty();
            return if small_first { ev.small.pop_front() } else { ev.main.pop_front() };
        }
        // -M: compact the sparsest sealed segment (any, not only the oldest)
        // if its live items fit the target and fill under half of it.
        let room = ev.target.map_or(0, |t| self.room(t));
        let most = room.min(self.arena.segment_size() / 2 - 1);
        let (s, _) = self.sparsest(ev, most, usize::MAX)?;
        Self::take(ev, s)
    }

    /// Unlinks or moves every live item of `victim`, which the caller has
    /// taken off the FIFO and so owns. `compact`: every live item is moved
    /// (as room allows), not only those read since written.
    fn clear_segment(&self, victim: u32, ev: &mut Evict, c: &Counters, compact: bool) {
        if self.segs[victim as usize].live_items.load(Relaxed) == 0 {
            // Every item was overwritten or deleted: nothing links here.
            bump(&c.segments_reclaimed);
            return;
        }
        let end = self.segs[victim as usize].write_off.load(Acquire) as usize;
        let now = self.clock.now();
        let mut evicted = false;
        // Items are looked up in batches: the bucket of every item in a batch
        // is prefetched before the first is looked at, so that their cache
        // misses (one per item, live or dead) overlap.
        const BATCH: usize = 16;
        let mut batch = [(0usize, Loc::default()); BATCH];
        let sweep = Sweep { victim, now, compact };
        let mut scan = 0;
        let mut done = false;
        while !done && scan < end {
            let mut n = 0;
            while n < BATCH && scan < end {
                // SAFETY: the segment is sealed and owned by us: every byte
                // below `end` was written before it was sealed, and nothing
                // writes it now except expiry fields, which `header` does not
                // read.
                let Some(h) = (unsafe { self.arena.header(victim, scan, end) }) else {
                    done = true;
                    break;
                };
                // SAFETY: as above; the key bytes are never rewritten.
                let key = unsafe { self.arena.bytes(victim, scan + h.header_len(), usize::from(h.klen)) };
                let loc = self.index.locate(key);
                self.index.prefetch(loc);
                batch[n] = (scan, loc);
                n += 1;
                scan += self.aligned(h.total_len());
            }
            for &(off, loc) in &batch[..n] {
                evicted |= self.clear_item(&sweep, off, loc, ev, c);
            }
        }
        bump(if evicted { &c.segments_evicted } else { &c.segments_reclaimed });
    }

    /// Unlinks or copies forward the item at `off` of the segment being
    /// cleared, if the index still points at it; true if that evicted it.
    fn clear_item(&self, sweep: &Sweep, off: usize, loc: Loc, ev: &mut Evict, c: &Counters) -> bool {
        let Sweep { victim, now, compact } = *sweep;
        let granule_off = (off >> self.granule_shift) as u32;
        let mut st = self.index.lock(loc.stripe);
        let Some((pos, s)) = st.find(loc.bucket, |s| slot::seg(s) == victim && slot::off(s) == granule_off) else {
            // Overwritten or deleted since: nothing links here.
            return false;
        };
        let expired = self.is_flushed(victim) || self.item_at(s).is_none_or(|it| Clock::is_expired(it.expiry(), now));
        let keep = !expired && (compact || !self.cfg.evictions || slot::freq(s) > 0);
        if keep && self.copy_forward(&mut st, ev, pos, s) {
            bump(&c.reinserted);
            return false;
        }
        self.unlink(&mut st, loc.bucket, pos, s);
        if expired {
            bump(&c.expired_unlinked);
            false
        } else {
            bump(&c.evictions);
            true
        }
    }

    /// Copies the item at slot `s` into the eviction target, keeping its CAS.
    fn copy_forward(&self, st: &mut Stripe, ev: &mut Evict, pos: Pos, s: u64) -> bool {
        let (Some(target), Some(it)) = (ev.target, self.item_at(s)) else { return false };
        if self.is_flushed(target) {
            return false;
        }
        let cas = self.cas_of(s, &it);
        let (key, value) = (it.key(), it.value());
        let fetched = if slot::freq(s) > 0 { state::FETCHED } else { 0 };
        let f = Fields { cas: Some(cas), state: it.state() | fetched, ..it.fields() };
        let written = self.written_at(s);
        let len = encoded_len(key.len(), value.len(), &f);
        let m = &self.segs[target as usize];
        let off = m.write_off.load(Relaxed) as usize;
        if off + self.aligned(len) > self.arena.segment_size() {
            return false;
        }
        // SAFETY: the target belongs to the eviction state we hold, and this
        // range is above its write offset, so nobody else can see it.
        let dst = unsafe { self.arena.bytes_mut(target, off, len) };
        let v = write_head(dst, key, value.len(), &f);
        dst[v..].copy_from_slice(value);
        m.write_off.store((off + self.aligned(len)) as u32, Release);
        self.note_written(target, off, written);
        self.note_expiry(target, it.expiry());
        let old_len = it.header.total_len();
        st.set(pos, slot::pack(slot::tag(s), 0, target, (off >> self.granule_shift) as u32));
        self.unaccount(st, s, old_len);
        self.account(st, target, len);
        true
    }

    /// `flush_all`: now if `at` is `None` or not in the future, else at `at`.
    pub fn flush_all(&self, at: Option<u32>) {
        match at {
            Some(t) if t > self.clock.now() => self.flush_at.store(t, Relaxed),
            _ => {
                self.flush_at.store(0, Relaxed);
                self.flush_now();
            }
        }
    }

    fn maybe_flush(&self) {
        let at = self.flush_at.load(Relaxed);
        if at != 0 && self.clock.now() >= at {
            let _g = self.flush_lock.lock();
            if self.flush_at.load(Relaxed) == at {
                self.flush_now();
                self.flush_at.store(0, Relaxed);
            }
        }
    }

    /// Invalidates everything written so far in O(1): every segment opened
    /// up to now is flushed. Writers move off flushed segments before their
    /// next write, and lookups and eviction drop flushed items lazily.
    fn flush_now(&self) {
        self.flush_epoch.store(self.epoch.load(Relaxed), Relaxed);
    }

    pub fn stats(&self) -> StoreStats {
        let mut s = StoreStats {
            segments_total: self.segs.len() as u64,
            segments_free: self.free.lock().len() as u64,
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
        }
        for c in self.counters.lock().iter() {
            s.total_items += c.total_items.load(Relaxed);
            s.get_expired += c.get_expired.load(Relaxed);
            s.get_flushed += c.get_flushed.load(Relaxed);
            s.evictions += c.evictions.load(Relaxed);
            s.expired_unlinked += c.expired_unlinked.load(Relaxed);
            s.reinserted += c.reinserted.load(Relaxed);
            s.segments_evicted += c.segments_evicted.load(Relaxed);
            s.segments_reclaimed += c.segments_reclaimed.load(Relaxed);
        }
        s
    }

    /// Zeroes the counters `stats reset` resets.
    pub fn reset_stats(&self) {
        for c in self.counters.lock().iter() {
            for a in [&c.total_items, &c.get_expired, &c.get_flushed, &c.evictions, &c.expired_unlinked, &c.reinserted]
            {
                a.store(0, Relaxed);
            }
        }
    }
}

/// Where a new item was written.
#[derive(Debug, Clone, Copy)]
struct Placed {
    seg: u32,
    off: usize,
    len: usize,
}

/// Why a lookup found nothing alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Miss {
    Absent,
    Expired,
    Flushed,
}

/// What a rewrite of an existing item will write.
struct Plan {
    fields: Fields,
    vlen: usize,
    /// Only the layout changes: keep the read count and the write time.
    keep: bool,
}

enum Step<E, T> {
    Write(Plan, E),
    Done(T),
}

enum Rewritten<E, T> {
    Missing,
    Done(T),
    /// Written, with the new item's CAS.
    Written(E, u64),
}

/// The segment [`Store::clear_segment`] is clearing, and how.
#[derive(Clone, Copy)]
struct Sweep {
    victim: u32,
    now: u32,
    /// Compaction: every live item is kept, read or not.
    compact: bool,
}

/// Where [`Worker::prefetch_bucket`] found a key's bucket, for
/// [`Worker::prefetch_items`].
/// (The default, a placeholder for arrays of hints, is harmless to prefetch.)
#[derive(Debug, Clone, Copy, Default)]
pub struct Hint(Loc);

/// One worker thread's handle: the shared store and the worker's own state.
pub struct Worker {
    store: Arc<Store>,
    active: Active,
}

/// A worker's active segments (one per TTL class) and counters, apart from
/// the `Arc<Store>` so both can be borrowed at once without touching the
/// store's reference count on every write.
struct Active {
    segs: [Option<u32>; TTL_CLASSES],
    counters: Arc<Counters>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        for seg in self.active.segs.iter_mut().filter_map(Option::take) {
            self.store.seal(seg);
        }
    }
}

impl Active {
    /// Reserves `len` bytes in the active segment of `class` for an item
    /// written at `time`.
    fn reserve(&mut self, st: &Store, class: usize, len: usize, time: u32) -> Result<(u32, usize), StoreError> {
        let len = st.aligned(len);
        if len > st.arena.segment_size() {
            return Err(StoreError::TooLarge);
        }
        if let Some(seg) = self.segs[class] {
            let m = &st.segs[seg as usize];
            let w = m.write_off.load(Relaxed) as usize;
            if w + len <= st.arena.segment_size() && !st.is_flushed(seg) {
                m.write_off.store((w + len) as u32, Release);
                st.note_written(seg, w, time);
                return Ok((seg, w));
            }
            self.segs[class] = None;
            st.seal(seg);
        }
        let seg = st.alloc_segment(&self.counters)?;
        self.segs[class] = Some(seg);
        st.segs[seg as usize].write_off.store(len as u32, Release);
        st.note_written(seg, 0, time);
        Ok((seg, 0))
    }

    /// Gives back the latest reservation (nothing was linked there).
    fn unreserve(&self, st: &Store, seg: u32, off: usize, len: usize) {
        let m = &st.segs[seg as usize];
        if m.write_off.load(Relaxed) as usize == off + st.aligned(len) {
            m.write_off.store(off as u32, Release);
        }
    }
}

impl Store {
    /// The CAS an item written at `seg`/`off` with fields `f` reads back as.
    fn placed_cas(&self, seg: u32, off: usize, f: &Fields) -> u64 {
        if !self.cfg.cas {
            return 0;
        }
        f.cas.unwrap_or_else(|| self.derived_cas(seg, off))
    }

    /// Rewrites the state byte of a linked item in place. Takes the
    /// item's header, not a view of it: no view of the item's bytes may be
    /// alive across this write (arena rule 4), so callers read what they
    /// need first and take a new view after.
    fn set_state(&self, s: u64, header: Header, bits: u8) {
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
    fn set_expiry(&self, s: u64, header: Header, expiry: u32) -> bool {
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

/// Whether a read of an item in this state takes the recache token: it is
/// stale, or expires before `recache_before`, and nobody has the token.
fn wins_token(opts: &ReadOpts, it: &Item<'_>) -> bool {
    let st = it.state();
    if !opts.tokens || st & state::TOKEN_SENT != 0 {
        return false;
    }
    let expiry = it.expiry();
    st & state::STALE != 0 || opts.recache_before.is_some_and(|r| expiry != 0 && expiry < r)
}

impl Worker {
    /// Starts loading what reading `keys` will touch (each key's index
    /// bucket, then its item) into the CPU cache, a batch at a time, before
    /// they are read one by one. A read waits on memory twice (bucket, then
    /// item, each depending on the last) and reads one after another under
    /// a lock cannot overlap those waits; prefetched, a whole multi-get or
    /// pipeline of gets waits about twice in all. Changes nothing: a key that
    /// is missing or moves meanwhile only costs a wasted prefetch.
    pub fn prefetch(&self, keys: &[&[u8]]) {
        const BATCH: usize = 16;
        for chunk in keys.chunks(BATCH) {
            let mut hints = [Hint::default(); BATCH];
            for (hint, key) in hints.iter_mut().zip(chunk) {
                *hint = self.prefetch_bucket(key);
            }
            self.prefetch_items(&hints[..chunk.len()]);
        }
    }

    /// The first half of [`Worker::prefetch`] for one key: starts loading
    /// its index bucket and returns where to look for its item. For callers
    /// that gather keys from several places (the io_uring worker reads
    /// ahead across every connection a turn serves).
    pub fn prefetch_bucket(&self, key: &[u8]) -> Hint {
        let loc = self.store.index.locate(key);
        self.store.index.prefetch(loc);
        Hint(loc)
    }

    /// The second half: by now the first buckets have arrived; starts
    /// loading the items they point at.
    pub fn prefetch_items(&self, hints: &[Hint]) {
        let st = &*self.store;
        // The lock is needed to read a slot, as a table may be replaced
        // while it is read.
        for Hint(loc) in hints {
            let found = st.index.lock(loc.stripe).find(loc.bucket, |s| slot::tag(s) == loc.tag);
            if let Some((_, s)) = found {
                st.arena.prefetch(slot::seg(s), st.byte_off(s));
            }
        }
    }

    /// Reads `key`, handing the item to `f` while it is pinned by its bucket lock.
    pub fn get<R>(&mut self, key: &[u8], f: impl FnOnce(ItemView<'_>) -> R) -> Option<R> {
        // A plain read never rewrites, so it cannot fail.
        self.read(key, &ReadOpts::GET, f).ok().flatten()
    }

    /// Reads `key` as `opts` says (touching, handing out the recache token,
    /// creating it on a miss), then hands the item to `f` under its bucket
    /// lock. The token is handed out under that lock, so exactly one reader
    /// gets it. `None` on a miss.
    pub fn read<R>(
        &mut self,
        key: &[u8],
        opts: &ReadOpts,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<Option<R>, StoreError> {
        self.store.maybe_flush();
        let loc = self.store.index.locate(key);
        // What earlier rounds did: a rewrite that handed us the token, or
        // created the item; the expiry first seen.
        let (mut won, mut created, mut first_expiry, mut relaid) = (false, false, None, false);
        for _ in 0..16 {
            let st = &*self.store;
            let now = st.clock.now();
            let mut stripe = st.index.lock(loc.stripe);
            let c = &self.active.counters;
            // An item this read just touched into the past (`touch k -1`)
            // still counts as found by it, as when touched in place.
            let alive_at = match opts.touch {
                Some(e) if relaid && e != 0 => now.min(e - 1),
                _ => now,
            };
            let (pos, s) = match st.lookup(&mut stripe, loc, key, alive_at, c) {
                Ok(found) => found,
                Err(miss) => {
                    match miss {
                        Miss::Expired => bump(&c.get_expired),
                        Miss::Flushed => bump(&c.get_flushed),
                        Miss::Absent => {}
                    }
                    drop(stripe);
                    let Some(expiry) = opts.vivify else { return Ok(None) };
                    let f = Fields { expiry, cas: opts.new_cas, state: state::TOKEN_SENT, flags: 0 };
                    let w = Write { new_cas: opts.new_cas, ..Write::new(SetOp::Add, key, 0, expiry, b"") };
                    if self.store_item(&w, f)?.outcome == StoreOutcome::Stored {
                        (won, created) = (true, true);
                    }
                    continue;
                }
            };
            // What the in-place writes below need, read before them: the
            // view `it` must be dead once they start (arena rule 4).
            let (header, bits, expiry, wins) = {
                let Some(it) = st.item_at(s) else { return Ok(None) };
                (it.header, it.state(), it.expiry(), wins_token(opts, &it))
            };
            let touch = opts.touch.filter(|&e| e != expiry);
            let relayout =
                (wins && header.state_at().is_none()) || touch.is_some_and(|e| e != 0 && header.expiry_at().is_none());
            let expiry_before = *first_expiry.get_or_insert(expiry);
            if relayout {
                drop(stripe);
                won |= self.relayout(key, opts, touch)?;
                relaid = true;
                continue;
            }
            if wins {
                st.set_state(s, header, bits | state::TOKEN_SENT);
                won = true;
            }
            if let Some(e) = touch {
                st.set_expiry(s, header, e);
            }
            let freq = slot::freq(s);
            if opts.bump && freq < 15 {
                stripe.set(pos, slot::with_freq(s, freq + 1));
            }
            // A fresh view, taken after the writes.
            let Some(it) = st.item_at(s) else { return Ok(None) };
            let view = ItemView {
                key: it.key(),
                value: it.value(),
                flags: it.flags(),
                cas: st.cas_of(s, &it),
                expiry_before,
                expiry: touch.unwrap_or(expiry),
                fetched: !created && (freq > 0 || bits & state::FETCHED != 0),
                written: if opts.written { st.written_at(s) } else { 0 },
                stale: bits & state::STALE != 0,
                token_sent: bits & state::TOKEN_SENT != 0 && !won,
                won,
                created,
                binary_key: bits & state::KEY_BINARY != 0,
            };
            return Ok(Some(f(view)));
        }
        Err(StoreError::Contended)
    }

    /// Moves an item to a layout with room for the expiry and state a read
    /// wants to change in place, handing out the recache token on the way if
    /// the read wins it. Returns whether it did.
    fn relayout(&mut self, key: &[u8], opts: &ReadOpts, touch: Option<u32>) -> Result<bool, StoreError> {
        let r = self.rewrite(
            key,
            |it, cas| {
                let wins = wins_token(opts, it);
                let fields = Fields {
                    expiry: touch.unwrap_or(it.expiry()),
                    cas: Some(cas),
                    state: it.state() | if wins { state::TOKEN_SENT } else { 0 },
                    ..it.fields()
                };
                Step::<bool, ()>::Write(Plan { fields, vlen: it.value().len(), keep: true }, wins)
            },
            |old, _, dst| dst.copy_from_slice(old.value()),
        )?;
        Ok(matches!(r, Rewritten::Written(true, _)))
    }

    /// Everything known about `key`, without counting it as a read (`me`).
    pub fn inspect(&mut self, key: &[u8]) -> Option<Inspect> {
        let st = &*self.store;
        st.maybe_flush();
        let loc = st.index.locate(key);
        let now = st.clock.now();
        let mut stripe = st.index.lock(loc.stripe);
        let (_, s) = st.lookup(&mut stripe, loc, key, now, &self.active.counters).ok()?;
        let it = st.item_at(s)?;
        Some(Inspect {
            expiry: it.expiry(),
            written: st.written_at(s),
            cas: st.cas_of(s, &it),
            fetched: slot::freq(s) > 0 || it.state() & state::FETCHED != 0,
            size: it.header.total_len(),
            binary_key: it.state() & state::KEY_BINARY != 0,
        })
    }

    /// Whether `key` is present (no frequency bump).
    #[cfg(test)]
    pub fn contains(&mut self, key: &[u8]) -> bool {
        self.inspect(key).is_some()
    }

    /// set/add/replace/append/prepend/cas. `expiry` is relative server time
    /// (see [`Clock::expiry`]).
    pub fn set(
        &mut self,
        op: SetOp,
        key: &[u8],
        flags: u32,
        expiry: u32,
        value: &[u8],
    ) -> Result<StoreOutcome, StoreError> {
        Ok(self.set_with(&Write::new(op, key, flags, expiry, value))?.outcome)
    }

    /// A storage request with the meta protocol's options.
    pub fn set_with(&mut self, w: &Write<'_>) -> Result<Stored, StoreError> {
        self.store.maybe_flush();
        match w.op {
            SetOp::Append | SetOp::Prepend => self.concat(w),
            _ => {
                let state = if w.binary_key { state::KEY_BINARY } else { 0 };
                self.store_item(w, Fields { flags: w.flags, expiry: w.expiry, cas: w.new_cas, state })
            }
        }
    }

    /// Writes a whole new item (set/add/replace/cas) with fields `fresh`.
    fn store_item(&mut self, w: &Write<'_>, fresh: Fields) -> Result<Stored, StoreError> {
        // A compare value applies to set only (memcached's add ignores it).
        let (op, compare) = match w.op {
            SetOp::Cas(c) => (SetOp::Set, Some(c)),
            SetOp::Set => (SetOp::Set, w.compare),
            op => (op, None),
        };
        let key = w.key;
        // The item is written before its bucket lock is taken, so what it
        // must look like is only known under the lock: when that differs
        // from what was written (a stale store, below), the write is undone
        // and done again with the right fields.
        let mut f = fresh;
        for _ in 0..16 {
            let store = &*self.store;
            let len = encoded_len(key.len(), w.value.len(), &f);
            if len > store.cfg.item_size_max {
                return Err(StoreError::TooLarge);
            }
            let now = store.clock.now();
            let (seg, off) = self.active.reserve(store, ttl_class(f.expiry, now), len, now)?;
            // SAFETY: freshly reserved by this worker in its active segment.
            let dst = unsafe { store.arena.bytes_mut(seg, off, len) };
            let v = write_head(dst, key, w.value.len(), &f);
            dst[v..].copy_from_slice(w.value);
            store.note_expiry(seg, f.expiry);

            let loc = store.index.locate(key);
            let mut stripe = store.index.lock(loc.stripe);
            let found = store.lookup(&mut stripe, loc, key, now, &self.active.counters).ok();
            let have =
                found.and_then(|(_, s)| store.item_at(s).map(|it| (store.cas_of(s, &it), it.expiry(), it.state())));
            let wanted = match (op, have, compare) {
                (SetOp::Add, Some(_), _) | (SetOp::Replace, None, _) => Err(StoreOutcome::NotStored),
                (_, None, Some(_)) => Err(StoreOutcome::NotFound),
                // With CAS off (-C) memcached can never match a unique.
                (_, Some((have, expiry, bits)), Some(want)) if !store.cfg.cas || have != want => {
                    if w.invalidate && store.cfg.cas && want < have {
                        // memcached's CAS_STALE: the value is replaced, but
                        // the item keeps its TTL, is marked stale, and keeps
                        // a recache token already handed out.
                        let state = fresh.state | state::STALE | (bits & state::TOKEN_SENT);
                        Ok(Fields { expiry, state, ..fresh })
                    } else {
                        Err(StoreOutcome::Exists)
                    }
                }
                _ => Ok(fresh),
            };
            match wanted {
                Err(outcome) => {
                    self.active.unreserve(store, seg, off, len);
                    return Ok(Stored { outcome, cas: 0, size: 0 });
                }
                Ok(wanted) if wanted != f => {
                    drop(stripe);
                    self.active.unreserve(store, seg, off, len);
                    f = wanted;
                    continue;
                }
                Ok(_) => {}
            }
            store.link(&mut stripe, loc, found, Placed { seg, off, len }, 0, &self.active.counters);
            let outcome = StoreOutcome::Stored;
            return Ok(Stored { outcome, cas: store.placed_cas(seg, off, &f), size: w.value.len() });
        }
        Err(StoreError::Contended)
    }

    /// Deletes `key`; false if it was not there.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        matches!(self.delete_with(key, &Delete::default()), Ok(DeleteOutcome::Deleted))
    }

    /// A delete with the meta protocol's options: compare, or keep the item
    /// marked stale, or keep it with an empty value.
    pub fn delete_with(&mut self, key: &[u8], d: &Delete) -> Result<DeleteOutcome, StoreError> {
        self.store.maybe_flush();
        let cas_on = self.store.cfg.cas;
        if d.invalidate || d.remove_value {
            let r = self.rewrite(
                key,
                |it, cas| {
                    if d.compare.is_some_and(|want| !cas_on || want != cas) {
                        return Step::Done(DeleteOutcome::Exists);
                    }
                    let mut vlen = it.value().len();
                    let mut fields = it.fields();
                    if d.remove_value {
                        // memcached stores a fresh empty item in its place.
                        vlen = 0;
                        let expiry = d.touch.unwrap_or(0);
                        fields = Fields { flags: d.flags, expiry, cas: Some(d.new_cas.unwrap_or(cas)), state: 0 };
                    }
                    if d.invalidate {
                        fields.expiry = d.touch.unwrap_or(fields.expiry);
                        fields.state = (fields.state | state::STALE) & !state::TOKEN_SENT;
                        fields.cas = d.new_cas;
                    }
                    Step::Write(Plan { fields, vlen, keep: false }, ())
                },
                |old, _, dst| dst.copy_from_slice(&old.value()[..dst.len()]),
            )?;
            return Ok(match r {
                Rewritten::Missing => DeleteOutcome::NotFound,
                Rewritten::Done(o) => o,
                Rewritten::Written((), _) => DeleteOutcome::Deleted,
            });
        }
        let st = &*self.store;
        let loc = st.index.locate(key);
        let now = st.clock.now();
        let mut stripe = st.index.lock(loc.stripe);
        match st.lookup(&mut stripe, loc, key, now, &self.active.counters) {
            Ok((pos, s)) => {
                let have = st.item_at(s).map_or(0, |it| st.cas_of(s, &it));
                if d.compare.is_some_and(|want| !st.cfg.cas || want != have) {
                    return Ok(DeleteOutcome::Exists);
                }
                st.unlink(&mut stripe, loc.bucket, pos, s);
                Ok(DeleteOutcome::Deleted)
            }
            Err(_) => Ok(DeleteOutcome::NotFound),
        }
    }

    /// Replaces a linked item by one built from it: plan under the lock,
    /// reserve space without it (reserving may evict, which takes other bucket
    /// locks), then re-check the item is unchanged and build under the lock.
    fn rewrite<E, T>(
        &mut self,
        key: &[u8],
        mut plan: impl FnMut(&Item<'_>, u64) -> Step<E, T>,
        fill: impl Fn(&Item<'_>, &E, &mut [u8]),
    ) -> Result<Rewritten<E, T>, StoreError> {
        let store = &*self.store;
        store.maybe_flush();
        let loc = store.index.locate(key);
        for _ in 0..16 {
            let now = store.clock.now();
            let (seen, epoch, p, extra, written) = {
                let mut stripe = store.index.lock(loc.stripe);
                let Ok((_, s)) = store.lookup(&mut stripe, loc, key, now, &self.active.counters) else {
                    return Ok(Rewritten::Missing);
                };
                let Some(it) = store.item_at(s) else { return Ok(Rewritten::Missing) };
                match plan(&it, store.cas_of(s, &it)) {
                    Step::Done(t) => return Ok(Rewritten::Done(t)),
                    Step::Write(p, e) => {
                        let written = if p.keep { store.written_at(s) } else { now };
                        (slot::location(s), store.segs[slot::seg(s) as usize].epoch.load(Relaxed), p, e, written)
                    }
                }
            };
            let len = encoded_len(key.len(), p.vlen, &p.fields);
            if len > store.cfg.item_size_max {
                return Err(StoreError::TooLarge);
            }
            let (seg, off) = self.active.reserve(store, ttl_class(p.fields.expiry, now), len, written)?;
            let mut stripe = store.index.lock(loc.stripe);
            let found = store.lookup(&mut stripe, loc, key, now, &self.active.counters).ok();
            let unchanged = found.is_some_and(|(_, s)| {
                slot::location(s) == seen && store.segs[slot::seg(s) as usize].epoch.load(Relaxed) == epoch
            });
            match (found, unchanged) {
                (Some((pos, s)), true) => {
                    let Some(old) = store.item_at(s) else { break };
                    // SAFETY: freshly reserved by this worker in its active segment.
                    let dst = unsafe { store.arena.bytes_mut(seg, off, len) };
                    let v = write_head(dst, key, p.vlen, &p.fields);
                    fill(&old, &extra, &mut dst[v..]);
                    store.note_expiry(seg, p.fields.expiry);
                    let freq = if p.keep { slot::freq(s) } else { 0 };
                    store.link(&mut stripe, loc, Some((pos, s)), Placed { seg, off, len }, freq, &self.active.counters);
                    let cas = store.placed_cas(seg, off, &p.fields);
                    return Ok(Rewritten::Written(extra, cas));
                }
                (None, _) => {
                    self.active.unreserve(store, seg, off, len);
                    return Ok(Rewritten::Missing);
                }
                (Some(_), false) => self.active.unreserve(store, seg, off, len),
            }
        }
        Err(StoreError::Contended)
    }

    fn concat(&mut self, w: &Write<'_>) -> Result<Stored, StoreError> {
        let prepend = w.op == SetOp::Prepend;
        let (key, data) = (w.key, w.value);
        let (cas_on, max) = (self.store.cfg.cas, self.store.cfg.item_size_max);
        for _ in 0..16 {
            let r = self.rewrite(
                key,
                |it, cas| {
                    if w.compare.is_some_and(|want| !cas_on || want != cas) {
                        return Step::Done(StoreOutcome::Exists);
                    }
                    let vlen = it.value().len() + data.len();
                    let fields = Fields { cas: w.new_cas, ..it.fields() };
                    if encoded_len(key.len(), vlen, &fields) > max {
                        return Step::Done(StoreOutcome::NotStored);
                    }
                    Step::Write(Plan { fields, vlen, keep: false }, vlen)
                },
                |old, _, dst| {
                    let (a, b) = if prepend { (data, old.value()) } else { (old.value(), data) };
                    dst[..a.len()].copy_from_slice(a);
                    dst[a.len()..].copy_from_slice(b);
                },
            )?;
            return match r {
                Rewritten::Missing => match w.vivify {
                    Some(expiry) => {
                        let add = Write { op: SetOp::Add, expiry, ..*w };
                        let state = if w.binary_key { state::KEY_BINARY } else { 0 };
                        let f = Fields { flags: w.flags, expiry, cas: w.new_cas, state };
                        let s = self.store_item(&add, f)?;
                        if s.outcome == StoreOutcome::NotStored {
                            // Someone created it meanwhile: append to theirs.
                            continue;
                        }
                        Ok(s)
                    }
                    None => Ok(Stored { outcome: StoreOutcome::NotStored, cas: 0, size: 0 }),
                },
                Rewritten::Done(outcome) => Ok(Stored { outcome, cas: 0, size: 0 }),
                Rewritten::Written(size, cas) => Ok(Stored { outcome: StoreOutcome::Stored, cas, size }),
            };
        }
        Err(StoreError::Contended)
    }

    /// incr/decr. Like memcached, a result with fewer digits than the stored
    /// value keeps the value's length, padded with trailing spaces.
    pub fn arith(&mut self, key: &[u8], incr: bool, delta: u64) -> Result<ArithOutcome, StoreError> {
        Ok(self.arith_with(key, &Arith { incr, delta, ..Arith::default() })?.outcome)
    }

    /// incr/decr with the meta protocol's options.
    pub fn arith_with(&mut self, key: &[u8], a: &Arith) -> Result<Counted, StoreError> {
        let cas_on = self.store.cfg.cas;
        for _ in 0..16 {
            let r = self.rewrite(
                key,
                |it, cas| {
                    if a.compare.is_some_and(|want| !cas_on || want != cas) {
                        return Step::Done(ArithOutcome::Exists);
                    }
                    let Some(old) = parse_counter(it.value()) else { return Step::Done(ArithOutcome::NonNumeric) };
                    let new = if a.incr { old.wrapping_add(a.delta) } else { old.saturating_sub(a.delta) };
                    let vlen = count_digits(new).max(it.value().len());
                    let expiry = a.touch.unwrap_or(it.expiry());
                    let fields = Fields { expiry, cas: a.new_cas, ..it.fields() };
                    Step::Write(Plan { fields, vlen, keep: false }, (new, it.expiry(), expiry))
                },
                |_, &(new, _, _), dst| {
                    let mut buf = itoa::Buffer::new();
                    let s = buf.format(new).as_bytes();
                    dst[..s.len()].copy_from_slice(s);
                    dst[s.len()..].fill(b' ');
                },
            )?;
            let mut created = false;
            let (outcome, cas, expiry_before, expiry) = match r {
                Rewritten::Missing => match a.vivify {
                    Some(expiry) => {
                        let mut buf = itoa::Buffer::new();
                        let value = buf.format(a.initial).as_bytes();
                        let add = Write { new_cas: a.new_cas, ..Write::new(SetOp::Add, key, 0, expiry, value) };
                        let f = Fields { expiry, cas: a.new_cas, ..Fields::default() };
                        let s = self.store_item(&add, f)?;
                        if s.outcome == StoreOutcome::NotStored {
                            // Someone created it meanwhile: count on theirs.
                            continue;
                        }
                        created = true;
                        (ArithOutcome::Value(a.initial), s.cas, 0, expiry)
                    }
                    None => (ArithOutcome::NotFound, 0, 0, 0),
                },
                Rewritten::Done(o) => (o, 0, 0, 0),
                Rewritten::Written((v, before, expiry), cas) => (ArithOutcome::Value(v), cas, before, expiry),
            };
            return Ok(Counted { outcome, cas, expiry_before, expiry, created });
        }
        Ok(Counted { outcome: ArithOutcome::NotStored, cas: 0, expiry_before: 0, expiry: 0, created: false })
    }

    /// Sets a new expiry; false if the key is missing.
    pub fn touch(&mut self, key: &[u8], expiry: u32) -> Result<bool, StoreError> {
        let opts = ReadOpts { touch: Some(expiry), ..ReadOpts::default() };
        Ok(self.read(key, &opts, |_| ())?.is_some())
    }
}

/// memcached's `safe_strtoull` on a stored value: optional leading spaces,
/// digits, then the end or whitespace.
fn parse_counter(v: &[u8]) -> Option<u64> {
    let start = v.iter().position(|b| !b.is_ascii_whitespace())?;
    let v = &v[start..];
    let v = v.strip_prefix(b"+").unwrap_or(v);
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || v.get(digits).is_some_and(|b| !b.is_ascii_whitespace()) {
        return None;
    }
    let mut n: u64 = 0;
    for &d in &v[..digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

fn count_digits(n: u64) -> usize {
    itoa::Buffer::new().format(n).len()
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
