//! The store's operations one by one (get, set, cas, append, incr,
//! expiry, flush_all, eviction, limits, stale reads and tokens), and the
//! helpers the other test files share.

use crate::testing::scaled;
use crate::testing::Now;
use crate::*;
use std::sync::Arc;

pub(crate) fn store(mem: usize, evictions: bool) -> (Arc<Store>, Worker) {
    store_of(Config { memory_limit: mem, evictions, ..Config::default() })
}

pub(crate) fn store_of(cfg: Config) -> (Arc<Store>, Worker) {
    // Under Miri, 16 index stripes instead of 1024: building those is most
    // of a small test's time there.
    let hash_power = if cfg.hash_power == 0 { scaled(0, 4) as u32 } else { cfg.hash_power };
    let cfg = Config { hash_power, ..cfg };
    let s = Store::new(cfg, Arc::new(Clock::manual(1_700_000_000))).unwrap();
    let w = s.worker();
    (s, w)
}

pub(crate) fn get(w: &mut Worker, k: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    w.get(k, |it| (it.value.to_vec(), it.flags, it.cas))
}

/// The classic `cas` command: a set with a compare value.
pub(crate) fn cas(w: &mut Worker, unique: u64, k: &[u8], v: &[u8]) -> StoreOutcome {
    let write = Write { compare: Some(unique), ..Write::new(SetOp::Set, k, 0, 0, v) };
    w.set_now(&write).map(|s| s.outcome).unwrap()
}

pub(crate) fn set(w: &mut Worker, op: SetOp, k: &[u8], v: &[u8]) -> StoreOutcome {
    w.set(op, k, 0, 0, v).unwrap()
}

#[test]
fn set_get_replace_add_delete() {
    let (_s, mut w) = store(4 << 20, true);
    assert_eq!(set(&mut w, SetOp::Add, b"k", b"one"), StoreOutcome::Stored);
    assert_eq!(set(&mut w, SetOp::Add, b"k", b"two"), StoreOutcome::NotStored);
    assert_eq!(set(&mut w, SetOp::Replace, b"nope", b"x"), StoreOutcome::NotStored);
    assert_eq!(w.set(SetOp::Set, b"k", 42, 0, b"three"), Ok(StoreOutcome::Stored));
    assert_eq!(get(&mut w, b"k").map(|g| (g.0, g.1)), Some((b"three".to_vec(), 42)));
    assert!(w.delete(b"k"));
    assert!(!w.delete(b"k"));
    assert_eq!(get(&mut w, b"k"), None);
}

#[test]
fn cas_is_unique_per_write_and_checked() {
    let (_s, mut w) = store(4 << 20, true);
    set(&mut w, SetOp::Set, b"k", b"a");
    let c1 = get(&mut w, b"k").map(|g| g.2).unwrap_or(0);
    set(&mut w, SetOp::Set, b"k", b"b");
    let c2 = get(&mut w, b"k").map(|g| g.2).unwrap_or(0);
    assert_ne!(c1, c2);
    assert_eq!(cas(&mut w, c1, b"k", b"c"), StoreOutcome::Exists);
    assert_eq!(cas(&mut w, c2, b"k", b"c"), StoreOutcome::Stored);
    assert_eq!(cas(&mut w, c2, b"gone", b"c"), StoreOutcome::NotFound);
}

/// Each new version of a key has a CAS above the one before, as in
/// memcached (whose CAS is one counter): `ms` with `I` and `C` compares them
/// by order. A derived CAS comes from the segment the version lands in,
/// and another worker's open segment may be older than the one the last
/// version went to: 1,763 of 40,000 sets from two connections took a
/// lower CAS before such a version was given an explicit one.
#[test]
fn each_new_version_of_a_key_has_a_cas_above_the_last() {
    let (s, mut a) = store(4 << 20, true);
    let mut b = s.worker();
    // Each worker opens a segment (b's at a newer epoch), then they take
    // turns on the keys, with values of changing lengths (nothing goes
    // in place), and counters and appends in between.
    set(&mut a, SetOp::Set, b"open a", b"1");
    set(&mut b, SetOp::Set, b"open b", b"1");
    let mut last = std::collections::HashMap::new();
    for round in 0..scaled(200, 10) {
        let w = if round % 2 == 0 { &mut b } else { &mut a };
        for k in 0..8usize {
            let key = format!("k{k}").into_bytes();
            match round % 5 {
                3 => assert_eq!(set(w, SetOp::Append, &key, b"+"), StoreOutcome::Stored),
                4 => assert!(matches!(w.arith(b"n", true, 1), Ok(ArithOutcome::Value(_)))),
                _ => assert_eq!(set(w, SetOp::Set, &key, &vec![b'v'; 1 + (round * 7 + k) % 50]), StoreOutcome::Stored),
            }
            for key in [key, b"n".to_vec()] {
                let Some((_, _, cas)) = get(w, &key) else { continue };
                let before = last.insert(key.clone(), cas).unwrap_or(0);
                assert!(
                    cas >= before,
                    "round {round}: {} went from CAS {before} to {cas}",
                    String::from_utf8_lossy(&key)
                );
            }
        }
        if round == 0 {
            set(&mut a, SetOp::Set, b"n", b"0");
        }
    }
}

#[test]
fn append_prepend_keep_flags_and_expiry() {
    let (s, mut w) = store(4 << 20, true);
    let exp = s.clock().expiry(100);
    assert_eq!(w.set(SetOp::Set, b"k", 7, exp, b"mid"), Ok(StoreOutcome::Stored));
    assert_eq!(set(&mut w, SetOp::Append, b"k", b"-end"), StoreOutcome::Stored);
    assert_eq!(set(&mut w, SetOp::Prepend, b"k", b"start-"), StoreOutcome::Stored);
    assert_eq!(get(&mut w, b"k").map(|g| (g.0, g.1)), Some((b"start-mid-end".to_vec(), 7)));
    assert_eq!(set(&mut w, SetOp::Append, b"missing", b"x"), StoreOutcome::NotStored);
    s.clock().advance(101);
    assert_eq!(get(&mut w, b"k"), None, "append kept the original expiry");
}

#[test]
fn incr_decr_wrap_floor_and_pad() {
    let (_s, mut w) = store(4 << 20, true);
    set(&mut w, SetOp::Set, b"n", b"10");
    assert_eq!(w.arith(b"n", false, 1), Ok(ArithOutcome::Value(9)));
    assert_eq!(get(&mut w, b"n").map(|g| g.0), Some(b"9 ".to_vec()), "memcached pads in place");
    assert_eq!(w.arith(b"n", false, 100), Ok(ArithOutcome::Value(0)));
    set(&mut w, SetOp::Set, b"n", b"18446744073709551615");
    assert_eq!(w.arith(b"n", true, 2), Ok(ArithOutcome::Value(1)));
    set(&mut w, SetOp::Set, b"n", b"99");
    assert_eq!(w.arith(b"n", true, 1), Ok(ArithOutcome::Value(100)));
    assert_eq!(get(&mut w, b"n").map(|g| g.0), Some(b"100".to_vec()));
    set(&mut w, SetOp::Set, b"t", b"abc");
    assert_eq!(w.arith(b"t", true, 1), Ok(ArithOutcome::NonNumeric));
    set(&mut w, SetOp::Set, b"e", b"");
    assert_eq!(w.arith(b"e", true, 1), Ok(ArithOutcome::NonNumeric));
    assert_eq!(w.arith(b"none", true, 1), Ok(ArithOutcome::NotFound));
}

#[test]
fn expiry_and_touch_follow_the_clock() {
    let (s, mut w) = store(4 << 20, true);
    let c = s.clock().clone();
    assert_eq!(w.set(SetOp::Set, b"a", 0, c.expiry(10), b"x"), Ok(StoreOutcome::Stored));
    assert_eq!(w.set(SetOp::Set, b"b", 0, 0, b"y"), Ok(StoreOutcome::Stored));
    let cas_b = get(&mut w, b"b").map(|g| g.2);
    c.advance(9);
    assert!(get(&mut w, b"a").is_some());
    assert_eq!(w.touch(b"a", c.expiry(5)), Ok(true));
    assert_eq!(w.touch(b"b", c.expiry(5)), Ok(true), "rewrite with an expiry field");
    assert_eq!(get(&mut w, b"b").map(|g| g.2), cas_b, "touch keeps the CAS");
    c.advance(5);
    assert!(get(&mut w, b"a").is_none());
    assert!(get(&mut w, b"b").is_none());
    assert_eq!(w.touch(b"a", 0), Ok(false));
    assert_eq!(w.set(SetOp::Set, b"neg", 0, c.expiry(-1), b"x"), Ok(StoreOutcome::Stored));
    assert!(get(&mut w, b"neg").is_none());
    assert_eq!(set(&mut w, SetOp::Add, b"neg", b"again"), StoreOutcome::Stored);
}

#[test]
fn flush_all_now_and_later() {
    let (s, mut w) = store(4 << 20, true);
    set(&mut w, SetOp::Set, b"a", b"1");
    s.flush_all(None).unwrap();
    assert!(get(&mut w, b"a").is_none());
    assert_eq!(s.stats().get_flushed, 1);
    assert_eq!(set(&mut w, SetOp::Add, b"a", b"again"), StoreOutcome::Stored);
    assert_eq!(get(&mut w, b"a").map(|g| g.0), Some(b"again".to_vec()));
    set(&mut w, SetOp::Set, b"b", b"2");
    s.flush_all(Some(s.clock().now() + 10)).unwrap();
    assert!(get(&mut w, b"b").is_some());
    s.clock().advance(10);
    assert!(get(&mut w, b"b").is_none());
    set(&mut w, SetOp::Set, b"c", b"3");
    assert!(get(&mut w, b"c").is_some(), "items set after the flush survive");
}

#[test]
#[cfg_attr(miri, ignore = "fills megabytes: too slow under Miri")]
fn flushed_memory_is_reused_without_evicting() {
    // Three million bytes a round: the limit holds them beside the index.
    let (s, mut w) = store(5 << 20, false);
    let value = vec![b'v'; 1000];
    for round in 0..5 {
        for i in 0..3000u32 {
            let r = w.set(SetOp::Set, format!("r{round}k{i}").as_bytes(), 0, 0, &value);
            assert_eq!(r, Ok(StoreOutcome::Stored), "round {round} item {i}");
        }
        s.flush_all(None).unwrap();
        assert!(get(&mut w, format!("r{round}k0").as_bytes()).is_none());
    }
    assert_eq!(s.stats().evictions, 0);
}

#[test]
#[cfg_attr(miri, ignore = "fills megabytes: too slow under Miri")]
fn eviction_keeps_memory_bounded_and_hot_items() {
    // 16 segments: the active segment, the copy target and the cleaner's
    // reserve segment are fixed costs, an eighth of a store of 8.
    let (s, mut w) = store(16 << 20, true);
    let value = vec![b'v'; 1000];
    set(&mut w, SetOp::Set, b"hot", b"keep me");
    for i in 0..50_000u32 {
        set(&mut w, SetOp::Set, format!("key{i}").as_bytes(), &value);
        if i % 500 == 0 {
            assert!(get(&mut w, b"hot").is_some(), "hot item evicted at {i}");
        }
    }
    let st = s.stats();
    assert!(st.evictions > 0);
    assert!(st.reinserted > 0);
    assert!(st.bytes <= st.memory_limit);
    // 11 of the 16 segments (the rest: index, active, target, reserve).
    assert!(st.curr_items > 11_000, "{st:?}");
}

#[test]
#[cfg_attr(miri, ignore = "fills megabytes: too slow under Miri")]
fn without_evictions_a_full_store_refuses_writes() {
    let (_s, mut w) = store(4 << 20, false);
    let value = vec![b'v'; 1000];
    let mut refused = false;
    for i in 0..10_000u32 {
        match w.set(SetOp::Set, format!("key{i}").as_bytes(), 0, 0, &value) {
            Ok(StoreOutcome::Stored) => {}
            Err(StoreError::OutOfMemory) => {
                refused = true;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(refused);
    assert_eq!(get(&mut w, b"key0").map(|g| g.0), Some(value), "nothing was evicted");
}

#[test]
#[cfg_attr(miri, ignore = "fills megabytes: too slow under Miri")]
fn overwrites_do_not_fill_a_no_eviction_store() {
    let (_s, mut w) = store(4 << 20, false);
    let value = vec![b'v'; 1000];
    for round in 0..50 {
        for i in 0..100u32 {
            let r = w.set(SetOp::Set, format!("key{i}").as_bytes(), 0, 0, &value);
            assert_eq!(r, Ok(StoreOutcome::Stored), "round {round}");
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "fills megabytes: too slow under Miri")]
fn memory_limit_can_shrink_and_grow_within_the_reserve() {
    let cfg = Config { memory_limit: 4 << 20, memory_reserve: 16 << 20, ..Config::default() };
    let s = Store::new(cfg, Arc::new(Clock::manual(0))).unwrap();
    let mut w = s.worker();
    let value = vec![b'v'; 1000];
    let fill = |w: &mut Worker| {
        for i in 0..40_000u32 {
            let _ = w.set(SetOp::Set, format!("key{i}").as_bytes(), 0, 0, &value);
        }
    };
    fill(&mut w);
    let small = s.stats();
    assert!(small.bytes <= 4 << 20);
    assert!(s.set_memory_limit(12 << 20).is_ok());
    fill(&mut w);
    let big = s.stats();
    assert!(big.bytes > small.bytes + (4 << 20), "{small:?} {big:?}");
    assert_eq!(big.memory_limit, 12 << 20);
    assert!(s.set_memory_limit(3 << 20).is_ok());
    fill(&mut w);
    assert!(s.stats().bytes <= 3 << 20, "{:?}", s.stats());
    assert!(s.set_memory_limit(32 << 20).is_err());
    assert!(s.set_memory_limit(1 << 20).is_err());
}

#[test]
fn too_large_is_refused() {
    let (_s, mut w) = store(4 << 20, true);
    let value = vec![0u8; 1 << 20];
    assert_eq!(w.set(SetOp::Set, b"big", 0, 0, &value), Err(StoreError::TooLarge));
}

/// What a meta read saw: value, won, token already sent, stale, fetched.
pub(crate) fn read(w: &mut Worker, k: &[u8], opts: &ReadOpts) -> Option<(Vec<u8>, bool, bool, bool, bool)> {
    w.read(k, opts, |it| (it.value.to_vec(), it.won, it.token_sent, it.stale, it.fetched)).unwrap()
}

#[test]
fn stale_items_hand_out_one_recache_token() {
    let (s, mut w) = store(4 << 20, true);
    set(&mut w, SetOp::Set, b"k", b"v");
    let cas = get(&mut w, b"k").map_or(0, |g| g.2);
    let d = Delete { invalidate: true, touch: Some(s.clock().expiry(30)), ..Delete::default() };
    assert_eq!(w.delete_now(b"k", &d), Ok(DeleteOutcome::Deleted));
    let after = get(&mut w, b"k").map_or(0, |g| g.2);
    assert_ne!(after, cas, "invalidation gives a new CAS");
    let plain = ReadOpts { tokens: true, ..ReadOpts::GET };
    assert_eq!(read(&mut w, b"k", &ReadOpts::GET).map(|x| (x.1, x.3)), Some((false, true)), "get takes no token");
    assert_eq!(read(&mut w, b"k", &plain), Some((b"v".to_vec(), true, false, true, true)), "first: X W");
    assert_eq!(read(&mut w, b"k", &plain), Some((b"v".to_vec(), false, true, true, true)), "then: Z X");
    // Invalidating again clears the token, so the next reader wins again.
    assert_eq!(w.delete_now(b"k", &d), Ok(DeleteOutcome::Deleted));
    assert_eq!(read(&mut w, b"k", &plain).map(|r| r.1), Some(true));
    // A plain write replaces the stale item: no state left.
    set(&mut w, SetOp::Set, b"k", b"fresh");
    assert_eq!(read(&mut w, b"k", &plain), Some((b"fresh".to_vec(), false, false, false, false)));
}

#[test]
fn recache_wins_only_near_expiry_and_once() {
    let (s, mut w) = store(4 << 20, true);
    let exp = s.clock().expiry(100);
    assert_eq!(w.set(SetOp::Set, b"k", 0, exp, b"v"), Ok(StoreOutcome::Stored));
    assert_eq!(w.set(SetOp::Set, b"forever", 0, 0, b"v"), Ok(StoreOutcome::Stored));
    let r = |secs| ReadOpts { tokens: true, recache_before: Some(s.clock().expiry(secs)), ..ReadOpts::GET };
    assert_eq!(read(&mut w, b"k", &r(50)).map(|x| x.1), Some(false), "100 s left is not below 50");
    assert_eq!(read(&mut w, b"k", &r(200)).map(|x| (x.1, x.2)), Some((true, false)));
    assert_eq!(read(&mut w, b"k", &r(200)).map(|x| (x.1, x.2)), Some((false, true)));
    assert_eq!(read(&mut w, b"forever", &r(200)).map(|x| x.1), Some(false), "no TTL never wins");
}

#[test]
fn vivify_creates_an_empty_item_and_one_winner() {
    let (s, mut w) = store(4 << 20, true);
    let v = ReadOpts { tokens: true, vivify: Some(s.clock().expiry(30)), new_cas: Some(77), ..ReadOpts::GET };
    let first = w.read(b"k", &v, |it| (it.value.len(), it.won, it.created, it.cas, it.flags));
    assert_eq!(first, Ok(Some((0, true, true, 77, 0))));
    let second = w.read(b"k", &v, |it| (it.won, it.token_sent, it.created));
    assert_eq!(second, Ok(Some((false, true, false))));
    assert_eq!(w.read(b"gone", &ReadOpts::GET, |_| ()), Ok(None));
}

#[test]
fn touching_reads_keep_the_cas_and_unbumped_reads_stay_unfetched() {
    let (s, mut w) = store(4 << 20, true);
    set(&mut w, SetOp::Set, b"k", b"v");
    let cas = get(&mut w, b"k").map_or(0, |g| g.2);
    let t = ReadOpts { touch: Some(s.clock().expiry(10)), ..ReadOpts::GET };
    let seen = w.read(b"k", &t, |it| (it.expiry_before, it.expiry, it.cas));
    assert_eq!(seen, Ok(Some((0, s.clock().expiry(10), cas))), "touch rewrote the layout, not the CAS");
    set(&mut w, SetOp::Set, b"u", b"v");
    let u = ReadOpts { bump: false, ..ReadOpts::GET };
    assert_eq!(read(&mut w, b"u", &u).map(|x| x.4), Some(false));
    assert_eq!(read(&mut w, b"u", &u).map(|x| x.4), Some(false), "u does not count as a fetch");
    assert_eq!(read(&mut w, b"u", &ReadOpts::GET).map(|x| x.4), Some(false));
    assert_eq!(read(&mut w, b"u", &ReadOpts::GET).map(|x| x.4), Some(true));
}

#[test]
fn writes_with_compare_invalidate_and_new_cas() {
    let (_s, mut w) = store(4 << 20, true);
    set(&mut w, SetOp::Set, b"k", b"a");
    let cas = get(&mut w, b"k").map_or(0, |g| g.2);
    let stale = Write { compare: Some(cas - 1), invalidate: true, ..Write::new(SetOp::Set, b"k", 0, 0, b"b") };
    let r = w.set_now(&stale).map(|s| s.outcome);
    assert_eq!(r, Ok(StoreOutcome::Stored), "an older CAS with I stores");
    assert_eq!(read(&mut w, b"k", &ReadOpts::GET).map(|x| (x.0, x.3)), Some((b"b".to_vec(), true)));
    let newer = Write { compare: Some(u64::MAX), invalidate: true, ..Write::new(SetOp::Set, b"k", 0, 0, b"c") };
    assert_eq!(w.set_now(&newer).map(|s| s.outcome), Ok(StoreOutcome::Exists));
    let given = Write { new_cas: Some(12345), ..Write::new(SetOp::Set, b"k", 0, 0, b"d") };
    assert_eq!(w.set_now(&given).map(|s| (s.outcome, s.cas)), Ok((StoreOutcome::Stored, 12345)));
    assert_eq!(get(&mut w, b"k").map(|g| g.2), Some(12345));
    let add = Write { compare: Some(1), ..Write::new(SetOp::Add, b"new", 0, 0, b"x") };
    assert_eq!(w.set_now(&add).map(|s| s.outcome), Ok(StoreOutcome::Stored), "add ignores a compare value");
    let viv = Write { vivify: Some(0), ..Write::new(SetOp::Append, b"log", 3, 0, b"line") };
    assert_eq!(w.set_now(&viv).map(|s| (s.outcome, s.size)), Ok((StoreOutcome::Stored, 4)));
    assert_eq!(w.set_now(&viv).map(|s| (s.outcome, s.size)), Ok((StoreOutcome::Stored, 8)));
    assert_eq!(get(&mut w, b"log").map(|g| (g.0, g.1)), Some((b"lineline".to_vec(), 3)));
}

/// memcached's CAS_STALE: `ms I C<older>` replaces the value but keeps the
/// item's TTL, marks it stale, and keeps a recache token already handed out.
#[test]
fn a_stale_store_keeps_ttl_and_a_token_already_sent() {
    // Three TTL classes' active segments and the eviction target.
    let (s, mut w) = store(8 << 20, true);
    let c = s.clock().clone();
    let old = w.set_now(&Write::new(SetOp::Set, b"k", 0, c.expiry(100), b"v1")).map_or(0, |s| s.cas);
    assert_eq!(w.delete_now(b"k", &Delete { invalidate: true, ..Delete::default() }), Ok(DeleteOutcome::Deleted));
    let tokens = ReadOpts { tokens: true, ..ReadOpts::GET };
    assert_eq!(w.read(b"k", &tokens, |it| it.won), Ok(Some(true)));
    let stale = Write { compare: Some(old), invalidate: true, ..Write::new(SetOp::Set, b"k", 5, c.expiry(500), b"v0") };
    assert_eq!(w.set_now(&stale).map(|s| s.outcome), Ok(StoreOutcome::Stored));
    let seen = w.read(b"k", &tokens, |it| (it.value.to_vec(), it.flags, it.expiry, it.stale, it.won, it.token_sent));
    assert_eq!(seen, Ok(Some((b"v0".to_vec(), 5, c.expiry(100), true, false, true))), "old TTL, Z, not W");

    // No token handed out yet: the stale item offers one.
    let old = w.set_now(&Write::new(SetOp::Set, b"n", 0, 0, b"v1")).map_or(0, |s| s.cas);
    assert_eq!(
        w.set_now(&Write::new(SetOp::Set, b"n", 0, c.expiry(50), b"v2")).map(|s| s.outcome),
        Ok(StoreOutcome::Stored)
    );
    let stale = Write { compare: Some(old), invalidate: true, ..Write::new(SetOp::Set, b"n", 0, 0, b"v0") };
    assert_eq!(w.set_now(&stale).map(|s| s.outcome), Ok(StoreOutcome::Stored));
    let seen = w.read(b"n", &tokens, |it| (it.expiry, it.stale, it.won));
    assert_eq!(seen, Ok(Some((c.expiry(50), true, true))));
}

#[test]
fn delete_with_compare_and_empty_value() {
    let (_s, mut w) = store(4 << 20, true);
    w.set(SetOp::Set, b"k", 9, 0, b"value").unwrap();
    let cas = get(&mut w, b"k").map_or(0, |g| g.2);
    let wrong = Delete { compare: Some(cas + 1), ..Delete::default() };
    assert_eq!(w.delete_now(b"k", &wrong), Ok(DeleteOutcome::Exists));
    let empty = Delete { remove_value: true, flags: 4, ..Delete::default() };
    assert_eq!(w.delete_now(b"k", &empty), Ok(DeleteOutcome::Deleted));
    assert_eq!(get(&mut w, b"k"), Some((Vec::new(), 4, cas)), "x keeps the CAS");
    let right = Delete { compare: Some(cas), ..Delete::default() };
    assert_eq!(w.delete_now(b"k", &right), Ok(DeleteOutcome::Deleted));
    assert_eq!(w.delete_now(b"k", &right), Ok(DeleteOutcome::NotFound));
}

#[test]
fn arith_vivifies_with_the_initial_value_and_checks_cas() {
    let (s, mut w) = store(4 << 20, true);
    let a = Arith { incr: true, delta: 5, vivify: Some(s.clock().expiry(60)), initial: 10, ..Arith::default() };
    let c = w.arith_now(b"n", &a).unwrap();
    assert_eq!((c.outcome, c.expiry_before, c.expiry), (ArithOutcome::Value(10), 0, s.clock().expiry(60)));
    let c2 = w.arith_now(b"n", &a).unwrap();
    assert_eq!(c2.outcome, ArithOutcome::Value(15));
    let wrong = Arith { compare: Some(c2.cas + 1), ..a };
    assert_eq!(w.arith_now(b"n", &wrong).map(|c| c.outcome), Ok(ArithOutcome::Exists));
    let right = Arith { compare: Some(c2.cas), new_cas: Some(999), ..a };
    assert_eq!(w.arith_now(b"n", &right).map(|c| (c.outcome, c.cas)), Ok((ArithOutcome::Value(20), 999)));
}

#[test]
fn write_times_are_kept_per_segment() {
    let (s, mut w) = store(4 << 20, true);
    set(&mut w, SetOp::Set, b"old", b"v");
    s.clock().advance(7);
    set(&mut w, SetOp::Set, b"new", b"v");
    s.clock().advance(3);
    let opts = ReadOpts { written: true, ..ReadOpts::GET };
    let now = s.clock().now();
    assert_eq!(w.read(b"old", &opts, |it| now - it.written), Ok(Some(10)));
    assert_eq!(w.read(b"new", &opts, |it| now - it.written), Ok(Some(3)));
    let t = ReadOpts { touch: Some(s.clock().expiry(100)), ..ReadOpts::GET };
    assert!(matches!(w.read(b"old", &t, |_| ()), Ok(Some(()))));
    assert_eq!(w.read(b"old", &opts, |it| now - it.written), Ok(Some(10)), "a touch is not a write");
    assert_eq!(w.inspect(b"new").map(|i| (now - i.written, i.fetched)), Some((3, true)));
}

#[test]
fn concurrent_readers_get_exactly_one_token() {
    for round in 0..scaled(20, 2) as u32 {
        let (s, mut w) = store(4 << 20, true);
        let key = format!("k{round}").into_bytes();
        let stale = round % 2 == 0;
        if stale {
            set(&mut w, SetOp::Set, &key, b"v");
            let d = Delete { invalidate: true, ..Delete::default() };
            assert_eq!(w.delete_now(&key, &d), Ok(DeleteOutcome::Deleted));
        }
        let opts = ReadOpts { tokens: true, vivify: Some(s.clock().expiry(30)), ..ReadOpts::GET };
        let wins: u32 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..scaled(8, 3))
                .map(|_| {
                    let (s, key) = (&s, &key);
                    scope.spawn(move || {
                        let mut w = s.worker();
                        u32::from(w.read(key, &opts, |it| it.won).ok().flatten().unwrap_or(false))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        assert_eq!(wins, 1, "round {round} (stale: {stale})");
    }
}
