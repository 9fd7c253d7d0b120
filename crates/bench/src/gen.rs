//! Seeded generators for what a workload sends: key indices (uniform,
//! zipf or sequential), key bytes of a fixed size, and values. Value kinds
//! (`--value-size`, `value_size` in scenarios):
//!
//! - `N`, `LO-HI`: random lower-case letters, fixed or uniform size.
//! - `random:LO-HI`: random bytes (what compression cannot shrink).
//! - `json:LO-HI`: JSON-like records from a pool of 4096, space-padded to
//!   size; cheap, but they compress trivially and repeat, so they say
//!   nothing about compression.
//! - `api:LO-HI`: one realistic API-response object (product, user, order
//!   or ad: ids, UUIDs, ISO-8601 times, names, emails, URLs, nested
//!   objects, tags, prices, and zipf-distributed English-like free text).
//! - `page:LO-HI`: a listing page, `{"page","per_page","total","items"}`
//!   with about ten such objects of one kind that share what a real
//!   listing's items share.
//!
//! A value's size is the key's own ([`Values::len_of`]): for `LO-HI` and
//! `random:LO-HI` a hash of (seed, key index), uniform in the range over
//! keys, so a key set again after a miss or an overwrite has the size it
//! had (a cached object keeps its size, and the bench can count the bytes
//! a miss would have returned).
//!
//! `api:` and `page:` values are made per key from (seed, key index), so
//! every key has its own value; with a trained zstd dictionary at level 3
//! they compress like real JSON (about 2.4x for `api:150-200`, 4x for
//! `page:1500-1900`; see [`api`] and `docs/benchmarks.md`). Making a page
//! takes several µs, too much per request for a client sharing two cores
//! with the server, so [`Values`] makes them at start-up, one per key up
//! to 64 MiB of values (380k `api:150-200` objects, 39k `page:1500-1900`
//! pages); keys beyond that reuse them cyclically, which still leaves
//! hundreds of times more distinct data than a ~100 KB dictionary holds.
//!
//! Everything derives from the workload's seed (and, for values, the key
//! index), so two runs (and the three servers of one run) see the same
//! request stream and the same data.

mod api;
mod vocab;

pub use crate::config::min_key_size;
pub use api::{API_MIN, PAGE_MIN};

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use rand_distr::{Distribution, Zipf};

use crate::config::{FillOrder, KeyDist, ValueSize};

/// Chooses key indices in `0..keys`.
#[derive(Debug, Clone)]
pub enum KeyChooser {
    Uniform(u64),
    Zipf(Zipf<f64>),
    /// `0, 1, 2, …` (then again from 0), one sequence shared by every
    /// thread and connection of a phase: `keys` requests read each key once.
    Sequential {
        next: Arc<AtomicU64>,
        keys: u64,
    },
}

impl KeyChooser {
    pub fn new(dist: KeyDist, keys: u64) -> Result<KeyChooser, String> {
        match dist {
            KeyDist::Uniform => Ok(KeyChooser::Uniform(keys.max(1))),
            KeyDist::Sequential => Ok(KeyChooser::Sequential { next: Arc::new(AtomicU64::new(0)), keys: keys.max(1) }),
            KeyDist::Zipf(s) => {
                Zipf::new(keys.max(1) as f64, s).map(KeyChooser::Zipf).map_err(|e| format!("zipf {s}: {e}"))
            }
        }
    }

    pub fn next(&self, rng: &mut SmallRng) -> u64 {
        match self {
            KeyChooser::Uniform(n) => rng.random_range(0..*n),
            // Rank 1 is the hottest key; ranks are 1-based.
            KeyChooser::Zipf(z) => (z.sample(rng) as u64).saturating_sub(1),
            KeyChooser::Sequential { next, keys } => next.fetch_add(1, Relaxed) % keys,
        }
    }
}

/// The keys a load run's warm-up sets, in order, where that is not
/// `0, 1, 2, …`: shuffled, a permutation of `0..keys` fixed by `seed`
/// (Fisher-Yates, `rand`'s `shuffle`). Under a zipf distribution key `i`
/// is the `i + 1`th most popular, so a fill in key order hands a policy
/// that keeps what came first (TinyLFU's admission refuses a newcomer that
/// ties) the hottest keys for nothing; traffic fills a cache in no such
/// order.
pub fn fill_order(order: FillOrder, keys: u64, seed: u64) -> Option<Vec<u64>> {
    match order {
        FillOrder::Keys => None,
        FillOrder::Shuffled => {
            let mut all: Vec<u64> = (0..keys).collect();
            all.shuffle(&mut SmallRng::seed_from_u64(seed ^ 0xf111_0de5));
            Some(all)
        }
    }
}

/// Writes key `index` as exactly `size` bytes: a `k` prefix, then the
/// zero-filled decimal number (`k000001234`), so every key is distinct and
/// of the configured length. `size` must exceed the largest index's digits.
pub fn write_key(out: &mut Vec<u8>, index: u64, size: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(index).as_bytes();
    let width = size.saturating_sub(1).min(20).max(digits.len());
    let pad = size.saturating_sub(width);
    let at = out.len();
    out.resize(at + pad, b'k');
    out.resize(at + pad + width - digits.len(), b'0');
    out.extend_from_slice(digits);
}

/// Key `index`'s TTL in seconds: one of `ttls` (0: none), the same for
/// every set of the key, spread evenly over the keys.
pub fn ttl_of(ttls: &[u32], index: u64) -> u32 {
    match ttls.len() as u64 {
        0 => 0,
        n => ttls[(mix(index ^ 0x7711_0ff5) % n) as usize],
    }
}

/// A pool of value bytes to slice values from, so a request costs no
/// generation time.
#[derive(Debug, Clone)]
pub struct Values {
    pool: Vec<u8>,
    records: Vec<(usize, usize)>,
    /// `api-change:`: where the second version's records start.
    split: usize,
    size: ValueSize,
    /// Picks each key's size in a range (see [`Values::len_of`]).
    seed: u64,
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

const POOL: usize = 1 << 20;
const RECORDS: usize = 4096;
/// Bytes of `api:`/`page:` values made up front: one value per key up to
/// this, then keys share values cyclically. 64 MiB is 380k objects of
/// ~175 B or 39k pages of ~1.7 KB, far beyond what a ~100 KB dictionary
/// can memorise, at ~0.5 s of start-up on two cores.
const GENERATED_BYTES: usize = 64 << 20;

impl Values {
    /// Values for a workload of `keys` keys.
    pub fn new(size: ValueSize, seed: u64, keys: u64) -> Values {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_0f7a_1e00);
        let mut v = Values { pool: Vec::new(), records: Vec::new(), split: 0, size, seed: mix(seed ^ 0x517e_5125) };
        match size {
            ValueSize::Fixed(_) | ValueSize::Range(..) => {
                let max = v.max_len();
                v.pool = (0..POOL + max).map(|_| rng.random_range(b'a'..=b'z')).collect();
            }
            ValueSize::Random(..) => {
                let max = v.max_len();
                v.pool = vec![0; POOL + max];
                rng.fill_bytes(&mut v.pool);
            }
            ValueSize::Json(lo, hi) => {
                for i in 0..RECORDS {
                    let target = rng.random_range(lo..=hi);
                    let start = v.pool.len();
                    json_record(&mut v.pool, &mut rng, i, target);
                    v.records.push((start, v.pool.len() - start));
                }
            }
            ValueSize::Api(lo, hi) => v.generate(keys, (lo + hi) / 2, |out, i| api::api_value(out, seed, i, lo, hi)),
            ValueSize::Page(lo, hi) => v.generate(keys, (lo + hi) / 2, |out, i| api::page_value(out, seed, i, lo, hi)),
            ValueSize::ApiChange(lo, hi, at) => {
                v.generate(at.min(keys), (lo + hi) / 2, |out, i| api::api_value(out, seed, i, lo, hi));
                v.split = v.records.len();
                let after = keys.saturating_sub(at).max(1);
                v.generate(after, (lo + hi) / 2, |out, i| api::api_v2_value(out, seed, at + i, lo, hi));
            }
        }
        v
    }

    /// Makes the values of keys `0..n` with `make`, `n` as many keys as
    /// [`GENERATED_BYTES`] holds at `mean` bytes each, on every core: a
    /// page costs ~11 µs to make, too much to pay per request in a client
    /// that shares the machine with the server it measures.
    fn generate(&mut self, keys: u64, mean: usize, make: impl Fn(&mut Vec<u8>, u64) + Sync) {
        let n = keys.clamp(1, (GENERATED_BYTES / mean.max(1)).max(256) as u64);
        let threads = std::thread::available_parallelism().map_or(1, usize::from).min(8) as u64;
        let chunk = n.div_ceil(threads);
        let parts: Vec<(Vec<u8>, Vec<usize>)> = std::thread::scope(|s| {
            let make = &make;
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        let (mut bytes, mut ends) = (Vec::new(), Vec::new());
                        for i in t * chunk..((t + 1) * chunk).min(n) {
                            make(&mut bytes, i);
                            ends.push(bytes.len());
                        }
                        (bytes, ends)
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
        for (bytes, ends) in parts {
            let base = self.pool.len();
            let mut start = base;
            for end in ends {
                self.records.push((start, base + end - start));
                start = base + end;
            }
            self.pool.extend_from_slice(&bytes);
        }
    }

    pub fn max_len(&self) -> usize {
        match self.size {
            ValueSize::Fixed(n) => n,
            ValueSize::Range(_, hi) | ValueSize::Random(_, hi) | ValueSize::Json(_, hi) => hi,
            ValueSize::Api(_, hi) => hi.max(API_MIN),
            ValueSize::ApiChange(_, hi, _) => hi.max(API_MIN) + api::V2_ENVELOPE,
            ValueSize::Page(_, hi) => hi.max(PAGE_MIN),
        }
    }

    /// The size of key `index`'s value: the same every time it is asked
    /// (for `LO-HI` and `random:LO-HI`, uniform in the range over keys).
    pub fn len_of(&self, index: u64) -> usize {
        match self.size {
            ValueSize::Fixed(n) => n,
            ValueSize::Range(lo, hi) | ValueSize::Random(lo, hi) => {
                let span = (hi - lo) as u64 + 1;
                lo + (mix(self.seed ^ mix(index)) % span) as usize
            }
            ValueSize::Json(..) | ValueSize::Api(..) | ValueSize::Page(..) | ValueSize::ApiChange(..) => {
                self.record(index).1
            }
        }
    }

    fn record(&self, index: u64) -> (usize, usize) {
        if let ValueSize::ApiChange(_, _, at) = self.size {
            let (first, second) = (self.split as u64, (self.records.len() - self.split) as u64);
            return match index.checked_sub(at) {
                None => self.records[(index % first.max(1)) as usize],
                Some(i) => self.records[self.split + (i % second.max(1)) as usize],
            };
        }
        self.records[(index % self.records.len().max(1) as u64) as usize]
    }

    /// The value to store under key `index` (always the same bytes).
    pub fn value(&self, index: u64) -> &[u8] {
        let at = (index as usize).wrapping_mul(7919) % POOL.min(self.pool.len().max(1));
        match self.size {
            ValueSize::Fixed(..) | ValueSize::Range(..) | ValueSize::Random(..) => {
                &self.pool[at..at + self.len_of(index)]
            }
            ValueSize::Json(..) | ValueSize::Api(..) | ValueSize::Page(..) | ValueSize::ApiChange(..) => {
                let (start, len) = self.record(index);
                &self.pool[start..start + len]
            }
        }
    }
}

const NAMES: &[&str] = &["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"];
const TAGS: &[&str] = &["sports", "news", "auto", "travel", "finance", "games", "music", "food", "tech", "home"];
const COUNTRIES: &[&str] = &["US", "DE", "FR", "JP", "BR", "IN", "GB", "CA", "AU", "ES"];

/// Appends one JSON object of exactly `target` bytes (at least 2), shaped
/// like an ad-impression or user-profile record: scalar fields while they
/// fit, then an `events` array grown to the size, then space padding.
fn json_record(out: &mut Vec<u8>, rng: &mut SmallRng, id: usize, target: usize) {
    let target = target.max(2);
    let pick = |rng: &mut SmallRng, list: &[&'static str]| list[rng.random_range(0..list.len())];
    let fields = [
        format!("\"id\":{id}"),
        format!("\"user\":\"{}{}\"", pick(rng, NAMES), rng.random_range(0..100_000)),
        format!("\"country\":\"{}\"", pick(rng, COUNTRIES)),
        format!("\"score\":{:.3}", rng.random_range(0.0..1.0f64)),
        format!("\"active\":{}", rng.random_bool(0.7)),
    ];
    let mut obj = String::from("{");
    for f in fields {
        let sep = if obj.len() > 1 { "," } else { "" };
        if obj.len() + sep.len() + f.len() + 1 > target {
            break;
        }
        obj.push_str(sep);
        obj.push_str(&f);
    }
    let open = if obj.len() > 1 { ",\"events\":[" } else { "\"events\":[" };
    if obj.len() + open.len() + 2 <= target {
        obj.push_str(open);
        let mut first = true;
        loop {
            let event = format!(
                "{}{{\"ts\":{},\"tag\":\"{}\",\"bid\":{:.2}}}",
                if first { "" } else { "," },
                1_700_000_000 + rng.random_range(0..10_000_000),
                pick(rng, TAGS),
                rng.random_range(0.01..5.0f64),
            );
            if obj.len() + event.len() + 2 > target {
                break;
            }
            obj.push_str(&event);
            first = false;
        }
        obj.push(']');
    }
    // Pad with JSON whitespace to the exact size.
    while obj.len() + 1 < target {
        obj.push(' ');
    }
    obj.push('}');
    out.extend_from_slice(obj.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_the_requested_size_and_are_distinct() {
        let mut a = Vec::new();
        write_key(&mut a, 1234, 12);
        assert_eq!(a, b"k00000001234");
        let mut b = Vec::new();
        write_key(&mut b, 9, 3);
        assert_eq!(b, b"k09");
        let mut c = Vec::new();
        write_key(&mut c, 7, 24);
        assert_eq!(c, b"kkkk00000000000000000007");
        assert_eq!(min_key_size(1000), 4);
    }

    #[test]
    fn json_values_are_exact_size_and_parse() {
        let v = Values::new(ValueSize::Json(32, 4000), 7, 100);
        for i in 0..RECORDS as u64 {
            let val = v.value(i);
            assert!((32..=4000).contains(&val.len()));
            assert_eq!(val.len(), v.records[i as usize].1);
            let parsed: Result<serde_json::Value, _> = serde_json::from_slice(val);
            assert!(parsed.is_ok(), "{}", String::from_utf8_lossy(val));
        }
    }

    #[test]
    fn api_change_switches_at_its_key() {
        let v = Values::new(ValueSize::ApiChange(100, 250, 50), 5, 120);
        let mut direct = Vec::new();
        for i in 0..120 {
            direct.clear();
            if i < 50 {
                api::api_value(&mut direct, 5, i, 100, 250);
            } else {
                api::api_v2_value(&mut direct, 5, i, 100, 250);
            }
            assert_eq!(v.value(i), &direct[..], "key {i}");
            assert!(direct.len() <= v.max_len());
        }
    }

    #[test]
    fn api_and_page_values_are_the_keys_own() {
        let mut direct = Vec::new();
        for (size, make) in [
            (ValueSize::Api(150, 200), api::api_value as fn(&mut Vec<u8>, u64, u64, usize, usize)),
            (ValueSize::Page(1500, 1900), api::page_value),
        ] {
            let (lo, hi) = match size {
                ValueSize::Api(lo, hi) | ValueSize::Page(lo, hi) => (lo, hi),
                _ => (0, 0),
            };
            let v = Values::new(size, 5, 300);
            assert_eq!(v.records.len(), 300);
            for i in 0..300 {
                direct.clear();
                make(&mut direct, 5, i, lo, hi);
                assert_eq!(v.value(i), &direct[..], "key {i}");
                assert!(direct.len() <= v.max_len());
            }
            // Past the keys made, keys share values cyclically.
            assert_eq!(v.value(300), v.value(0));
            assert_ne!(v.value(0), Values::new(size, 6, 300).value(0));
        }
        // A large key space is capped by bytes, not by key count.
        let big = Values::new(ValueSize::Page(1500, 1900), 5, 10_000_000);
        assert!(big.pool.len() <= GENERATED_BYTES + 1900 && big.records.len() > 30_000, "{}", big.records.len());
    }

    #[test]
    fn range_sizes_are_the_keys_own() {
        for size in [ValueSize::Range(100, 65536), ValueSize::Random(100, 65536)] {
            let v = Values::new(size, 9, 6000);
            let mut sum = 0;
            for i in 0..6000 {
                let len = v.len_of(i);
                assert!((100..=65536).contains(&len), "{len}");
                // Asked again (a re-set after a miss), the same size and bytes.
                assert_eq!(v.value(i).len(), len);
                assert_eq!(v.value(i), v.value(i));
                sum += len;
            }
            // Uniform over keys: the mean is near the range's middle.
            let mean = sum as f64 / 6000.0;
            assert!((mean - 32818.0).abs() < 1000.0, "{mean}");
            // Another seed, other sizes; the same seed, the same ones.
            let other = Values::new(size, 10, 6000);
            assert!((0..100).any(|i| other.len_of(i) != v.len_of(i)));
            assert!((0..100).all(|i| Values::new(size, 9, 6000).len_of(i) == v.len_of(i)));
        }
        let fixed = Values::new(ValueSize::Fixed(1000), 1, 10);
        assert_eq!((fixed.len_of(3), fixed.value(3).len()), (1000, 1000));
        let json = Values::new(ValueSize::Json(32, 4000), 7, 100);
        assert!((0..100).all(|i| json.len_of(i) == json.value(i).len()));
    }

    #[test]
    fn sequential_keys_visit_each_key_once_per_pass() {
        let k = KeyChooser::new(KeyDist::Sequential, 5).unwrap_or(KeyChooser::Uniform(1));
        let mut rng = SmallRng::seed_from_u64(3);
        let shared = k.clone();
        let seen: Vec<u64> =
            (0..7).map(|i| if i % 2 == 0 { k.next(&mut rng) } else { shared.next(&mut rng) }).collect();
        assert_eq!(seen, [0, 1, 2, 3, 4, 0, 1]);
    }

    #[test]
    fn a_shuffled_fill_sets_every_key_once_in_an_order_fixed_by_the_seed() {
        assert_eq!(fill_order(FillOrder::Keys, 1000, 1), None);
        let order = fill_order(FillOrder::Shuffled, 1000, 1).unwrap_or_default();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<u64>>());
        // Not key order: the hottest tenth of a zipf's keys is spread over
        // the fill, not all in its first tenth.
        assert!(order[..100].iter().filter(|&&k| k < 100).count() < 30);
        assert_eq!(fill_order(FillOrder::Shuffled, 1000, 1), Some(order.clone()));
        assert_ne!(fill_order(FillOrder::Shuffled, 1000, 2), Some(order));
    }

    #[test]
    fn zipf_prefers_low_ranks() {
        let z = KeyChooser::new(KeyDist::Zipf(0.99), 1000).unwrap_or(KeyChooser::Uniform(1));
        let mut rng = SmallRng::seed_from_u64(3);
        let hot = (0..10_000).filter(|_| z.next(&mut rng) < 10).count();
        assert!(hot > 2_000, "{hot}");
    }
}
