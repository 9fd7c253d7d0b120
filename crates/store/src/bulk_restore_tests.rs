//! A load's links made a chunk at a time in bucket order (`bulk_link.rs`)
//! come to what linking each item as its image is restored comes to: the
//! later of two versions of a key wins across chunk boundaries and while
//! the index's tables double, and every count (items, bytes, each
//! segment's live items, the size bands) is the same.

use crate::memory_tests::small_segments;
use crate::testing::scaled;
use crate::tests::*;
use crate::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Images of the segments sealed since `taken` (which it then holds too),
/// a segment known by its epoch too: the cleaner may have emptied one
/// and a writer filled it again.
fn images_since(s: &Store, taken: &mut Vec<(u32, u64)>) -> Vec<SegmentImage> {
    let mut out = Vec::new();
    for sealed in s.sealed_segments() {
        if !taken.contains(&(sealed.segment, sealed.epoch)) {
            let mut img = SegmentImage::default();
            assert!(s.image(sealed.segment, &mut img));
            taken.push((sealed.segment, sealed.epoch));
            out.push(img);
        }
    }
    out
}

/// Images in copying order, the latest value of each key, and the store
/// they were copied from.
type Versions = (Vec<SegmentImage>, HashMap<Vec<u8>, Vec<u8>>, Arc<Store>);

/// A store's images as a snapshot running under writers can hold them:
/// every key's first version in the first images, then a third of the
/// keys overwritten and a fifth of them again, in images copied after.
fn images_with_versions() -> Versions {
    let (s, mut w) = small_segments(16 << 10, 64, 1 << 20);
    let n = scaled(400, 32);
    let mut want = HashMap::new();
    let mut taken = Vec::new();
    let mut images = Vec::new();
    for (round, step) in [(0, 1), (1, 3), (2, 5)] {
        for i in (0..n).step_by(step) {
            // Each round's value a byte longer: one of the same length would
            // be written over the version an earlier image holds already
            // (`overwrite.rs`; a snapshot's cut freezes its segments instead).
            let (k, v) = (format!("k{i}"), format!("r{round}-v{i}-{}", ".".repeat(round)).repeat(1 + i % 7));
            assert_eq!(w.set(SetOp::Set, k.as_bytes(), 0, 0, v.as_bytes()), Ok(StoreOutcome::Stored));
            want.insert(k.into_bytes(), v.into_bytes());
        }
        w.seal_active();
        images.extend(images_since(&s, &mut taken));
    }
    drop(w);
    (images, want, s)
}

/// A fresh store the images go into, its index as small as the source's
/// (64 buckets: its tables double many times while the links are made).
fn target(src: &Store) -> Arc<Store> {
    let facts = src.store_image();
    let s2 = Store::new(src.config().clone(), src.clock().clone()).unwrap_or_else(|e| panic!("{e}"));
    s2.resume(facts.epoch, facts.flush_epoch, facts.flush_at);
    s2
}

/// What a restored store holds, for comparing two: items, bytes, live
/// items per segment, and items and bytes per size band.
fn counts(s: &Store) -> (u64, u64, Vec<u32>, Vec<(u64, u64)>) {
    let st = s.stats();
    let live = (0..s.segs().len()).map(|i| s.seg(i as u32).live_items.load(Relaxed)).collect();
    let bands = s.size_bands().iter().map(|b| (b.items, b.bytes)).collect();
    (st.curr_items, st.bytes, live, bands)
}

#[test]
fn the_later_version_of_a_key_wins_whatever_the_chunk() {
    let (images, want, src) = images_with_versions();
    let mut reference = None;
    // A chunk of 1 links each item as it is restored (the order the file
    // gives); the others cut the run of links in other places, or not at
    // all.
    // Fewer under Miri, where each store and restore is slow.
    let chunks: &[usize] = if cfg!(miri) { &[1, 3, 100_000] } else { &[1, 2, 3, 7, 64, 100_000] };
    for &chunk in chunks {
        let s2 = target(&src);
        let mut bulk = s2.bulk_restore_chunked(chunk);
        let mut items = 0;
        for img in &images {
            let r = bulk.restore_with(img, img.bytes.len(), &mut |dst| {
                dst.copy_from_slice(&img.bytes);
                true
            });
            let r = r.unwrap_or_else(|e| panic!("chunk {chunk}: {e}"));
            assert_eq!((r.dropped, r.malformed), (0, 0));
            items += r.items;
        }
        bulk.finish();
        drop(bulk);
        // Every version was restored; only the latest of each key is linked.
        assert!(items > want.len() as u64, "the images hold older versions too");
        let mut w = s2.worker();
        for (k, v) in &want {
            assert_eq!(get(&mut w, k).map(|g| g.0).as_ref(), Some(v), "chunk {chunk}: {}", String::from_utf8_lossy(k));
        }
        drop(w);
        let c = counts(&s2);
        assert_eq!(c.0, want.len() as u64, "chunk {chunk}");
        assert_eq!(c.2.iter().map(|&n| u64::from(n)).sum::<u64>(), want.len() as u64, "chunk {chunk}");
        assert_eq!(c.3.iter().map(|b| b.0).sum::<u64>(), want.len() as u64, "chunk {chunk}: the bands");
        assert_eq!(c.3.iter().map(|b| b.1).sum::<u64>(), c.1, "chunk {chunk}: the bands' bytes");
        match &reference {
            None => reference = Some(c),
            Some(r) => assert_eq!(&c, r, "chunk {chunk}: counts differ from linking item by item"),
        }
    }
}

#[test]
fn chunks_linked_on_another_thread_keep_their_order() {
    let (images, want, src) = images_with_versions();
    let chunks: &[usize] = if cfg!(miri) { &[1, 5] } else { &[1, 2, 3, 7, 64] };
    for &chunk in chunks {
        let s2 = target(&src);
        std::thread::scope(|scope| {
            let mut bulk = s2.bulk_restore_chunked(chunk);
            let chunks = bulk.link_elsewhere();
            let linker = scope.spawn(|| chunks.run(&s2));
            for img in &images {
                bulk.restore_with(img, img.bytes.len(), &mut |dst| {
                    dst.copy_from_slice(&img.bytes);
                    true
                })
                .unwrap_or_else(|e| panic!("chunk {chunk}: {e}"));
            }
            bulk.finish();
            assert!(linker.join().is_ok());
        });
        assert_eq!(s2.stats().curr_items, want.len() as u64, "chunk {chunk}");
        let mut w = s2.worker();
        for (k, v) in &want {
            assert_eq!(get(&mut w, k).map(|g| g.0).as_ref(), Some(v), "chunk {chunk}: {}", String::from_utf8_lossy(k));
        }
    }
}

#[test]
fn a_bulk_restore_dropped_unfinished_links_what_it_restored() {
    let (images, want, src) = images_with_versions();
    let s2 = target(&src);
    {
        let mut bulk = s2.bulk_restore_chunked(1 << 20);
        for img in &images {
            bulk.restore_with(img, img.bytes.len(), &mut |dst| {
                dst.copy_from_slice(&img.bytes);
                true
            })
            .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(s2.stats().curr_items, 0, "nothing linked before the flush");
    }
    assert_eq!(s2.stats().curr_items, want.len() as u64);
    let mut w = s2.worker();
    for (k, v) in &want {
        assert_eq!(get(&mut w, k).map(|g| g.0).as_ref(), Some(v));
    }
}
