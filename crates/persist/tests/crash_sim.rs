//! The crash simulator (issue 30, DESIGN §7 "How that is shown"): a seeded
//! workload against a real store with a real durability log and real
//! snapshots, on a file system in memory that loses power ([`SimFs`]), with
//! the machine stopped at every I/O operation in turn.
//!
//! A *schedule* is a seed and a crash point. The seed draws the workload:
//! several runs of the "process" (sets with and without TTLs, deletes,
//! incr, append, touch, flush_all; group commits; the log file filled with
//! zeros ahead of its writer, a few KiB at a time, so that records go over
//! zeros and past them and crashes land inside fills; snapshots with writes
//! going on while they copy; clean shutdowns and kill -9), each followed by
//! a recovery exactly as the server's start does it (snapshot load, log
//! replay, a new log file). The crash point is the I/O operation at which
//! the power goes; unsynced bytes are then dropped or torn as the seed
//! says, and the machine comes back.
//!
//! After every recovery, each key the workload touched must hold its last
//! acknowledged state or the state after one of the changes made since
//! (those were in flight: the crash may have kept them), never anything
//! else; a key whose TTL ran out while the server was down must be gone.
//! Recovery itself must never fail on what a crash leaves.
//!
//! `cargo test` runs [`SEEDS`] seeds with every crash point of each (5,000
//! schedules and more); `STRATA_SIM_SEEDS=N` runs more, `STRATA_SIM_SEED=S`
//! one seed, and a failure names the seed and crash point that reproduce it.

// Test code: a panic is how a test fails (clippy.toml allows unwrap in
// #[test] functions; these helpers live beside them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use strata_io::sim::{Rng, SimFs};
use strata_persist::{checkpoint, load, read_header, Durability, RecoverOpts, Wal};
use strata_store::{Clock, Config, SetOp, Store, Worker};

const T0: i64 = 1_700_000_000;
/// Seeds `cargo test` runs, each at every crash point.
const SEEDS: u64 = 10;
/// Runs of the process per schedule (each ends in a shutdown or a crash).
const RUNS: usize = 3;
const KEYS: usize = 12;
/// Fills of the log ahead of its writer that completed, in all schedules
/// (the simulator must reach them).
static FILLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A key's value as a client would see it: bytes, flags, expiry.
type Val = Option<(Vec<u8>, u32, u32)>;

#[derive(Default, Clone)]
struct KeyState {
    /// The state after the last change a client was told of.
    acked: Val,
    /// States after changes made since, not yet acknowledged, in order,
    /// each with its log position.
    pending: Vec<(u64, Val)>,
}

fn cfg() -> Config {
    // Small segments, so that a few requests fill one: segments are sealed,
    // cleaned and copied forward within a schedule of tens of requests.
    Config { memory_limit: 4 << 20, segment_size: 4 << 10, item_size_max: 4 << 10, hash_power: 8, ..Config::default() }
}

fn file() -> PathBuf {
    PathBuf::from("/sim/strata.snapshot")
}

struct Failure(String);

/// One running "process": its store, worker and log.
struct Proc {
    store: Arc<Store>,
    w: Worker,
    /// With `--durability always`; none in the snapshot-only mode.
    wal: Option<Arc<Wal>>,
}

/// Recovery as the server's start does it: `strata_persist::recover`, the
/// same call, with the log filled `prealloc` bytes ahead (the server's
/// 64 MiB would be most of a schedule's time). Err(None) if the
/// machine went down meanwhile, Err(Some(why)) if recovery failed on what a
/// crash left.
fn recover(fs: &SimFs, unix_now: i64, durability: Durability, prealloc: u64) -> Result<Proc, Option<String>> {
    let opts = RecoverOpts { workers: 1, strict: false, durability, unix_now: Some(unix_now), prealloc };
    let r = strata_persist::recover(Arc::new(fs.clone()), &file(), cfg(), &opts).map_err(|e| {
        if fs.is_dead() {
            None
        } else {
            Some(e.to_string())
        }
    })?;
    if fs.is_dead() {
        // A read that failed is only damage to the loader; the machine
        // went down during recovery all the same.
        return Err(None);
    }
    if std::env::var_os("STRATA_SIM_VERBOSE").is_some() {
        eprintln!("recovered: {:?} {:?}", r.loaded, r.replayed);
    }
    let wal = r.wal;
    if durability != Durability::Off && wal.is_none() {
        return Err(Some("no log opened".to_string()));
    }
    let w = r.store.worker();
    Ok(Proc { store: r.store, w, wal })
}

fn read(w: &mut Worker, k: &[u8]) -> Val {
    w.get(k, |it| (it.value.to_vec(), it.flags, it.expiry))
}

struct Sim {
    seed: u64,
    rng: Rng,
    fs: SimFs,
    model: HashMap<Vec<u8>, KeyState>,
    unix_now: i64,
    /// What the schedule did, for a failure's report.
    trace: Vec<String>,
    /// Every request in the trace (`STRATA_SIM_VERBOSE=1`, to study a seed).
    verbose: bool,
    ops_done: u64,
    /// `--durability always`, or snapshots alone (`off`).
    durability: Durability,
    /// Bytes of zeros filled ahead of the log's writer (per seed).
    prealloc: u64,
    /// Snapshot-only mode: every state each key had this run, after which
    /// request (numbered by `ops_done`); the state at the run's start is
    /// the model's `acked`.
    history: HashMap<Vec<u8>, Vec<(u64, Val)>>,
    /// Snapshot-only mode: this run's snapshots, as the requests before
    /// their start and before their end, and whether they were written.
    snaps: Vec<(u64, u64, bool)>,
}

impl Sim {
    fn key(&mut self) -> Vec<u8> {
        format!("k{}", self.rng.below(KEYS as u64)).into_bytes()
    }

    /// One client request; its change (if any) is pending until a group
    /// commit covers its log position.
    fn op(&mut self, store: &Store, w: &mut Worker) {
        self.ops_done += 1;
        let k = self.key();
        let roll = self.rng.below(100);
        let now = store.clock().now();
        let ttl = if self.rng.chance(20) { store.clock().expiry(1) } else { 0 };
        match roll {
            0..=44 => {
                let len =
                    if self.rng.chance(15) { 500 + self.rng.below(3000) } else { 1 + self.rng.below(40) } as usize;
                let v: Vec<u8> = (0..len).map(|i| b'a' + ((self.ops_done as usize + i) % 26) as u8).collect();
                let flags = self.rng.below(1000) as u32;
                let _ = w.set(SetOp::Set, &k, flags, ttl, &v);
            }
            45..=59 => {
                w.delete(&k);
            }
            60..=64 => {
                // A counter to count on: a request of its own.
                let _ = w.set(SetOp::Set, &k, 0, 0, b"10");
            }
            65..=69 => {
                let _ = w.arith(&k, true, 1 + self.rng.below(5));
            }
            70..=84 => {
                let _ = w.set(SetOp::Append, &k, 0, 0, b"+x");
            }
            85..=95 => {
                let _ = w.touch(&k, if self.rng.chance(50) { 0 } else { now + 1 });
            }
            _ => {
                let Ok(at) = store.flush_all(None) else {
                    // Refused: the log has failed, so nothing was flushed.
                    self.trace.push("flush_all refused".into());
                    return;
                };
                self.trace.push(format!("flush_all @{at}"));
                for (k, st) in self.model.iter_mut() {
                    st.pending.push((at, None));
                    self.history.entry(k.clone()).or_default().push((self.ops_done, None));
                }
                return;
            }
        }
        let at = w.take_journaled();
        let after = read(w, &k);
        if self.verbose {
            self.trace.push(format!("op{roll} {} @{at} -> {}", String::from_utf8_lossy(&k), short(&after)));
        }
        self.history.entry(k.clone()).or_default().push((self.ops_done, after.clone()));
        let st = self.model.entry(k).or_default();
        if at > 0 {
            st.pending.push((at, after));
        }
    }

    /// A group commit: what the log holds on disk is acknowledged.
    fn commit(&mut self, wal: Option<&Arc<Wal>>) {
        let Some(wal) = wal else { return };
        if !wal.sync_now() {
            return;
        }
        let durable = wal.durable();
        if self.verbose {
            self.trace.push(format!("commit @{durable}"));
        }
        for st in self.model.values_mut() {
            let upto = st.pending.iter().take_while(|(at, _)| *at <= durable).count();
            if upto > 0 {
                st.acked = st.pending[upto - 1].1.clone();
                st.pending.drain(..upto);
            }
        }
    }

    /// Checks a recovered store against the model, then takes what it
    /// holds as acknowledged (the next run starts from it).
    fn check(&mut self, p: &mut Proc, crashed: bool) -> Result<(), Failure> {
        let now = p.store.clock().now();
        let live = |v: &Val| v.as_ref().filter(|(_, _, e)| *e == 0 || *e > now).cloned();
        let mut keys: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        keys.sort();
        for k in keys {
            let got = read(&mut p.w, &k);
            let st = &self.model[&k];
            let mut allowed: Vec<Val> = vec![live(&st.acked)];
            if self.durability == Durability::Off {
                allowed = self.snapshot_states(&k, &st.acked, crashed).iter().map(live).collect();
            } else if crashed {
                allowed.extend(st.pending.iter().map(|(_, v)| live(v)));
            } else if let Some((_, v)) = st.pending.last() {
                // A clean stop writes everything: the last change is kept.
                allowed = vec![live(v)];
            }
            if !allowed.contains(&got) {
                return Err(Failure(format!(
                    "key {} after {}: got {:?}, allowed {:?}",
                    String::from_utf8_lossy(&k),
                    if crashed { "a crash" } else { "a clean stop" },
                    short(&got),
                    allowed.iter().map(short).collect::<Vec<_>>()
                )));
            }
            self.model.insert(k, KeyState { acked: got, pending: Vec::new() });
        }
        self.history.clear();
        self.snaps.clear();
        Ok(())
    }

    /// Snapshot-only mode: the states `k` may have after a restart. The
    /// snapshot on disk is the last one written, or one attempted after it
    /// (a crash after its rename may keep it); each holds every key as it
    /// was at some moment between that snapshot's start and end. Before
    /// any snapshot of this run is whole, the one from before the run
    /// (which gave the run its start state, `base`) may be the one.
    fn snapshot_states(&self, k: &[u8], base: &Val, crashed: bool) -> Vec<Val> {
        let hist = self.history.get(k).map_or(&[][..], |h| &h[..]);
        let at = |i: u64| hist.iter().rev().find(|(n, _)| *n <= i).map_or(base.clone(), |(_, v)| v.clone());
        let last_ok = self.snaps.iter().rposition(|s| s.2);
        let mut out = Vec::new();
        if last_ok.is_none() {
            out.push(base.clone());
        }
        let candidates = &self.snaps[last_ok.unwrap_or(0)..];
        for &(start, end, ok) in candidates {
            if !crashed && !ok {
                continue;
            }
            out.push(at(start));
            out.extend(hist.iter().filter(|(n, _)| *n > start && *n <= end).map(|(_, v)| v.clone()));
        }
        out
    }

    /// A snapshot while the process serves: the log switches files, and
    /// writes go on between the segment copies, as on a live server.
    fn snapshot(&mut self, p: &mut Proc) {
        let writes = self.rng.below(12);
        let fs = self.fs.clone();
        let (store, wal) = (p.store.clone(), p.wal.clone());
        let start = self.ops_done;
        let mut saver = Live { sim: self, w: &mut p.w, wal: wal.as_ref(), store: &store, writes };
        let r = checkpoint(&store, &fs, &file(), wal.as_deref(), &mut saver);
        self.snaps.push((start, self.ops_done, r.is_ok()));
        self.trace.push(format!("snapshot {}", if r.is_ok() { "ok" } else { "failed" }));
        if self.verbose && r.is_ok() {
            // What the snapshot alone brings back, against the live store.
            let clock = Clock::manual(store.clock().unix_now());
            let h = read_header(&fs, &file()).ok().flatten();
            let clock = h
                .and_then(|h| Clock::resume_at(store.clock().unix_now(), h.process_started, h.now, false))
                .unwrap_or(clock);
            let s2 = Store::new(cfg(), Arc::new(clock)).unwrap();
            let rep = load(&s2, &fs, &file(), 1, 0, false);
            let mut w2 = s2.worker();
            for i in 0..KEYS {
                let k = format!("k{i}").into_bytes();
                let (a, b) = (read(&mut p.w, &k), read(&mut w2, &k));
                if a != b {
                    self.trace.push(format!("snapshot differs on k{i}: live {} loaded {}", short(&a), short(&b)));
                }
            }
            self.trace.push(format!("{rep:?}"));
        }
    }

    /// A clean stop: the log written out, a snapshot at shutdown.
    fn shutdown(&mut self, p: Proc) {
        let Proc { store, w, wal } = p;
        // The workers stop first, sealing what they wrote (as the server's do).
        drop(w);
        if let Some(wal) = &wal {
            let _ = wal.flush();
        }
        self.commit(wal.as_ref());
        let mut saver = AtStop { wal: wal.as_ref() };
        let r = checkpoint(&store, &self.fs, &file(), wal.as_deref(), &mut saver);
        self.snaps.push((self.ops_done, self.ops_done, r.is_ok()));
        self.trace.push(format!("shutdown {}", if r.is_ok() { "ok" } else { "failed" }));
    }

    fn run(&mut self) -> Result<(), Failure> {
        let mut clean_stop = false;
        for run in 0..RUNS {
            // Start (recover), retrying after a crash inside recovery.
            let mut crashed_in_recovery = false;
            let mut proc_ = loop {
                match recover(&self.fs, self.unix_now, self.durability, self.prealloc) {
                    Ok(p) => break p,
                    Err(Some(why)) => return Err(Failure(format!("recovery failed in run {run}: {why}"))),
                    Err(None) => {
                        self.fs.power_loss(self.rng.next_u64());
                        crashed_in_recovery = true;
                    }
                }
            };
            self.trace.push(format!("run {run} started (ops so far {})", self.fs.ops()));
            self.check(&mut proc_, !clean_stop || crashed_in_recovery)?;
            let n = 5 + self.rng.below(30);
            let mut died = false;
            for _ in 0..n {
                match self.rng.below(100) {
                    0..=64 => self.op(&proc_.store.clone(), &mut proc_.w),
                    // The server's helper thread, at any moment between
                    // commits (its fill and the writer never overlap).
                    65..=69 => {
                        if let Some(wal) = &proc_.wal {
                            let filled = wal.prepare();
                            FILLS.fetch_add(u64::from(filled), std::sync::atomic::Ordering::Relaxed);
                            if self.verbose {
                                self.trace.push(format!("prepare {filled}"));
                            }
                        }
                    }
                    70..=91 => self.commit(proc_.wal.as_ref()),
                    _ => self.snapshot(&mut proc_),
                }
                if self.fs.is_dead() {
                    died = true;
                    break;
                }
            }
            self.commit(proc_.wal.as_ref());
            clean_stop = !died && !self.fs.is_dead() && self.rng.chance(40);
            if clean_stop {
                self.shutdown(proc_);
                if self.fs.is_dead() {
                    clean_stop = false;
                }
            } else {
                drop(proc_);
            }
            // kill -9 or the power: what was not synced may go.
            self.fs.power_loss(self.rng.next_u64());
            // Down for a few seconds: one-second TTLs run out.
            self.unix_now += 2 + self.rng.below(3) as i64;
        }
        let mut last = match recover(&self.fs, self.unix_now, self.durability, self.prealloc) {
            Ok(p) => p,
            Err(why) => return Err(Failure(format!("final recovery failed: {why:?}"))),
        };
        self.check(&mut last, !clean_stop)
    }
}

/// The saver of a snapshot taken while serving.
struct Live<'a> {
    sim: &'a mut Sim,
    w: &'a mut Worker,
    wal: Option<&'a Arc<Wal>>,
    store: &'a Arc<Store>,
    writes: u64,
}

impl strata_persist::Saver for Live<'_> {
    fn begin(&mut self) -> u64 {
        let Some(wal) = self.wal else { return 0 };
        let n = wal.rotate().unwrap_or(0);
        if self.sim.verbose {
            self.sim.trace.push(format!("snapshot begins: log file {n} @{}", wal.appended().1));
        }
        n
    }

    fn seal(&mut self) {
        self.w.seal_active();
    }

    fn progress(&mut self, _bytes: u64) {
        for _ in 0..self.writes {
            self.sim.op(self.store, self.w);
            if self.sim.rng.chance(30) {
                self.sim.commit(self.wal);
            }
        }
    }
}

/// The saver of the snapshot at shutdown: nothing to seal.
struct AtStop<'a> {
    wal: Option<&'a Arc<Wal>>,
}

impl strata_persist::Saver for AtStop<'_> {
    fn begin(&mut self) -> u64 {
        self.wal.map_or(0, |w| w.rotate().unwrap_or(0))
    }

    fn seal(&mut self) {}
}

fn short(v: &Val) -> String {
    match v {
        None => "none".into(),
        Some((b, f, e)) => format!("{}{}b f{f} e{e}", String::from_utf8_lossy(&b[..b.len().min(8)]), b.len()),
    }
}

/// Runs one schedule; the number of I/O operations it did.
fn schedule(seed: u64, crash_at: u64, durability: Durability) -> Result<u64, String> {
    let fs = SimFs::new();
    fs.crash_at(crash_at);
    let mut sim = Sim {
        seed,
        rng: Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        fs: fs.clone(),
        model: HashMap::new(),
        unix_now: T0,
        trace: Vec::new(),
        verbose: std::env::var_os("STRATA_SIM_VERBOSE").is_some(),
        ops_done: 0,
        durability,
        // 2-10 KiB: some records are 3.5 KiB, so writes land past the
        // zeros, over them, and across their end.
        prealloc: 2048 + seed.wrapping_mul(0x9E37_79B9) % 8192,
        history: HashMap::new(),
        snaps: Vec::new(),
    };
    match sim.run() {
        Ok(()) => Ok(fs.ops()),
        Err(Failure(why)) => {
            Err(format!("seed {} crash at {crash_at}: {why}\n  trace: {}", sim.seed, sim.trace.join(" | ")))
        }
    }
}

/// Every crash point of one seed: the schedule without a crash first,
/// which says how many I/O operations there are, then one per operation.
fn every_crash_point(seed: u64, durability: Durability) -> Result<u64, String> {
    if let Some(at) = std::env::var("STRATA_SIM_AT").ok().and_then(|s| s.parse::<u64>().ok()) {
        return schedule(seed, at, durability).map(|_| 1);
    }
    let total = schedule(seed, u64::MAX, durability)?;
    for at in 0..total {
        schedule(seed, at, durability)?;
    }
    Ok(total + 1)
}

fn seeds_from_env(default: u64) -> std::ops::Range<u64> {
    if let Some(s) = std::env::var("STRATA_SIM_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        return s..s + 1;
    }
    let n = std::env::var("STRATA_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let from = std::env::var("STRATA_SIM_FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    from..from + n
}

fn simulate(durability: Durability, min: u64) {
    let started = std::time::Instant::now();
    let mut schedules = 0u64;
    for seed in seeds_from_env(SEEDS) {
        match every_crash_point(seed, durability) {
            Ok(n) => schedules += n,
            Err(e) => panic!("{durability:?}: {e}"),
        }
    }
    eprintln!("crash simulator ({durability:?}): {schedules} schedules in {:.1} s", started.elapsed().as_secs_f64());
    assert!(schedules >= min || std::env::var("STRATA_SIM_SEED").is_ok(), "only {schedules} schedules");
}

#[test]
fn no_acknowledged_write_is_lost_at_any_crash_point() {
    simulate(Durability::Always, 5_000);
    let fills = FILLS.load(std::sync::atomic::Ordering::Relaxed);
    assert!(fills > 100 || std::env::var("STRATA_SIM_SEED").is_ok(), "only {fills} fills ahead of the log");
}

#[test]
fn a_snapshot_restart_shows_a_state_between_its_start_and_end() {
    simulate(Durability::Off, 1_000);
}

#[test]
fn a_schedule_reproduces_exactly() {
    let a = schedule(7, 40, Durability::Always);
    let b = schedule(7, 40, Durability::Always);
    assert_eq!(a, b);
}
