//! Large values received into their segment (`landing.rs`): what a landed
//! write stores, that nothing else takes or saves a landing segment, and
//! that every landing let go frees its segment. Sized for Miri.

use std::sync::Arc;

use crate::cut_tests::drain_images;
use crate::testing::Now;
use crate::tests::{get, store_of};
use crate::*;

const SEG: usize = 64 << 10;

fn store() -> (Arc<Store>, Worker) {
    store_of(Config {
        memory_limit: 16 * SEG,
        segment_size: SEG,
        item_size_max: SEG,
        hash_power: 8,
        ..Config::default()
    })
}

fn value(n: usize, fill: u8) -> Vec<u8> {
    (0..n).map(|i| fill.wrapping_add(i as u8)).collect()
}

/// Lands `v` as the value of `key`, filled as receives would.
fn land(w: &mut Worker, key: &[u8], v: &[u8]) -> Landing {
    let mut l = w.land(key, 7, 0, v.len()).expect("a segment to land in");
    l.value_mut().copy_from_slice(v);
    l
}

/// Runs `write` (a request whose value is the landing's) with `l` on
/// offer, as a connection does; returns what it did and what is left of
/// the landing.
fn run(
    w: &mut Worker,
    l: Landing,
    write: impl FnOnce(&mut Worker, &[u8]) -> StoreOutcome,
) -> (StoreOutcome, Option<Landing>) {
    // SAFETY: used by this request only, the landing dropped after it.
    let v = unsafe { l.value_detached() };
    w.offer_landing(Some(l));
    let out = write(w, v);
    (out, w.take_landing())
}

fn free(s: &Store) -> usize {
    s.budget().free_len()
}

#[test]
fn a_landed_set_is_stored_where_it_landed() {
    let (s, mut w) = store();
    let v = value(40_000, 1);
    let before = free(&s);
    let l = land(&mut w, b"big", &v);
    assert_eq!(free(&s), before - 1, "the landing took a segment");
    let (out, left) = run(&mut w, l, |w, v| w.set(SetOp::Set, b"big", 7, 0, v).unwrap());
    assert_eq!(out, StoreOutcome::Stored);
    assert!(left.is_none(), "adopted: the segment is the worker's");
    assert_eq!(get(&mut w, b"big").map(|(v, f, _)| (v, f)), Some((v.clone(), 7)));
    // The segment it landed in is the worker's open one: the next small
    // write goes there, no segment more.
    w.set(SetOp::Set, b"small", 0, 0, b"x").unwrap();
    assert_eq!(free(&s), before - 1);
    assert_eq!(s.stats().curr_items, 2);
}

#[test]
fn a_landing_not_stored_frees_its_segment() {
    let (s, mut w) = store();
    w.set(SetOp::Set, b"k", 0, 0, b"old").unwrap();
    let before = free(&s);
    let l = land(&mut w, b"k", &value(30_000, 2));
    let (out, left) = run(&mut w, l, |w, v| w.set(SetOp::Add, b"k", 7, 0, v).unwrap());
    assert_eq!(out, StoreOutcome::NotStored);
    drop(left.expect("given back"));
    assert_eq!(free(&s), before, "the segment is free again");
    assert_eq!(get(&mut w, b"k").map(|(v, ..)| v), Some(b"old".to_vec()));
    let l = land(&mut w, b"nope", &value(30_000, 3));
    let (out, left) = run(&mut w, l, |w, v| w.set(SetOp::Replace, b"nope", 7, 0, v).unwrap());
    assert_eq!(out, StoreOutcome::NotStored);
    drop(left);
    // A client that goes away before its value is in.
    drop(land(&mut w, b"gone", &value(30_000, 4)));
    assert_eq!(free(&s), before);
    assert_eq!(s.stats().curr_items, 1);
}

#[test]
fn a_landed_value_in_another_layout_is_copied_from_the_landing() {
    let (s, mut w) = store();
    let v = value(20_000, 5);
    let l = land(&mut w, b"k", &v);
    // `ms E`: a CAS of its own makes the header longer than landed.
    let (out, left) = run(&mut w, l, |w, v| {
        let write = Write { new_cas: Some(4242), ..Write::new(SetOp::Set, b"k", 7, 0, v) };
        w.set_now(&write).unwrap().outcome
    });
    assert_eq!(out, StoreOutcome::Stored);
    drop(left.expect("not adopted"));
    assert_eq!(get(&mut w, b"k"), Some((v, 7, 4242)));
    assert_eq!(s.stats().curr_items, 1);
}

#[test]
fn a_cut_neither_takes_nor_waits_for_a_landing() {
    let (s, mut w) = store();
    w.set(SetOp::Set, b"k", 0, 0, b"before the cut").unwrap();
    w.seal_active();
    let v = value(50_000, 6);
    let l = land(&mut w, b"k", &v);
    s.begin_cut();
    assert_eq!(s.cut_pending().unsealed, 0, "nothing to wait for");
    let (out, _) = run(&mut w, l, |w, v| w.set(SetOp::Set, b"k", 0, 0, v).unwrap());
    assert_eq!(out, StoreOutcome::Stored);
    w.seal_active();
    let mut saved = Vec::new();
    drain_images(&s, |img| crate::cut_tests::each_item(img, |it| saved.push((it.key().to_vec(), it.value().to_vec()))));
    s.end_cut();
    assert_eq!(saved, vec![(b"k".to_vec(), b"before the cut".to_vec())], "as at the cut");
    assert_eq!(get(&mut w, b"k").map(|(v, ..)| v), Some(v));
}

#[test]
fn a_landing_begun_before_a_cut_and_stored_before_it_is_saved() {
    let (s, mut w) = store();
    let v = value(50_000, 7);
    let l = land(&mut w, b"k", &v);
    let (out, _) = run(&mut w, l, |w, v| w.set(SetOp::Set, b"k", 0, 0, v).unwrap());
    assert_eq!(out, StoreOutcome::Stored);
    s.begin_cut();
    w.seal_active();
    let mut saved = Vec::new();
    drain_images(&s, |img| crate::cut_tests::each_item(img, |it| saved.push(it.value().to_vec())));
    s.end_cut();
    assert_eq!(saved, vec![v]);
}

#[test]
fn a_landed_set_after_flush_all_is_kept() {
    let (s, mut w) = store();
    let v = value(30_000, 8);
    let l = land(&mut w, b"k", &v);
    s.flush_all(None).unwrap();
    let (out, _) = run(&mut w, l, |w, v| w.set(SetOp::Set, b"k", 0, 0, v).unwrap());
    assert_eq!(out, StoreOutcome::Stored);
    assert_eq!(get(&mut w, b"k").map(|(v, ..)| v), Some(v), "written after the flush");
}

/// `cas k 7 0 <len> <unique>`.
fn compare(w: &mut Worker, unique: u64, v: &[u8]) -> StoreOutcome {
    let write = Write { compare: Some(unique), ..Write::new(SetOp::Set, b"k", 7, 0, v) };
    w.set_now(&write).unwrap().outcome
}

#[test]
fn a_landed_cas_compares_as_any_other() {
    let (_s, mut w) = store();
    w.set(SetOp::Set, b"k", 0, 0, b"old").unwrap();
    let cas = get(&mut w, b"k").unwrap().2;
    let l = land(&mut w, b"k", &value(30_000, 9));
    let (out, left) = run(&mut w, l, |w, v| compare(w, cas + 1, v));
    assert_eq!(out, StoreOutcome::Exists);
    drop(left);
    let v = value(30_000, 10);
    let l = land(&mut w, b"k", &v);
    let (out, left) = run(&mut w, l, |w, v| compare(w, cas, v));
    assert_eq!(out, StoreOutcome::Stored);
    assert!(left.is_none());
    let (got, _, new_cas) = get(&mut w, b"k").unwrap();
    assert_eq!(got, v);
    assert!(new_cas > cas, "{new_cas} after {cas}");
}

#[test]
fn no_landing_with_compression_or_past_the_item_limit() {
    let (_s, mut w) = store();
    assert!(w.land(b"k", 0, 0, SEG).is_none(), "over -I");
    let (_z, mut wz) = store_of(Config {
        memory_limit: 16 * SEG,
        segment_size: SEG,
        item_size_max: SEG,
        hash_power: 8,
        compression: Some(crate::compress_tests::zconfig()),
        ..Config::default()
    });
    assert!(wz.land(b"k", 0, 0, 30_000).is_none(), "compressed values are not stored as sent");
}
