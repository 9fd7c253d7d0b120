//! The store under memory pressure: with eviction allowed, a write whose
//! item fits `-I` is never refused for memory, at any `-m` that `-I` allows
//! (`-I` ≤ `-m`/2), whatever was read, pinned or held, in any TTL class
//! (`evict/`, "The last resort"); and eviction's copying forward stays
//! bounded on a write-once fill.

use crate::testing::Now;
use crate::testing::{proptest_config, scaled};
use crate::*;
use proptest::prelude::*;
use std::sync::Arc;

/// The largest segment the server makes (1 MiB unless `-I` is larger),
/// smaller under Miri.
fn segment() -> usize {
    scaled(1 << 20, 16 << 10)
}

/// A store as `strata -m <mem> -I <item_max>` makes it.
fn store(mem: usize, item_max: usize, evictions: bool) -> (Arc<Store>, Worker) {
    crate::tests::store_of(Config {
        memory_limit: mem,
        item_size_max: item_max,
        // The server's rule (`Store::new`): under a small `-m` segments
        // shrink so that two fit (an explicit size under Miri refused the
        // smallest `-m` of a case, `-I` 4 KiB with 16 KiB segments).
        segment_size: 0,
        unlocked_read_min: item_max / 8,
        evictions,
        ..Config::default()
    })
}

/// `n` segments of 64 KiB, items up to 16 KiB, an index that does not
/// need to grow; the segment size too.
fn segments_of_64k(n: usize) -> (Arc<Store>, Worker, usize) {
    let seg = 64 << 10;
    let (s, w) = crate::tests::store_of(Config {
        memory_limit: n * seg,
        segment_size: seg,
        item_size_max: 16 << 10,
        hash_power: 10,
        ..Config::default()
    });
    (s, w, seg)
}

#[derive(Debug, Clone)]
enum Op {
    /// Key, value size as a share of the largest (per mille), TTL class.
    Set(u8, u16, u8),
    Get(u8),
    /// Holds a large-value read (a pinned segment) until the next `Pin` or `Unpin`.
    Pin(u8),
    Unpin,
    /// A snapshot's cut begins (0) or ends (1), or the snapshot takes the
    /// segments handed off to it (2): meanwhile segments in the cut are
    /// handed off before they are reused.
    Snapshot(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u8>(), 0..=1000u16, 0..4u8).prop_map(|(k, v, c)| Op::Set(k, v, c)),
        4 => any::<u8>().prop_map(Op::Get),
        1 => any::<u8>().prop_map(Op::Pin),
        1 => Just(Op::Unpin),
        1 => (0..3u8).prop_map(Op::Snapshot),
    ]
}

/// TTLs that put items in four different TTL classes.
const TTLS: [u32; 4] = [0, 30, 200, 5000];

fn run(item_max: usize, mem: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let (s, mut w) = store(mem, item_max, true);
    // The largest value an item of `item_max` bytes holds (key and header).
    let largest = item_max - 64;
    let mut pinned: Option<Fetch> = None;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Set(k, share, class) => {
                let len = (largest * usize::from(share) / 1000).max(1);
                let value = vec![k; len];
                let exp = s.clock().expiry(i64::from(TTLS[usize::from(class)]));
                let got = w.set(SetOp::Set, format!("key{k}").as_bytes(), 0, exp, &value);
                prop_assert_eq!(
                    got,
                    Ok(StoreOutcome::Stored),
                    "op {}: set of {} bytes, -m {} -I {}",
                    i,
                    len,
                    mem,
                    item_max
                );
            }
            Op::Get(k) => {
                let _ = w.get(format!("key{k}").as_bytes(), |it| it.value.len());
            }
            Op::Pin(k) => {
                pinned = None;
                if let Ok(Found::Fetch(f)) = w.find_now(format!("key{k}").as_bytes(), &ReadOpts::GET, |_| ()) {
                    pinned = Some(f);
                }
            }
            Op::Unpin => pinned = None,
            Op::Snapshot(0) => {
                s.begin_cut();
            }
            Op::Snapshot(1) => s.end_cut(),
            Op::Snapshot(_) => while s.take_handoff().is_some() {},
        }
    }
    drop(pinned);
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(48, 3))]
    #[test]
    fn with_eviction_no_write_that_fits_is_refused_for_memory(
        item_div in 0..3u32,
        extra in 0..6usize,
        ops in proptest::collection::vec(op(), 1..scaled(300, 40)),
    ) {
        let item_max = segment() >> item_div;
        // From the least `-I` allows (twice the item size) up.
        let mem = 2 * item_max + extra * segment() / 2;
        run(item_max, mem, &ops)?;
    }
}

/// The reproduction in issue 31: at `-m 48`, five 400 KB sets then a
/// hundred 573 KB sets, each read back at once.
#[test]
fn large_values_read_back_after_each_set_are_all_stored() {
    let seg = segment();
    let (s, mut w) = store(48 * seg, seg, true);
    let sizes = std::iter::repeat_n(seg * 400 / 1024, 5).chain(std::iter::repeat_n(seg * 573 / 1024, scaled(100, 20)));
    for (i, len) in sizes.enumerate() {
        let key = format!("k{i}");
        assert_eq!(w.set(SetOp::Set, key.as_bytes(), 0, 0, &vec![b'v'; len]), Ok(StoreOutcome::Stored), "set {i}");
        assert_eq!(w.get(key.as_bytes(), |it| it.value.len()), Some(len));
    }
    let st = s.stats();
    let wa = (st.bytes_stored + st.bytes_copied) as f64 / st.bytes_stored as f64;
    assert!(wa <= 1.2, "write amplification {wa:.2} on a write-once fill: {st:?}");
}

/// At `-m 3`, 65 KB values read back after each set: memcached stores
/// every one, evicting.
#[test]
fn a_tiny_store_keeps_taking_values_it_must_evict_for() {
    let seg = segment();
    let (s, mut w) = store(3 * seg, seg, true);
    for i in 0..scaled(100, 30) {
        let key = format!("k{i}");
        assert_eq!(w.set(SetOp::Set, key.as_bytes(), 0, 0, &vec![b'v'; seg / 16]), Ok(StoreOutcome::Stored), "set {i}");
        assert!(w.get(key.as_bytes(), |_| ()).is_some());
    }
    let st = s.stats();
    assert!(st.bytes_copied * 5 <= st.bytes_stored + st.bytes_stored / 20, "eviction copied a fifth or less: {st:?}");
}

/// A worker that wrote into several TTL classes holds a half-filled
/// segment for each; another worker that needs one gets it once the first
/// seals (between its requests, as the server's workers do when woken).
#[test]
fn an_idle_workers_segments_are_sealed_for_a_starved_writer() {
    let seg = segment();
    let (s, mut a) = store(4 * seg, seg / 2, true);
    let mut idle = s.worker();
    for (i, ttl) in TTLS.iter().enumerate() {
        let exp = s.clock().expiry(i64::from(*ttl));
        assert_eq!(idle.set(SetOp::Set, format!("idle{i}").as_bytes(), 0, exp, b"v"), Ok(StoreOutcome::Stored));
    }
    let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let woken = woken.clone();
        s.on_starved(Box::new(move || woken.store(true, std::sync::atomic::Ordering::Relaxed)));
    }
    let idler = {
        let (woken, stop) = (woken.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if woken.swap(false, std::sync::atomic::Ordering::Relaxed) {
                    idle.seal_if_starved();
                }
                std::thread::yield_now();
            }
        })
    };
    for i in 0..scaled(40, 12) {
        let got = a.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &vec![b'v'; seg / 3]);
        assert_eq!(got, Ok(StoreOutcome::Stored), "set {i}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(idler.join().is_ok());
    assert!(s.stats().alloc_last_resort > 0, "the test reached the case it is about");
}

/// With `-M` the last resort is not taken: a full store refuses.
#[test]
fn without_eviction_a_full_store_still_refuses() {
    let seg = segment();
    let (_s, mut w) = store(3 * seg, seg / 4, false);
    let refused = (0..scaled(40, 12))
        .map(|i| w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &vec![b'v'; seg / 5]))
        .any(|r| r == Err(StoreError::OutOfMemory));
    assert!(refused);
}

/// With the background reclaimer running, writers find segments free: a
/// fill several times memory is reclaimed almost wholly on its thread,
/// and what is read stays as it does without it.
#[test]
#[cfg_attr(miri, ignore = "runs a thread that waits on a clock: too slow under Miri")]
fn the_background_reclaimer_frees_segments_ahead_of_the_writer() {
    let (s, mut w, seg) = segments_of_64k(32);
    let reclaimer = s.reclaimer();
    let thread = std::thread::spawn(move || reclaimer.run(std::time::Duration::from_millis(1)));
    let value = vec![b'v'; 1000];
    let n = 8 * 32 * seg / 1000;
    for i in 0..n {
        assert_eq!(w.set(SetOp::Set, format!("k{i}").as_bytes(), 0, 0, &value), Ok(StoreOutcome::Stored));
        if i % 32 == 0 {
            // Writes arrive at a pace (a request at a time off the
            // network), not in a loop: the reclaimer gets its turn.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        if i % 10 == 0 {
            assert!(w.get(b"k0", |_| ()).is_some(), "a key read all along is kept");
        }
    }
    s.stop_reclaimer();
    assert!(thread.join().is_ok());
    let st = s.stats();
    assert!(st.evictions > 0, "{st:?}");
    assert!(st.reclaim_background > 0, "{st:?}");
    // Of the allocations after memory filled (about 7 × 32), the writer
    // made few itself.
    assert!(st.reclaim_inline * 4 < st.reclaim_background, "{st:?}");
}

/// Beside the reclaimer, a writer cleans early itself (a mostly dead
/// segment, while memory is not tight) only under a budget of 48 segments
/// or more; under a smaller one that stays the reclaimer's, and the
/// writer opens no copy target (each would be a segment held open in part:
/// `Store::writers_clean_early`). The reclaimer's thread is not run, so
/// whatever is cleaned here is the writer's.
#[test]
#[cfg_attr(miri, ignore = "writes a few megabytes: too slow under Miri")]
fn a_writer_cleans_early_only_under_a_large_budget() {
    for (segments, cleans) in [(40, false), (64, true)] {
        let (s, mut w, _) = segments_of_64k(segments);
        let _reclaimer = s.reclaimer();
        assert_eq!(s.writers_clean_early(), cleans, "{} segments", s.segment_budget());
        // Eight keys overwritten over and over and a new one every sixth
        // write: sealed segments end about a sixth live, worth cleaning
        // early; their live items need a copy target. About 25 segments
        // written, never more than the budget: nothing is tight. A hot key's
        // next value is another length, so no overwrite goes in place
        // (`overwrite.rs`) and the old versions die.
        for i in 0..400 {
            let key = if i % 6 == 0 { format!("cold{i}") } else { format!("hot{}", i % 8) };
            let value = vec![b'v'; 4000 + i % 5];
            assert_eq!(w.set(SetOp::Set, key.as_bytes(), 0, 0, &value), Ok(StoreOutcome::Stored));
        }
        let cleaned = w.active.counters.segments_cleaned.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(cleaned > 0, cleans, "{segments} segments: the writer cleaned {cleaned}");
        if !cleans {
            let held: Vec<u32> = w.active.copies.held().collect();
            assert_eq!(held, Vec::<u32>::new(), "no copy target held open, nor a spare");
        }
        assert!(w.get(b"cold0", |_| ()).is_some() && w.get(b"hot7", |_| ()).is_some());
        assert_eq!(s.stats().evictions, 0);
    }
}

/// An overwrite is an access (a set bumps an item in memcached's LRU): a
/// key written twice and never read outlives the small queue, where one
/// written once goes as a one-hit wonder; and neither counts as read.
#[test]
#[cfg_attr(miri, ignore = "writes memory several times over: too slow under Miri")]
fn an_overwritten_key_outlives_the_small_queue_unread() {
    let (s, mut w, seg) = segments_of_64k(16);
    let value = vec![b'v'; 900];
    for k in [&b"once"[..], b"twice", b"twice"] {
        assert_eq!(w.set(SetOp::Set, k, 0, 0, &value), Ok(StoreOutcome::Stored));
    }
    let read = w.find_now(b"twice", &ReadOpts { bump: false, ..ReadOpts::GET }, |it| it.fetched);
    assert!(matches!(read, Ok(Found::Read(false))), "an overwrite is not a read: {read:?}");
    for i in 0..3 * 16 * seg / 1000 {
        assert_eq!(w.set(SetOp::Set, format!("cold{i}").as_bytes(), 0, 0, &value), Ok(StoreOutcome::Stored));
    }
    assert!(s.stats().evictions > 0);
    assert!(w.get(b"once", |_| ()).is_none(), "written once, never read: gone with the small queue");
    assert!(w.get(b"twice", |_| ()).is_some(), "overwritten: kept");
}

/// Writers of large items beside the running reclaimer, each clearing its
/// victims itself where they are cheap (`Store::reclaim_cheap`), the other
/// writer and the reclaimer at work at the same time: every read of a key
/// returns the last value its writer stored or nothing (evicted), never an
/// older one nor another key's, under a small budget (the reclaimer frees
/// what is asked) and a large one (it keeps two ahead). Each writer owns
/// its keys, so the last value stored is known; some are read, so that
/// eviction copies them forward.
#[test]
#[cfg_attr(miri, ignore = "two writers and the reclaimer for megabytes: too slow under Miri")]
fn writers_clearing_cheap_victims_beside_the_reclaimer_keep_the_last_value() {
    for segments in [16, 64] {
        let (s, first, _) = segments_of_64k(segments);
        let reclaimer = s.reclaimer();
        let thread = std::thread::spawn(move || reclaimer.run(std::time::Duration::from_millis(1)));
        let writers = [first, s.worker()].into_iter().enumerate().map(|(t, mut w)| {
            std::thread::spawn(move || {
                // Twice what fits, between the two writers.
                let keys = segments * 5;
                let mut last = vec![0u32; keys];
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                let (mut hits, mut misses) = (0, 0);
                for n in 1..=scaled(3000, 30) as u32 {
                    crate::testing::xorshift(&mut rng);
                    let k = (rng >> 16) as usize % keys;
                    let key = format!("w{t}k{k}");
                    // 10-13 KB: five or six to a segment, the versions'
                    // lengths differ so none is written in place.
                    let len = 10_000 + (n as usize * 7) % 3000;
                    let mut v = vec![b'.'; len];
                    let head = format!("{key}:{n}:");
                    v[..head.len()].copy_from_slice(head.as_bytes());
                    assert_eq!(w.set(SetOp::Set, key.as_bytes(), 0, 0, &v), Ok(StoreOutcome::Stored));
                    last[k] = n;
                    let r = (rng >> 40) as usize % keys;
                    let rkey = format!("w{t}k{r}");
                    match w.get(rkey.as_bytes(), |it| it.value.to_vec()) {
                        Some(got) => {
                            let want = format!("{rkey}:{}:", last[r]);
                            assert!(
                                got.starts_with(want.as_bytes()),
                                "{rkey}: {:?}",
                                &got[..want.len().min(got.len())]
                            );
                            hits += 1;
                        }
                        None => misses += 1,
                    }
                }
                (hits, misses)
            })
        });
        let counts: Vec<_> = writers.collect::<Vec<_>>().into_iter().map(|h| h.join()).collect();
        s.stop_reclaimer();
        assert!(thread.join().is_ok());
        let st = s.stats();
        for c in counts {
            let (hits, misses) = c.expect("a writer failed its check");
            // About a quarter to a half of the reads hit (checked), the rest miss.
            assert!(hits >= 100 && misses > 0, "{segments} segments: {hits} hits, {misses} misses");
        }
        assert!(st.reclaim_cheap > 0 && st.evictions > 0, "{segments} segments: {st:?}");
    }
}
