//! Overwrites written in place (`overwrite.rs`): when they go there and
//! when not, their CAS, their write time, what eviction does with them,
//! a snapshot's cut, and readers racing them.

use std::sync::Arc;

use crate::cut_tests::drain_images;
use crate::testing::{scaled, Now};
use crate::tests::{cas, get, set, store, store_of};
use crate::write::{Plan, Rewritten, Step};
use crate::*;

fn in_place(s: &Store) -> u64 {
    s.stats().overwritten_in_place
}

fn value(gen: u8, len: usize) -> Vec<u8> {
    vec![b'a' + gen; len]
}

/// Sixteen segments of `seg` bytes, items up to `item_max`, a small index.
fn segments(seg: usize, item_max: usize) -> (Arc<Store>, Worker) {
    let cfg = Config {
        memory_limit: 16 * seg,
        segment_size: seg,
        item_size_max: item_max,
        hash_power: 8,
        ..Config::default()
    };
    store_of(cfg)
}

#[test]
fn the_second_overwrite_of_the_same_length_goes_in_place_and_leaves_nothing_dead() {
    let (s, mut w) = store(4 << 20, true);
    assert_eq!(set(&mut w, SetOp::Set, b"k", &value(0, 1000)), StoreOutcome::Stored);
    // The first overwrite lays its new version out for the next.
    assert_eq!(set(&mut w, SetOp::Set, b"k", &value(1, 1000)), StoreOutcome::Stored);
    assert_eq!(in_place(&s), 0);
    let dead = s.stats().dead_bytes;
    let items = s.stats().total_items;
    for gen in 2..10 {
        assert_eq!(set(&mut w, SetOp::Set, b"k", &value(gen, 1000)), StoreOutcome::Stored);
        assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(value(gen, 1000)));
    }
    assert_eq!(in_place(&s), 8);
    assert_eq!(s.stats().dead_bytes, dead, "an overwrite in place leaves no dead version");
    assert_eq!(s.stats().total_items, items + 8, "each counts as a store");
    assert_eq!(s.stats().curr_items, 1);
}

#[test]
fn each_overwrite_in_place_has_a_cas_of_its_own() {
    let (s, mut w) = store(4 << 20, true);
    let mut seen = std::collections::HashSet::new();
    let mut last = 0;
    // Another worker opens segments meanwhile: newer epochs than the
    // first worker's own, which its next CAS must still be above.
    let mut other = s.worker();
    for gen in 0..6 {
        assert_eq!(set(&mut w, SetOp::Set, b"k", &value(gen, 100)), StoreOutcome::Stored);
        let (_, _, c) = get(&mut w, b"k").unwrap_or_else(|| panic!("set"));
        assert!(seen.insert(c), "CAS {c} handed out twice");
        assert!(c > last, "CAS {c} after {last}");
        last = c;
        set(&mut other, SetOp::Set, format!("o{gen}").as_bytes(), &value(gen, 100));
        assert_eq!(set(&mut other, SetOp::Set, b"k", &value(gen, 100)), StoreOutcome::Stored);
        let (_, _, c) = get(&mut w, b"k").unwrap_or_else(|| panic!("set"));
        assert!(c > last, "CAS {c} after {last}");
        last = c;
    }
    assert!(in_place(&s) >= 4, "{}", in_place(&s));
    // A client holding an older unique loses; the current one wins, in
    // place, and the item gets another.
    let older = *seen.iter().find(|&&c| c != last).unwrap_or(&0);
    assert_eq!(cas(&mut w, older, b"k", &value(9, 100)), StoreOutcome::Exists);
    let before = in_place(&s);
    assert_eq!(cas(&mut w, last, b"k", &value(8, 100)), StoreOutcome::Stored);
    assert_eq!(in_place(&s), before + 1);
    let (v, _, c) = get(&mut w, b"k").unwrap_or_else(|| panic!("stored"));
    assert_eq!(v, value(8, 100));
    assert!(!seen.contains(&c));
    assert_eq!(cas(&mut w, last, b"k", &value(7, 100)), StoreOutcome::Exists);
}

#[test]
fn an_overwrite_of_another_length_or_layout_writes_a_new_version() {
    let (s, mut w) = store(4 << 20, true);
    for gen in 0..3 {
        set(&mut w, SetOp::Set, b"k", &value(gen, 100));
    }
    assert_eq!(in_place(&s), 1);
    // Longer, then flags where there were none, then an expiry.
    set(&mut w, SetOp::Set, b"k", &value(3, 101));
    assert_eq!(w.set(SetOp::Set, b"k", 7, 0, &value(4, 101)), Ok(StoreOutcome::Stored));
    let exp = s.clock().expiry(100);
    assert_eq!(w.set(SetOp::Set, b"k", 7, exp, &value(5, 101)), Ok(StoreOutcome::Stored));
    assert_eq!(in_place(&s), 1);
    assert_eq!(get(&mut w, b"k").map(|g| (g.0, g.1)), Some((value(5, 101), 7)));
    // The same layout again goes in place, flags and expiry rewritten.
    let exp = s.clock().expiry(50);
    assert_eq!(w.set(SetOp::Set, b"k", 9, exp, &value(6, 101)), Ok(StoreOutcome::Stored));
    assert_eq!(in_place(&s), 2);
    assert_eq!(get(&mut w, b"k").map(|g| (g.0, g.1)), Some((value(6, 101), 9)));
    let ttl = w.inspect(b"k").map(|i| i.expiry);
    assert_eq!(ttl, Some(exp));
    // add refuses, replace goes in place.
    assert_eq!(set(&mut w, SetOp::Add, b"k", &value(7, 101)), StoreOutcome::NotStored);
    assert_eq!(w.set(SetOp::Replace, b"k", 9, exp, &value(8, 101)), Ok(StoreOutcome::Stored));
    assert_eq!(in_place(&s), 3);
    assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(value(8, 101)));
}

#[test]
#[cfg(not(miri))] // compression is not built under Miri
fn nothing_goes_in_place_with_compression_or_for_values_read_without_the_lock() {
    let z = Config { memory_limit: 4 << 20, compression: Some(crate::compress_tests::zconfig()), ..Config::default() };
    let big = Config { memory_limit: 4 << 20, unlocked_read_min: 512, ..Config::default() };
    for cfg in [z, big] {
        let (s, mut w) = store_of(cfg);
        for gen in 0..5 {
            set(&mut w, SetOp::Set, b"k", &value(gen, 600));
        }
        assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(value(4, 600)));
        assert_eq!(in_place(&s), 0);
    }
}

#[test]
fn nothing_goes_in_place_with_cas_off() {
    // Without CAS a write in place would leave nothing a read-modify-write
    // could tell from the item it planned from (`overwrite.rs`, "CAS").
    let (s, mut w) = store_of(Config { memory_limit: 4 << 20, cas: false, ..Config::default() });
    for gen in 0..5 {
        set(&mut w, SetOp::Set, b"k", &value(gen, 600));
    }
    assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(value(4, 600)));
    assert_eq!(in_place(&s), 0);
}

/// A counter's increment as `incr` plans and fills it, run through
/// `Worker::rewrite_prepared` with `meanwhile` done by another worker
/// between the plan and the commit, the first time only.
fn increment_with(w: &mut Worker, key: &[u8], mut meanwhile: impl FnMut()) -> u64 {
    let mut first = true;
    let r = w.rewrite_prepared(
        key,
        |it, _| {
            let n: u64 = std::str::from_utf8(it.value()).unwrap().parse().unwrap();
            Step::<u64, ()>::Write(Plan { fields: it.fields(), vlen: it.value().len(), keep: false }, n + 1)
        },
        |_, _, _| {
            if std::mem::take(&mut first) {
                meanwhile();
            }
            None
        },
        |_, n, dst| dst.copy_from_slice(format!("{n:0width$}", width = dst.len()).as_bytes()),
    );
    match r {
        Ok(Rewritten::Written(n, _)) => n,
        _ => panic!("not written"),
    }
}

#[test]
fn a_read_modify_write_planned_before_a_write_in_place_plans_again() {
    let (s, mut w) = store(4 << 20, true);
    let mut other = s.worker();
    for v in [b"10000000", b"20000000"] {
        assert_eq!(set(&mut w, SetOp::Set, b"k", v), StoreOutcome::Stored);
    }
    let before = in_place(&s);
    // Planned from 20000000; the set goes in place before the commit,
    // which must count from it, not undo it.
    let n = increment_with(&mut w, b"k", || {
        assert_eq!(set(&mut other, SetOp::Set, b"k", b"70000000"), StoreOutcome::Stored);
    });
    assert_eq!(in_place(&s), before + 1, "the set went in place");
    assert_eq!(n, 70000001);
    assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(b"70000001".to_vec()));
}

#[test]
fn a_read_modify_write_planned_before_a_touch_keeps_the_touch() {
    let (s, mut w) = store(4 << 20, true);
    let mut other = s.worker();
    assert_eq!(w.set(SetOp::Set, b"k", 0, 100, b"10").unwrap(), StoreOutcome::Stored);
    // The item has an expiry field: the touch writes into it in place.
    increment_with(&mut w, b"k", || assert!(other.touch(b"k", 5000).unwrap()));
    assert_eq!(w.inspect(b"k").map(|i| i.expiry), Some(5000));
    assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(b"11".to_vec()));
}

#[test]
fn an_item_overwritten_in_place_reads_as_written_then() {
    let (s, mut w) = store(4 << 20, true);
    set(&mut w, SetOp::Set, b"k", &value(0, 100));
    set(&mut w, SetOp::Set, b"k", &value(1, 100));
    set(&mut w, SetOp::Set, b"other", &value(1, 100));
    s.clock().advance(100);
    set(&mut w, SetOp::Set, b"k", &value(2, 100));
    assert_eq!(in_place(&s), 1);
    s.clock().advance(5);
    let opts = ReadOpts { written: true, ..ReadOpts::GET };
    let now = s.clock().now();
    assert_eq!(w.read(b"k", &opts, |it| now - it.written), Ok(Some(5)));
    assert_eq!(w.read(b"other", &opts, |it| now - it.written), Ok(Some(105)));
}

/// An item written over in place stands for the new version it replaced:
/// eviction keeps it once, free of the copy credit, where a plain
/// overwrite that nobody read goes once the credit is spent.
#[test]
#[cfg_attr(miri, ignore = "thousands of writes; the policy has no unsafe code of its own")]
fn eviction_keeps_an_item_overwritten_in_place_once() {
    let (s, mut w) = segments(64 << 10, 16 << 10);
    for gen in 0..3 {
        set(&mut w, SetOp::Set, b"hot", &value(gen, 1000));
    }
    set(&mut w, SetOp::Set, b"twice", &value(0, 1000));
    set(&mut w, SetOp::Set, b"twice", &value(1, 1000));
    assert_eq!(in_place(&s), 1);
    // Twice what fits, never read, with no credit for copies.
    for i in 0..2000 {
        w.active.copies.take_credit();
        set(&mut w, SetOp::Set, format!("cold{i}").as_bytes(), &value(0, 1000));
    }
    let st = s.stats();
    assert!(st.evictions > 1000, "{st:?}");
    assert_eq!(get(&mut w, b"hot").map(|g| g.0), Some(value(2, 1000)), "the item written in place was evicted");
    assert!(get(&mut w, b"twice").is_none(), "a plain overwrite was kept without credit");
}

#[test]
fn an_overwrite_after_a_cut_leaves_the_cut_as_it_was() {
    let (s, mut w) = segments(16 << 10, 4 << 10);
    set(&mut w, SetOp::Set, b"k", &value(0, 300));
    set(&mut w, SetOp::Set, b"k", &value(1, 300));
    s.begin_cut();
    // Its version is in the cut: not written over, a new one instead.
    set(&mut w, SetOp::Set, b"k", &value(2, 300));
    assert_eq!(in_place(&s), 0);
    // That one is not in the cut: the next goes over it.
    set(&mut w, SetOp::Set, b"k", &value(3, 300));
    assert_eq!(in_place(&s), 1);
    w.seal_active();
    let mut saved = Vec::new();
    drain_images(&s, |img| {
        crate::cut_tests::each_item(img, |it| {
            if it.key() == b"k" {
                saved.push(it.value().to_vec());
            }
        })
    });
    s.end_cut();
    assert_eq!(saved, vec![value(1, 300)], "the cut holds the version live at it");
    assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(value(3, 300)));
}

/// Readers on another worker never see a value half written over.
#[test]
fn readers_see_each_value_whole_while_it_is_written_over() {
    let (s, mut w) = store(4 << 20, true);
    let len = 512;
    set(&mut w, SetOp::Set, b"k", &value(0, len));
    set(&mut w, SetOp::Set, b"k", &value(1, len));
    let rounds = scaled(2000, 20);
    let store2 = Arc::clone(&s);
    std::thread::scope(|t| {
        t.spawn(move || {
            let mut r = store2.worker();
            for _ in 0..rounds {
                let (v, _, _) = get(&mut r, b"k").unwrap_or_else(|| panic!("the key is always there"));
                assert!(v.len() == len && v.iter().all(|&b| b == v[0]), "a torn value: {:?}", &v[..8]);
            }
        });
        for i in 0..rounds {
            set(&mut w, SetOp::Set, b"k", &value((i % 20) as u8, len));
        }
    });
    assert!(in_place(&s) >= rounds as u64, "{}", in_place(&s));
}

#[test]
fn writes_after_a_client_cas_beyond_the_epochs_are_stored() {
    // `ms E`: a CAS no epoch reaches. Overwrites of the same length and of
    // others, counters and appends after it are stored (each retry drew a
    // new CAS that could not be above it, until the write gave up).
    let (_s, mut w) = store(4 << 20, true);
    let huge = Write { new_cas: Some(u64::MAX / 2), ..Write::new(SetOp::Set, b"k", 0, 0, b"aaaaa") };
    assert_eq!(w.set_now(&huge).map(|s| s.outcome), Ok(StoreOutcome::Stored));
    for v in [&b"bbbbb"[..], b"ccccc", b"dddddd", b"eeeeee"] {
        assert_eq!(set(&mut w, SetOp::Set, b"k", v), StoreOutcome::Stored);
    }
    assert_eq!(set(&mut w, SetOp::Append, b"k", b"+"), StoreOutcome::Stored);
    let n = Write { new_cas: Some(u64::MAX / 2), ..Write::new(SetOp::Set, b"n", 0, 0, b"10") };
    assert_eq!(w.set_now(&n).map(|s| s.outcome), Ok(StoreOutcome::Stored));
    assert_eq!(w.arith(b"n", true, 1), Ok(ArithOutcome::Value(11)));
    assert_eq!(get(&mut w, b"k").map(|g| g.0), Some(b"eeeeee+".to_vec()));
}
