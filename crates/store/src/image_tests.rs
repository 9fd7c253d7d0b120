//! Segment images: what a snapshot copies holds the live items as they are,
//! stays whole while writers evict, and restores with CAS, flags and times.

use crate::item::parse_counter;
use crate::memory_tests::small_segments;
use crate::testing::scaled;
use crate::testing::Now;
use crate::tests::*;
use crate::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Every live item an image lists, parsed out of its bytes: key ->
/// (value, flags, expiry, state).
fn image_items(img: &SegmentImage) -> HashMap<Vec<u8>, (Vec<u8>, u32, u32, u8)> {
    let mut out = HashMap::new();
    for &off in &img.live {
        let b = &img.bytes[off as usize..];
        let h = crate::item::Header::parse_lengths(&b[..crate::item::Header::lengths_len(b[1])]);
        let it = crate::item::Item::new(h, &b[..h.total_len()]);
        out.insert(it.key().to_vec(), (it.value().to_vec(), it.flags(), it.expiry(), it.state()));
    }
    out
}

#[test]
fn images_hold_the_live_items_as_they_are_now() {
    let (s, mut w) = small_segments(16 << 10, 64, 1 << 20);
    let c = s.clock().clone();
    let n = scaled(300, 60);
    for i in 0..n {
        let v = format!("value-{i}-").repeat(20);
        assert_eq!(
            w.set(SetOp::Set, format!("k{i}").as_bytes(), i as u32, c.expiry(1000), v.as_bytes()),
            Ok(StoreOutcome::Stored)
        );
    }
    for i in (0..n).step_by(3) {
        assert_eq!(w.set(SetOp::Set, format!("k{i}").as_bytes(), 1, c.expiry(1000), b"new"), Ok(StoreOutcome::Stored));
    }
    for i in (1..n).step_by(5) {
        w.delete(format!("k{i}").as_bytes());
    }
    for i in (2..n).step_by(4) {
        // In place: these have an expiry field (some were deleted above).
        let touched = w.touch(format!("k{i}").as_bytes(), c.expiry(2000));
        assert_eq!(touched, Ok((i - 1) % 5 != 0), "k{i}");
    }
    for i in (2..n).step_by(7) {
        w.delete_now(format!("k{i}").as_bytes(), &Delete { invalidate: true, ..Delete::default() }).ok();
    }
    drop(w);
    let mut w = s.worker();
    let mut seen = 0;
    let mut img = SegmentImage::default();
    for sealed in s.sealed_segments() {
        assert!(s.image(sealed.segment, &mut img));
        assert_eq!((img.segment, img.epoch), (sealed.segment, sealed.epoch));
        assert!(!img.write_times.is_empty());
        for (key, (value, flags, expiry, state)) in image_items(&img) {
            let now = w.read(&key, &ReadOpts { bump: false, ..ReadOpts::GET }, |it| {
                (it.value.to_vec(), it.flags, it.expiry, it.stale)
            });
            let want = (value, flags, expiry, state & crate::item::state::STALE != 0);
            assert_eq!(now, Ok(Some(want)), "{}", String::from_utf8_lossy(&key));
            seen += 1;
        }
    }
    let curr = s.stats().curr_items as usize;
    assert!(seen > curr * 3 / 4 && seen <= curr, "{seen} imaged of {curr} live");
    let store = s.store_image();
    assert_eq!((store.segment_size, store.flush_epoch), (16 << 10, 0));
    assert!(store.epoch >= s.sealed_segments().iter().map(|x| x.epoch).max().unwrap_or(0));
}

#[test]
fn images_stay_whole_while_writers_evict() {
    let (s, _) = small_segments(16 << 10, 8, 1 << 20);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut w = s.worker();
            for i in 0..scaled(20_000, 200) {
                let k = format!("k{}", i % 700);
                let v = k.repeat(1 + i % 40);
                let _ = w.set(SetOp::Set, k.as_bytes(), 0, 0, v.as_bytes());
                if i % 5 == 0 {
                    let _ = w.touch(k.as_bytes(), 0);
                }
            }
            stop.store(true, Relaxed);
        });
        let mut img = SegmentImage::default();
        let mut taken = 0;
        while !stop.load(Relaxed) || taken == 0 {
            for sealed in s.sealed_segments() {
                if !s.image(sealed.segment, &mut img) {
                    continue;
                }
                taken += 1;
                for (key, (value, ..)) in image_items(&img) {
                    let k = String::from_utf8_lossy(&key).into_owned();
                    assert!(!value.is_empty() && value.chunks(key.len()).all(|c| c == &key[..c.len()]), "{k}");
                }
            }
        }
        writer.join().unwrap_or_else(|_| panic!("writer panicked"));
    });
}

#[test]
fn restored_images_read_back_with_their_cas_flags_and_times() {
    let (s, mut w) = small_segments(16 << 10, 64, 1 << 20);
    let c = s.clock().clone();
    c.advance(40);
    let n = scaled(300, 40);
    let mut want = HashMap::new();
    for i in 0..n {
        let (k, v) = (format!("k{i}"), format!("v{i}-").repeat(1 + i % 30));
        let exp = if i % 4 == 0 { c.expiry(10) } else { c.expiry(1000) };
        assert_eq!(w.set(SetOp::Set, k.as_bytes(), i as u32, exp, v.as_bytes()), Ok(StoreOutcome::Stored));
    }
    for i in (0..n).step_by(5) {
        w.delete(format!("k{i}").as_bytes());
    }
    for i in 0..n {
        if let Some(g) = get(&mut w, format!("k{i}").as_bytes()) {
            want.insert(format!("k{i}").into_bytes(), g);
        }
    }
    drop(w);
    let mut images = Vec::new();
    for sealed in s.sealed_segments() {
        let mut img = SegmentImage::default();
        assert!(s.image(sealed.segment, &mut img));
        images.push(img);
    }
    let facts = s.store_image();
    // 20 s later, on the old timeline: the 10 s items are gone.
    let clock = Clock::resume_at(facts.unix_now + 20, c.process_started(), facts.now, false)
        .unwrap_or_else(|| panic!("timeline"));
    assert_eq!(clock.now(), facts.now + 20);
    let cfg = Config { hash_power: 6, ..s.config().clone() };
    let s2 = Store::new(cfg, Arc::new(clock)).unwrap();
    s2.resume(facts.epoch, facts.flush_epoch, facts.flush_at);
    let mut restored = Restored::default();
    for img in &images {
        let r = s2.restore(img).unwrap();
        restored.items += r.items;
        restored.dropped += r.dropped;
        assert_eq!(r.malformed, 0);
    }
    let mut w2 = s2.worker();
    let alive: HashMap<_, _> =
        want.iter().filter(|(k, _)| parse_counter(&k[1..]).is_some_and(|i| i % 4 != 0)).collect();
    assert_eq!(restored.items as usize, alive.len());
    assert_eq!(s2.stats().curr_items as usize, alive.len());
    for (k, v) in &want {
        let got = get(&mut w2, k);
        if alive.contains_key(k) {
            assert_eq!(got.as_ref(), Some(v), "{}", String::from_utf8_lossy(k));
        } else {
            assert_eq!(got, None, "{} expired during the downtime", String::from_utf8_lossy(k));
        }
    }
    assert_eq!(w2.set(SetOp::Set, b"new", 0, 0, b"x"), Ok(StoreOutcome::Stored));
    let fresh = get(&mut w2, b"new").map_or(0, |g| g.2);
    assert!(want.values().all(|v| v.2 < fresh), "new CAS values are above every restored one");
    // A live offset that points nowhere sensible is refused, not followed.
    let lasting = images.iter().find(|i| i.max_expire > facts.now + 100).unwrap_or_else(|| panic!("an image"));
    let mut bad = lasting.clone();
    bad.live = vec![bad.bytes.len() as u32, u32::MAX - 7];
    let r = s2.restore(&bad).unwrap();
    assert_eq!((r.items, r.malformed), (0, 2));
    let mut huge = images[0].clone();
    huge.bytes.resize(32 << 10, 0);
    assert_eq!(s2.restore(&huge), Err(RestoreError::TooLarge(32 << 10)));
}

// ---------------------------------------------------------------- the cleaner
