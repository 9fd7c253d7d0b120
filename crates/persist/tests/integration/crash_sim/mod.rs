//! The crash simulator (issues 30 and 41, DESIGN §7 "How that is shown"):
//! a seeded workload against a real store with a real durability log, real
//! snapshots and (in some modes) the flash tier, all on a file system in
//! memory that loses power ([`SimFs`]), with the machine stopped at every
//! I/O operation in turn.
//!
//! A *schedule* is a seed and a crash point. The seed draws the mode (the
//! log under `always` or `interval`, or snapshots alone; one to three workers, each writing its own
//! segments; the flash tier on or off) and the workload: several process
//! lifetimes of requests (sets with and without TTLs, adds, deletes, incr,
//! append, touch, flush_all) on workers taken in turn, group commits, the
//! log filled with zeros ahead of its writer, snapshots with requests made
//! while they copy (overwrites and deletes of keys the snapshot has not
//! copied yet) and workers that seal late, workers that seal early (their
//! segments part-filled, so that a snapshot holds more segments than a
//! smaller limit restores whole), recoveries into a smaller memory
//! limit than the snapshot was taken at, values that hold whole snapshot
//! and log records of a key no client ever sets, clean stops, kill -9 and
//! power loss. The crash point is the I/O operation at which the machine
//! stops; then unsynced bytes are dropped or torn as the seed says (power
//! loss) or kept (kill -9).
//!
//! The oracle is the model (`model.rs`), which computes every request's
//! outcome and every state the key space passes through from the requests
//! alone; the store's answers are checked against it as they come. After
//! every recovery the whole key space must be one state the model allows:
//! with the log, a prefix of the log at least as long as what was
//! acknowledged (every key at once, not key by key; under `interval` a
//! reply goes out once its record is written, which a kill -9 keeps and a
//! power loss may not); with snapshots alone,
//! the state at the cut of the last snapshot written (or of one begun after
//! it). Recovery must never fail on what a crash leaves, and a load must
//! never leave a live item out. Every run counts what it verified and
//! fails if it verified too little. The model knows no eviction: the
//! workload keeps its live values within memory, and a tight store that
//! evicts all the same (its workers' open segments and copy targets take
//! much of 15 segments) stops its schedule there, counted; more than one
//! schedule in 20 so stopped fails the run.
//!
//! `cargo test` runs [`SEEDS`] seeds at every crash point of each;
//! `STRATA_SIM_SEEDS=N` (and `STRATA_SIM_FROM=S`) run more,
//! `STRATA_SIM_SEED=S` one, `STRATA_SIM_AT=N` one crash point of it, and
//! `STRATA_SIM_VERBOSE=1` traces every request. A failure names the seed
//! and crash point that reproduce it exactly.

// Test code: a panic is how a test fails (clippy.toml allows unwrap in
// #[test] functions; these helpers live beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod model;
mod run;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use strata_io::sim::SimFs;
use strata_persist::{save, Durability, RecoverOpts};
use strata_store::{Clock, SetOp, Store};

use run::{Counts, Failure, Mode, Sim};

/// Seeds `cargo test` runs per test, each at every crash point: with
/// snapshots alone (`SEEDS`: 2,518 schedules), the log under `always`
/// (3,497) and under `interval` (1,398); 7,413 in all, the three tests in
/// parallel in 101 s on two cores (`-- --nocapture` prints the counts).
const SEEDS: u64 = 8;
const ALWAYS_SEEDS: u64 = 6;
/// Seeds of the `interval` test (its log paths are `always`'s, but for
/// the writes without a sync).
const INTERVAL_SEEDS: u64 = 2;

/// Byte strings a client may store that are whole records of strata's own
/// formats: a snapshot's segment record holding the key `forged`, and log
/// records that set `forged`, delete `k3` and flush everything.
fn forged() -> &'static [Vec<u8>] {
    static FORGED: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    FORGED.get_or_init(|| {
        let mut out = Vec::new();
        // A snapshot of one item: its first record, header and body.
        let fs = SimFs::new();
        let s = Store::new(run::cfg(1 << 20, None), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        let mut w = s.worker();
        w.set(SetOp::Set, b"forged", 7, 0, b"a value nobody set").unwrap();
        drop(w);
        let file = Path::new("/f/strata.snapshot");
        save(&s, &fs, file, &mut || {}).unwrap();
        let b = fs.read_all(file).unwrap();
        let at = strata_persist::format::HEADER_LEN;
        let len = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
        out.push(b[at..at + strata_persist::format::RECORD_LEN + len].to_vec());
        // Log records: what one change appends to a log (a set of `forged`,
        // a delete of `k3` and a flush, each after a set of `k3`).
        type Change = fn(&mut strata_store::Worker);
        let changes: [Change; 3] = [
            |w| {
                let _ = w.set(SetOp::Set, b"forged", 7, 0, b"a value nobody set");
            },
            |w| {
                w.delete(b"k3");
            },
            |w| {
                let _ = w.flush_all(None);
            },
        ];
        for change in changes {
            let fs = SimFs::new();
            let opts = RecoverOpts {
                workers: 1,
                strict: false,
                durability: Durability::Always,
                unix_now: Some(1_700_000_000),
                prealloc: 0,
            };
            let r = strata_persist::recover(Arc::new(fs.clone()), file, run::cfg(1 << 20, None), &opts).unwrap();
            let mut w = r.store.worker();
            let wal = r.wal.unwrap();
            let (_, path) = strata_persist::wal::log_files(&fs, file).pop().unwrap();
            let _ = w.set(SetOp::Set, b"k3", 0, 0, b"there");
            assert!(wal.sync_now());
            let from = fs.read_all(&path).unwrap().len();
            change(&mut w);
            assert!(wal.sync_now());
            let b = fs.read_all(&path).unwrap();
            let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
            assert!(end > from, "the change was not logged");
            out.push(b[from..end].to_vec());
        }
        out
    })
}

/// The mode a seed runs in, within a test's durability.
/// Seeds from here step the wall clock back between lifetimes
/// (`Mode::clock_back`); the others keep the schedules their counts were
/// tuned on.
const CLOCK_BACK_FROM: u64 = 1_000;
const CLOCK_BACK_SEEDS: u64 = 4;

fn mode(seed: u64, durability: Durability) -> Mode {
    Mode {
        durability,
        workers: 1 + (seed % 3) as usize,
        flash: seed % 4 == 3,
        tight: seed % 4 == 1,
        clock_back: seed >= CLOCK_BACK_FROM,
    }
}

/// Runs one schedule: the I/O operations it did, and what it verified.
fn schedule(seed: u64, crash_at: u64, durability: Durability) -> Result<(u64, Counts), String> {
    let mut sim = Sim::new(seed, crash_at, mode(seed, durability), forged());
    match sim.run() {
        Ok(()) => Ok((sim.ops(), std::mem::take(&mut sim.counts))),
        Err(_) if sim.stopped_by_eviction => {
            sim.counts.evicted_stops = 1;
            Ok((sim.ops(), std::mem::take(&mut sim.counts)))
        }
        Err(Failure(why)) => Err(format!(
            "seed {seed} crash at {crash_at} ({:?}): {why}\n  trace: {}",
            mode(seed, durability),
            sim.trace.join(" | ")
        )),
    }
}

fn add(to: &mut Counts, c: &Counts) {
    to.schedules += 1;
    to.recoveries += c.recoveries;
    to.acked_verified += c.acked_verified;
    to.after_crash += c.after_crash;
    to.snapshots += c.snapshots;
    to.snapshot_writes += c.snapshot_writes;
    to.handed_off += c.handed_off;
    to.smaller_loads += c.smaller_loads;
    to.loose_segments += c.loose_segments;
    to.forged_values += c.forged_values;
    to.in_place += c.in_place;
    to.kills += c.kills;
    to.refused += c.refused;
    to.clock_checked += c.clock_checked;
    to.clock_caught_up += c.clock_caught_up;
    to.clock_from_log += c.clock_from_log;
    to.evicted_stops += c.evicted_stops;
}

fn seeds_from_env(default: u64) -> std::ops::Range<u64> {
    if let Some(s) = std::env::var("STRATA_SIM_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        return s..s + 1;
    }
    let n = std::env::var("STRATA_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let from = std::env::var("STRATA_SIM_FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    from..from + n
}

/// Every crash point of every seed; the totals of what was verified.
fn simulate(durability: Durability) -> Counts {
    simulate_seeds(durability, SEEDS)
}

fn simulate_seeds(durability: Durability, seeds: u64) -> Counts {
    simulate_range(durability, seeds_from_env(seeds))
}

fn simulate_range(durability: Durability, seeds: std::ops::Range<u64>) -> Counts {
    let started = std::time::Instant::now();
    let mut total = Counts::default();
    for seed in seeds {
        if let Some(at) = std::env::var("STRATA_SIM_AT").ok().and_then(|s| s.parse::<u64>().ok()) {
            let (_, c) = schedule(seed, at, durability).unwrap_or_else(|e| panic!("{durability:?}: {e}"));
            add(&mut total, &c);
            continue;
        }
        let (ops, c) = schedule(seed, u64::MAX, durability).unwrap_or_else(|e| panic!("{durability:?}: {e}"));
        add(&mut total, &c);
        for at in 0..ops {
            let (_, c) = schedule(seed, at, durability).unwrap_or_else(|e| panic!("{durability:?}: {e}"));
            add(&mut total, &c);
        }
    }
    eprintln!("crash simulator ({durability:?}): {total:?} in {:.1} s", started.elapsed().as_secs_f64());
    // A schedule stopped at an eviction checked only what came before it.
    assert!(
        one_seed() || total.evicted_stops * 20 <= total.schedules,
        "{durability:?}: more than one schedule in 20 stopped where a tight store evicted: {total:?}"
    );
    total
}

fn one_seed() -> bool {
    std::env::var("STRATA_SIM_SEED").is_ok()
}

/// Whether the default seeds run, which the coverage floors below are
/// measured on (other seeds draw other mixes: 7000-7039 made 543
/// overwrites in place under `always`, against a floor of 1,000).
fn default_seeds() -> bool {
    ["STRATA_SIM_SEED", "STRATA_SIM_SEEDS", "STRATA_SIM_FROM", "STRATA_SIM_AT"]
        .iter()
        .all(|v| std::env::var_os(v).is_none())
}

// Named to sort first: libtest starts tests in name order on two threads,
// so the longest (3,497 schedules) runs beside the other two (2,518 and
// 1,398) instead of after `interval`'s on the same thread (the binary:
// 96 s before, 91–93 s after).
#[test]
fn a_crash_at_any_point_loses_no_acknowledged_write() {
    let c = simulate_seeds(Durability::Always, ALWAYS_SEEDS);
    if default_seeds() {
        assert!(c.schedules >= 2_500, "only {} schedules", c.schedules);
        assert!(c.after_crash >= 2_000 && c.acked_verified >= 20_000 && c.clock_checked >= 2_000, "{c:?}");
        assert!(c.snapshot_writes > 50 && c.smaller_loads > 100 && c.forged_values > 100, "{c:?}");
        assert!(c.loose_segments > 0, "no load went item by item: {c:?}");
        assert!(c.in_place >= 1_000, "too few overwrites went in place: {c:?}");
    }
}

#[test]
fn interval_loses_nothing_written_at_a_kill_and_at_most_the_unsynced_at_a_power_loss() {
    let c = simulate_seeds(Durability::Interval, INTERVAL_SEEDS);
    if default_seeds() {
        assert!(c.schedules >= 800, "only {} schedules", c.schedules);
        assert!(c.after_crash >= 600 && c.kills >= 100 && c.acked_verified >= 5_000 && c.clock_checked >= 600, "{c:?}");
    }
}

#[test]
fn a_snapshot_restart_shows_the_state_at_its_cut() {
    let c = simulate(Durability::Off);
    if default_seeds() {
        assert!(c.schedules >= 1_500, "only {} schedules", c.schedules);
        assert!(
            c.after_crash >= 1_000 && c.snapshots >= 200 && c.snapshot_writes > 50 && c.clock_checked >= 500,
            "{c:?}"
        );
        // Tens of schedules' worth, not one: the check of what a hand-off
        // copies must not rest on a single event.
        assert!(c.handed_off >= 500, "too few segments of a cut were handed off: {c:?}");
        assert!(c.loose_segments > 100, "too few loads went item by item: {c:?}");
        assert!(c.in_place >= 1_000, "too few overwrites went in place: {c:?}");
    }
}

#[test]
fn after_the_wall_clock_goes_back_a_restart_resumes_from_the_latest_time_on_disk() {
    // Always takes few snapshots in these seeds (the log's time records
    // carry the clock), so its schedules are short: more of them.
    for (durability, n) in [(Durability::Always, CLOCK_BACK_SEEDS), (Durability::Off, CLOCK_BACK_SEEDS / 2)] {
        let seeds = if one_seed() { seeds_from_env(1) } else { CLOCK_BACK_FROM..CLOCK_BACK_FROM + n };
        let c = simulate_range(durability, seeds);
        if !one_seed() {
            assert!(c.after_crash >= 500 && c.clock_checked >= 1_000, "{durability:?}: {c:?}");
            assert!(c.clock_caught_up >= 100, "{durability:?}: no recovery resumed past a wall clock gone back: {c:?}");
            if durability != Durability::Off {
                assert!(c.clock_from_log >= 50, "no recovery's clock rested on the log alone: {c:?}");
            }
        }
    }
}

#[test]
fn a_schedule_reproduces_exactly() {
    let a = schedule(7, 40, Durability::Always).map(|(ops, c)| (ops, c.recoveries, c.acked_verified));
    let b = schedule(7, 40, Durability::Always).map(|(ops, c)| (ops, c.recoveries, c.acked_verified));
    assert_eq!(a, b);
}

#[test]
fn the_forged_records_are_whole_records() {
    // A snapshot record and three log records, each non-empty.
    let f = forged();
    assert_eq!(f.len(), 4);
    assert!(f.iter().all(|r| r.len() >= 12), "{:?}", f.iter().map(Vec::len).collect::<Vec<_>>());
}
