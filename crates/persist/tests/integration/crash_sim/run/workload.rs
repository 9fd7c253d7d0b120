//! A schedule's workload and lifetimes: requests drawn from the seed and
//! checked against the model as they are answered, commits, snapshots
//! taken while writers go on, clean stops and crashes, and the recoveries
//! between them (into a smaller `-m` now and then).

use super::*;

/// Large values (500 bytes or more) a tight store holds live at once: its
/// budget is about 15 segments of 4 KiB once the index is counted (`Mode::mem`),
/// of which three are open (one per worker), one a copy target and one
/// the cleaner's reserve.
const TIGHT_LARGE_LIVE: usize = 10;

impl Sim<'_> {
    /// A value for a set of `k`: mostly short, some up to 3.5 KB, and now
    /// and then one that holds whole snapshot and log records (of a key no
    /// client sets), alone or among other bytes.
    fn draw_value(&mut self, k: &[u8]) -> Vec<u8> {
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
        // Tight: mostly large values, so that overwrites fill memory; but
        // no more live at once than its segments hold, each alone in one
        // (unbounded, seeds 5009 and 5033 filled them and evicted, which
        // the model knows nothing of). Forged values are not held to it.
        let large = if self.mode.tight { 60 } else { 15 };
        let len = if self.rng.chance(large) { 500 + self.rng.below(3000) } else { 1 + self.rng.below(40) };
        let full = self.mode.tight && self.large_live(k) >= TIGHT_LARGE_LIVE;
        value(n, if full && len >= 500 { 1 + len % 40 } else { len } as usize)
    }

    /// Values of 500 bytes or more live now, but for `k`'s.
    fn large_live(&self, k: &[u8]) -> usize {
        self.hist.now().iter().filter(|(key, x)| key.as_slice() != k && x.v.len() >= 500).count()
    }

    /// Draws a request from the model's state now.
    fn draw(&mut self, now: u32) -> Op {
        let k = key(self.rng.below(KEYS));
        let exp = if self.rng.chance(20) { now + 1 } else { 0 };
        let room = MAX_VALUE - self.hist.now().get(&k).map_or(0, |x| x.v.len());
        // The layout of the key's value now: a set of the same length,
        // flags and expiry is written over it in place (`overwrite.rs`).
        // Not in the tight stores: there overwrites must leave dead
        // versions, which fill memory while a snapshot copies (hand-offs).
        let layout = self.hist.now().get(&k).map(|x| (x.v.len(), x.flags, x.exp != 0));
        match (self.rng.below(100), layout) {
            (33..=39, Some((len, flags, expires))) if !self.mode.tight => {
                let v = value(self.hist.len() as u64, len);
                Op::Set { k, v, flags, exp: if expires { now + 1 } else { 0 } }
            }
            (r, _) => self.draw_other(r, k, (now, exp), room),
        }
    }

    /// The request `r` of [`Sim::draw`] draws, but for an overwrite of the
    /// same layout.
    fn draw_other(&mut self, r: u64, k: Vec<u8>, (now, exp): (u32, u32), room: usize) -> Op {
        match r {
            0..=39 => Op::Set { v: self.draw_value(&k), k, flags: self.rng.below(1000) as u32, exp },
            40..=44 => Op::Add { v: self.draw_value(&k), k, flags: 7, exp },
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
    pub(super) fn op(&mut self, p: &mut Proc) -> Result<(), Failure> {
        // The machine is down: so is the process, which makes no request.
        if self.fs.is_dead() {
            return Ok(());
        }
        let now = self.now();
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
        // Nothing here may be evicted (the model knows no eviction): say
        // so at the request that evicted, with what memory held then.
        if *p.evictions.0.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
            self.stopped_by_eviction = self.mode.tight;
            return Err(Failure(format!("{} evicted an item ({})", op_name(&op), memory(&p.store))));
        }
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
                "{} answered {got:?}; the model says {want:?} (evictions {}, items {}; {})",
                op_name(&op),
                st.evictions,
                st.curr_items,
                memory(&p.store)
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
    pub(super) fn acked_after_crash(&self) -> usize {
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
            let now = self.now();
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
    pub(super) fn commit(&mut self, p: &Proc) {
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
            self.compare_snapshot(cut);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Verbose only: what the snapshot just written loads, against the
    /// model's state at its cut.
    fn compare_snapshot(&mut self, cut: usize) {
        let h = strata_persist::read_header(&self.fs, &file()).ok().flatten();
        let Some(clock) =
            h.and_then(|h| strata_store::Clock::resume_at(self.unix_now, h.process_started, h.now, false))
        else {
            return;
        };
        let Ok(s2) = Store::new(cfg(self.mem, None), Arc::new(clock)) else { return };
        let rep = strata_persist::load(&s2, &self.fs, &file(), 1, 0, false);
        let mut p = Proc { workers: vec![s2.worker()], store: s2, wal: None, evictions: Arc::default() };
        let got = Self::read_all(&mut p);
        let want = visible(&self.hist.states[cut], self.now());
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
                    // With the clock stepped back, few snapshots: the log's
                    // time records are then what a recovery's clock rests on.
                    _ if self.mode.clock_back
                        && self.mode.durability != Durability::Off
                        && !self.clock_rng.chance(10) => {}
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
                let m = memory(&p.store);
                self.stopped_by_eviction = self.mode.tight;
                return Err(Failure(format!("{evicted} items were evicted: the check would not be exact ({m})")));
            }
            self.counts.in_place += p.store.stats().overwritten_in_place;
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
            self.killed = crashed && self.end_rng.chance(30);
            if self.killed {
                // kill -9: the machine stays up, what was written stays.
                self.counts.kills += 1;
                self.fs.kill();
            } else {
                self.fs.power_loss(self.rng.next_u64());
            }
            // Down for a few seconds: one-second TTLs run out. Now and
            // then (`Mode::clock_back`) the wall clock is stepped back instead, even to before
            // the first start: recovery must resume no earlier than the
            // latest time on disk. Only after a lifetime that left its time
            // on disk and ran at the latest time any did: otherwise an item
            // a recovery found expired (and the model's history left out)
            // could be alive again at the earlier time the records allow.
            let durable = self.acked_after_crash() > 0 || self.snaps.iter().any(|s| s.1);
            if self.mode.clock_back && durable && self.life_now() == self.peak_now() && self.clock_rng.chance(40) {
                self.unix_now = (self.unix_now - 1 - self.clock_rng.below(8) as i64).max(FIRST_UNIX - 10);
            } else {
                self.unix_now += 2 + self.rng.below(3) as i64;
            }
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

/// What the store's memory held, for a failure that may be about it.
fn memory(store: &Store) -> String {
    let st = store.stats();
    format!(
        "{} bytes in {} items, {} dead; segments {} in use, {} free of {}; idle {} (free {}, open {}, sealed {}); last resort {}",
        st.bytes,
        st.curr_items,
        st.dead_bytes,
        st.segments_in_use,
        st.segments_free,
        st.segments_total,
        st.idle_bytes,
        st.idle_free_bytes,
        st.idle_open_bytes,
        st.idle_sealed_bytes,
        st.alloc_last_resort
    )
}
