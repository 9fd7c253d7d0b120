//! The store with compression on: values read back as they were written
//! whatever was stored compressed, dictionaries live exactly as long as
//! values name them, and the totals count both sizes. Not under Miri: zstd
//! is C.

// Test code: a panic is how a test fails (clippy.toml allows unwrap in
// #[test] functions; these helpers live beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_tests::{check, op_with, ops_len, Op};
use crate::testing::Now;
use crate::tests::{get, set, store_of};
use crate::*;
use proptest::prelude::*;
use std::sync::Arc;

/// Small enough that a test fills a training in a few hundred values.
pub(crate) fn zconfig() -> strata_compress::Config {
    strata_compress::Config {
        min_size: 32,
        dict_size: 1024,
        train_bytes: 8 << 10,
        sample_one_in: 1,
        ..strata_compress::Config::default()
    }
}

/// `n` segments of `seg` bytes, items up to a segment.
fn segmented_config(n: usize, seg: usize) -> Config {
    Config {
        memory_limit: n * seg,
        segment_size: seg,
        item_size_max: seg,
        compression: Some(zconfig()),
        ..Config::default()
    }
}

fn segmented(n: usize, seg: usize) -> (Arc<Store>, Worker) {
    store_of(segmented_config(n, seg))
}

fn zstore(mem: usize) -> (Arc<Store>, Worker) {
    store_of(Config { memory_limit: mem, compression: Some(zconfig()), ..Config::default() })
}

/// A JSON object of the kind an API returns: shared field names, varying
/// ids, names and text.
pub(crate) fn json(i: u64) -> Vec<u8> {
    const NAMES: [&str; 6] =
        ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Edsger Dijkstra", "Barbara Liskov", "Ken"];
    const WORDS: [&str; 8] = ["fast", "cache", "server", "value", "shipping", "order", "refund", "pending"];
    let text: Vec<&str> = (0..(i % 9 + 3)).map(|k| WORDS[((i * 7 + k * 3) % 8) as usize]).collect();
    format!(
        r#"{{"id":{},"user":{{"name":"{}","email":"user{}@example.com"}},"status":"{}","created_at":"2026-11-{:02}T{:02}:{:02}:00Z","note":"{}"}}"#,
        i * 7919,
        NAMES[(i % 6) as usize],
        i,
        WORDS[(i % 8) as usize],
        i % 28 + 1,
        i % 24,
        i % 60,
        text.join(" ")
    )
    .into_bytes()
}

/// Trains a dictionary on `n` JSON values written under `sample-…` keys,
/// then writes them again with it.
fn train(s: &Store, w: &mut Worker, n: u64) {
    let codec = s.codec().unwrap_or_else(|| panic!("compression is on"));
    codec.start_sampling();
    for i in 0..n {
        set(w, SetOp::Set, format!("sample-{i}").as_bytes(), &json(i));
    }
    let trained = codec.train_now();
    assert!(matches!(trained, Ok(true)), "{trained:?}");
    for i in 0..n {
        set(w, SetOp::Set, format!("sample-{i}").as_bytes(), &json(i));
    }
}

pub(crate) fn zstats(s: &Store) -> strata_compress::CompressStats {
    s.stats().compression.unwrap_or_else(|| panic!("compression is on"))
}

/// Compressible text, random bytes, and numbers (some padded as incr
/// leaves them), so operations cross between plain and compressed forms.
fn value() -> impl Strategy<Value = Vec<u8>> + Clone {
    prop_oneof![
        4 => (0u64..10_000, 0usize..3).prop_map(|(i, reps)| json(i).repeat(reps + 1)),
        2 => (0u64..10_000, 1usize..60).prop_map(|(i, cut)| json(i)[..cut].to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..300),
        1 => (any::<u64>(), 0usize..80).prop_map(|(n, pad)| format!("{n:<width$}", width = pad).into_bytes()),
    ]
}

fn zop() -> impl Strategy<Value = Op> {
    prop_oneof![9 => op_with(value()), 1 => Just(Op::Train)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_a_model_with_compression(ops in proptest::collection::vec(zop(), ops_len(400))) {
        check(ops, Config { memory_limit: 16 << 20, compression: Some(zconfig()), ..Config::default() }, true)?;
    }

    /// Three 64 KiB segments: compressed values are evicted, copied
    /// forward, and their segments' dictionary references moved along.
    #[test]
    fn never_wrong_with_compression_and_eviction(ops in proptest::collection::vec(zop(), ops_len(600))) {
        check(ops, segmented_config(3, 64 << 10), false)?;
    }
}

#[test]
fn values_round_trip_compressed_or_not_and_report_their_own_length() {
    let (s, mut w) = zstore(16 << 20);
    train(&s, &mut w, 400);
    let min = zconfig().min_size;
    let page: Vec<u8> = (0..10).flat_map(json).collect();
    let random: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("below", json(1)[..min - 1].to_vec()),
        ("at", json(2)[..min].to_vec()),
        ("above", json(3)[..min + 1].to_vec()),
        ("object", json(4)),
        ("page", page.clone()),
        ("random", random.clone()),
        ("binary", (0..=255u8).cycle().take(1000).collect()),
    ];
    for (k, v) in &cases {
        assert_eq!(set(&mut w, SetOp::Set, k.as_bytes(), v), StoreOutcome::Stored, "{k}");
    }
    for (k, v) in &cases {
        assert_eq!(get(&mut w, k.as_bytes()).map(|g| g.0).as_ref(), Some(v), "{k}");
        let size = w.inspect(k.as_bytes()).map(|i| i.size);
        let plain = crate::item::encoded_len(k.len(), v.len(), &crate::item::Fields::default());
        assert_eq!(size, Some(plain), "{k}: the size counts the original value");
    }
    // Which of them were stored compressed, by their stored bytes.
    let stats = s.stats();
    let z = zstats(&s);
    // With the dictionary every sample, the object and the page; not the
    // rest.
    assert!(z.compressed >= 400 + 2, "{z:?}");
    assert_eq!(z.skipped, 2, "random bytes are not even tried: {z:?}");
    // "at" and "above" may or may not pay; "below" is not tried.
    assert!((402..=404).contains(&stats.compressed_items), "{stats:?}");
    assert!(stats.compressed_plain_bytes > 3 * stats.compressed_stored_bytes, "{stats:?}");
    // `bytes` counts what the items occupy.
    assert!(stats.bytes < stats.compressed_plain_bytes, "{stats:?}");
}

#[test]
fn the_size_limit_applies_to_the_original_value() {
    let cfg = Config { memory_limit: 16 << 20, item_size_max: 4096, compression: Some(zconfig()), ..Config::default() };
    let (_s, mut w) = store_of(cfg);
    let big = b"{\"a\":1}".repeat(1000);
    assert_eq!(w.set(SetOp::Set, b"k", 0, 0, &big), Err(StoreError::TooLarge));
    let fits = b"{\"a\":1}".repeat(500);
    assert_eq!(set(&mut w, SetOp::Set, b"k", &fits), StoreOutcome::Stored);
    // Appending past the limit fails though the stored form would fit.
    assert_eq!(set(&mut w, SetOp::Append, b"k", &fits), StoreOutcome::NotStored);
    assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(fits.clone()));
}

#[test]
fn append_and_prepend_cross_between_plain_and_compressed() {
    let (s, mut w) = zstore(16 << 20);
    train(&s, &mut w, 400);
    let min = zconfig().min_size;
    let base = s.stats().compressed_items;
    let mut model = b"{\"id\":".to_vec();
    // Short and plain, then long enough to compress, then longer.
    set(&mut w, SetOp::Set, b"k", &model);
    assert_eq!(s.stats().compressed_items, base);
    for (i, piece) in [json(10), json(11)[..min].to_vec(), b"x".to_vec(), json(12)].into_iter().enumerate() {
        let op = if i % 2 == 0 { SetOp::Append } else { SetOp::Prepend };
        assert_eq!(set(&mut w, op, b"k", &piece), StoreOutcome::Stored);
        model = if op == SetOp::Append { [model, piece].concat() } else { [piece, model].concat() };
        assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(model.clone()), "after step {i}");
    }
    assert_eq!(s.stats().compressed_items, base + 1, "the joined value is stored compressed");
    // A compressed value replaced by a short one is plain again.
    set(&mut w, SetOp::Set, b"k", b"{}");
    assert_eq!(s.stats().compressed_items, base);
    assert_eq!(set(&mut w, SetOp::Append, b"k", b"!"), StoreOutcome::Stored);
    assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(b"{}!".to_vec()));
}

#[test]
fn incr_counts_on_plain_numbers_and_refuses_compressed_text() {
    let (s, mut w) = zstore(16 << 20);
    train(&s, &mut w, 400);
    let base = s.stats().compressed_items;
    // A number padded past the minimum size is still a number: kept plain.
    let padded = format!("{:<100}", 41);
    set(&mut w, SetOp::Set, b"n", padded.as_bytes());
    assert_eq!(w.arith(b"n", true, 1), Ok(ArithOutcome::Value(42)));
    assert_eq!(get(&mut w, b"n").map(|g| g.0), Some(format!("{:<100}", 42).into_bytes()));
    set(&mut w, SetOp::Set, b"j", &json(5));
    assert_eq!(w.arith(b"j", true, 1), Ok(ArithOutcome::NonNumeric));
    assert_eq!(w.arith(b"j", false, 1), Ok(ArithOutcome::NonNumeric));
    assert_eq!(get(&mut w, b"j").map(|g| g.0), Some(json(5)));
    assert_eq!(s.stats().compressed_items, base + 1);
}

#[test]
fn a_fetch_is_decompressed_only_by_a_worker_of_its_own_store() {
    let (s, mut w) = zstore(16 << 20);
    train(&s, &mut w, 100);
    let page: Vec<u8> = (0..10).flat_map(json).collect();
    set(&mut w, SetOp::Set, b"page", &page);
    let opts = ReadOpts::default();
    let fetch = |w: &mut Worker| match w.find_now(b"page", &opts, |_| ()) {
        Ok(Found::Fetch(f)) => f,
        other => panic!("a compressed value is read in two phases: {other:?}"),
    };
    let f = fetch(&mut w);
    assert_eq!(f.value_len(), page.len());
    assert_eq!(f.read(&mut w, |it| it.value.to_vec()), Some(page.clone()));
    let (_other, mut stranger) = zstore(16 << 20);
    assert_eq!(fetch(&mut w).read(&mut stranger, |it| it.value.to_vec()), None);
    let (_plain, mut plain) = store_of(Config::default());
    assert_eq!(fetch(&mut w).read(&mut plain, |it| it.value.to_vec()), None);
    assert_eq!(s.stats().decompress_errors, 0, "counted on the worker that failed");
}

#[test]
fn dictionaries_live_while_segments_hold_their_values() {
    let (s, mut w) = segmented(64, 64 << 10);
    train(&s, &mut w, 200);
    let first = zstats(&s);
    assert_eq!((first.dicts_live, first.current_dict), (1, 1));
    for i in 0..200 {
        set(&mut w, SetOp::Set, format!("a{i}").as_bytes(), &json(i));
    }
    // A second dictionary: the first stays, its values still name it.
    train(&s, &mut w, 200);
    let second = zstats(&s);
    assert_eq!((second.dicts_live, second.current_dict), (2, 2));
    assert!(second.dict_bytes > first.dict_bytes, "{second:?}");
    for i in 0..200 {
        assert_eq!(get(&mut w, format!("a{i}").as_bytes()).map(|g| g.0), Some(json(i)));
    }
    // Once the values are flushed and their segments reused, it goes.
    s.flush_all(None).unwrap();
    for i in 0..3000 {
        set(&mut w, SetOp::Set, format!("b{i}").as_bytes(), &json(i));
    }
    let after = zstats(&s);
    assert_eq!((after.dicts_live, after.current_dict), (1, 2), "{after:?}");
    assert!(after.dict_bytes < second.dict_bytes);
    assert_eq!(get(&mut w, b"b2999").map(|g| g.0), Some(json(2999)));
}

/// Four threads read and write while the dictionary is trained again six
/// times: each makes rounds between every two trainings (waited for: under
/// a CPU hog a thread once made none before the last), and none reads
/// bytes other than its value.
#[test]
fn retraining_while_threads_read_and_write() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let (s, mut w) = segmented(24, 256 << 10);
    train(&s, &mut w, 200);
    let stop = Arc::new(AtomicBool::new(false));
    let rounds: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
    let readers: Vec<_> = (0..4u64)
        .map(|t| {
            let (s, stop, rounds) = (s.clone(), stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                let mut w = s.worker();
                let mut i = t;
                while !stop.load(Relaxed) {
                    let k = i % 500;
                    let key = format!("k{k}");
                    if t % 2 == 0 {
                        set(&mut w, SetOp::Set, key.as_bytes(), &json(k));
                    }
                    // Evicted is fine; wrong bytes are not.
                    if let Some(v) = get(&mut w, key.as_bytes()).map(|g| g.0) {
                        assert_eq!(v, json(k), "{key}");
                    }
                    i += 4;
                    rounds[t as usize].fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    let each_made_more = |than: &[u64]| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while rounds.iter().zip(than).any(|(r, &t)| r.load(Relaxed) <= t) {
            assert!(std::time::Instant::now() < until, "a thread made no round in 20 s");
            std::thread::yield_now();
        }
    };
    for _ in 0..6 {
        let before: Vec<u64> = rounds.iter().map(|r| r.load(Relaxed)).collect();
        each_made_more(&before);
        train(&s, &mut w, 200);
    }
    stop.store(true, Relaxed);
    for r in readers {
        r.join().unwrap_or_else(|_| panic!("a reader failed"));
    }
    let (stats, z) = (s.stats(), zstats(&s));
    assert_eq!(stats.decompress_errors, 0);
    assert_eq!(z.trainings, 7);
    assert!(z.dicts_live >= 1 && z.dicts_live <= 7, "{z:?}");
}

#[test]
fn training_is_sized_to_a_small_memory_limit() {
    let small = Config { memory_limit: 8 << 20, compression: Some(Default::default()), ..Config::default() };
    let (s, _w) = store_of(small);
    let z = s.config().compression.clone().unwrap_or_else(|| panic!("compression is on"));
    assert_eq!((z.train_bytes, z.dict_size), (512 << 10, 64 << 10));
    // At the default -m and above, the settings stand.
    let (s, _w) = store_of(Config { compression: Some(Default::default()), ..Config::default() });
    let z = s.config().compression.clone().unwrap_or_else(|| panic!("compression is on"));
    assert_eq!((z.train_bytes, z.dict_size), (4 << 20, 256 << 10));
}
