//! The store against a model: threads sharing it, and proptest's random
//! operation sequences checked against a map (with and without eviction).

use crate::item::parse_counter;
use crate::testing::{proptest_config, scaled};
use crate::tests::*;
use crate::*;
use proptest::prelude::*;
use std::collections::HashMap;

#[test]
fn threads_share_the_store() {
    let (s, _) = store(scaled(16, 4) << 20, true);
    assert_eq!(s.worker().set(SetOp::Set, b"counter", 0, 0, b"0"), Ok(StoreOutcome::Stored));
    let (threads, rounds) = (scaled(4, 3), scaled(20_000, 100));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut w = s.worker();
                let (mut hits, mut counted, mut missing) = (0, 0, 0);
                for i in 0..rounds as u32 {
                    let k = format!("k{}", i % 500);
                    let v = format!("{k}:{t}:{i}");
                    assert_eq!(w.set(SetOp::Set, k.as_bytes(), 0, 0, v.as_bytes()), Ok(StoreOutcome::Stored));
                    if let Some(got) = w.get(k.as_bytes(), |it| it.value.to_vec()) {
                        assert!(got.starts_with(format!("{k}:").as_bytes()), "wrong value for {k}");
                        hits += 1;
                    }
                    match w.arith(b"counter", true, 1) {
                        Ok(ArithOutcome::Value(_)) => counted += 1,
                        // Under Miri, which switches threads at every step,
                        // an incr can lose MAX_RETRIES times in a row; it then
                        // changed nothing.
                        Err(StoreError::Contended) => {}
                        // Evicted: Miri's store has four segments for
                        // three writers.
                        Ok(ArithOutcome::NotFound) => missing += 1,
                        other => panic!("incr: {other:?}"),
                    }
                    if i % 7 == 0 {
                        w.delete(k.as_bytes());
                    }
                }
                (hits, counted, missing)
            })
        })
        .collect();
    let (mut total, mut missing) = (0, 0);
    for h in handles {
        let (hits, counted, gone) = h.join().unwrap_or_else(|_| panic!("worker panicked"));
        (total, missing) = (total + counted, missing + gone);
        // A key is read right after its own set; only another thread's
        // delete of that key in between makes it miss.
        assert!(hits * 10 >= rounds * 9, "{hits} hits of {rounds} reads");
    }
    // Every increment that succeeded counted once, and most did, unless
    // the counter was evicted (never without an eviction).
    let evictions = s.stats().evictions;
    assert!(missing == 0 || evictions > 0, "the counter went missing {missing} times with nothing evicted");
    #[cfg(not(miri))]
    assert_eq!(evictions, 0, "16 MiB hold 501 small keys: nothing is evicted");
    if evictions > 0 {
        return;
    }
    assert!(total * 2 > threads * rounds, "{total} increments of {}", threads * rounds);
    let counter = s.worker().get(b"counter", |it| it.value.to_vec());
    assert_eq!(counter, Some(total.to_string().into_bytes()));
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Set(u8, Vec<u8>),
    Add(u8, Vec<u8>),
    Replace(u8, Vec<u8>),
    Append(u8, Vec<u8>),
    Prepend(u8, Vec<u8>),
    Delete(u8),
    Incr(u8, u64),
    Decr(u8, u64),
    Touch(u8),
    Get(u8),
    Cas(u8, bool, Vec<u8>),
    /// Trains a compression dictionary from the values sampled so far
    /// (only `compress_tests` makes it, and they do not run under Miri).
    #[cfg_attr(miri, allow(dead_code))]
    Train,
}

fn op() -> impl Strategy<Value = Op> {
    op_with(proptest::collection::vec(any::<u8>(), 0..40))
}

/// Operations on 24 keys with values drawn from `val`.
pub(crate) fn op_with(val: impl Strategy<Value = Vec<u8>> + Clone + 'static) -> impl Strategy<Value = Op> {
    let key = 0u8..24;
    prop_oneof![
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Set(k, v)),
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Add(k, v)),
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Replace(k, v)),
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Append(k, v)),
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Prepend(k, v)),
        key.clone().prop_map(Op::Delete),
        (key.clone(), any::<u64>()).prop_map(|(k, d)| Op::Incr(k, d)),
        (key.clone(), any::<u64>()).prop_map(|(k, d)| Op::Decr(k, d)),
        key.clone().prop_map(Op::Touch),
        key.clone().prop_map(Op::Get),
        (key, any::<bool>(), val).prop_map(|(k, fresh, v)| Op::Cas(k, fresh, v)),
    ]
}

fn k(i: u8) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// Runs `ops` on the store and on a HashMap. Without eviction the store must
/// agree exactly; with eviction a key may be missing, but a value it returns
/// must be the one the model holds.
pub(crate) fn check(ops: Vec<Op>, cfg: Config, exact: bool) -> Result<(), TestCaseError> {
    let (s, mut w) = store_of(cfg);
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for op in ops {
        match op {
            Op::Set(i, v) => {
                set(&mut w, SetOp::Set, &k(i), &v);
                model.insert(k(i), v);
            }
            Op::Add(i, v) => {
                let r = set(&mut w, SetOp::Add, &k(i), &v);
                if exact {
                    prop_assert_eq!(r == StoreOutcome::Stored, !model.contains_key(&k(i)));
                }
                if r == StoreOutcome::Stored {
                    model.insert(k(i), v);
                }
            }
            Op::Replace(i, v) | Op::Append(i, v) | Op::Prepend(i, v) if !exact && !w.contains(&k(i)) => {
                model.remove(&k(i));
                let _ = v;
            }
            Op::Replace(i, v) => {
                let r = set(&mut w, SetOp::Replace, &k(i), &v);
                if !exact && r == StoreOutcome::NotStored && !w.contains(&k(i)) {
                    // As for append: its own space evicted the item.
                    model.remove(&k(i));
                    continue;
                }
                prop_assert_eq!(r == StoreOutcome::Stored, model.contains_key(&k(i)));
                if r == StoreOutcome::Stored {
                    model.insert(k(i), v);
                }
            }
            Op::Append(i, ref v) | Op::Prepend(i, ref v) => {
                let v = v.clone();
                let prepend = matches!(op, Op::Prepend(..));
                let r = set(&mut w, if prepend { SetOp::Prepend } else { SetOp::Append }, &k(i), &v);
                if !exact && r == StoreOutcome::NotStored && !w.contains(&k(i)) {
                    // The space the joined value took evicted the item it
                    // joins (a store of three segments, the item's the
                    // oldest): gone before the append, as far as a client
                    // can tell.
                    model.remove(&k(i));
                    continue;
                }
                prop_assert_eq!(r == StoreOutcome::Stored, model.contains_key(&k(i)));
                if let Some(old) = model.get_mut(&k(i)) {
                    *old = if prepend { [v.clone(), old.clone()].concat() } else { [old.clone(), v].concat() };
                }
            }
            Op::Delete(i) => {
                let r = w.delete(&k(i));
                if exact {
                    prop_assert_eq!(r, model.contains_key(&k(i)));
                }
                model.remove(&k(i));
            }
            Op::Incr(i, d) | Op::Decr(i, d) => {
                check_arith(&mut w, &mut model, i, matches!(op, Op::Incr(..)), d, exact)?
            }
            Op::Touch(i) => {
                let r = w.touch(&k(i), 0).map_err(|e| TestCaseError::fail(e.to_string()))?;
                if exact {
                    prop_assert_eq!(r, model.contains_key(&k(i)));
                }
            }
            Op::Get(i) => {
                let got = get(&mut w, &k(i)).map(|g| g.0);
                match (got, model.get(&k(i))) {
                    (Some(g), Some(m)) => prop_assert_eq!(&g, m),
                    (None, Some(_)) if !exact => {
                        model.remove(&k(i));
                    }
                    (g, m) => prop_assert_eq!(g.as_ref(), m),
                }
            }
            Op::Cas(i, fresh, v) => {
                let have = get(&mut w, &k(i)).map(|g| g.2);
                let unique = match (have, fresh) {
                    (Some(c), true) => c,
                    (Some(c), false) => c.wrapping_add(1),
                    (None, _) => 12345,
                };
                let r = cas(&mut w, unique, &k(i), &v);
                match (have, fresh) {
                    (None, _) => {
                        if exact {
                            prop_assert_eq!(r, StoreOutcome::NotFound);
                        }
                        model.remove(&k(i));
                    }
                    // As for append: its own space evicted the item.
                    (Some(_), _) if !exact && r == StoreOutcome::NotFound && !w.contains(&k(i)) => {
                        model.remove(&k(i));
                    }
                    (Some(_), true) => {
                        prop_assert_eq!(r, StoreOutcome::Stored);
                        model.insert(k(i), v);
                    }
                    (Some(_), false) => prop_assert_eq!(r, StoreOutcome::Exists),
                }
            }
            Op::Train => {
                if let Some(c) = s.codec() {
                    c.train_now().map_err(|e| TestCaseError::fail(e.to_string()))?;
                    // What was written before is stored again with the
                    // new dictionary (`rezip.rs`): nothing may read
                    // differently after.
                    w.seal_active();
                    s.rezip_all();
                }
            }
        }
    }
    if exact {
        for i in 0..24 {
            let got = get(&mut w, &k(i)).map(|g| g.0);
            prop_assert_eq!(got.as_ref(), model.get(&k(i)));
        }
    }
    Ok(())
}

/// An incr (`incr`) or decr by `d` of key `i`, on the store and the model.
fn check_arith(
    w: &mut Worker,
    model: &mut HashMap<Vec<u8>, Vec<u8>>,
    i: u8,
    incr: bool,
    d: u64,
    exact: bool,
) -> Result<(), TestCaseError> {
    let r = w.arith(&k(i), incr, d).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let Some(old) = model.get(&k(i)).cloned() else {
        if exact {
            prop_assert_eq!(r, ArithOutcome::NotFound);
        }
        return Ok(());
    };
    match (parse_counter(&old), r) {
        (_, ArithOutcome::NotFound) if !exact => {
            model.remove(&k(i));
        }
        (None, r) => prop_assert_eq!(r, ArithOutcome::NonNumeric),
        (Some(n), r) => {
            let new = if incr { n.wrapping_add(d) } else { n.saturating_sub(d) };
            prop_assert_eq!(r, ArithOutcome::Value(new));
            let mut s = new.to_string().into_bytes();
            if s.len() < old.len() {
                s.resize(old.len(), b' ');
            }
            model.insert(k(i), s);
        }
    }
    Ok(())
}

pub(crate) fn ops_len(n: usize) -> std::ops::Range<usize> {
    1..scaled(n, 40)
}

proptest! {
    // Under Miri a few short sequences still walk every operation.
    #![proptest_config(proptest_config(200, 3))]

    #[test]
    fn agrees_with_a_model_without_eviction(ops in proptest::collection::vec(op(), ops_len(300))) {
        check(ops, Config { memory_limit: scaled(16, 4) << 20, ..Config::default() }, true)?;
    }

    /// Three segments (one the eviction target), so values of a few KB
    /// force constant eviction and copy-forward; under Miri the segments
    /// are 16 KiB, so its few short sequences evict too.
    #[test]
    fn never_wrong_with_eviction(ops in proptest::collection::vec(op().prop_map(|o| match o {
        Op::Set(k, v) => Op::Set(k, v.repeat(scaled(200, 20))),
        other => other,
    }), ops_len(400))) {
        let seg = scaled(1 << 20, 16 << 10);
        let cfg = Config { memory_limit: 3 * seg, segment_size: seg, item_size_max: seg.min(1 << 20), ..Config::default() };
        check(ops, cfg, false)?;
    }
}
