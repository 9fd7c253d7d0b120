//! How often each key was asked for lately, resident or not: a count-min
//! sketch of the reads (TinyLFU's, Einziger, Friedman and Manes 2017),
//! which eviction consults (issue 42).
//!
//! A key's read count in its index slot (`index::slot::freq`) starts again
//! each time the item is written or copied forward, and is gone once the
//! item is evicted: a key asked for often, evicted, missed and set again
//! comes back as new, and leaves again unread if no read happens to fall in
//! its short stay in the small queue. The sketch remembers it: every read,
//! hit or miss, counts against the key's hash in four rows of 4-bit
//! counters (saturating at 15), a row's sixteen in one 64-bit word and the
//! key's four words in one 32-byte block (Caffeine's layout: one cache miss
//! a read, prefetched with the index bucket), and a key's estimate is its
//! smallest counter. When reads reach ten times the items
//! in memory, every counter is halved, so old popularity fades (TinyLFU's
//! reset); not before the first eviction (a cache that does not evict
//! needs no aging, and halving megabytes every few thousand reads cost a
//! read-only workload a p99 of 1.2 ms).
//!
//! Its memory is counted inside `-m` ([`Sketch::memory`], subtracted from the
//! segments' budget): two bytes per 1 KiB of the limit, 0.2%. (Counters of
//! a byte each took twice that; the half won back went to the ghost's
//! window, `ghost.rs`.)
//!
//! Counters are shared by every worker without locks: a word's load and
//! store, so two workers counting keys that share a word at once may count
//! one of them once (the same word is one of 4 Mi at `-m 1024`; a lock
//! prefix on every read's four words was not worth that). An estimate is a
//! hint for eviction, never an answer to a client.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

use crate::index::Loc;

const ROWS: usize = 4;
/// Counters per row of a block: the 4-bit counters of one word.
const PER_WORD: usize = 16;
/// A counter's ceiling (TinyLFU's 4 bits).
const MAX: u8 = 15;
/// Every counter of a word halved: each shifted down a bit, the bit that
/// came from the counter above cleared.
const HALF_MASK: u64 = 0x7777_7777_7777_7777;
/// Reads between two halvings per item in memory (Caffeine's sample size:
/// ten times the cache's entries). Sized by the items, not the counters:
/// with 2,000 large items in memory and a row of 64 Ki counters, a sample
/// of ten reads per counter saturated every key of the workload.
const SAMPLE_PER_ITEM: u64 = 10;
/// The sample until eviction first counts the items: none (a cache that
/// does not evict needs no aging; a halving of a 4 MiB sketch every 16,384
/// reads was most of the 38% more server CPU per get it first cost).
const FIRST_SAMPLE: u64 = u64::MAX;
/// The sample's floor, however few the items.
const MIN_SAMPLE: u64 = 1 << 10;
/// A worker adds its reads to the shared total this many at a time, so
/// that workers do not share a cache line on every read.
const BATCH: u32 = 32;

/// A worker's reads and misses not yet added to the sketch's totals (they
/// are added a [`BATCH`] at a time, so that workers do not share a counter
/// per read). Its own to each worker (`Active`); only the sketch reads it.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    reads: u32,
    misses: u32,
}

/// The shared counters.
pub(crate) struct Sketch {
    /// Blocks of [`ROWS`] words, a row's [`PER_WORD`] counters in each.
    words: Box<[AtomicU64]>,
    /// Reads counted since the last halving (in [`BATCH`]es).
    reads: AtomicU64,
    /// Reads between two halvings: [`SAMPLE_PER_ITEM`] times the items in
    /// memory, as eviction last counted them.
    sample: AtomicU64,
    /// Set while one worker halves.
    halving: AtomicBool,
    /// Reads and misses since start (in batches), for the climber
    /// (`climb.rs`).
    all_reads: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for Sketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sketch({} rows of {})", ROWS, self.words.len() / ROWS * PER_WORD)
    }
}

/// 64 bits of the key's hash, taken back out of its location, spread over
/// the word (splitmix64's finaliser); the ghost's too (`ghost.rs`).
pub(crate) fn fingerprint(loc: Loc) -> u64 {
    let mut h =
        u64::from(loc.bucket) | (u64::from(loc.tag) << 32) | (u64::from(loc.ext) << 44) | ((loc.stripe as u64) << 54);
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Sketch {
    /// Sized for a memory limit of `limit` bytes: rows of a counter per KiB
    /// (a power of two, 16 to 4 Mi: one block at least, so that a store of
    /// a few small segments keeps them all; a floor of 4 KiB took one of
    /// the three 16 KiB segments of a test under Miri, whose writer then
    /// waited out the last resort).
    pub(crate) fn new(limit: usize) -> Sketch {
        // Under Miri (a thousand times slower) every store's sketch is
        // small: tests there build many stores at the default 64 MiB.
        let most = if cfg!(miri) { 1 << 10 } else { 1 << 22 };
        let width = (limit / 1024).next_power_of_two().clamp(PER_WORD, most);
        let words = (0..ROWS * width / PER_WORD).map(|_| AtomicU64::new(0)).collect();
        Sketch {
            words,
            reads: AtomicU64::new(0),
            sample: AtomicU64::new(FIRST_SAMPLE),
            halving: AtomicBool::new(false),
            all_reads: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Eviction counted `items` in memory.
    pub(crate) fn set_items(&self, items: u64) {
        self.sample.store((items * SAMPLE_PER_ITEM).max(MIN_SAMPLE), Relaxed);
    }

    /// Bytes it takes, counted inside `-m`.
    pub(crate) fn memory(&self) -> usize {
        std::mem::size_of_val(&*self.words)
    }

    /// The key's four counters, all in one 32-byte block (Caffeine's
    /// layout): a read costs one cache miss, not four. The block is chosen
    /// by the hash's low bits; in it, row `r`'s counter is one of the 16 of
    /// word `r`, by four more bits of the hash each. Each as (word index,
    /// shift of the counter in the word).
    fn slots(&self, loc: Loc) -> [(usize, u32); ROWS] {
        let h = fingerprint(loc);
        let blocks = (self.words.len() / ROWS).max(1);
        let base = (h as usize & (blocks - 1)) * ROWS;
        let high = h >> 40;
        std::array::from_fn(|r| (base + r, 4 * ((high >> (4 * r)) & 0xf) as u32))
    }

    /// The counter at `(word, shift)`, and the word it was read from.
    fn counter(&self, (word, shift): (usize, u32)) -> (u8, u64) {
        let w = self.words.get(word).map_or(0, |w| w.load(Relaxed));
        (((w >> shift) & 0xf) as u8, w)
    }

    /// Starts loading the key's block (see [`crate::Worker::prefetch_bucket`]).
    pub(crate) fn prefetch(&self, loc: Loc) {
        if let Some(w) = self.words.get(self.slots(loc)[0].0) {
            crate::index::prefetch(w);
        }
    }

    /// Counts a read of the key at `loc`. `pending` holds the worker's reads
    /// not yet added to the shared total.
    pub(crate) fn touch(&self, loc: Loc, pending: &mut Pending) {
        // Conservative update (Estan and Varghese 2002): only the counters
        // at the key's current minimum go up, so the other keys that share
        // a counter inflate the key's estimate far less.
        let slots = self.slots(loc);
        let values = slots.map(|at| self.counter(at));
        let min = values.iter().map(|&(v, _)| v).min().unwrap_or(0);
        if min < MAX {
            for ((word, shift), (v, w)) in slots.into_iter().zip(values) {
                if v == min {
                    if let Some(cell) = self.words.get(word) {
                        // The counter is under 15: adding one stays in it.
                        cell.store(w + (1 << shift), Relaxed);
                    }
                }
            }
        }
        pending.reads += 1;
        if pending.reads >= BATCH {
            pending.reads = 0;
            let sample = self.sample.load(Relaxed);
            self.all_reads.fetch_add(u64::from(BATCH), Relaxed);
            let reads = self.reads.fetch_add(u64::from(BATCH), Relaxed) + u64::from(BATCH);
            // One worker at a time halves; the others go on counting.
            if reads >= sample && !self.halving.swap(true, Relaxed) {
                self.halve();
                let _ = self.reads.fetch_update(Relaxed, Relaxed, |r| Some(r.saturating_sub(sample / 2)));
                self.halving.store(false, Relaxed);
            }
        }
    }

    /// Counts a read that missed; `pending` as for [`Sketch::touch`].
    pub(crate) fn missed(&self, pending: &mut Pending) {
        pending.misses += 1;
        if pending.misses >= BATCH {
            pending.misses = 0;
            self.misses.fetch_add(u64::from(BATCH), Relaxed);
        }
    }

    /// Reads and misses since start (to within a batch per worker).
    pub(crate) fn totals(&self) -> (u64, u64) {
        (self.all_reads.load(Relaxed), self.misses.load(Relaxed))
    }

    fn halve(&self) {
        for w in self.words.iter() {
            w.store((w.load(Relaxed) >> 1) & HALF_MASK, Relaxed);
        }
    }

    /// Reads of the key at `loc` lately, at least (0 to 15).
    pub(crate) fn estimate(&self, loc: Loc) -> u8 {
        self.slots(loc).iter().map(|&at| self.counter(at).0).min().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(i: u32) -> Loc {
        Loc { stripe: (i % 8) as usize, bucket: i.wrapping_mul(2_654_435_761), tag: (i % 4000 + 1) as u16, ext: 0 }
    }

    #[test]
    fn takes_two_bytes_per_kib_and_one_block_at_least() {
        // A floor of 4 KiB took one of the three 16 KiB segments of a
        // small store (Miri's pressure tests then hung in the last resort).
        let block = ROWS * std::mem::size_of::<AtomicU64>();
        assert_eq!(block, 32);
        for shift in 14..31 {
            let limit = 1usize << shift;
            let m = Sketch::new(limit).memory();
            assert!(m <= (limit / 512).max(block) && m >= block, "-m {limit}: {m} bytes");
        }
        if !cfg!(miri) {
            assert_eq!(Sketch::new(1 << 30).memory(), 2 << 20, "-m 1024");
            assert_eq!(Sketch::new(48 << 20).memory(), 128 << 10, "-m 48: rows of 64 Ki");
        }
    }

    #[test]
    fn counters_sharing_a_word_count_and_halve_apart() {
        let s = Sketch::new(1 << 20);
        // Two keys whose first-row counters are neighbours in one word (b's
        // just under a's, or just over where a's is the lowest): a carry
        // or a halving's shifted bit would cross from one into the other.
        let a = loc(1);
        let (wa, sa) = s.slots(a)[0];
        let next = if sa >= 4 { sa - 4 } else { sa + 4 };
        let b = (2..1_000_000).map(loc).find(|&l| s.slots(l)[0] == (wa, next));
        let b = b.expect("a key whose counter neighbours a's");
        let (a0, b0) = (s.slots(a)[0], s.slots(b)[0]);
        let mut pending = Pending::default();
        for _ in 0..16 {
            s.touch(a, &mut pending);
        }
        assert_eq!((s.counter(a0).0, s.counter(b0).0), (15, 0), "a's counter stops at 15, b's untouched");
        s.touch(b, &mut pending);
        assert_eq!((s.counter(a0).0, s.counter(b0).0), (15, 1));
        s.halve();
        assert_eq!((s.counter(a0).0, s.counter(b0).0), (7, 0), "halved apart: no bit crosses into a neighbour");
        assert_eq!(s.estimate(a), 7);
    }

    #[test]
    fn counts_reads_up_to_its_ceiling() {
        let s = Sketch::new(1 << 20);
        let mut pending = Pending::default();
        assert_eq!(s.estimate(loc(1)), 0);
        for n in 1..=20u8 {
            s.touch(loc(1), &mut pending);
            assert_eq!(s.estimate(loc(1)), n.min(MAX));
        }
        assert!(s.estimate(loc(2)) <= 1, "another key shares at most a few counters");
        assert_eq!(s.memory(), ROWS << 9);
    }

    #[test]
    #[cfg_attr(miri, ignore = "12,000 counts: minutes under Miri; no unsafe code of its own")]
    fn popular_keys_stand_out_among_many_and_old_counts_fade() {
        let s = Sketch::new(1 << 20);
        let mut pending = Pending::default();
        // Keys 0..16 read eight times each, 2,000 other keys once.
        for round in 0..8 {
            for k in 0..16 {
                s.touch(loc(k), &mut pending);
            }
            for k in 0..250 {
                s.touch(loc(1000 + round * 250 + k), &mut pending);
            }
        }
        let hot = (0..16).filter(|&k| s.estimate(loc(k)) >= 8).count();
        let cold_high = (1000..3000).filter(|&k| s.estimate(loc(k)) >= 4).count();
        assert_eq!(hot, 16);
        assert!(cold_high < 20, "{cold_high} keys read once look popular");
        // A sample's reads later (of a few other keys), every count has
        // been halved once.
        s.set_items(1000);
        for k in 0..(SAMPLE_PER_ITEM as u32 * 1000) {
            s.touch(loc(100_000 + k % 16), &mut pending);
        }
        let after: Vec<u8> = (0..16).map(|k| s.estimate(loc(k))).collect();
        assert_eq!(after, [4; 16], "old counts fade");
    }
}
