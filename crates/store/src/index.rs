//! The hash index: buckets of eight packed 8-byte slots, chained into
//! overflow buckets, guarded by striped locks (one lock per group of buckets,
//! never a global one).
//!
//! Slot layout (u64):
//! ```text
//!  63      52 51  48 47            24 23             0
//! +----------+------+----------------+----------------+
//! | tag (12) | freq | segment id (24)| offset (24)    |
//! +----------+------+----------------+----------------+
//! ```
//! - tag: 12 bits of the key's hash, never 0, to skip most non-matching keys
//!   without touching the item; matches are confirmed on the full key.
//! - freq: accesses since the item was written or last copied forward: 2
//!   per read, 1 for a write over a live version (saturates at 15, so odd
//!   after an overwrite, even or 15 after reads only). Eviction copies
//!   forward items with freq > 0; the item was read (`mg`'s `h`,
//!   `evicted_unfetched`) if freq ≥ 2 ([`slot::was_read`]).
//! - offset: in granules of `2^granule_shift` bytes (1 byte for segments up to
//!   16 MiB).
//!
//! - bit 47 (the segment id's top bit) set: the item is on flash, and the
//!   slot is laid out as [`flash`] says; memory segment ids stay below 2^23.
//!
//! A slot of 0 is empty. A slot with tag 0 and a non-zero value is the chain
//! link in a bucket's last position: the index + 1 of an overflow bucket.
//! Buckets and their overflow chains belong to one stripe, and everything in a
//! stripe is behind its mutex, so the index is plain safe Rust.
//!
//! Each stripe sizes its own main table: when it holds more than
//! [`GROW_LOAD`] items per bucket it doubles, re-placing its items by their
//! keys' hashes (read from the items under the stripe's lock). Growth is one
//! stripe at a time, so no request ever waits for the whole index to rehash,
//! and the index costs ~11 bytes per item whatever the item size, where a
//! table sized up front from `-m` costs either chain walks (small items) or
//! empty buckets (large ones).

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering::Relaxed};

use parking_lot::{Mutex, MutexGuard};

pub type Bucket = [u64; 8];

pub mod flash;
pub mod slot;

/// Where a slot is: main or overflow bucket, and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    overflow: bool,
    bucket: u32,
    slot: u8,
}

/// The buckets behind one lock, with their overflow chains and live totals.
/// Overflow buckets are allocated in blocks of this many, never moved or
/// reallocated: equal-sized allocations from any thread leave no holes in the
/// allocator, where growing vectors fragmented worker threads' heaps.
const BLOCK: usize = 4;

/// Items per main bucket (of 7–8 slots) beyond which a stripe doubles: chains
/// then average under two buckets, and the index about 11 bytes per item.
pub const GROW_LOAD: u64 = 12;

/// log2 of the buckets an index starts with unless told (`-o hashpower`):
/// one per stripe, 208 KiB in all with the stripes' locks. The index grows
/// with the items, a stripe at a time, and counts inside `-m`: sized from
/// `-m` up front (2^14 buckets at `-m 64`, 2^16 from `-m 256`) it held
/// 1.2 MB for workload 14's 170 items of up to 1 MB, and 1.45 MB for
/// workload 5's 60,000 (1.17 MB grown from here). Five rounds each, the
/// rest alike (CPU per request and p99 within the rounds' spread): 10
/// (100 B-64 KB) 83.1 / 71.6% hits (medians) against 83.4 / 71.8, 14 79.3
/// against 79.5; items held at `-m 1024` after the same 850,000 sets of
/// 32-4000 B the same, 551 k (docs/benchmarks-history.md, "Issue 42: where
/// workload 14's idle memory is").
pub const START_HASH_POWER: u32 = 10;

/// log2 of the buckets that hold `items` without growing: a restore that
/// knows how many items it brings sizes the index for them up front,
/// rather than rehashing every stripe as it fills (each rehash reads every
/// item's key again).
pub fn hash_power_for(items: u64) -> u32 {
    let buckets = items.div_ceil(GROW_LOAD).max(1);
    (u64::BITS - (buckets - 1).leading_zeros()).clamp(10, 32)
}

/// A stripe's main table stops doubling here (2^32 buckets in all).
const MAX_STRIPE_BUCKETS: usize = 1 << 22;

#[derive(Debug, Default)]
pub struct Stripe {
    buckets: Vec<Bucket>,
    /// `buckets.len() - 1`: the low bits of [`Loc::bucket`] pick the bucket.
    mask: u32,
    // The boxes are the point: fixed-size blocks that never move when the
    // vector of pointers grows.
    #[allow(clippy::vec_box)]
    overflow: Vec<Box<[Bucket; BLOCK]>>,
    /// Overflow buckets handed out (in use or on the free list); u32 like
    /// the bucket numbers, and it keeps the stripe in 128 bytes.
    overflow_len: u32,
    free_overflow: Vec<u32>,
    /// Linked items in this stripe and their total bytes.
    pub items: u64,
    pub bytes: u64,
    /// Of those, the items whose value is compressed, and those values'
    /// original and stored bytes.
    pub zitems: u64,
    pub zplain: u64,
    pub zstored: u64,
}

impl Stripe {
    fn bucket(&self, overflow: bool, i: u32) -> &Bucket {
        let i = i as usize;
        if overflow {
            &self.overflow[i / BLOCK][i % BLOCK]
        } else {
            &self.buckets[i]
        }
    }

    fn bucket_mut(&mut self, overflow: bool, i: u32) -> &mut Bucket {
        let i = i as usize;
        if overflow {
            &mut self.overflow[i / BLOCK][i % BLOCK]
        } else {
            &mut self.buckets[i]
        }
    }

    /// The first item slot in `b`'s chain for which `pred` holds.
    pub fn find(&self, b: u32, mut pred: impl FnMut(u64) -> bool) -> Option<(Pos, u64)> {
        let (mut overflow, mut i) = (false, b & self.mask);
        loop {
            let bucket = self.bucket(overflow, i);
            for (n, &s) in bucket.iter().enumerate() {
                if slot::is_item(s) && pred(s) {
                    return Some((Pos { overflow, bucket: i, slot: n as u8 }, s));
                }
            }
            match slot::link_target(bucket[7]) {
                Some(next) => (overflow, i) = (true, next),
                None => return None,
            }
        }
    }

    /// Calls `f` on every item slot of `b`'s chain.
    pub fn for_each_in_chain(&self, b: u32, mut f: impl FnMut(u64)) {
        let _ = self.find(b, |s| {
            f(s);
            false
        });
    }

    pub fn get(&self, p: Pos) -> u64 {
        self.bucket(p.overflow, p.bucket)[p.slot as usize]
    }

    /// Calls `f` on every item slot of the stripe (freed overflow buckets
    /// are all zeros, so every bucket can be walked).
    pub fn for_each_item(&self, mut f: impl FnMut(u64)) {
        for b in self.buckets.iter().chain(self.overflow.iter().flat_map(|blk| blk.iter())) {
            b.iter().copied().filter(|&s| slot::is_item(s)).for_each(&mut f);
        }
    }

    pub fn set(&mut self, p: Pos, v: u64) {
        self.bucket_mut(p.overflow, p.bucket)[p.slot as usize] = v;
    }

    /// Removes the item at `p` from `b`'s chain. The chain's last item moves
    /// into the hole and an overflow bucket left empty is unlinked and
    /// recycled, so chains only ever hold what is live: churn cannot grow the
    /// index. Invalidates other `Pos` values of this chain.
    pub fn remove(&mut self, b: u32, p: Pos) {
        // Walk to the tail: the last item slot of the chain, and the link to
        // the tail's bucket (if it is an overflow bucket).
        let (mut overflow, mut i) = (false, b & self.mask);
        let mut link_to_tail: Option<(bool, u32)> = None;
        while let Some(next) = slot::link_target(self.bucket(overflow, i)[7]) {
            link_to_tail = Some((overflow, i));
            (overflow, i) = (true, next);
        }
        let tail = self.bucket(overflow, i);
        let Some(last) = (0..8).rev().find(|&n| slot::is_item(tail[n])) else {
            // Only possible for an empty main bucket; just clear the slot.
            self.set(p, 0);
            return;
        };
        let tail_pos = Pos { overflow, bucket: i, slot: last as u8 };
        let moved = self.get(tail_pos);
        self.set(tail_pos, 0);
        if tail_pos != p {
            self.set(p, moved);
        }
        if overflow && self.bucket(true, i).iter().all(|&s| s == 0) {
            if let Some((lo, li)) = link_to_tail {
                self.bucket_mut(lo, li)[7] = 0;
            }
            self.free_overflow.push(i);
        }
    }

    /// Puts `v` in the first empty slot of `b`'s chain, growing the chain if full.
    pub fn insert(&mut self, b: u32, v: u64) {
        let (mut overflow, mut i) = (false, b & self.mask);
        loop {
            let bucket = self.bucket_mut(overflow, i);
            if let Some(s) = bucket.iter_mut().take(7).find(|s| **s == 0) {
                *s = v;
                return;
            }
            match slot::link_target(bucket[7]) {
                Some(next) => (overflow, i) = (true, next),
                None if bucket[7] == 0 => {
                    bucket[7] = v;
                    return;
                }
                None => {
                    // Last slot holds an item: move it into a new overflow
                    // bucket and link that bucket in its place.
                    let moved = bucket[7];
                    let next = self.new_overflow();
                    let nb = self.bucket_mut(true, next);
                    nb[0] = moved;
                    nb[1] = v;
                    self.bucket_mut(overflow, i)[7] = u64::from(next) + 1;
                    return;
                }
            }
        }
    }

    fn new_overflow(&mut self) -> u32 {
        if let Some(i) = self.free_overflow.pop() {
            *self.bucket_mut(true, i) = [0; 8];
            return i;
        }
        if self.overflow_len as usize == self.overflow.len() * BLOCK {
            self.overflow.push(Box::new([[0; 8]; BLOCK]));
        }
        self.overflow_len += 1;
        self.overflow_len - 1
    }

    /// Removes every item, calling `f` on each; overflow buckets are recycled.
    #[cfg(test)]
    pub fn drain(&mut self, mut f: impl FnMut(u64)) {
        for b in self.buckets.iter_mut().chain(self.overflow.iter_mut().flat_map(|blk| blk.iter_mut())) {
            for s in b.iter_mut() {
                if slot::is_item(*s) {
                    f(*s);
                }
                *s = 0;
            }
        }
        self.free_overflow = (0..self.overflow_len).collect();
        self.items = 0;
        self.bytes = 0;
    }

    /// Overflow buckets in use.
    #[cfg(test)]
    pub fn overflow_buckets(&self) -> usize {
        self.overflow_len as usize - self.free_overflow.len()
    }

    /// Main and overflow buckets allocated (overflow blocks are never freed).
    pub fn footprint(&self) -> (usize, usize) {
        (self.buckets.len(), self.overflow.len() * BLOCK)
    }

    /// Whether the main table is loaded enough to double.
    pub fn wants_growth(&self) -> bool {
        self.items > self.buckets.len() as u64 * GROW_LOAD && self.buckets.len() < MAX_STRIPE_BUCKETS
    }

    /// log2 of the main table's size.
    pub fn table_bits(&self) -> u32 {
        (self.mask + 1).trailing_zeros()
    }

    /// Doubles the main table and re-places every item by `place(slot,
    /// bucket)`, given the main bucket it was in: the item's [`Loc::bucket`]
    /// and its slot (a flash slot changes as it is re-placed), or `None` to
    /// drop it; the dropped slots are returned, for the caller's totals.
    /// Overflow blocks are reused, so only the main table is allocated.
    pub fn grow(&mut self, mut place: impl FnMut(u64, u32) -> Option<(u32, u64)>) -> Vec<u64> {
        let mut items = Vec::with_capacity(self.items as usize);
        for b in 0..self.buckets.len() as u32 {
            let (mut overflow, mut i) = (false, b);
            loop {
                let bucket = self.bucket(overflow, i);
                items.extend(bucket.iter().copied().filter(|&s| slot::is_item(s)).map(|s| (s, b)));
                match slot::link_target(bucket[7]) {
                    Some(next) => (overflow, i) = (true, next),
                    None => break,
                }
            }
        }
        let n = self.buckets.len() * 2;
        self.buckets = vec![[0; 8]; n];
        self.mask = (n - 1) as u32;
        for blk in &mut self.overflow {
            **blk = [[0; 8]; BLOCK];
        }
        self.overflow_len = 0;
        self.free_overflow.clear();
        let mut dropped = Vec::new();
        for (s, b) in items {
            match place(s, b) {
                Some((bucket, s)) => self.insert(bucket, s),
                None => dropped.push(s),
            }
        }
        dropped
    }
}

/// Cache-line padding so two stripes' locks never share a line.
#[repr(align(128))]
struct Padded(Mutex<Stripe>);

/// Where a stripe's main table is, for [`Index::prefetch`]: read without the
/// stripe's lock, so atomics, and only ever used as a prefetch address (a
/// stale one costs a wasted prefetch, never a wrong read). Kept apart from
/// the stripes, 16 bytes each, so that looking them up for a batch of keys
/// stays in cache where the padded stripes (128 bytes each) would not.
#[derive(Default)]
struct TableHint {
    table: AtomicPtr<Bucket>,
    mask: AtomicU32,
}

impl TableHint {
    fn publish(&self, st: &Stripe) {
        self.table.store(st.buckets.as_ptr().cast_mut(), Relaxed);
        self.mask.store(st.mask, Relaxed);
    }
}

/// Asks the CPU to start loading the cache line at `p`, so a read soon after
/// finds it there instead of waiting on memory.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: PREFETCHT0 is a hint: it never faults, whatever the address
    // (null, unmapped or freed included), and changes no memory.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = p;
}

/// Which stripe, which bucket in it, and the tag of a hashed key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Loc {
    pub stripe: usize,
    pub bucket: u32,
    pub tag: u16,
    /// 10 more bits of the hash, for flash slots (see [`flash`]).
    pub ext: u16,
}

impl Loc {
    /// The `more` bits of a flash slot placed for this key in a stripe
    /// whose table has `2^table_bits` buckets (see [`flash`]).
    pub fn more(&self, table_bits: u32) -> u8 {
        0x40 | ((self.bucket.checked_shr(table_bits).unwrap_or(0)) & 0x3f) as u8
    }
}

/// Where a flash slot found in main bucket `b` of a table of `2^bits`
/// buckets goes when the table doubles: its bucket and its slot, with the
/// bit it used taken out; `None` when it has no bit left.
pub fn replace_flash(s: u64, b: u32, bits: u32) -> Option<(u32, u64)> {
    let more = flash::more(s);
    if more <= 1 {
        return None;
    }
    let next = u32::from(more & 1) << bits;
    Some((b | next, flash::with_more(s, more >> 1)))
}

pub struct Index {
    stripes: Box<[Padded]>,
    tables: Box<[TableHint]>,
    stripe_bits: u32,
    hasher: ahash::RandomState,
    /// Main and overflow buckets allocated, all stripes: kept current by
    /// [`Index::note_footprint`] so the store can budget memory without
    /// taking every stripe lock.
    main_buckets: AtomicUsize,
    overflow_buckets: AtomicUsize,
}

impl Index {
    /// An index of `2^hash_power` buckets to start with.
    pub fn new(hash_power: u32) -> Index {
        let nbuckets = 1usize << hash_power;
        let stripe_bits = hash_power.min(10);
        let per_stripe = nbuckets >> stripe_bits;
        let stripes = (0..1u64 << stripe_bits)
            .map(|_| {
                let st =
                    Stripe { buckets: vec![[0; 8]; per_stripe], mask: (per_stripe - 1) as u32, ..Stripe::default() };
                Padded(Mutex::new(st))
            })
            .collect::<Box<[Padded]>>();
        let tables = stripes
            .iter()
            .map(|p| {
                let hint = TableHint::default();
                hint.publish(&p.0.lock());
                hint
            })
            .collect();
        Index {
            stripes,
            tables,
            stripe_bits,
            hasher: ahash::RandomState::new(),
            main_buckets: AtomicUsize::new(nbuckets),
            overflow_buckets: AtomicUsize::new(0),
        }
    }

    /// The key's stripe, tag, and hash bits from which a stripe takes its
    /// bucket (the low bits, as many as its table needs). The tag comes from
    /// the top 12 bits, which no table size reaches.
    pub fn locate(&self, key: &[u8]) -> Loc {
        let h = self.hasher.hash_one(key);
        let tag = ((h >> 52) as u16).max(1);
        let ext = ((h >> 42) & 0x3ff) as u16;
        Loc { stripe: (h & ((1 << self.stripe_bits) - 1)) as usize, bucket: (h >> self.stripe_bits) as u32, tag, ext }
    }

    /// Records a stripe's change of [`Stripe::footprint`].
    pub fn note_footprint(&self, before: (usize, usize), after: (usize, usize)) {
        if after.0 != before.0 {
            self.main_buckets.fetch_add(after.0 - before.0, Relaxed);
        }
        if after.1 != before.1 {
            self.overflow_buckets.fetch_add(after.1 - before.1, Relaxed);
        }
    }

    /// Main-table buckets, all stripes.
    pub fn main_buckets(&self) -> usize {
        self.main_buckets.load(Relaxed)
    }

    pub fn lock(&self, stripe: usize) -> MutexGuard<'_, Stripe> {
        self.stripes[stripe].0.lock()
    }

    /// Doubles a stripe's main table (see [`Stripe::grow`]) and publishes
    /// its new place for [`Index::prefetch`].
    pub fn grow(&self, stripe: usize, st: &mut Stripe, place: impl FnMut(u64, u32) -> Option<(u32, u64)>) -> Vec<u64> {
        let dropped = st.grow(place);
        self.tables[stripe].publish(st);
        dropped
    }

    /// Starts loading `loc`'s stripe lock and main bucket into the cache,
    /// without taking the lock: a batch of keys then waits on memory once,
    /// not once per key.
    pub fn prefetch(&self, loc: Loc) {
        prefetch(&self.stripes[loc.stripe]);
        let hint = &self.tables[loc.stripe];
        let (table, mask) = (hint.table.load(Relaxed), hint.mask.load(Relaxed));
        // Table and mask may be from different sizes of a growing stripe:
        // `wrapping_add` keeps a mismatched pair a harmless wrong address.
        prefetch(table.wrapping_add((loc.bucket & mask) as usize));
    }

    /// The main bucket that hash bits `bucket` pick in stripe `stripe`'s
    /// table as it is now, read without the stripe's lock (the table may
    /// double meanwhile): an order for visiting buckets, never a place to
    /// read or write.
    pub fn bucket_hint(&self, stripe: usize, bucket: u32) -> u32 {
        bucket & self.tables[stripe].mask.load(Relaxed)
    }

    /// log2 of the largest stripe table's size, read without the locks
    /// (a hint, as [`Index::bucket_hint`]).
    pub fn widest_table_bits(&self) -> u32 {
        let widest = self.tables.iter().map(|t| t.mask.load(Relaxed)).max().unwrap_or(0);
        u32::BITS - widest.leading_zeros()
    }

    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }

    /// Bytes the index occupies (main and overflow buckets, locks).
    pub fn memory(&self) -> usize {
        let buckets = self.main_buckets.load(Relaxed) + self.overflow_buckets.load(Relaxed);
        buckets * std::mem::size_of::<Bucket>()
            + self.stripes.len() * (std::mem::size_of::<Padded>() + std::mem::size_of::<TableHint>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::size_of::<Padded>(), 128);
        assert_eq!(std::mem::size_of::<TableHint>(), 16);
        let s = slot::pack(0xabc, 9, (1 << 24) - 1, 123_456);
        assert_eq!((slot::tag(s), slot::freq(s), slot::seg(s), slot::off(s)), (0xabc, 9, (1 << 24) - 1, 123_456));
        assert_eq!(slot::location(slot::with_freq(s, 3)), slot::location(s));
        assert!(slot::link_target(s).is_none());
        assert_eq!(slot::link_target(5), Some(4));
    }

    #[test]
    fn flash_slots_keep_their_fields_and_move_with_growth() {
        let addr = (1 << strata_flash::ADDR_BITS) - 3;
        let s = flash::pack(0xfed, 0x2a5, 0x40 | 0b101, addr);
        assert!(slot::is_flash(s) && slot::is_item(s));
        assert_eq!((slot::tag(s), flash::ext(s), flash::more(s), flash::addr(s)), (0xfed, 0x2a5, 0x45, addr));
        assert!(slot::seg(s) >= slot::MAX_RAM_SEGMENTS, "never a memory segment");
        assert!(!slot::is_flash(slot::pack(0xfff, 15, slot::MAX_RAM_SEGMENTS - 1, (1 << slot::OFF_BITS) - 1)));
        // Bucket 3 of a table of 2^4: the next hash bit (1) picks bucket 19.
        let (b, moved) = replace_flash(s, 3, 4).unwrap_or_else(|| panic!("has bits"));
        assert_eq!((b, flash::more(moved)), (3 | 1 << 4, 0x22));
        assert_eq!(flash::location(moved), flash::location(s));
        assert!(!flash::read(s) && flash::read(flash::with_read(s)));
        assert_eq!(flash::location(flash::with_read(s)), flash::location(s));
        assert_eq!(flash::addr(flash::with_read(s)), addr);
        let (b, moved) = replace_flash(moved, b, 5).unwrap_or_else(|| panic!("has bits"));
        assert_eq!((b, flash::more(moved)), (19, 0x11));
        // Six bits at most: the seventh doubling drops the slot.
        let mut s = flash::pack(1, 0, 0x7f, 8);
        for bits in 4..10 {
            s = replace_flash(s, 0, bits).unwrap_or_else(|| panic!("bit {bits}")).1;
        }
        assert!(replace_flash(s, 0, 10).is_none());
        let loc = Loc { stripe: 0, bucket: 0b1011_0110, tag: 1, ext: 0 };
        assert_eq!(loc.more(4), 0x40 | 0b1011);
        assert_eq!(loc.more(32), 0x40);
    }

    #[test]
    fn prefetch_follows_growth_and_takes_any_address() {
        let index = Index::new(if cfg!(miri) { 4 } else { 10 });
        let loc = index.locate(b"key");
        let mut st = index.lock(loc.stripe);
        index.grow(loc.stripe, &mut st, |s, _| Some((0, s)));
        let p = &index.tables[loc.stripe];
        assert_eq!(p.table.load(Relaxed).cast_const(), st.buckets.as_ptr());
        assert_eq!(p.mask.load(Relaxed), 1);
        drop(st);
        index.prefetch(loc);
        // A hint only: addresses no read could use must not fault.
        prefetch(std::ptr::null::<u8>());
        prefetch(std::ptr::dangling::<u8>().wrapping_sub(1));
        prefetch(std::ptr::dangling::<Bucket>().wrapping_add(1 << 40));
    }

    #[test]
    fn chains_grow_and_find_every_slot() {
        let mut st = Stripe { buckets: vec![[0; 8]; 1], ..Stripe::default() };
        for i in 1..=40u32 {
            st.insert(0, slot::pack(1, 0, i, i));
        }
        assert!(st.overflow_buckets() >= 5);
        for i in 1..=40u32 {
            let (p, s) = st.find(0, |s| slot::seg(s) == i).unwrap_or_else(|| panic!("slot {i}"));
            assert_eq!(slot::off(s), i);
            if i % 2 == 0 {
                st.remove(0, p);
            }
        }
        assert!(st.find(0, |s| slot::seg(s) == 2).is_none());
        for i in (1..=40u32).filter(|i| i % 2 == 1) {
            assert!(st.find(0, |s| slot::seg(s) == i).is_some(), "slot {i} lost by compaction");
        }
        assert!(st.overflow_buckets() <= 3, "empty overflow buckets are recycled");
        let mut seen = 0;
        st.drain(|_| seen += 1);
        assert_eq!(seen, 20);
        assert_eq!(st.overflow_buckets(), 0);
        assert!(st.find(0, |_| true).is_none());
    }

    #[test]
    fn growth_doubles_and_keeps_every_item_findable() {
        // The "hash" of an item is its segment id here.
        let mut st = Stripe { buckets: vec![[0; 8]; 1], ..Stripe::default() };
        for i in 1..=100u32 {
            st.insert(i, slot::pack(1, 0, i, i));
            st.items += 1;
            while st.wants_growth() {
                st.grow(|s, _| Some((slot::seg(s), s)));
            }
        }
        let (main, overflow) = st.footprint();
        assert_eq!(main, 16, "100 items at <= {GROW_LOAD} per bucket");
        assert!(overflow <= 8 * BLOCK, "overflow blocks are reused across growth, got {overflow}");
        for i in 1..=100u32 {
            let (p, _) = st.find(i, |s| slot::seg(s) == i).unwrap_or_else(|| panic!("slot {i} lost by growth"));
            assert!(!p.overflow || p.bucket < st.overflow_len);
            // In its own bucket's chain (i + 1 maps to another of the 16).
            assert!(st.find(i + 1, |s| slot::seg(s) == i).is_none());
        }
        let mut seen = 0;
        st.drain(|_| seen += 1);
        assert_eq!(seen, 100);
    }
}
