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
}

impl Mode {
    /// Whether workers seal their segments early now and then (as one left
    /// idle does for a starved writer): not where memory is tight, since
    /// part-filled segments there would be evicted.
    fn seals(&self) -> bool {
        !self.tight && !self.flash
    }

    /// The memory limit a lifetime runs with.
    fn mem(&self) -> usize {
        if self.flash {
            96 << 10
        } else if self.tight {
            128 << 10
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
    /// Crashes that were kill -9 (the rest: power loss).
    pub kills: u64,
    /// Changes refused because the log had failed (the disk filled).
    pub refused: u64,
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
    fs: SimFs,
    mode: Mode,
    unix_now: i64,
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
}

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
            fs,
            mode,
            unix_now: 1_700_000_000,
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
        }
    }

    pub fn ops(&self) -> u64 {
        self.fs.ops()
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
        let now = p.store.clock().now();
        let got = Self::read_all(p);
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

impl Sim<'_> {
    /// A value for a set: mostly short, some up to 3.5 KB, and now and
    /// then one that holds whole snapshot and log records (of a key no
    /// client sets), alone or among other bytes.
    fn draw_value(&mut self) -> Vec<u8> {
        let n = self.hist.len() as u64;
        if !self.forged.is_empty() && self.rng.chance(4) {
            self.counts.forged_values += 1;
            let f = &self.forged[self.rng.below(self.forged.len() as u64) as usize];
            // Some of them large, so that a power cut tears one after a
            // copy more often.
            let pad = if self.rng.chance(30) { 200 + self.rng.below(600) } else { self.rng.below(20) };
            let mut v = value(n, pad as usize);
            for _ in 0..1 + self.rng.below(6) {
                if v.len() + f.len() > MAX_VALUE - 64 {
                    break;
                }
                v.extend_from_slice(f);
            }
            return v;
        }
        // Tight: mostly large values, so that overwrites fill memory.
        let large = if self.mode.tight { 60 } else { 15 };
        let len = if self.rng.chance(large) { 500 + self.rng.below(3000) } else { 1 + self.rng.below(40) };
        value(n, len as usize)
    }

    /// Draws a request from the model's state now.
    fn draw(&mut self, now: u32) -> Op {
        let k = key(self.rng.below(KEYS));
        let exp = if self.rng.chance(20) { now + 1 } else { 0 };
        let room = MAX_VALUE - self.hist.now().get(&k).map_or(0, |x| x.v.len());
        match self.rng.below(100) {
            0..=39 => Op::Set { k, v: self.draw_value(), flags: self.rng.below(1000) as u32, exp },
            40..=44 => Op::Add { k, v: self.draw_value(), flags: 7, exp },
            45..=59 => Op::Delete { k },
            60..=64 => Op::Set { k, v: b"10".to_vec(), flags: 0, exp: 0 },
            65..=69 => Op::Incr { k, delta: 1 + self.rng.below(5) },
            70..=84 if room > 2 => Op::Append { k, data: b"+x".to_vec() },
            70..=84 => Op::Delete { k },
            85..=96 => Op::Touch { k, exp: if self.rng.chance(50) { 0 } else { now + 1 } },
            _ => Op::FlushAll,
        }
    }

    /// One client request on a worker the seed picks, checked against the
    /// model; a change goes into the history with its log position.
    fn op(&mut self, p: &mut Proc) -> Result<(), Failure> {
        // The machine is down: so is the process, which makes no request.
        if self.fs.is_dead() {
            return Ok(());
        }
        let now = p.store.clock().now();
        let op = self.draw(now);
        let wi = self.rng.below(p.workers.len() as u64) as usize;
        self.request(p, op, wi, now)
    }

    /// `op` on worker `wi`, checked against the model.
    fn request(&mut self, p: &mut Proc, op: Op, wi: usize, now: u32) -> Result<(), Failure> {
        // A failed log refuses every change and nothing else (issue 41,
        // failure 3): what the model says a request would change must be
        // refused, with nothing changed.
        let log_failed = p.wal.as_ref().is_some_and(|w| w.failed());
        let w = &mut p.workers[wi];
        let got = match &op {
            Op::Set { k, v, flags, exp } | Op::Add { k, v, flags, exp } => {
                let how = if matches!(op, Op::Set { .. }) { SetOp::Set } else { SetOp::Add };
                match w.set(how, k, *flags, *exp, v) {
                    Ok(StoreOutcome::Stored) => Outcome::Stored,
                    Ok(StoreOutcome::NotStored) => Outcome::NotStored,
                    Err(StoreError::NotLogged) => Outcome::Refused,
                    other => return Err(Failure(format!("{op:?} answered {other:?}"))),
                }
            }
            Op::Append { k, data } => match w.set(SetOp::Append, k, 0, 0, data) {
                Ok(StoreOutcome::Stored) => Outcome::Stored,
                Ok(StoreOutcome::NotStored) => Outcome::NotStored,
                Err(StoreError::NotLogged) => Outcome::Refused,
                other => return Err(Failure(format!("{op:?} answered {other:?}"))),
            },
            Op::Incr { k, delta } => match w.arith(k, true, *delta) {
                Ok(ArithOutcome::Value(v)) => Outcome::Value(v),
                Ok(ArithOutcome::NotFound) => Outcome::NotFound,
                Ok(ArithOutcome::NonNumeric) => Outcome::NonNumeric,
                Err(StoreError::NotLogged) => Outcome::Refused,
                other => return Err(Failure(format!("{op:?} answered {other:?}"))),
            },
            Op::Delete { k } => match w.delete_with(k, &Delete::default(), Reading::Now) {
                Ok(Flow::Ready(DeleteOutcome::Deleted)) => Outcome::Deleted(true),
                Ok(Flow::Ready(DeleteOutcome::NotFound)) => Outcome::Deleted(false),
                Err(StoreError::NotLogged) => Outcome::Refused,
                other => return Err(Failure(format!("{op:?} answered {other:?}"))),
            },
            Op::Touch { k, exp } => match w.touch(k, *exp) {
                Ok(t) => Outcome::Touched(t),
                Err(StoreError::NotLogged) => Outcome::Refused,
                Err(e) => return Err(Failure(format!("{op:?} failed: {e}"))),
            },
            Op::FlushAll => match w.flush_all(None) {
                Ok(()) => Outcome::Flushed,
                Err(StoreError::NotLogged) => Outcome::Refused,
                Err(e) => return Err(Failure(format!("flush_all failed: {e}"))),
            },
        };
        if log_failed || got == Outcome::Refused {
            let mut scratch = self.hist.now().clone();
            let (_, changed) = apply(&mut scratch, &op, now);
            // A request that would change nothing may be refused or served.
            if changed && got != Outcome::Refused {
                return Err(Failure(format!("{} was made after the log failed: {got:?}", op_name(&op))));
            }
            if got == Outcome::Refused && !log_failed && !p.wal.as_ref().is_some_and(|w| w.failed()) {
                return Err(Failure(format!("{} refused, the log working", op_name(&op))));
            }
            if got == Outcome::Refused {
                self.counts.refused += 1;
                let _ = p.workers[wi].take_journaled();
                self.note(|| format!("w{wi} {} -> refused", op_name(&op)));
                return Ok(());
            }
        }
        let at = w.take_journaled();
        let mut next = self.hist.now().clone();
        let (want, changed) = apply(&mut next, &op, now);
        if got != want {
            let st = p.store.stats();
            return Err(Failure(format!(
                "{} answered {got:?}; the model says {want:?} (evictions {}, items {})",
                op_name(&op),
                st.evictions,
                st.curr_items
            )));
        }
        if changed && self.mode.durability != Durability::Off && at == 0 {
            return Err(Failure(format!("{op:?} changed the cache and was not journaled")));
        }
        self.note(|| format!("w{wi} {} -> {got:?} @{at}", op_name(&op)));
        if changed {
            self.hist.push(next, at);
        }
        Ok(())
    }

    /// What must survive the last crash: what was synced, and after a
    /// kill -9 also what `interval` acknowledged once written.
    fn acked_after_crash(&self) -> usize {
        if self.killed {
            self.acked.max(self.acked_written)
        } else {
            self.acked
        }
    }

    /// Now and then a worker seals its segment early, as one left idle does
    /// for a starved writer: segments then hold a few items each, so that a
    /// snapshot holds more segments than a smaller limit restores whole and
    /// the load goes on item by item (issue 41, failure 2). No I/O.
    fn seal_early(&mut self, p: &mut Proc) {
        if self.mode.seals() && self.seal_rng.chance(SEAL_PERCENT) {
            let wi = self.seal_rng.below(p.workers.len() as u64) as usize;
            p.workers[wi].seal_active();
            self.note(|| format!("w{wi} sealed"));
        }
    }

    /// Every key set to a short value on a worker the draws pick, which
    /// seals its segment after each: a state whose live items lie one or
    /// two to a segment, so that a snapshot of it holds more segments than
    /// a smaller limit the items fit in restores whole (issue 41, failure
    /// 2: the old loader left those segments out). Memory only but for the
    /// log's records.
    fn spread(&mut self, p: &mut Proc) -> Result<(), Failure> {
        for i in 0..KEYS {
            if self.fs.is_dead() {
                break;
            }
            let now = p.store.clock().now();
            let wi = self.seal_rng.below(p.workers.len() as u64) as usize;
            let v = value(self.hist.len() as u64, 1 + self.seal_rng.below(8) as usize);
            self.request(p, Op::Set { k: key(i), v, flags: 0, exp: 0 }, wi, now)?;
            p.workers[wi].seal_active();
        }
        self.note(|| "spread".into());
        Ok(())
    }

    /// A group commit: what the log holds on disk is acknowledged. Under
    /// `interval` most are the writer's writes without a sync, whose
    /// replies go out all the same.
    fn commit(&mut self, p: &Proc) {
        let Some(wal) = &p.wal else { return };
        if self.mode.durability == Durability::Interval && self.rng.chance(75) {
            if wal.write_now() {
                let acked = self.hist.acked_upto(wal.acked());
                self.note(|| format!("written @{} acks #{acked}", wal.acked()));
                self.acked_written = self.acked_written.max(acked);
            }
            return;
        }
        let before = (wal.durable(), wal.failed());
        if !wal.sync_now() {
            self.note(|| format!("commit failed (durable {} failed {:?} before)", wal.durable(), before));
            return;
        }
        let acked = self.hist.acked_upto(wal.durable());
        self.note(|| format!("commit @{} acks #{acked}", wal.durable()));
        self.acked = self.acked.max(acked);
    }

    /// A snapshot while the process serves: the log switches files, the
    /// workers are asked to seal (a few at a time), and requests go on
    /// between the segment copies.
    fn snapshot(&mut self, p: &mut Proc) -> Result<(), Failure> {
        let writes = self.rng.below(if self.mode.tight { 30 } else { 12 });
        let (store, wal, fs) = (p.store.clone(), p.wal.clone(), self.fs.clone());
        let cut = self.hist.len();
        let mut saver = Live { sim: self, p, writes, sealed: 0, failed: None };
        let r = checkpoint(&store, &fs, &file(), wal.as_deref(), &mut saver);
        let failed = saver.failed.take();
        self.snaps.push((cut, r.is_ok()));
        if let Ok(rep) = &r {
            self.counts.snapshots += 1;
            self.counts.handed_off += rep.handed_off;
            if self.hist.len() > cut {
                self.counts.snapshot_writes += 1;
            }
        }
        self.trace.push(format!("snapshot at #{cut} {}", if r.is_ok() { "ok" } else { "failed" }));
        if self.verbose && r.is_ok() && !self.fs.is_dead() {
            self.compare_snapshot(&store, cut);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Verbose only: what the snapshot just written loads, against the
    /// model's state at its cut.
    fn compare_snapshot(&mut self, live: &Store, cut: usize) {
        let h = strata_persist::read_header(&self.fs, &file()).ok().flatten();
        let Some(clock) =
            h.and_then(|h| strata_store::Clock::resume_at(live.clock().unix_now(), h.process_started, h.now, false))
        else {
            return;
        };
        let Ok(s2) = Store::new(cfg(self.mem, None), Arc::new(clock)) else { return };
        let rep = strata_persist::load(&s2, &self.fs, &file(), 1, 0, false);
        let mut p = Proc { workers: vec![s2.worker()], store: s2, wal: None, evictions: Arc::default() };
        let got = Self::read_all(&mut p);
        let want = visible(&self.hist.states[cut], p.store.clock().now());
        if got != want {
            self.trace.push(format!("SNAPSHOT DIFFERS: loads {} / cut {} / {rep:?}", short(&got), short(&want)));
        }
    }

    /// A clean stop: the workers stop (sealing what they wrote), the log is
    /// written out, a snapshot at shutdown.
    fn shutdown(&mut self, p: Proc) {
        let Proc { store, workers, wal, .. } = p;
        drop(workers);
        if let Some(wal) = &wal {
            let _ = wal.flush();
            if wal.sync_now() {
                self.acked = self.hist.acked_upto(wal.durable());
            }
        }
        let cut = self.hist.len();
        let r = checkpoint(&store, &self.fs, &file(), wal.as_deref(), &mut || {});
        self.snaps.push((cut, r.is_ok()));
        self.trace.push(format!("shutdown {}", if r.is_ok() { "ok" } else { "failed" }));
    }

    /// Starts a process, retrying after a crash inside recovery; checks it.
    /// Recovers at `-m mem`, retrying after a crash inside recovery.
    fn recover_retrying(&mut self, mem: usize, crashed: &mut bool) -> Result<Proc, Failure> {
        loop {
            match self.recover(mem)? {
                Some(p) => return Ok(p),
                None => {
                    // A power loss: what a kill left written and recovery
                    // had not synced yet may go.
                    self.fs.power_loss(self.rng.next_u64());
                    self.killed = false;
                    *crashed = true;
                }
            }
        }
    }

    /// A memory limit the live items of any state of this lifetime fit
    /// in, with room to spare, but smaller than the one it ran at, if
    /// there is one: a load into it restores some segments item by item.
    /// Besides the items (twice their bytes) it holds what the store keeps
    /// inside `-m` whatever it holds: the index, and the segments a load
    /// has open at once (the restorer's and the log replay's, one per TTL
    /// class each; the workload's items fall in two), the cleaner's
    /// reserve, one spare: 8 (docs/limits.md, "what a restart keeps").
    /// With snapshots alone the items are those of a snapshot the recovery
    /// may load (`crashed`: after a crash); with the log, those of any state
    /// of the lifetime (a snapshot loads first, then the log replays).
    fn smaller_mem(&self, crashed: bool) -> Option<usize> {
        let live = |s: &State| s.iter().map(|(k, x)| k.len() + x.v.len() + 32).sum::<usize>();
        let states = match self.mode.durability {
            Durability::Off => self.snapshot_states(crashed),
            _ => (0..self.hist.states.len()).collect(),
        };
        let most = states.into_iter().map(|i| live(&self.hist.states[i])).max().unwrap_or(0);
        let mem = (self.index_bytes + 2 * most + 8 * SEG).next_multiple_of(SEG);
        (mem < self.mem).then_some(mem)
    }

    /// Starts a process, retrying after a crash inside recovery; checks it.
    /// Now and then a process loads into a smaller memory limit first (the
    /// snapshot holds more segments than it: a load must keep every live
    /// item), is checked, and is killed before it writes.
    fn start(&mut self, run: usize, crashed: bool) -> Result<Proc, Failure> {
        let mut crashed = crashed;
        if let Some(mem) = self.smaller_mem(crashed).filter(|_| self.rng.chance(30)) {
            self.counts.smaller_loads += 1;
            let mut p = self.recover_retrying(mem, &mut crashed)?;
            self.trace.push(format!("run {run} loaded at -m {mem} (I/O so far {})", self.fs.ops()));
            self.check(&mut p, crashed)?;
            drop(p);
            self.fs.kill();
            crashed = false;
        }
        let mem = self.mem;
        let mut p = self.recover_retrying(mem, &mut crashed)?;
        self.trace.push(format!("run {run} started at -m {mem} (I/O so far {})", self.fs.ops()));
        self.check(&mut p, crashed)?;
        Ok(p)
    }

    pub fn run(&mut self) -> Result<(), Failure> {
        let mut crashed = false;
        for run in 0..RUNS {
            let mut p = self.start(run, crashed)?;
            // Tight: enough writes that memory fills during snapshots.
            let n = if self.mode.tight { 30 + self.rng.below(60) } else { 5 + self.rng.below(40) };
            // Now and then the disk fills part-way (with the log: it then
            // refuses every change; snapshots fail), and the lifetime ends
            // in a crash as it would.
            let fill_at = (self.mode.durability != Durability::Off && self.rng.chance(15)).then(|| self.rng.below(n));
            for i in 0..n {
                if fill_at == Some(i) {
                    self.note(|| "the disk is full".into());
                    self.fs.set_full(true);
                }
                self.seal_early(&mut p);
                match self.rng.below(100) {
                    0..=64 => self.op(&mut p)?,
                    // The log's helper, at any moment between commits.
                    65..=69 => {
                        if let Some(wal) = &p.wal {
                            wal.prepare();
                        }
                    }
                    70..=89 => self.commit(&p),
                    _ => self.snapshot(&mut p)?,
                }
                if self.fs.is_dead() {
                    break;
                }
            }
            // Now and then the lifetime ends with its items spread over
            // segments, and often a snapshot of them.
            if self.mode.seals() && self.seal_rng.chance(SPREAD_PERCENT) && !self.fs.is_dead() {
                self.spread(&mut p)?;
                if self.seal_rng.chance(50) {
                    self.snapshot(&mut p)?;
                }
            }
            let evicted = (*p.evictions.0.lock().unwrap_or_else(|e| e.into_inner())).max(p.store.stats().evictions);
            if evicted > 0 {
                return Err(Failure(format!("{evicted} items were evicted: the check would not be exact")));
            }
            if !self.fs.is_dead() {
                self.commit(&p);
            }
            let clean = !self.fs.is_dead() && fill_at.is_none() && self.rng.chance(40);
            self.fs.set_full(false);
            if clean {
                self.shutdown(p);
            } else {
                drop(p);
            }
            crashed = !clean || self.fs.is_dead();
            self.killed = crashed && self.rng.chance(30);
            if self.killed {
                // kill -9: the machine stays up, what was written stays.
                self.counts.kills += 1;
                self.fs.kill();
            } else {
                self.fs.power_loss(self.rng.next_u64());
            }
            // Down for a few seconds: one-second TTLs run out.
            self.unix_now += 2 + self.rng.below(3) as i64;
        }
        let mut last = self.start(RUNS, crashed)?;
        drop(last.workers.drain(..));
        Ok(())
    }
}

fn op_name(op: &Op) -> String {
    let k = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    match op {
        Op::Set { k: key, v, exp, .. } => format!("set {} {}b e{exp}", k(key), v.len()),
        Op::Add { k: key, v, .. } => format!("add {} {}b", k(key), v.len()),
        Op::Append { k: key, .. } => format!("append {}", k(key)),
        Op::Incr { k: key, delta } => format!("incr {} {delta}", k(key)),
        Op::Delete { k: key } => format!("delete {}", k(key)),
        Op::Touch { k: key, exp } => format!("touch {} e{exp}", k(key)),
        Op::FlushAll => "flush_all".into(),
    }
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
