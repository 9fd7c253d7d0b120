//! Where a worker writes (`active.rs`, `Active::reserve`): an item that
//! does not fit its TTL class's open segment goes where it fits best among
//! the worker's other open segments; a worker keeps at most
//! `Store::open_cap` open, and none is ever lost on the way (every
//! segment in use is open or on a queue); `strata_idle_bytes` counts the
//! room nothing was written to.

use crate::tests::{set, store_of};
use crate::{Config, SetOp, StoreOutcome};

const SEG: usize = 64 << 10;

fn store() -> (std::sync::Arc<crate::Store>, crate::Worker) {
    store_of(Config {
        memory_limit: 64 * SEG,
        segment_size: SEG,
        item_size_max: SEG,
        hash_power: 8,
        ..Config::default()
    })
}

/// Segments the worker has open now.
fn open(w: &crate::Worker) -> Vec<u32> {
    w.active.segs.iter().flatten().copied().collect()
}

#[test]
fn a_large_item_leaves_its_segment_open_for_smaller_ones() {
    let (s, mut w) = store();
    assert!(s.open_cap() >= 2, "one worker, 63 segments: {}", s.open_cap());
    assert_eq!(set(&mut w, SetOp::Set, b"a", &[b'a'; 40 << 10]), StoreOutcome::Stored);
    let first = open(&w);
    assert_eq!(first.len(), 1);
    let a = first[0];
    // Does not fit after "a": a second segment, and "a"'s stays open.
    assert_eq!(set(&mut w, SetOp::Set, b"b", &[b'b'; 56 << 10]), StoreOutcome::Stored);
    assert_eq!(open(&w).len(), 2);
    assert!(open(&w).contains(&a));
    // Too large for the class's segment (under 8 KiB left), not for "a"'s
    // (about 24 KiB): it goes there, not to a third segment.
    let room = s.room(a);
    assert_eq!(set(&mut w, SetOp::Set, b"c", &[b'c'; 12 << 10]), StoreOutcome::Stored);
    assert_eq!(open(&w).len(), 2);
    assert!(s.room(a) < room - (12 << 10), "{} of {room} left", s.room(a));
    // Idle: what no item took in the two open segments, and the free
    // segments within the budget.
    let written = (SEG - s.room(a)) + open(&w).iter().filter(|&&x| x != a).map(|&x| SEG - s.room(x)).sum::<usize>();
    let idle = s.idle();
    assert_eq!(idle.free + idle.open + idle.sealed, s.segment_budget() as usize * SEG - written);
    // Nothing is sealed yet: the room is in the two open segments and the
    // free ones.
    assert_eq!((idle.sealed, idle.open), (0, 2 * SEG - written));
    // Once "a"'s room is under an eighth of a segment it is sealed (held
    // open it could not be cleaned), but at the next write, once "d" is
    // linked: sealed, it could be taken as a victim.
    assert_eq!(set(&mut w, SetOp::Set, b"d", &[b'd'; 10 << 10]), StoreOutcome::Stored);
    assert!(open(&w).contains(&a) && !s.lock_evict().small.contains(&a));
    assert_eq!(set(&mut w, SetOp::Set, b"e", b"e"), StoreOutcome::Stored);
    assert!(!open(&w).contains(&a) && open(&w).len() == 1);
    assert!(s.lock_evict().small.contains(&a));
}

#[test]
fn open_segments_stay_under_the_cap_and_none_is_lost() {
    let (s, mut w) = store();
    let cap = s.open_cap();
    assert!(cap >= 2, "one worker, 63 segments: {cap}");
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let n = crate::testing::scaled(3000, 400) as u32;
    for i in 0..n {
        crate::testing::xorshift(&mut rng);
        let len = 100 + (rng % (48 << 10)) as usize;
        // Four TTL classes: none, a minute, an hour, a day.
        let ttl = [0, 60, 3600, 86_400][(rng >> 32) as usize % 4];
        let exp = if ttl == 0 { 0 } else { s.clock().expiry(ttl) };
        assert_eq!(w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, exp, &vec![b'v'; len]), Ok(StoreOutcome::Stored));
        assert!(open(&w).len() <= cap, "{} open, cap {cap}", open(&w).len());
        let queued = {
            let ev = s.lock_evict();
            ev.small.len() + ev.main.len()
        };
        let targets = w.active.copies.held().count();
        assert_eq!(
            s.budget().in_use() as usize,
            queued + open(&w).len() + targets,
            "a segment in use is neither open nor queued"
        );
    }
    // About six times what fits.
    assert!(s.stats().evictions > u64::from(n) / 2, "{:?}", s.stats());
}

/// Under a small budget a worker keeps one segment open, not two: all
/// workers' open segments together stay about a sixteenth of the budget
/// (two workers, sixteen segments: two open, where two each held a
/// quarter of `-m 16` half written). Items of every TTL class share it.
#[test]
fn under_a_small_budget_a_worker_keeps_one_segment_open() {
    let (s, mut a) = store_of(Config {
        memory_limit: 16 * SEG,
        segment_size: SEG,
        item_size_max: SEG,
        hash_power: 8,
        ..Config::default()
    });
    let mut b = s.worker();
    assert_eq!(s.open_cap(), 1, "two workers, sixteen segments");
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for i in 0..crate::testing::scaled(2000, 100) {
        for (n, w) in [&mut a, &mut b].into_iter().enumerate() {
            let r = crate::testing::xorshift(&mut rng);
            let len = 100 + (r % (40 << 10)) as usize;
            let ttl = [0, 60, 3600, 86_400][(r >> 32) as usize % 4];
            let exp = if ttl == 0 { 0 } else { s.clock().expiry(ttl) };
            let key = format!("w{n}k{i}");
            assert_eq!(w.set(SetOp::Set, key.as_bytes(), 0, exp, &vec![b'v'; len]), Ok(StoreOutcome::Stored));
            assert!(open(w).len() <= 1, "worker {n}: {:?} open", open(w));
        }
    }
    assert!(s.stats().evictions > 0, "the budget was filled: {:?}", s.stats());
}

/// A value that says whose it is: its key, repeated.
fn value_of(key: &[u8], len: usize) -> Vec<u8> {
    key.iter().copied().cycle().take(len).collect()
}

/// An item that fits another class's open segment and leaves it nearly
/// full is written there while that segment is still the worker's: it is
/// sealed only after the item is linked (at the worker's next write), never
/// between the reservation and the link. Sealed at once, the reclaimer or
/// another worker could take it as a victim, clear it and hand it out again
/// while the item was still being written into it: the item then landed
/// in someone else's segment and its index slot pointed at their bytes (a
/// dump listed keys made of value bytes, `curr_items` counted items no get
/// found). Two writers and the reclaimer, items up to most of a segment
/// in four TTL classes, a store of sixteen segments.
#[test]
#[cfg_attr(miri, ignore = "threads writing memory many times over: too slow under Miri")]
fn an_item_is_linked_before_its_segment_can_be_taken() {
    let (s, _) = store_of(Config {
        memory_limit: 16 * SEG,
        segment_size: SEG,
        item_size_max: SEG,
        hash_power: 8,
        ..Config::default()
    });
    let reclaimer = s.reclaimer();
    let thread = std::thread::spawn(move || reclaimer.run(std::time::Duration::from_millis(1)));
    let keys = 64u64;
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut w = s.worker();
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                let mut hits = 0;
                for _ in 0..crate::testing::scaled(20_000, 100) {
                    let r = crate::testing::xorshift(&mut rng);
                    let key = format!("key{}", r % keys).into_bytes();
                    if r >> 60 < 8 {
                        let len = 100 + (r >> 16) as usize % (48 << 10);
                        let ttl = [0, 60, 3600, 86_400][(r >> 8) as usize % 4];
                        let exp = if ttl == 0 { 0 } else { s.clock().expiry(ttl) };
                        assert_eq!(w.set(SetOp::Set, &key, 0, exp, &value_of(&key, len)), Ok(StoreOutcome::Stored));
                    } else if let Some(v) = w.get(&key, |it| it.value.to_vec()) {
                        assert_eq!(v, value_of(&key, v.len()), "the value of {}", String::from_utf8_lossy(&key));
                        hits += 1;
                    }
                }
                hits
            })
        })
        .collect();
    let hits: usize = writers.into_iter().map(|h| h.join().unwrap_or_else(|_| panic!("a writer panicked"))).sum();
    s.stop_reclaimer();
    assert!(thread.join().is_ok());
    let mut w = s.worker();
    let mut listed = Vec::new();
    for stripe in 0..w.stripes() {
        w.scan(stripe, |key, _| listed.push(key.to_vec()));
    }
    for key in &listed {
        let name = String::from_utf8_lossy(key);
        assert!(name.strip_prefix("key").is_some_and(|n| n.parse::<u64>().is_ok_and(|n| n < keys)), "listed: {name}");
        let v = w.get(key, |it| it.value.to_vec());
        assert!(v.as_ref().is_some_and(|v| *v == value_of(key, v.len())), "{name} reads back {v:?}");
    }
    let st = s.stats();
    assert_eq!(st.curr_items, listed.len() as u64, "{st:?}");
    // The test reached what it is about: memory full, evicting, read hits.
    assert!(st.evictions > 1000 && hits > 1000, "{hits} hits, {st:?}");
}
