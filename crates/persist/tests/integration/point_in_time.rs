//! A snapshot is a point in time, and a load keeps what was live (issue 41,
//! failures 1 and 2), tried as an operator would: several writer threads
//! overwriting and deleting their keys while the snapshot copies, at a
//! memory limit the writers fill and at one they do not, then a load into
//! a fresh store at that limit and at a smaller one.
//!
//! The model is the writers' own record of what they were told, never the
//! store: each writer owns its keys, so a key's changes are its writer's
//! in program order, and every change is stamped with a global sequence
//! taken after the store answered. For a snapshot begun when the sequence
//! stood at `T`, a key must load with the last state acknowledged before
//! `T` or a state of a change answered at `T` or later (in flight or made
//! while the snapshot copied), and a key evicted at any time may be gone.

// Test code: a panic is how a test fails (clippy.toml allows unwrap in
// #[test] functions; these helpers live beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};

use strata_persist::{load, read_header, save, OsBackend, SNAPSHOT_FILE};
use strata_store::{Clock, Config, Evicted, EvictionWatcher, SetOp, Store, StoreOutcome, Worker};

const T0: i64 = 1_700_000_000;

fn cfg(mem: usize) -> Config {
    Config { memory_limit: mem, segment_size: 64 << 10, item_size_max: 16 << 10, hash_power: 10, ..Config::default() }
}

/// A key's state as a client sees it: its value, or gone.
type State = Option<Vec<u8>>;

/// What one writer was told, per key: `(sequence after the answer, state)`.
type History = HashMap<Vec<u8>, Vec<(u64, State)>>;

#[derive(Default)]
struct EvictedKeys(Mutex<HashSet<Vec<u8>>>);

impl EvictionWatcher for EvictedKeys {
    fn wanted(&self) -> bool {
        true
    }
    fn evicted(&self, e: &Evicted<'_>) {
        self.0.lock().unwrap().insert(e.key.to_vec());
    }
}

struct Shared {
    seq: AtomicU64,
    stop: AtomicBool,
    /// Bumped by the snapshot to ask the writers to seal (as a server's
    /// workers are asked, between two requests).
    seal: AtomicU64,
    /// Changes made by each writer.
    made: Vec<AtomicU64>,
}

/// One writer: sets (sizes from 40 bytes to 2 KiB) and 5% deletes over its
/// `keys` keys, until told to stop; seals when asked.
fn writer(store: Arc<Store>, shared: Arc<Shared>, id: usize, keys: usize) -> History {
    let mut w: Worker = store.worker();
    let mut hist = History::new();
    let mut gen = strata_io::sim::Rng::new(0x9E37_79B9_7F4A_7C15u64 ^ (id as u64 + 1));
    let mut sealed = 0;
    let mut n = 0u64;
    while !shared.stop.load(Relaxed) && n < 2_000_000 {
        n += 1;
        let ask = shared.seal.load(Acquire);
        if ask != sealed {
            w.seal_active();
            sealed = ask;
        }
        let rng = gen.next_u64();
        let k = format!("w{id}:{}", rng % keys as u64).into_bytes();
        let state = if rng % 100 < 5 {
            w.delete(&k);
            None
        } else {
            let len = 40 + (rng >> 20) as usize % 2000;
            let v: Vec<u8> = format!("{id}:{n}:").bytes().cycle().take(len).collect();
            match w.set(SetOp::Set, &k, 0, 0, &v) {
                Ok(StoreOutcome::Stored) => Some(v),
                other => panic!("set refused: {other:?}"),
            }
        };
        shared.made[id].fetch_add(1, Relaxed);
        let at = shared.seq.fetch_add(1, AcqRel);
        hist.entry(k).or_default().push((at, state));
    }
    hist
}

/// Runs `writers` writers over `keys` keys each at `-m mem`, snapshots
/// once they have made `before` changes, lets them go on until it is
/// written, then checks a load at `load_mem` against their histories.
/// Returns (keys checked, keys present, items handed off, evicted keys).
fn round(dir: &std::path::Path, mem: usize, load_mem: usize, writers: usize, keys: usize, before: u64) -> Check {
    let store = Store::new(cfg(mem), Arc::new(Clock::manual(T0))).unwrap();
    let evicted = Arc::new(EvictedKeys::default());
    store.on_evict(evicted.clone());
    let made = (0..writers).map(|_| AtomicU64::new(0)).collect();
    let shared =
        Arc::new(Shared { seq: AtomicU64::new(0), stop: AtomicBool::new(false), seal: AtomicU64::new(0), made });
    let threads: Vec<_> = (0..writers)
        .map(|id| {
            let (s, sh) = (store.clone(), shared.clone());
            std::thread::spawn(move || writer(s, sh, id, keys))
        })
        .collect();
    // Each writer's share, not the total: on a loaded machine one writer
    // may be scheduled far less than the others, and the keys it left
    // untouched made the check's key count flaky.
    while shared.made.iter().any(|m| m.load(Relaxed) < before / writers as u64) {
        std::thread::yield_now();
    }
    let file = dir.join(SNAPSHOT_FILE);
    let t = shared.seq.load(Acquire);
    let mut ask = || {
        shared.seal.fetch_add(1, Release);
    };
    let report = save(&store, &OsBackend, &file, &mut ask).unwrap_or_else(|e| panic!("save: {e}"));
    let after = shared.seq.load(Acquire);
    shared.stop.store(true, Release);
    let mut hist = History::new();
    for t in threads {
        hist.extend(t.join().unwrap());
    }
    let evicted: HashSet<Vec<u8>> = evicted.0.lock().unwrap().clone();
    drop(store);

    let h = read_header(&OsBackend, &file).unwrap().unwrap();
    let clock = Clock::resume_at(h.unix_time + 1, h.process_started, h.now, false).unwrap();
    let s2 = Store::new(cfg(load_mem), Arc::new(clock)).unwrap();
    let loaded = load(&s2, &OsBackend, &file, 2, 0, false).unwrap_or_else(|e| panic!("load: {e}"));
    assert!(loaded.complete && !loaded.damaged(), "{loaded:?}");
    let mut w2 = s2.worker();
    let mut c = Check { writes_during: after - t, saved_items: report.items, ..Check::default() };
    let mut bad = Vec::new();
    for (k, changes) in &hist {
        let got: State = w2.get(k, |it| it.value.to_vec());
        let before_t = changes.iter().rev().find(|(at, _)| *at < t).map(|(_, s)| s.clone());
        let Some(before_t) = before_t else { continue };
        c.keys += 1;
        c.present += u64::from(got.is_some());
        let ok = got == before_t
            || changes.iter().any(|(at, s)| *at >= t && *s == got)
            || (got.is_none() && evicted.contains(k));
        if !ok && bad.len() < 5 {
            bad.push(format!(
                "{}: loaded {:?}, acknowledged before the snapshot {:?}",
                String::from_utf8_lossy(k),
                got.as_ref().map(|v| String::from_utf8_lossy(&v[..v.len().min(16)]).into_owned()),
                before_t.as_ref().map(|v| String::from_utf8_lossy(&v[..v.len().min(16)]).into_owned())
            ));
        }
        c.wrong += u64::from(!ok);
    }
    // One version of each key at most: the snapshot is bounded by the keys.
    assert!(c.saved_items <= (writers * keys) as u64, "{c:?}");
    c.evicted = evicted.len() as u64;
    c.load_evicted = loaded.evicted;
    assert!(c.wrong == 0, "{} of {} keys not as of the snapshot ({c:?}): {bad:?}", c.wrong, c.keys);
    c
}

#[derive(Debug, Default)]
struct Check {
    keys: u64,
    present: u64,
    wrong: u64,
    writes_during: u64,
    saved_items: u64,
    evicted: u64,
    load_evicted: u64,
}

#[test]
fn keys_written_before_a_snapshot_are_in_it_whatever_writers_do_meanwhile() {
    // Failure 1: memory to spare, 4 writers overwriting and deleting.
    for r in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let c = round(dir.path(), 64 << 20, 64 << 20, 4, 3000, 30_000);
        assert!(c.keys > 10_000 && c.writes_during > 0, "round {r}: {c:?}");
        assert_eq!((c.evicted, c.load_evicted), (0, 0), "round {r}: nothing evicted: {c:?}");
    }
}

#[test]
fn a_snapshot_keeps_its_point_in_time_at_a_limit_the_writers_fill() {
    // Failure 2's setting: the writers fill memory during the snapshot, so
    // segments of its cut are cleaned and evicted before it copies them.
    for r in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let c = round(dir.path(), 8 << 20, 8 << 20, 4, 3000, 20_000);
        assert!(c.keys > 5_000 && c.writes_during > 0, "round {r}: {c:?}");
    }
}

#[test]
fn a_load_at_a_smaller_limit_keeps_every_live_item_that_fits() {
    // Live data ~4 MiB of 8 written into 32 MiB, loaded into 12 MiB: the
    // snapshot's segments hold dead versions too, which must not push out
    // live items.
    let dir = tempfile::tempdir().unwrap();
    let c = round(dir.path(), 32 << 20, 12 << 20, 2, 2000, 60_000);
    assert!(c.keys > 3_000, "{c:?}");
    assert_eq!(c.load_evicted, 0, "{c:?}");
}
