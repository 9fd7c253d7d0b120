//! Items on flash back to readers (the module doc of `tier`, "In"): a
//! plain read served from its record, settling a key before any other
//! operation, and the asynchronous reads of the I/O threads.

use super::*;

/// A record's epoch, write time and item length (what is kept of it
/// once the buffer holds only the item).
fn fields(r: record::Record<'_>) -> (u64, u32, usize) {
    (r.epoch, r.written, r.item.len())
}

/// How an operation stopped at a flash slot gets on: settling the key, or
/// a peek at its records (`peek.rs`).
type Resolve = fn(&mut Worker, &[u8], Reading) -> Result<Flow<()>, StoreError>;

/// What reading one flash slot back found.
pub(super) enum Back {
    /// The record, verified: its item's key hashes to the slot's tags;
    /// `gen` is its region's generation when it was read.
    Record { epoch: u64, written: u32, gen: u64 },
    /// Nothing to bring back: damaged, unreadable, or another key's.
    Bad,
    /// The region was reclaimed during the read: look again.
    Moved,
    /// Asked of the I/O threads; the operation waits for it.
    Pending(Ticket),
}

impl Worker {
    /// With [`FlashTier::every_write`] (a test setting): `key`, just
    /// written by a storage command or incr/decr, goes to flash at once, so
    /// that the next request for it reads it from there (as if its segment
    /// had been evicted meanwhile). Only in builds with the `test-hooks`
    /// feature: production builds have no such check on the write path.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn flash_every_write(&mut self, key: &[u8]) {
        let store = self.store.clone();
        if !store.config().flash.as_ref().is_some_and(|t| t.every_write) {
            return;
        }
        let loc = store.index().locate(key);
        {
            let st = store.index().lock(loc.stripe);
            let Some((_, s)) = store.find(&st, loc, key) else { return };
            let Some(it) = store.item_at(s).filter(|it| store.flash_eligible(it)) else { return };
            store.batch_for_flash(&mut self.active, s, &it, loc, false);
        }
        store.flush_flash(&mut self.active);
    }

    /// Serves a read that changes nothing (no touch, no token to hand out)
    /// straight from flash, leaving the item there, as memcached's extstore
    /// does, but for every `ext_recache_rate`th read (if `recache`), which
    /// brings hot items back to memory.
    pub(crate) fn read_flash(
        &mut self,
        key: &[u8],
        opts: &crate::types::ReadOpts,
        reading: Reading,
        recache: bool,
    ) -> Flow<FlashRead> {
        let store = self.store.clone();
        let Some(tier) = store.config().flash.as_ref() else { return Flow::Ready(FlashRead::Settle) };
        if opts.touch.is_some() {
            return Flow::Ready(FlashRead::Settle);
        }
        // Reading synchronously, a recache is decided before the read (it
        // reads the record itself); with the I/O threads, once the record
        // is in hand, so that a read that waited for it counts once and the
        // recache uses the bytes read.
        let rate = if recache { store.flash_recache_rate() } else { 0 };
        if self.reads.is_none() && self.recache_due(rate) {
            return Flow::Ready(FlashRead::Recache);
        }
        let log = &tier.log;
        let loc = store.index().locate(key);
        let mut candidates = std::mem::take(&mut self.flash_candidates);
        store.flash_candidates(loc, &mut candidates);
        let mut buf = std::mem::take(&mut self.flash_buf);
        let mut hit = Flow::Ready(FlashRead::Settle);
        for &(s, seen) in &candidates {
            let (epoch, written, gen) = match self.read_back(log, loc, (s, seen), &mut buf, reading) {
                Back::Record { epoch, written, gen } => (epoch, written, gen),
                Back::Pending(t) => {
                    hit = Flow::Wait(t);
                    break;
                }
                Back::Bad | Back::Moved => break,
            };
            let Some(it) = parse_item(&buf) else { break };
            if it.key() != key {
                // Another key's record with the same 22 tag bits.
                continue;
            }
            let now = store.clock().now();
            if epoch <= store.epochs().flushed()
                || Clock::is_expired(it.expiry(), now)
                || crate::read::wins_token(opts, &it)
            {
                break;
            }
            if self.reads.is_some() && self.recache_due(rate) {
                // Settling reads this record again: from here.
                let addr = log.from_slot(flash::addr(s));
                if let Some(r) = self.reads.as_mut() {
                    r.keep(addr, gen, crate::aio::Rec { epoch, written, item: buf.clone() });
                }
                hit = Flow::Ready(FlashRead::Recache);
                break;
            }
            let mut st = store.index().lock(loc.stripe);
            let Some((pos, x)) = same_slot(&st, loc.bucket, s) else { break };
            if opts.bump && !flash::read(x) {
                st.set(pos, flash::with_read(x));
            }
            drop(st);
            let state = it.state();
            let key_at = it.header.header_len();
            let value_at = key_at + it.key().len();
            let view = ItemView {
                key: &[],
                value: &[],
                flags: it.flags(),
                cas: if store.config().cas { it.explicit_cas().unwrap_or(0) } else { 0 },
                expiry_before: it.expiry(),
                expiry: it.expiry(),
                fetched: flash::read(x) || state & crate::item::state::FETCHED != 0,
                written: if opts.written { written } else { 0 },
                stale: state & crate::item::state::STALE != 0,
                token_sent: state & crate::item::state::TOKEN_SENT != 0,
                won: false,
                created: false,
                binary_key: state & crate::item::state::KEY_BINARY != 0,
            };
            hit = Flow::Ready(FlashRead::Hit(FlashHit {
                view,
                key: key_at..value_at,
                value: value_at..value_at + it.value().len(),
            }));
            bump(&self.active.counters.flash_hits);
            break;
        }
        self.flash_buf = buf;
        self.flash_candidates = candidates;
        hit
    }

    /// Counts a read from flash: true on the `rate`th since the last
    /// recache, which brings its item back (a countdown).
    fn recache_due(&mut self, rate: u32) -> bool {
        if rate == 0 {
            return false;
        }
        self.flash_reads = self.flash_reads.saturating_sub(1);
        if self.flash_reads > 0 {
            return false;
        }
        self.flash_reads = rate;
        true
    }

    /// Runs `op` until it no longer stops at a flash slot, settling `key`
    /// in between (see the module doc), or until a read it needs must be
    /// waited for.
    pub(crate) fn with_flash<T>(
        &mut self,
        key: &[u8],
        reading: Reading,
        op: impl FnMut(&mut Worker) -> Result<Flow<T>, Stop>,
    ) -> Result<Flow<T>, StoreError> {
        self.retry_on_flash(key, reading, op, Worker::settle)
    }

    /// Runs `op` until it no longer stops at a flash slot, `resolve`
    /// (settling `key`, or a peek at its records) in between, or until a
    /// read must be waited for.
    pub(super) fn retry_on_flash<T>(
        &mut self,
        key: &[u8],
        reading: Reading,
        mut op: impl FnMut(&mut Worker) -> Result<Flow<T>, Stop>,
        resolve: Resolve,
    ) -> Result<Flow<T>, StoreError> {
        for _ in 0..MAX_RETRIES {
            match op(self) {
                Ok(flow) => return Ok(flow),
                Err(Stop::Failed(e)) => return Err(e),
                Err(Stop::OnFlash) => {
                    if let Flow::Wait(t) = resolve(self, key, reading)? {
                        return Ok(Flow::Wait(t));
                    }
                }
            }
        }
        Err(StoreError::Contended)
    }

    /// Brings every flash slot with `key`'s tags back into memory, or
    /// unlinks it if it is dead or damaged; stops at the first record that
    /// must be waited for.
    pub(crate) fn settle(&mut self, key: &[u8], reading: Reading) -> Result<Flow<()>, StoreError> {
        let store = self.store.clone();
        let Some(log) = store.flash_log() else { return Ok(Flow::Ready(())) };
        let loc = store.index().locate(key);
        let mut candidates = std::mem::take(&mut self.flash_candidates);
        store.flash_candidates(loc, &mut candidates);
        let mut buf = std::mem::take(&mut self.flash_buf);
        let mut r = Ok(Flow::Ready(()));
        for &c in &candidates {
            r = self.bring_back(log, loc, c, &mut buf, reading);
            if !matches!(r, Ok(Flow::Ready(()))) {
                break;
            }
        }
        self.flash_buf = buf;
        self.flash_candidates = candidates;
        r
    }

    /// Reads the record flash slot `s` points at, its item's bytes into
    /// `buf`: from the worker's ready records, from the I/O threads (the
    /// operation then waits: [`Back::Pending`]), or here and now. `gen` is
    /// its region's generation when the slot was seen under its lock.
    pub(super) fn read_back(
        &mut self,
        log: &Flash,
        loc: Loc,
        (s, gen): (u64, u64),
        buf: &mut Vec<u8>,
        reading: Reading,
    ) -> Back {
        let addr = log.from_slot(flash::addr(s));
        let region = log.region_of(addr);
        // A production build always reads a cached record inline; only a
        // test build may send every read to the threads.
        let inline =
            !cfg!(feature = "test-hooks") || self.store.config().flash.as_ref().is_some_and(|t| t.read_cached_inline);
        // Synchronously (no I/O threads, or a read that must not wait), from
        // the records in hand, from the page cache, or by the I/O threads.
        let (epoch, written) = match self.reads.as_mut().map(|r| (r.lookup(addr, gen, buf), reading.synchronous(addr)))
        {
            Some((Cached::Record { epoch, written }, _)) => (epoch, written),
            Some((Cached::Bad(Failed::Device), _)) => return Back::Bad,
            Some((Cached::Bad(Failed::Record), _)) => return self.confirm_bad(log, loc, (s, gen), &"no record there"),
            Some((Cached::Absent, false)) => {
                let read =
                    if inline { log.read_cached(addr, gen, buf).map(fields) } else { Err(ReadError::WouldBlock) };
                match self.record_read(log, read, loc, (s, gen), buf) {
                    Ok(r) => r,
                    Err(Some(back)) => return back,
                    Err(None) => {
                        let Some(r) = self.reads.as_mut() else { return Back::Bad };
                        let c = &self.active.counters;
                        bump(if r.request(addr, gen) { &c.flash_reads_async } else { &c.flash_reads_coalesced });
                        return Back::Pending(Ticket(addr));
                    }
                }
            }
            None | Some((Cached::Absent, true)) => {
                let read = log.read(addr, gen, buf).map(fields);
                match self.record_read(log, read, loc, (s, gen), buf) {
                    Ok(r) => r,
                    Err(back) => return back.unwrap_or(Back::Bad),
                }
            }
        };
        if log.generation(region) != gen {
            return Back::Moved;
        }
        let Some(it) = parse_item(buf) else { return self.confirm_bad(log, loc, (s, gen), &"not an item") };
        if !self.written_for(loc, s, &it) {
            // Not what this slot was written for: a slot left behind by a
            // region that could not be read when it was reclaimed, or
            // another record written there since.
            return self.confirm_bad(log, loc, (s, gen), &"another key's record");
        }
        Back::Record { epoch, written, gen }
    }

    /// A read of flash slot `s` (its region at generation `gen` when seen)
    /// that found no record of its key: damage, or the region written
    /// over since. A region's reclaim holds the log's writer from its
    /// first unlink to the last repoint of the records it writes again, so
    /// under the writer (then the bucket lock, the order the reclaim
    /// takes them in) the slot tells: still there, its region still at
    /// `gen`, and the record still failing a read (one written again at
    /// its own place passes: [`Worker::reads_sound`]), the record is
    /// damaged (counted, logged, `Back::Bad`); else the operation looks
    /// again (`Back::Moved`). A read of a record
    /// written again at the head, its slot not yet repointed, read as
    /// damaged and had its slot unlinked before (design/flash.md).
    fn confirm_bad(&self, log: &Flash, loc: Loc, (s, gen): (u64, u64), why: &dyn std::fmt::Display) -> Back {
        let writer = log.writer();
        let still = same_slot(&self.store.index().lock(loc.stripe), loc.bucket, s).is_some();
        let region = log.region_of(log.from_slot(flash::addr(s)));
        let moved = !still || log.generation(region) != gen || self.reads_sound(log, loc, (s, gen));
        drop(writer);
        if moved {
            return Back::Moved;
        }
        log.note_damaged();
        warn_rate_limited("read failed, served as a miss", why);
        Back::Bad
    }

    /// Whether slot `s`'s record reads whole now, as `loc`'s key's (the
    /// log's writer held: nothing writes meanwhile). A reclaim gives its
    /// region a new generation as the head enters it and then writes the
    /// region's read records again from its start: the first of them land
    /// where they were, so their slots are repointed to the same value. A
    /// read between the new generation and that write found the old bytes
    /// and, the slot and generation as it saw them, was counted damaged
    /// (`tier_race_tests.rs`, once in 25 runs under load).
    fn reads_sound(&self, log: &Flash, loc: Loc, (s, gen): (u64, u64)) -> bool {
        let mut buf = Vec::new();
        let Ok(rec) = log.read(log.from_slot(flash::addr(s)), gen, &mut buf) else { return false };
        parse_item(rec.item).is_some_and(|it| self.written_for(loc, s, &it))
    }

    /// Whether `it`, read from flash slot `s` in `loc`'s chain, is an item
    /// of the key that slot was written for (its stripe, tag and index bits).
    fn written_for(&self, loc: Loc, s: u64, it: &Item<'_>) -> bool {
        let l = self.store.index().locate(it.key());
        (l.stripe, l.tag, l.ext) == (loc.stripe, slot::tag(s), flash::ext(s))
    }

    /// What a read of a record came to: its epoch and write time (the
    /// item's bytes left alone in `buf`), or what the read is instead
    /// (`None`: it would have to wait for the device).
    fn record_read(
        &self,
        log: &Flash,
        read: Result<(u64, u32, usize), ReadError>,
        loc: Loc,
        (s, gen): (u64, u64),
        buf: &mut Vec<u8>,
    ) -> Result<(u64, u32), Option<Back>> {
        let region = log.region_of(log.from_slot(flash::addr(s)));
        let (epoch, written, len) = match read {
            Ok(f) => f,
            Err(ReadError::WouldBlock) => return Err(None),
            Err(_) if log.generation(region) != gen => return Err(Some(Back::Moved)),
            Err(ReadError::Record(e)) => return Err(Some(self.confirm_bad(log, loc, (s, gen), &e))),
            Err(e) => {
                warn_rate_limited("read failed, served as a miss", &e);
                return Err(Some(Back::Bad));
            }
        };
        // Keep the item bytes only (the record starts the buffer).
        buf.drain(..record::HEADER_LEN);
        buf.truncate(len);
        Ok((epoch, written))
    }

    /// Brings the flash slot `s` (in `loc`'s chain, its region at
    /// generation `gen` then) back into memory.
    fn bring_back(
        &mut self,
        log: &Flash,
        loc: Loc,
        (s, gen): (u64, u64),
        buf: &mut Vec<u8>,
        reading: Reading,
    ) -> Result<Flow<()>, StoreError> {
        let store = self.store.clone();
        let c = self.active.counters.clone();
        let same = |st: &Stripe| same_slot(st, loc.bucket, s);
        let addr = log.from_slot(flash::addr(s));
        let read = self.read_back(log, loc, (s, gen), buf, reading);
        // Whatever happens next, nobody needs the record read for it again.
        if let (Some(r), false) = (self.reads.as_mut(), matches!(read, Back::Pending(_))) {
            r.forget(addr);
        }
        let done = Ok(Flow::Ready(()));
        let (epoch, written) = match read {
            Back::Pending(t) => return Ok(Flow::Wait(t)),
            Back::Moved => return done,
            Back::Bad => {
                store.unlink_flash_slot(loc, s, &c);
                return done;
            }
            Back::Record { epoch, written, .. } => (epoch, written),
        };
        let Some(it) = parse_item(buf) else { return done };
        let now = store.clock().now();
        if epoch <= store.epochs().flushed() || Clock::is_expired(it.expiry(), now) {
            store.unlink_flash_slot(loc, s, &c);
            return done;
        }
        let len = it.header.total_len();
        let sizes = (len, store.class_len_of(&it, crate::store::sizes(&it).1));
        let (seg, off) = match self.active.reserve(&store, ttl_class(it.expiry(), now), sizes, written) {
            Ok(r) => r,
            Err(e) => {
                if e == StoreError::OutOfMemory {
                    bump(&c.flash_oom);
                }
                return Err(e);
            }
        };
        // SAFETY: freshly reserved by this worker in its active segment.
        let dst = unsafe { store.arena().bytes_mut(seg, off, len) };
        dst.copy_from_slice(it.bytes());
        store.note_expiry(seg, it.expiry());
        let mut st = store.index().lock(loc.stripe);
        let Some((pos, x)) = same(&st).filter(|_| !store.frozen(seg)) else {
            // Gone meanwhile, or a snapshot's cut froze the segment (nothing
            // goes into it any more, `cut.rs`): the operation runs again.
            drop(st);
            self.active.unreserve(&store, seg, off, len);
            return done;
        };
        // Unread: the read that asked for it counts itself (`mg`'s `h`
        // says whether it was read before).
        let back = slot::pack(slot::tag(x), 0, seg, store.granules(off));
        st.set(pos, back);
        store.unaccount_replaced(&mut st, x, back);
        store.account(&mut st, back);
        bump(&c.flash_hits);
        bump(&c.flash_recached);
        add(&c.bytes_copied, len as u64);
        done
    }
}

/// Asynchronous reads, for the server (see `aio.rs`).
impl Worker {
    /// Hands this worker's reads from flash to the I/O threads: an
    /// operation that needs a record not yet read returns [`Flow::Wait`]
    /// instead of waiting for the disk (with [`Reading::MayWait`]), and
    /// `wake` is called (from an I/O thread) when a read is done. False
    /// (reads stay synchronous) without the flash tier or its threads.
    pub fn enable_async_flash(&mut self, wake: Box<dyn Fn() + Send + Sync>) -> bool {
        let Some(pool) = self.store.aio() else { return false };
        self.reads = Some(crate::aio::Reads::new(pool, wake));
        true
    }

    /// Takes the reads finished since the last call, and a wait for
    /// memory that ended ([`Ticket::MEMORY`]); the tickets they were for
    /// into `out` (operations waiting for them can run again).
    pub fn completions(&mut self, out: &mut Vec<Ticket>) {
        if let Some(r) = self.reads.as_mut() {
            r.completions(out);
        }
        self.memory_completions(out);
    }

    /// Asks for the flash records of those `keys` that are only on flash,
    /// so that the reads of a pipeline or a multi-get overlap rather than
    /// wait one after another. Only a hint: nothing waits for them.
    pub fn prefetch_flash(&mut self, keys: &[&[u8]]) {
        let store = self.store.clone();
        let (Some(log), Some(r)) = (store.flash_log(), self.reads.as_mut()) else { return };
        let c = &self.active.counters;
        let mut candidates = std::mem::take(&mut self.flash_candidates);
        for key in keys {
            let loc = store.index().locate(key);
            candidates.clear();
            {
                let st = store.index().lock(loc.stripe);
                if store.find(&st, loc, key).is_some() {
                    continue;
                }
                st.for_each_in_chain(loc.bucket, |s| {
                    if is_candidate(s, loc, st.table_bits()) {
                        candidates.push((s, slot_generation(log, s)));
                    }
                });
            }
            for &(s, gen) in &candidates {
                let addr = log.from_slot(flash::addr(s));
                if !r.known(addr) && r.request(addr, gen) {
                    bump(&c.flash_reads_async);
                }
            }
        }
        self.flash_candidates = candidates;
    }
}
