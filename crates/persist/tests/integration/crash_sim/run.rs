//! One schedule: process lifetimes of a store with its log and snapshots
//! on a [`SimFs`], the workload drawn from the seed, the machine stopped at
//! the chosen I/O operation, and every recovery checked against the model.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use strata_flash::Flash;
use strata_io::sim::{Rng, SimFs};
use strata_persist::{checkpoint, Durability, Loaded, RecoverOpts, Wal};
use strata_store::{
    ArithOutcome, Config, Delete, DeleteOutcome, Evicted, EvictionWatcher, FlashTier, Flow, Reading, SetOp, Store,
    StoreError, StoreOutcome, Worker,
};

use super::model::{apply, visible, History, Op, Outcome, State, Val, MAX_VALUE};

mod workload;

/// Process lifetimes per schedule (each ends in a clean stop or a crash).
pub const RUNS: usize = 3;
/// Keys the workload uses (and `forged`, which it never sets).
pub const KEYS: u64 = 16;
const SEG: usize = 4 << 10;
/// How often a step of the workload starts with an early seal.
const SEAL_PERCENT: u64 = 30;
/// How often a lifetime ends with its keys spread over segments.
const SPREAD_PERCENT: u64 = 35;

/// What a schedule runs with, drawn from its seed.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    pub durability: Durability,
    /// Workers writing in turn (each has its own segments).
    pub workers: usize,
    /// `-o ext_path` on the simulated disk, and a memory limit that sends
    /// items there.
    pub flash: bool,
    /// A memory limit overwrites fill with dead versions (without flash):
    /// the cleaner takes segments of a snapshot's cut before it copies them.
    pub tight: bool,
    /// The wall clock is stepped back now and then between lifetimes.
    pub clock_back: bool,
}

impl Mode {
    /// Whether workers seal their segments early now and then (as one left
    /// idle does for a starved writer): not where memory is tight, since
    /// part-filled segments there would be evicted.
    fn seals(&self) -> bool {
        !self.tight && !self.flash
    }

    /// The memory limit a lifetime runs with. Tight: 29 segments of 4 KiB
    /// less the index (about 15 left: `Store::segment_budget`; the workload
    /// keeps its large values within them, `TIGHT_LARGE_LIVE`), where up
    /// to three workers keep one open each
    /// (`Store::open_cap`), so that overwrites during a snapshot make the
    /// cleaner take segments of its cut (hand-offs: 2,938 in the
    /// snapshot-only schedules; at 128 KiB, with the room one more open
    /// segment per worker took under the old floor of two, none).
    fn mem(&self) -> usize {
        if self.flash {
            96 << 10
        } else if self.tight {
            116 << 10
        } else {
            4 << 20
        }
    }
}

/// Totals over all schedules, so that a run proves how much it checked.
#[derive(Debug, Default)]
pub struct Counts {
    pub schedules: u64,
    pub recoveries: u64,
    /// Changes acknowledged before a crash and found after it.
    pub acked_verified: u64,
    /// Recoveries after a crash or power loss.
    pub after_crash: u64,
    /// Snapshots written, and with writes made while they copied.
    pub snapshots: u64,
    pub snapshot_writes: u64,
    /// Segments of a cut handed off by the thread that freed them.
    pub handed_off: u64,
    /// Recoveries into a smaller memory limit than the run's.
    pub smaller_loads: u64,
    /// Snapshot segments those restored item by item (no room to restore
    /// them whole): snapshots whose segments hold a few items each, sealed
    /// early (`Mode::seals`), hold more segments than a limit the live
    /// items fit in restores whole.
    pub loose_segments: u64,
    /// Values written that hold a whole snapshot or log record.
    pub forged_values: u64,
    /// Overwrites the store wrote over their old version, in place.
    pub in_place: u64,
    /// Crashes that were kill -9 (the rest: power loss).
    pub kills: u64,
    /// Changes refused because the log had failed (the disk filled).
    pub refused: u64,
    /// Recoveries that brought items back, whose clock was checked to
    /// resume the model's timeline.
    pub clock_checked: u64,
    /// Of those, recoveries whose clock resumed past the wall clock's time
    /// (it had gone back): the latest time on disk held it.
    pub clock_caught_up: u64,
    /// Of those, recoveries whose clock only the log's time records held
    /// (no snapshot's header carried the time).
    pub clock_from_log: u64,
    /// Schedules stopped where a tight store evicted (three workers' open
    /// segments and copy targets leave little of 15 segments): the model
    /// knows no eviction, so what came before was checked and the rest is
    /// not run. Held to one schedule in 20 by the tests.
    pub evicted_stops: u64,
}

pub struct Failure(pub String);

/// Told of every eviction: the check is exact only if there is none.
#[derive(Default)]
struct Evictions(Mutex<u64>);

impl EvictionWatcher for Evictions {
    fn wanted(&self) -> bool {
        true
    }
    fn evicted(&self, _e: &Evicted<'_>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }
}

/// One running "process".
struct Proc {
    store: Arc<Store>,
    workers: Vec<Worker>,
    wal: Option<Arc<Wal>>,
    evictions: Arc<Evictions>,
}

pub struct Sim<'a> {
    pub seed: u64,
    rng: Rng,
    /// Draws for early seals, apart from `rng`'s: the seals change how
    /// items lie in segments, not which requests a seed makes.
    seal_rng: Rng,
    /// Draws for stepping the wall clock back, apart from `rng`'s too.
    clock_rng: Rng,
    /// Whether a crash is a kill -9 or a power loss, drawn from the seed
    /// and the crash point: every crash point of a seed that falls in one
    /// stretch of I/O without draws between (a snapshot's writes, a
    /// commit) would otherwise share `rng`'s next draw, and how many such
    /// stretches there are changes with how the store lays out segments.
    end_rng: Rng,
    fs: SimFs,
    mode: Mode,
    unix_now: i64,
    /// The model's timeline: the unix time of server time 0, which every
    /// expiry in the history is on (`None` before the first start). A
    /// recovery that brings anything back must resume it (the wal module
    /// doc, "Time"); only one that brings nothing back may start another.
    timeline: Option<i64>,
    /// This lifetime's server time (manual clocks: it moves only between
    /// lifetimes), once checked against the bounds below.
    life_now: u32,
    /// The latest server time a record on disk surely carries (an
    /// acknowledged change's, a written snapshot's): a recovery resumes
    /// at or after it, however far the wall clock went back.
    floor_now: u32,
    /// The latest server time any lifetime ran at: no record carries more.
    peak_now: u32,
    /// The latest server time a written snapshot's header carries.
    snap_now: u32,
    /// This lifetime's states (it starts from what the last recovery left).
    hist: History,
    /// This lifetime's snapshots: (index of the state at its cut, written).
    snaps: Vec<(usize, bool)>,
    /// The memory limit this lifetime runs with.
    mem: usize,
    /// The index's bytes (counted inside the memory limit).
    index_bytes: usize,
    /// Changes of this lifetime acknowledged (durable under `always`).
    acked: usize,
    /// Under `interval`: the history's prefix whose replies went out once
    /// written (a kill -9 keeps it; a power loss may not).
    acked_written: usize,
    /// The last crash was a kill -9: what was written stays.
    killed: bool,
    forged: &'a [Vec<u8>],
    pub trace: Vec<String>,
    verbose: bool,
    pub counts: Counts,
    /// The run stopped because a tight store evicted ([`Counts::evicted_stops`]).
    pub stopped_by_eviction: bool,
}

/// The wall clock at the first start.
pub(super) const FIRST_UNIX: i64 = 1_700_000_000;

fn file() -> PathBuf {
    PathBuf::from("/sim/strata.snapshot")
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

/// A value of `len` bytes made of `seed`.
fn value(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + ((seed as usize + i) % 26) as u8).collect()
}

pub fn cfg(mem: usize, flash: Option<FlashTier>) -> Config {
    // Small segments, so that a few requests fill one: segments are sealed,
    // cleaned, evicted to flash and copied within a schedule of tens of
    // requests.
    Config { memory_limit: mem, segment_size: SEG, item_size_max: SEG, hash_power: 8, flash, ..Config::default() }
}

/// The flash tier on the simulated disk: 8 regions of 1 MiB, far more than
/// a schedule writes (the ring never comes round: nothing is evicted).
fn flash_tier(fs: &SimFs) -> std::io::Result<FlashTier> {
    use strata_io::Backend;
    let dev = fs.open_device(Path::new("/sim/flash"), 8 << 20)?;
    let log = Flash::new(&strata_flash::Config { region_size: 1 << 20, max_record: SEG + 256 }, vec![dev])
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let tier = FlashTier::new(Arc::new(log));
    Ok(FlashTier { min_item: 1, write_buffer: 16 << 10, io_threads: 0, recache_rate: 1, ..tier })
}

impl<'a> Sim<'a> {
    pub fn new(seed: u64, crash_at: u64, mode: Mode, forged: &'a [Vec<u8>]) -> Sim<'a> {
        let fs = SimFs::new();
        fs.crash_at(crash_at);
        Sim {
            seed,
            rng: Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            seal_rng: Rng::new(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1),
            clock_rng: Rng::new(seed.wrapping_mul(0x94D0_49BB_1331_11EB) | 1),
            end_rng: Rng::new((seed ^ crash_at.rotate_left(29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) | 1),
            fs,
            mode,
            unix_now: FIRST_UNIX,
            timeline: None,
            life_now: 0,
            floor_now: 0,
            peak_now: 0,
            snap_now: 0,
            hist: History::start(State::new()),
            snaps: Vec::new(),
            mem: mode.mem(),
            index_bytes: 0,
            acked: 0,
            acked_written: 0,
            killed: false,
            forged,
            trace: Vec::new(),
            verbose: std::env::var_os("STRATA_SIM_VERBOSE").is_some(),
            counts: Counts::default(),
            stopped_by_eviction: false,
        }
    }

    pub fn ops(&self) -> u64 {
        self.fs.ops()
    }

    /// Server time in this lifetime, on the model's timeline.
    fn now(&self) -> u32 {
        self.life_now
    }

    fn life_now(&self) -> u32 {
        self.life_now
    }

    fn peak_now(&self) -> u32 {
        self.peak_now
    }

    /// The recovered store's clock against the model's (the wal module doc,
    /// "Time"): on the model's timeline, at or after the wall clock's time
    /// on it and the latest time a record on disk surely carries, and at
    /// most the latest any lifetime ran at (or the wall clock's). Only a
    /// recovery that brings nothing back may start another timeline.
    /// Returns the time the new lifetime runs at.
    fn check_clock(&mut self, p: &Proc, got: &State) -> Result<u32, Failure> {
        let (started, now) = (p.store.clock().process_started(), p.store.clock().now());
        let Some(t) = self.timeline else { return Ok(now) };
        // What the lifetime that ended left on disk with its time.
        if self.acked_after_crash() > 0 || self.snaps.iter().any(|s| s.1) {
            self.floor_now = self.floor_now.max(self.life_now);
        }
        if self.snaps.iter().any(|s| s.1) {
            self.snap_now = self.snap_now.max(self.life_now);
        }
        let wall = u32::try_from(self.unix_now - t).unwrap_or(0);
        let (lo, hi) = (wall.max(self.floor_now), wall.max(self.peak_now));
        if got.is_empty() {
            // Nothing came back: nothing is on the old timeline.
            return Ok(now);
        }
        if started != t || now < lo || now > hi {
            return Err(Failure(format!(
                "the recovered clock stands at {now} on the timeline from {started}; the model's allows {lo}..={hi} on {t}"
            )));
        }
        self.counts.clock_checked += 1;
        self.counts.clock_caught_up += u64::from(now > wall);
        self.counts.clock_from_log += u64::from(now > wall.max(self.snap_now));
        Ok(now)
    }

    fn note(&mut self, what: impl FnOnce() -> String) {
        if self.verbose {
            self.trace.push(what());
        }
    }

    /// Recovery as the server's start does it; `Ok(None)` if the machine
    /// went down during it.
    fn recover(&mut self, mem: usize) -> Result<Option<Proc>, Failure> {
        let flash = if self.mode.flash {
            match flash_tier(&self.fs) {
                Ok(t) => Some(t),
                Err(_) if self.fs.is_dead() => return Ok(None),
                Err(e) => return Err(Failure(format!("flash tier: {e}"))),
            }
        } else {
            None
        };
        let workers = self.mode.workers;
        let prealloc = 2048 + self.seed.wrapping_mul(0x9E37_79B9) % 8192;
        let opts = RecoverOpts {
            workers,
            strict: false,
            durability: self.mode.durability,
            unix_now: Some(self.unix_now),
            prealloc,
        };
        let r = match strata_persist::recover(Arc::new(self.fs.clone()), &file(), cfg(mem, flash), &opts) {
            Ok(r) => r,
            Err(_) if self.fs.is_dead() => return Ok(None),
            Err(e) => return Err(Failure(format!("recovery failed: {e}"))),
        };
        if self.fs.is_dead() {
            return Ok(None);
        }
        let (loaded, replayed, st) = (format!("{:?}", r.loaded), r.replayed, r.store.stats());
        self.index_bytes = self.index_bytes.max(st.index_bytes as usize);
        self.note(|| format!("recovered at -m {mem}: {loaded}; log {replayed:?}; {} items", st.curr_items));
        if let Loaded::Loaded(rep) = &r.loaded {
            self.counts.loose_segments += rep.loose_segments;
            if rep.evicted > 0 || rep.skipped_segments > 0 {
                return Err(Failure(format!("the load left live items out: {rep:?}")));
            }
        }
        let evictions = Arc::new(Evictions::default());
        r.store.on_evict(evictions.clone());
        let store = r.store;
        let workers = (0..workers).map(|_| store.worker()).collect();
        Ok(Some(Proc { store, workers, wal: r.wal, evictions }))
    }

    /// The key space a recovered store holds (the workload's keys and the
    /// one no client ever sets).
    fn read_all(p: &mut Proc) -> State {
        let mut s = State::new();
        let w = &mut p.workers[0];
        for k in (0..KEYS).map(key).chain([b"forged".to_vec()]) {
            if let Some(x) = w.get(&k, |it| Val { v: it.value.to_vec(), flags: it.flags, exp: it.expiry }) {
                s.insert(k, x);
            }
        }
        s
    }

    /// Checks a recovered store against the model: its whole key space must
    /// be one state the history allows (`crashed`: after a crash, not a
    /// clean stop). The next lifetime starts from it.
    fn check(&mut self, p: &mut Proc, crashed: bool) -> Result<(), Failure> {
        let got = Self::read_all(p);
        let now = self.check_clock(p, &got)?;
        let last = self.hist.len();
        let found = match self.mode.durability {
            Durability::Off => {
                self.snapshot_states(crashed).into_iter().find(|&i| self.hist.find(&got, i, i, now).is_some())
            }
            _ => {
                // Everything acknowledged is there; of what was not, any
                // prefix of the log (a clean stop writes it all).
                let acked = if crashed { self.acked_after_crash() } else { last };
                let found = self.hist.find(&got, acked, last, now);
                if crashed && found.is_some() {
                    self.counts.acked_verified += acked as u64;
                }
                found
            }
        };
        if found.is_none() {
            let want: Vec<String> = self.allowed(crashed, now);
            return Err(Failure(format!(
                "after {}: the store holds {} — not a state the log allows; allowed (first and last): {want:?}",
                if crashed { "a crash" } else { "a clean stop" },
                short(&got)
            )));
        }
        self.counts.recoveries += 1;
        self.counts.after_crash += u64::from(crashed);
        // From here the history's times are the recovered clock's.
        self.timeline = Some(p.store.clock().process_started());
        (self.life_now, self.peak_now) = (now, self.peak_now.max(now));
        self.hist = History::start(got);
        self.snaps.clear();
        self.acked = 0;
        self.acked_written = 0;
        Ok(())
    }

    /// Snapshots alone: the states a restart may load. The file on disk is
    /// the last snapshot written, or one attempted after it (a crash after
    /// its rename keeps it); before any is written in this lifetime, the one
    /// it started from.
    fn snapshot_states(&self, crashed: bool) -> Vec<usize> {
        let last_ok = self.snaps.iter().rposition(|s| s.1);
        let mut out = Vec::new();
        if last_ok.is_none() {
            out.push(0);
        }
        for &(cut, ok) in &self.snaps[last_ok.unwrap_or(0)..] {
            if ok || crashed {
                out.push(cut);
            }
        }
        out
    }

    fn allowed(&self, crashed: bool, now: u32) -> Vec<String> {
        let idx: Vec<usize> = match self.mode.durability {
            Durability::Off => self.snapshot_states(crashed),
            _ => (if crashed { self.acked_after_crash() } else { self.hist.len() }..=self.hist.len()).collect(),
        };
        let show = |i: &usize| format!("#{i} {}", short(&visible(&self.hist.states[*i], now)));
        match (idx.first(), idx.last()) {
            (Some(a), Some(b)) if a != b => vec![show(a), show(b)],
            (Some(a), _) => vec![show(a)],
            _ => vec![],
        }
    }
}

/// A state, briefly.
pub fn short(s: &State) -> String {
    s.iter()
        .map(|(k, x)| {
            format!(
                "{}={}{}b/f{}/e{}",
                String::from_utf8_lossy(k),
                String::from_utf8_lossy(&x.v[..x.v.len().min(4)]),
                x.v.len(),
                x.flags,
                x.exp
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The saver of a snapshot taken while serving: asks the workers to seal a
/// few at a time, and makes requests between the segment copies.
struct Live<'s, 'a> {
    sim: &'s mut Sim<'a>,
    p: &'s mut Proc,
    writes: u64,
    /// Workers sealed so far for this snapshot.
    sealed: usize,
    failed: Option<Failure>,
}

impl strata_persist::Saver for Live<'_, '_> {
    fn begin(&mut self) -> u64 {
        let Some(wal) = &self.p.wal else { return 0 };
        wal.rotate().unwrap_or(0)
    }

    fn seal(&mut self) {
        // One or two more workers each time it asks; the rest stay open
        // (and keep the snapshot waiting) until it asks again.
        let n = self.p.workers.len();
        let more = 1 + self.sim.rng.below(2) as usize;
        for w in self.p.workers.iter_mut().skip(self.sealed).take(more) {
            w.seal_active();
        }
        self.sealed = (self.sealed + more).min(n);
    }

    fn progress(&mut self, _bytes: u64) {
        for _ in 0..self.writes {
            if self.failed.is_some() {
                return;
            }
            if let Err(f) = self.sim.op(self.p) {
                self.failed = Some(f);
            }
            if self.sim.rng.chance(30) {
                self.sim.commit(self.p);
            }
        }
    }
}
