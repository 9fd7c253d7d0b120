//! The semantic core: every protocol's requests, as [`strata_protocol::ops`]
//! values, run here against the store, and the stats counters are bumped
//! here, where the outcome is known. The classic text encoder
//! ([`crate::execution::dispatch`]) and the meta encoder ([`crate::execution::meta`]) only turn
//! outcomes into bytes, so a command's semantics exist once.

use strata_protocol::ops;
use strata_store::{
    Arith, ArithOutcome, Counted, Delete, DeleteOutcome, Flow, Found, Inspect, ItemView, ReadOpts, SetOp, StoreError,
    StoreOutcome, Stored, Write,
};

use crate::execution::ctx::Ctx;
use crate::observability::{inc, uri, watch};

/// memcached's name for a storage command, in `watch` lines.
pub(crate) fn store_cmd(mode: ops::Mode, cas: bool) -> &'static str {
    match mode {
        ops::Mode::Set if cas => "cas",
        ops::Mode::Set => "set",
        ops::Mode::Add => "add",
        ops::Mode::Replace => "replace",
        ops::Mode::Append => "append",
        ops::Mode::Prepend => "prepend",
    }
}

impl Ctx<'_> {
    /// Server-relative expiry of a client exptime (memcached's `realtime`).
    fn expiry(&self, exptime: i32) -> u32 {
        self.shared.store.clock().expiry(i64::from(exptime))
    }

    /// A read. `f` sees the item under its bucket lock; `None` on a miss.
    ///
    /// Every operation here returns [`Flow::Wait`] when it must wait for a
    /// read from flash: nothing was done or counted, and the executor
    /// hands the ticket up to the connection, which parks and runs the
    /// request again once the read is done (`conn/`). Stats are counted
    /// here, on the ready outcome only, so a request that waited counts
    /// once.
    pub fn get<R>(
        &mut self,
        op: &ops::Get<'_>,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Flow<Result<Option<R>, StoreError>> {
        let r = &op.read;
        let opts = ReadOpts {
            bump: r.bump,
            touch: r.touch.map(|t| self.expiry(t)),
            tokens: r.tokens,
            recache_before: r.recache.map(|t| self.expiry(t)),
            vivify: r.vivify.map(|t| self.expiry(t)),
            new_cas: r.new_cas,
            written: r.last_access,
        };
        // The value's length, for `watch fetchers`.
        let size = std::cell::Cell::new(0);
        let f = |it: ItemView<'_>| {
            size.set(it.value.len());
            f(it)
        };
        // The store's two-phase read: a small value in RAM is handed to `f`
        // under its bucket lock; a large or compressed one comes back as a
        // Fetch, read (and decompressed) here without the lock; one that
        // fails to decompress is a miss. (A value on flash that is not in
        // the page cache is read by the I/O threads: the store answers
        // `Wait` and the connection parks, `conn/`.)
        let mut f = Some(f);
        let res = match Flow::of(self.store.find(op.key.as_bytes(), &opts, self.reading, |it| f.take().map(|f| f(it))))
        {
            Flow::Wait(t) => return Flow::Wait(t),
            Flow::Ready(Ok(Found::Read(r))) => Ok(r),
            Flow::Ready(Ok(Found::Missing)) => Ok(None),
            Flow::Ready(Ok(Found::Fetch(fetch))) => Ok(f.take().and_then(|f| fetch.read(self.store, f))),
            Flow::Ready(Err(e)) => Err(e),
        };
        let s = self.stats;
        self.count_contention(&res);
        let hit = matches!(res, Ok(Some(_)));
        if self.shared.watchers.wants(watch::FETCHERS) {
            let key = op.key.as_bytes();
            self.log_get(key, hit.then(|| (self.shared.store.class_of(key.len(), size.get()), size.get())));
        }
        // memcached counts a touching read (touch, gat, mg T) as a touch only;
        // mg counts its misses as gets.
        match (r.touch.is_some(), hit) {
            (true, true) => (inc(&s.cmd_touch), inc(&s.touch_hits)),
            (true, false) if r.touch_miss_stats => (inc(&s.cmd_touch), inc(&s.touch_misses)),
            (false, true) => (inc(&s.cmd_get), inc(&s.get_hits)),
            (_, false) => (inc(&s.cmd_get), inc(&s.get_misses)),
        };
        Flow::Ready(res)
    }

    /// A `watch fetchers` line (memcached's `item_get`): the item's class
    /// and value length if found.
    fn log_get(&self, key: &[u8], found: Option<(usize, usize)>) {
        let (status, (clsid, size)) = match found {
            Some(f) => ("found", f),
            None => ("not_found", (0, 0)),
        };
        self.shared.watchers.log(
            watch::FETCHERS,
            format_args!("type=item_get key={} status={status} clsid={clsid} cfd={} size={}", uri(key), self.fd, size),
        );
    }

    /// For `watch fetchers`: the item a storage command or a delete is
    /// about to look up, without counting a read (memcached logs that
    /// lookup as an `item_get`). Logged by [`Ctx::log_lookup`] once the
    /// command is done, so a command run again after a flash read logs once.
    fn lookup_for_watch(&mut self, key: &[u8]) -> Option<Option<Inspect>> {
        self.shared.watchers.wants(watch::FETCHERS).then(|| self.store.inspect(key))
    }

    fn log_lookup(&self, key: &[u8], looked: Option<Option<Inspect>>) {
        if let Some(found) = looked {
            self.log_get(key, found.map(|i| (i.class, i.value_len)));
        }
    }

    /// A write of a whole value or an append/prepend.
    pub fn set(&mut self, op: &ops::Set<'_>) -> Flow<Result<Stored, StoreError>> {
        let s = self.stats;
        let w = Write {
            op: match op.mode {
                ops::Mode::Set => SetOp::Set,
                ops::Mode::Add => SetOp::Add,
                ops::Mode::Replace => SetOp::Replace,
                ops::Mode::Append => SetOp::Append,
                ops::Mode::Prepend => SetOp::Prepend,
            },
            key: op.key.as_bytes(),
            flags: op.flags,
            expiry: self.expiry(op.exptime),
            value: op.data,
            compare: op.compare,
            invalidate: op.invalidate,
            new_cas: op.new_cas,
            vivify: op.vivify.map(|t| self.expiry(t)),
            binary_key: op.binary_key,
        };
        let looked = self.lookup_for_watch(w.key);
        let r = match Flow::of(self.store.set_with(&w, self.reading)) {
            Flow::Wait(t) => return Flow::Wait(t),
            Flow::Ready(r) => r,
        };
        inc(&s.cmd_set);
        // memcached refuses a value over -I before it looks the key up.
        if !matches!(r, Err(StoreError::TooLarge)) {
            self.log_lookup(w.key, looked);
        }
        if self.shared.watchers.wants(watch::MUTATIONS) {
            let status = match &r {
                Ok(st) => match st.outcome {
                    StoreOutcome::Stored => "stored",
                    StoreOutcome::NotStored => "not_stored",
                    StoreOutcome::Exists => "exists",
                    StoreOutcome::NotFound => "not_found",
                },
                Err(StoreError::TooLarge) => "too_large",
                Err(_) => "no_memory",
            };
            let cmd = store_cmd(op.mode, op.compare.is_some());
            self.log_store(op.key.as_bytes(), status, cmd, w.expiry, op.data.len());
        }
        match &r {
            Ok(st) if op.compare.is_some() && op.mode == ops::Mode::Set => match st.outcome {
                StoreOutcome::Stored => inc(&s.cas_hits),
                StoreOutcome::Exists => inc(&s.cas_badval),
                StoreOutcome::NotFound => inc(&s.cas_misses),
                StoreOutcome::NotStored => {}
            },
            Ok(_) => {}
            Err(e) => self.count_error(e),
        }
        Flow::Ready(r)
    }

    /// A `watch mutations` line (memcached's `item_store`): `expiry` is
    /// server-relative (0: none), shown as seconds left.
    fn log_store(&self, key: &[u8], status: &str, cmd: &str, expiry: u32, size: usize) {
        let ttl = if expiry == 0 { 0 } else { expiry.saturating_sub(self.shared.store.clock().now()) };
        self.shared.watchers.log(
            watch::MUTATIONS,
            format_args!(
                "type=item_store key={} status={status} cmd={cmd} ttl={ttl} clsid={} cfd={} size={size}",
                uri(key),
                self.shared.store.class_of(key.len(), size),
                self.fd
            ),
        );
    }

    /// Counts a failed write under its cause: out of memory and too large
    /// as memcached does, lost races apart (they are not a memory problem,
    /// whatever the reply says).
    fn count_error(&self, e: &StoreError) {
        let s = self.stats;
        match e {
            StoreError::TooLarge => inc(&s.store_too_large),
            StoreError::OutOfMemory => inc(&s.store_no_memory),
            StoreError::Contended => inc(&s.store_contended),
            StoreError::NotLogged => {}
        }
    }

    /// Counts a read, delete or counter that lost its races (memcached
    /// counts nothing for their other failures).
    fn count_contention<T>(&self, r: &Result<T, StoreError>) {
        if let Err(StoreError::Contended) = r {
            inc(&self.stats.store_contended);
        }
    }

    /// A write refused for size before its data was read. memcached drops
    /// the old value (`drop_old`) when the write was a plain set, so a stale
    /// version cannot outlive the write meant to replace it; which writes
    /// count as one differs by protocol, so the executors decide.
    pub fn refuse_too_large(&mut self, key: &[u8], cmd: &str, drop_old: bool) {
        inc(&self.stats.store_too_large);
        if self.shared.watchers.wants(watch::MUTATIONS) {
            self.log_store(key, "too_large", cmd, 0, 0);
        }
        if drop_old {
            // The refused data is being discarded: this request cannot wait
            // for a read from flash and run again (`delete` reads now).
            self.store.delete(key);
        }
    }

    /// `flush_all [delay]`; false (nothing done) when `-F` disabled it,
    /// [`StoreError::NotLogged`] (nothing done) when the durability log
    /// failed.
    pub fn flush_all(&mut self, delay: i32) -> Result<bool, StoreError> {
        inc(&self.stats.cmd_flush);
        if !self.shared.cfg.flush_enabled {
            return Ok(false);
        }
        let at = (delay > 0).then(|| self.expiry(delay));
        // Through the worker, so that its reply waits for the log as a
        // change's does.
        self.store.flush_all(at)?;
        // memcached's `oldest_live`, by its formula: the second before the
        // cutoff, one more with CAS on.
        let cutoff = at.unwrap_or_else(|| self.shared.store.clock().now()).saturating_sub(1);
        let oldest = cutoff.saturating_sub(u32::from(self.shared.store.config().cas));
        self.shared.tuning.oldest_live.store(oldest, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    pub fn delete(&mut self, op: &ops::Delete<'_>) -> Flow<Result<DeleteOutcome, StoreError>> {
        let d = Delete {
            compare: op.compare,
            new_cas: op.new_cas,
            invalidate: op.invalidate,
            touch: op.touch.map(|t| self.expiry(t)),
            remove_value: op.remove_value,
            flags: op.flags,
        };
        let looked = self.lookup_for_watch(op.key.as_bytes());
        let r = match Flow::of(self.store.delete_with(op.key.as_bytes(), &d, self.reading)) {
            Flow::Wait(t) => return Flow::Wait(t),
            Flow::Ready(r) => r,
        };
        self.log_lookup(op.key.as_bytes(), looked);
        let s = self.stats;
        match &r {
            Ok(DeleteOutcome::Deleted) if !op.invalidate => inc(&s.delete_hits),
            Ok(DeleteOutcome::NotFound | DeleteOutcome::Exists) => inc(&s.delete_misses),
            _ => self.count_contention(&r),
        }
        Flow::Ready(r)
    }

    pub fn arith(&mut self, op: &ops::Arith<'_>) -> Flow<Result<Counted, StoreError>> {
        let a = Arith {
            incr: op.incr,
            delta: op.delta,
            compare: op.compare,
            new_cas: op.new_cas,
            touch: op.touch.map(|t| self.expiry(t)),
            vivify: op.vivify.map(|t| self.expiry(t)),
            initial: op.initial,
        };
        let looked = self.lookup_for_watch(op.key.as_bytes());
        let r = match Flow::of(self.store.arith_with(op.key.as_bytes(), &a, self.reading)) {
            Flow::Wait(t) => return Flow::Wait(t),
            Flow::Ready(r) => r,
        };
        self.log_lookup(op.key.as_bytes(), looked);
        let s = self.stats;
        let (hits, misses) = if op.incr { (&s.incr_hits, &s.incr_misses) } else { (&s.decr_hits, &s.decr_misses) };
        match &r {
            Ok(Counted { outcome: ArithOutcome::Value(_), .. }) => inc(hits),
            Ok(Counted { outcome: ArithOutcome::NotFound, .. }) => inc(misses),
            _ => self.count_contention(&r),
        }
        Flow::Ready(r)
    }

    /// `me`: what is known about a key, not counted as a read (memcached
    /// counts only `cmd_meta` for it, in the executor).
    pub fn inspect(&mut self, key: &[u8]) -> Flow<Option<Inspect>> {
        match Flow::of(self.store.inspect_with(key, self.reading)) {
            Flow::Wait(t) => Flow::Wait(t),
            Flow::Ready(r) => Flow::Ready(r.ok().flatten()),
        }
    }
}
