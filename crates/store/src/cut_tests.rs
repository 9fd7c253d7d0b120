//! A snapshot's cut, through the store's API (`cut.rs`): what is copied is
//! as of the cut, whatever happens to the cut's segments before they are
//! copied — overwritten, deleted, cleaned, evicted, reused — and nothing
//! written after it. Sized for Miri.

use std::collections::HashMap;
use std::sync::Arc;

use crate::testing::scaled;
use crate::*;

const SEG: usize = 16 << 10;

fn store(segments: usize) -> (Arc<Store>, Worker) {
    crate::tests::store_of(Config {
        memory_limit: segments * SEG,
        segment_size: SEG,
        item_size_max: 4 << 10,
        hash_power: 8,
        ..Config::default()
    })
}

/// The live items of an image, key to value.
fn items_of(img: &SegmentImage) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut out = HashMap::new();
    for &off in &img.live {
        let b = &img.bytes[off as usize..];
        let n = crate::item::Header::lengths_len(b[1]);
        let h = crate::item::Header::parse_lengths(&b[..n]);
        let it = crate::item::Item::new(h, &b[..h.total_len()]);
        out.insert(it.key().to_vec(), it.value().to_vec());
    }
    out
}

/// Copies what the cut holds as a snapshot would: handed-off images and
/// the cut's sealed segments, until none is left; the keys and values.
fn drain(s: &Store) -> (HashMap<Vec<u8>, Vec<u8>>, usize) {
    let mut got = HashMap::new();
    let mut handed = 0;
    loop {
        while let Some(img) = s.take_handoff() {
            handed += 1;
            for (k, v) in items_of(&img) {
                assert!(got.insert(k, v).is_none(), "a key twice in one cut");
            }
            s.release_dicts(img.dicts);
        }
        let p = s.cut_pending();
        assert_eq!(p.unsealed, 0, "everything sealed");
        if p.sealed.is_empty() {
            return (got, handed);
        }
        let mut img = SegmentImage::default();
        for seg in p.sealed {
            if s.image(seg.segment, &mut img) {
                for (k, v) in items_of(&img) {
                    assert!(got.insert(k, v).is_none(), "a key twice in one cut");
                }
            }
        }
    }
}

fn v(i: usize, gen: u8) -> Vec<u8> {
    vec![b'a' + gen; 200 + i % 300]
}

#[test]
fn a_cut_holds_each_key_as_it_was_when_it_was_made() {
    let n = scaled(200, 60);
    let (s, mut w) = store(64);
    for i in 0..n {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 0)).unwrap();
    }
    w.delete(b"k0");
    s.begin_cut();
    // After the cut: overwrite a third, delete a third, add new keys.
    for i in (0..n).step_by(3) {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 1)).unwrap();
    }
    for i in (1..n).step_by(3) {
        w.delete(format!("k{i}").as_bytes());
    }
    for i in 0..20 {
        w.set(SetOp::Set, format!("new{i}").as_bytes(), 0, 0, b"after").unwrap();
    }
    w.seal_active();
    let (got, _) = drain(&s);
    s.end_cut();
    let want: HashMap<Vec<u8>, Vec<u8>> = (1..n).map(|i| (format!("k{i}").into_bytes(), v(i, 0))).collect();
    assert_eq!(got, want, "every key as at the cut, k0 deleted before it, nothing written after");
}

#[test]
fn segments_of_the_cut_freed_before_their_copy_are_handed_off() {
    // A store the writes fill: segments of the cut are evicted and
    // cleaned (overwrites leave them dead) before the snapshot copies
    // any of them, and reused.
    // Half of memory in the cut (the index takes a segment's worth).
    let (s, mut w) = store(12);
    let keys = 240;
    for i in 0..keys {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 0)).unwrap();
    }
    s.begin_cut();
    // Twice memory and more, so the cut's segments are reused (two
    // rounds do it already: under Miri, where each set costs, two).
    let rounds = scaled(8, 2);
    for g in 1..=rounds {
        for i in 0..keys {
            w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, g as u8)).unwrap();
        }
    }
    w.seal_active();
    let (got, handed) = drain(&s);
    assert!(handed > 0, "some segment of the cut was freed before its copy");
    assert_eq!(s.cut_failed(), None);
    s.end_cut();
    assert_eq!(s.stats().evictions, 0, "live data fits: overwrites are cleaned, not evicted");
    for i in 0..keys {
        let k = format!("k{i}").into_bytes();
        assert_eq!(got.get(&k), Some(&v(i, 0)), "k{i} as at the cut ({handed} handed off)");
    }
}

#[test]
fn a_write_that_raced_the_cut_moves_to_a_segment_after_it() {
    let (s, mut w) = store(16);
    w.set(SetOp::Set, b"a", 0, 0, b"before").unwrap();
    // The worker's active segment is in the cut: the next write there is
    // refused under the lock and made in a new segment.
    s.begin_cut();
    w.set(SetOp::Set, b"b", 0, 0, b"after").unwrap();
    w.set(SetOp::Append, b"a", 0, 0, b"+later").unwrap();
    w.seal_active();
    let (got, _) = drain(&s);
    s.end_cut();
    assert_eq!(got.get(&b"a"[..]), Some(&b"before".to_vec()));
    assert_eq!(got.get(&b"b"[..]), None, "written after the cut");
    assert_eq!(w.get(b"a", |it| it.value.to_vec()), Some(b"before+later".to_vec()));
}

#[test]
#[cfg_attr(miri, ignore = "waits on real time")]
fn a_cut_that_cannot_keep_up_fails_and_ends() {
    // Nobody drains the hand-off queue, from another thread than the
    // cut's: past its bound a freeing writer waits, then fails the cut,
    // and writes go on.
    let (s, mut w) = store(12);
    for i in 0..360 {
        w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, 0)).unwrap();
    }
    w.seal_active();
    s.begin_cut();
    let s2 = s.clone();
    std::thread::spawn(move || {
        let mut w = s2.worker();
        for g in 0..8 {
            for i in 0..360 {
                w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &v(i, g as u8)).unwrap();
            }
        }
    })
    .join()
    .unwrap();
    assert!(s.cut_failed().is_some(), "the hand-off queue outgrew its bound");
    assert!(!s.cut_active());
    s.end_cut();
}
